"""One window for every derived figure: the window's utilization, the SM clock and power at both
ends of it, the smoothed class with hysteresis, and the counter-health checks."""

from __future__ import annotations

import pytest

from gpueff.pipeline.derive import DeriveSettings, derive, step
from gpueff.pipeline.smoothing import Smoothing
from gpueff.pipeline.tracker import GpuTracker
from gpueff.sample import DeviceInfo, GpuSample, Profiling
from gpueff.settings import Config
from gpueff.taxonomy import CLASS_NAMES, COUNTER_CHECKS, WHAT_TO_TRY, BottleneckThresholds, implausible_checks

H100 = DeviceInfo(index=0, uuid="GPU-h100", name="NVIDIA H100 80GB HBM3", sm_count=132, max_sm_clock_mhz=1980, power_limit_watts=700)
MATMUL = {"graphics_active": 0.98, "sm_active": 0.95, "sm_occupancy": 0.14, "tensor_active": 0.92, "tensor_hmma_active": 0.92, "dram_active": 0.25}
IDLE = {"graphics_active": 0.0, "sm_active": 0.0, "sm_occupancy": 0.0, "tensor_active": 0.0, "dram_active": 0.0}


class Stepper:
    """Derives consecutive samples of one GPU as the daemon does, carrying its Smoothing from one to the next."""

    def __init__(self) -> None:
        self.state: Smoothing | None = Smoothing()

    def __call__(self, sample: GpuSample, settings: DeriveSettings):
        derived, self.state = step(sample, settings, self.state)
        return derived


def window(t: float, utilization: float | None = 1.0, clock: float = 1980, power: float = 500, seconds: float = 1.0, **profiling: float) -> GpuSample:
    return GpuSample(device=H100, timestamp=t, window_seconds=seconds, gpu_utilization=utilization, sm_clock_mhz=clock, power_watts=power, profiling=Profiling(**profiling))


def test_utilization_is_the_driver_samples_mean_over_the_window_copy_engines_included():
    """Pinned host-to-device copies on an H100: the driver's samples read 0.99 busy over the window,
    the graphics engine 0.0001, SMs 0, PCIe RX 55 GB/s of 64: busy moving data, SMs idle."""
    copy = GpuSample(device=H100, timestamp=1.0, window_seconds=1.0, gpu_utilization=1.0, gpu_utilization_window=0.99, sm_clock_mhz=1980,
                     profiling=Profiling(graphics_active=0.0001, sm_active=0.0, sm_occupancy=0.0, tensor_active=0.0, dram_active=0.016, pcie_rx_bytes_per_second=55e9))
    derived = derive(copy)
    assert derived.busy == 0.99 and derived.bottleneck == "communication"
    assert derived.mismatch == {"high_util_low_sm": True, "low_efficiency": True, "high_util_low_work": False} and not derived.counters_implausible  # the link works
    # Judged from the graphics engine alone the same window looked idle; the link still says communication.
    engine_only = derive(copy.replace(gpu_utilization_window=None, gpu_utilization=None))
    assert engine_only.busy == 0.0001 and engine_only.bottleneck == "communication"


def test_copy_engines_alone_below_the_links_roof_are_paced_by_the_host():
    slow = GpuSample(device=H100, timestamp=1.0, window_seconds=1.0, gpu_utilization_window=0.97, sm_clock_mhz=1980,
                     profiling=Profiling(graphics_active=0.0, sm_active=0.0, sm_occupancy=0.0, tensor_active=0.0, dram_active=0.01, pcie_rx_bytes_per_second=6e9))
    assert derive(slow).bottleneck == "host"


