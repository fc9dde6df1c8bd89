"""Owners never cross (gpueff/attribution/owner.py, docs/security.md): hostile tenants on the fake
NVML with a /proc tree of their processes. A job, a straggler verdict, a fair-split holder and an
app's process join are formed from one owner's processes only; a tenant's process on someone
else's GPU is that tenant's and never makes the other's GPU wait, excuses its own, or blames the
other. The property tests at the end hold for any placement and any readings."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest
from fakes.nvml import FakeGpu, started_backend
from fakes.proc import process
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gpueff.attribution.jobs import JobResolver, memberships
from gpueff.attribution.owner import Owner, owner_of, real_uid
from gpueff.exposition.render import render
from gpueff.pipeline.derive import derive
from gpueff.pipeline.peers import PEER_WAIT, judge
from gpueff.poller import Poller
from gpueff.sample import DeviceInfo, GpuProcess, GpuSample, Profiling
from gpueff.settings import Config, parse_config
from gpueff.trace import load_trace

A, B = 1001, 1002  # two tenants' uids
GIB = 1 << 30


@pytest.fixture()
def tenants(tmp_path: Path) -> Path:
    """Tenant A's launcher (its shell 100 a session leader) with ranks 101 and 102; tenant B's
    program 200, started by hand from B's shell; and B's own launcher with ranks 301 and 302."""
    process(tmp_path, 100, "bash", uid=A)
    process(tmp_path, 110, "sh", 100, 100, uid=A)
    process(tmp_path, 101, "python", 110, 100, uid=A)
    process(tmp_path, 102, "python", 110, 100, uid=A)  # the tiny idle child
    process(tmp_path, 199, "bash", uid=B)
    process(tmp_path, 200, "python", 199, 199, uid=B)
    process(tmp_path, 310, "sh", 199, 199, uid=B)
    process(tmp_path, 301, "python", 310, 199, uid=B)
    process(tmp_path, 302, "python", 310, 199, uid=B)
    return tmp_path


def polled(proc: Path, gpus: list[FakeGpu], polls: int = 7) -> tuple[list[list[str]], Poller]:
    """Each poll's classes, one second apart (7 s) after the first (GPM's first window), and the
    poller after the last."""
    backend, _, clock = started_backend(gpus)
    poller = Poller(backend, Config(proc_root=str(proc)), clock=clock, wall_clock=lambda: 1.7e9 + clock())
    poller.poll_once()
    classes = []
    for _ in range(polls):
        clock.advance(1.0)
        classes.append([state.derived.bottleneck for state in poller.poll_once().gpus])
    return classes, poller


def series(poller: Poller) -> Counter[str]:
    """Every exported series line (name and labels) with how often it appears."""
    snapshot = poller.snapshot
    assert snapshot is not None
    return Counter(line.rsplit(" ", 1)[0] for line in render(snapshot).decode().splitlines() if line and not line.startswith("#"))


def test_a_tenants_idle_child_on_anothers_gpu_makes_it_wait_on_no_one(tenants: Path, trace_paths) -> None:
    """GPU 0 [A1] computes; GPU 1 [B, A2] is B's underfilled program, where A's launcher put a tiny
    idle child. Before, GPU 1 read peer_wait 7 polls of 7 (the report: 6.7 s of 7 s) and A's GPU 0
    was named what B waits on."""
    gpus = [FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(101, 8 * GIB, "python")]),
            FakeGpu(load_trace(trace_paths["spin_1sm"]), processes=[(200, 8 * GIB, "python"), (102, 1 << 20, "python")])]
    classes, poller = polled(tenants, gpus)
    assert [gpu1 for _, gpu1 in classes] == ["underfilled"] * 7
    assert poller.snapshot is not None and poller.snapshot.jobs == ()
    lines = series(poller)
    assert not [line for line in lines if line.startswith(("gpueff_job_", "gpueff_peer_wait_seconds_total"))]


def test_nor_does_it_excuse_its_own_underfilled_gpu_and_blame_the_other(tenants: Path, trace_paths) -> None:
    """The reverse: A's GPU 0 is underfilled and B computes on GPU 1 beside A's idle child. Before,
    A's GPU read peer_wait (its underfill excused) and B's GPU was A's job's straggler."""
    gpus = [FakeGpu(load_trace(trace_paths["spin_1sm"]), processes=[(101, 8 * GIB, "python")]),
            FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(200, 8 * GIB, "python"), (102, 1 << 20, "python")])]
    classes, poller = polled(tenants, gpus)
    assert classes == [["underfilled", "compute"]] * 7
    assert poller.snapshot is not None and poller.snapshot.jobs == ()


def test_a_job_of_one_tenant_is_still_judged_beside_anothers_program(tenants: Path, trace_paths) -> None:
    """B's two ranks wait on each other as before while A runs on a GPU of its own."""
    gpus = [FakeGpu(load_trace(trace_paths["spin_1sm"]), processes=[(301, 8 * GIB, "python")]),
            FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(302, 8 * GIB, "python")]),
            FakeGpu(load_trace(trace_paths["spin_1sm"]), processes=[(101, 8 * GIB, "python")])]
    classes, poller = polled(tenants, gpus)
    assert classes[-1] == [PEER_WAIT, "compute", "underfilled"]
    assert poller.snapshot is not None
    (job,) = poller.snapshot.jobs
    assert (job.name, [gpu.index for gpu in job.gpus], job.straggler and job.straggler.index) == (f"{B}:sh:0-1", [0, 1], 1)


