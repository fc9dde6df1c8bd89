"""Derivations checked against every recorded H200 trace and its measured truth, plus synthetic
samples for the classes no trace holds, and the time integrals behind the busy-but-idle counters."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from gpueff.peaks import PeakOverride
from gpueff.pipeline.derive import BOTTLENECK_CLASSES, DEFAULTS, MISMATCH_RULES, DeriveSettings, derive, step
from gpueff.pipeline.smoothing import Smoothing
from gpueff.pipeline.totals import Growth, Totals, integrate
from gpueff.sample import DeviceInfo, GpuSample, Profiling, down_sample
from gpueff.taxonomy import BottleneckThresholds, MismatchThresholds
from gpueff.trace import load_trace, sample_from_record

H200 = DeviceInfo(index=0, uuid="GPU-h200", name="NVIDIA H200", sm_count=132, max_sm_clock_mhz=1980, power_limit_watts=700)
EXPECTED_CLASS = {
    "copy_2GB": "memory",
    "idle": "idle",
    "matmul_8192": "compute",
    "matmul_8192_duty50": "host",
    "spin_1sm": "underfilled",
    "tiny_kernels": "host",
}


def steady_samples(path, device: DeviceInfo = H200) -> list[GpuSample]:
    """The trace's samples as the replay backend makes them, without the first (the workload was ramping)."""
    trace = load_trace(path)
    return [sample_from_record(device, record, record["t"], trace.interval_s) for record in trace.samples[1:]]


def synthetic(utilization: float | None, sm_clock: float | None = 1980, **profiling: float) -> GpuSample:
    """A window of an H200 whose clocks no limit holds (clock-event reasons 0)."""
    return GpuSample(device=H200, timestamp=0.0, window_seconds=1.0, gpu_utilization=utilization, sm_clock_mhz=sm_clock,
                     power_watts=500.0, clock_event_reasons=0, profiling=Profiling(**profiling))


def test_the_six_traces_cover_the_expected_workloads(trace_paths):
    assert set(trace_paths) == set(EXPECTED_CLASS)


@pytest.mark.parametrize(("workload", "expected"), sorted(EXPECTED_CLASS.items()))
def test_bottleneck_class_of_every_recorded_workload(trace_paths, workload, expected):
    classes = [derive(sample).bottleneck for sample in steady_samples(trace_paths[workload])]
    assert classes == [expected] * len(classes)
    assert expected in BOTTLENECK_CLASSES


@pytest.mark.parametrize("workload", sorted(EXPECTED_CLASS))
def test_mismatch_fires_only_for_one_thread_on_one_sm(trace_paths, workload):
    firing = workload == "spin_1sm"
    for sample in steady_samples(trace_paths[workload]):
        rules = derive(sample).mismatch
        assert set(rules) == set(MISMATCH_RULES)
        assert rules == {"high_util_low_sm": firing, "low_efficiency": firing, "high_util_low_work": firing}


def test_efficiency_of_one_thread_on_one_sm_is_one_sm_of_132(trace_paths):
    for sample in steady_samples(trace_paths["spin_1sm"]):
        assert derive(sample).efficiency == pytest.approx(1 / 132, rel=0.02)


def test_efficiency_is_absent_when_utilization_is_zero(trace_paths):
    for sample in steady_samples(trace_paths["idle"]):
        assert sample.gpu_utilization == 0
        assert derive(sample).efficiency is None


def test_efficiency_of_the_big_workloads_is_high(trace_paths):
    for workload in ("copy_2GB", "matmul_8192", "matmul_8192_duty50"):
        for sample in steady_samples(trace_paths[workload]):
            assert derive(sample).efficiency > 0.85, workload


def test_efficiency_is_clamped_to_one():
    assert derive(synthetic(0.5, sm_active=0.9)).efficiency == 1.0


def median_estimate(samples: list[GpuSample], attribute: str, settings: DeriveSettings = DEFAULTS) -> float:
    return statistics.median(getattr(derive(sample, settings), attribute) for sample in samples)


def test_tensor_busy_flops_bound_the_measured_matmul_from_above_and_closely(trace_paths):
    """Busy tensor cycles at 4096 FLOP/clk/SM: a large GEMM does 0.90-1.0 of that (docs/peaks.md)."""
    trace = load_trace(trace_paths["matmul_8192"])
    busy = median_estimate(steady_samples(trace_paths["matmul_8192"]), "busy_flops")
    assert 1.0 <= busy / (trace.truth["tflops"] * 1e12) <= 1.15


def test_tensor_busy_flops_bound_the_measured_half_duty_matmul(trace_paths):
    trace = load_trace(trace_paths["matmul_8192_duty50"])
    busy = median_estimate(steady_samples(trace_paths["matmul_8192_duty50"]), "busy_flops")
    assert 1.0 <= busy / (trace.truth["tflops"] * 1e12) <= 1.2


