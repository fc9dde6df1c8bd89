"""Which Slurm job a process runs in, read from its cgroup path (``/proc/<pid>/cgroup``).

Slurm's cgroup plugins put every task of a job under the job's own cgroup:

- cgroup/v1: ``/slurm/uid_<uid>/job_<id>/step_<step>/task_<n>`` in each controller's hierarchy
  (``/slurm_<node>/...`` with several slurmd daemons on one host);
- cgroup/v2: ``/system.slice/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>``
  (``<node>_slurmstepd.scope`` with several slurmd daemons; ``step_batch``, ``step_extern``
  with ``task_special``, ``step_interactive`` for the special steps).

Only a ``job_<id>`` directly below one of those Slurm roots, at the root of the hierarchy, counts,
so an unrelated directory that happens to be called ``job_1`` is never taken for a job, nor one a
user made to look like another job's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Anchored at the path's start (after any ``..`` of the exporter's own cgroup namespace): under cgroup
# v2 the user owns the cgroups below its task's (Slurm delegates them) and anyone with a delegated
# user slice can name directories ``slurmstepd.scope/job_7``; only Slurm's own place counts.
_JOB = re.compile(r"^/(?:\.\./)*(?:system\.slice/)?(?:slurm(?:_[^/]+)?|(?:[^/]+_)?slurmstepd\.scope)/(?:uid_([0-9]+)/)?job_([0-9]+)(?:/step_([^/]+))?(?:/|$)")


@dataclass(frozen=True, slots=True, order=True)
class SlurmJob:
    """A Slurm job a process belongs to. ``user_id`` is known on cgroup v1 only; ``step`` is ""
    for a process in the job's cgroup but in no step (the job's own slurmstepd)."""

    job_id: str
    step: str = ""
    user_id: str = ""


def job_of_cgroup_line(line: str) -> SlurmJob | None:
    """The Slurm job in one ``hierarchy:controllers:path`` line of /proc/<pid>/cgroup, if any."""
    path = line.rstrip("\n").split(":", 2)[-1]
    match = _JOB.search(path)
    if match is None:
        return None
    user_id, job_id, step = match.groups()
    return SlurmJob(job_id=job_id, step=step or "", user_id=user_id or "")


def job_of_lines(lines: list[str]) -> SlurmJob | None:
    """The Slurm job in the lines of a /proc/<pid>/cgroup file as attribution/cgroup.read_cgroup
    gives them (the unified v2 line first, then v1's controllers): the first that names a job
    (under v1 every controller Slurm uses names the same job; some, like the pids controller, may not)."""
    for line in lines:
        job = job_of_cgroup_line(line)
        if job is not None:
            return job
    return None