def test_without_the_engine_sm_count_times_sm_activity_bounds_it_for_the_copy_only_host_rule():
    """NVML on a full GPU reads the graphics engine only over the slow window, so the window has no
    engine reading: a kernel running for a share e of the window keeps one SM of 132 active for e,
    so SM activity 0 proves the engine below idle_utilization (only copies ran): host, as with the
    engine read. One thread on one SM (0.0076 x 132 = 1) is no such proof."""
    copies = {"sm_active": 0.0, "sm_occupancy": 0.0, "tensor_active": 0.0, "dram_active": 0.01, "pcie_rx_bytes_per_second": 6e9}
    copy_only = GpuSample(device=H100, timestamp=1.0, window_seconds=1.0, gpu_utilization_window=0.97, sm_clock_mhz=1980, profiling=Profiling(**copies))
    assert derive(copy_only).bottleneck == "host"
    assert derive(copy_only.replace(device=DeviceInfo(index=0, uuid="GPU-x", name="NVIDIA H100 80GB HBM3"))).bottleneck == "underfilled"  # SM count unknown: no proof
    tiny_kernels = copy_only.replace(profiling=Profiling(**{**copies, "sm_active": 0.001}))  # 0.001 x 132 = 0.132: the engine may have run 13 %
    assert derive(tiny_kernels).bottleneck == "underfilled"
    spin = copy_only.replace(profiling=Profiling(**{**copies, "sm_active": 0.0076}))
    assert derive(spin).bottleneck == "underfilled"
    # Smoothed over windows (the daemon's path, with hysteresis): the same verdict, and the mean of the bounds is a bound.
    state, classes = Stepper(), []
    for number in range(6):
        classes.append(state(copy_only.replace(timestamp=1.0 + number), DeriveSettings()).bottleneck)
    assert classes == ["host"] * 6


def test_a_job_on_a_thresholds_edge_keeps_one_verdict():
    """DRAM 0.45 (below its roof) with the tensor pipe swinging 0.19 / 0.21 around compute_pipe (0.2): memory_latency throughout."""
    limits = DeriveSettings(bottleneck=BottleneckThresholds(window=0.0, hold_polls=1))
    state, classes = Stepper(), []
    for number in range(10):
        tensor = 0.19 if number % 2 == 0 else 0.21
        profile = {"graphics_active": 0.99, "sm_active": 0.9, "sm_occupancy": 0.5, "tensor_active": tensor, "tensor_hmma_active": tensor, "dram_active": 0.45}
        classes.append(state(window(float(number), **profile), limits).bottleneck)
    assert classes == ["memory_latency"] * 10
    flapping = DeriveSettings(bottleneck=BottleneckThresholds(window=0.0, hold_polls=1, margin=0.0))
    state = Stepper()
    classes = [state(window(float(n), **{**MATMUL, "tensor_active": 0.19 + 0.02 * (n % 2), "dram_active": 0.45}), flapping).bottleneck for n in range(4)]
    assert classes == ["memory_latency", "compute", "memory_latency", "compute"]  # without the band it flips on a 0.02 change


def test_utilization_is_the_windows_engine_activity_and_nvidia_smis_figure_is_kept_apart():
    # The end of a burst: the driver's latest sample reads 0.99, the window was busy 0.48 of the time.
    derived = derive(window(1.0, utilization=0.99, graphics_active=0.48, sm_active=0.13, sm_occupancy=0.02, tensor_active=0.12, dram_active=0.04))
    assert derived.busy == 0.48 and derived.utilization_instant == 0.99
    assert derived.efficiency == pytest.approx(0.13 / 0.48)
    assert derived.mismatch == {"high_util_low_sm": False, "low_efficiency": False, "high_util_low_work": False}  # the instant figure would have fired the first two


def test_without_profiling_nvmls_figure_is_the_utilization():
    assert derive(window(1.0, utilization=0.7)).busy == 0.7


def test_the_sm_clock_of_the_flops_estimate_is_the_mean_of_both_ends_of_the_window():
    state = Stepper()
    state(window(1.0, clock=1980, **MATMUL), DeriveSettings())
    derived = state(window(2.0, clock=1380, power=700, **MATMUL), DeriveSettings())
    assert derived.sm_clock_mhz == 1680
    assert derived.busy_flops == pytest.approx(0.92 * 989.4e12 * 1680 / 1830, rel=1e-3)  # H200 tensor figure quoted at 1830 MHz
    assert derived.busy_flop_per_joule == pytest.approx(derived.busy_flops / 600)  # power at both ends: 500 and 700
    # A window the previous reading did not open (a gap): this poll's own clock.
    assert state(window(5.0, clock=1500, **MATMUL), DeriveSettings()).sm_clock_mhz == 1500


def test_a_single_poll_never_flips_the_class():
    state = Stepper()
    limits = DeriveSettings(bottleneck=BottleneckThresholds(window=0.0))  # no smoothing: hysteresis alone
    assert state(window(1.0, **MATMUL), limits).bottleneck == "compute"
    assert state(window(2.0, **IDLE, utilization=0.0), limits).bottleneck == "compute"  # one idle window
    assert state(window(3.0, **MATMUL), limits).bottleneck == "compute"
    assert state(window(4.0, **IDLE, utilization=0.0), limits).bottleneck == "compute"
    assert state(window(5.0, **IDLE, utilization=0.0), limits).bottleneck == "idle"  # two in a row