def test_the_clock_factor_is_what_makes_the_estimate_right(trace_paths):
    """Without the SM clock / max clock factor the power-capped matmul would read ~40 % high."""
    samples = steady_samples(trace_paths["matmul_8192"])
    truth = load_trace(trace_paths["matmul_8192"]).truth["tflops"] * 1e12
    unclocked = statistics.median(s.profiling.tensor_active * 989.4e12 for s in samples)
    assert unclocked > 1.3 * truth


def test_dram_bandwidth_estimate_within_3_percent_of_the_measured_copy(trace_paths):
    trace = load_trace(trace_paths["copy_2GB"])
    estimate = median_estimate(steady_samples(trace_paths["copy_2GB"]), "dram_bytes_per_second")
    assert estimate == pytest.approx(trace.truth["tbps"] * 1e12, rel=0.03)


def test_flop_per_joule_is_flops_over_power(trace_paths):
    for sample in steady_samples(trace_paths["matmul_8192"]):
        derived = derive(sample)
        assert derived.busy_flop_per_joule == pytest.approx(derived.busy_flops / sample.power_watts)


def test_no_estimates_for_an_unknown_model(trace_paths):
    unknown = dataclasses.replace(H200, name="NVIDIA Imaginary X1")
    for sample in steady_samples(trace_paths["matmul_8192"], unknown):
        derived = derive(sample)
        assert derived.peak is None
        assert derived.busy_flops is None and derived.dram_bytes_per_second is None and derived.busy_flop_per_joule is None
        assert derived.bottleneck == "compute"  # the class needs no peak


def test_estimates_for_an_unknown_model_with_a_peaks_override(trace_paths):
    unknown = dataclasses.replace(H200, name="NVIDIA Imaginary X1")
    config = DeriveSettings(peaks={"NVIDIA Imaginary X1": PeakOverride(tensor_tflops=989.4, dram_tbps=4.8)})
    flops = median_estimate(steady_samples(trace_paths["matmul_8192"], unknown), "busy_flops", config)
    # a config figure has no derived clock basis: it is taken at the max clock (1980), the built-in one at 1830
    assert flops == pytest.approx(median_estimate(steady_samples(trace_paths["matmul_8192"]), "busy_flops") * 1830 / 1980, rel=1e-3)
    bandwidth = median_estimate(steady_samples(trace_paths["copy_2GB"], unknown), "dram_bytes_per_second", config)
    assert bandwidth == pytest.approx(4.8e12 * 0.886, rel=0.01)


def test_a_peaks_override_replaces_only_the_given_figures(trace_paths):
    config = DeriveSettings(peaks={"NVIDIA H200": PeakOverride(dram_tbps=2.4)})
    sample = steady_samples(trace_paths["copy_2GB"])[0]
    derived, default = derive(sample, config), derive(sample)
    assert derived.dram_bytes_per_second == pytest.approx(default.dram_bytes_per_second / 2)
    assert derived.peak.tensor_flops == default.peak.tensor_flops == 989.4e12


def test_no_flops_estimate_without_a_clock_reading():
    assert derive(synthetic(1.0, sm_clock=None, sm_active=0.9, tensor_active=0.9, tensor_hmma_active=0.9)).busy_flops is None


def test_mismatch_thresholds_from_the_config_change_the_outcome(trace_paths):
    relaxed = DeriveSettings(mismatch=MismatchThresholds(high_utilization=0.8, low_sm_active=0.005, low_work_activity=0.0, low_efficiency_utilization=0.5, low_efficiency_ratio=0.005))
    for sample in steady_samples(trace_paths["spin_1sm"]):
        assert derive(sample, relaxed).mismatch == {"high_util_low_sm": False, "low_efficiency": False, "high_util_low_work": False}
    strict = DeriveSettings(mismatch=MismatchThresholds(low_efficiency_ratio=0.99))
    for sample in steady_samples(trace_paths["matmul_8192"]):  # efficiency ~0.96
        assert derive(sample, strict).mismatch == {"high_util_low_sm": False, "low_efficiency": True, "high_util_low_work": False}


def test_bottleneck_thresholds_from_the_config_change_the_outcome(trace_paths):
    duty50 = steady_samples(trace_paths["matmul_8192_duty50"])
    lower_host = DeriveSettings(bottleneck=BottleneckThresholds(host_utilization=0.4))
    assert {derive(s, lower_host).bottleneck for s in duty50} == {"underfilled"}  # busy enough, tensor 0.44 < 0.5
    fewer_sms = DeriveSettings(bottleneck=BottleneckThresholds(host_utilization=0.4, underfilled_sm_active=0.4))
    assert {derive(s, fewer_sms).bottleneck for s in duty50} == {"compute"}  # tensor 0.44 >= compute_pipe 0.2
    higher_pipe = DeriveSettings(bottleneck=BottleneckThresholds(host_utilization=0.4, underfilled_sm_active=0.4, compute_pipe=0.5))
    assert {derive(s, higher_pipe).bottleneck for s in duty50} == {"mixed"}
    lower_host = DeriveSettings(bottleneck=BottleneckThresholds(host_utilization=0.1))  # tiny_kernels: busy 0.14-0.28, SM 0.0003
    assert {derive(s, lower_host).bottleneck for s in steady_samples(trace_paths["tiny_kernels"])} == {"underfilled"}
    higher_idle = DeriveSettings(bottleneck=BottleneckThresholds(idle_utilization=0.3))  # idle needs no kernel at all, whatever the threshold
    assert {derive(s, higher_idle).bottleneck for s in steady_samples(trace_paths["tiny_kernels"])} == {"host"}


