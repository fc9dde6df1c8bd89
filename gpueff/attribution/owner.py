"""Whose a GPU process is: the one owner it is counted for, whatever it is named or wherever it runs.

Owners never cross (docs/security.md): a job, a straggler verdict, a fair-split holder and an app's
process join are each formed from the processes of one owner only. The owner is the most specific
of what the node knows about the process, in this order:

- ``pod``: the pod UID in its cgroup (under the kubelet's hierarchy only, attribution/cgroup.py);
- ``slurm_job``: the Slurm job id in its cgroup (under Slurm's own cgroup root, attribution/slurm.py);
- ``user``: its real Unix user id (``/proc/<pid>/status``), which only a privileged process can change.

A process name, a parent chain, an executable path or a cgroup created below one's own are chosen
by the process's owner and never make it someone else's. A process whose owner cannot be read (it is
gone, or in another PID namespace) has none: it is nobody's, and counts as another owner wherever
it runs beside someone's process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpueff.attribution.cgroup import owner_of_cgroup
from gpueff.attribution.slurm import job_of_lines
from gpueff.untrusted import read_text, whole_number

OWNER_KINDS = ("pod", "slurm_job", "user")


@dataclass(frozen=True, slots=True, order=True)
class Owner:
    kind: str  # one of OWNER_KINDS
    id: str  # the pod UID, the Slurm job id, or the uid in decimal


def real_uid(pid: int, proc_root: Path) -> int | None:
    """The real user id on the ``Uid:`` line of ``/proc/<pid>/status``; None where the file cannot
    be read or does not hold exactly one such line of four tab-separated ASCII ids as the kernel
    writes it (the kernel escapes the newlines a process may put in its name, so a second line would
    be forged: nothing is then trusted). The file holds tabs, so it is not read with read_lines."""
    try:
        text = read_text(proc_root / str(pid) / "status")
    except OSError:
        return None
    lines = [line for line in text.split("\n") if line.startswith("Uid:")]
    fields = lines[0].split("\t") if len(lines) == 1 else []  # "Uid:<TAB>real<TAB>effective<TAB>saved<TAB>filesystem"
    ids = [whole_number(part, 10) for part in fields[1:]]
    return ids[0] if len(ids) == 4 and None not in ids else None


def owner_of(pid: int, cgroup_lines: list[str], proc_root: Path) -> Owner | None:
    """The process's owner, from its cgroup lines (read_cgroup's) and else its real uid."""
    pod = owner_of_cgroup(cgroup_lines)
    if pod is not None:
        return Owner("pod", pod.pod_uid)
    job = job_of_lines(cgroup_lines)
    if job is not None:
        return Owner("slurm_job", job.job_id)
    uid = real_uid(pid, proc_root)
    return None if uid is None else Owner("user", str(uid))
