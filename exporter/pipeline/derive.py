"""What the raw readings mean: utilization, efficiency, mismatch rules, bottleneck class, counter
health, achieved FLOP/s and bandwidth, all from readings that cover ONE window: the poll's.

GPM and DCGM profiling readings are means over the window between two polls. NVML's utilization
call answers the driver's latest ~200 ms sample, not a window mean, so the window's utilization is
the mean of the driver's own samples taken inside the window (``GpuSample.gpu_utilization_window``,
nvmlDeviceGetSamples): nvidia-smi's quantity, copy-engine work included, over the same window as
every other figure. NVML's latest sample is kept as ``utilization_instant``. Each math pipe's work is
its activity at its own peak and clock (``pipe_figures``).
Clock and power are instant readings: with the GPU's ``Smoothing`` (exporter/pipeline/smoothing.py) the
figures use the mean of the readings at both ends of the window. The bottleneck class is judged from a short
time-weighted mean of recent windows, with hysteresis (exporter/pipeline/smoothing.py). Formulas are in the README.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

from exporter.peaks import Peak, peak_for
from exporter.pipeline.smoothing import Smoothing
from exporter.sample import GpuSample
from exporter.taxonomy import (
    ACTIVITY_READINGS,
    CLASS_NAMES,
    MATH_PIPE_READINGS,
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
class PipeFigures:
    """One figure per math pipe (None: its activity or peak is unknown). As work: FLOP/s, except
    ``imma_int8`` in INT8 operations/s. As a share of the pipe's own peak: a ratio 0..1."""

    hmma_bf16_equivalent: float | None = None  # FP16/BF16/TF32/FP8 all issue on HMMA: counted at the BF16 rate
    dmma_fp64: float | None = None
    imma_int8: float | None = None
    fp64: float | None = None
    fp32: float | None = None
    fp16: float | None = None


# (PipeFigures field, the Profiling activity it is read from, the Peak field that is its roof)
PIPES = (
    ("hmma_bf16_equivalent", "tensor_hmma_active", "tensor_flops"),
    ("dmma_fp64", "tensor_dfma_active", "tensor_fp64_flops"),
    ("imma_int8", "tensor_imma_active", "tensor_int8_ops"),
    ("fp64", "fp64_active", "fp64_flops"),
    ("fp32", "fp32_active", "fp32_flops"),
    ("fp16", "fp16_active", "fp16_flops"),
)
FLOATING_PIPES = tuple(name for name, _, _ in PIPES if name != "imma_int8")
_pipe_activities = attrgetter(*(activity for _, activity, _ in PIPES))  # a Profiling's activity of each pipe, in PIPES order


@dataclass(frozen=True, slots=True)
class Derived:
    busy: float | None  # the window's utilization (nvidia-smi's figure averaged over the window; see busy_ratio)
    utilization_instant: float | None  # NVML's latest driver sample: what nvidia-smi shows
    efficiency: float | None
    mismatch: dict[str, bool]  # only the rules whose inputs exist; all False while the counters are implausible
    bottleneck: str  # the reported class (smoothed, with hysteresis, where the GPU's Smoothing is given)
    window_bottleneck: str  # the class of this window alone
    implausible: dict[str, bool]  # counter-health checks that could be judged (exporter/taxonomy.py)
    peak: Peak | None
    sm_clock_mhz: float | None  # the SM clock the estimates use: the window's two ends' mean where known
    work: PipeFigures  # estimated achieved work per pipe, each at its own peak and clock
    peak_share: PipeFigures  # each pipe's achieved rate over its own peak: activity x clock / max clock
    total_flops: float | None  # the floating-point pipes' work together (INT8 ops are not FLOP)
    dram_bytes_per_second: float | None
    flop_per_joule: float | None

    @property
    def counters_implausible(self) -> bool:
        return any(self.implausible.values())


_math_pipes = attrgetter(*MATH_PIPE_READINGS)  # a Profiling's math pipe activities, as a tuple
_activities = attrgetter(*ACTIVITY_READINGS)
_pcie_rates = attrgetter("pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second")
_nvlink_rates = attrgetter("nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second")


