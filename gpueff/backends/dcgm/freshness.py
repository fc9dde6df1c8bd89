"""Whether a DCGM value is new, stale or a repeat, and how often DCGM updates a field.

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
        self._interval: dict[int, int] = {}  # field -> its update interval (us), as DCGM's timestamps show it

    def clear(self) -> None:
        self._seen.clear()
        self._interval.clear()

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

    def last_ts(self, field_id: int) -> int | None:
        seen = self._seen.get(field_id)
        return seen.ts if seen is not None else None

    def learn_interval(self, field_id: int, seen_in_batch: int | None, watch_interval_us: int) -> int:
        """The field's update interval: the one its latest samples show, at most the exporter's watch
        interval (DCGM updates a field at its fastest watcher's, and the exporter is one of them, so a
        longer gap is a missed update)."""
        if seen_in_batch is not None:
            self._interval[field_id] = min(seen_in_batch, watch_interval_us)
        return self._interval.get(field_id, watch_interval_us)
