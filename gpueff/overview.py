"""What a person looks at: per GPU the figures that tell real work from busy-looking idling, and a
fleet summary line. Built from the poller's snapshot (the live page, ``top`` on local GPUs) or from
a /metrics page (``top --url``); data only, no I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from gpueff.attribution.kubernetes.owners import PodOwner
from gpueff.attribution.slurm import SlurmJob
from gpueff.pipeline.processes import GpuProcesses
from gpueff.snapshot import GpuState, Snapshot

NO_PROFILING_FLAG = "no_profiling"  # SM activity is not read: utilization cannot be told from work


@dataclass(frozen=True, slots=True)
class AppFigures:
    """An application joined with a GPU (docs/apps.md): its throughput and units per joule."""

    name: str
    unit: str
    up: bool
    throughput: float | None  # units per second
    units_per_joule: float | None


@dataclass(frozen=True, slots=True)
class GpuOverview:
    index: int
    uuid: str
    model: str
    source: str  # the replayed trace's workload; "" for a live GPU
    up: bool
    utilization: float | None  # the window's coarse utilization (what nvidia-smi's figure means)
    sm_active: float | None
    efficiency: float | None
    bottleneck: str | None
    mismatch: tuple[str, ...]  # the mismatch rules that hold
    implausible: tuple[str, ...]  # the counter-health checks that fail
    profiling: bool  # SM activity is read
    tensor_flops: float | None  # the HMMA tensor pipe's busy work, BF16-equivalent: an upper bound (gpueff_pipe_busy_flops_per_second{pipe="hmma_bf16_equivalent"})
    peak_tensor_flops: float | None
    dram_bytes_per_second: float | None
    peak_dram_bytes_per_second: float | None
    power_watts: float | None
    busy_flop_per_joule: float | None  # every floating-point pipe's busy work per joule: an upper bound
    estimated_flops: float | None  # the FLOP/s done where the counters support a point estimate (gpueff_estimated_flops_per_second)
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    temperature_celsius: float | None
    busy_idle_sm_seconds: float | None  # ∫ max(0, utilization − SM activity) dt since the exporter started
    apps: tuple[AppFigures, ...] = ()
    pods: tuple[PodOwner, ...] = ()  # the containers the kubelet assigned the GPU to (namespace, pod, container; labels not carried)
    slurm_jobs: tuple[SlurmJob, ...] = ()  # the Slurm jobs whose processes run on it (job id, user id; no step)
    attribution: tuple[str, str] | None = None  # (path, reason) of gpueff_gpu_attribution_info; None where not known
    processes: GpuProcesses | None = None  # its compute processes (pipeline/processes.py); None where not listed (or, over --url, not exported)

    @property
    def flags(self) -> tuple[str, ...]:
        """Everything that deserves a look: mismatch rules, failed counter checks, missing profiling."""
        missing = (NO_PROFILING_FLAG,) if self.up and not self.profiling else ()
        return self.mismatch + self.implausible + missing


@dataclass(frozen=True, slots=True)
class FleetOverview:
    gpus: int
    up: int
    utilization: float | None  # mean over the GPUs up that read it
    sm_active: float | None
    efficiency: float | None  # summed SM activity over summed utilization
    flagged: int  # GPUs up with a mismatch rule holding
    classes: dict[str, int]  # GPUs up per bottleneck class
    tensor_flops: float | None  # summed estimates
    peak_tensor_flops: float | None  # summed peaks of the GPUs with an estimate
    estimated_flops: float | None  # the point estimates summed over the GPUs that have one
    estimated_gpus: int  # how many GPUs up have one
    power_watts: float | None
    busy_idle_sm_seconds: float | None


@dataclass(frozen=True, slots=True)
class JobOverview:
    """A job of two or more GPUs judged together (docs/jobs.md)."""

    kind: str
    name: str
    gpus: tuple[int, ...]
    efficiency: float | None
    classes: dict[str, int]  # GPUs per class
    nvlink_bytes_per_second: float | None  # tx summed over its GPUs
    pcie_bytes_per_second: float | None
    straggler: int | None  # the GPU the others wait on
    waiting: tuple[int, ...]
    peer_wait: float | None  # share of the job's GPU time lost waiting on the straggler


def job_overviews(snapshot: Snapshot, stale: bool) -> list[JobOverview]:
    """The snapshot's multi-GPU jobs; none from a stale snapshot (as /metrics)."""
    if stale:
        return []
    return [
        JobOverview(job.kind, job.name, tuple(gpu.index for gpu in job.gpus), job.efficiency, dict(job.classes), job.traffic.nvlink_tx, job.traffic.pcie_tx,
                    job.straggler.index if job.straggler else None, tuple(gpu.index for gpu in job.waiting), job.peer_wait)
        for job in snapshot.jobs
    ]