def test_latency_bound():
    """Every SM holds one warp (SM activity fooled), occupancy 1/64, pipes and DRAM idle."""
    sample = synthetic(1.0, sm_active=0.9996, sm_occupancy=0.0156, tensor_active=0.0, fp32_active=0.0, fp16_active=0.0,
                       fp64_active=0.0, integer_active=0.0, dram_active=0.0)
    derived = derive(sample)
    assert derived.bottleneck == "latency"
    assert derived.mismatch == {"high_util_low_sm": False, "low_efficiency": False, "high_util_low_work": True}  # busy, nothing near any roof


def test_communication_bound():
    nvlink_peak = 450e9
    sample = synthetic(1.0, sm_active=0.1, sm_occupancy=0.02, tensor_active=0.0, dram_active=0.05,
                       nvlink_tx_bytes_per_second=0.4 * nvlink_peak, nvlink_rx_bytes_per_second=0.1 * nvlink_peak)
    assert derive(sample).bottleneck == "communication"


def test_pcie_traffic_counts_as_communication_too():
    sample = synthetic(1.0, sm_active=0.1, dram_active=0.0, pcie_rx_bytes_per_second=0.5 * 64e9)
    assert derive(sample).bottleneck == "communication"


def test_below_its_roof_a_link_is_the_work_where_it_is_the_busiest_unit():
    """Few SMs active: a link at a tenth or more of its peak, above every pipe and DRAM, is what the GPU
    does (NCCL's point-to-point transfers): communication; below that floor, or with a math pipe
    busier than the link, the few SMs are the story: underfilled."""
    def judged(link: float, sm_active: float = 0.1, **readings: float) -> str:
        sample = synthetic(1.0, sm_active=sm_active, dram_active=readings.pop("dram_active", 0.0), nvlink_tx_bytes_per_second=link * 450e9, **readings)
        return derive(sample).bottleneck

    assert judged(0.12) == "communication" and judged(0.05) == "underfilled"
    assert judged(0.12, sm_active=0.3, fp32_active=0.2) == "underfilled" and judged(0.12, dram_active=0.15) == "underfilled"


def zero_copy(pcie_rx: float = 0.0, pcie_tx: float = 0.0, **readings: float) -> GpuSample:
    """A kernel reading (rx) or writing (tx) pinned host memory directly, as issue 43 saw it live on an
    H200: every SM holds warps (SM activity 0.99, occupancy 0.85) that wait on PCIe, DRAM and every pipe idle."""
    profiling = {"sm_active": 0.99, "sm_occupancy": 0.85, "graphics_active": 0.99, "tensor_active": 0.0, "fp32_active": 0.02, "fp64_active": 0.0,
                 "fp16_active": 0.0, "integer_active": 0.03, "dram_active": 0.01, **readings}
    return synthetic(0.99, pcie_rx_bytes_per_second=pcie_rx, pcie_tx_bytes_per_second=pcie_tx, **profiling)


@pytest.mark.parametrize(("rx", "tx"), [(56e9, 1e9), (1e9, 60e9)])
def test_a_link_at_its_roof_is_communication_whatever_the_sm_share(rx, tx):
    """Zero-copy reads (PCIe rx 56 GB/s of 64) or writes (tx 60): the link is the only unit near a roof,
    and the warps are resident because they wait on it. Before, the communication rules asked for SM
    activity below 0.5 and the GPU read mixed."""
    derived = derive(zero_copy(rx, tx))
    assert derived.bottleneck == "communication"
    assert not any(derived.mismatch.values())  # the link works near its roof: nothing is wasted


def test_a_link_below_its_roof_that_is_the_only_unit_working_is_communication():
    """Issue 43's zero-copy gather live on an H200: random 512-byte rows of a pinned host table read
    by every SM's warps, PCIe rx 34 GB/s (0.53 of the peak: each row waits a round trip, latency-bound
    on the link), SM activity 0.93, occupancy 0.92, every pipe 0, DRAM 0.007 (the rows written into
    device memory). The link is the only unit doing work, so the warps wait on it: communication, not
    mixed. A math pipe or DRAM doing a tenth of its peak beside it is work the link does not explain:
    mixed or memory_latency, as without the link."""
    gather = {"sm_active": 0.93, "sm_occupancy": 0.92, "graphics_active": 0.99, "fp32_active": 0.0, "integer_active": 0.002, "dram_active": 0.0066}
    derived = derive(zero_copy(33.96e9, 3.88e9, **gather))
    assert derived.bottleneck == "communication" and not any(derived.mismatch.values())
    assert derive(zero_copy(0.4 * 64e9)).bottleneck == "communication"
    assert derive(zero_copy(0.09 * 64e9)).bottleneck == "mixed"  # below a tenth of its peak the link does nothing either
    assert derive(zero_copy(0.4 * 64e9, fp32_active=0.12)).bottleneck == "mixed"
    assert derive(zero_copy(0.4 * 64e9, dram_active=0.12)).bottleneck == "memory_latency"
    assert derive(zero_copy(0.4 * 64e9, sm_occupancy=0.05)).bottleneck == "latency"  # too few warps in flight: more would read more