def test_two_tenants_launchers_of_one_name_on_the_same_gpus_are_no_job_and_no_series_twice(tenants: Path, trace_paths) -> None:
    """Two ``sh`` trees, A's and B's, each with a rank on GPUs 0 and 1. Before, both were the job
    ``sh:0-1`` and every gpueff_job_* series was exported twice."""
    gpus = [FakeGpu(load_trace(trace_paths["spin_1sm"]), processes=[(101, GIB, "python"), (301, GIB, "python")]),
            FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(102, GIB, "python"), (302, GIB, "python")])]
    classes, poller = polled(tenants, gpus, polls=3)
    assert classes[-1] == ["underfilled", "compute"]
    lines = series(poller)
    assert [line for line, count in lines.items() if count > 1] == []
    assert not [line for line in lines if line.startswith("gpueff_job_")]


def test_one_tenants_two_launchers_of_one_name_on_the_same_gpus_are_one_job(tenants: Path, trace_paths) -> None:
    process(tenants, 120, "sh", 100, 100, uid=A)
    process(tenants, 121, "python", 120, 100, uid=A)
    process(tenants, 122, "python", 120, 100, uid=A)
    gpus = [FakeGpu(load_trace(trace_paths["spin_1sm"]), processes=[(101, GIB, "python"), (121, GIB, "python")]),
            FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(102, GIB, "python"), (122, GIB, "python")])]
    classes, poller = polled(tenants, gpus, polls=3)
    assert classes[-1] == [PEER_WAIT, "compute"]
    lines = series(poller)
    assert [line for line, count in lines.items() if count > 1] == []
    assert lines[f'gpueff_job_gpus{{job_kind="process_group",job_id="{A}:sh:0-1"}}'] == 1


