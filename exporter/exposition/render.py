"""Renders a Snapshot as Prometheus text, from the catalogue.

Families (name, type, HELP, labels) come from exporter/metrics.py; this module says how each value
is read from a GpuState, an app, a holder or the snapshot, and exposition/text.py writes every
series: values carry their label values as data, and ``labels`` escapes them. The web side
(web/payload.py) renders each snapshot once, right after its poll, and appends its age per scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import NamedTuple

from exporter import __version__
from exporter.exposition.text import HEADERS, family, labels, number, own_labels
from exporter.metrics import BY_NAME, GPU, METRICS, Metric
from exporter.pipeline.derive import BOTTLENECK_CLASSES, MISMATCH_RULES
from exporter.pipeline.split import HolderTotals
from exporter.snapshot import GpuState, Snapshot
from exporter.taxonomy import CLASSES, COUNTER_CHECKS

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


def _nvlink_links(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    return [((link,), float(active)) for link, active in state.sample.health.nvlink_links_active or ()]


def _mismatch(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    rules = state.derived.mismatch if state.derived is not None else {}
    return [((rule,), float(rules[rule])) for rule in MISMATCH_RULES if rule in rules]


def _bottleneck(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    current = state.derived.bottleneck if state.derived is not None else None
    return [((name,), float(name == current)) for name in BOTTLENECK_CLASSES]


def _implausible(state: GpuState) -> Iterable[tuple[tuple[object, ...], float]]:
    checks = state.derived.implausible if state.derived is not None else {}
    return [((check,), float(checks[check])) for check in COUNTER_CHECKS if check in checks]


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
    "gpueff_profiling_available": lambda state: float(state.sample.profiling_available),
    "gpueff_clock_event_active": _clock_events,
    "gpueff_xid_errors_total": _xid,
    "gpueff_nvlink_link_active": _nvlink_links,
    "gpueff_mismatch": _mismatch,
    "gpueff_bottleneck": _bottleneck,
    "gpueff_readings_implausible": _implausible,
    "gpueff_gpu_busy_seconds_total": _when(_has_busy, _path("totals.busy_seconds")),
    "gpueff_sm_active_seconds_total": _when(_has_sm_active, _path("totals.sm_active_seconds")),
    "gpueff_busy_idle_sm_seconds_total": _when(lambda state: _has_sm_active(state) and _has_busy(state), _path("totals.busy_idle_sm_seconds")),
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


# gpu_up is rendered from the snapshot's freshness and the cost from the config's price, below.
_GPU_ROWS = tuple(_gpu_row(metric) for metric in METRICS if metric.scope == GPU and metric.name not in {"gpueff_gpu_up", "gpueff_busy_idle_sm_cost_total"})
_GPU_LABELS = ("gpu", "uuid")
_POD_LABELS = BY_NAME["gpueff_gpu_pod_info"].labels
_PROCESS_LABELS = BY_NAME["gpueff_pod_compute_processes"].labels


def _device_labels(state: GpuState) -> str:
    device = state.sample.device
    return labels(_GPU_LABELS, (device.index, device.uuid))


def _gpu_labels(state: GpuState, pod_labels: str) -> str:
    """gpu and uuid, plus namespace, pod and container while exactly one container holds the GPU
    (kubernetes.pod_labels every_series; with info_only they stay on gpueff_gpu_pod_info)."""
    owner = state.owners.single_pod if state.owners is not None and pod_labels == "every_series" else None
    text = _device_labels(state)
    return text if owner is None else f"{text},{labels(_POD_LABELS, (owner.namespace, owner.pod, owner.container))}"


def render_gpus(states: tuple[GpuState, ...], snapshot: Snapshot, stale: bool) -> list[str]:
    base = [_gpu_labels(state, snapshot.settings.pod_labels) for state in states]
    live = [(not stale) and state.sample.up and state.derived is not None for state in states]
    lines = family("gpueff_gpu_up", [f"gpueff_gpu_up{{{label}}} {int(up)}" for label, up in zip(base, live)])
    for row in _GPU_ROWS:
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
    if snapshot.settings.price_per_gpu_hour is not None:
        currency = labels(("currency",), (snapshot.settings.currency,))
        cost = [f"gpueff_busy_idle_sm_cost_total{{{label},{currency}}} {number(state.totals.busy_idle_sm_cost)}" for state, label, up in zip(states, base, live) if up and _has_sm_active(state)]
        lines += family("gpueff_busy_idle_sm_cost_total", cost)
    return lines


# The fair split (docs/sharing.md): the holder's value, and whether the GPU exports its counterpart.
_HOLDER_VALUES: dict[str, tuple[Callable[[HolderTotals], float], Callable[[GpuState], bool]]] = {
    "gpueff_holder_busy_seconds_total": (lambda t: t.busy_seconds, _has_busy),
    "gpueff_holder_sm_active_seconds_total": (lambda t: t.sm_active_seconds, _has_sm_active),
    "gpueff_holder_busy_idle_sm_seconds_total": (lambda t: t.busy_idle_sm_seconds, lambda s: _has_sm_active(s) and _has_busy(s)),
    "gpueff_holder_energy_joules_total": (lambda t: t.energy_joules, lambda s: s.sample.energy_joules is not None),
}
_HOLDER_LABELS = BY_NAME["gpueff_holder_busy_seconds_total"].labels
_JOB_LABELS = BY_NAME["gpueff_gpu_job_info"].labels


def render_sharing(states: Iterable[GpuState], stale: bool) -> list[str]:
    """Per-holder counters of shared GPUs and the Slurm jobs on each GPU; nothing for a GPU that is
    down or a stale snapshot (both are derived from running processes)."""
    if stale:
        return []
    live = [(state, state.sharing) for state in states if state.sharing is not None and state.sample.up and state.derived is not None]
    lines: list[str] = []
    for name, (value, exported) in _HOLDER_VALUES.items():
        body: list[str] = []
        for state, sharing in live:
            if exported(state):
                device = _device_labels(state)
                body.extend(f"{name}{{{device},{labels(_HOLDER_LABELS, (holder.kind, holder.name))}}} {number(value(totals))}" for holder, totals in sharing.holders)
        lines += family(name, body)
    jobs = [f"gpueff_gpu_job_info{{{_device_labels(state)},{labels(_JOB_LABELS, (job.job_id, job.user_id))}}} 1" for state, sharing in live for job in sharing.jobs]
    return lines + family("gpueff_gpu_job_info", jobs)


def render_pods(states: Iterable[GpuState], stale: bool = False) -> list[str]:
    """Kubernetes attribution: every container a GPU is assigned to, and its processes by pod.
    A stale snapshot keeps the assignments (identity, like gpueff_gpu_info) but not the process counts."""
    info: list[str] = []
    processes: list[str] = []
    for state in states:
        if state.owners is None:
            continue
        gpu = _device_labels(state)
        info.extend(f"gpueff_gpu_pod_info{{{gpu},{labels(_POD_LABELS, (owner.namespace, owner.pod, owner.container))}}} 1" for owner in state.owners.pods)
        if not stale:
            processes.extend(f"gpueff_pod_compute_processes{{{gpu},{labels(_PROCESS_LABELS, (owner.pod_uid, owner.container_id))}}} {count}" for owner, count in state.owners.processes)
    return family("gpueff_gpu_pod_info", info) + family("gpueff_pod_compute_processes", processes)


# ---- per app, the exporter, the process -------------------------------------------------------------

_APP_VALUES: dict[str, Callable[..., float | None]] = {
    "gpueff_app_units_total": lambda app: app.units_total,
    "gpueff_app_throughput_per_second": lambda app: app.throughput,
    "gpueff_app_requests_per_second": lambda app: app.requests_per_second,
    "gpueff_app_units_per_joule": lambda app: app.units_per_joule,
    "gpueff_app_units_per_sm_active_second": lambda app: app.units_per_sm_active_second,
    "gpueff_app_model_flops_utilization_ratio": lambda app: app.model_flops_utilization,
    "gpueff_app_scrape_duration_seconds": lambda app: app.scrape_duration_seconds,
}
_APP_ROWS = tuple(metric for metric in METRICS if metric.name in _APP_VALUES)


def render_apps(snapshot: Snapshot, stale: bool) -> list[str]:
    """Per-app metrics (exporter/apps, docs/apps.md). A stale snapshot shows only gpueff_app_up 0."""
    apps = snapshot.apps
    if not apps:
        return []
    names = [labels(("app",), (app.name,)) for app in apps]
    lines = family("gpueff_app_up", [f"gpueff_app_up{{{name}}} {int(app.up and not stale)}" for app, name in zip(apps, names)])
    lines += family("gpueff_app_scrape_errors_total", [f"gpueff_app_scrape_errors_total{{{name}}} {app.scrape_errors_total}" for app, name in zip(apps, names)])
    if stale:
        return lines
    lines += family("gpueff_app_gpus", [f"gpueff_app_gpus{{{name}}} {len(app.gpus)}" for app, name in zip(apps, names)])
    lines += family("gpueff_app_gpu_info", [f"gpueff_app_gpu_info{{{name},{labels(_GPU_LABELS, (device.index, device.uuid))}}} 1" for app, name in zip(apps, names) for device in app.gpus])
    for metric in _APP_ROWS:
        get, body = _APP_VALUES[metric.name], []
        for app, name in zip(apps, names):
            value = get(app) if app.up else None
            if value is not None:
                unit = f",{labels(('unit',), (app.unit,))}" if metric.labels else ""
                body.append(f"{metric.name}{{{name}{unit}}} {number(value)}")
        lines += family(metric.name, body)
    cost_labels = BY_NAME["gpueff_app_cost_per_million_units"].labels
    cost = [
        f"gpueff_app_cost_per_million_units{{{name},{labels(cost_labels, (app.unit, snapshot.settings.currency))}}} {number(app.cost_per_million_units)}"
        for app, name in zip(apps, names)
        if app.up and app.cost_per_million_units is not None
    ]
    return lines + family("gpueff_app_cost_per_million_units", cost)


_CLASS_INFO = family("gpueff_bottleneck_class_info", [f"gpueff_bottleneck_class_info{{{labels(BY_NAME['gpueff_bottleneck_class_info'].labels, (each.name, each.meaning, each.what_to_try))}}} 1" for each in CLASSES])  # the same every poll


def render_self(snapshot: Snapshot, stale: bool) -> list[str]:
    build = labels(BY_NAME["gpueff_exporter_build_info"].labels, (__version__, snapshot.backend_name, str(snapshot.replayed).lower()))
    lines = family("gpueff_exporter_build_info", [f"gpueff_exporter_build_info{{{build}}} 1"])
    lines += _CLASS_INFO
    lines += family("gpueff_collect_duration_seconds", [f"gpueff_collect_duration_seconds_sum {number(snapshot.collect_duration_sum_seconds)}", f"gpueff_collect_duration_seconds_count {snapshot.polls_total}"])
    lines += family("gpueff_collect_errors_total", [f"gpueff_collect_errors_total {snapshot.errors_total}"])
    lines += family("gpueff_collect_stale", [f"gpueff_collect_stale {int(stale)}"])
    if snapshot.last_success_wall is not None:
        lines += family("gpueff_last_collect_success_timestamp_seconds", [f"gpueff_last_collect_success_timestamp_seconds {number(snapshot.last_success_wall)}"])
    process = snapshot.process
    if process is not None:
        for name, value in (
            ("process_cpu_seconds_total", process.cpu_seconds),
            ("process_resident_memory_bytes", process.resident_bytes),
            ("process_virtual_memory_bytes", process.virtual_bytes),
            ("process_open_fds", process.open_fds),
            ("process_max_fds", process.max_fds),
            ("process_start_time_seconds", process.start_time_seconds),
        ):
            if value is not None:
                lines += family(name, [f"{name} {number(value)}"])
    return lines


def render_attribution(snapshot: Snapshot) -> list[str]:
    """The kubelet pod-resources calls' health (docs/kubernetes.md); nothing while kubernetes is disabled."""
    health = snapshot.attribution
    if health is None:
        return []
    lines = family("gpueff_kubernetes_attribution_up", [f"gpueff_kubernetes_attribution_up {int(health.up)}"])
    lines += family("gpueff_kubernetes_attribution_errors_total", [f"gpueff_kubernetes_attribution_errors_total {health.errors_total}"])
    if health.last_success_wall is not None:
        lines += family("gpueff_kubernetes_attribution_last_success_timestamp_seconds", [f"gpueff_kubernetes_attribution_last_success_timestamp_seconds {number(health.last_success_wall)}"])
    return lines


def render(snapshot: Snapshot, stale: bool = False) -> bytes:
    """The whole text but the snapshot's age, which a scrape appends (``age_tail``)."""
    lines = render_gpus(snapshot.gpus, snapshot, stale) + render_pods(snapshot.gpus, stale) + render_sharing(snapshot.gpus, stale) + render_self(snapshot, stale)
    lines += render_attribution(snapshot) + render_apps(snapshot, stale)
    return ("\n".join(lines) + "\n").encode()


_AGE_HEADER = ("\n".join(HEADERS["gpueff_snapshot_age_seconds"]) + "\n").encode()


def age_tail(age: float) -> bytes:
    return b"%sgpueff_snapshot_age_seconds %.3f\n" % (_AGE_HEADER, age)
