"""Each figure on the recorded corpus against the job's own count (its `truth`), replayed through the
poller at 1 s. Busy FLOP/s are an upper bound of the work with a measured band per kind of job
(docs/peaks.md lists the same bands); the DRAM estimate and the non-tensor pipes are estimates."""

from __future__ import annotations

import functools
import json
import statistics
from pathlib import Path

import pytest
from repo import ROOT

from gpueff.backends.replay import ReplayBackend
from gpueff.peaks import BUILTIN_PEAKS
from gpueff.pipeline.derive import CLOCK_LIMITS, PIPES
from gpueff.poller import Poller
from gpueff.settings import Config
from gpueff.trace import load_trace
from unit.pipeline.test_derive_corpus import EXPERT_LABEL, TRACES, Clock, replayed

# The H200 device run of issue 34 (recorded 2026-11-28, the jobs' own counts in each trace's truth)
H200_LIVE = ROOT / "evidence" / "2026-11-28-h200" / "verdicts"
REAL_GPU = ROOT / "evidence"


def counted(path: Path) -> bool:
    """A recorded trace whose job counted its own FLOP or INT8 ops."""
    head = json.loads(path.read_text())
    return isinstance(head, dict) and head.get("format") == "gpu-trace/1" and bool({"tflops", "tops"} & set(head.get("truth") or {}))


# Every trace in the repository with the job's own count: the shipped corpus and the device runs.
COUNTED = sorted(path for path in (*TRACES.glob("*/*.json"), *REAL_GPU.rglob("*.json")) if counted(path))


def mean(name: str, figure) -> float:
    """The figure's mean over the replay (the job's count is a mean: a median would drop the idle halves of duty cycles)."""
    values = [value for state in replayed(name, 1.0)[1:] if (value := figure(state.derived)) is not None]
    return statistics.mean(values)


def busy(derived):
    return derived.busy_flops


def imma(derived):
    return derived.pipe_busy.imma_int8


# kind of job -> (its traces, the band of busy figure / the job's own count). The HMMA pipe counts at
# the BF16 rate, so FP8 work reads half and TF32 work twice: those bands are scaled by 0.5 and 2.
BANDS = {
    "large GEMM (wgmma; DMMA for FP64)": (("h100/matmul_8192", "h200/matmul_8192", "h100-fleet/matmul_fp64_8192"), (1.0, 1.12)),
    "large GEMM at FP8 (reads half)": (("h100-fleet/matmul_fp8_8192",), (0.5, 0.56)),
    "large GEMM at TF32 (reads twice)": (("h100-fleet/matmul_tf32_8192",), (2.0, 2.24)),
    "duty-cycled GEMM (clock swings inside a window)": (("h100/matmul_duty_50ms", "h100/matmul_duty_140ms", "h100/matmul_duty_250ms", "h100/matmul_duty_1s",
                                                          "h100/matmul_duty_2s", "h200/matmul_8192_duty50"), (1.0, 1.2)),
    "transformer training, attention": (("h100/llama_train", "h100/llama_train_starved", "h100-fleet/jax_mlp_train_bf16", "h100-fleet/sdpa_train_bf16"), (1.0, 1.1)),
    # FlopCounterMode's count; its busy tensor cycles at the SMs' counted clock still do 0.91 of the rate (evidence/2026-12-01-h200/truth-round-four)
    "vision transformer training, bf16 (timm ViT-B/16, power-capped)": (("h200-live/vit_b16_train_bf16",), (1.15, 1.25)),
    "transformer inference, batched": (("h100-fleet/bert_infer_b256", "h100-fleet/bert_infer_b1", "h100/llama_generate_b64", "h200-live/llama_prefill"), (0.97, 1.12)),
    "FP32 convolutions (FP32 pipe)": (("h100-fleet/resnet50_train_fp32",), (0.95, 1.1)),
    "bf16 convolutions (cuDNN)": (("h100-fleet/resnet50_train_bf16", "h200-live/resnet50_train_bf16"), (1.2, 1.4)),
    "bf16 convolutions, starved (short bursts)": (("h200-live/resnet18_starved",), (1.3, 1.7)),
    "skinny GEMM, batch 8 (a decode projection)": (("h200-live/matmul_skinny_b8",), (1.0, 1.2)),
    "batch-1 recurrent cell from a CUDA graph (TF32 GEMVs)": (("h200-live/lstm_graph_b1",), (2.5, 3.5)),
    "skinny decode GEMMs (batch 1: padded tiles)": (("h100/graph_decode_b1", "h100/llama_generate_b1"), (4.0, 10.0)),
    # Multi-GPU jobs (h200-jobs/), each rank against its own count: GEMMs sharing the SMs with NCCL's kernels.
    "large GEMM beside NCCL collectives, per rank": (tuple(f"h200-jobs/{size}gpu_{phase}_gpu{gpu}" for size in (2, 4) for gpu in range(size) for phase in (
        "allreduce_overlap", "rs_ag_overlap", "alltoall_overlap", "sendrecv_overlap", "pipeline", "straggler")), (1.05, 1.17)),
    "MLP training under DDP, per rank": (tuple(f"h200-jobs/{size}gpu_ddp_gpu{gpu}" for size in (2, 4) for gpu in range(size)), (0.94, 1.06)),
}


