"""The GPUs of one job judged together: which GPU waits on a peer, the straggler it waits on, and
the job's own figures (efficiency, class mix, link traffic, the time lost waiting).

Why a cross-GPU judgement (docs/classes.md, ``peer_wait``): a rank of a synchronous job (data
parallel, FSDP, tensor or pipeline parallel) that reaches a collective first waits inside the
collective's kernel for its peers. That kernel stays resident on the few SMs of its channels and
spins on flags in memory, so the GPU reads busy (utilization ~1) with SM activity low and no link
near its roof: alone, exactly ``underfilled``, whose advice (more blocks, larger batches) is wrong.
What tells them apart is not on the GPU: it is the job's other GPUs. The ranks of a synchronous
job take the same wall time per step, and both run the same collectives; so where one GPU idles
while busy (utilization - SM activity) clearly more than another GPU of its job, the difference is
time it spent spinning in a collective for that GPU. The straggler is the GPU of the job that idles
least while busy (an idle or unknown GPU is not judged); a GPU whose own class says "busy, nothing
near a roof" (``underfilled``, ``latency`` or ``mixed``) and which idles ``WAIT_MARGIN`` of the
window or more beyond the straggler reads ``peer_wait``, and that excess is its lost share of the
window. A GPU whose own class is a roof (``compute``, ``memory``, ``communication``) or ``host``
keeps it: that is its own limit whatever it also waits.

Owners never cross: a job's GPUs hold its owner's processes only (attribution/jobs.py), so no
tenant's process can make another tenant's GPU wait, name it a straggler, or excuse its own GPU
by another's work; a GPU shared by two owners keeps the class its own readings give.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpueff.attribution.jobs import JobKey, job_label
from gpueff.pipeline.derive import Derived
from gpueff.pipeline.totals import Totals
from gpueff.sample import GpuSample

PEER_WAIT = "peer_wait"
WAITING_LOOKS_LIKE = frozenset({"underfilled", "latency", "mixed"})  # busy, nothing near a roof: what a rank spinning in a collective reads alone
NOT_JUDGED = frozenset({"idle", "unknown", PEER_WAIT})
# Two ranks of a balanced job idle alike while busy, within the few points a window's sampling
# moves them; a tenth of the window more is time spent waiting (the 2 x H200 straggler's rank 0
# idled 0.54 of it more than rank 1).
WAIT_MARGIN = 0.1


@dataclass(frozen=True, slots=True)
class JobGpu:
    index: int
    uuid: str


@dataclass(frozen=True, slots=True)
class LinkTraffic:
    """Bytes per second summed over the job's GPUs that read them; None where none did."""

    nvlink_tx: float | None = None
    nvlink_rx: float | None = None
    pcie_tx: float | None = None
    pcie_rx: float | None = None


@dataclass(frozen=True, slots=True)
class JobState:
    """One job of two or more GPUs, as judged this poll."""

    kind: str
    name: str  # the exported label (attribution/jobs.py job_label)
    gpus: tuple[JobGpu, ...]  # by index
    efficiency: float | None  # summed SM activity / summed utilization of its GPUs
    classes: tuple[tuple[str, int], ...]  # GPUs per reported class (after peer_wait)
    traffic: LinkTraffic
    straggler: JobGpu | None  # the GPU the others wait on; None while none waits
    waiting: tuple[JobGpu, ...]  # the GPUs that wait on it
    peer_wait: float | None  # share of the job's GPU time lost waiting this window (0..1)


@dataclass(frozen=True, slots=True)
class PeerJudgement:
    jobs: tuple[JobState, ...]
    classes: dict[str, str]  # uuid -> the class to report where the judgement changed it
    lost: dict[str, float]  # uuid -> seconds lost waiting on the straggler this window


NOTHING = PeerJudgement((), {}, {})


def idle_while_busy(sample: GpuSample, derived: Derived) -> float | None:
    busy, sm = derived.busy, sample.profiling.sm_active
    return None if busy is None or sm is None else max(0.0, busy - sm)


def judge(gpus: Sequence[tuple[GpuSample, Derived | None]], membership: Mapping[str, Sequence[JobKey]], launcher_names: Mapping[str, str]) -> PeerJudgement:
    """Judge every job of two or more GPUs. ``membership``: uuid -> the jobs that hold the GPU (one
    owner's GPU may be in several of its jobs; a GPU of two owners is in none: attribution/jobs.py).
    GPUs that are down count among a job's GPUs but are not judged."""
    members: dict[JobKey, list[tuple[GpuSample, Derived | None]]] = {}
    for sample, derived in gpus:
        for key in membership.get(sample.device.uuid, ()):
            members.setdefault(key, []).append((sample, derived))
    labelled: dict[tuple[str, str], dict[str, tuple[GpuSample, Derived | None]]] = {}
    for key, held in sorted(members.items()):  # one job per exported label: one user's two groups of one name on the same GPUs are one
        name = job_label(key, (sample.device.index for sample, _ in held), launcher_names)
        labelled.setdefault((key.kind, name), {}).update((sample.device.uuid, (sample, derived)) for sample, derived in held)
    jobs = {label: sorted(held.values(), key=lambda pair: pair[0].device.index) for label, held in labelled.items() if len(held) > 1}
    if not jobs:
        return NOTHING
    waits: dict[str, str] = {}
    lost: dict[str, float] = {}
    found: dict[tuple[str, str], tuple[JobGpu | None, tuple[JobGpu, ...], float]] = {}
    for label, held in jobs.items():
        straggler, waiting, job_lost = _waits([(sample, derived) for sample, derived in held if sample.up and derived is not None])
        for gpu, seconds in waiting:
            waits[gpu.uuid] = PEER_WAIT
            lost[gpu.uuid] = max(lost.get(gpu.uuid, 0.0), seconds)
        found[label] = (straggler, tuple(gpu for gpu, _ in waiting), job_lost)
    states = tuple(_job_state(kind, name, held, *found[kind, name], waits) for (kind, name), held in jobs.items())
    return PeerJudgement(states, waits, lost)


