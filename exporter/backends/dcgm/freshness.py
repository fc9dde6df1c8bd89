"""Whether a DCGM value is new, stale or a repeat, and the time a profiling ratio covers.

Only DCGM's own timestamps are compared with each other, never with this machine's clock, so a remote
host engine with a skewed clock does not matter; how long a timestamp has not moved is measured with
the exporter's monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Seen:
    ts: int  # DCGM's timestamp (microseconds)
    first_seen: float  # the exporter's monotonic clock when that timestamp first came
    previous_ts: int | None  # the timestamp before it, if one was seen


class FieldClocks:
    """The timestamps of one GPU's fields."""

    def __init__(self) -> None:
        self._seen: dict[int, _Seen] = {}

    def clear(self) -> None:
        self._seen.clear()

    def observe(self, field_id: int, ts: int, now: float) -> bool:
        """Record a reading's timestamp; True where it is new (a DCGM update not seen before)."""
        seen = self._seen.get(field_id)
        if seen is not None and seen.ts == ts:
            return False
        self._seen[field_id] = _Seen(ts, now, seen.ts if seen is not None else None)
        return True

    def known(self, field_id: int) -> bool:
        return field_id in self._seen

    def stale(self, field_id: int, now: float, limit: float) -> bool:
        """Whether the field's timestamp has not moved for more than ``limit`` seconds."""
        seen = self._seen.get(field_id)
        return seen is not None and now - seen.first_seen > limit

    def window(self, field_id: int, watch_interval: float) -> float:
        """The time the field's latest value covers: the gap between DCGM's last two updates we saw.

        DCGM updates a field at the fastest interval any of its clients watches it (a shared host
        engine may update faster than our watch asks). A gap longer than our watch interval means
        updates came in between that we did not see, and the value covers only the last of them: then,
        as before two updates were seen, the watch interval is the best bound.
        """
        seen = self._seen.get(field_id)
        if seen is None or seen.previous_ts is None or seen.ts <= seen.previous_ts:
            return watch_interval
        return min((seen.ts - seen.previous_ts) / 1_000_000, watch_interval)