@pytest.mark.parametrize("kind", sorted(BANDS))
def test_busy_flops_sit_in_their_measured_band(kind):
    traces, (low, high) = BANDS[kind]
    for name in traces:
        ratio = mean(name, busy) / (load_trace(TRACES / f"{name}.json").truth["tflops"] * 1e12)
        assert low <= ratio <= high, (name, ratio)


def test_int8_on_hopper_reads_the_wgmma_rate_for_mma_sync_work():
    """cuBLASLt's INT8 GEMM keeps IMMA busy at 2/3 of the wgmma rate: the busy figure is 1.5x its count."""
    ratio = mean("h100-fleet/matmul_int8_8192", imma) / (load_trace(TRACES / "h100-fleet/matmul_int8_8192.json").truth["tops"] * 1e12)
    assert ratio == pytest.approx(1.5, abs=0.05)
    assert mean("h100-fleet/matmul_int8_8192", busy) < 1e12  # INT8 ops are no FLOP


def busy_over_count(path: Path, figure, key: str) -> float:
    """A recorded trace replayed through the poller at 1 s: the figure's mean over the job's own count."""
    trace, clock = load_trace(path), Clock()
    backend = ReplayBackend([trace], clock=clock)
    poller = Poller(backend, Config(collect_interval=1.0), clock=clock)
    poller._devices = backend.start()
    values = []
    for _ in range(round(trace.loop_seconds)):
        clock.now += 1.0
        if (value := figure(poller.poll_once().gpus[0].derived)) is not None:
            values.append(value)
    return statistics.mean(values[1:]) / (trace.truth[key] * 1e12)


def test_int8_on_the_mma_sync_path_does_two_thirds_of_the_same_cards_bf16_gemm_per_busy_cycle():
    """torch._int_mm (cuBLASLt's Ampere-era kernel) against a cuBLAS bf16 GEMM (wgmma) on the same card:
    the per-busy-cycle yield differs with the card's clock and power cap (H100 0.67 and 0.98, H200 0.61
    and 0.90), its ratio does not: 2/3 on both, the mma.sync path's rate."""
    h100 = busy_over_count(TRACES / "h100/matmul_8192.json", busy, "tflops") / busy_over_count(TRACES / "h100-fleet/matmul_int8_8192.json", imma, "tops")
    h200 = busy_over_count(H200_LIVE / "matmul_8192.json", busy, "tflops") / busy_over_count(H200_LIVE / "matmul_int8_8192.json", imma, "tops")
    assert h100 == pytest.approx(2 / 3, rel=0.05) and h200 == pytest.approx(2 / 3, rel=0.05)


def test_every_trace_with_a_count_has_a_band():
    banded = {name for traces, _ in BANDS.values() for name in traces} | {"h100-fleet/matmul_int8_8192"}
    counted = {str(path.relative_to(TRACES))[:-5] for path in TRACES.glob("*/*.json") if {"tflops", "tops"} & set(load_trace(path).truth)}
    assert counted == banded


