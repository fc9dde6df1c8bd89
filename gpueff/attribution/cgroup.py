"""Which pod and container a process runs in, read from ``/proc/<pid>/cgroup``.

Works with cgroup v1 and v2, the systemd and cgroupfs cgroup drivers, and the containerd, CRI-O and
Docker runtimes: the kubelet names a pod's cgroup after its UID (``pod<uid>``, with ``_`` for
``-`` under systemd) and the runtime names the container's after its 64-hex id. The exporter must
run with hostPID for the PIDs NVML reports to be the ones in its ``/proc``.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from gpueff.attribution.kubernetes.owners import ProcessOwner
from gpueff.logs import fields
from gpueff.untrusted import read_lines

log = logging.getLogger(__name__)
_MAX_WARNED = 4096
_warned: set[int] = set()  # PIDs whose suspect cgroup file was logged (each once, while few)

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# The pod's own cgroup, a whole path component: ``pod<uid>`` (cgroupfs driver) or
# ``kubepods[-<qos>]-pod<uid>.slice`` (systemd driver, ``_`` for ``-``).
_POD = re.compile(rf"pod({_UID})|kubepods(?:-[a-z]+)?-pod({_UID})\.slice")
# What may lie above it: the kubelet's hierarchy (``kubepods``, ``kubepods.slice``, its QoS levels,
# a ``kube*``/``kubelet*`` cgroup root), or ``..`` where the exporter sees the path from its own
# cgroup namespace. A cgroup anyone can create elsewhere (a delegated user slice) named like a pod
# is not a pod.
_ABOVE_POD = re.compile(r"\.\.|kube[^/]*|burstable|besteffort")
_CONTAINER = re.compile(r"^(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$")


def owner_of_cgroup_line(line: str) -> ProcessOwner | None:
    """The pod UID and container id in one ``hierarchy:controllers:path`` line, if it has them: the
    outermost pod cgroup, under the kubelet's hierarchy only, and the container cgroup right below
    it. A process can create cgroups below its own (cgroup v2 delegation), so nothing deeper counts:
    a tenant that names a nested cgroup after another pod or container stays in its own."""
    path = line.rstrip("\n").split(":", 2)[-1]
    parts = [part for part in path.split("/") if part]
    depth = next((depth for depth, part in enumerate(parts) if _POD.fullmatch(part) or not _ABOVE_POD.fullmatch(part)), len(parts))
    pod = _POD.fullmatch(parts[depth]) if depth < len(parts) else None
    if pod is None:
        return None
    container = _CONTAINER.match(parts[depth + 1]) if depth + 1 < len(parts) else None
    return ProcessOwner(pod_uid=(pod.group(1) or pod.group(2)).replace("_", "-"), container_id=container.group(1) if container else "")


def read_cgroup(pid: int, proc_root: Path) -> list[str] | None:
    """The lines of ``/proc/<pid>/cgroup``, the unified (v2) hierarchy's first; None where the
    process is gone, the file unreadable, or suspect (a control character in a path: a cgroup name
    that hides a forged line, logged once), so the process is attributed to no pod and no job. The
    one reader of that file: Kubernetes attribution, the fair split's holders and multi-GPU jobs all
    go through it. It holds paths anyone who can create a cgroup names (untrusted.py)."""
    try:
        lines = read_lines(proc_root / str(pid) / "cgroup")
    except OSError:
        return None
    if lines is None:
        if pid not in _warned:
            if len(_warned) >= _MAX_WARNED:
                _warned.clear()
            _warned.add(pid)
            log.warning("process %d's cgroup path holds a control character; it is attributed to no pod or Slurm job", pid, extra=fields(pid=pid))
        return None
    return sorted(lines, key=lambda line: not line.startswith("0::"))


def owner_of_cgroup(lines: list[str]) -> ProcessOwner | None:
    """The pod and container that the first line naming one gives (on v1 every controller names the same pod)."""
    for line in lines:
        owner = owner_of_cgroup_line(line)
        if owner is not None:
            return owner
    return None


def process_owner(pid: int, proc_root: Path = Path("/proc")) -> ProcessOwner | None:
    """The pod and container of a process; None if it is not in a pod, is gone, or is unreadable."""
    lines = read_cgroup(pid, proc_root)
    return None if lines is None else owner_of_cgroup(lines)
