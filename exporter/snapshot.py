"""What the poller publishes after each poll and the exposition renders: immutable data, no behaviour."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.apps.derive import AppState
from exporter.attribution.kubernetes.owners import AttributionHealth, GpuOwners
from exporter.config.file import Config
from exporter.pipeline.derive import Derived
from exporter.pipeline.split import GpuSharing
from exporter.pipeline.totals import Totals
from exporter.sample import GpuSample
from exporter.selfstats import ProcessStats
from exporter.web.payload import GzipBody


@dataclass(frozen=True, slots=True)
class GpuState:
    sample: GpuSample
    derived: Derived | None  # None while the GPU is down
    totals: Totals
    owners: GpuOwners | None = None  # Kubernetes pod attribution; None where there is none
    sharing: GpuSharing | None = None  # the fair split among holders; None while sharing is disabled


@dataclass(frozen=True)
class Snapshot:
    sequence: int
    gpus: tuple[GpuState, ...]
    taken_monotonic: float
    config: Config
    backend_name: str
    replayed: bool
    polls_total: int
    collect_duration_sum_seconds: float
    errors_total: int
    last_success_wall: float | None
    apps: tuple[AppState, ...] = ()  # the configured apps' latest states (exporter/apps)
    attribution: AttributionHealth | None = None  # the kubelet calls' health; None while kubernetes is disabled
    process: ProcessStats | None = None  # the daemon's own CPU, memory and file descriptors at the poll
    # Rendered by the poller right after the poll (exporter/exposition.py): the text without the
    # age line, and the same gzipped where scrapes asked for gzip. Empty/None until rendered.
    body: bytes = b""
    body_gzip: GzipBody | None = None
