"""What the raw readings mean: utilization, efficiency, mismatch rules, bottleneck class, counter
health, achieved FLOP/s and bandwidth, all from readings that cover ONE window: the poll's.

GPM and DCGM profiling readings are means over the window between two polls. NVML's utilization
call answers the driver's latest ~200 ms sample, not a window mean, so the window's utilization is
the mean of the driver's own samples taken inside the window (``GpuSample.gpu_utilization_window``,
nvmlDeviceGetSamples): nvidia-smi's quantity, copy-engine work included, over the same window as
every other figure. NVML's latest sample is kept as ``utilization_instant``. Each math pipe's busy
cycles are counted at its own rate and clock (``pipe_figures``): an upper bound of its work; a
point estimate of the work is given only where the counters support one (``estimated_work``).
Clock and power are instant readings: with the GPU's ``Smoothing`` (gpueff/pipeline/smoothing.py) the
figures use the mean of the readings at both ends of the window. The bottleneck class is judged from a short
time-weighted mean of recent windows, with hysteresis (gpueff/pipeline/smoothing.py). Formulas are in docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from operator import attrgetter

from gpueff.peaks import Peak, PeakOverride, peak_for
from gpueff.pipeline.smoothing import Smoothing
from gpueff.sample import GpuSample
from gpueff.taxonomy import (
    ACTIVITY_READINGS,
    CLASS_NAMES,
    MATH_PIPE_READINGS,
    Activity,
    BottleneckThresholds,
    MismatchThresholds,
    classify,
    implausible_checks,
)

BOTTLENECK_CLASSES = CLASS_NAMES
MISMATCH_RULES = ("high_util_low_sm", "low_efficiency", "high_util_low_work")


@dataclass(frozen=True, slots=True)
class DeriveSettings:
    """What the derivation takes of the config: the ``peaks:`` over the built-in table and the
    ``mismatch:`` and ``bottleneck:`` thresholds."""

    peaks: dict[str, PeakOverride] = field(default_factory=dict)
    mismatch: MismatchThresholds = MismatchThresholds()
    bottleneck: BottleneckThresholds = BottleneckThresholds()


DEFAULTS = DeriveSettings()


@dataclass(frozen=True, slots=True)
class PipeFigures:
    """One figure per math pipe (None: its activity or peak is unknown). As busy work: FLOP/s, except
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
    implausible: dict[str, bool]  # counter-health checks that could be judged (gpueff/taxonomy.py)
    peak: Peak | None
    sm_clock_mhz: float | None  # the SM clock the estimates use: the window's two ends' mean where known
    pipe_busy: PipeFigures  # each pipe's busy cycles at its full rate and this clock: an upper bound of its work
    peak_share: PipeFigures  # each pipe's achieved rate over its own peak: activity x clock / max clock
    busy_flops: float | None  # the floating-point pipes' busy work together (INT8 ops are not FLOP)
    dram_bytes_per_second: float | None
    busy_flop_per_joule: float | None
    estimated_flops: float | None = None  # the FLOP/s done, where the counters support a point estimate (estimated_work)
    estimated_int8_ops: float | None = None  # the INT8 ops/s done, likewise

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


def mismatch(busy: float | None, sm_active: float | None, ratio: float | None, limits: MismatchThresholds, work: float | None = None) -> dict[str, bool]:
    """The "busy but not working" rules whose inputs were read. ``work``: the busiest unit's share of
    its own peak (the math pipes, DRAM and the links); high_util_low_work catches what
    SM activity misses: a warp resident on an SM makes it active while it issues nothing."""
    rules: dict[str, bool] = {}
    if busy is not None and sm_active is not None:
        rules["high_util_low_sm"] = busy >= limits.high_utilization and sm_active < limits.low_sm_active
        rules["low_efficiency"] = busy >= limits.low_efficiency_utilization and ratio is not None and ratio < limits.low_efficiency_ratio
    if busy is not None and work is not None:
        rules["high_util_low_work"] = busy >= limits.high_utilization and work < limits.low_work_activity
    return rules


def busiest_unit(sample: GpuSample, link: float | None) -> float | None:
    """The busiest unit's share of its own peak: the math pipes (tensor, FP64, FP32, FP16), DRAM and
    the busiest link direction; None where no math pipe or DRAM was read. Not the integer pipe: it
    issues the address and loop arithmetic of any kernel, working or waiting (a batch-1 LSTM from a
    CUDA graph reads it at 0.15 while its math does 1.4 TFLOP/s on an H200), as the classes say."""
    profiling = sample.profiling
    units = [value for value in (*_math_pipes(profiling), profiling.dram_active) if value is not None]
    if not units:
        return None
    return max(units + ([link] if link is not None else []))


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
    """SM clock / max SM clock, at most 1: the share of a pipe's rate at the max clock the clock allows."""
    return None if not clock or not max_clock else min(1.0, clock / max_clock)


