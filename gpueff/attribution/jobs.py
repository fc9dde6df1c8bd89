"""Which job each GPU process belongs to, so the GPUs of one multi-GPU job can be judged together.

A job is found from what the node shows about the processes NVML lists on the GPUs:

- ``pod``: the pod UID in the process's cgroup (every rank of a pod is one job);
- ``slurm_job``: the Slurm job id in the process's cgroup (``srun`` ranks, one job however many steps);
- ``process_group`` (neither, a bare host): the processes of one Unix user started by one launcher.
  The launcher is the nearest ancestor (``/proc/<pid>/stat`` field 4, the parent) that holds no GPU
  itself: ``torchrun``, ``mpirun``, ``deepspeed``, ``mp.spawn``'s parent, a job script. A parent
  that is a session leader (an interactive shell, a terminal's, tmux's, ``setsid``) or init is no
  launcher: two programs started by hand from one shell are two jobs, each its own process's.

Owners never cross (attribution/owner.py): a job holds the processes of one owner only, and a GPU
that holds processes of two owners (or one whose owner cannot be read) is in no job at all. Such a
GPU is judged alone: no other owner's job can make it wait, name it a straggler or be excused by it.
A rank that opened contexts on several GPUs joins them all to its job. Only the owner and the key are
kept per PID, read once while the PID keeps being seen (the holder cache's rule). The exporter must
see the host's PIDs (hostPID) for NVML's PIDs to be found here; where it does not, no job is found and
each GPU is judged alone, as before. Every file read is bytes a process's owner chose (untrusted.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpueff.attribution.cgroup import read_cgroup
from gpueff.attribution.owner import Owner, owner_of
from gpueff.logs import fields
from gpueff.sample import GpuSample
from gpueff.untrusted import read_text

log = logging.getLogger(__name__)

JOB_KINDS = ("pod", "slurm_job", "process_group", "trace")
MAX_ANCESTORS = 64  # a parent chain longer than this is not followed further (a loop through reused PIDs)


@dataclass(frozen=True, slots=True, order=True)
class JobKey:
    """One job: its kind (JOB_KINDS) and an id within the kind. A process group's id is its
    launcher's PID, never exported: its label is made from the launcher's name and its GPUs."""

    kind: str
    id: str


@dataclass(frozen=True, slots=True)
class ProcessStat:
    """The fields of ``/proc/<pid>/stat`` a job needs."""

    name: str  # comm: at most 15 bytes, chosen by the process
    parent: int
    session: int


def parse_stat(text: str) -> ProcessStat | None:
    """``pid (comm) state ppid pgrp session ...``; comm may hold spaces and parentheses, so the
    fields are read after its last ``)``. None where the text is not that shape."""
    head, close, tail = text.rpartition(")")
    if not close or "(" not in head:
        return None
    fields = tail.split()
    if len(fields) < 4 or not all(field.lstrip("-").isascii() and field.lstrip("-").isdigit() for field in fields[1:4]):
        return None
    return ProcessStat(head.split("(", 1)[1], int(fields[1]), int(fields[3]))


def read_stat(pid: int, proc_root: Path) -> ProcessStat | None:
    try:
        return parse_stat(read_text(proc_root / str(pid) / "stat", 4096))
    except OSError:
        return None


class JobResolver:
    """Finds each GPU process's owner and job; remembers both per PID while it keeps being seen."""

    def __init__(self, proc_root: Path = Path("/proc"), names: bool = True) -> None:
        self.proc_root = proc_root
        self.names = names  # a process group's label names its launcher (process_names)
        self._known: dict[int, tuple[Owner | None, JobKey | None]] = {}
        self.owners: dict[int, Owner] = {}  # this poll's GPU processes whose owner was read
        self.launcher_names: dict[str, str] = {}  # a process group's id -> its label's start: "<uid>:<launcher name>"

    def resolve(self, gpu_pids: Iterable[int]) -> dict[int, JobKey]:
        """PID -> job for this poll's GPU processes (those of no job found are left out)."""
        pids = set(gpu_pids)
        seen: dict[int, tuple[Owner | None, JobKey | None]] = {}
        for pid in sorted(pids):
            seen[pid] = self._known[pid] if pid in self._known else self._job_contained(pid, pids)
        self._known = seen
        self.owners = {pid: owner for pid, (owner, _) in seen.items() if owner is not None}
        live = {key.id for _, key in seen.values() if key is not None and key.kind == "process_group"}
        self.launcher_names = {key: name for key, name in self.launcher_names.items() if key in live}
        return {pid: key for pid, (_, key) in seen.items() if key is not None}

    def _job_contained(self, pid: int, gpu_pids: set[int]) -> tuple[Owner | None, JobKey | None]:
        try:
            return self._job(pid, gpu_pids)
        except Exception:  # one unreadable process must not fail the poll for every GPU
            log.exception("cannot find the job of process %d; its GPUs are judged alone", pid, extra=fields(pid=pid))
            return None, None

    def _job(self, pid: int, gpu_pids: set[int]) -> tuple[Owner | None, JobKey | None]:
        lines = read_cgroup(pid, self.proc_root)
        if lines is None:
            return None, None  # gone, or another PID namespace
        owner = owner_of(pid, lines, self.proc_root)
        if owner is None or owner.kind != "user":
            return owner, None if owner is None else JobKey(owner.kind, owner.id)
        launcher, name = self._launcher(pid, gpu_pids)
        if launcher is None:
            return owner, None
        key = JobKey("process_group", f"{owner.id}:{launcher}")  # one launcher's processes of one user
        self.launcher_names[key.id] = f"{owner.id}:{name}" if self.names else owner.id
        return owner, key

    def _launcher(self, pid: int, gpu_pids: set[int]) -> tuple[int | None, str]:
        """The nearest ancestor holding no GPU that is neither init nor a session leader, with its
        name; else the topmost GPU process of the chain itself (a job of its own)."""
        current = read_stat(pid, self.proc_root)
        if current is None:
            return None, ""
        top, top_name = pid, current.name
        for _ in range(MAX_ANCESTORS):
            parent = current.parent
            if parent <= 1:
                break
            above = read_stat(parent, self.proc_root)
            if above is None:
                break
            if parent not in gpu_pids:
                if above.session == parent:  # a session leader: a shell, not a launcher
                    break
                return parent, above.name
            top, top_name, current = parent, above.name, above
        return top, top_name


