"""Every recorded trace, replayed through the poller as the daemon runs it, reads the class an
expert gives it (gpueff/traces/README.md says why) on at least 90 % of polls, and raises no
mismatch where the workload wastes nothing."""

from __future__ import annotations

import pytest
from repo import ROOT

from gpueff.backends.replay import ReplayBackend
from gpueff.poller import Poller
from gpueff.settings import Config
from gpueff.trace import load_trace

TRACES = ROOT / "gpueff" / "traces"
EXPERT_LABEL = {
    "h100/idle": "idle",
    "h100/matmul_8192": "compute",
    "h100/llama_train": "compute",
    "h100/llama_train_starved": "host",
    "h100/llama_generate_b1": "host",
    "h100/llama_generate_b64": "host",
    "h100/graph_decode_b1": "memory",
    "h100/matmul_duty_50ms": "host",
    "h100/matmul_duty_140ms": "host",
    "h100/matmul_duty_250ms": "host",
    "h100/matmul_duty_1s": "host",
    "h100/matmul_duty_2s": "host",
    "h100-fleet/resnet50_train_bf16": "memory_latency",
    "h100-fleet/resnet50_train_fp32": "compute",
    "h100-fleet/matmul_fp64_8192": "compute",
    "h100-fleet/matmul_tf32_8192": "compute",
    "h100-fleet/matmul_int8_8192": "compute",
    "h100-fleet/matmul_fp8_8192": "compute",
    "h100-fleet/sdpa_train_bf16": "compute",
    "h100-fleet/embedding_bag_gather": "memory_latency",
    "h100-fleet/copy_h2d_pinned": "communication",
    "h100-fleet/copy_d2h_pinned": "communication",
    "h100-fleet/bert_infer_b1": "host",
    "h100-fleet/bert_infer_b256": "compute",
    "h100-fleet/jax_mlp_train_bf16": "compute",
    "h200/idle": "idle",
    "h200/spin_1sm": "underfilled",
    "h200/matmul_8192": "compute",
    "h200/matmul_8192_duty50": "host",
    "h200/copy_2GB": "memory",
    "h200/tiny_kernels": "host",
    "h200-live/resnet18_starved": "host",
    "h200-live/lstm_graph_b1": "mixed",
    "h200-live/embedding_bag_gather": "memory_latency",
    "h200-live/resnet50_train_bf16": "memory_latency",
    "h200-live/matmul_skinny_b8": "memory",
    "h200-live/llama_prefill": "compute",
    "h200-live/zerocopy_read": "communication",
    "h200-live/zerocopy_write": "communication",
    "h200-live/zerocopy_gather": "communication",
    "h200-live/vit_b16_train_bf16": "compute",
}
# Multi-GPU jobs on 4 x H200 (NV18): each GPU's label, judged with its job's other GPUs (docs/jobs.md),
# so they are replayed together; apart from EXPERT_LABEL, whose traces stand alone (tests/unit/test_taxonomy.py).
JOB_LABEL = {
    **{f"h200-jobs/{size}gpu_{phase}_gpu{gpu}": label for size in (2, 4) for gpu in range(size) for phase, label in (
        ("allreduce", "communication"), ("rs_ag", "communication"), ("alltoall", "communication"), ("sendrecv", "communication"),
        ("allreduce_overlap", "compute"), ("rs_ag_overlap", "compute"), ("alltoall_overlap", "compute"), ("sendrecv_overlap", "compute"),
        ("pipeline", "compute"), ("ddp", "compute"),
        ("straggler", "compute" if gpu == size - 1 else "peer_wait"),
    )},
}
LABEL = {**EXPERT_LABEL, **JOB_LABEL}
# Busy while the SMs idle, the mismatch this exporter exists for: one thread on one SM (131 SMs
# idle); copy engines moving data over PCIe with no kernel running.
# A bare collective: every GPU busy while NCCL's few channels hold 17 % of the SMs (a send/recv ring 5-10 %).
IDLE_SMS = {"h200/spin_1sm", "h100-fleet/copy_h2d_pinned", "h100-fleet/copy_d2h_pinned"} | {
    f"h200-jobs/{size}gpu_{phase}_gpu{gpu}" for size in (2, 4) for gpu in range(size) for phase in ("allreduce", "rs_ag", "alltoall", "sendrecv")}
# Busy with the SMs holding warps, yet no math pipe, DRAM or link near a tenth of its roof: the
# batch-1 LSTM replayed from a CUDA graph (its weights live in L2, which no counter sees).
NOTHING_NEAR_A_ROOF = {"h200-live/lstm_graph_b1"}
WASTING = IDLE_SMS | NOTHING_NEAR_A_ROOF


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def replayed(name: str, interval: float, loops: int = 3):
    """The poller's GPU state at every poll of ``loops`` replays of the trace, polled every
    ``interval``. A GPU of a recorded multi-GPU job is replayed with the job's other GPUs (the
    traces beside it with the same ``job``), as the daemon judges them: together."""
    trace = load_trace(TRACES / f"{name}.json")
    paths = sorted(path for path in (TRACES / name).parent.glob("*.json") if trace.job and load_trace(path).job == trace.job) or [TRACES / f"{name}.json"]
    position = paths.index(TRACES / f"{name}.json")
    clock = Clock()
    backend = ReplayBackend([load_trace(path) for path in paths], clock=clock)
    poller = Poller(backend, Config(collect_interval=interval), clock=clock)
    poller._devices = backend.start()
    states = []
    for _ in range(round(loops * trace.loop_seconds / interval)):
        clock.now += interval
        states.append(poller.poll_once().gpus[position])
    return states