def rate_factor(clock: float | None, max_clock: float | None, basis: float | None) -> float | None:
    """What a pipe's data-sheet figure is multiplied by at this SM clock: clock / the clock the figure is
    quoted at (docs/peaks.md derives it per pipe; Hopper's tensor figures at ~1830 MHz, its FP32 at 1980,
    so a tensor pipe at 1980 MHz does 1.08x its figure). Where the basis is unknown (a config figure, an
    export-limited part), the figure is taken at the max clock: the factor can then only read low."""
    if not clock:
        return None
    return clock / basis if basis else clock_factor(clock, max_clock)


def pipe_figures(sample: GpuSample, clock: float | None, peak: Peak | None) -> tuple[PipeFigures, PipeFigures]:
    """(busy work, share of the pipe's rate at the max clock) per pipe.

    Busy work is the pipe's active cycles at its full dense rate at this clock: activity x figure x
    clock / basis. It is an upper bound of the useful work, not a count of it: the counters count busy
    pipe cycles, so padded tiles (a batch-1 GEMV on the tensor pipe) and slower instruction paths
    (Hopper's mma.sync keeps the pipe busy at ~2/3 of the wgmma rate) count as full work. The HMMA pipe
    runs FP16, BF16, TF32 and FP8 and its activity does not say which, so its work is counted at the BF16
    rate (TF32 work reads twice its FLOP, FP8 half).
    """
    max_clock = sample.device.max_sm_clock_mhz
    share_factor = clock_factor(clock, max_clock)
    work: dict[str, float] = {}
    share: dict[str, float] = {}
    for (name, _, peak_field), activity in zip(PIPES, _pipe_activities(sample.profiling), strict=True):
        if activity is None or share_factor is None:
            continue
        share[name] = activity * share_factor
        roof: float | None = getattr(peak, peak_field) if peak is not None else None
        factor = rate_factor(clock, max_clock, peak.basis_mhz(peak_field) if peak is not None else None)
        if roof is not None and factor is not None:
            work[name] = activity * factor * roof
    return PipeFigures(**work), PipeFigures(**share)


# A pipe's busy cycles are taken as work only where that pipe is busy for at least this share of the
# SMs' active cycles (both are shares of cycles, so the test reads the same on every card).
WORK_PIPE_SHARE = 0.25
# NVML's clock-event reasons that say a power or thermal limit holds the clocks: sw_power_cap,
# hw_slowdown, sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown (DCGM field 112 is
# the same mask). While one does, the SM clock read is not the rate the SMs' cycles ran at.
CLOCK_LIMITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def clocks_held(sample: GpuSample) -> bool:
    """Whether a power or thermal limit held the clocks at this reading, or the reasons were not read
    (then nothing says the reading is the SMs' rate)."""
    reasons = sample.clock_event_reasons
    return reasons is None or bool(reasons & CLOCK_LIMITS)


@dataclass(frozen=True, slots=True)
class WorkEstimate:
    """A point estimate of the work done (None: the counters cannot support one)."""

    flops: float | None = None
    int8_ops: float | None = None


def carries_work(activity: float | None, sm_active: float | None) -> bool:
    """Whether a pipe busy for ``activity`` of the cycles does the work its busy cycles count.

    A kernel whose math is its bottleneck keeps that pipe busy for a large part of the cycles its
    SMs hold warps: large GEMMs 0.97, attention 0.65, transformer training 0.38, FP32 convolutions
    0.31. Where the pipe is busy for under a quarter of them, its instructions come from kernels
    bound elsewhere (skinny and padded GEMVs 0.03-0.04, a batch-1 recurrent cell 0.05, cuDNN's bf16
    convolutions 0.13-0.22), where a busy cycle does anything from 1/8 to all of its rate: 1.0-8.6x
    their counts on the corpus. There the busy cycles cannot be told from work, and nothing is estimated."""
    return activity is not None and bool(sm_active) and activity >= WORK_PIPE_SHARE * (sm_active or 0.0)