def memberships(samples: Iterable[GpuSample], resolver: JobResolver) -> dict[str, list[JobKey]]:
    """uuid -> the jobs holding the GPU: its processes' jobs, where they are all of one owner, and
    a replayed GPU's recorded job. A GPU holding processes of several owners, or of one whose
    owner cannot be read, is in no job: owners never cross."""
    samples = list(samples)
    jobs = resolver.resolve(process.pid for sample in samples for process in sample.processes or ())
    found: dict[str, list[JobKey]] = {}
    for sample in samples:
        processes = sample.processes or ()
        owners = {resolver.owners.get(process.pid) for process in processes}
        alone = len(owners) == 1 and None not in owners
        keys = {key for process in processes if alone and (key := jobs.get(process.pid)) is not None}
        if sample.device.job:
            keys.add(JobKey("trace", sample.device.job))
        if keys:
            found[sample.device.uuid] = sorted(keys)
    return found


def job_label(key: JobKey, gpus: Iterable[int], launcher_names: Mapping[str, str]) -> str:
    """The job's exported label: a pod UID, a Slurm job id or a trace's job name as they are; a
    process group as ``<uid>:<launcher name>:<its GPUs>`` (``1000:torchrun:0-3``; ``1000:0-3``
    without process_names), bounded by the
    users, GPUs and names on the node, never a PID. Two users' groups never share a label."""
    if key.kind != "process_group":
        return key.id
    return f"{launcher_names.get(key.id, '')}:{gpu_ranges(sorted(set(gpus)))}"


def gpu_ranges(indices: list[int]) -> str:
    """Sorted GPU indices as ranges: [0, 1, 2, 3] -> "0-3", [0, 2, 3] -> "0,2-3"."""
    parts: list[str] = []
    start = previous = None
    for index in [*indices, None]:
        if index is not None and previous is not None and index == previous + 1:
            previous = index
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = index
    return ",".join(parts)
