"""Renders a Snapshot as Prometheus text, from the catalogue.

Families (name, type, HELP, labels) come from gpueff/metrics.py; this module says how each value
is read from a GpuState, an app, a holder or the snapshot, and exposition/text.py writes every
series: values carry their label values as data, and ``labels`` escapes them. The web side
(web/payload.py) renders each snapshot once, right after its poll, and appends its age per scrape.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any, NamedTuple

from gpueff import __version__
from gpueff.apps.derive import AppState
from gpueff.attribution.kubernetes.owners import AttributionHealth
from gpueff.collectors import disabled_metrics
from gpueff.exposition.text import HEADERS, family, labels, number, own_labels
from gpueff.metrics import (
    APP,
    ATTRIBUTION,
    BY_NAME,
    EXPORTER,
    GPU,
    HOLDER,
    JOB,
    METRICS,
    POD,
    PROCESS,
    SCOPE_LABELS,
    SUMMARY,
    Metric,
)
from gpueff.pipeline.derive import BOTTLENECK_CLASSES, MISMATCH_RULES
from gpueff.pipeline.peers import JobState
from gpueff.pipeline.processes import GpuProcesses, ProcessRow
from gpueff.pipeline.split import HolderTotals
from gpueff.pipeline.states import HELD_STATES, STATE_INDEX, STATES
from gpueff.pipeline.totals import PIPE_SECONDS
from gpueff.selfstats import ProcessStats
from gpueff.snapshot import GpuState, Snapshot
from gpueff.taxonomy import CLASSES, COUNTER_CHECKS

# NVML clock-event (throttle) reason bits -> label value.
CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

# ---- how each GPU row is read ---------------------------------------------------------------------

Single = Callable[[GpuState], "float | None"]
Labelled = Callable[[GpuState], Iterable[tuple[tuple[object, ...], float]]]  # (the row's own label values, value)


def _path(path: str, scale: float = 1.0) -> Single:
    """The reading at ``path`` times ``scale``."""
    get = attrgetter(path)

    def value(state: GpuState) -> float | None:
        try:
            found = get(state)
        except AttributeError:  # an optional step on the way is None (derived.peak for an unknown model)
            return None
        return None if found is None else float(found) * scale

    return value


def _when(condition: Callable[[GpuState], bool], get: Single) -> Single:
    return lambda state: get(state) if condition(state) else None


def _has_sm_active(state: GpuState) -> bool:
    return state.sample.profiling.sm_active is not None


def _has_busy(state: GpuState) -> bool:
    return state.derived is not None and state.derived.busy is not None


def _info(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    device = state.sample.device
    return (((device.name, device.driver, device.pci_bus_id, device.source), 1.0),)


def _attribution(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    found = state.attribution
    return () if found is None else (((found.path, found.reason), 1.0),)


def _mig_info(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    device = state.sample.device
    return (((device.parent_uuid, device.gpu_instance_id), 1.0),) if device.parent_uuid else ()


def _clock_events(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    reasons = state.sample.clock_event_reasons
    if reasons is None:
        return ()
    return [((name,), float(bool(reasons & bit))) for bit, name in CLOCK_EVENT_REASONS]


def _xid(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    return [((code,), float(count)) for code, count in sorted(state.sample.xid_errors.items())]


def _last_xid(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    code = state.sample.last_xid
    return [] if code is None else [((code,), float(code))]


def _nvlink_links(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    return [((link,), float(active)) for link, active in state.sample.health.nvlink_links_active or ()]


def _nvlink_link_errors(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    """Each active link's error counters (a link whose state is not read counts as active)."""
    health = state.sample.health
    down = {link for link, up in health.nvlink_links_active or () if not up}
    return [((link, kind), count) for link, kind, count in health.nvlink_link_errors or () if link not in down]


