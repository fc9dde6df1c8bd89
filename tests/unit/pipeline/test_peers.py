"""The GPUs of one job judged together (gpueff/pipeline/peers.py): a rank waiting in collectives for
a slower peer is peer_wait, not underfilled; the straggler, the time lost, the job's own figures;
and the cases that must not change: one GPU, two jobs on a node, a GPU shared by two jobs, a bare
collective at the link's roof."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from gpueff.attribution.jobs import JobKey
from gpueff.backends.replay import ReplayBackend
from gpueff.exposition.render import render
from gpueff.pipeline.derive import derive
from gpueff.pipeline.peers import PEER_WAIT, across_gpus, judge
from gpueff.pipeline.totals import Totals
from gpueff.poller import Poller
from gpueff.sample import DeviceInfo, GpuSample, Profiling
from gpueff.settings import Config
from gpueff.trace import load_trace

GB = 1e9


def gpu(index: int, utilization: float, **profiling: float) -> GpuSample:
    device = DeviceInfo(index=index, uuid=f"GPU-{index}", name="NVIDIA H200", sm_count=132, max_sm_clock_mhz=1980, power_limit_watts=700)
    return GpuSample(device=device, timestamp=10.0, window_seconds=1.0, gpu_utilization=utilization, gpu_utilization_window=utilization,
                     sm_clock_mhz=1980, power_watts=500.0, profiling=Profiling(**profiling))


# Readings of the 2 x H200 straggler (evidence, issue 35): rank 0 does a third of rank 1's matmuls before each all-reduce.
WAITING = {"sm_active": 0.36, "sm_occupancy": 0.1, "tensor_active": 0.22, "dram_active": 0.05, "nvlink_tx_bytes_per_second": 6.6 * GB, "nvlink_rx_bytes_per_second": 6.6 * GB}
WORKING = {"sm_active": 0.9, "sm_occupancy": 0.3, "tensor_active": 0.66, "dram_active": 0.1, "nvlink_tx_bytes_per_second": 6.6 * GB, "nvlink_rx_bytes_per_second": 6.6 * GB}
ALL_REDUCE = {"sm_active": 0.17, "sm_occupancy": 0.05, "tensor_active": 0.0, "dram_active": 0.3, "nvlink_tx_bytes_per_second": 305 * GB, "nvlink_rx_bytes_per_second": 305 * GB}


def judged(samples: list[GpuSample], membership: dict[str, list[JobKey]]):
    return judge([(sample, derive(sample)) for sample in samples], membership, {"7": "torchrun"})


def test_a_rank_waiting_for_a_slower_peer_is_peer_wait_and_names_the_straggler() -> None:
    waiting, working = gpu(0, 0.99, **WAITING), gpu(1, 0.99, **WORKING)
    assert derive(waiting).bottleneck == "underfilled"  # alone it looks like too little parallelism
    job = JobKey("process_group", "7")
    result = judged([waiting, working], {"GPU-0": [job], "GPU-1": [job]})
    assert result.classes == {"GPU-0": PEER_WAIT}
    (state,) = result.jobs
    assert (state.kind, state.name) == ("process_group", "torchrun:0-1")
    assert state.straggler is not None and state.straggler.index == 1
    assert [each.index for each in state.waiting] == [0]
    # Rank 0 idles 0.63 of the window while busy, the straggler 0.09: 0.54 lost to it, over 2 GPUs.
    assert result.lost["GPU-0"] == pytest.approx(0.54)
    assert state.peer_wait == pytest.approx(0.27)
    assert dict(state.classes) == {"compute": 1, PEER_WAIT: 1}
    assert state.efficiency == pytest.approx((0.36 + 0.9) / 1.98)
    assert state.traffic.nvlink_tx == pytest.approx(13.2 * GB) and state.traffic.pcie_tx is None


def test_a_bare_collective_at_the_links_roof_stays_communication_with_no_straggler() -> None:
    job = JobKey("slurm_job", "42")
    result = judged([gpu(0, 0.98, **ALL_REDUCE), gpu(1, 0.98, **ALL_REDUCE)], {"GPU-0": [job], "GPU-1": [job]})
    assert result.classes == {}
    (state,) = result.jobs
    assert state.straggler is None and state.peer_wait == 0 and dict(state.classes) == {"communication": 2}


def test_every_rank_underfilled_is_no_wait_on_a_peer() -> None:
    job = JobKey("pod", "uid")
    result = judged([gpu(0, 0.99, **WAITING), gpu(1, 0.99, **WAITING)], {"GPU-0": [job], "GPU-1": [job]})
    assert result.classes == {} and result.jobs[0].straggler is None


def test_ranks_that_idle_alike_wait_on_no_one_and_a_roof_class_keeps_its_verdict() -> None:
    job = JobKey("pod", "uid")
    close = {**WAITING, "sm_active": 0.36 + 0.09}  # idles 0.09 less than its peer: within the margin, no wait
    assert judged([gpu(0, 0.99, **WAITING), gpu(1, 0.99, **close)], {"GPU-0": [job], "GPU-1": [job]}).classes == {}
    light_compute = {**WORKING, "sm_active": 0.55, "tensor_active": 0.3}  # idles 0.35 more than the straggler but its own class is compute
    result = judged([gpu(0, 0.99, **light_compute), gpu(1, 0.99, **WORKING)], {"GPU-0": [job], "GPU-1": [job]})
    assert result.classes == {} and result.jobs[0].straggler is None


def test_a_spinning_rank_that_reads_latency_alone_waits_too() -> None:
    """Many NCCL channels can keep over half the SMs holding a warp each while they spin: latency alone."""
    job = JobKey("pod", "uid")
    spinning = {"sm_active": 0.6, "sm_occupancy": 0.03, "tensor_active": 0.05, "dram_active": 0.02}
    assert derive(gpu(0, 0.99, **spinning)).bottleneck == "latency"
    result = judged([gpu(0, 0.99, **spinning), gpu(1, 0.99, **WORKING)], {"GPU-0": [job], "GPU-1": [job]})
    assert result.classes == {"GPU-0": PEER_WAIT} and result.lost["GPU-0"] == pytest.approx(0.39 - 0.09)


def test_one_gpu_jobs_and_gpus_of_no_job_are_judged_alone() -> None:
    samples = [gpu(0, 0.99, **WAITING), gpu(1, 0.99, **WORKING)]
    assert judged(samples, {}).jobs == ()
    alone = judged(samples, {"GPU-0": [JobKey("process_group", "1")], "GPU-1": [JobKey("process_group", "2")]})
    assert alone.jobs == () and alone.classes == {}


def test_two_jobs_on_one_node_do_not_wait_on_each_other() -> None:
    a, b = JobKey("slurm_job", "1"), JobKey("slurm_job", "2")
    samples = [gpu(0, 0.99, **WORKING), gpu(1, 0.99, **WORKING), gpu(2, 0.99, **WAITING), gpu(3, 0.99, **WAITING)]
    result = judged(samples, {"GPU-0": [a], "GPU-1": [a], "GPU-2": [b], "GPU-3": [b]})
    assert result.classes == {}
    assert [(state.name, [each.index for each in state.gpus]) for state in result.jobs] == [("1", [0, 1]), ("2", [2, 3])]


def test_a_gpu_shared_by_one_users_two_jobs_counts_in_both() -> None:
    """Only one owner's jobs share a GPU here: attribution/jobs.py keeps a GPU of two owners out of every job."""
    a, b = JobKey("process_group", "1000:7"), JobKey("process_group", "1000:8")
    samples = [gpu(0, 0.99, **WORKING), gpu(1, 0.99, **WAITING), gpu(2, 0.99, **WAITING)]
    result = judge([(sample, derive(sample, Config())) for sample in samples], {"GPU-0": [a], "GPU-1": [a, b], "GPU-2": [b]}, {"1000:7": "1000:torchrun", "1000:8": "1000:sh"})
    assert result.classes == {"GPU-1": PEER_WAIT}  # job a's GPU 0 works while GPU 1 waits; nothing in b works
    by_name = {state.name: state for state in result.jobs}
    assert by_name["1000:torchrun:0-1"].straggler is not None and by_name["1000:torchrun:0-1"].straggler.index == 0
    assert by_name["1000:sh:1-2"].straggler is None and dict(by_name["1000:sh:1-2"].classes) == {PEER_WAIT: 1, "underfilled": 1}


