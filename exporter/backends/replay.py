"""Replays gpu-trace/1 files in real time, looping: one file is one virtual GPU."""

from __future__ import annotations

import bisect
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from exporter.backends.base import Backend
from exporter.sample import DeviceInfo, GpuSample
from exporter.trace import GPM_KEYS, WINDOW_KEYS, Trace, sample_from_record


def unique_uuids(devices: list[DeviceInfo]) -> list[DeviceInfo]:
    """Recordings of one physical GPU share its UUID: suffix the index where it repeats, so that the
    virtual GPUs keep their own totals and series."""
    counts = Counter(device.uuid for device in devices)
    return [device if counts[device.uuid] == 1 else dataclasses.replace(device, uuid=f"{device.uuid}-replay-{device.index}") for device in devices]


class ReplayBackend(Backend):
    """Each collect covers the time since the previous one, as a live poll's GPM window does: the
    profiling readings are the time-weighted mean of the recorded windows it overlaps, and the
    instant readings (utilization, clocks, power, ...) are the recorded ones at its end. So a trace
    recorded every 500 ms replays faithfully at a 1 s poll. Warm-up samples are never replayed, so
    a loop has no seam."""

    name = "replay"
    replayed = True

    def __init__(self, traces: list[Trace], clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.traces = traces
        self.clock = clock
        self.devices = unique_uuids([trace.device(index) for index, trace in enumerate(traces)])
        # Each steady sample covers (previous sample's t, its own t] of loop time, from 0 to loop_seconds.
        self._ends = [[record["t"] - trace.loop_start for record in trace.steady_samples] for trace in traces]
        self._started = 0.0
        self._last_collect: float | None = None
        # Replayed traces hold power but no energy counter: energy is recorded power integrated over replay time.
        self._energy = [0.0] * len(traces)

    def start(self) -> list[DeviceInfo]:
        self._started = self.clock()
        return list(self.devices)

    def record_at(self, index: int, elapsed: float) -> dict[str, Any]:
        """The steady trace sample whose window holds ``elapsed`` seconds after the start, looping."""
        trace, ends = self.traces[index], self._ends[index]
        position = elapsed % trace.loop_seconds or (trace.loop_seconds if elapsed > 0 else 0.0)  # windows are (start, end]
        record: dict[str, Any] = trace.steady_samples[min(bisect.bisect_left(ends, position), len(ends) - 1)]
        return record

    def overlaps(self, index: int, start: float, end: float) -> list[tuple[float, dict[str, Any]]]:
        """(seconds, sample) for each recorded window that overlaps (start, end] of replay time."""
        trace, ends = self.traces[index], self._ends[index]
        loop = trace.loop_seconds
        start = max(start, end - loop)  # a longer gap covers every sample once
        found = []
        base = math.floor(start / loop) * loop
        while base < end:
            lower = base
            for record, upper in zip(trace.steady_samples, ends):
                seconds = min(end, base + upper) - max(start, lower)
                if seconds > 0:
                    found.append((seconds, record))
                lower = base + upper
            base += loop
        return found

    def window_record(self, index: int, start: float, end: float) -> dict[str, Any]:
        """The instant readings at ``end`` with each window reading (GPM's, the driver's utilization
        samples) averaged over (start, end]."""
        merged = dict(self.record_at(index, end))
        overlapping = self.overlaps(index, start, end)
        for name in (*GPM_KEYS, *WINDOW_KEYS):
            weighted = [(seconds, record[name]) for seconds, record in overlapping if record.get(name) is not None]
            total = sum(seconds for seconds, _ in weighted)
            if total > 0:
                merged[name] = sum(seconds * value for seconds, value in weighted) / total
        return merged

    def collect(self) -> list[GpuSample]:
        now = self.clock()
        elapsed = now - self._started
        since_last = None if self._last_collect is None else now - self._last_collect
        self._last_collect = now
        samples = []
        for index, (device, trace) in enumerate(zip(self.devices, self.traces)):
            if since_last is not None and since_last > 0:
                sample = sample_from_record(device, self.window_record(index, elapsed - since_last, elapsed), now, since_last)
            else:  # the first collect: the recorded window it falls in
                sample = sample_from_record(device, self.record_at(index, elapsed), now, trace.interval_s)
            if since_last is not None and sample.power_watts is not None:
                self._energy[index] += sample.power_watts * since_last
            sample.energy_joules = self._energy[index]
            samples.append(sample)
        return samples