def _peers(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    return [((peer.index, peer.uuid, peer.pcie_path, peer.nvlink), 1.0) for peer in state.sample.device.peers]


def _peer_nvlinks(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    return [((peer.index, peer.uuid), float(peer.nvlinks)) for peer in state.sample.device.peers if peer.nvlinks]


def _mismatch(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    rules = state.derived.mismatch if state.derived is not None else {}
    return [((rule,), float(rules[rule])) for rule in MISMATCH_RULES if rule in rules]


def _bottleneck(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    current = state.derived.bottleneck if state.derived is not None else None
    return [((name,), float(name == current)) for name in BOTTLENECK_CLASSES]


def _implausible(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    checks = state.derived.implausible if state.derived is not None else {}
    return [((check,), float(checks[check])) for check in COUNTER_CHECKS if check in checks]


def _peak_info(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    peak = state.derived.peak if state.derived is not None else None
    return () if peak is None else (((peak.origin,), 1.0),)


def _states(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    return list(zip(((name,) for name in STATES), state.totals.state_seconds, strict=True))


def _pipe_seconds(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    """Each pipe's active seconds, for the pipes this GPU's profiling reads (never a fake 0 for one it does not)."""
    profiling = state.sample.profiling
    return [((label,), total) for (label, field), total in zip(PIPE_SECONDS, state.totals.pipe_active_seconds, strict=True) if getattr(profiling, field) is not None]


def _state_joules(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    return list(zip(((name,) for name in STATES), state.totals.state_joules, strict=True)) if state.sample.energy_joules is not None else ()


def _gpu_process_row(value: Callable[[ProcessRow], float | None], other: Callable[[GpuProcesses], float | None]) -> Labelled:
    """One figure of each listed process (pipeline/processes.py), and of the rest summed as pid="other"."""

    def values(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
        listed = state.processes
        if listed is None:
            return ()
        found: list[tuple[tuple[object, ...], float]] = [((row.pid, row.user_id, row.name, row.holder_kind, row.holder), figure) for row in listed.rows if (figure := value(row)) is not None]
        rest = other(listed) if listed.others else None
        return found if rest is None else [*found, (("other", "", "", "", ""), rest)]

    return values


def _by_label(metric: Metric) -> Labelled:
    """A row with one reading per value of its own label (gpueff_ecc_errors_total{type})."""
    readings = [((reading.label,), _path(reading.path, metric.scale)) for reading in metric.readings]

    def values(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
        return [(label, value) for label, get in readings if (value := get(state)) is not None]

    return values


# Rows that are not "the reading at its path, times the row's scale".
_SPECIAL: dict[str, Single | Labelled] = {
    "gpueff_gpu_info": _info,
    "gpueff_mig_device_info": _mig_info,
    "gpueff_gpu_attribution_info": _attribution,
    "gpueff_profiling_available": lambda state: float(state.sample.profiling_available),
    "gpueff_clock_event_active": _clock_events,
    "gpueff_xid_errors_total": _xid,
    "gpueff_xid_last_code": _last_xid,
    "gpueff_nvlink_link_active": _nvlink_links,
    "gpueff_nvlink_link_errors_total": _nvlink_link_errors,
    "gpueff_gpu_peer_info": _peers,
    "gpueff_peak_info": _peak_info,
    "gpueff_gpu_peer_nvlinks": _peer_nvlinks,
    "gpueff_mismatch": _mismatch,
    "gpueff_bottleneck": _bottleneck,
    "gpueff_readings_implausible": _implausible,
    "gpueff_gpu_busy_seconds_total": _when(_has_busy, _path("totals.busy_seconds")),
    "gpueff_sm_active_seconds_total": _when(_has_sm_active, _path("totals.sm_active_seconds")),
    "gpueff_pipe_active_seconds_total": _pipe_seconds,
    "gpueff_dram_active_seconds_total": _when(lambda state: state.sample.profiling.dram_active is not None, _path("totals.dram_active_seconds")),
    "gpueff_busy_idle_sm_seconds_total": _when(lambda state: _has_sm_active(state) and _has_busy(state), _path("totals.busy_idle_sm_seconds")),
    "gpueff_peer_wait_seconds_total": _when(lambda state: state.totals.peer_wait_seconds > 0, _path("totals.peer_wait_seconds")),
    "gpueff_gpu_state_seconds_total": _states,
    "gpueff_gpu_state_joules_total": _state_joules,
    "gpueff_process_memory_bytes": _gpu_process_row(lambda row: row.memory_bytes, lambda rest: rest.others_memory_bytes),
    "gpueff_process_busy_share_ratio": _gpu_process_row(lambda row: row.busy_share, lambda rest: rest.others_busy_share),
}


class _GpuRow(NamedTuple):
    name: str
    own_labels: tuple[str, ...]
    single: Single | None  # a row with one unlabelled value
    labelled: Labelled | None
    when_down: bool


def _gpu_row(metric: Metric) -> _GpuRow:
    special = _SPECIAL.get(metric.name)
    if metric.labels:
        labelled = special if special is not None else _by_label(metric)
        return _GpuRow(metric.name, metric.labels, None, labelled, metric.when_down)  # type: ignore[arg-type]
    single = special if special is not None else _path(metric.readings[0].path, metric.scale)
    return _GpuRow(metric.name, (), single, None, metric.when_down)  # type: ignore[arg-type]


# gpu_up is rendered from the snapshot's freshness and the costs from the config's price, below.
_COST_ROWS = ("gpueff_busy_idle_sm_cost_total", "gpueff_gpu_state_cost_total")
_GPU_ROWS = tuple(_gpu_row(metric) for metric in METRICS if metric.scope == GPU and metric.name not in {"gpueff_gpu_up", *_COST_ROWS})
_GPU_LABELS = ("gpu", "uuid")
_POD_LABELS = BY_NAME["gpueff_gpu_pod_info"].labels


def _device_labels(state: GpuState) -> str:
    device = state.sample.device
    return labels(_GPU_LABELS, (device.index, device.uuid))


def _gpu_labels(state: GpuState, pod_labels: str) -> str:
    """gpu and uuid, plus namespace, pod, container and the pod's allow-listed labels
    (kubernetes.pod_label_keys) while exactly one container holds the GPU (kubernetes.pod_labels
    every_series; with info_only they stay on gpueff_gpu_pod_info, without the copied labels)."""
    owner = state.owners.single_pod if state.owners is not None and pod_labels == "every_series" else None
    text = _device_labels(state)
    if owner is None:
        return text
    copied = f",{labels(tuple(name for name, _ in owner.labels), (value for _, value in owner.labels))}" if owner.labels else ""
    return f"{text},{labels(_POD_LABELS, (owner.namespace, owner.pod, owner.container))}{copied}"


@functools.cache
def _exported_rows(disabled: tuple[str, ...]) -> tuple[_GpuRow, ...]:
    """The GPU rows the enabled collectors export (gpueff/collectors.py)."""
    dropped = disabled_metrics(disabled)
    return tuple(row for row in _GPU_ROWS if row.name not in dropped)


def render_gpus(states: tuple[GpuState, ...], snapshot: Snapshot, stale: bool) -> list[str]:
    base = [_gpu_labels(state, snapshot.settings.pod_labels) for state in states]
    live = [(not stale) and state.sample.up and state.derived is not None for state in states]
    lines = family("gpueff_gpu_up", [f"gpueff_gpu_up{{{label}}} {int(up)}" for label, up in zip(base, live)])
    disabled = snapshot.settings.disabled_collectors
    for row in _exported_rows(disabled) if disabled else _GPU_ROWS:
        name, body = row.name, []
        for state, label, up in zip(states, base, live):
            if not up and not row.when_down:
                continue
            if row.single is not None:
                value = row.single(state)
                if value is not None:
                    body.append(f"{name}{{{label}}} {number(value)}")
            elif row.labelled is not None:
                names = row.own_labels
                for own, value in row.labelled(state):
                    body.append(f"{name}{{{label},{own_labels(names, own)}}} {number(value)}")
        lines += family(name, body)
    if snapshot.settings.price_per_gpu_hour is not None and "efficiency" not in disabled:
        currency = labels(("currency",), (snapshot.settings.currency,))
        cost = [f"gpueff_busy_idle_sm_cost_total{{{label},{currency}}} {number(state.totals.busy_idle_sm_cost)}" for state, label, up in zip(states, base, live) if up and _has_sm_active(state)]
        lines += family("gpueff_busy_idle_sm_cost_total", cost)
        by_state = [f"gpueff_gpu_state_cost_total{{{label},{own_labels(('state',), (name,))},{currency}}} {number(value)}"
                    for state, label, up in zip(states, base, live) if up for name, value in zip(STATES, state.totals.state_cost, strict=True)]
        lines += family("gpueff_gpu_state_cost_total", by_state)
    return lines


# ---- every other scope: a reader per catalogue row ---------------------------------------------------
#
# A reader gives a row's series for one subject of its scope (a GPU's state for pod and holder rows,
# an app for app rows, the snapshot for the exporter's own rows): (the row's own label values, value)
# pairs; values beyond the row's own labels are dropped (an app figure offers its unit to the rows
# that have a unit label). Rows are rendered in catalogue order, scope by scope; a summary's reader
# gives its sum, then its count.

Series = Iterable[tuple[tuple[object, ...], float]]
Reader = Callable[[Any, Any, bool], Series]  # (subject, snapshot, stale) -> series


def _holder_row(value: Callable[[HolderTotals], float], exported: Callable[[GpuState], bool]) -> Reader:
    """A holder's share of one GPU counter, where the GPU exports that counter."""

    def series(state: GpuState, _snapshot: Snapshot, _stale: bool) -> Series:
        assert state.sharing is not None
        return [((holder.kind, holder.label), value(totals)) for holder, totals in state.sharing.holders] if exported(state) else ()

    return series


def _holder_states(value: Callable[[HolderTotals], tuple[float, ...]], exported: Callable[[GpuState], bool]) -> Reader:
    """A holder's share of one GPU's counter by state, for the states a holder's time can be in."""

    def series(state: GpuState, _snapshot: Snapshot, _stale: bool) -> Series:
        assert state.sharing is not None
        if not exported(state):
            return ()
        return [((holder.kind, holder.label, name), value(totals)[STATE_INDEX[name]]) for holder, totals in state.sharing.holders for name in HELD_STATES]

    return series


def _holder_costs(state: GpuState, snapshot: Snapshot, stale: bool) -> Series:
    currency = snapshot.settings.currency
    return [(own + (currency,), value) for own, value in _holder_state_cost(state, snapshot, stale)] if snapshot.settings.price_per_gpu_hour is not None else ()


def _app_row(value: Callable[[AppState], float | None]) -> Reader:
    """A per-app figure: none while the app is down or the snapshot stale; a row with a unit label carries the app's."""

    def series(app: AppState, _snapshot: Snapshot, stale: bool) -> Series:
        figure = value(app) if app.up and not stale else None
        return () if figure is None else [((app.unit,), figure)]

    return series


def _process_row(value: Callable[[ProcessStats], float | None]) -> Reader:
    def series(snapshot: Snapshot, _snapshot: Snapshot, _stale: bool) -> Series:
        figure = value(snapshot.process) if snapshot.process is not None else None
        return () if figure is None else [((), figure)]

    return series


def _attribution_row(value: Callable[[AttributionHealth], float | None]) -> Reader:
    def series(snapshot: Snapshot, _snapshot: Snapshot, _stale: bool) -> Series:
        figure = value(snapshot.attribution) if snapshot.attribution is not None else None
        return () if figure is None else [((), figure)]

    return series


def _one(value: Callable[[Snapshot, bool], float | None]) -> Reader:
    """One unlabelled series of the exporter itself, absent where ``value`` is None."""

    def series(snapshot: Snapshot, _snapshot: Snapshot, stale: bool) -> Series:
        figure = value(snapshot, stale)
        return () if figure is None else [((), figure)]

    return series


def _job_links(job: JobState, _snapshot: Snapshot, _stale: bool) -> Series:
    traffic = job.traffic
    pairs = ((("nvlink", "tx"), traffic.nvlink_tx), (("nvlink", "rx"), traffic.nvlink_rx), (("pcie", "tx"), traffic.pcie_tx), (("pcie", "rx"), traffic.pcie_rx))
    return [(names, value) for names, value in pairs if value is not None]


_holder_state_cost = _holder_states(lambda t: t.state_cost, lambda _state: True)
_CLASS_INFO: Series = [((each.name, each.meaning, each.what_to_try), 1) for each in CLASSES]  # the same every poll

_READERS: dict[str, Reader] = {
    # Kubernetes attribution: a stale snapshot keeps the assignments (identity, like gpueff_gpu_info) but not the process counts.
    "gpueff_gpu_pod_info": lambda state, _snapshot, _stale: [((owner.namespace, owner.pod, owner.container), 1) for owner in state.owners.pods],
    "gpueff_pod_compute_processes": lambda state, _snapshot, stale: () if stale else [((owner.pod_uid, owner.container_id), count) for owner, count in state.owners.processes],
    # The fair split (docs/sharing.md): a holder's value where the GPU exports its counterpart.
    "gpueff_holder_busy_seconds_total": _holder_row(lambda t: t.busy_seconds, _has_busy),
    "gpueff_holder_sm_active_seconds_total": _holder_row(lambda t: t.sm_active_seconds, _has_sm_active),
    "gpueff_holder_busy_idle_sm_seconds_total": _holder_row(lambda t: t.busy_idle_sm_seconds, lambda s: _has_sm_active(s) and _has_busy(s)),
    "gpueff_holder_energy_joules_total": _holder_row(lambda t: t.energy_joules, lambda s: s.sample.energy_joules is not None),
    "gpueff_holder_state_seconds_total": _holder_states(lambda t: t.state_seconds, lambda _state: True),
    "gpueff_holder_state_joules_total": _holder_states(lambda t: t.state_joules, lambda s: s.sample.energy_joules is not None),
    "gpueff_holder_state_cost_total": _holder_costs,
    "gpueff_gpu_job_info": lambda state, _snapshot, _stale: [((job.job_id, job.user_id), 1) for job in state.sharing.jobs],
    # Jobs of two or more GPUs (pipeline/peers.py): none are rendered from a stale snapshot.
    "gpueff_job_gpus": lambda job, _snapshot, _stale: [((), len(job.gpus))],
    "gpueff_job_gpu_info": lambda job, _snapshot, _stale: [((gpu.index, gpu.uuid), 1) for gpu in job.gpus],
    "gpueff_job_efficiency_ratio": lambda job, _snapshot, _stale: () if job.efficiency is None else [((), job.efficiency)],
    "gpueff_job_bottleneck_gpus": lambda job, _snapshot, _stale: [((name,), count) for name, count in job.classes],
    "gpueff_job_link_bytes_per_second": _job_links,
    "gpueff_job_straggler": lambda job, _snapshot, _stale: () if job.straggler is None else [((job.straggler.index, job.straggler.uuid), 1)],
    "gpueff_job_peer_wait_ratio": lambda job, _snapshot, _stale: () if job.peer_wait is None else [((), job.peer_wait)],
    # Per app (gpueff/apps, docs/apps.md): a stale snapshot shows only gpueff_app_up 0 and the error count.
    "gpueff_app_up": lambda app, _snapshot, stale: [((), int(app.up and not stale))],
    "gpueff_app_scrape_errors_total": lambda app, _snapshot, _stale: [((), app.scrape_errors_total)],
    "gpueff_app_gpus": lambda app, _snapshot, stale: () if stale else [((), len(app.gpus))],
    "gpueff_app_gpu_info": lambda app, _snapshot, stale: () if stale else [((device.index, device.uuid), 1) for device in app.gpus],
    "gpueff_app_units_total": _app_row(lambda app: app.units_total),
    "gpueff_app_throughput_per_second": _app_row(lambda app: app.throughput),
    "gpueff_app_requests_per_second": _app_row(lambda app: app.requests_per_second),
    "gpueff_app_units_per_joule": _app_row(lambda app: app.units_per_joule),
    "gpueff_app_units_per_sm_active_second": _app_row(lambda app: app.units_per_sm_active_second),
    "gpueff_app_flops_per_second": _app_row(lambda app: app.flops_per_second),
    "gpueff_app_model_flops_utilization_ratio": _app_row(lambda app: app.model_flops_utilization),
    "gpueff_app_scrape_duration_seconds": _app_row(lambda app: app.scrape_duration_seconds),
    "gpueff_app_cost_per_million_units": lambda app, snapshot, stale: [((app.unit, snapshot.settings.currency), app.cost_per_million_units)] if app.up and not stale and app.cost_per_million_units is not None else (),
    # The exporter itself.
    "gpueff_exporter_build_info": lambda snapshot, _snapshot, _stale: [((__version__, snapshot.backend_name, str(snapshot.replayed).lower()), 1)],
    "gpueff_bottleneck_class_info": lambda _subject, _snapshot, _stale: _CLASS_INFO,
    "gpueff_collect_duration_seconds": lambda snapshot, _snapshot, _stale: [((), snapshot.collect_duration_sum_seconds), ((), snapshot.polls_total)],
    "gpueff_collect_errors_total": _one(lambda snapshot, _stale: snapshot.errors_total),
    "gpueff_collect_stale": _one(lambda _snapshot, stale: int(stale)),
    "gpueff_last_collect_success_timestamp_seconds": _one(lambda snapshot, _stale: snapshot.last_success_wall),
    "gpueff_kubernetes_attribution_up": _attribution_row(lambda health: int(health.up)),
    "gpueff_kubernetes_attribution_errors_total": _attribution_row(lambda health: health.errors_total),
    "gpueff_kubernetes_attribution_refused_total": _attribution_row(lambda health: health.refused_total),
    "gpueff_kubernetes_attribution_last_success_timestamp_seconds": _attribution_row(lambda health: health.last_success_wall),
    "process_cpu_seconds_total": _process_row(lambda process: process.cpu_seconds),
    "process_resident_memory_bytes": _process_row(lambda process: process.resident_bytes),
    "process_virtual_memory_bytes": _process_row(lambda process: process.virtual_bytes),
    "process_open_fds": _process_row(lambda process: process.open_fds),
    "process_max_fds": _process_row(lambda process: process.max_fds),
    "process_start_time_seconds": _process_row(lambda process: process.start_time_seconds),
}
_ELSEWHERE = {"gpueff_snapshot_age_seconds"}  # appended per scrape (age_tail)


class _Row(NamedTuple):
    name: str
    own_labels: tuple[str, ...]
    summary: bool
    read: Reader


def _rows(scope: str) -> tuple[_Row, ...]:
    rows = []
    for metric in METRICS:
        if metric.scope != scope or metric.name in _ELSEWHERE:
            continue
        if metric.name not in _READERS:
            raise LookupError(f"{metric.name}: a {scope} row of the catalogue with no reader in exposition/render.py")
        rows.append(_Row(metric.name, metric.labels, metric.type == SUMMARY, _READERS[metric.name]))
    return tuple(rows)


_SCOPE_ROWS = {scope: _rows(scope) for scope in (POD, HOLDER, EXPORTER, PROCESS, ATTRIBUTION, APP, JOB)}



def render_scope(scope: str, subjects: list[tuple[str, Any]], snapshot: Snapshot | None, stale: bool) -> list[str]:
    """Every row of ``scope``, for (scope label text, subject) pairs, in catalogue order."""
    lines: list[str] = []
    if not subjects:
        return lines
    for row in _SCOPE_ROWS[scope]:
        name, body = row.name, []
        for scope_labels, subject in subjects:
            series = row.read(subject, snapshot, stale)
            if row.summary:
                (_, total), (_, count) = series
                body += [f"{name}_sum {number(total)}", f"{name}_count {number(count)}"]
                continue
            for own, value in series:
                text = ",".join(part for part in (scope_labels, labels(row.own_labels, own)) if part)
                body.append(f"{name}{{{text}}} {number(value)}" if text else f"{name} {number(value)}")
        lines += family(name, body)
    return lines


def render_pods(states: Iterable[GpuState], stale: bool = False, snapshot: Snapshot | None = None) -> list[str]:
    """Kubernetes attribution of each GPU that has it (its readers need no snapshot)."""
    return render_scope(POD, [(_device_labels(state), state) for state in states if state.owners is not None], snapshot, stale)


def render_sharing(states: Iterable[GpuState], stale: bool, snapshot: Snapshot) -> list[str]:
    """Per-holder counters of shared GPUs and the Slurm jobs on each GPU; nothing for a GPU that is
    down or a stale snapshot (both are derived from running processes)."""
    live = [] if stale else [(_device_labels(state), state) for state in states if state.sharing is not None and state.sample.up and state.derived is not None]
    return render_scope(HOLDER, live, snapshot, stale)


def render(snapshot: Snapshot, stale: bool = False) -> bytes:
    """The whole text but the snapshot's age, which a scrape appends (``age_tail``)."""
    itself = [("", snapshot)]
    lines = render_gpus(snapshot.gpus, snapshot, stale) + render_pods(snapshot.gpus, stale, snapshot) + render_sharing(snapshot.gpus, stale, snapshot)
    lines += render_scope(EXPORTER, itself, snapshot, stale) + render_scope(PROCESS, itself if snapshot.settings.process_metrics else [], snapshot, stale)
    lines += render_scope(ATTRIBUTION, itself, snapshot, stale)
    lines += render_scope(APP, [(labels(("app",), (app.name,)), app) for app in snapshot.apps], snapshot, stale)
    lines += render_scope(JOB, [] if stale else [(labels(SCOPE_LABELS[JOB], (job.kind, job.name)), job) for job in snapshot.jobs], snapshot, stale)
    return ("\n".join(lines) + "\n").encode()


_AGE_HEADER = ("\n".join(HEADERS["gpueff_snapshot_age_seconds"]) + "\n").encode()


def age_tail(age: float) -> bytes:
    return b"%sgpueff_snapshot_age_seconds %.3f\n" % (_AGE_HEADER, age)