def busy_ratio(sample: GpuSample) -> float | None:
    """The window's utilization, as nvidia-smi means it (any engine busy, copy engines included):
    the mean of the driver's own samples over the window where read; else the graphics engine's
    activity over the profiling window (it misses copy-engine work); else NVML's latest sample."""
    for value in (sample.gpu_utilization_window, sample.profiling.graphics_active):
        if value is not None:
            return value
    return sample.gpu_utilization


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
    shares: list[float] = []
    for capacity, rates in ((peak.pcie_bytes_per_second, _pcie_rates), (peak.nvlink_bytes_per_second, _nvlink_rates)):
        if capacity:
            shares.extend(rate / capacity for rate in rates(sample.profiling) if rate is not None)
    return max(shares) if shares else None


def engine_bound(sample: GpuSample) -> float | None:
    """Where the graphics engine is not read over the window: an upper bound on its activity. A kernel
    running for a share e of the window keeps at least one of the GPU's SMs active for e, so SM
    activity >= e / SM count: the engine's activity is at most SM count x SM activity (and 1)."""
    sm_active, sm_count = sample.profiling.sm_active, sample.device.sm_count
    if sample.profiling.graphics_active is not None or sm_active is None or not sm_count:
        return None
    return min(1.0, sm_count * sm_active)


def activity(sample: GpuSample, peak: Peak | None) -> Activity:
    """The readings the bottleneck class is judged from, all over this sample's window."""
    profiling = sample.profiling
    pipes = [value for value in _math_pipes(profiling) if value is not None]
    return Activity(
        busy=busy_ratio(sample),
        engine=profiling.graphics_active,
        engine_bound=engine_bound(sample),
        sm_active=profiling.sm_active,
        sm_occupancy=profiling.sm_occupancy,
        pipes=max(pipes) if pipes else None,
        dram=profiling.dram_active,
        link=link_share(sample, peak),
    )


def clock_factor(clock: float | None, max_clock: float | None) -> float | None:
    """SM clock / max SM clock, at most 1: the pipes' peaks are at the max clock (matters under power caps)."""
    return None if not clock or not max_clock else min(1.0, clock / max_clock)


def pipe_figures(sample: GpuSample, clock: float | None, peak: Peak | None) -> tuple[PipeFigures, PipeFigures]:
    """(work, share of peak) per pipe: activity x clock factor, times the pipe's own peak for work.

    No figure can exceed what its pipe does at its precision: the activity is at most 1 and the
    clock factor at most 1. The HMMA pipe runs FP16, BF16, TF32 and FP8 and its activity does not
    say which, so its work is counted at the BF16 rate (TF32 work reads twice its FLOP, FP8 half).
    """
    factor = clock_factor(clock, sample.device.max_sm_clock_mhz)
    work: dict[str, float] = {}
    share: dict[str, float] = {}
    for (name, _, peak_field), activity in zip(PIPES, _pipe_activities(sample.profiling), strict=True):
        if activity is None or factor is None:
            continue
        share[name] = activity * factor
        roof: float | None = getattr(peak, peak_field) if peak is not None else None
        if roof is not None:
            work[name] = share[name] * roof
    return PipeFigures(**work), PipeFigures(**share)


def dram_bandwidth(sample: GpuSample, peak: Peak | None) -> float | None:
    dram = sample.profiling.dram_active
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
    readings = {name: value for name, value in zip(ACTIVITY_READINGS, _activities(sample.profiling), strict=True) if value is not None}
    implausible = implausible_checks(readings, sample.gpu_utilization, window.link)
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
    work, share = pipe_figures(sample, clock, peak)
    floating = [value for name in FLOATING_PIPES if (value := getattr(work, name)) is not None]
    total = sum(floating) if floating else None
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
        work=work,
        peak_share=share,
        total_flops=total,
        dram_bytes_per_second=dram_bandwidth(sample, peak),
        flop_per_joule=total / power if total is not None and power else None,
    )
    return derived, following