@pytest.mark.parametrize(("readings", "expected"), [({"tensor_active": 0.8, "tensor_hmma_active": 0.8}, "compute"), ({"dram_active": 0.7}, "memory")])
def test_a_link_at_its_roof_beside_a_pipe_or_dram_at_theirs_keeps_their_class(readings, expected):
    """A GEMM or a copy at its own roof while the link is busy too: the GPU's own units are the limit."""
    assert derive(zero_copy(56e9, **readings)).bottleneck == expected


def test_the_link_roof_is_each_units_share_of_its_own_practical_roof():
    """0.8 of the link's practical roof (0.9 of its peak) is 0.72 of 64 GB/s: 46 GB/s on PCIe Gen5 x16,
    23 on Gen4; the same nearness on every card and link."""
    beside = {"tensor_active": 0.5, "tensor_hmma_active": 0.5}  # a math pipe at half its roof: compute below the link's roof
    assert derive(zero_copy(0.73 * 64e9, **beside)).bottleneck == "communication"
    assert derive(zero_copy(0.71 * 64e9, **beside)).bottleneck == "compute"


def test_link_traffic_of_an_unknown_model_cannot_be_judged():
    unknown = dataclasses.replace(synthetic(1.0, sm_active=0.1, nvlink_tx_bytes_per_second=400e9), device=dataclasses.replace(H200, name="NVIDIA Imaginary X1"))
    assert derive(unknown).bottleneck == "underfilled"


def test_mixed_is_fed_and_active_with_no_unit_near_its_roof():
    """Neither a pipe nor DRAM does meaningful work (on-chip memory, issue, synchronisation)."""
    sample = synthetic(1.0, sm_active=0.9, sm_occupancy=0.3, tensor_active=0.1, fp32_active=0.15, dram_active=0.05)
    assert derive(sample).bottleneck == "mixed"


def test_a_job_that_moves_bytes_below_the_dram_roof_is_memory_latency_and_at_it_memory():
    """Elementwise/optimizer-like kernels with no meaningful math: at DRAM 0.5 the SMs wait on memory
    without filling its bandwidth (memory_latency); at 0.7 they fill it (memory); at 0.05 memory is
    not where they wait (mixed)."""
    def streaming(dram: float) -> str:
        return derive(synthetic(1.0, graphics_active=1.0, sm_active=0.9, sm_occupancy=0.5, tensor_active=0.0, fp32_active=0.08, dram_active=dram)).bottleneck

    assert (streaming(0.5), streaming(0.7), streaming(0.05)) == ("memory_latency", "memory", "mixed")


def test_large_batch_training_is_compute_though_dram_is_busier_than_the_tensor_pipe():
    """The H100 Llama step: SM 0.88, occupancy 0.44, tensor 0.33, DRAM 0.47 (far from its ~0.8 roof)."""
    sample = synthetic(0.97, graphics_active=0.97, sm_active=0.88, sm_occupancy=0.44, tensor_active=0.33, fp32_active=0.02, dram_active=0.47)
    assert derive(sample).bottleneck == "compute"


def test_memory_beats_compute_when_dram_is_busier():
    sample = synthetic(1.0, sm_active=0.95, tensor_active=0.6, dram_active=0.8)
    assert derive(sample).bottleneck == "memory"


def test_unknown_when_busy_without_profiling():
    sample = synthetic(0.95)
    derived = derive(sample)
    assert derived.bottleneck == "unknown"
    assert derived.efficiency is None and derived.mismatch == {} and derived.busy_flops is None


def test_without_profiling_the_coarse_classes_still_work():
    assert derive(synthetic(0.03)).bottleneck == "host"  # an engine had work: a starved job, not an idle GPU
    assert derive(synthetic(0.5)).bottleneck == "host"


def test_idle_only_where_a_window_says_no_kernel_ran():
    """Utilization's whole-percent driver samples read 0 beside short kernels: only SM activity (or
    the engine's) of exactly 0 says no kernel ran."""
    assert derive(synthetic(0.0)).bottleneck == "unknown"
    assert derive(synthetic(0.0, sm_active=0.0)).bottleneck == "idle"
    assert derive(synthetic(None, graphics_active=0.0)).bottleneck == "idle"
    assert derive(synthetic(0.0, sm_active=0.0001)).bottleneck == "host"


def test_unknown_without_any_busy_figure():
    assert derive(synthetic(None)).bottleneck == "unknown"