def test_windows_that_swing_between_busy_and_idle_read_host_steadily():
    """A loop busy half the time in ~1 s bursts, polled every 500 ms: each window alone reads compute or idle."""
    state, classes, alone = Stepper(), [], []
    for number in range(40):
        busy = number % 4 < 2
        derived = state(window(0.5 * number, utilization=1.0 if busy else 0.0, seconds=0.5, **(MATMUL if busy else IDLE)), DeriveSettings())
        classes.append(derived.bottleneck)
        alone.append(derived.window_bottleneck)
    assert set(alone) == {"compute", "idle"}
    assert classes[6:] == ["host"] * 34


def test_the_class_follows_a_real_change_within_the_window_and_hold():
    state = Stepper()
    classes = [state(window(float(t), utilization=1.0 if t < 10 else 0.0, **(MATMUL if t < 10 else IDLE)), DeriveSettings()).bottleneck for t in range(20)]
    assert classes[:10] == ["compute"] * 10 and classes[-5:] == ["idle"] * 5


def classes_of(windows: list[tuple[float, dict[str, float]]]) -> list[str]:
    """The reported class at each of consecutive 1 s windows: (utilization, profiling readings) each."""
    state = Stepper()
    return [state(window(float(t), utilization=utilization, **readings), DeriveSettings()).bottleneck for t, (utilization, readings) in enumerate(windows)]


def test_a_job_that_starts_is_followed_within_two_polls():
    """issue 43: the mean held the idle seconds before a matmul loop, which read host for up to bottleneck.window."""
    classes = classes_of([(0.0, IDLE)] * 10 + [(1.0, MATMUL)] * 8)
    assert classes[9] == "idle" and classes[11:] == ["compute"] * 7


def test_a_change_inside_a_window_is_followed_within_two_polls_of_it():
    """The window the job started in is part idle, part busy: the change goes on at the next one."""
    half = {name: value * 0.4 for name, value in MATMUL.items()}
    classes = classes_of([(0.0, IDLE)] * 10 + [(0.4, half)] + [(1.0, MATMUL)] * 8)
    assert classes[11:] == ["compute"] * 8
    stopping = classes_of([(1.0, MATMUL)] * 10 + [(0.4, half)] + [(0.0, IDLE)] * 8)
    assert stopping[:11] == ["compute"] * 11 and stopping[11:] == ["idle"] * 8


def test_one_odd_window_in_a_steady_job_changes_nothing():
    """A window far out of the job's range restarts the mean, and the next one, back in it, restarts it
    again: the hold sees two different challengers and the class in place stands."""
    classes = classes_of([(1.0, MATMUL)] * 10 + [(0.0, IDLE)] + [(1.0, MATMUL)] * 8)
    assert classes == ["compute"] * 19


def test_a_phase_change_at_the_same_sm_activity_is_followed_within_two_polls():
    """A gather (DRAM 0.5, no math) then a GEMM phase: SM activity stays at 0.95, the tensor pipe steps."""
    gather = {"graphics_active": 0.98, "sm_active": 0.95, "sm_occupancy": 0.5, "tensor_active": 0.0, "tensor_hmma_active": 0.0, "dram_active": 0.5}
    classes = classes_of([(0.98, gather)] * 10 + [(0.98, MATMUL)] * 8)
    assert classes[9] == "memory_latency" and classes[11:] == ["compute"] * 7


def test_a_down_gpu_starts_its_window_state_afresh():
    tracker = GpuTracker()
    tracker.advance(window(1.0, **MATMUL), Config().tracker_settings, None, {})
    assert tracker.smoothing.reported == "compute"
    tracker.advance(GpuSample(device=H100, timestamp=2.0, up=False), Config().tracker_settings, None, {})
    assert tracker.smoothing == Smoothing()


@pytest.mark.parametrize(
    ("readings", "nvml", "check"),
    [
        ({"sm_active": 0.9, "graphics_active": 0.5}, None, "sm_above_engine"),
        ({"sm_active": 0.3, "tensor_active": 0.6}, None, "pipe_above_sm"),
        ({"sm_active": 0.2, "sm_occupancy": 0.5}, None, "occupancy_above_sm"),
        ({"sm_active": 0.0, "graphics_active": 0.97}, None, "sm_zero_while_busy"),
        ({"sm_active": 0.0, "graphics_active": 0.0, "tensor_active": 0.0, "dram_active": 0.0}, 0.99, "profiling_zero_under_load"),
    ],
)
def test_each_counter_health_check_fires_on_its_impossible_reading_alone(readings, nvml, check):
    checks = implausible_checks(readings, nvml)
    assert checks[check] and [name for name, fired in checks.items() if fired] == [check]
    assert set(checks) <= set(COUNTER_CHECKS)


