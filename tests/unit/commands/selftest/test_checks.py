"""The selftest's checking logic and table, driven by the recorded H200 traces (their `truth` field
holds each workload's own figure) and by tampered copies of them."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from repo import ROOT

from gpueff.commands.selftest.checks import CheckResult, Reading, check_readings, exit_code, window_mean
from gpueff.commands.selftest.command import readings_from_trace
from gpueff.commands.selftest.table import render
from gpueff.pipeline.derive import DeriveSettings
from gpueff.sample import DeviceInfo, GpuSample, Profiling
from gpueff.settings import parse_config
from gpueff.trace import load_trace


@pytest.fixture(scope="module")
def readings(trace_paths) -> dict[str, Reading]:
    return {name: readings_from_trace(load_trace(path)) for name, path in trace_paths.items()}


def by_check(results: list[CheckResult]) -> dict[tuple[str, str], CheckResult]:
    return {(result.workload, result.check): result for result in results}


def failed(results: list[CheckResult]) -> set[tuple[str, str]]:
    return {(result.workload, result.check) for result in results if not result.passed}


def test_recorded_h200_traces_pass_every_check(readings):
    results = check_readings(readings.values(), DeriveSettings())
    assert failed(results) == set() and exit_code(results) == 0
    checks = by_check(results)
    assert set(checks) == {
        *((name, check) for name in readings for check in ("bottleneck class", "class stability", "mismatch")),
        ("matmul_8192", "busy TFLOP/s"),
        ("matmul_8192_duty50", "busy TFLOP/s"),
        ("copy_2GB", "estimated TB/s"),
        ("spin_1sm", "SM activity"),
    }
    assert checks[("spin_1sm", "mismatch")].measured == "high_util_low_sm, low_efficiency, high_util_low_work"
    assert checks[("spin_1sm", "SM activity")].measured == "0.76% (= 1.00 SMs)"
    assert checks[("copy_2GB", "estimated TB/s")].expected == "0.9-1.1x the workload's 4.27 TB/s"
    assert checks[("matmul_8192", "bottleneck class")].measured == "compute (48/48 samples)"
    assert checks[("matmul_8192", "class stability")].measured == "100% of 46 samples, 0 changes"
    assert checks[("matmul_8192", "busy TFLOP/s")].measured == "715 TFLOP/s (+10.9%)"  # busy cycles at 4096 FLOP/clk/SM, the clock at both ends of each window


def test_a_wrong_peak_fails_the_flops_checks_only(readings):
    config = parse_config({"peaks": {"NVIDIA H200": {"tensor_tflops": 1400}}})
    results = check_readings(readings.values(), config.derive_settings)
    assert failed(results) == {("matmul_8192", "busy TFLOP/s"), ("matmul_8192_duty50", "busy TFLOP/s")}
    assert by_check(results)[("matmul_8192", "busy TFLOP/s")].measured.endswith("(+45.0%)")
    assert exit_code(results) == 1


def test_a_wrong_bandwidth_peak_fails_the_copy(readings):
    config = parse_config({"peaks": {"NVIDIA H200": {"dram_tbps": 3.35}}})  # the H100's figure
    assert failed(check_readings(readings.values(), config.derive_settings)) == {("copy_2GB", "estimated TB/s")}


def test_a_wrong_truth_fails_only_the_throughput(readings):
    tampered = Reading("copy_2GB", readings["copy_2GB"].samples, {"tbps": 4.265 * 1.2})
    results = check_readings([tampered], DeriveSettings())
    assert failed(results) == {("copy_2GB", "estimated TB/s")}
    assert by_check(results)[("copy_2GB", "estimated TB/s")].measured == "4.25 TB/s (-16.9%)"


def test_idle_readings_labelled_as_a_matmul_fail_class_and_flops(readings):
    tampered = Reading("matmul_8192", readings["idle"].samples, {"tflops": 660.9})
    results = check_readings([tampered], DeriveSettings())
    assert failed(results) == {("matmul_8192", "bottleneck class"), ("matmul_8192", "class stability"), ("matmul_8192", "busy TFLOP/s")}
    assert by_check(results)[("matmul_8192", "bottleneck class")].measured == "idle (24/24 samples)"
    assert exit_code(results) == 1


def test_a_spin_read_as_two_sms_fails_the_sm_check(readings):
    samples = copy.deepcopy(readings["spin_1sm"].samples)
    for sample in samples:
        sample.profiling = dataclasses.replace(sample.profiling, sm_active=sample.profiling.sm_active * 2)
    results = check_readings([Reading("spin_1sm", samples)], DeriveSettings())
    assert failed(results) == {("spin_1sm", "SM activity")}


def test_thresholds_that_hide_the_spin_fail_the_mismatch_check(readings):
    config = parse_config({"mismatch": {"low_sm_active": 0.005, "low_efficiency_ratio": 0.005, "low_work_activity": 0.0}})
    results = check_readings([readings["spin_1sm"]], config.derive_settings)
    assert failed(results) == {("spin_1sm", "mismatch")}
    assert by_check(results)[("spin_1sm", "mismatch")].measured == "none"


def test_a_wrong_class_from_wrong_thresholds_fails(readings):
    config = parse_config({"bottleneck": {"host_utilization": 0.4}})  # the 50 % duty cycle no longer reads as host
    results = check_readings([readings["matmul_8192_duty50"]], config.derive_settings)
    assert failed(results) == {("matmul_8192_duty50", "bottleneck class"), ("matmul_8192_duty50", "class stability")}


def test_a_gpu_without_peak_figures_fails_with_the_reason(readings):
    device = DeviceInfo(index=0, uuid="GPU-x", name="NVIDIA Mystery", sm_count=132, max_sm_clock_mhz=1980)
    samples = [sample.replace(device=device) for sample in readings["matmul_8192"].samples]
    results = check_readings([Reading("matmul_8192", samples, {"tflops": 660.9})], DeriveSettings())
    assert failed(results) == {("matmul_8192", "busy TFLOP/s")}
    assert "no peak figures" in by_check(results)[("matmul_8192", "busy TFLOP/s")].measured


def test_missing_truth_readings_and_profiling_fail(readings):
    device = readings["idle"].samples[0].device
    no_profiling = [GpuSample(device=device, timestamp=float(t), window_seconds=0.5, gpu_utilization=1.0) for t in range(4)]
    results = check_readings(
        [
            Reading("matmul_8192", readings["matmul_8192"].samples, {}),
            Reading("copy_2GB", []),
            Reading("spin_1sm", no_profiling),
            Reading("warp_every_sm", [], error="skipped: needs CuPy"),
            Reading("bogus", readings["idle"].samples),
        ],
        DeriveSettings(),
    )
    checks = by_check(results)
    assert checks[("matmul_8192", "busy TFLOP/s")].measured == "the workload measured none"
    assert checks[("copy_2GB", "readings")].measured == "none"
    assert checks[("spin_1sm", "mismatch")].measured.startswith("not available")
    assert checks[("spin_1sm", "bottleneck class")].measured == "unknown (4/4 samples)"
    assert checks[("spin_1sm", "SM activity")].measured == "not available"
    assert checks[("warp_every_sm", "run")].measured == "skipped: needs CuPy"
    assert checks[("bogus", "workload")].expected.startswith("one of idle, spin_1sm")
    assert {("matmul_8192", "bottleneck class"), ("matmul_8192", "mismatch")} <= set(checks) - failed(results)
    assert exit_code(results) == 1
    assert exit_code([]) == 1


def test_one_warp_on_every_sm_reads_as_latency_bound_and_busy_without_work():
    """No trace of it was recorded: a reading with the H200 figures of docs/gpu-facts.md (SM 99.96 %, occupancy 1.56 %)."""
    device = DeviceInfo(index=0, uuid="GPU-x", name="NVIDIA H200", sm_count=132, max_sm_clock_mhz=1980)
    profiling = {"sm_active": 0.9996, "sm_occupancy": 0.0156, "tensor_active": 0.0, "dram_active": 0.0, "fp32_active": 0.0, "integer_active": 0.01}
    samples = [GpuSample(device=device, timestamp=t * 0.5, window_seconds=0.5, gpu_utilization=1.0, sm_clock_mhz=1980, profiling=Profiling(**profiling)) for t in range(8)]
    results = check_readings([Reading("warp_every_sm", samples)], DeriveSettings())
    assert [(r.check, r.measured, r.passed) for r in results] == [("bottleneck class", "latency (8/8 samples)", True), ("class stability", "100% of 6 samples, 0 changes", True), ("mismatch", "high_util_low_work", True)]


def test_window_mean_weights_by_window():
    assert window_mean([(1.0, 10.0), (3.0, 20.0)]) == 17.5
    assert window_mean([(0.0, 10.0), (0.0, 20.0)]) == 15.0
    assert window_mean([(1.0, 10.0), (1.0, None)]) is None
    assert window_mean([]) is None


def test_text_table_is_aligned_with_header_and_summary():
    results = [
        CheckResult("matmul_8192", "busy TFLOP/s", "0.95-1.2x the workload's 661 TFLOP/s", "900 TFLOP/s (+36.2%)", False),
        CheckResult("idle", "bottleneck class", "idle", "idle (12/12 samples)", True),
    ]
    text = render(results, ["GPU: NVIDIA H200 (132 SMs), driver 580.159.04"])
    lines = text.splitlines()
    assert lines[0] == "GPU: NVIDIA H200 (132 SMs), driver 580.159.04" and lines[1] == ""
    assert lines[2].split() == ["WORKLOAD", "CHECK", "EXPECTED", "MEASURED", "RESULT"]
    assert lines[3].endswith("FAIL") and lines[4].endswith("PASS")
    starts = [line.index(cell) for line, cell in zip(lines[2:5], ("CHECK", "busy", "bottleneck"))]
    assert len(set(starts)) == 1  # the check column starts at the same place on every row
    assert lines[-1] == "1 of 2 checks FAILED"
    assert render([], []).splitlines()[-1] == "no checks ran: FAILED"


def test_markdown_table_escapes_pipes():
    results = [CheckResult("idle", "mismatch", "none", "a|b", True)]
    lines = render(results, ["GPU: x"], markdown=True).splitlines()
    assert lines[:5] == ["GPU: x  ", "", "| workload | check | expected | measured | result |", "| --- | --- | --- | --- | --- |", "| idle | mismatch | none | a\\|b | PASS |"]
    assert lines[-1] == "all 1 checks passed"


CORPUS = ROOT / "gpueff" / "traces" / "h100"


def test_a_duty_cycle_aliasing_with_the_sampling_passes_as_a_steady_host(readings):
    """On = off = 500 ms sampled every 500 ms: windows alternate 0.89 / 0.08 busy (recorded on an H100)."""
    aliased = readings_from_trace(load_trace(CORPUS / "matmul_duty_1s.json"))
    assert aliased.workload == "matmul_duty_1s"
    results = check_readings([aliased], DeriveSettings())
    assert failed(results) == set()
    assert by_check(results)[("matmul_duty_1s", "class stability")].measured.endswith("0 changes")
    # Judged window by window (no smoothing, no hysteresis) from the graphics engine's activity alone
    # (0.89 / 0.08: the driver's own samples, 0.72 / 0.12, smear the edges) the class flaps and the check says so.
    engine_only = Reading(aliased.workload, [sample.replace(gpu_utilization_window=None) for sample in aliased.samples], aliased.truth)
    flapping = check_readings([engine_only], parse_config({"bottleneck": {"window": "0s", "hold_polls": 1, "margin": 0}}).derive_settings)
    assert ("matmul_duty_1s", "class stability") in failed(flapping)


def test_a_real_training_step_passes_the_training_workloads_checks():
    """The Hugging Face Llama step recorded on an H100 (its own count: 328 TFLOP/s) as the selftest's train_step."""
    recorded = readings_from_trace(load_trace(CORPUS / "llama_train.json"))
    results = check_readings([Reading("train_step", recorded.samples, recorded.truth)], DeriveSettings())
    assert failed(results) == set()
    checks = by_check(results)
    assert checks[("train_step", "bottleneck class")].measured.startswith("compute")
    assert checks[("train_step", "mismatch")].measured == "none"