def test_mig_like_sample_uses_graphics_activity_as_busy():
    """A MIG slice has no coarse utilization; GR-engine activity stands in."""
    sample = synthetic(None, graphics_active=0.95, sm_active=0.93, sm_occupancy=0.14, tensor_active=0.9, dram_active=0.17)
    derived = derive(sample)
    assert derived.busy == 0.95
    assert derived.efficiency == pytest.approx(0.93 / 0.95)
    assert derived.bottleneck == "compute"
    spinning = synthetic(None, graphics_active=1.0, sm_active=0.0076, sm_occupancy=0.0001, tensor_active=0.0, dram_active=0.0)
    derived = derive(spinning)
    assert derived.bottleneck == "underfilled"
    assert derived.mismatch == {"high_util_low_sm": True, "low_efficiency": True, "high_util_low_work": True}


# --- the Integrator ---------------------------------------------------------------------------------


def integrate_all(samples: list[GpuSample], max_gap: float = 10.0, price: float | None = None) -> Totals:
    totals = Totals()
    for sample in samples:
        totals, _ = integrate(totals, sample, derive(sample) if sample.up else None, max_gap, price)
    return totals


def spin_at_fake_clock(trace_paths, count: int, step: float = 0.5, start: float = 100.0) -> list[GpuSample]:
    records = load_trace(trace_paths["spin_1sm"]).samples[1:]
    return [sample_from_record(H200, records[i % len(records)], start + i * step, 0.5) for i in range(count)]


def test_busy_idle_seconds_of_one_thread_on_one_sm(trace_paths):
    samples = spin_at_fake_clock(trace_paths, 21)  # 20 intervals of 0.5 s
    totals = integrate_all(samples)
    elapsed = 10.0
    assert totals.busy_idle_sm_seconds == pytest.approx((1 - 0.0076) * elapsed, rel=0.001)
    assert totals.busy_seconds == pytest.approx(elapsed, rel=0.001)  # the engine's activity, 0.9995
    assert totals.sm_active_seconds == pytest.approx(0.0076 * elapsed, rel=0.01)
    assert totals.busy_seconds == pytest.approx(totals.sm_active_seconds + totals.busy_idle_sm_seconds)
    assert totals.busy_idle_sm_cost == 0.0  # no price configured


def test_busy_idle_is_the_integral_of_util_minus_sm_active(trace_paths):
    samples = steady_samples(trace_paths["matmul_8192_duty50"])
    totals = integrate_all(samples)
    expected = sum(max(0.0, s.profiling.graphics_active - s.profiling.sm_active) * (s.timestamp - p.timestamp) for p, s in zip(samples, samples[1:]))
    assert totals.busy_idle_sm_seconds == pytest.approx(expected)
    assert totals.busy_idle_sm_seconds > 0


def test_sm_activity_above_utilization_wastes_nothing():
    samples = [synthetic(0.5, sm_active=0.9).replace(timestamp=t) for t in (0.0, 1.0, 2.0)]
    assert integrate_all(samples).busy_idle_sm_seconds == 0.0


def test_cost_at_the_configured_price(trace_paths):
    samples = spin_at_fake_clock(trace_paths, 21)
    totals = integrate_all(samples, price=3.6)
    assert totals.busy_idle_sm_cost == pytest.approx(totals.busy_idle_sm_seconds * 3.6 / 3600)
    assert totals.busy_idle_sm_cost == pytest.approx((1 - 0.0076) * 10 / 1000, rel=0.001)


def test_a_gap_longer_than_max_gap_is_not_integrated(trace_paths):
    before = spin_at_fake_clock(trace_paths, 5, start=0.0)  # 2 s observed
    after = spin_at_fake_clock(trace_paths, 5, start=100.0)  # a 98 s hole, then 2 s observed
    totals = integrate_all(before + after, max_gap=5.0)
    assert totals.busy_seconds == pytest.approx(4.0, rel=0.001)


def test_a_down_sample_resets_the_integration(trace_paths):
    samples = spin_at_fake_clock(trace_paths, 10, start=0.0)
    samples[5] = down_sample(H200, samples[5].timestamp)
    totals = integrate_all(samples, max_gap=60.0)
    # Intervals 0-1..3-4 (4) and 6-7..8-9 (3): neither 4-5, 5-6 (down) nor anything across the outage.
    assert totals.busy_seconds == pytest.approx(7 * 0.5, rel=0.001)


def test_time_going_backwards_is_not_integrated():
    samples = [synthetic(1.0, sm_active=0.001).replace(timestamp=t) for t in (5.0, 4.0, 4.0, 5.0)]
    assert integrate_all(samples).busy_idle_sm_seconds == pytest.approx(0.999)


def test_integrate_returns_the_new_totals_and_what_they_grew_by():
    first, second = (synthetic(1.0, sm_active=0.25).replace(timestamp=t) for t in (0.0, 2.0))
    start, growth = integrate(Totals(), first, derive(first), 10.0)
    assert growth == Growth() and start.last_timestamp == 0.0
    after, growth = integrate(start, second, derive(second), 10.0)
    assert start == Totals(last_timestamp=0.0)  # the totals given are not changed
    assert growth == Growth(busy_seconds=2.0, sm_active_seconds=0.5, busy_idle_sm_seconds=1.5, state="busy_not_working", elapsed=2.0)
    assert (after.busy_seconds, after.sm_active_seconds, after.busy_idle_sm_seconds, after.last_timestamp) == (2.0, 0.5, 1.5, 2.0)