@pytest.mark.parametrize("name", ["h200/copy_2GB", "h100-fleet/embedding_bag_gather", "h100/graph_decode_b1", "h100/llama_generate_b1"])
def test_the_dram_estimate_matches_the_jobs_own_count(name):
    truth = load_trace(TRACES / f"{name}.json").truth["tbps"] * 1e12
    assert mean(name, lambda d: d.dram_bytes_per_second) == pytest.approx(truth, rel=0.05)


def test_the_dram_estimate_of_eager_generate_counts_the_kv_cache_rewrites_the_job_leaves_out():
    """The job counts weights + one read of the KV cache; the dynamic cache's torch.cat rewrites it each step."""
    truth = load_trace(TRACES / "h100/llama_generate_b64.json").truth["tbps"] * 1e12
    assert 1.0 < mean("h100/llama_generate_b64", lambda d: d.dram_bytes_per_second) / truth < 1.5


def test_the_fp32_pipe_estimate_matches_an_fp32_job():
    truth = load_trace(TRACES / "h100-fleet/resnet50_train_fp32.json").truth["tflops"] * 1e12
    assert mean("h100-fleet/resnet50_train_fp32", lambda d: d.pipe_busy.fp32) == pytest.approx(truth, rel=0.15)  # 0.89x: its count includes the tensor pipe's trickle


def test_an_fp64_job_claims_no_bf16_work():
    """The DMMA pipe's work is FP64 at its own rate (67 TFLOP/s on an H100 SXM), not tensor work at 989."""
    assert mean("h100-fleet/matmul_fp64_8192", lambda d: d.pipe_busy.hmma_bf16_equivalent) < 1e12
    assert mean("h100-fleet/matmul_fp64_8192", busy) < 67e12


@pytest.mark.parametrize("name", sorted(name for name in EXPERT_LABEL if name.startswith("h100")))
def test_no_pipe_claims_more_than_it_does_at_the_max_clock(name):
    """A pipe's figure is quoted at its own clock basis; at the max clock (1980) it does figure x 1980 / basis."""
    for state in replayed(name, 1.0):
        derived = state.derived
        for pipe, _, peak_field in PIPES:
            work, figure = getattr(derived.pipe_busy, pipe), getattr(derived.peak, peak_field)
            ceiling = figure * 1980 / (derived.peak.basis_mhz(peak_field) or 1980) if figure else None
            assert work is None or work <= ceiling * 1.0001, (name, pipe, work, ceiling)
    assert BUILTIN_PEAKS["NVIDIA H100 80GB HBM3"].basis_mhz("tensor_flops") == pytest.approx(1830, abs=1)


@functools.cache
def estimate_over_count(path: Path) -> tuple[float | None, float, int, int]:
    """One replay at 1 s: (the estimate's mean over the polls that have one / the job's own count, the
    busy figure's mean / the count, polls with an estimate, polls), the first poll left out."""
    trace, clock = load_trace(path), Clock()
    backend = ReplayBackend([trace], clock=clock)
    poller = Poller(backend, Config(collect_interval=1.0), clock=clock)
    poller._devices = backend.start()
    ops = "tops" in trace.truth
    count = trace.truth["tops" if ops else "tflops"] * 1e12
    estimates, busy = [], []
    for _ in range(round(trace.loop_seconds)):
        clock.now += 1.0
        derived = poller.poll_once().gpus[0].derived
        estimates.append(derived.estimated_int8_ops if ops else derived.estimated_flops)
        busy.append(derived.pipe_busy.imma_int8 if ops else derived.busy_flops)
    given = [value for value in estimates[1:] if value is not None]
    return (statistics.mean(given) / count if given else None, statistics.mean(value for value in busy[1:] if value is not None) / count, len(given), len(estimates) - 1)


def label(path: Path) -> str:
    return str(path.relative_to(TRACES if path.is_relative_to(TRACES) else REAL_GPU))[:-5]


def clocks_held(path: Path) -> bool:
    """Whether a power or thermal limit held the clocks at any steady sample of the recording."""
    return any(sample.get("throttle") is None or sample["throttle"] & CLOCK_LIMITS for sample in load_trace(path).steady_samples)