def test_implausible_readings_raise_no_waste_and_read_unknown():
    broken = window(1.0, utilization=0.99, graphics_active=0.99, sm_active=0.0, sm_occupancy=0.0, tensor_active=0.0, dram_active=0.0)
    derived = derive(broken)
    assert derived.implausible["sm_zero_while_busy"] and derived.counters_implausible
    assert derived.mismatch == {"high_util_low_sm": False, "low_efficiency": False, "high_util_low_work": False}
    assert derived.bottleneck == "unknown"


def test_plausible_readings_of_real_workloads_pass_every_check():
    for readings in (MATMUL, IDLE, {"graphics_active": 1.0, "sm_active": 0.0076, "sm_occupancy": 0.0001, "tensor_active": 0.0}):
        assert not any(implausible_checks(readings, 1.0 if readings["graphics_active"] else 0.0).values())


def test_every_class_has_a_what_to_try_line():
    assert set(WHAT_TO_TRY) == set(CLASS_NAMES) and all(len(line) > 20 for line in WHAT_TO_TRY.values())


def test_the_first_real_verdict_after_the_priming_poll_needs_no_hold():
    """GPM's first poll only primes its sample pair: no profiling, so unknown; the next window decides at once."""
    state = Stepper()
    assert state(window(1.0, seconds=None), DeriveSettings()).bottleneck == "unknown"
    assert state(window(2.0, **MATMUL), DeriveSettings()).bottleneck == "compute"


def test_the_first_poll_with_utilization_0_and_no_window_is_unknown_not_idle():
    """The driver's latest sample reads 0 beside a starved job's short kernels: without a window of SM activity, no verdict."""
    state = Stepper()
    assert state(window(1.0, utilization=0.0, seconds=None), DeriveSettings()).bottleneck == "unknown"
    starved = {"sm_active": 0.02, "sm_occupancy": 0.01, "tensor_active": 0.004, "dram_active": 0.008}
    assert state(window(2.0, utilization=0.03, **starved), DeriveSettings()).bottleneck == "host"


def test_idle_gives_way_without_a_hold_once_a_kernel_runs():
    """``idle`` is a fact, no kernel ran: the first window that shows one ends it (a job starting
    on an idle GPU), where any other change waits for ``hold_polls``."""
    state = Stepper()
    assert [state(window(float(t), utilization=0.0, **IDLE), DeriveSettings()).bottleneck for t in range(1, 4)] == ["idle"] * 3
    starved = {"sm_active": 0.02, "sm_occupancy": 0.01, "tensor_active": 0.004, "dram_active": 0.008}
    assert state(window(4.0, utilization=0.03, **starved), DeriveSettings()).bottleneck == "host"


def test_the_first_windows_noise_is_not_kept_for_the_jobs_life():
    """A job a point above underfilled_sm_active (the 4-GPU pipeline stage's SM 0.51, tensor 0.48):
    its first window read two points low. Until the windows span ``bottleneck.window`` the verdict
    follows their mean, without band or hold; the band then keeps what the whole window says."""
    state = Stepper()
    stage = {"graphics_active": 0.98, "sm_occupancy": 0.08, "tensor_active": 0.48, "tensor_hmma_active": 0.48, "dram_active": 0.12}
    classes = [state(window(float(t), sm_active=0.49 if t == 1 else 0.51, **stage), DeriveSettings()).bottleneck for t in range(1, 12)]
    assert classes == ["underfilled"] + ["compute"] * 10


def test_a_step_is_a_pure_function_of_the_sample_and_the_previous_state():
    first = step(window(1.0, clock=1980, **MATMUL), DeriveSettings(), Smoothing())[1]
    again = [step(window(2.0, clock=1380, **IDLE, utilization=0.0), DeriveSettings(), first) for _ in range(2)]
    assert again[0] == again[1] and again[0][1] != first
    assert first == step(window(1.0, clock=1980, **MATMUL), DeriveSettings(), Smoothing())[1]  # the state given is unchanged