def test_integrate_carries_every_total_it_does_not_grow():
    """integrate names every field of the new Totals: one it does not integrate (the cross-GPU
    stage's peer wait, the energy split's joules) comes through a poll as it was, and a field added
    to Totals without a line there fails here instead of restarting at its default every poll."""
    first, second = (synthetic(1.0, sm_active=0.25).replace(timestamp=t) for t in (0.0, 2.0))
    given = Totals(**{field.name: value for field, value in zip(dataclasses.fields(Totals), (3.0, 2.0, (1.0,) * 8, 1.5, 0.5, 0.25, 0.0, 7.0, (2.0,) * 6, (0.5,) * 6, (9.0,) * 6), strict=True)})
    grown, _ = integrate(given, second, derive(second), 10.0)
    carried = {field.name for field in dataclasses.fields(Totals)} - {"busy_seconds", "sm_active_seconds", "pipe_active_seconds", "dram_active_seconds", "busy_idle_sm_seconds", "busy_idle_sm_cost", "last_timestamp", "state_seconds", "state_cost"}
    assert carried == {"peer_wait_seconds", "state_joules"}
    assert all(getattr(grown, name) == getattr(given, name) for name in carried)
    assert grown == dataclasses.replace(given, busy_seconds=5.0, sm_active_seconds=2.5, busy_idle_sm_seconds=2.0, last_timestamp=2.0,
                                        pipe_active_seconds=grown.pipe_active_seconds, dram_active_seconds=grown.dram_active_seconds, state_seconds=grown.state_seconds)
    assert integrate(given, first, derive(first), 10.0)[0] == dataclasses.replace(given, last_timestamp=0.0)


def test_each_pipe_and_dram_active_seconds_are_each_windows_activity_times_its_length(trace_paths):
    """The activity counters add each window's mean times its length: over the recorded duty-cycled
    matmul (windows swinging between busy and idle) their rise is the windows' exact integral, so
    rate() over any range reads the range's mean activity whatever the scrape interval."""
    from gpueff.pipeline.totals import PIPE_SECONDS

    samples = steady_samples(trace_paths["matmul_8192_duty50"])
    totals = integrate_all(samples)
    pairs = list(zip(samples, samples[1:]))
    for (label, field), total in zip(PIPE_SECONDS, totals.pipe_active_seconds, strict=True):
        expected = sum((getattr(s.profiling, field) or 0.0) * (s.timestamp - p.timestamp) for p, s in pairs)
        assert total == pytest.approx(expected), label
    hmma = dict(zip((label for label, _ in PIPE_SECONDS), totals.pipe_active_seconds, strict=True))["tensor_hmma"]
    span = samples[-1].timestamp - samples[0].timestamp
    assert 0.3 < hmma / span < 0.6  # the 50 % duty cycle's mean HMMA activity (0.45 recorded)
    assert totals.dram_active_seconds == pytest.approx(sum(s.profiling.dram_active * (s.timestamp - p.timestamp) for p, s in pairs))


def test_no_busy_idle_without_sm_activity():
    samples = [synthetic(1.0).replace(timestamp=t) for t in (0.0, 1.0, 2.0)]
    totals = integrate_all(samples)
    assert totals.busy_seconds == pytest.approx(2.0)
    assert totals.busy_idle_sm_seconds == 0.0 and totals.sm_active_seconds == 0.0


def test_a_peaks_override_matches_the_model_name_as_the_built_in_table_does(trace_paths):
    """Model names match case-insensitively and without surrounding blanks, for overrides too."""
    sample = steady_samples(trace_paths["copy_2GB"])[0]
    for written in ("nvidia h200", " NVIDIA H200 ", "NVIDIA H200"):
        derived = derive(sample, DeriveSettings(peaks={written: PeakOverride(dram_tbps=2.4)}))
        assert derived.peak.dram_bytes_per_second == 2.4e12, written


def test_the_integer_pipe_alone_is_no_compute():
    """A random embedding gather on an H100: INTEGER_UTIL 0.57 is address arithmetic, DRAM 0.51, no float math."""
    gather = synthetic(0.99, graphics_active=0.99, sm_active=0.94, sm_occupancy=0.52, tensor_active=0.0, fp32_active=0.012, integer_active=0.57, dram_active=0.51)
    assert derive(gather).bottleneck == "memory_latency"  # below the DRAM roof: H200 moves the same bytes/s at 0.38
    no_dram = synthetic(0.99, graphics_active=0.99, sm_active=0.94, sm_occupancy=0.52, tensor_active=0.0, fp32_active=0.01, integer_active=0.9, dram_active=0.05)
    assert derive(no_dram).bottleneck == "mixed"


