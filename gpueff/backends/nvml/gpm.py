"""GPM (Hopper and newer): a GPU's (or MIG device's) GPM sample buffers, and the profiling metrics
of the window between two samples, each checked by its own return code (docs/gpu-facts.md).

``GRAPHICS_UTIL`` alone costs about 1.5 ms of CPU per ``nvmlGpmMetricsGet`` on an H100; every other
metric 11-16 µs (docs/gpu-facts.md). Where the window's utilization comes from the driver's samples
(a full GPU whose ``nvmlDeviceGetSamples`` answers), the poll's request leaves it out and the
graphics engine is read at the slow cadence instead, over the slow window: from the sample that
started it to the poll's. Elsewhere (MIG devices, a GPU whose samples call is unsupported) it is the
window's busy figure and stays in every poll's request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from gpueff.gpm_metrics import GPM_METRICS, GpmMetric, to_sample_unit
from gpueff.logs import gpu_fields
from gpueff.sample import DeviceInfo, Profiling
from gpueff.untrusted import read_lines

GPM_MIN_SAMPLE_GAP = 0.1  # two nvmlGpmSampleGet calls must be more than 100 ms apart
ENGINE_KEY = "graphics_active"  # GRAPHICS_UTIL's Profiling field
PROFILING_FIX = (
    "profiling is restricted to admin users (driver option RmProfilingAdminOnly=1): either give the exporter "
    "CAP_SYS_ADMIN, or load the driver with NVreg_RestrictProfilingToAdminUsers=0 "
    "(options nvidia NVreg_RestrictProfilingToAdminUsers=0 in /etc/modprobe.d/, then reload the driver)"
)
LogOnce = Callable[..., None]  # Backend.log_once(key, level, message, *args)


def profiling_admin_only(params: Path = Path("/proc/driver/nvidia/params")) -> bool | None:
    """The driver's RmProfilingAdminOnly setting, or None where it cannot be read."""
    try:
        for line in read_lines(params) or ():
            if line.startswith("RmProfilingAdminOnly:"):
                return line.split(":", 1)[1].strip() == "1"
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class GpmRequest:
    """A reused c_nvmlGpmMetricsGet_t and the metrics it names, slot by slot."""

    struct: Any
    metrics: tuple[GpmMetric, ...]


# The three requests a pair may make, by name: every metric (MIG devices, and GPUs without the
# driver's samples), all but GRAPHICS_UTIL (the poll's elsewhere), GRAPHICS_UTIL alone (the slow window's).
REQUESTS: dict[str, tuple[GpmMetric, ...]] = {
    "every": GPM_METRICS,
    "without_engine": tuple(metric for metric in GPM_METRICS if metric.key != ENGINE_KEY),
    "engine": tuple(metric for metric in GPM_METRICS if metric.key == ENGINE_KEY),
}


def _request(nvml: ModuleType, metrics: tuple[GpmMetric, ...]) -> GpmRequest:
    struct = nvml.c_nvmlGpmMetricsGet_t()
    struct.version = nvml.NVML_GPM_METRICS_GET_VERSION
    struct.numMetrics = len(metrics)
    for slot, metric in enumerate(metrics):
        struct.metrics[slot].metricId = metric.metric_id
    return GpmRequest(struct, metrics)


@dataclass
class GpmPair:
    """One GPU's GPM sample buffers: the newest sample (the next window's start) and, where the
    graphics engine is read at the slow cadence, the slow window's start. Each sample is taken into
    a buffer that neither holds, so no window loses a sample it still needs."""

    buffers: list[Any]  # every buffer allocated: 2, or 3 for a full GPU (the slow window's start)
    # The REQUESTS made so far, each on its first use: a c_nvmlGpmMetricsGet_t holds 19 KB and a
    # device uses one or two of the three (a full GPU with the driver's samples never reads every metric).
    requests: dict[str, GpmRequest] = field(default_factory=dict)
    previous: Any | None = None  # the buffer holding the newest sample
    previous_time: float | None = None
    slow_start: Any | None = None  # the buffer holding the slow window's first sample
    slow_start_time: float | None = None
    slow_read: bool = False  # the engine was read over a slow window since slow_start was first set
    slow_graphics_active: float | None = None  # the engine's activity over the last slow window, held until the next
    refused: bool = False  # the driver refused sampling (no permission, not supported): read no more
    last_window: Profiling | None = None  # the newest window's readings: they stand while the next window cannot close yet
    deferred: bool = False  # the last sample was dropped: the driver found it under 100 ms after the window's start

    def request(self, nvml: ModuleType, name: str) -> GpmRequest:
        """The request of REQUESTS named ``name``, made where this is its first use."""
        made = self.requests.get(name)
        if made is None:
            made = self.requests[name] = _request(nvml, REQUESTS[name])
        return made

    def free_buffer(self) -> Any:
        return next(buffer for buffer in self.buffers if buffer is not self.previous and buffer is not self.slow_start)

    def drop_slow_window(self) -> None:
        self.slow_start, self.slow_start_time, self.slow_read, self.slow_graphics_active = None, None, False, None


def open_pair(nvml: ModuleType, info: DeviceInfo, support_handle: Any, log_once: LogOnce) -> GpmPair | None:
    """GPM sample buffers where the GPU (a MIG device: its parent, ``support_handle``) has GPM; else None, said once."""
    try:
        supported = bool(nvml.nvmlGpmQueryDeviceSupport(support_handle).isSupportedDevice)
    except (nvml.NVMLError, AttributeError):
        supported = False
    if not supported:
        log_once(f"nogpm-{info.uuid}", logging.WARNING, "GPU %d (%s) has no GPM (it is older than Hopper or the driver is too old): SM activity and the other profiling metrics need DCGM there; gpueff_profiling_available is 0", info.index, info.name, extra=gpu_fields(info.index, info.uuid))
        return None
    buffers = [nvml.nvmlGpmSampleAlloc() for _ in range(2 if info.parent_uuid else 3)]  # a MIG device reads the engine every poll
    return GpmPair(buffers)


