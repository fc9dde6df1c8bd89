"""Who holds a GPU process: a Kubernetes pod, a Slurm job, or (neither) one Unix user's program.

A holder is what the fair split of a shared GPU is reported per (docs/sharing.md). It is never a
PID, so the number of series stays bounded by the pods, jobs, users and program names on a node,
and it is always one owner's (attribution/owner.py): no process joins another tenant's holder.

- ``pod``: the pod UID from the process's cgroup (join with kube-state-metrics' ``kube_pod_info``
  on ``uid`` for names);
- ``slurm_job``: the Slurm job id from the process's cgroup;
- ``process``: one user's program, ``<uid>:<name>`` (the name from ``/proc/<pid>/comm``, else
  NVML's name without its directory); one user's processes with the same name on one GPU are one
  holder, two users' never are;
- ``user``: ``<uid>``, the user's processes that have no name, and those of its names beyond the
  first few on a GPU (pipeline/split.py), so that one user's many names fill only its own holder;
- ``unattributed``: processes whose owner cannot be read (gone, or another PID namespace).

The exporter must see the host's PIDs (hostPID on Kubernetes) for NVML's PIDs to be found here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpueff.attribution.cgroup import read_cgroup
from gpueff.attribution.owner import owner_of, real_uid
from gpueff.attribution.slurm import SlurmJob, job_of_lines
from gpueff.logs import fields
from gpueff.untrusted import read_text

log = logging.getLogger(__name__)

HOLDER_KINDS = ("pod", "slurm_job", "process", "user", "unattributed")


@dataclass(frozen=True, slots=True, order=True)
class Holder:
    kind: str  # one of HOLDER_KINDS
    name: str  # the pod UID, the Slurm job id, the program's name; "" for user and unattributed
    user: str = ""  # the uid of a process or user holder

    @property
    def label(self) -> str:
        """The exported ``holder`` label."""
        if self.kind == "process":
            return f"{self.user}:{self.name}"
        return self.user if self.kind == "user" else self.name


UNATTRIBUTED = Holder("unattributed", "")


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    holder: Holder
    job: SlurmJob | None = None  # the Slurm job, where the process runs in one
    user_id: str = ""  # its real uid in decimal; "" where it cannot be read
    name: str = ""  # its program's name (comm); "" where it cannot be read, or names are not read


def program_name(pid: int, nvml_name: str, proc_root: Path) -> str:
    """The name a process gave itself (``/proc/<pid>/comm``, bytes it chose), else NVML's name
    without its directory; "" where neither is known."""
    try:
        return read_text(proc_root / str(pid) / "comm").strip()
    except OSError:
        return nvml_name.rsplit("/", 1)[-1].strip()


def identify(pid: int, nvml_name: str, proc_root: Path, names: bool = True) -> ProcessIdentity:
    """The holder of one process, from its owner and name, with its uid and name for the process
    view (pipeline/processes.py); unattributed where its owner cannot be read. Every file is bytes
    the process's owner chose (untrusted.py). Without ``names`` no name is read and a user's
    processes are its user holder."""
    lines = read_cgroup(pid, proc_root) or []
    owner = owner_of(pid, lines, proc_root)
    if owner is None:
        return ProcessIdentity(UNATTRIBUTED)
    name = program_name(pid, nvml_name, proc_root) if names else ""
    if owner.kind == "user":
        return ProcessIdentity(Holder("process", name, owner.id) if name else Holder("user", "", owner.id), user_id=owner.id, name=name)
    uid = real_uid(pid, proc_root)
    user_id = "" if uid is None else str(uid)
    if owner.kind == "pod":
        return ProcessIdentity(Holder("pod", owner.id), user_id=user_id, name=name)
    return ProcessIdentity(Holder("slurm_job", owner.id), job_of_lines(lines), user_id, name)


class HolderResolver:
    """Identifies processes, remembering each PID while it keeps being seen (one /proc read per new
    PID, none per poll for a PID already known)."""

    def __init__(self, proc_root: Path = Path("/proc"), names: bool = True) -> None:
        self.proc_root = proc_root
        self.names = names  # a user's programs are holders of their own (process_names)
        self._known: dict[int, ProcessIdentity] = {}

    def resolve(self, processes: Iterable[tuple[int, str]]) -> dict[int, ProcessIdentity]:
        """PID -> identity for this poll's (pid, NVML name) pairs; PIDs not seen again are forgotten."""
        seen: dict[int, ProcessIdentity] = {}
        for pid, name in processes:
            if pid in seen:
                continue
            identity = self._known.get(pid)
            seen[pid] = identity if identity is not None else self._identify(pid, name)
        self._known = seen
        return seen

    def _identify(self, pid: int, nvml_name: str) -> ProcessIdentity:
        """``identify``, contained: one process that cannot be identified is unattributed (and
        remembered as such while it lives), never a failed poll for every GPU."""
        try:
            return identify(pid, nvml_name, self.proc_root, self.names)
        except Exception:
            log.exception("cannot identify process %d; its share is reported as unattributed", pid, extra=fields(pid=pid))
            return ProcessIdentity(UNATTRIBUTED)