def test_one_tenants_churn_of_names_leaves_a_later_tenant_its_own_holder(tmp_path: Path, trace_paths) -> None:
    """Tenant A starts a process with a new name every 0.25 s, each living 1 s: 70 names in 18 s,
    each kept 5 minutes. Before, they filled the 64 holder slots and tenant B's time went to
    unattributed; now A's names beyond its first few share A's own holder."""
    churners = [(500 + n, f"churn{n}") for n in range(70)]
    for pid, name in churners:
        process(tmp_path, pid, name, uid=A)
    process(tmp_path, 900, "python3", uid=B)
    gpu = FakeGpu(load_trace(trace_paths["matmul_8192"]))
    backend, fake, clock = started_backend([gpu])
    poller = Poller(backend, parse_config({"sharing": {"enabled": True}, "proc_root": str(tmp_path)}), clock=clock)

    def busy() -> dict[tuple[str, str], float]:
        assert poller.snapshot is not None
        families = text_string_to_metric_families(render(poller.snapshot).decode())
        return {(s.labels["holder_kind"], s.labels["holder"]): s.value for family in families if family.name == "gpueff_holder_busy_seconds" for s in family.samples}

    for step in range(len(churners) + 3):
        alive = churners[max(0, step - 3):step + 1]  # four at a time, a new one every poll
        fake.gpus[0].processes = [(pid, GIB, f"/home/a/{name}") for pid, name in alive]
        fake.gpus[0].process_duty = {pid: 0.2 for pid, _ in alive}
        clock.advance(0.25)
        poller.poll_once()
    fake.gpus[0].processes = [(900, GIB, "/usr/bin/python3")]
    fake.gpus[0].process_duty = {900: 0.9}
    clock.advance(0.25)
    poller.poll_once()
    before = busy()
    for _ in range(20):
        clock.advance(0.25)
        poller.poll_once()
    after = busy()
    later = [holder for holder in after if holder[0] == "process" and holder[1].endswith("python3")]
    assert len(later) == 1 and after[later[0]] > before.get(later[0], 0.0) + 4.0
    assert after.get(("unattributed", ""), 0.0) == pytest.approx(before.get(("unattributed", ""), 0.0))
    assert len(after) <= 12  # A's few names, A's own holder, B's, unattributed


def test_a_tenants_last_kernels_are_not_the_next_tenants(tmp_path: Path, trace_paths) -> None:
    """Live on an H200 (evidence/2026-12-01-h200/owners): A's matmuls ended just after
    a poll, with no per-process sample left, and B's idle process, alone on the GPU at the next
    poll, took that window's busy time. A window that a holder left is no one else's."""
    process(tmp_path, 101, "python3", uid=A)
    process(tmp_path, 200, "python3", uid=B)
    gpu = FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(101, 8 * GIB, "/usr/bin/python3"), (200, 64 << 20, "/usr/bin/python3")])  # no samples (as on MIG)
    backend, fake, clock = started_backend([gpu])
    poller = Poller(backend, parse_config({"sharing": {"enabled": True}, "proc_root": str(tmp_path)}), clock=clock)
    for _ in range(3):
        clock.advance(1.0)
        poller.poll_once()
    fake.gpus[0].processes = [(200, 64 << 20, "/usr/bin/python3")]  # A is gone; the GPU was busy to the end of the window
    clock.advance(1.0)
    snapshot = poller.poll_once()
    holders = {holder.label: totals.busy_seconds for holder, totals in snapshot.gpus[0].sharing.holders}
    assert holders.get(f"{B}:python3", 0.0) == 0.0 and holders[""] > 0.5


# ---- the owner of a process -------------------------------------------------------------------

def test_the_owner_is_the_pod_then_the_slurm_job_then_the_real_uid(tmp_path: Path) -> None:
    pod = "0f4b8c8e-1111-2222-3333-444455556666"
    process(tmp_path, 10, "python", cgroup=f"0::/kubepods/besteffort/pod{pod}/{'ab' * 32}", uid=0)
    process(tmp_path, 11, "python", cgroup="0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0", uid=A)
    process(tmp_path, 12, "python", uid=A)
    (tmp_path / "12" / "status").write_text(f"Name:\tpython\nUid:\t{A}\t0\t0\t0\nGid:\t0\t0\t0\t0\n")  # setuid root: its user is still A
    owners = [owner_of(pid, (tmp_path / str(pid) / "cgroup").read_text().split("\n"), tmp_path) for pid in (10, 11, 12)]
    assert owners == [Owner("pod", pod), Owner("slurm_job", "7"), Owner("user", str(A))]


@pytest.mark.parametrize("text", [
    "",
    "Name:\tpython\n",
    "Uid:\t1001\t1001\n",  # not four ids
    "Uid:\t1001\t1001\t1001\t1001\nUid:\t0\t0\t0\t0\n",  # two lines: one is forged
    "Uid:\t\u0661\t1\t1\t1\n",  # a digit to isdigit(), not to the kernel
    "Uid:\t-1\t1\t1\t1\n",
    "Uid:\t1001\r0\t1001\t1001\n",
])
def test_a_status_file_not_as_the_kernel_writes_it_gives_no_user(tmp_path: Path, text: str) -> None:
    process(tmp_path, 10, "python", uid=A)
    (tmp_path / "10" / "status").write_text(text)
    assert real_uid(10, tmp_path) is None and owner_of(10, ["0::/"], tmp_path) is None