def _waits(up: list[tuple[GpuSample, Derived]]) -> tuple[JobGpu | None, list[tuple[JobGpu, float]], float]:
    """(the straggler, each waiting GPU with the seconds it lost, the job's lost share of GPU time)."""
    idle = {sample.device.uuid: value for sample, derived in up if derived.bottleneck not in NOT_JUDGED and (value := idle_while_busy(sample, derived)) is not None}
    judged = [(sample, derived) for sample, derived in up if sample.device.uuid in idle]
    if len(judged) < 2:
        return None, [], 0.0
    slowest = min((sample for sample, _ in judged), key=lambda sample: (idle[sample.device.uuid], -(sample.profiling.sm_active or 0.0), sample.device.index))
    floor = idle[slowest.device.uuid]
    waiting: list[tuple[JobGpu, float]] = []
    shares = 0.0
    for sample, derived in judged:
        share = idle[sample.device.uuid] - floor
        if derived.bottleneck in WAITING_LOOKS_LIKE and share >= WAIT_MARGIN:
            shares += share
            waiting.append((JobGpu(sample.device.index, sample.device.uuid), share * (sample.window_seconds or 0.0)))
    if not waiting:
        return None, [], 0.0
    return JobGpu(slowest.device.index, slowest.device.uuid), waiting, shares / len(up)


def _job_state(kind: str, name: str, held: list[tuple[GpuSample, Derived | None]], straggler: JobGpu | None, waiting: tuple[JobGpu, ...], job_lost: float, waits: Mapping[str, str]) -> JobState:
    up = [(sample, derived) for sample, derived in held if sample.up and derived is not None]
    busy = [(derived.busy, sample.profiling.sm_active) for sample, derived in up if derived.busy is not None and sample.profiling.sm_active is not None]
    total_busy = sum(value for value, _ in busy)
    classes = Counter(waits.get(sample.device.uuid, derived.bottleneck) for sample, derived in up)
    return JobState(
        kind=kind,
        name=name,
        gpus=tuple(JobGpu(sample.device.index, sample.device.uuid) for sample, _ in held),
        efficiency=min(1.0, sum(sm for _, sm in busy) / total_busy) if total_busy > 0 else None,
        classes=tuple(sorted(classes.items())),
        traffic=LinkTraffic(**{name: _summed(up, attribute) for name, attribute in _LINKS}),
        straggler=straggler,
        waiting=waiting,
        peer_wait=job_lost if busy else None,
    )


_LINKS = (("nvlink_tx", "nvlink_tx_bytes_per_second"), ("nvlink_rx", "nvlink_rx_bytes_per_second"), ("pcie_tx", "pcie_tx_bytes_per_second"), ("pcie_rx", "pcie_rx_bytes_per_second"))


def _summed(up: list[tuple[GpuSample, Derived]], attribute: str) -> float | None:
    values = [value for sample, _ in up if (value := getattr(sample.profiling, attribute)) is not None]
    return sum(values) if values else None


def apply(derived: Derived, judgement: PeerJudgement, uuid: str) -> Derived:
    """The GPU's readings with the class the judgement gives it (unchanged where it gives none)."""
    verdict = judgement.classes.get(uuid)
    return derived if verdict is None else replace(derived, bottleneck=verdict)


def across_gpus(gpus: Sequence[tuple[GpuSample, Derived | None, Totals]], membership: Mapping[str, Sequence[JobKey]], launcher_names: Mapping[str, str]) -> tuple[PeerJudgement, tuple[tuple[Derived | None, Totals], ...]]:
    """The cross-GPU stage, after the per-GPU one: every GPU's (sample, readings, totals) in, the
    judgement and every GPU's (readings, totals) after it out, in the same order. A GPU that waits on
    a slower peer of its job reads ``peer_wait`` and its totals count the seconds it lost; the rest
    come out as they went in. Pure: nothing given is changed."""
    judgement = judge([(sample, derived) for sample, derived, _ in gpus], membership, launcher_names)
    after = []
    for sample, derived, totals in gpus:
        uuid = sample.device.uuid
        if derived is not None and uuid in judgement.classes:
            derived = apply(derived, judgement, uuid)
            totals = replace(totals, peer_wait_seconds=totals.peer_wait_seconds + judgement.lost.get(uuid, 0.0))
        after.append((derived, totals))
    return judgement, tuple(after)
