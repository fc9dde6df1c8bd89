"""The live page's memory: the last minutes of each GPU's utilization and SM activity.

Fed by the poller with each snapshot it publishes (never by a request, never from NVML). Bounded:
``capacity`` points, each the mean of the polls within ``resolution`` seconds (one poll per point
at the default 1 s interval), in fixed arrays of 2-byte thousandths per GPU (a chart needs no more);
a GPU that leaves the snapshot leaves the history. Points are numbered, so a page asks only for those
it has not seen.
"""

from __future__ import annotations

import math
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from gpueff.snapshot import Snapshot

DEFAULT_CAPACITY = 600  # ten minutes at one point a second
DEFAULT_RESOLUTION = 1.0  # seconds: faster polls are averaged into one point
_EARLY = 0.9  # a point closes at 90 % of the resolution, so poll jitter does not merge two 1 s polls
SCALE = 1000  # values are held as thousandths
MISSING = 0xFFFF  # no value: the GPU was down or the reading absent
NAN = float("nan")


@dataclass(frozen=True, slots=True)
class Series:
    utilization: list[int | None]  # thousandths
    sm_active: list[int | None]


@dataclass(frozen=True, slots=True)
class HistoryView:
    capacity: int  # the most points held
    first: int  # the number of the first point returned
    last: int  # the number of the newest point (0: none yet)
    times: list[float]  # Unix seconds
    gpus: dict[str, Series]  # by uuid, aligned with times; None where the GPU was down or not read


class _Ring:
    """``capacity`` thousandths; MISSING means no value."""

    __slots__ = ("values",)

    def __init__(self, capacity: int) -> None:
        self.values = array("H", [MISSING]) * capacity


class History:
    def __init__(self, capacity: int = DEFAULT_CAPACITY, resolution: float = DEFAULT_RESOLUTION, wall_clock: Callable[[], float] = time.time) -> None:
        if capacity < 1:
            raise ValueError("history capacity must be at least 1")
        self.capacity = capacity
        self.resolution = resolution
        self.wall_clock = wall_clock
        self._lock = threading.Lock()
        self._times = array("d", [NAN]) * capacity
        self._utilization: dict[str, _Ring] = {}
        self._sm_active: dict[str, _Ring] = {}
        self._count = 0  # points written so far; point n (1-based) lives at (n - 1) % capacity
        self._last_point_wall: float | None = None
        self._pending: dict[str, list[float]] = {}  # uuid -> [utilization sum, its polls, SM sum, its polls]

    def add(self, snapshot: Snapshot) -> None:
        """Take one published snapshot: add its readings to the open point, and close the point once
        ``resolution`` has passed since the last one."""
        now = self.wall_clock()
        with self._lock:
            present = set()
            for state in snapshot.gpus:
                uuid = state.sample.device.uuid
                present.add(uuid)
                sums = self._pending.setdefault(uuid, [0.0, 0, 0.0, 0])
                if state.derived is None:
                    continue
                for slot, value in ((0, state.derived.busy), (2, state.sample.profiling.sm_active)):
                    if value is not None and math.isfinite(value):
                        sums[slot] += value
                        sums[slot + 1] += 1
            for gone in set(self._pending) - present:
                del self._pending[gone]
            if self._last_point_wall is None or now - self._last_point_wall >= _EARLY * self.resolution:
                self._close_point(now)

    def _close_point(self, now: float) -> None:
        slot = self._count % self.capacity
        self._count += 1
        self._times[slot] = now
        for gone in set(self._utilization) - set(self._pending):
            del self._utilization[gone], self._sm_active[gone]
        for uuid, (util_sum, util_polls, sm_sum, sm_polls) in self._pending.items():
            if uuid not in self._utilization:
                self._utilization[uuid], self._sm_active[uuid] = _Ring(self.capacity), _Ring(self.capacity)
            self._utilization[uuid].values[slot] = _thousandths(util_sum, util_polls)
            self._sm_active[uuid].values[slot] = _thousandths(sm_sum, sm_polls)
        self._pending = {uuid: [0.0, 0, 0.0, 0] for uuid in self._pending}
        self._last_point_wall = now

    def span(self) -> tuple[int, int]:
        """The numbers of the oldest point held and the newest (0, 0 before any)."""
        with self._lock:
            return max(self._count - self.capacity + 1, 1) if self._count else 0, self._count

    def since(self, after: int = 0) -> HistoryView:
        """The points numbered above ``after`` that are still held (all of them for 0)."""
        with self._lock:
            first = max(after + 1, self._count - self.capacity + 1, 1)
            slots = [(number - 1) % self.capacity for number in range(first, self._count + 1)]
            times = [self._times[slot] for slot in slots]
            gpus = {uuid: Series(_values(self._utilization[uuid], slots), _values(self._sm_active[uuid], slots)) for uuid in self._utilization}
            return HistoryView(capacity=self.capacity, first=first, last=self._count, times=times, gpus=gpus)


def _thousandths(total: float, count: float) -> int:
    return min(SCALE, max(0, round(total / count * SCALE))) if count else MISSING


def _values(ring: _Ring, slots: list[int]) -> list[int | None]:
    values = ring.values
    return [None if (value := values[slot]) == MISSING else value for slot in slots]
