"""What ``/`` finds: the GPUs whose names, owners or class hold every word of the filter, letter
case aside. A word may name the field it looks in (``pod:llama``, ``ns:ml``, ``job:48213``,
``user:1001``, ``class:host``, ``name:h200``); without one it looks in all of them. The same words
and fields as the live page's search (gpueff/web/ui/page.js). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpueff.overview import GpuOverview, JobOverview

FIELDS = ("name", "pod", "namespace", "job", "user", "class")
ALIASES = {"ns": "namespace", "gpu": "name", "model": "name", "command": "name"}


def fields(gpu: GpuOverview, users: Mapping[str, str], jobs: Iterable[JobOverview] = ()) -> dict[str, list[str]]:
    """What each field of one GPU holds: its model, trace and processes' names; its pods (and the
    pod UIDs of its processes); its namespaces; its Slurm jobs, multi-GPU jobs and the holders of
    its processes; its processes' users (uid and name); its class."""
    rows = gpu.processes.rows if gpu.processes is not None else ()
    return {
        "name": [gpu.model, gpu.source, str(gpu.index), *(row.name for row in rows)],
        "pod": [*(f"{pod.namespace}/{pod.pod}" for pod in gpu.pods), *(pod.container for pod in gpu.pods), *(row.holder for row in rows if row.holder_kind == "pod")],
        "namespace": [pod.namespace for pod in gpu.pods],
        "job": [*(job.job_id for job in gpu.slurm_jobs), *(job.name for job in jobs if gpu.index in job.gpus), *(row.holder for row in rows if row.holder_kind == "slurm_job")],
        "user": [*(row.user_id for row in rows), *(users.get(row.user_id, "") for row in rows), *(job.user_id for job in gpu.slurm_jobs),
                 *(row.holder.split(":", 1)[0] for row in rows if row.holder_kind in ("process", "user"))],
        "class": [(gpu.bottleneck or "") if gpu.up else "down"],
    }


def words(query: str) -> list[tuple[str, str]]:
    """The filter's words as (field or "", text), lower-cased; an unknown field's word is looked for whole."""
    found = []
    for word in query.lower().split():
        field, colon, text = word.partition(":")
        field = ALIASES.get(field, field)
        found.append((field, text) if colon and field in FIELDS and text else ("", word))
    return found


def matches(gpu: GpuOverview, query: str, users: Mapping[str, str], jobs: Iterable[JobOverview] = ()) -> bool:
    """Whether every word of ``query`` is in the field it names (or in any field)."""
    wanted = words(query)
    if not wanted:
        return True
    held = {name: [value.lower() for value in values if value] for name, values in fields(gpu, users, jobs).items()}
    return all(any(text in value for name in ((field,) if field else FIELDS) for value in held[name]) for field, text in wanted)


def found(gpus: Sequence[GpuOverview], query: str, users: Mapping[str, str], jobs: Sequence[JobOverview] = ()) -> list[GpuOverview]:
    return [gpu for gpu in gpus if matches(gpu, query, users, jobs)]
