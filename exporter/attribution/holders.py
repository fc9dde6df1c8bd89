"""Who holds a GPU process: a Kubernetes pod, a Slurm job, or (neither) the process's name.

A holder is what the fair split of a shared GPU is reported per (docs/sharing.md). It is never a
PID, so the number of series stays bounded by the pods, jobs and program names on a node:

- ``pod``: the pod UID from the process's cgroup (join with kube-state-metrics' ``kube_pod_info``
  on ``uid`` for names);
- ``slurm_job``: the Slurm job id from the process's cgroup;
- ``process``: the process's name (``/proc/<pid>/comm``, else NVML's name without its directory);
  processes with the same name on one GPU are one holder.

The exporter must see the host's PIDs (hostPID on Kubernetes) for NVML's PIDs to be found here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from exporter.attribution.cgroup import owner_of_cgroup, read_cgroup
from exporter.attribution.slurm import SlurmJob, job_of_lines
from exporter.logs import fields
from exporter.untrusted import read_text

log = logging.getLogger(__name__)

HOLDER_KINDS = ("pod", "slurm_job", "process", "unattributed")


@dataclass(frozen=True, slots=True, order=True)
class Holder:
    kind: str  # one of HOLDER_KINDS
    name: str  # "" for unattributed


UNATTRIBUTED = Holder("unattributed", "")


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    holder: Holder
    job: SlurmJob | None = None  # the Slurm job, where the process runs in one


def identify(pid: int, nvml_name: str, proc_root: Path) -> ProcessIdentity:
    """The holder of one process, from its cgroup and name; unattributed where neither is readable.
    Both files are bytes the process's owner chose (untrusted.py)."""
    lines = read_cgroup(pid, proc_root) or []
    owner = owner_of_cgroup(lines)
    if owner is not None:
        return ProcessIdentity(Holder("pod", owner.pod_uid))
    job = job_of_lines(lines)
    if job is not None:
        return ProcessIdentity(Holder("slurm_job", job.job_id), job)
    try:
        name = read_text(proc_root / str(pid) / "comm").strip()
    except OSError:
        name = nvml_name.rsplit("/", 1)[-1].strip()
    return ProcessIdentity(Holder("process", name) if name else UNATTRIBUTED)


class HolderResolver:
    """Identifies processes, remembering each PID while it keeps being seen (one /proc read per new
    PID, none per poll for a PID already known)."""

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self.proc_root = proc_root
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
            return identify(pid, nvml_name, self.proc_root)
        except Exception:
            log.exception("cannot identify process %d; its share is reported as unattributed", pid, extra=fields(pid=pid))
            return ProcessIdentity(UNATTRIBUTED)
