"""What the raw readings mean: efficiency, mismatch rules, bottleneck class, achieved FLOP/s and
bandwidth. Pure functions of one sample; the time integrals live in exporter/integrals.py.
Formulas are in the README.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.config import BottleneckThresholds, Config, MismatchThresholds
from exporter.peaks import Peak, peak_for
from exporter.sample import GpuSample

BOTTLENECK_CLASSES = (
    "idle",
    "host",
    "compute",
    "memory",
    "communication",
    "underfilled",
    "latency",
    "mixed",
    "unknown",
)
MISMATCH_RULES = ("high_util_low_sm", "low_efficiency")
_PIPES = ("tensor_active", "fp64_active", "fp32_active", "fp16_active", "integer_active")


@dataclass(frozen=True, slots=True)
class Derived:
    busy: float | None  # coarse utilization, or GR-engine activity where no coarse figure exists (MIG)
    efficiency: float | None
    mismatch: dict[str, bool]  # only the rules whose inputs exist
    bottleneck: str
    peak: Peak | None
    tensor_flops: float | None  # estimated achieved bf16-equivalent FLOP/s
    dram_bytes_per_second: float | None
    tensor_flop_per_joule: float | None


def busy_ratio(sample: GpuSample) -> float | None:
    if sample.gpu_utilization is not None:
        return sample.gpu_utilization
    return sample.profiling.get("graphics_active")


def efficiency(busy: float | None, sm_active: float | None) -> float | None:
    """SM activity / coarse utilization, clamped to 0..1; None where utilization is 0 or unknown."""
    if busy is None or sm_active is None or busy <= 0:
        return None
    return min(1.0, max(0.0, sm_active / busy))


def mismatch(busy: float | None, sm_active: float | None, ratio: float | None, limits: MismatchThresholds) -> dict[str, bool]:
    rules: dict[str, bool] = {}
    if busy is not None and sm_active is not None:
        rules["high_util_low_sm"] = busy >= limits.high_utilization and sm_active < limits.low_sm_active
        rules["low_efficiency"] = busy >= limits.low_efficiency_utilization and ratio is not None and ratio < limits.low_efficiency_ratio
    return rules


def link_share(sample: GpuSample, peak: Peak | None) -> float | None:
    """The busiest interconnect direction as a share of its peak, where the peak is known."""
    if peak is None:
        return None
    shares = []
    for prefix, capacity in (("pcie", peak.pcie_bytes_per_second), ("nvlink", peak.nvlink_bytes_per_second)):
        if capacity:
            for direction in ("tx", "rx"):
                rate = sample.profiling.get(f"{prefix}_{direction}_bytes_per_second")
                if rate is not None:
                    shares.append(rate / capacity)
    return max(shares) if shares else None


def bottleneck(sample: GpuSample, busy: float | None, peak: Peak | None, limits: BottleneckThresholds) -> str:
    """The roofline-style class; checked in order, the first that matches wins."""
    if busy is None:
        return "unknown"
    if busy < limits.idle_utilization:
        return "idle"
    if busy < limits.host_utilization:
        return "host"
    profiling = sample.profiling
    sm_active = profiling.get("sm_active")
    if sm_active is None:
        return "unknown"
    pipes = max((profiling[name] for name in _PIPES if name in profiling), default=0.0)
    dram = profiling.get("dram_active", 0.0)
    if max(pipes, dram) >= limits.busy_pipe:
        return "compute" if pipes >= dram else "memory"
    link = link_share(sample, peak)
    if link is not None and link >= limits.communication_link and sm_active < limits.underfilled_sm_active:
        return "communication"
    if sm_active < limits.underfilled_sm_active:
        return "underfilled"
    occupancy = profiling.get("sm_occupancy")
    if occupancy is not None and occupancy < limits.latency_occupancy and max(pipes, dram) < limits.latency_work:
        return "latency"
    return "mixed"


def tensor_flops(sample: GpuSample, peak: Peak | None) -> float | None:
    """tensor_active x peak x (SM clock / max SM clock): the clock factor matters under power caps."""
    tensor = sample.profiling.get("tensor_active")
    clock, max_clock = sample.sm_clock_mhz, sample.device.max_sm_clock_mhz
    if tensor is None or peak is None or peak.tensor_flops is None or not clock or not max_clock:
        return None
    return tensor * peak.tensor_flops * min(1.0, clock / max_clock)


def dram_bandwidth(sample: GpuSample, peak: Peak | None) -> float | None:
    dram = sample.profiling.get("dram_active")
    if dram is None or peak is None or peak.dram_bytes_per_second is None:
        return None
    return dram * peak.dram_bytes_per_second


def derive(sample: GpuSample, config: Config) -> Derived:
    peak = peak_for(sample.device.name, config.peaks)
    busy = busy_ratio(sample)
    sm_active = sample.profiling.get("sm_active")
    ratio = efficiency(busy, sm_active)
    flops = tensor_flops(sample, peak)
    per_joule = flops / sample.power_watts if flops is not None and sample.power_watts else None
    return Derived(
        busy=busy,
        efficiency=ratio,
        mismatch=mismatch(busy, sm_active, ratio, config.mismatch),
        bottleneck=bottleneck(sample, busy, peak, config.bottleneck),
        peak=peak,
        tensor_flops=flops,
        dram_bytes_per_second=dram_bandwidth(sample, peak),
        tensor_flop_per_joule=per_joule,
    )
