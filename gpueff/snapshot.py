"""What the poller publishes after each poll and the exposition renders: immutable data, no behaviour."""

from __future__ import annotations

from dataclasses import dataclass

from gpueff.apps.derive import AppState
from gpueff.attribution.doctor import Attribution
from gpueff.attribution.kubernetes.owners import AttributionHealth, GpuOwners
from gpueff.pipeline.derive import Derived
from gpueff.pipeline.peers import JobState
from gpueff.pipeline.processes import GpuProcesses
from gpueff.pipeline.split import GpuSharing
from gpueff.pipeline.totals import Totals
from gpueff.sample import GpuSample
from gpueff.selfstats import ProcessStats


@dataclass(frozen=True, slots=True)
class GpuState:
    sample: GpuSample
    derived: Derived | None  # None while the GPU is down
    totals: Totals
    owners: GpuOwners | None = None  # Kubernetes pod attribution; None where there is none
    sharing: GpuSharing | None = None  # the fair split among holders; None while sharing is disabled
    attribution: Attribution | None = None  # which path named the GPU's owner, or why none did
    processes: GpuProcesses | None = None  # its compute processes (pipeline/processes.py); None where the backend lists none


@dataclass(frozen=True, slots=True)
class PollSettings:
    """The settings a poll was made under that its readers need."""

    collect_interval: float
    stale_after: float  # a snapshot older than this is served as down
    pod_labels: str  # kubernetes.pod_labels
    price_per_gpu_hour: float | None
    currency: str
    disabled_collectors: tuple[str, ...] = ()  # collectors.disabled: their series are not rendered
    process_metrics: bool = True  # collectors.exporter_metrics: the daemon's own process_* series


@dataclass(frozen=True)
class Snapshot:
    sequence: int
    gpus: tuple[GpuState, ...]
    taken_monotonic: float
    settings: PollSettings
    backend_name: str
    replayed: bool
    polls_total: int
    collect_duration_sum_seconds: float
    errors_total: int
    last_success_wall: float | None
    apps: tuple[AppState, ...] = ()  # the configured apps' latest states (gpueff/apps)
    attribution: AttributionHealth | None = None  # the kubelet calls' health; None while kubernetes is disabled
    process: ProcessStats | None = None  # the daemon's own CPU, memory and file descriptors at the poll
    jobs: tuple[JobState, ...] = ()  # the jobs of two or more GPUs, judged together (pipeline/peers.py)