def test_each_pipe_is_counted_at_its_own_rate_and_clock():
    """H200, 132 SMs at 1485 MHz: HMMA 4096 FLOP/clk/SM, IMMA 8192, DMMA and FP32 256 (the data sheet's
    989.4 / 1978.9 quoted at 1830 MHz, 66.9 at 1980)."""
    sample = synthetic(1.0, sm_clock=1485, sm_active=0.9, tensor_active=0.6, tensor_hmma_active=0.1, tensor_dfma_active=0.3, tensor_imma_active=0.2, fp32_active=0.4)
    derived = derive(sample)
    per_sm_clock = 132 * 1485e6
    assert derived.pipe_busy.hmma_bf16_equivalent == pytest.approx(0.1 * 4096 * per_sm_clock, rel=1e-3)
    assert derived.pipe_busy.dmma_fp64 == pytest.approx(0.3 * 256 * per_sm_clock, rel=1e-3)
    assert derived.pipe_busy.imma_int8 == pytest.approx(0.2 * 8192 * per_sm_clock, rel=1e-3)
    assert derived.pipe_busy.fp32 == pytest.approx(0.4 * 256 * per_sm_clock, rel=1e-3)
    assert derived.pipe_busy.fp64 is None and derived.pipe_busy.fp16 is None  # not read
    assert derived.busy_flops == pytest.approx((0.1 * 4096 + 0.3 * 256 + 0.4 * 256) * per_sm_clock, rel=1e-3)  # INT8 ops are not FLOP
    factor = 1485 / 1980
    assert derived.peak_share.dmma_fp64 == pytest.approx(0.3 * factor) and derived.peak_share.imma_int8 == pytest.approx(0.2 * factor)


def test_no_tensor_estimate_without_the_sub_pipe_split():
    """DCGM's single pass reads the any-tensor activity only: it cannot say FP64 from BF16, so no figure."""
    derived = derive(synthetic(1.0, sm_active=0.95, tensor_active=0.95))
    assert derived.pipe_busy.hmma_bf16_equivalent is None and derived.pipe_busy.dmma_fp64 is None and derived.busy_flops is None
    assert derived.bottleneck == "compute"


def test_a_mig_device_is_counted_at_its_share_of_the_gpus_rate():
    """A 3g.71gb instance of an H200 (60 of 132 SMs): its busy FLOP/s at 60 x 4096 FLOP per clock."""
    mig = dataclasses.replace(H200, name="NVIDIA H200 MIG 3g.71gb", uuid="MIG-h200-3g", sm_count=60)
    sample = dataclasses.replace(synthetic(1.0, sm_clock=1500, sm_active=0.9, tensor_active=0.5, tensor_hmma_active=0.5, dram_active=0.3), device=mig)
    derived = derive(sample)
    assert derived.pipe_busy.hmma_bf16_equivalent == pytest.approx(0.5 * 60 * 4096 * 1500e6, rel=1e-3)
    assert derived.dram_bytes_per_second is None  # its memory slices' bandwidth is not derived from the name


def test_busy_with_nothing_near_any_roof_is_flagged_though_sm_activity_is_high():
    """The batch-1 LSTM cell from a CUDA graph, live on an H200: utilization 0.99, SM 0.60, occupancy
    0.14, tensor 0.002, FP32 0.033, DRAM 0.001, integer 0.15 (address and loop arithmetic, no work):
    neither SM rule can fire, the third does; its weights live in L2, which no counter sees: mixed."""
    lstm = synthetic(0.99, graphics_active=0.997, sm_active=0.60, sm_occupancy=0.14, tensor_active=0.002, tensor_hmma_active=0.002,
                     fp32_active=0.033, fp16_active=0.0, fp64_active=0.0, integer_active=0.15, dram_active=0.001)
    derived = derive(lstm)
    assert derived.mismatch == {"high_util_low_sm": False, "low_efficiency": False, "high_util_low_work": True}
    assert derived.bottleneck == "mixed"
    working = derive(dataclasses.replace(lstm, profiling=dataclasses.replace(lstm.profiling, fp32_active=0.12)))
    assert working.mismatch["high_util_low_work"] is False  # a math pipe at a tenth of its roof is work


def test_a_point_estimate_only_where_the_pipe_carrying_the_work_is_busy_a_quarter_of_the_active_cycles():
    """Both readings are shares of cycles: the same test on every card. A GEMM's tensor pipe at 0.9 of
    0.95 active: the busy figure is the estimate; a skinny GEMV's at 0.03 of 0.8: withheld."""
    gemm = derive(synthetic(1.0, sm_active=0.95, tensor_active=0.9, tensor_hmma_active=0.9, fp32_active=0.0))
    assert gemm.estimated_flops == gemm.busy_flops and gemm.busy_flops
    skinny = derive(synthetic(1.0, sm_active=0.8, tensor_active=0.03, tensor_hmma_active=0.03, fp32_active=0.0, dram_active=0.8))
    assert skinny.busy_flops and skinny.estimated_flops is None
    # the pipe carrying most busy FLOP decides: FP32 at 0.3 of 0.9 active beside a tensor trickle
    fp32_conv = derive(synthetic(1.0, sm_active=0.9, tensor_active=0.003, tensor_hmma_active=0.003, fp32_active=0.3))
    assert fp32_conv.estimated_flops == fp32_conv.busy_flops
    # a tensor pipe at 0.2 carries more busy FLOP than FP32 at 0.3: it decides, and withholds
    assert derive(synthetic(1.0, sm_active=0.9, tensor_active=0.2, tensor_hmma_active=0.2, fp32_active=0.3)).estimated_flops is None
    assert derive(synthetic(1.0, sm_active=0.0, tensor_active=0.0, tensor_hmma_active=0.0)).estimated_flops is None


