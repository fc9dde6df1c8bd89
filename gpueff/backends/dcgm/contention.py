"""Whether DCGM multiplexes a pre-Hopper GPU's profiling counters, and which other client causes it.

Metric groups with the same major ID cannot be read in one pass (dcgm_structs.h
dcgmProfMetricGroupInfo_v2); DCGM's profiling module serves every client of a host engine from one
configuration, so another client watching a different metric group of the same major (dcgm-exporter
with a counters file of its own, `dcgmi dmon`) makes DCGM alternate between the groups, and a field
whose pass did not run reads 0 (DCGM issue 169). The exporter's own one-pass choice cannot prevent it.
Other clients' watches are not listed by DCGM's public API, but their field groups are
(dcgmFieldGroupGetAll lists every client's): a field group holding fields of a rival metric group is
taken as that client watching them, on every GPU of the model. That can be wrong both ways round: a
field group may be unwatched, or watched on other GPUs only. Only DCGM's internal API says which
entity a field is watched on (dcgm_agent_internal's dcgmGetCacheManagerFieldInfo, watchers per entity
and field), outside the four binding modules the exporter loads and with a struct whose version
changes between releases; so the public signal stands, and the warning says what it rests on.
Hopper and newer read GPM, which has no pass limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpueff.backends.dcgm.session import MetricGroup

GroupKey = tuple[int, int]  # (major ID, minor ID)


@dataclass(frozen=True)
class Contention:
    multiplexed: bool  # some major ID has more than one metric group watched, ours or another client's
    rivals: tuple[tuple[str, GroupKey], ...]  # (another client's field group, its metric group) that competes with ours


NONE = Contention(False, ())


def group_of(groups: list[MetricGroup], field_id: int) -> GroupKey | None:
    return next(((group.major, group.minor) for group in groups if field_id in group.field_ids), None)


def contention(groups: list[MetricGroup], watched: frozenset[int], others: list[tuple[str, frozenset[int]]]) -> Contention:
    """Ours: the metric groups of ``watched``; theirs: those of the other clients' field groups."""
    ours = {key for field_id in watched if (key := group_of(groups, field_id)) is not None}
    theirs: dict[GroupKey, set[str]] = {}
    for name, field_ids in others:
        for field_id in field_ids:
            key = group_of(groups, field_id)
            if key is not None:
                theirs.setdefault(key, set()).add(name)
    majors = {major for major, _minor in ours}
    watched_keys = ours | set(theirs)
    multiplexed = any(len({minor for major, minor in watched_keys if major == each}) > 1 for each in majors)
    rivals = tuple(sorted((name, key) for key, names in theirs.items() if key not in ours and key[0] in majors for name in names))
    return Contention(multiplexed, rivals)
