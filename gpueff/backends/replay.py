"""Replays gpu-trace/1 files in real time, looping: one file is one virtual GPU."""

from __future__ import annotations

import bisect
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from gpueff.backends.base import Backend
from gpueff.sample import DeviceInfo, GpuProcess, GpuSample
from gpueff.trace import GPM_KEYS, HEALTH_COUNTERS, WINDOW_KEYS, Trace, sample_from_record
from gpueff.trace_owners import DeclaredOwner

# A declared owner's process gets a PID no real process can have: above the kernel's PID_MAX_LIMIT
# (2^22), so nothing that reads /proc for it (jobs, Kubernetes process attribution) finds anyone's.
DECLARED_PID_BASE = (1 << 22) + 1


def unique_identities(devices: list[DeviceInfo]) -> list[DeviceInfo]:
    """Recordings of one physical GPU share its UUID and PCI bus id: suffix the index where one
    repeats, so that the virtual GPUs keep their own totals and series and tell apart by bus id.
    The result depends only on the traces and their order: stable from one start to the next."""
    uuids = Counter(device.uuid for device in devices)
    buses = Counter(device.pci_bus_id for device in devices)
    out = []
    for device in devices:
        if uuids[device.uuid] > 1:
            device = dataclasses.replace(device, uuid=f"{device.uuid}-replay-{device.index}")
        if buses[device.pci_bus_id] > 1:
            device = dataclasses.replace(device, pci_bus_id=f"{device.pci_bus_id}-replay-{device.index}")
        out.append(device)
    return out


def counter_gains(trace: Trace) -> dict[str, float]:
    """How much each health counter rises over one replayed loop: from the first steady sample to
    the last (the loop's first window's own rise is not known: the loop starts at its end)."""
    first, last = trace.steady_samples[0].get("health") or {}, trace.samples[-1].get("health") or {}
    return {key: last[key] - first[key] for key in HEALTH_COUNTERS if key in first and key in last}


class ReplayBackend(Backend):
    """Each collect covers the time since the previous one, as a live poll's GPM window does: the
    profiling readings are the time-weighted mean of the recorded windows it overlaps, and the
    instant readings (utilization, clocks, power, ...) are the recorded ones at its end. So a trace
    recorded every 500 ms replays faithfully at a 1 s poll. Warm-up samples are never replayed, so
    a loop has no seam."""

    name = "replay"
    replayed = True

    def __init__(self, traces: list[Trace], clock: Callable[[], float] = time.monotonic, owners: list[DeclaredOwner | None] | None = None) -> None:
        super().__init__()
        if owners is not None and len(owners) != len(traces):
            raise ValueError(f"{len(owners)} declared owners for {len(traces)} traces")
        self.traces = traces
        self.clock = clock
        self.devices = unique_identities([trace.device(index) for index, trace in enumerate(traces)])
        # With owners (--demo): each owned GPU lists one compute process, and an unowned one none (free).
        self.owners = owners
        self._declared = {device.uuid: owner for device, owner in zip(self.devices, owners or (), strict=False) if owner is not None}
        # Each steady sample covers (previous sample's t, its own t] of loop time, from 0 to loop_seconds.
        self._ends = [[record["t"] - trace.loop_start for record in trace.steady_samples] for trace in traces]
        self._started = 0.0
        self._last_collect: float | None = None
        # Replayed traces hold power but no energy counter: energy is recorded power integrated over replay time.
        self._energy = [0.0] * len(traces)
        # Recorded health counters (since driver load) go on rising from loop to loop, never reset.
        self._gains = [counter_gains(trace) for trace in traces]

    def start(self) -> list[DeviceInfo]:
        self._started = self.clock()
        return list(self.devices)

    def position(self, index: int, elapsed: float) -> tuple[int, float]:
        """(whole loops played, seconds into the current loop) ``elapsed`` seconds after the start."""
        loop = self.traces[index].loop_seconds
        position = elapsed % loop or (loop if elapsed > 0 else 0.0)  # windows are (start, end]
        return max(0, round((elapsed - position) / loop)), position

    def record_at(self, index: int, elapsed: float) -> dict[str, Any]:
        """The steady trace sample whose window holds ``elapsed`` seconds after the start, looping;
        its health counters raised by what the loops before it counted."""
        ends = self._ends[index]
        loops, position = self.position(index, elapsed)
        record: dict[str, Any] = self.traces[index].steady_samples[min(bisect.bisect_left(ends, position), len(ends) - 1)]
        health, gains = record.get("health"), self._gains[index]
        if loops and health and gains:
            record = {**record, "health": {key: value + loops * gains[key] if key in gains else value for key, value in health.items()}}
        return record

    def overlaps(self, index: int, start: float, end: float) -> list[tuple[float, dict[str, Any]]]:
        """(seconds, sample) for each recorded window that overlaps (start, end] of replay time: the
        first found by bisection, so a poll costs the windows it covers, not the whole trace."""
        trace, ends = self.traces[index], self._ends[index]
        samples = trace.steady_samples
        loop = trace.loop_seconds
        start = max(start, end - loop)  # a longer gap covers every sample once
        found = []
        base = math.floor(start / loop) * loop
        while base < end:
            # From the window before the first whose end lies past start (float rounding); those with no overlap add nothing.
            for number in range(max(0, bisect.bisect_right(ends, start - base) - 1), len(ends)):
                lower = base + (ends[number - 1] if number else 0.0)
                if lower >= end:
                    break
                seconds = min(end, base + ends[number]) - max(start, lower)
                if seconds > 0:
                    found.append((seconds, samples[number]))
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
            if self.owners is not None:
                owner = self.owners[index]
                # its one process holds what the recording's device memory reading says is used
                sample.processes = (GpuProcess(DECLARED_PID_BASE + index, owner.process, sample.memory_used_bytes),) if owner is not None else ()
            samples.append(sample)
        return samples

    def declared_owners(self) -> dict[str, DeclaredOwner]:
        return self._declared
