"""The mean of a profiling field over one poll window, from every sample DCGM cached in it.

DCGM updates a field at the fastest interval any client of its host engine watches it at
(DcgmCacheManager.cpp UpdateWatchFromWatchers). On a shared host engine a field the exporter watches
every second may be sampled every 100 ms for another client, and its latest value then covers only
the last 100 ms. So the exporter reads every sample cached since its previous read
(dcgmGetValuesSince_v2) and weights each by the time it covers: from the sample before it (the last
one of the previous read, for the first) to its own timestamp, at most the field's own update
interval, so a sample after a gap (updates DCGM no longer keeps) counts for its own interval only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    ts: int  # DCGM's timestamp, microseconds
    value: float | None  # None: blank (paused profiling, a lost GPU) or not a reading


@dataclass(frozen=True)
class WindowMean:
    value: float
    seconds: float  # the time the samples with a value cover
    samples: int


def update_interval_us(timestamps: list[int], previous_ts: int | None) -> int | None:
    """The field's own update interval seen in these timestamps (the median gap); None with no gap."""
    points = ([previous_ts] if previous_ts is not None else []) + timestamps
    gaps = sorted(later - earlier for earlier, later in zip(points, points[1:]) if later > earlier)
    return gaps[(len(gaps) - 1) // 2] if gaps else None


def window_mean(samples: list[Sample], previous_ts: int | None, interval_us: int) -> WindowMean | None:
    """The time-weighted mean of ``samples`` (ascending, after ``previous_ts``); None where none has a value."""
    total = weight = 0.0
    count = 0
    before = previous_ts
    for sample in samples:
        span = interval_us if before is None else min(sample.ts - before, interval_us)
        before = sample.ts
        if sample.value is None or span <= 0:
            continue
        total += sample.value * span
        weight += span
        count += 1
    if count == 0:
        return None
    return WindowMean(total / weight, weight / 1_000_000, count)
