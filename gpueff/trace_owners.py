"""Owners declared for replayed GPUs (format ``gpu-owners/1``): who the demo's GPUs belong to, so
that ``--demo`` shows on the page, in ``top``, in Grafana and in ``report`` what a cluster shows.
The owners are made up and marked as such everywhere (gpueff_gpu_attribution_info path="demo",
gpueff_exporter_build_info replayed="true"); the recordings themselves hold none.

One JSON object: ``format``, ``description`` and ``gpus``, a list of entries naming a trace (its
path under gpueff/traces/, as ``h200/idle.json``) and exactly one owner:

- ``pod``: ``namespace``, ``pod``, ``container`` (Kubernetes' own name rules) and ``uid``, as the
  kubelet would assign the GPU and the process's cgroup would name the pod;
- ``slurm_job``: ``id`` (digits) and ``user_id``, as a job's cgroup names it;
- ``user``: ``uid``, a bare host's Unix user;

and optionally ``process``, the name of the one compute process it holds the GPU with (default
python3). A trace no entry names replays as a free GPU (no process). Everything is checked when the
file is loaded; an error names the file, the entry and the key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpueff.config.values import shown
from gpueff.untrusted import read_file

FORMAT = "gpu-owners/1"
MAX_BYTES = 256 * 1024
MAX_ENTRIES = 1024
OWNER_KINDS = ("pod", "slurm_job", "user")
DEMO_OWNERS = Path(__file__).with_name("traces") / "demo-owners.json"
# Kubernetes' rules (RFC 1123): a label at most 63 characters, a subdomain at most 253.
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PROCESS = re.compile(r"[A-Za-z0-9._+-]{1,15}")  # /proc/<pid>/comm holds at most 15 bytes
_TRACE = re.compile(r"[A-Za-z0-9_.-]{1,64}/[A-Za-z0-9_.-]{1,128}\.json")


class OwnersError(Exception):
    """An owners file that cannot be used, with the reason phrased for the user."""


@dataclass(frozen=True, slots=True)
class DeclaredOwner:
    kind: str  # one of OWNER_KINDS
    process: str  # the name of the compute process it holds the GPU with
    namespace: str = ""  # pod
    pod: str = ""
    container: str = ""
    pod_uid: str = ""
    job_id: str = ""  # slurm_job
    user_id: str = ""  # user: the uid; slurm_job: the job's user


def _text(value: Any, pattern: re.Pattern[str], limit: int, where: str, what: str) -> str:
    if not isinstance(value, str) or len(value) > limit or not pattern.fullmatch(value):
        raise OwnersError(f"{where}: {what} must be {_RULES[pattern.pattern]}, got {shown(value)}")
    return value


_RULES = {
    _LABEL.pattern: "a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters)",
    _SUBDOMAIN.pattern: "a DNS-1123 subdomain (at most 253 characters)",
    _UID.pattern: "a pod UID (8-4-4-4-12 lower-case hex digits)",
    _PROCESS.pattern: "a process name of 1 to 15 letters, digits or ._+-",
    _TRACE.pattern: "a trace's path under gpueff/traces/ (folder/name.json)",
}


def _number(value: Any, where: str, what: str, bound: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < bound:
        raise OwnersError(f"{where}: {what} must be a whole number from 0 to {bound - 1}, got {shown(value)}")
    return str(value)


def _object(value: Any, required: set[str], where: str, optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise OwnersError(f"{where}: expected an object, got {shown(value)}")
    unknown = sorted(set(value) - required - optional)
    if unknown:
        raise OwnersError(f"{where}: unknown key {shown(unknown[0])}; the keys are {', '.join(sorted(required | optional))}")
    missing = sorted(required - set(value))
    if missing:
        raise OwnersError(f"{where}: missing key {missing[0]!r}")
    return value


def _entry(value: Any, where: str) -> tuple[str, DeclaredOwner]:
    if not isinstance(value, dict):
        raise OwnersError(f"{where}: expected an object, got {shown(value)}")
    kinds = [kind for kind in OWNER_KINDS if kind in value]
    if len(kinds) != 1:
        raise OwnersError(f"{where}: exactly one owner of {', '.join(OWNER_KINDS)} is needed, got {len(kinds)}")
    kind = kinds[0]
    entry = _object(value, {"trace", kind}, where, frozenset({"process"}))
    trace = _text(entry["trace"], _TRACE, 193, where, "trace")
    process = _text(entry.get("process", "python3"), _PROCESS, 15, where, "process")
    place = f"{where}.{kind}"
    if kind == "pod":
        pod = _object(entry[kind], {"namespace", "pod", "container", "uid"}, place)
        return trace, DeclaredOwner(kind, process, _text(pod["namespace"], _LABEL, 63, place, "namespace"), _text(pod["pod"], _SUBDOMAIN, 253, place, "pod"),
                                    _text(pod["container"], _LABEL, 63, place, "container"), pod_uid=_text(pod["uid"], _UID, 36, place, "uid"))
    if kind == "slurm_job":
        job = _object(entry[kind], {"id"}, place, frozenset({"user_id"}))
        job_user = _number(job["user_id"], place, "user_id", 1 << 32) if "user_id" in job else ""
        return trace, DeclaredOwner(kind, process, job_id=_number(job["id"], place, "id", 1 << 63), user_id=job_user)
    user = _object(entry[kind], {"uid"}, place)
    return trace, DeclaredOwner(kind, process, user_id=_number(user["uid"], place, "uid", 1 << 32))


def parse_owners(data: Any, where: str) -> dict[str, DeclaredOwner]:
    """Trace path (under gpueff/traces/) -> its declared owner."""
    top = _object(data, {"format", "gpus"}, where, frozenset({"description"}))
    if top["format"] != FORMAT:
        raise OwnersError(f"{where}: format must be {FORMAT!r}, got {shown(top['format'])}")
    entries = top["gpus"]
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        raise OwnersError(f"{where}: gpus must be a list of at most {MAX_ENTRIES} entries, got {shown(entries)}")
    owners: dict[str, DeclaredOwner] = {}
    for number, value in enumerate(entries):
        trace, owner = _entry(value, f"{where}: gpus[{number}]")
        if trace in owners:
            raise OwnersError(f"{where}: gpus[{number}]: trace {trace!r} is named twice")
        owners[trace] = owner
    return owners


def load_owners(path: Path) -> dict[str, DeclaredOwner]:
    import json  # only where owners are replayed: a live daemon imports no JSON reader

    try:
        data = json.loads(read_file(path, MAX_BYTES).decode("utf-8"))
    except OSError as error:
        raise OwnersError(f"owners file {path}: cannot read it: {error.strerror or error}") from None
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, not a regular file, too large
        raise OwnersError(f"owners file {path}: {str(error)[:200]}") from None
    return parse_owners(data, f"owners file {path}")


def owners_of(paths: Sequence[Path], owners: dict[str, DeclaredOwner], root: Path) -> list[DeclaredOwner | None]:
    """Each trace's declared owner (None: free), by its path under ``root``; an owner naming a
    trace not among ``paths`` is an error (a renamed trace would silently lose its owner)."""
    names = [path.relative_to(root).as_posix() if path.is_relative_to(root) else "" for path in paths]
    stray = sorted(set(owners) - set(names))
    if stray:
        raise OwnersError(f"the owners name a trace that is not replayed: {stray[0]!r}")
    return [owners.get(name) for name in names]


def demo_owners(paths: Sequence[Path]) -> list[DeclaredOwner | None]:
    """The demo's declared owner of each of its traces (``paths``: trace.demo_trace_paths())."""
    return owners_of(paths, load_owners(DEMO_OWNERS), DEMO_OWNERS.parent)