def test_a_real_process_is_its_real_users() -> None:
    import os

    assert real_uid(os.getpid(), Path("/proc")) == os.getuid()


# ---- the properties: any placement of owner B's processes, any readings ------------------------

PROFILES = {  # readings of one GPU: utilization and the profiling ratios (tests/unit/pipeline/test_peers.py's, and more)
    "waiting": (0.99, {"sm_active": 0.36, "sm_occupancy": 0.1, "tensor_active": 0.22, "dram_active": 0.05}),
    "working": (0.99, {"sm_active": 0.9, "sm_occupancy": 0.3, "tensor_active": 0.66, "dram_active": 0.1}),
    "spinning": (0.99, {"sm_active": 0.6, "sm_occupancy": 0.03, "tensor_active": 0.05, "dram_active": 0.02}),
    "light": (0.99, {"sm_active": 0.5, "sm_occupancy": 0.05, "tensor_active": 0.02, "dram_active": 0.03}),
    "starved": (0.6, {"sm_active": 0.55, "sm_occupancy": 0.2, "tensor_active": 0.4, "dram_active": 0.05}),
    "idle": (0.0, {"sm_active": 0.0, "sm_occupancy": 0.0, "tensor_active": 0.0, "dram_active": 0.0}),
}
GPUS = 6
A_RANKS = [101 + n for n in range(GPUS)]  # A's launcher 110's ranks, one per GPU
B_PROCESSES = [200, 301, 302, 303, 304]  # B's hand-started program, and B's launcher 310's ranks


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("proc")
    process(root, 100, "bash", uid=A)
    process(root, 110, "torchrun", 100, 100, uid=A)
    for pid in A_RANKS:
        process(root, pid, "python", 110, 100, uid=A)
    process(root, 199, "bash", uid=B)
    process(root, 200, "python", 199, 199, uid=B)
    process(root, 310, "sh", 199, 199, uid=B)
    for pid in B_PROCESSES[1:]:
        process(root, pid, "python", 310, 199, uid=B)
    return root


def sample(index: int, profile: str, pids: list[int]) -> GpuSample:
    utilization, ratios = PROFILES[profile]
    device = DeviceInfo(index=index, uuid=f"GPU-{index}", name="NVIDIA H200", sm_count=132, max_sm_clock_mhz=1980, power_limit_watts=700)
    return GpuSample(device=device, timestamp=10.0, window_seconds=1.0, gpu_utilization=utilization, gpu_utilization_window=utilization,
                     sm_clock_mhz=1980, power_watts=500.0, profiling=Profiling(**ratios), processes=tuple(GpuProcess(pid, "python") for pid in pids))


def verdicts(proc: Path, profiles: list[str], placement: list[list[int]]) -> tuple[list[str], dict[str, tuple[int | None, tuple[int, ...]]]]:
    """Each GPU's class as the daemon reports it, and each job's (straggler, waiting GPUs) by label."""
    samples = [sample(index, profile, pids) for index, (profile, pids) in enumerate(zip(profiles, placement, strict=True))]
    resolver = JobResolver(proc)
    judgement = judge([(each, derive(each, Config())) for each in samples], memberships(samples, resolver), resolver.launcher_names)
    classes = [judgement.classes.get(each.device.uuid, derive(each, Config()).bottleneck) for each in samples]
    jobs = {job.name: (job.straggler.index if job.straggler else None, tuple(gpu.index for gpu in job.waiting)) for job in judgement.jobs}
    return classes, jobs


def owner(pid: int) -> int:
    return A if pid in A_RANKS else B


profile_lists = st.lists(st.sampled_from(sorted(PROFILES)), min_size=GPUS, max_size=GPUS)
a_gpus = st.sets(st.integers(0, GPUS - 1), min_size=2)
b_additions = st.lists(st.tuples(st.integers(0, GPUS - 1), st.sampled_from(B_PROCESSES)), max_size=8)


