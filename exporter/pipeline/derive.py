"""What the raw readings mean: utilization, efficiency, mismatch rules, bottleneck class, counter
health, achieved FLOP/s and bandwidth, all from readings that cover ONE window: the poll's.

GPM and DCGM profiling readings are means over the window between two polls. NVML's utilization is
the driver's latest ~200 ms sample, not a window mean, so where profiling exists the window's
utilization is the engine's activity over that window (GPM GRAPHICS_UTIL / DCGM 1001: the same
quantity, equal to NVML's figure on steady loads); NVML's figure is kept as ``utilization_instant``.
Clock and power are instant readings: with the GPU's ``Smoothing`` (exporter/pipeline/smoothing.py) the
figures use the mean of the readings at both ends of the window. The bottleneck class is judged from a short
time-weighted mean of recent windows, with hysteresis (exporter/pipeline/smoothing.py). Formulas are in the README.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from exporter.peaks import Peak, peak_for
from exporter.pipeline.smoothing import Smoothing
from exporter.sample import GpuSample
from exporter.taxonomy import (
    ACTIVITY_READINGS,
    CLASS_NAMES,
    PIPE_READINGS,
    Activity,
    MismatchThresholds,
    classify,
    implausible_checks,
)

if TYPE_CHECKING:
    from exporter.config.file import Config

BOTTLENECK_CLASSES = CLASS_NAMES
MISMATCH_RULES = ("high_util_low_sm", "low_efficiency")


@dataclass(frozen=True, slots=True)
class Derived:
    busy: float | None  # the window's utilization (engine activity), or NVML's figure where no profiling exists
    utilization_instant: float | None  # NVML's latest driver sample: what nvidia-smi shows
    efficiency: float | None
    mismatch: dict[str, bool]  # only the rules whose inputs exist; all False while the counters are implausible
    bottleneck: str  # the reported class (smoothed, with hysteresis, where the GPU's Smoothing is given)
    window_bottleneck: str  # the class of this window alone
    implausible: dict[str, bool]  # counter-health checks that could be judged (exporter/taxonomy.py)
    peak: Peak | None
    sm_clock_mhz: float | None  # the SM clock the FLOP/s estimate uses: the window's two ends' mean where known
    tensor_flops: float | None  # estimated achieved bf16-equivalent FLOP/s
    dram_bytes_per_second: float | None
    tensor_flop_per_joule: float | None

    @property
    def counters_implausible(self) -> bool:
        return any(self.implausible.values())


def reading(sample: GpuSample, name: str) -> float | None:
    """One profiling reading of the window (a field of sample.Profiling), or None."""
    value: float | None = getattr(sample.profiling, name)
    return value


def busy_ratio(sample: GpuSample) -> float | None:
    """The window's utilization: engine activity over the profiling window where read, else NVML's figure."""
    engine = reading(sample, "graphics_active")
    return engine if engine is not None else sample.gpu_utilization


def efficiency(busy: float | None, sm_active: float | None) -> float | None:
    """SM activity / utilization, clamped to 0..1; None where utilization is 0 or unknown."""
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
                rate = reading(sample, f"{prefix}_{direction}_bytes_per_second")
                if rate is not None:
                    shares.append(rate / capacity)
    return max(shares) if shares else None


def activity(sample: GpuSample, peak: Peak | None) -> Activity:
    """The readings the bottleneck class is judged from, all over this sample's window."""
    pipes = [value for value in (reading(sample, name) for name in PIPE_READINGS) if value is not None]
    return Activity(
        busy=busy_ratio(sample),
        sm_active=reading(sample, "sm_active"),
        sm_occupancy=reading(sample, "sm_occupancy"),
        pipes=max(pipes) if pipes else None,
        dram=reading(sample, "dram_active"),
        link=link_share(sample, peak),
    )


def tensor_flops(tensor: float | None, clock: float | None, max_clock: float | None, peak: Peak | None) -> float | None:
    """tensor_active x peak x (SM clock / max SM clock): the clock factor matters under power caps."""
    if tensor is None or peak is None or peak.tensor_flops is None or not clock or not max_clock:
        return None
    return tensor * peak.tensor_flops * min(1.0, clock / max_clock)


def dram_bandwidth(sample: GpuSample, peak: Peak | None) -> float | None:
    dram = reading(sample, "dram_active")
    if dram is None or peak is None or peak.dram_bytes_per_second is None:
        return None
    return dram * peak.dram_bytes_per_second


def derive(sample: GpuSample, config: Config) -> Derived:
    """Everything derived from one up sample, this window judged alone."""
    return step(sample, config, None)[0]


def step(sample: GpuSample, config: Config, state: Smoothing | None) -> tuple[Derived, Smoothing | None]:
    """Everything derived from one up sample, and the GPU's next state. With ``state`` (the GPU's
    Smoothing after its previous sample) the clock and power are window means and the class is
    smoothed; with None, this window is judged alone. Pure: ``state`` is not changed."""
    peak = peak_for(sample.device.name, config.peaks)
    window = activity(sample, peak)
    busy, sm_active = window.busy, window.sm_active
    readings = {name: value for name in ACTIVITY_READINGS if (value := reading(sample, name)) is not None}
    implausible = implausible_checks(readings, sample.gpu_utilization)
    flagged = any(implausible.values())
    ratio = efficiency(busy, sm_active)
    rules = mismatch(busy, sm_active, ratio, config.mismatch)
    if flagged:
        rules = dict.fromkeys(rules, False)
    window_class = "unknown" if flagged else classify(window, config.bottleneck)
    clock, power = sample.sm_clock_mhz, sample.power_watts
    reported, following = window_class, None
    if state is not None:
        clock, power = state.window_mean(sample, "sm_clock_mhz"), state.window_mean(sample, "power_watts")
        reported, following = state.judge(sample, window, flagged, config.bottleneck)
    flops = tensor_flops(reading(sample, "tensor_active"), clock, sample.device.max_sm_clock_mhz, peak)
    derived = Derived(
        busy=busy,
        utilization_instant=sample.gpu_utilization,
        efficiency=ratio,
        mismatch=rules,
        bottleneck=reported,
        window_bottleneck=window_class,
        implausible=implausible,
        peak=peak,
        sm_clock_mhz=clock,
        tensor_flops=flops,
        dram_bytes_per_second=dram_bandwidth(sample, peak),
        tensor_flop_per_joule=flops / power if flops is not None and power else None,
    )
    return derived, following
