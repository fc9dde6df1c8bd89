"""Utilization over the poll window, as nvidia-smi means it: the mean of the driver's own samples.

``nvmlDeviceGetUtilizationRates`` answers the driver's latest sample (one every ~167-200 ms on an
H100), not a mean over the time since the last poll. ``nvmlDeviceGetSamples`` returns the samples
the driver still holds (72 on an H100) newer than a timestamp: their mean since the last poll is the
window's utilization, copy-engine work included (pinned host-to-device copies read 0.99 there while
the graphics engine reads 0.0001).

One call costs about 1.5 ms of CPU on an H100 (driver 580.159.04, docs/benchmarks.md), the same
whether it returns all 72 samples or none: passing the newest timestamp seen saves the filtering,
not the cost. So a poll does not ask when no new sample can exist yet: the samples are dated with
a "CPU timestamp in microseconds" (nvml.h), here the wall clock, and less than SKIP_SHARE of the
shortest gap between them has passed since the newest one seen. The answer it would have given is
NOT_FOUND (no sample is dated in the future), so the window's mean is the same. Polls at 100 ms
skip a fifth to a half of the calls, by their phase against the driver's samples; polls a sample
gap or more apart skip none. Where the timestamps are not the wall clock (a fresh answer's newest
sample dated in the future or more than WALL_CLOCK_SLACK_US ago), every poll asks.

A window with no new sample (the call skipped, or answering none) holds the newest sample's value:
it is the driver's latest figure of its own series, and no newer one exists yet. So at polls
shorter than the sample gap the window's utilization is the driver's series held sample by sample,
never a figure of another sampler (``nvmlDeviceGetUtilizationRates`` changes up to 100 ms before
a sample is dated, with other values: docs/gpu-facts.md).
"""

from __future__ import annotations

from typing import Any

SKIP_SHARE = 0.9  # of the shortest sample gap seen: room for the driver's jitter below it
WALL_CLOCK_SLACK_US = 5_000_000  # a fresh answer's newest sample is at most this old on the wall clock


class UtilizationWindow:
    """One GPU's position in the driver's sample buffer, the driver's sample gap, and the mean of
    the samples since the last poll."""

    def __init__(self) -> None:
        self.seen_us: int | None = None  # the newest sample's timestamp taken so far; None until primed
        self.gap_us: int | None = None  # the shortest gap between two consecutive samples seen so far
        self.on_wall_clock = False  # the last fresh answer's newest sample was dated within the slack of now
        self.newest: float | None = None  # the newest sample's value (0..1): what a window without a new sample holds

    def may_have_new(self, now_us: int) -> bool:
        """False only when no sample newer than the last seen can exist at ``now_us`` (wall clock)."""
        if self.seen_us is None or self.gap_us is None or not self.on_wall_clock:
            return True
        return not 0 <= now_us - self.seen_us < SKIP_SHARE * self.gap_us

    def mean_since_last(self, answer: tuple[int, list[Any]] | None, now_us: int) -> float | None:
        """The mean (0..1) of the samples in ``answer`` newer than the last call's; the newest sample's
        value where none is new; None on the first call (the buffer reaches back before the window)."""
        samples = answer[1] if answer is not None else []
        primed, seen = self.seen_us is not None, self.seen_us or 0
        fresh = sorted((sample for sample in samples if sample.timeStamp > seen), key=lambda sample: int(sample.timeStamp))
        if fresh:
            stamps = [int(sample.timeStamp) for sample in fresh]
            chain = [seen, *stamps] if seen else stamps
            gaps = [later - earlier for earlier, later in zip(chain, chain[1:], strict=False) if later > earlier]
            if gaps:
                self.gap_us = min(gaps) if self.gap_us is None else min(self.gap_us, *gaps)
            self.seen_us = stamps[-1]
            self.newest = min(1.0, float(fresh[-1].sampleValue.uiVal) / 100)
            self.on_wall_clock = 0 <= now_us - stamps[-1] <= WALL_CLOCK_SLACK_US
        elif self.seen_us is None:
            self.seen_us = 0
        if not primed:
            return None
        if not fresh:
            return self.newest
        return min(1.0, sum(float(sample.sampleValue.uiVal) for sample in fresh) / len(fresh) / 100)
