"""Which job holds each GPU (gpueff/attribution/jobs.py), read from a /proc tree laid out as the
kernel lays it out: pods and Slurm jobs from cgroups, process groups from their launcher."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.proc import process

from gpueff.attribution.jobs import JobKey, JobResolver, gpu_ranges, job_label, memberships, parse_stat
from gpueff.sample import DeviceInfo, GpuProcess, GpuSample

POD_UID = "0f4b8c8e-1111-2222-3333-444455556666"


def on(index: int, *pids: int) -> GpuSample:
    return GpuSample(device=DeviceInfo(index=index, uuid=f"GPU-{index}", name="NVIDIA H100"), timestamp=0.0, processes=tuple(GpuProcess(pid, "python") for pid in pids))


@pytest.fixture()
def proc(tmp_path: Path) -> Path:
    process(tmp_path, 100, "bash", 1, 100)  # an interactive shell: a session leader
    process(tmp_path, 200, "torchrun", 100, 100)
    process(tmp_path, 201, "python", 200, 100)
    process(tmp_path, 202, "python", 200, 100)
    process(tmp_path, 300, "python", 100, 100)  # started by hand from the shell
    process(tmp_path, 301, "python", 100, 100)
    process(tmp_path, 400, "python", 1, 400)  # a daemon
    process(tmp_path, 500, "python", 1, 500, f"0::/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/cri-containerd-{'a' * 64}.scope")
    process(tmp_path, 600, "python", 1, 600, "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0")
    process(tmp_path, 700, "mp_main", 100, 100)  # mp.spawn: the parent holds a GPU too
    process(tmp_path, 701, "python", 700, 100)
    return tmp_path


def test_ranks_of_one_launcher_are_one_job_and_hand_started_programs_are_not(proc: Path) -> None:
    resolver = JobResolver(proc)
    found = memberships([on(0, 201), on(1, 202), on(2, 300), on(3, 301), on(4, 400)], resolver)
    assert found["GPU-0"] == found["GPU-1"] == [JobKey("process_group", "1000:200")]
    assert found["GPU-2"] == [JobKey("process_group", "1000:300")] and found["GPU-3"] == [JobKey("process_group", "1000:301")]
    assert found["GPU-4"] == [JobKey("process_group", "1000:400")]
    assert job_label(JobKey("process_group", "1000:200"), [1, 0], resolver.launcher_names) == "1000:torchrun:0-1"


def test_pods_and_slurm_jobs_come_from_cgroups(proc: Path) -> None:
    found = memberships([on(0, 500), on(1, 600)], JobResolver(proc))
    assert found == {"GPU-0": [JobKey("pod", POD_UID)], "GPU-1": [JobKey("slurm_job", "4242")]}


def test_a_parent_that_holds_a_gpu_is_in_the_job_and_its_launcher_is_above(proc: Path) -> None:
    found = memberships([on(0, 700), on(1, 701)], JobResolver(proc))
    assert found["GPU-0"] == found["GPU-1"] == [JobKey("process_group", "1000:700")]  # the shell above is no launcher: the topmost rank is


def test_a_gpu_of_one_users_two_jobs_is_in_both(proc: Path) -> None:
    found = memberships([on(0, 201, 300), on(1, 202), on(2, 301)], JobResolver(proc))
    assert found["GPU-0"] == [JobKey("process_group", "1000:200"), JobKey("process_group", "1000:300")]


def test_a_gpu_of_two_owners_or_of_an_unknown_one_is_in_no_job(proc: Path) -> None:
    """Owners never cross: a user's rank beside a Slurm job's, or beside a PID that cannot be read
    (gone, another PID namespace: anyone's), puts the GPU in neither's job."""
    found = memberships([on(0, 201, 600), on(1, 202, 99999), on(2, 99999), on(3, 500, 600)], JobResolver(proc))
    assert found == {}


def test_a_process_whose_user_cannot_be_read_is_in_no_job(proc: Path) -> None:
    for text in ("", "Uid:\t1000\t1000\n", "Uid:\t1000\t1000\t1000\t1000\nUid:\t0\t0\t0\t0\n", "Uid:\t\u0661\t1\t1\t1\n"):
        (proc / "202" / "status").write_text(text)
        resolver = JobResolver(proc)
        assert memberships([on(0, 202)], resolver) == {} and resolver.owners == {}


def test_a_replayed_gpu_carries_its_recorded_job() -> None:
    sample = GpuSample(device=DeviceInfo(index=0, uuid="GPU-r", name="NVIDIA H100", job="ddp"), timestamp=0.0)
    assert memberships([sample], JobResolver(Path("/nonexistent"))) == {"GPU-r": [JobKey("trace", "ddp")]}


def test_pids_are_read_once_while_seen_and_forgotten_after(proc: Path) -> None:
    resolver = JobResolver(proc)
    memberships([on(0, 201)], resolver)
    (proc / "201" / "stat").write_text("garbage")
    assert memberships([on(0, 201)], resolver)["GPU-0"] == [JobKey("process_group", "1000:200")]  # cached
    memberships([on(0)], resolver)
    assert memberships([on(0, 201)], resolver) == {}  # read again: unparseable now, so no job
    assert resolver.launcher_names == {}


@pytest.mark.parametrize(("text", "expected"), [
    ("5 (a) b) S 4 5 9 0", ("a) b", 4, 9)),
    ("5 (x y) S 1 5 5 0", ("x y", 1, 5)),
    ("5 x S 1 5 5", None),
    ("5 (x) S one 5 5", None),
    ("", None),
])
def test_stat_lines_with_hostile_names(text: str, expected: tuple[str, int, int] | None) -> None:
    parsed = parse_stat(text)
    assert (None if parsed is None else (parsed.name, parsed.parent, parsed.session)) == expected


def test_gpu_ranges() -> None:
    assert [gpu_ranges(case) for case in ([0, 1, 2, 3], [0, 2, 3], [5], [])] == ["0-3", "0,2-3", "5", ""]


def test_a_torchrun_job_on_live_gpus_is_judged_together(proc: Path, trace_paths) -> None:
    """The NVML backend lists each rank on its GPU; the daemon finds their launcher in /proc and
    judges the two GPUs as one job: the rank that spins while its peer computes waits on it."""
    from fakes.nvml import FakeGpu, started_backend

    from gpueff.poller import Poller
    from gpueff.settings import Config
    from gpueff.trace import load_trace

    waiting = FakeGpu(load_trace(trace_paths["spin_1sm"]), processes=[(201, 2**30, "python")])
    working = FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(202, 2**30, "python")])
    alone = FakeGpu(load_trace(trace_paths["spin_1sm"]), processes=[(300, 2**30, "python")])  # started by hand: its own job
    backend, _, clock = started_backend([waiting, working, alone])
    poller = Poller(backend, Config(proc_root=str(proc)), clock=clock, wall_clock=lambda: 1.7e9 + clock())
    for _ in range(6):
        clock.advance(1.0)
        snapshot = poller.poll_once()
    assert [state.derived.bottleneck for state in snapshot.gpus] == ["peer_wait", "compute", "underfilled"]
    (job,) = snapshot.jobs
    assert (job.kind, job.name, [gpu.index for gpu in job.gpus], job.straggler.index) == ("process_group", "1000:torchrun:0-1", [0, 1], 1)