def test_one_users_two_groups_of_one_name_on_the_same_gpus_are_one_job() -> None:
    """Two ``sh`` scripts of one user, each with a rank on GPUs 0 and 1: one job, its series once."""
    a, b = JobKey("process_group", "1000:7"), JobKey("process_group", "1000:9")
    samples = [gpu(0, 0.99, **WAITING), gpu(1, 0.99, **WORKING)]
    result = judge([(sample, derive(sample, Config())) for sample in samples], {"GPU-0": [a, b], "GPU-1": [a, b]}, {"1000:7": "1000:sh", "1000:9": "1000:sh"})
    assert [(state.name, [each.index for each in state.gpus]) for state in result.jobs] == [("1000:sh:0-1", [0, 1])]
    assert result.classes == {"GPU-0": PEER_WAIT}


def test_a_down_gpu_counts_among_the_jobs_gpus_but_is_not_judged() -> None:
    job = JobKey("pod", "uid")
    down = dataclasses.replace(gpu(1, 0.99, **WORKING), up=False)
    result = judge([(gpu(0, 0.99, **WAITING), derive(gpu(0, 0.99, **WAITING))), (down, None)], {"GPU-0": [job], "GPU-1": [job]}, {})
    assert result.classes == {} and len(result.jobs[0].gpus) == 2


