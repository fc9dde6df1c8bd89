"""GPM (Hopper and newer): one pair of samples per GPU or MIG device, swapped every read, and the
profiling metrics of the window between them, each checked by its own return code (docs/gpu-facts.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from exporter.backends.nvml.gpm_metrics import GPM_METRICS, to_sample_unit
from exporter.sample import DeviceInfo, Profiling
from exporter.untrusted import read_text

GPM_MIN_SAMPLE_GAP = 0.1  # two nvmlGpmSampleGet calls must be more than 100 ms apart
PROFILING_FIX = (
    "profiling is restricted to admin users (driver option RmProfilingAdminOnly=1): either give the exporter "
    "CAP_SYS_ADMIN, or load the driver with NVreg_RestrictProfilingToAdminUsers=0 "
    "(options nvidia NVreg_RestrictProfilingToAdminUsers=0 in /etc/modprobe.d/, then reload the driver)"
)
LogOnce = Callable[..., None]  # Backend.log_once(key, level, message, *args)


def profiling_admin_only(params: Path = Path("/proc/driver/nvidia/params")) -> bool | None:
    """The driver's RmProfilingAdminOnly setting, or None where it cannot be read."""
    try:
        for line in read_text(params).splitlines():
            if line.startswith("RmProfilingAdminOnly:"):
                return line.split(":", 1)[1].strip() == "1"
    except OSError:
        return None
    return None


@dataclass
class GpmPair:
    samples: list[Any]  # [previous, current]
    request: Any  # a reused c_nvmlGpmMetricsGet_t naming every metric of GPM_METRICS
    previous_time: float | None = None
    refused: bool = False  # the driver refused sampling (no permission, not supported): read no more


def open_pair(nvml: ModuleType, info: DeviceInfo, support_handle: Any, log_once: LogOnce) -> GpmPair | None:
    """A sample pair where the GPU (a MIG device: its parent, ``support_handle``) has GPM; else None, said once."""
    try:
        supported = bool(nvml.nvmlGpmQueryDeviceSupport(support_handle).isSupportedDevice)
    except (nvml.NVMLError, AttributeError):
        supported = False
    if not supported:
        log_once(f"nogpm-{info.uuid}", logging.WARNING, "GPU %d (%s) has no GPM (it is older than Hopper or the driver is too old): SM activity and the other profiling metrics need DCGM there; gpueff_profiling_available is 0", info.index, info.name)
        return None
    request = nvml.c_nvmlGpmMetricsGet_t()
    request.version = nvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(GPM_METRICS)
    for slot, metric in enumerate(GPM_METRICS):
        request.metrics[slot].metricId = metric.metric_id
    return GpmPair([nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()], request)


def free_pair(nvml: ModuleType, pair: GpmPair) -> None:
    for sample in pair.samples:
        try:
            nvml.nvmlGpmSampleFree(sample)
        except nvml.NVMLError:
            pass
    pair.samples = []


def read_pair(nvml: ModuleType, pair: GpmPair, info: DeviceInfo, handle: Any, parent_handle: Any | None, now: float, log_once: LogOnce) -> tuple[Profiling, float] | None:
    """Take a sample at ``now`` and return the window's readings and its length; None while the pair
    is only primed, the last sample is too recent, or the driver refused (``pair.refused`` then)."""
    previous_time = pair.previous_time
    if previous_time is not None and now - previous_time <= GPM_MIN_SAMPLE_GAP:
        return None
    previous, current = pair.samples
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
            log_once(f"gpmperm-{info.uuid}", logging.WARNING, "GPU %d: GPM sampling was refused (%s; RmProfilingAdminOnly=%s): %s. gpueff_profiling_available is 0 until the exporter restarts with that fixed", info.index, error, admin_only, PROFILING_FIX)
            return None
        if code == nvml.NVML_ERROR_NOT_SUPPORTED:
            pair.refused = True
            log_once(f"gpmns-{info.uuid}", logging.WARNING, "GPU %d: GPM sampling is not supported here (%s); gpueff_profiling_available is 0", info.index, error)
            return None
        raise
    pair.samples = [current, previous]
    pair.previous_time = now
    if previous_time is None:
        return None  # the first sample only primes the pair
    request = pair.request
    request.sample1, request.sample2 = previous, current
    nvml.nvmlGpmMetricsGet(request)
    readings = {}
    for slot, metric in enumerate(GPM_METRICS):
        result = request.metrics[slot]
        if result.nvmlReturn == nvml.NVML_SUCCESS:
            readings[metric.key] = to_sample_unit(metric, result.value)
        else:
            log_once(f"gpmmetric-{info.uuid}-{metric.name}", logging.INFO, "GPU %d: GPM metric %s is not available (NVML return code %d); it is not exported", info.index, metric.name, result.nvmlReturn)
    return Profiling(**readings), now - previous_time
