"""Each pipe's estimate on the recorded corpus against the job's own count (its `truth`), replayed
through the poller at 1 s: FLOP/s at the precision the job runs in, never more than a pipe can do."""

from __future__ import annotations

import statistics

import pytest
from test_corpus import EXPERT_LABEL, TRACES, replayed

from exporter.pipeline.derive import PIPES
from exporter.trace import load_trace


def median(name: str, figure) -> float:
    values = [value for state in replayed(name, 1.0)[1:] if (value := figure(state.derived)) is not None]
    return statistics.median(values)


# trace -> (the estimate that counts the job's work, truth key, how far the job's own count may sit
# from it). The HMMA pipe's figure is BF16-equivalent: FP8 work reads half its FLOP, TF32 twice.
ESTIMATES = {
    "h100-fleet/matmul_fp64_8192": (lambda d: d.work.dmma_fp64, "tflops", 1.0, 0.05),
    "h100-fleet/resnet50_train_fp32": (lambda d: d.total_flops, "tflops", 1.0, 0.05),
    "h100-fleet/bert_infer_b256": (lambda d: d.total_flops, "tflops", 1.0, 0.06),
    "h100-fleet/sdpa_train_bf16": (lambda d: d.total_flops, "tflops", 1.0, 0.08),
    "h100-fleet/jax_mlp_train_bf16": (lambda d: d.total_flops, "tflops", 1.0, 0.10),
    "h100-fleet/matmul_fp8_8192": (lambda d: d.work.hmma_bf16_equivalent, "tflops", 0.5, 0.10),
    "h100-fleet/matmul_tf32_8192": (lambda d: d.work.hmma_bf16_equivalent, "tflops", 2.0, 0.10),
    "h100-fleet/embedding_bag_gather": (lambda d: d.dram_bytes_per_second, "tbps", 1.0, 0.03),
}


@pytest.mark.parametrize("name", sorted(ESTIMATES))
def test_the_estimate_matches_the_jobs_own_count(name):
    figure, key, ratio, tolerance = ESTIMATES[name]
    truth = load_trace(TRACES / f"{name}.json").truth[key] * 1e12
    assert median(name, figure) == pytest.approx(truth * ratio, rel=tolerance)


def test_an_fp64_job_claims_no_bf16_work():
    """The DMMA pipe's work is FP64 at its own peak (67 TFLOP/s on an H100 SXM), not tensor work at 989."""
    assert median("h100-fleet/matmul_fp64_8192", lambda d: d.work.hmma_bf16_equivalent) < 1e12
    assert median("h100-fleet/matmul_fp64_8192", lambda d: d.total_flops) < 67e12


def test_int8_ops_are_no_flop_and_bounded_by_the_imma_peak():
    ops = median("h100-fleet/matmul_int8_8192", lambda d: d.work.imma_int8)
    truth = load_trace(TRACES / "h100-fleet/matmul_int8_8192.json").truth["tops"] * 1e12
    assert truth <= ops <= 1978.9e12  # the pipe's active cycles at its peak rate bound the job's count
    assert median("h100-fleet/matmul_int8_8192", lambda d: d.total_flops) < 1e12


@pytest.mark.parametrize("name", sorted(name for name in EXPERT_LABEL if name.startswith("h100")))
def test_no_pipe_claims_more_than_its_peak(name):
    for state in replayed(name, 1.0):
        derived = state.derived
        for pipe, _, peak_field in PIPES:
            work, roof = getattr(derived.work, pipe), getattr(derived.peak, peak_field)
            assert work is None or work <= roof, (name, pipe, work, roof)
