"""Slurm job attribution from /proc/<pid>/cgroup: cgroup v1 and v2 layouts, in a fake /proc."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.proc import status

from gpueff.attribution.cgroup import read_cgroup
from gpueff.attribution.holders import UNATTRIBUTED, Holder, HolderResolver, identify
from gpueff.attribution.slurm import SlurmJob, job_of_cgroup_line, job_of_lines

CGROUPS = Path(__file__).parent / "slurm_cgroups"
POD_UID = "0c3e2b1a-7f64-4d2b-9a51-3c2d1e0f9a8b"

EXPECTED = {
    "v1-task": SlurmJob("4242", "0", "1000"),
    "v1-batch-multi-slurmd": SlurmJob("90001", "batch", "2001"),
    "v2-task": SlurmJob("777", "3"),
    "v2-extern": SlurmJob("778", "extern"),
    "v2-multi-slurmd": SlurmJob("31337", "0"),
    "v2-slurmd": None,
    "v2-not-slurm": None,
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_job_read_from_each_recorded_layout(name: str, tmp_path: Path) -> None:
    _proc(tmp_path, 7, (CGROUPS / f"{name}.cgroup").read_text())
    lines = read_cgroup(7, tmp_path)
    assert lines is not None and job_of_lines(lines) == EXPECTED[name]


def test_job_cgroup_without_a_step_is_the_job() -> None:
    assert job_of_cgroup_line("0::/system.slice/slurmstepd.scope/job_5") == SlurmJob("5")
    assert job_of_cgroup_line("4:memory:/slurm/uid_0/job_6/") == SlurmJob("6", "", "0")


def test_a_directory_called_job_outside_slurm_is_not_a_job() -> None:
    assert job_of_cgroup_line("0::/kubepods/job_5/step_0") is None
    assert job_of_cgroup_line("0::/myslurm/job_5") is None


def _proc(root: Path, pid: int, cgroup: str | None, comm: str | None = None, uid: int | None = 1000) -> None:
    (root / str(pid)).mkdir(parents=True)
    if cgroup is not None:
        (root / str(pid) / "cgroup").write_text(cgroup)
    if comm is not None:
        (root / str(pid) / "comm").write_text(comm + "\n")
    if uid is not None:
        (root / str(pid) / "status").write_text(status(comm or "", pid, 1, uid))


def test_holders_pod_first_then_slurm_job_then_the_users_program(tmp_path: Path) -> None:
    _proc(tmp_path, 10, (CGROUPS / "v2-task.cgroup").read_text(), "python3")
    _proc(tmp_path, 11, (CGROUPS / "v1-task.cgroup").read_text(), "python3")
    _proc(tmp_path, 12, f"0::/kubepods/besteffort/pod{POD_UID}/" + "ab" * 32 + "\n", "python3")
    _proc(tmp_path, 13, "0::/user.slice/user-1000.slice/session-4.scope\n", "trainer")
    assert identify(10, "", tmp_path).holder == Holder("slurm_job", "777")
    assert identify(10, "", tmp_path).job == SlurmJob("777", "3")
    assert identify(11, "", tmp_path).holder == Holder("slurm_job", "4242")
    assert identify(12, "", tmp_path).holder == Holder("pod", POD_UID)
    assert identify(13, "/usr/bin/python3", tmp_path).holder == Holder("process", "trainer", "1000")
    assert identify(13, "", tmp_path).holder.label == "1000:trainer"


def test_a_process_of_no_known_user_is_unattributed_and_an_unnamed_one_its_users(tmp_path: Path) -> None:
    """Without its owner, a name is anyone's: no holder is made from it."""
    assert identify(99, "/opt/conda/bin/python3.12", tmp_path).holder == UNATTRIBUTED
    _proc(tmp_path, 98, "0::/\n", uid=None)
    assert identify(98, "/opt/conda/bin/python3.12", tmp_path).holder == UNATTRIBUTED
    _proc(tmp_path, 97, "0::/\n")  # no comm: NVML's name, still its user's
    assert identify(97, "/opt/conda/bin/python3.12", tmp_path).holder == Holder("process", "python3.12", "1000")
    assert identify(97, "", tmp_path).holder == Holder("user", "", "1000")
    assert Holder("user", "", "1000").label == "1000"


def test_resolver_reads_each_pid_once_and_forgets_gone_ones(tmp_path: Path) -> None:
    _proc(tmp_path, 20, (CGROUPS / "v2-extern.cgroup").read_text())
    resolver = HolderResolver(tmp_path)
    assert resolver.resolve([(20, "")])[20].holder == Holder("slurm_job", "778")
    (tmp_path / "20" / "cgroup").write_text("0::/\n")  # a re-read would find no job
    assert resolver.resolve([(20, ""), (20, "")])[20].holder == Holder("slurm_job", "778")
    resolver.resolve([])
    assert resolver.resolve([(20, "")])[20].holder == Holder("user", "", "1000")  # read again: in no job now, and nameless


def test_a_job_number_in_other_scripts_digits_is_no_job() -> None:
    """re's \\d takes every script's digits, and int() reads them: job_١٢ (Arabic-Indic) was job 12."""
    assert job_of_cgroup_line("0::/system.slice/slurmstepd.scope/job_12/step_0") == SlurmJob("12", "0")
    for digits in ("١٢", "１２", "१२"):
        assert job_of_cgroup_line(f"0::/system.slice/slurmstepd.scope/job_{digits}/step_0") is None
        assert job_of_cgroup_line(f"0::/system.slice/slurmstepd.scope/uid_{digits}/job_12/step_0") is None
