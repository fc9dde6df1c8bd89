"""Which profiling fields (1001-1016) to watch on each GPU, and watching them so that a refusal loses as
little as possible.

1. Ask DCGM which fields each GPU supports (dcgmProfGetSupportedMetricGroups, as dcgm-exporter does) and
   watch only those.
2. Before Hopper, metric groups that share a major ID cannot be read in one pass: DCGM then multiplexes
   them, and a field whose pass did not run reads 0, which cannot be told from a real 0 (DCGM issue 169).
   By default only one group per major ID is watched (the one that holds SM activity, else the most of
   the core fields), so every value is a real reading. ``multi_pass`` watches every supported field.
   Hopper and newer read GPM, which has no such limit: every supported field is watched there.
3. A DCGM watch is all or nothing. If the whole set is refused for a reason that is not about the
   permission, the profiler lock or the host engine itself, each metric group is watched on its own, SM
   activity's first, and a refused group field by field, so one unsupported field never costs SM
   activity. Each of these smaller watches gets a DCGM group of its own: a refused watch makes the host
   engine run the unwatch of its whole group in the profiling module, whose message names the group and
   the connection but no fields (DcgmHostEngineHandler.cpp WatchFieldGroup -> UnwatchFieldGroup;
   modules/profiling/dcgm_profiling_structs.h dcgmProfUnwatchFields_v1), so a part accepted earlier on
   the same group would stop updating. The other refusals (WHOLE_REFUSALS) end the attempt at once: a
   smaller watch would only make and destroy more groups and field groups in the host engine's tables of 64.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpueff.backends.dcgm.fields import SM_ACTIVE_ID
from gpueff.backends.dcgm.session import DcgmSession, Entity, MetricGroup, Watch

log = logging.getLogger(__name__)

CORE_IDS = (1002, 1003, 1004, 1005, 1001)  # what a single pass keeps first, most important first
COMPUTE_CAPABILITY_ID = 63  # DCGM_FI_CUDA_GPU_COMPUTE_CAPABILITY: major << 16 | minor
FIRST_GPM_MAJOR = 9  # Hopper: DCGM reads GPM, whose metrics have no pass limit
HOPPER_ARCHITECTURE = 9  # dcgm_structs.h DCGM_CHIP_ARCH_HOPPER (Blackwell is 10)
# Refusals that no smaller watch avoids: they concern the caller or the GPU's profiler, not the fields.
WHOLE_REFUSALS = {
    "DCGM_ST_REQUIRES_ROOT",
    "DCGM_ST_NO_PERMISSION",
    "DCGM_ST_IN_USE",
    "DCGM_ST_MODULE_NOT_LOADED",
    "DCGM_ST_PROFILING_LIBRARY_ERROR",
    "DCGM_ST_INSUFFICIENT_DRIVER_VERSION",
    "DCGM_ST_MAX_LIMIT",
    "DCGM_ST_GPU_IS_LOST",
    "DCGM_ST_CONNECTION_NOT_VALID",
}
MODULE_NOT_LOADED = "DCGM_ST_MODULE_NOT_LOADED"
REQUIRES_ROOT = "DCGM_ST_REQUIRES_ROOT"


def refusal_reasons(session: DcgmSession) -> dict[str, str]:
    """What each refusal means, said right for embedded and standalone mode."""
    if session.embedded:
        engine_root = "the exporter itself must run as root (the embedded host engine runs inside it)"
        root = "the embedded host engine runs inside the exporter, so the exporter itself must run as root for profiling metrics (or use a root nv-hostengine through --dcgm.host)"
    else:
        engine_root = f"the nv-hostengine at {session.host} must run as root"
        root = f"{engine_root} for profiling metrics"
    return {
        "DCGM_ST_PROFILING_NOT_SUPPORTED": "this GPU or DCGM build does not support profiling metrics",
        "DCGM_ST_NOT_SUPPORTED": "this GPU or DCGM build does not support these profiling fields",
        "DCGM_ST_IN_USE": "another profiler holds the GPU's performance counters (Nsight, or another DCGM host engine on a pre-Hopper GPU)",
        "DCGM_ST_REQUIRES_ROOT": root,
        "DCGM_ST_NO_PERMISSION": "profiling is restricted to admin users (driver option RmProfilingAdminOnly=1)",
        "DCGM_ST_PROFILING_MULTI_PASS": "these profiling fields cannot be collected in one pass on this GPU",
        "DCGM_ST_MODULE_NOT_LOADED": f"DCGM's profiling module did not load in this host engine and stays unloaded until the engine restarts: {engine_root}, and DCGM 4 needs its proprietary package (datacenter-gpu-manager-4-proprietary)",
        "DCGM_ST_PROFILING_LIBRARY_ERROR": "DCGM's profiling library failed: another DCGM host engine probably holds the GPU's profiling counters (the GPU Operator's nv-hostengine, or dcgm-exporter's embedded one); share that one with --dcgm.host",
        "DCGM_ST_INSUFFICIENT_DRIVER_VERSION": f"the driver is too old for DCGM profiling, or {engine_root} (dcgmproftester reads this answer so)",
        "DCGM_ST_MAX_LIMIT": "the host engine's 64 groups or 64 field groups, shared by all its clients, are used up",
        "DCGM_ST_GPU_IS_LOST": "DCGM lost the GPU",
        "DCGM_ST_GROUP_INCOMPATIBLE": "the GPUs of the group are not identical",
    }


@dataclass
class GpuProfiling:
    """What DCGM supports and what is watched on one GPU, for ``check`` and the logs."""

    supported: frozenset[int] = frozenset()
    groups: list[MetricGroup] = field(default_factory=list)
    chosen: frozenset[int] = frozenset()  # what the pass rule picked from the supported fields
    watched: frozenset[int] = frozenset()
    refused: dict[int, str] = field(default_factory=dict)  # field -> why DCGM refused it
    not_supported: str | None = None  # why no profiling field is supported at all
    one_pass_limited: bool = True
    whole_refusal: str | None = None  # a refusal no smaller watch avoids ("DCGM_ST_...: meaning"), to try again later


def single_pass(groups: list[MetricGroup], wanted: frozenset[int]) -> frozenset[int]:
    """At most one metric group per major ID: the one with SM activity, else the most core fields, else the most fields."""
    best: dict[int, MetricGroup] = {}
    for group in groups:
        if not group.field_ids & wanted:
            continue
        current = best.get(group.major)
        if current is None or _rank(group, wanted) > _rank(current, wanted):
            best[group.major] = group
    return frozenset().union(*(group.field_ids & wanted for group in best.values()))


def _rank(group: MetricGroup, wanted: frozenset[int]) -> tuple[int, ...]:
    fields = group.field_ids & wanted
    return (*(int(core in fields) for core in CORE_IDS), len(fields), -group.minor)


Decode = Callable[[Any], tuple[float | None, str]]


def plan(session: DcgmSession, gpu_id: int, wanted: frozenset[int], multi_pass: bool, decode: Decode) -> GpuProfiling:
    """Ask DCGM what ``gpu_id`` supports and choose what to watch there."""
    try:
        groups = session.metric_groups(gpu_id)
    except session.error as error:
        name = session.error_name(error)
        why = "this GPU does not support profiling metrics" if name == "DCGM_ST_NOT_SUPPORTED" else refusal_reasons(session).get(name, str(error))
        reason = f"{name}: {why}"
        return GpuProfiling(not_supported=reason, whole_refusal=reason if name in WHOLE_REFUSALS else None)
    supported = frozenset().union(*(g.field_ids for g in groups)) & wanted if groups else frozenset()
    if not supported:
        return GpuProfiling(groups=groups, not_supported="DCGM lists none of the exporter's profiling fields for this GPU")
    limited = _one_pass_limited(session, gpu_id, decode)
    chosen = supported if multi_pass or not limited else single_pass(groups, wanted)
    return GpuProfiling(supported=supported, groups=groups, chosen=chosen, one_pass_limited=limited)


def _one_pass_limited(session: DcgmSession, gpu_id: int, decode: Decode) -> bool:
    """Whether the GPU is older than Hopper: its chip architecture (DCGM 4.2.3+), else its compute
    capability (field 63); unknown counts as older, the safe side."""
    architecture = session.chip_architecture(gpu_id)
    if architecture is not None:
        return architecture < HOPPER_ARCHITECTURE
    try:
        values = session.latest(session.entities([gpu_id]), [COMPUTE_CAPABILITY_ID], live=True)
    except session.error:
        return True
    for value in values:
        number, status = decode(value)
        if status == "ok" and number is not None:
            return (int(number) >> 16) < FIRST_GPM_MAJOR
    return True


def watch(session: DcgmSession, group: Any, entities: list[Entity], gpus: list[GpuProfiling], interval: float, label: str) -> list[Watch]:
    """Watch the chosen fields of ``gpus`` (identical GPUs: ``entities``, the members of ``group``) with
    the fallbacks above; the watches made. The whole set is tried on ``group``, every smaller watch on
    a group of its own, destroyed again where DCGM refuses the watch."""
    chosen = sorted(gpus[0].chosen)
    watched: list[int] = []
    made: list[Watch] = []
    refused: dict[int, str] = {}
    reasons = refusal_reasons(session)

    def attempt(field_ids: list[int], purpose: str) -> str | None:
        """None where DCGM watches ``field_ids``, else why not ("DCGM_ST_...: meaning")."""
        own = None
        try:
            if purpose != f"{label}-all":
                own = session.group(entities, purpose)
            made.append(session.watch(own if own is not None else group, field_ids, interval, purpose))
        except session.error as error:
            if own is not None:
                session.drop_group(own)
            name = session.error_name(error)
            return f"{name}: {reasons.get(name, str(error))}"
        watched.extend(field_ids)
        return None

    def whole(reason: str | None) -> bool:
        return reason is not None and reason.split(":")[0] in WHOLE_REFUSALS

    refusal = attempt(chosen, f"{label}-all")
    if refusal is not None and not whole(refusal):
        log.info("DCGM refused the profiling fields %s together (%s): watching them group by group", chosen, refusal)
        parts = [sorted(g.field_ids & set(chosen)) for g in gpus[0].groups if g.field_ids & set(chosen)]
        parts.sort(key=lambda ids: (SM_ACTIVE_ID not in ids, ids))  # SM activity's group first
        for number, part in enumerate(parts):
            part = [f for f in part if f not in watched]
            reason = attempt(part, f"{label}-{number}") if part else None
            if whole(reason):
                refusal = reason
                break
            if reason is None:
                continue
            if len(part) == 1:
                refused[part[0]] = reason
                continue
            for field_id in part:  # the group as a whole was refused: field by field
                each = attempt([field_id], f"{label}-{number}-{field_id}")
                if each is not None:
                    refused[field_id] = each
    for field_id in chosen:
        if field_id not in watched and field_id not in refused:
            refused[field_id] = refusal or "not watched"
    for gpu in gpus:
        gpu.watched = frozenset(watched)
        gpu.refused = dict(refused)
        gpu.whole_refusal = refusal if whole(refusal) and not watched else None
    return made
