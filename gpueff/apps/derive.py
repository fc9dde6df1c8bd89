"""Per-app figures: which GPUs an app runs on, their power, SM activity and peaks at each poll, and
the app's throughput joined with them. Formulas are in docs/apps.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpueff.apps.patterns import name_pattern
from gpueff.apps.settings import AppConfig
from gpueff.attribution.kubernetes.owners import GpuOwners
from gpueff.attribution.owner import Owner
from gpueff.peaks import PeakOverride, peak_for, precision_peak
from gpueff.sample import DeviceInfo, GpuSample


@dataclass(frozen=True, slots=True)
class GpuFigures:
    """An app's GPUs at one poll, summed over them. A sum is None unless every one of them has the figure."""

    timestamp: float
    gpus: tuple[DeviceInfo, ...]
    power_watts: float | None
    sm_active: float | None  # sum of SM activity ratios: SM-active GPUs
    peak_flops: float | None  # sum of the dense peaks at the app's precision


@dataclass(frozen=True, slots=True)
class AppState:
    """What the exposition shows for one app. Figures are None until two good scrapes exist."""

    name: str
    unit: str
    up: bool
    gpus: tuple[DeviceInfo, ...] = ()
    units_total: float | None = None
    throughput: float | None = None  # units per second
    requests_per_second: float | None = None
    units_per_joule: float | None = None
    units_per_sm_active_second: float | None = None
    flops_per_second: float | None = None  # the app's own count: throughput x flops_per_unit
    model_flops_utilization: float | None = None
    cost_per_million_units: float | None = None
    scrape_duration_seconds: float | None = None
    scrape_errors_total: int = 0


def select_gpus(app: AppConfig, samples: Sequence[GpuSample], owners: Mapping[str, GpuOwners] | None = None, process_owners: Mapping[int, Owner] | None = None) -> list[GpuSample]:
    """The app's GPUs: by process name pattern among the processes of its user, by Kubernetes pod,
    by index or UUID, or all of them. ``process_owners``: pid -> owner (attribution/owner.py); a
    process of another owner, or of none known, never joins the app whatever it is named."""
    if app.pod is not None:
        pattern = name_pattern(app.pod, "namespace/pod")
        held = owners or {}
        return [sample for sample in samples if sample.device.uuid in held and any(pattern.search(f"{owner.namespace}/{owner.pod}") for owner in held[sample.device.uuid].pods)]
    if app.process is not None:
        pattern = name_pattern(app.process, "process name")
        user, known = Owner("user", str(app.user)), process_owners or {}
        return [sample for sample in samples if any(known.get(process.pid) == user and pattern.search(process.name) for process in sample.processes or ())]
    if app.gpus is None:
        return list(samples)
    wanted = set(app.gpus)  # a set: a list of every GPU's index on a 256-GPU node is not 256 x 256 comparisons
    return [sample for sample in samples if sample.device.index in wanted or sample.device.uuid in wanted]


def _sum(values: list[float | None]) -> float | None:
    if not values or any(value is None for value in values):
        return None
    return sum(values)  # type: ignore[arg-type]


def gpu_figures(app: AppConfig, samples: Sequence[GpuSample], timestamp: float, peaks: dict[str, PeakOverride], owners: Mapping[str, GpuOwners] | None = None, process_owners: Mapping[int, Owner] | None = None) -> GpuFigures:
    selected = select_gpus(app, samples, owners, process_owners)
    peak_values = []
    for sample in selected:
        peak = peak_for(sample.device.name, peaks, sample.device)
        peak_values.append(None if peak is None else precision_peak(peak, app.precision))
    return GpuFigures(
        timestamp=timestamp,
        gpus=tuple(sample.device for sample in selected),
        power_watts=_sum([sample.power_watts if sample.up else None for sample in selected]),
        sm_active=_sum([sample.profiling.sm_active if sample.up else None for sample in selected]),
        peak_flops=_sum(peak_values),
    )


def _mean(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known else None


@dataclass(frozen=True, slots=True)
class Means:
    """GPU figures averaged over the polls inside one scrape window (polls lacking a figure skipped)."""

    gpus: float
    power_watts: float | None
    sm_active: float | None
    peak_flops: float | None

    @classmethod
    def of(cls, figures: Sequence[GpuFigures]) -> Means:
        return cls(
            gpus=sum(len(each.gpus) for each in figures) / len(figures),
            power_watts=_mean([each.power_watts for each in figures]),
            sm_active=_mean([each.sm_active for each in figures]),
            peak_flops=_mean([each.peak_flops for each in figures]),
        )


def _ratio(numerator: float, denominator: float | None) -> float | None:
    return _finite(numerator / denominator) if denominator else None


def _finite(value: float | None) -> float | None:
    """None for a figure that overflowed (absurd flops_per_unit or price): never export +Inf/NaN."""
    return value if value is None or math.isfinite(value) else None


def derive_app(app: AppConfig, state: AppState, throughput: float, means: Means, price_per_gpu_hour: float | None) -> AppState:
    """``state`` with the figures that join ``throughput`` (units/s) with its GPUs' window means."""
    flops_per_second = None if app.flops_per_unit is None else _finite(throughput * app.flops_per_unit)
    utilization = None if flops_per_second is None else _ratio(flops_per_second, means.peak_flops)
    cost = None
    if price_per_gpu_hour is not None and throughput > 0 and means.gpus > 0:
        cost = _finite(means.gpus * price_per_gpu_hour / 3600 / throughput * 1e6)
    return dataclasses.replace(
        state,
        throughput=_finite(throughput),
        units_per_joule=_ratio(throughput, means.power_watts),
        units_per_sm_active_second=_ratio(throughput, means.sm_active),
        flops_per_second=flops_per_second,
        model_flops_utilization=utilization,
        cost_per_million_units=cost,
    )