# A job that starts while it is recorded (8 s idle, then matmuls): the estimate reads 0 on the idle
# polls, where no pipe had a busy cycle, and is withheld once the power cap holds the clocks.
STARTS = {"2026-12-01-h200/truth-round-four/matmul_from_idle"}


@pytest.mark.parametrize("path", COUNTED, ids=label)
def test_every_point_estimate_is_within_10_percent_of_the_jobs_own_count_or_withheld(path):
    """issue 43: on every job with its own count, recorded or live, the estimate is 0.9-1.1x the work
    done, or withheld; the ratio per job is printed (pytest -s) and tabled in docs/peaks.md. Withheld
    wherever a power or thermal limit held the clocks (the SM clock read is then not the SMs' rate:
    1525 MHz read against 1378 counted on an H200's GEMM at 700 W), which covers every recorded
    tensor-bound job on both cards; the precisions the HMMA pipe cannot tell apart (TF32 reads
    twice its FLOP, FP8 half) were recorded only at the power cap, so they are withheld too."""
    ratio, busy, given, polls = estimate_over_count(path)
    print(f"{label(path)}: busy {busy:.2f}x, estimate {'withheld' if ratio is None else f'{ratio:.2f}x'} on {given}/{polls} polls")
    if label(path) in STARTS:
        assert ratio == 0 and 0 < given < polls  # 0 while idle, withheld from the start on
        return
    assert ratio is None or 0.9 <= ratio <= 1.1, (label(path), ratio)
    assert given in (0, polls)  # one verdict per job: the estimate does not come and go
    if clocks_held(path) and all(sample["throttle"] & CLOCK_LIMITS for sample in load_trace(path).steady_samples):
        assert ratio is None, label(path)  # held on every reading: never an estimate


@pytest.mark.parametrize("path", [TRACES / "h100-fleet/resnet50_train_fp32.json", H200_LIVE / "resnet50_train_fp32.json",
                                  TRACES / "h200-jobs/2gpu_straggler_gpu0.json", TRACES / "h200-jobs/4gpu_straggler_gpu0.json"], ids=label)
def test_the_jobs_bound_by_their_math_with_no_limit_on_the_clocks_keep_an_estimate_within_10_percent(path):
    """The FP32 pipe of a ResNet-50 step (H100, and H200 live), the matmul bursts of a straggling job's
    waiting ranks: no power limit held their clocks (1980 MHz), the reading is the SMs' rate, the estimate stands."""
    ratio, _, _, _ = estimate_over_count(path)
    assert not clocks_held(path)
    assert ratio is not None and 0.9 <= ratio <= 1.1, (label(path), ratio)


@pytest.mark.parametrize("name", ["h100/matmul_8192", "h200/matmul_8192", "h100-fleet/matmul_fp64_8192", "h200-live/llama_prefill",
                                  "h100-fleet/sdpa_train_bf16", "h100/llama_train", "h100-fleet/matmul_int8_8192", "h200-live/vit_b16_train_bf16"])
def test_the_jobs_at_the_power_cap_have_no_point_estimate(name):
    """The large GEMMs, attention, training and prefill steps all ran at their card's power cap: the
    clock read is the controller's setting, not a count (on the H200 10.7 % above the SMs' cycle
    rate under the bf16 GEMM, 7.0 % under ViT; on the H100's GEMM the busy figure fits its count at
    the reading, 1.02x): no reading says which, so no point estimate; the busy upper bound stays."""
    ratio, busy, given, _ = estimate_over_count(TRACES / f"{name}.json")
    assert clocks_held(TRACES / f"{name}.json") and ratio is None and given == 0 and busy >= 1.0


@pytest.mark.parametrize("name", ["h100/graph_decode_b1", "h100/llama_generate_b1", "h200-live/lstm_graph_b1", "h200-live/resnet18_starved",
                                  "h200-live/resnet50_train_bf16", "h100-fleet/resnet50_train_bf16"])
def test_where_busy_cycles_overstate_the_work_no_estimate_is_given(name):
    ratio, busy, _, _ = estimate_over_count(TRACES / f"{name}.json")
    assert busy > 1.3 and ratio is None