def placements(a: set[int], additions: list[tuple[int, int]]) -> tuple[list[list[int]], list[list[int]]]:
    before = [[A_RANKS[index]] if index in a else [] for index in range(GPUS)]
    after = [list(pids) for pids in before]
    for index, pid in additions:
        if pid not in after[index]:
            after[index].append(pid)
    return before, after


@settings(max_examples=300)
@given(profiles=profile_lists, a=a_gpus, additions=b_additions)
def test_adding_bs_processes_never_adds_a_verdict_or_blame_to_as_gpus(world: Path, profiles: list[str], a: set[int], additions: list[tuple[int, int]]) -> None:
    """Wherever B's processes go: B's processes on GPUs A does not run on change nothing of A's
    (its GPUs' classes, its job's straggler and waiting GPUs); on a GPU of A's job they take that
    GPU out of A's job, so A's GPUs can only lose a cross-GPU verdict (each falls back to its own
    reading), never gain one, and A's straggler is always a GPU A holds alone. No GPU where B runs
    waits on, or is named the straggler of, anyone's job but B's own.

    (That B's process can withdraw A's verdict is the price: a GPU of A's and B's processes reads
    the same whichever tenant does its work, so it cannot stay in A's job without one tenant's work
    excusing or blaming the other's, the bug this forbids.)"""
    before, after = placements(a, additions)
    classes_before, jobs_before = verdicts(world, profiles, before)
    classes_after, jobs_after = verdicts(world, profiles, after)
    own = [derive(sample(index, profile, []), Config()).bottleneck for index, profile in enumerate(profiles)]
    shared_with_a = {index for index, _ in additions if index in a}
    alone = {index: {owner(pid) for pid in pids} for index, pids in enumerate(after)}
    a_jobs_after = {name: verdict for name, verdict in jobs_after.items() if name.startswith(f"{A}:")}
    if not shared_with_a:
        assert [classes_after[index] for index in a] == [classes_before[index] for index in a]
        assert a_jobs_after == jobs_before
    for index in range(GPUS):
        if alone[index] != {B}:
            assert classes_after[index] in (classes_before[index], own[index])
        if B in alone[index] and classes_after[index] == PEER_WAIT:
            assert alone[index] == {B}
    for name, (straggler, waiting) in jobs_after.items():
        for index in (*waiting, *([straggler] if straggler is not None else [])):
            assert alone[index] == ({A} if name.startswith(f"{A}:") else {B})


@settings(max_examples=300)
@given(profiles=profile_lists, a=a_gpus, additions=b_additions, others=profile_lists)
def test_an_owners_verdicts_never_read_a_gpu_it_shares(world: Path, profiles: list[str], a: set[int], additions: list[tuple[int, int]], others: list[str]) -> None:
    """Whatever the GPUs A and B share read (B's work or A's), the classes of the GPUs each owner
    holds alone and the stragglers of its jobs stay the same: no tenant's work excuses another's
    underfill or is blamed for it. Before, A's idle child on B's busy GPU made A's GPU peer_wait."""
    _, after = placements(a, additions)
    shared = [index for index, pids in enumerate(after) if len({owner(pid) for pid in pids}) > 1]
    changed = [others[index] if index in shared else profile for index, profile in enumerate(profiles)]
    classes, jobs = verdicts(world, profiles, after)
    classes_changed, jobs_changed = verdicts(world, changed, after)
    assert [c for index, c in enumerate(classes) if index not in shared] == [c for index, c in enumerate(classes_changed) if index not in shared]
    assert jobs == jobs_changed
    for index in shared:
        assert classes_changed[index] == derive(sample(index, changed[index], []), Config()).bottleneck  # its own reading


# ---- what readers of /metrics learn of other tenants ---------------------------------------------