def estimated_work(sample: GpuSample, pipe_busy: PipeFigures, busy_flops: float | None, peak: Peak | None, clocks_counted: bool = True) -> WorkEstimate:
    """The work done, where the counters can support a point estimate.

    ``clocks_counted``: the window's SM clock is the rate the SMs' cycles ran at. Where a power or
    thermal limit held the clocks recently it is not (measured on an H200 at its 700 W cap: NVML read
    1525 MHz while the SMs' cycle counter advanced at 1378, 1962 against 1833 on a ViT step, the
    same at idle; docs/peaks.md): the busy cycles' work is known only to the gap, which no reading
    gives and which differs by card and job (0 on an H100's GEMM at its cap), so nothing is estimated,
    not even 0 (a duty cycle's idle windows would otherwise read 0 beside its withheld busy ones).

    FLOP/s: every floating pipe's busy work (busy_flops), where the pipe that carries most of it
    carries work (carries_work). The HMMA pipe counts at the BF16 rate: TF32 work reads twice its
    FLOP, FP8 half (its activity does not say which ran). INT8 ops/s: the IMMA pipe's busy work at
    the rate of the mma.sync path (``Peak.sync_mma_share``: 2/3 of the wgmma figure on Hopper), the
    slower of the two paths the counters cannot tell apart, so an INT8 GEMM on wgmma reads 2/3 of
    its work rather than the mma.sync one 1.5x; where it carries work and the share is known.
    Either is 0 where its pipes had no busy cycle: the upper bound holds the work to 0."""
    if not clocks_counted:
        return WorkEstimate()
    sm_active = sample.profiling.sm_active
    carried = [(work, activity) for (name, _, _), activity in zip(PIPES, _pipe_activities(sample.profiling), strict=True)
               if name in FLOATING_PIPES and (work := getattr(pipe_busy, name)) is not None]
    flops = None
    if busy_flops == 0 or (busy_flops is not None and carried and carries_work(max(carried, key=lambda pair: pair[0])[1], sm_active)):
        flops = busy_flops  # no busy cycle at all bounds the work to 0 (an idle GPU did none)
    int8, sync_share = pipe_busy.imma_int8, peak.sync_mma_share if peak is not None else None
    int8_ops = None
    if int8 == 0 or (int8 is not None and sync_share and carries_work(sample.profiling.tensor_imma_active, sm_active)):
        int8_ops = int8 * (sync_share or 1.0)
    return WorkEstimate(flops, int8_ops)


def dram_bandwidth(sample: GpuSample, peak: Peak | None) -> float | None:
    dram = sample.profiling.dram_active
    if dram is None or peak is None or peak.dram_bytes_per_second is None:
        return None
    return dram * peak.dram_bytes_per_second


def derive(sample: GpuSample, settings: DeriveSettings = DEFAULTS) -> Derived:
    """Everything derived from one up sample, this window judged alone."""
    return step(sample, settings, None)[0]


def step(sample: GpuSample, settings: DeriveSettings, state: Smoothing | None) -> tuple[Derived, Smoothing | None]:
    """Everything derived from one up sample, and the GPU's next state. With ``state`` (the GPU's
    Smoothing after its previous sample) the clock and power are window means and the class is
    smoothed; with None, this window is judged alone. Pure: ``state`` is not changed."""
    peak = peak_for(sample.device.name, settings.peaks, sample.device)
    window = activity(sample, peak)
    busy, sm_active = window.busy, window.sm_active
    readings = {name: value for name, value in zip(ACTIVITY_READINGS, _activities(sample.profiling), strict=True) if value is not None}
    # NVML's (DCGM 203's) own figure, never the profiling counters it checks: the window's mean of the
    # driver's samples where read, else the latest sample.
    utilization = sample.gpu_utilization_window if sample.gpu_utilization_window is not None else sample.gpu_utilization
    implausible = implausible_checks(readings, utilization, window.link)
    flagged = any(implausible.values())
    ratio = efficiency(busy, sm_active)
    rules = mismatch(busy, sm_active, ratio, settings.mismatch, busiest_unit(sample, window.link))
    if flagged:
        rules = dict.fromkeys(rules, False)
    window_class = "unknown" if flagged else classify(window, settings.bottleneck)
    clock, power = sample.sm_clock_mhz, sample.power_watts
    reported, following = window_class, None
    held = clocks_held(sample)
    recently_held = held
    if state is not None:
        clock, power = state.window_mean(sample, "sm_clock_mhz"), state.window_mean(sample, "power_watts")
        reported, following = state.judge(sample, window, flagged, settings.bottleneck)
        recently_held = held or state.clocks_held_within(sample, settings.bottleneck.window)
        following = replace(following, clocks_held_at=sample.timestamp if held else state.clocks_held_at)
    pipe_busy, share = pipe_figures(sample, clock, peak)
    floating = [value for name in FLOATING_PIPES if (value := getattr(pipe_busy, name)) is not None]
    total = sum(floating) if floating else None
    work = WorkEstimate() if flagged else estimated_work(sample, pipe_busy, total, peak, clocks_counted=not recently_held)
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
        pipe_busy=pipe_busy,
        peak_share=share,
        busy_flops=total,
        dram_bytes_per_second=dram_bandwidth(sample, peak),
        busy_flop_per_joule=total / power if total is not None and power else None,
        estimated_flops=work.flops,
        estimated_int8_ops=work.int8_ops,
    )
    return derived, following