def free_pair(nvml: ModuleType, pair: GpmPair) -> None:
    for sample in pair.buffers:
        try:
            nvml.nvmlGpmSampleFree(sample)
        except nvml.NVMLError:
            pass
    pair.buffers, pair.previous = [], None
    pair.drop_slow_window()


def read_pair(nvml: ModuleType, pair: GpmPair, info: DeviceInfo, handle: Any, parent_handle: Any | None, now: float, log_once: LogOnce, slow_engine: float | None = None, slow_phase: float = 0.0) -> tuple[Profiling, float] | None:
    """Take a sample at ``now`` and return the window's readings and its length; None while the pair
    is only primed, the last sample is too recent, or the driver refused (``pair.refused`` then).

    ``slow_engine``: None reads GRAPHICS_UTIL over every window; else it is left out of the window
    and read over the slow window once this many seconds have passed since its start (and on the
    first window), into ``pair.slow_graphics_active``; after the first window the next read comes
    ``slow_phase`` of that interval early, so the node's GPUs read it on different polls."""
    previous_time = pair.previous_time
    if too_soon(pair, now):
        return None
    slow = slow_engine if len(pair.buffers) >= 3 else None
    if slow is None:
        pair.drop_slow_window()
    current = pair.free_buffer()
    try:
        if parent_handle is None:
            nvml.nvmlGpmSampleGet(handle, current)
        else:
            nvml.nvmlGpmMigSampleGet(parent_handle, info.gpu_instance_id, current)
    except nvml.NVMLError as error:
        code = getattr(error, "value", None)
        if code == nvml.NVML_ERROR_NO_PERMISSION:
            pair.refused = True
            admin_only = {True: 1, False: 0, None: "unknown"}[profiling_admin_only()]
            log_once(f"gpmperm-{info.uuid}", logging.WARNING, "GPU %d: GPM sampling was refused (%s; RmProfilingAdminOnly=%s): %s. gpueff_profiling_available is 0 until the exporter restarts with that fixed", info.index, error, admin_only, PROFILING_FIX, extra=gpu_fields(info.index, info.uuid))
            return None
        if code == nvml.NVML_ERROR_NOT_SUPPORTED:
            pair.refused = True
            log_once(f"gpmns-{info.uuid}", logging.WARNING, "GPU %d: GPM sampling is not supported here (%s); gpueff_profiling_available is 0", info.index, error, extra=gpu_fields(info.index, info.uuid))
            return None
        raise
    previous, pair.deferred = pair.previous, False
    readings = None
    if previous is not None and previous_time is not None:
        try:
            readings = _metrics(nvml, pair.request(nvml, "every" if slow is None else "without_engine"), previous, current, info, log_once)
        except nvml.NVMLError as error:
            if getattr(error, "value", None) != nvml.NVML_ERROR_INVALID_ARGUMENT:
                raise
            # The driver's own times put the two samples under 100 ms apart although ``now`` says
            # more: this thread was held up (a busy host) between a poll's clock and its sample. The
            # older sample stays the window's start; the next poll closes a longer window.
            pair.deferred = True
            return None
    pair.previous, pair.previous_time = current, now
    if slow is not None:
        _advance_slow_window(nvml, pair, current, now, slow, info, log_once, slow_phase)
    if readings is None or previous_time is None:
        return None  # the first sample only primes the pair
    pair.last_window = Profiling(**readings)
    return pair.last_window, now - previous_time


def too_soon(pair: GpmPair, now: float) -> bool:
    """The newest sample is not yet more than GPM_MIN_SAMPLE_GAP old, so no window can close at ``now``."""
    return pair.previous_time is not None and now - pair.previous_time <= GPM_MIN_SAMPLE_GAP


def _advance_slow_window(nvml: ModuleType, pair: GpmPair, current: Any, now: float, interval: float, info: DeviceInfo, log_once: LogOnce, phase: float = 0.0) -> None:
    """With the sample just taken into ``current``: open the slow window, or where it is due (the
    first window, then every ``interval``, the one after the first ``phase`` of it early), read
    the engine over it and start the next one there."""
    if pair.slow_start is None or pair.slow_start_time is None:
        pair.slow_start, pair.slow_start_time = current, now
    elif not pair.slow_read or now - pair.slow_start_time >= interval:
        pair.slow_graphics_active = _metrics(nvml, pair.request(nvml, "engine"), pair.slow_start, current, info, log_once).get(ENGINE_KEY)
        early = phase * interval if not pair.slow_read else 0.0
        pair.slow_start, pair.slow_start_time, pair.slow_read = current, now - early, True


def _metrics(nvml: ModuleType, request: GpmRequest, first: Any, second: Any, info: DeviceInfo, log_once: LogOnce) -> dict[str, float]:
    """The request's metrics between two samples, by Profiling field; a metric the driver could not give is left out, said once."""
    struct = request.struct
    struct.sample1, struct.sample2 = first, second
    nvml.nvmlGpmMetricsGet(struct)
    readings = {}
    for slot, metric in enumerate(request.metrics):
        result = struct.metrics[slot]
        if result.nvmlReturn == nvml.NVML_SUCCESS:
            readings[metric.key] = to_sample_unit(metric, result.value)
        else:
            log_once(f"gpmmetric-{info.uuid}-{metric.name}", logging.INFO, "GPU %d: GPM metric %s is not available (NVML return code %d); it is not exported", info.index, metric.name, result.nvmlReturn)
    return readings