GEMM = {"sm_active": 0.95, "tensor_active": 0.9, "tensor_hmma_active": 0.9, "fp32_active": 0.0}


@pytest.mark.parametrize(("reasons", "estimated"), [(0, True), (0x1, True), (0x2, True), (0x10, True), (0x100, True),
                                                    (0x4, False), (0x8, False), (0x20, False), (0x40, False), (0x80, False), (0x4 | 0x1, False), (None, False)])
def test_no_point_estimate_while_a_power_or_thermal_limit_holds_the_clocks(reasons, estimated):
    """Under a power or thermal limit the SM clock read is the controller's setting, not the SMs' rate
    (an H200 at its 700 W cap: 1525 MHz read, 1378 counted by the SMs' own cycle counter): the busy
    figure stays (an upper bound), the point estimates go, INT8's too; where the reasons are not read,
    nothing says the clock is the SMs'. Idle, the application clocks, sync boost and the display
    clock hold no limit that moves the SMs' rate off the reading."""
    gemm = derive(dataclasses.replace(synthetic(1.0, **GEMM), clock_event_reasons=reasons))
    assert gemm.busy_flops and (gemm.estimated_flops == gemm.busy_flops if estimated else gemm.estimated_flops is None)
    int8 = derive(dataclasses.replace(synthetic(1.0, sm_active=0.95, tensor_active=0.74, tensor_imma_active=0.74), clock_event_reasons=reasons))
    assert (int8.estimated_int8_ops is not None) is estimated


def test_the_estimate_stays_withheld_for_the_class_window_after_the_limit_last_held_the_clocks():
    """A reading at the power cap withholds the estimate for bottleneck.window (5 s), so a duty cycle's
    busy windows (capped) and idle ones (not) do not alternate between absent and 0; no limit on any
    reading of the last 5 s: the estimate is back."""
    state, estimates = Smoothing(), []
    for second in range(1, 13):
        reasons = 0x4 if second in (3, 4) else 0
        sample = dataclasses.replace(synthetic(1.0, **GEMM), timestamp=float(second), clock_event_reasons=reasons)
        derived, state = step(sample, DeriveSettings(), state)
        assert state is not None
        estimates.append(derived.estimated_flops is not None)
    assert estimates == [True, True, False, False, False, False, False, False, False, True, True, True]


def test_int8_is_estimated_at_the_mma_sync_rate_and_only_where_that_rate_is_measured():
    int8 = derive(synthetic(1.0, sm_active=0.95, tensor_active=0.74, tensor_imma_active=0.74))
    assert int8.estimated_int8_ops == pytest.approx(int8.pipe_busy.imma_int8 * 2 / 3)  # Hopper: 2/3 of the wgmma figure
    assert int8.estimated_flops is None  # INT8 ops are not FLOP
    blackwell = dataclasses.replace(synthetic(1.0, sm_active=0.95, tensor_active=0.74, tensor_imma_active=0.74), device=dataclasses.replace(H200, name="NVIDIA B200", sm_count=148))
    assert derive(blackwell).pipe_busy.imma_int8 and derive(blackwell).estimated_int8_ops is None
    ampere = dataclasses.replace(synthetic(1.0, sm_active=0.95, tensor_active=0.74, tensor_imma_active=0.74), device=dataclasses.replace(H200, name="NVIDIA A100-SXM4-80GB", sm_count=108))
    assert derive(ampere).estimated_int8_ops == pytest.approx(derive(ampere).pipe_busy.imma_int8)  # the data sheet quotes mma.sync


def test_no_point_estimate_while_the_counters_are_implausible():
    derived = derive(synthetic(1.0, sm_active=0.95, tensor_active=0.9, tensor_hmma_active=0.9, sm_occupancy=0.0001, graphics_active=0.01))
    assert derived.counters_implausible and derived.estimated_flops is None


def test_profiling_frozen_at_0_is_judged_against_the_windows_utilization():
    """The check of counters that stopped counting compares them with NVML's figure over the same
    window (the driver's samples inside it), not with its latest sample alone, which can land in a
    gap of a busy window."""
    zeros = {"sm_active": 0.0, "sm_occupancy": 0.0, "tensor_active": 0.0, "fp32_active": 0.0, "dram_active": 0.0}
    frozen = dataclasses.replace(synthetic(0.3, **zeros), gpu_utilization_window=0.95)
    derived = derive(frozen)
    assert derived.implausible["profiling_zero_under_load"] and derived.bottleneck == "unknown" and not any(derived.mismatch.values())
    assert not derive(dataclasses.replace(frozen, gpu_utilization_window=0.3)).counters_implausible