def test_a_starved_straggler_is_named_and_the_wait_is_counted() -> None:
    """A rank whose host is slow (utilization 0.6) holds the others up: they wait on it, not on their own host."""
    job = JobKey("process_group", "7")
    starved = gpu(1, 0.6, sm_active=0.55, tensor_active=0.4)
    result = judged([gpu(0, 0.99, **WAITING), starved], {"GPU-0": [job], "GPU-1": [job]})
    assert result.classes == {"GPU-0": PEER_WAIT} and result.jobs[0].straggler.index == 1
    assert result.lost["GPU-0"] == pytest.approx(0.63 - 0.05)


def test_the_cross_gpu_stage_is_a_pure_step_after_the_per_gpu_one() -> None:
    job = JobKey("process_group", "7")
    waiting, working, down = gpu(0, 0.99, **WAITING), gpu(1, 0.99, **WORKING), dataclasses.replace(gpu(2, 0.99, **WORKING), up=False)
    given = [(waiting, derive(waiting), Totals(peer_wait_seconds=2.0)), (working, derive(working), Totals(busy_seconds=5.0)), (down, None, Totals())]
    copy = [(sample, derived, dataclasses.replace(totals)) for sample, derived, totals in given]
    judgement, after = across_gpus(given, {"GPU-0": [job], "GPU-1": [job], "GPU-2": [job]}, {"7": "torchrun"})
    assert given == copy  # nothing given is changed
    assert judgement == judge([(sample, derived) for sample, derived, _ in given], {"GPU-0": [job], "GPU-1": [job], "GPU-2": [job]}, {"7": "torchrun"})
    (wait_derived, wait_totals), (work_derived, work_totals), (down_derived, down_totals) = after
    assert wait_derived == dataclasses.replace(given[0][1], bottleneck=PEER_WAIT)
    assert wait_totals.peer_wait_seconds == pytest.approx(2.0 + 0.54) and dataclasses.replace(wait_totals, peer_wait_seconds=2.0) == given[0][2]
    assert work_derived is given[1][1] and work_totals is given[1][2]  # not judged waiting: as it went in
    assert down_derived is None and down_totals is given[2][2]


def test_the_time_lost_waiting_adds_up_poll_after_poll(trace_paths) -> None:
    traces = [dataclasses.replace(load_trace(trace_paths[name]), job="ddp") for name in ("spin_1sm", "matmul_8192")]
    now = [100.0]
    backend = ReplayBackend(traces, clock=lambda: now[0])
    poller = Poller(backend, Config(), clock=lambda: now[0], wall_clock=lambda: 1_700_000_000.0 + now[0])
    poller._devices = backend.start()
    lost = []
    for _ in range(8):
        now[0] += 1.0
        lost.append(poller.poll_once().gpus[0].totals.peer_wait_seconds)
    grew = [later > earlier for earlier, later in itertools.pairwise(lost)]
    assert grew.count(True) >= 3 and all(later >= earlier for earlier, later in itertools.pairwise(lost))  # kept by the tracker, not one poll's


def replay_job(trace_paths, names: tuple[str, ...], jobs: tuple[str, ...]):
    traces = [dataclasses.replace(load_trace(trace_paths[name]), job=job) for name, job in zip(names, jobs, strict=True)]
    now = [100.0]
    backend = ReplayBackend(traces, clock=lambda: now[0])
    devices = backend.start()
    poller = Poller(backend, Config(), clock=lambda: now[0], wall_clock=lambda: 1_700_000_000.0 + now[0])
    poller._devices = devices
    snapshot = None
    for _ in range(8):
        now[0] += 1.0
        snapshot = poller.poll_once()
    assert snapshot is not None
    return snapshot


def test_replayed_gpus_of_one_recorded_job_are_judged_together(trace_paths) -> None:
    snapshot = replay_job(trace_paths, ("spin_1sm", "matmul_8192", "idle"), ("ddp", "ddp", ""))
    classes = [state.derived.bottleneck for state in snapshot.gpus]
    assert classes == [PEER_WAIT, "compute", "idle"]
    assert snapshot.gpus[0].totals.peer_wait_seconds > 0 and snapshot.gpus[1].totals.peer_wait_seconds == 0
    text = render(snapshot).decode()
    assert 'gpueff_bottleneck{gpu="0",uuid="GPU-replay-0-spin_1sm",class="peer_wait"} 1' in text
    assert 'gpueff_job_straggler{job_kind="trace",job_id="ddp",gpu="1",uuid="' in text
    assert 'gpueff_job_gpus{job_kind="trace",job_id="ddp"} 2' in text
    assert 'gpueff_peer_wait_seconds_total{gpu="0"' in text and 'gpueff_peer_wait_seconds_total{gpu="1"' not in text
    assert 'gpueff_job_bottleneck_gpus{job_kind="trace",job_id="ddp",class="peer_wait"} 1' in text


def test_replayed_gpus_of_separate_recordings_keep_their_own_classes(trace_paths) -> None:
    snapshot = replay_job(trace_paths, ("spin_1sm", "matmul_8192"), ("", ""))
    assert [state.derived.bottleneck for state in snapshot.gpus] == ["underfilled", "compute"]
    assert snapshot.jobs == () and "gpueff_job_gpus{" not in render(snapshot).decode()