def _present(values: Iterable[float | None]) -> list[float]:
    return [value for value in values if value is not None and math.isfinite(value)]


def fleet(gpus: Iterable[GpuOverview]) -> FleetOverview:
    listed = list(gpus)
    up = [gpu for gpu in listed if gpu.up]
    utilization = _present(gpu.utilization for gpu in up)
    sm_active = _present(gpu.sm_active for gpu in up)
    pairs = [(gpu.utilization, gpu.sm_active) for gpu in up if gpu.utilization is not None and gpu.sm_active is not None]
    busy = sum(util for util, _ in pairs)
    estimated = [gpu for gpu in up if gpu.tensor_flops is not None and gpu.peak_tensor_flops]
    power = _present(gpu.power_watts for gpu in up)
    work = _present(gpu.estimated_flops for gpu in up)
    waste = _present(gpu.busy_idle_sm_seconds for gpu in listed)
    return FleetOverview(
        gpus=len(listed),
        up=len(up),
        utilization=sum(utilization) / len(utilization) if utilization else None,
        sm_active=sum(sm_active) / len(sm_active) if sm_active else None,
        efficiency=min(1.0, sum(sm for _, sm in pairs) / busy) if busy > 0 else None,
        flagged=sum(1 for gpu in up if gpu.mismatch),
        classes=dict(Counter(gpu.bottleneck for gpu in up if gpu.bottleneck is not None)),
        tensor_flops=sum(gpu.tensor_flops or 0.0 for gpu in estimated) if estimated else None,
        peak_tensor_flops=sum(gpu.peak_tensor_flops or 0.0 for gpu in estimated) if estimated else None,
        estimated_flops=sum(work) if work else None,
        estimated_gpus=len(work),
        power_watts=sum(power) if power else None,
        busy_idle_sm_seconds=sum(waste) if waste else None,
    )


def gpu_overview(state: GpuState, stale: bool, apps: tuple[AppFigures, ...] = ()) -> GpuOverview:
    """One GPU of a snapshot; a stale snapshot shows every GPU down, as /metrics does."""
    sample, derived = state.sample, state.derived
    up = sample.up and derived is not None and not stale
    live = derived if up else None
    peak = live.peak if live is not None else None
    return GpuOverview(
        index=sample.device.index,
        uuid=sample.device.uuid,
        model=sample.device.name,
        source=sample.device.source,
        up=up,
        utilization=live.busy if live else None,
        sm_active=sample.profiling.sm_active if live else None,
        efficiency=live.efficiency if live else None,
        bottleneck=live.bottleneck if live else None,
        mismatch=tuple(rule for rule, holds in live.mismatch.items() if holds) if live else (),
        implausible=tuple(check for check, failed in live.implausible.items() if failed) if live else (),
        profiling=up and sample.profiling_available,
        tensor_flops=live.pipe_busy.hmma_bf16_equivalent if live else None,
        peak_tensor_flops=peak.tensor_flops if peak else None,
        dram_bytes_per_second=live.dram_bytes_per_second if live else None,
        peak_dram_bytes_per_second=peak.dram_bytes_per_second if peak else None,
        power_watts=sample.power_watts if up else None,
        busy_flop_per_joule=live.busy_flop_per_joule if live else None,
        estimated_flops=live.estimated_flops if live else None,
        memory_used_bytes=sample.memory_used_bytes if up else None,
        memory_total_bytes=sample.memory_total_bytes if up else None,
        temperature_celsius=sample.temperature_celsius if up else None,
        busy_idle_sm_seconds=state.totals.busy_idle_sm_seconds,
        apps=apps,
        pods=tuple(sorted({PodOwner(owner.namespace, owner.pod, owner.container) for owner in state.owners.pods})) if state.owners is not None else (),
        slurm_jobs=state.sharing.jobs if state.sharing is not None else (),
        attribution=(state.attribution.path, state.attribution.reason) if state.attribution is not None and up else None,
        processes=state.processes if up else None,
    )


def snapshot_overview(snapshot: Snapshot, stale: bool) -> list[GpuOverview]:
    """Every GPU of a snapshot, in the snapshot's order, with the apps joined with it."""
    joined: dict[str, list[AppFigures]] = {}
    if not stale:
        for app in snapshot.apps:
            figures = AppFigures(app.name, app.unit, app.up, app.throughput, app.units_per_joule)
            for device in app.gpus:
                joined.setdefault(device.uuid, []).append(figures)
    return [gpu_overview(state, stale, tuple(joined.get(state.sample.device.uuid, ()))) for state in snapshot.gpus]