def test_every_shipped_trace_has_an_expert_label():
    assert {f"{path.parent.name}/{path.stem}" for path in TRACES.glob("*/*.json")} == set(LABEL)


@pytest.mark.parametrize("interval", [1.0, 0.5])
@pytest.mark.parametrize("name", sorted(LABEL))
def test_the_class_is_the_experts_on_90_percent_of_polls(name, interval):
    states = replayed(name, interval)
    classes = [state.derived.bottleneck for state in states]
    agreeing = classes.count(LABEL[name]) / len(classes)
    assert agreeing >= 0.9, (name, {each: classes.count(each) for each in set(classes)})


@pytest.mark.parametrize("name", sorted(set(LABEL) - WASTING))
def test_no_mismatch_where_nothing_is_wasted(name):
    for state in replayed(name, 1.0):
        assert not any(state.derived.mismatch.values()), (name, state.derived)
        assert not state.derived.counters_implausible, (name, state.derived.implausible)


def test_one_thread_on_one_sm_is_flagged_on_every_poll():
    assert all(state.derived.mismatch == {"high_util_low_sm": True, "low_efficiency": True, "high_util_low_work": True} for state in replayed("h200/spin_1sm", 1.0))


@pytest.mark.parametrize(("name", "label"), [("h200/matmul_8192", "compute"), ("h200/tiny_kernels", "host")])
def test_the_demo_loop_has_no_seam(name, label):
    """Each recording began with a warm-up sample; replay skips it, so no poll at a loop seam changes the class."""
    for interval in (1.0, 0.5, 0.2):
        states = replayed(name, interval, loops=4)
        assert [state.derived.bottleneck for state in states] == [label] * len(states), interval
        assert [state.derived.window_bottleneck for state in states] == [label] * len(states), interval


def test_the_demo_replays_the_planted_traces_the_h100_corpus_and_one_straggling_job():
    """The wider corpora (h100-fleet/, h200-live/, h200-jobs/) replay with --replay; the demo shows 18 single
    GPUs and one 2-GPU job whose GPU 18 waits on GPU 19."""
    from gpueff.trace import demo_trace_paths, planted_trace_paths

    demo = demo_trace_paths()
    singles = [name for name in EXPERT_LABEL if name.split("/")[0] in ("h200", "h100")]
    assert demo[:6] == planted_trace_paths() and len(demo) == len(singles) + 2
    assert [f"{path.parent.name}/{path.stem}" for path in demo[-2:]] == ["h200-jobs/2gpu_straggler_gpu0", "h200-jobs/2gpu_straggler_gpu1"]


@pytest.mark.parametrize("name", sorted(NOTHING_NEAR_A_ROOF))
def test_busy_with_nothing_near_any_roof_is_flagged(name):
    states = replayed(name, 1.0)[1:]  # the first poll has no profiling window yet
    assert all(state.derived.mismatch == {"high_util_low_sm": False, "low_efficiency": False, "high_util_low_work": True} for state in states), name


@pytest.mark.parametrize("name", sorted(IDLE_SMS))
def test_busy_with_idle_sms_is_flagged(name):
    states = replayed(name, 1.0)[1:]  # the first poll has no profiling window yet
    assert all(state.derived.mismatch.get("high_util_low_sm") for state in states), name


def test_the_send_recv_ring_is_communication_whatever_class_was_in_place():
    """At 4 GPUs the ring's NVLink sits on communication_link (0.30-0.31 of its peak): live it read
    `underfilled`, the class in place holding inside the margin. Below the link's roof (transfer_link)
    no reading moved by the margin gives any other class, so no earlier verdict can hold on."""
    from dataclasses import replace

    from gpueff.peaks import peak_for
    from gpueff.pipeline.derive import activity
    from gpueff.taxonomy import BottleneckThresholds, classes_within_margin

    limits = BottleneckThresholds()
    before = replace(limits, transfer_link=1.0)  # the rule without this floor
    edges = 0
    for gpu in range(4):
        for state in replayed(f"h200-jobs/4gpu_sendrecv_gpu{gpu}", 1.0, loops=1)[1:]:
            window = activity(state.sample, peak_for(state.sample.device.name, Config().peaks, state.sample.device.sm_count))
            assert classes_within_margin(window, limits, limits.margin) == {"communication"}
            edges += "underfilled" in classes_within_margin(window, before, limits.margin)
    assert edges  # before, an `underfilled` in place could hold on