@pytest.mark.parametrize("names", [True, False], ids=["process_names", "uids-only"])
def test_without_process_names_no_reader_learns_which_programs_the_nodes_users_run(tenants: Path, trace_paths, names: bool) -> None:
    """Any tenant who can reach the port reads every holder and job label (on a node whose /proc is
    mounted hidepid=2, users cannot list each other's processes). With process_names: false the
    fair split's holders and the process groups' job labels carry the uid alone, and neither
    /metrics nor /api/live holds a program's name."""
    from gpueff.web.history import History
    from gpueff.web.live import LiveData

    process(tenants, 400, "secret-ft", uid=B)  # B's program on GPU 0, beside A's rank; A's job on GPUs 1 and 2
    process(tenants, 103, "python", 110, 100, uid=A)
    matmul = load_trace(trace_paths["matmul_8192"])
    gpus = [FakeGpu(matmul, processes=[(101, GIB, "/home/a/python"), (400, GIB, "/home/b/secret-ft")], process_duty={101: 0.6, 400: 0.3}),
            FakeGpu(matmul, processes=[(102, GIB, "/home/a/python")], process_duty={102: 0.9}),
            FakeGpu(matmul, processes=[(103, GIB, "/home/a/python")], process_duty={103: 0.9})]
    backend, _, clock = started_backend(gpus)
    poller = Poller(backend, parse_config({"sharing": {"enabled": True}, "proc_root": str(tenants), "process_names": names}), clock=clock, wall_clock=lambda: 1.7e9 + clock())
    for _ in range(4):
        poller.poll_once()
        clock.advance(1.0)
    snapshot = poller.poll_once()
    exposition = render(snapshot).decode()
    live = b"".join(LiveData(lambda: snapshot, History(), "", clock=lambda: snapshot.taken_monotonic).answer(0) or ()).decode()
    holders = {(s.labels["holder_kind"], s.labels["holder"]) for family in text_string_to_metric_families(exposition) if family.name == "gpueff_holder_busy_seconds" for s in family.samples}
    if names:
        assert holders == {("process", f"{A}:python"), ("process", f"{B}:secret-ft")}
        assert "secret-ft" in exposition and f'job_id="{A}:sh:1-2"' in exposition
    else:
        assert holders == {("user", str(A)), ("user", str(B))}
        assert f'job_id="{A}:1-2"' in exposition and f'"{A}:1-2"' in live  # A's job, by uid and GPUs
        for text in (exposition, live):
            assert "secret-ft" not in text and "python" not in text and ":sh:" not in text


class _Opens:
    """Every path opened while ``recording`` is a list (an audit hook, installed once per process)."""

    recording: list[str] | None = None
    installed = False

    @classmethod
    def hook(cls, event: str, args: tuple) -> None:
        if cls.recording is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            cls.recording.append(os.fsdecode(args[0]))


@pytest.mark.parametrize("names", [True, False], ids=["process_names", "uids-only"])
def test_of_a_tenants_process_only_its_cgroup_status_stat_and_name_are_read(tenants: Path, trace_paths, names: bool) -> None:
    """A process's command line and environment (arguments, tokens, paths) are never opened, so
    they can reach no label, log line, page or trace; without process_names not even its name is."""
    if not _Opens.installed:
        sys.addaudithook(_Opens.hook)
        _Opens.installed = True
    for pid in (101, 102, 301):
        (tenants / str(pid) / "cmdline").write_bytes(b"python\0train.py\0--hf-token=s3cret\0")
        (tenants / str(pid) / "environ").write_bytes(b"HF_TOKEN=s3cret\0")
    matmul = load_trace(trace_paths["matmul_8192"])
    gpus = [FakeGpu(matmul, processes=[(101, GIB, "python"), (301, GIB, "python")], process_duty={101: 0.5, 301: 0.4}), FakeGpu(matmul, processes=[(102, GIB, "python")], process_duty={102: 0.9})]
    backend, _, clock = started_backend(gpus)
    poller = Poller(backend, parse_config({"sharing": {"enabled": True}, "proc_root": str(tenants), "process_names": names}), clock=clock)
    _Opens.recording = []
    try:
        for _ in range(3):
            poller.poll_once()
            clock.advance(1.0)
    finally:
        opened, _Opens.recording = _Opens.recording, None
    read = {Path(path).name for path in opened if path.startswith(str(tenants))}
    assert read == ({"cgroup", "status", "stat", "comm"} if names else {"cgroup", "status", "stat"}), read
