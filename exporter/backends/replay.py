"""Replays gpu-trace/1 files in real time, looping: one file is one virtual GPU."""

from __future__ import annotations

import bisect
import dataclasses
import time
from collections import Counter
from collections.abc import Callable

from exporter.backends.base import Backend
from exporter.sample import DeviceInfo, GpuSample
from exporter.trace import Trace, sample_from_record


def unique_uuids(devices: list[DeviceInfo]) -> list[DeviceInfo]:
    """Recordings of one physical GPU share its UUID: suffix the index where it repeats, so that the
    virtual GPUs keep their own totals and series."""
    counts = Counter(device.uuid for device in devices)
    return [device if counts[device.uuid] == 1 else dataclasses.replace(device, uuid=f"{device.uuid}-replay-{device.index}") for device in devices]


class ReplayBackend(Backend):
    name = "replay"
    replayed = True

    def __init__(self, traces: list[Trace], clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.traces = traces
        self.clock = clock
        self.devices = unique_uuids([trace.device(index) for index, trace in enumerate(traces)])
        self._times = [[record["t"] for record in trace.samples] for trace in traces]
        self._started = 0.0
        self._last_collect: float | None = None
        # Replayed traces hold power but no energy counter: energy is recorded power integrated over replay time.
        self._energy = [0.0] * len(traces)

    def start(self) -> list[DeviceInfo]:
        self._started = self.clock()
        return list(self.devices)

    def record_at(self, index: int, elapsed: float) -> dict:
        """The trace sample whose window holds ``elapsed`` seconds after the start, looping."""
        trace, times = self.traces[index], self._times[index]
        position = elapsed % trace.duration
        return trace.samples[min(bisect.bisect_left(times, position), len(times) - 1)]

    def collect(self) -> list[GpuSample]:
        now = self.clock()
        elapsed = now - self._started
        since_last = None if self._last_collect is None else now - self._last_collect
        self._last_collect = now
        samples = []
        for index, (device, trace) in enumerate(zip(self.devices, self.traces)):
            sample = sample_from_record(device, self.record_at(index, elapsed), now, trace.interval_s)
            if since_last is not None and sample.power_watts is not None:
                self._energy[index] += sample.power_watts * since_last
            sample.energy_joules = self._energy[index]
            samples.append(sample)
        return samples
