"""Renders a Snapshot as Prometheus text exposition format (0.0.4).

The text is rendered at most once per snapshot (lazily, on the first scrape that wants it) and then
served from cache; only the snapshot's age is computed per scrape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from exporter import __version__
from exporter.apps import AppState
from exporter.derivations import BOTTLENECK_CLASSES, MISMATCH_RULES
from exporter.kubernetes.owners import PodOwner
from exporter.sharing import HolderTotals
from exporter.snapshot import GpuState, Snapshot
from exporter.taxonomy import CLASSES, COUNTER_CHECKS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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

Values = Callable[[GpuState], Iterable[tuple[str, float]]]  # (extra labels text, value)


@dataclass(frozen=True, slots=True)
class GpuMetric:
    name: str
    kind: str
    help: str
    values: Values
    when_down: bool = False  # also rendered for a GPU that is down


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def one(get: Callable[[GpuState], float | None]) -> Values:
    def values(state: GpuState) -> Iterable[tuple[str, float]]:
        value = get(state)
        return () if value is None else (("", value),)

    return values


def sample_field(attribute: str, scale: float = 1.0) -> Values:
    def get(state: GpuState) -> float | None:
        value = getattr(state.sample, attribute)
        return None if value is None else float(value) * scale

    return one(get)


def profiling(key: str) -> Values:
    return one(lambda state: state.sample.profiling.get(key))


def derived_field(attribute: str) -> Values:
    return one(lambda state: getattr(state.derived, attribute))


def flag(value: bool | None) -> float | None:
    return None if value is None else float(value)


def _info(state: GpuState) -> Iterable[tuple[str, float]]:
    device = state.sample.device
    return ((f',model="{escape(device.name)}",driver="{escape(device.driver)}",pci_bus_id="{escape(device.pci_bus_id)}",trace="{escape(device.source)}"', 1.0),)


def family(name: str, kind: str, help_text: str, body: list[str]) -> list[str]:
    """A metric family's HELP and TYPE lines and its samples; nothing where it has no sample."""
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *body] if body else []


def _mig_info(state: GpuState) -> Iterable[tuple[str, float]]:
    device = state.sample.device
    if not device.parent_uuid:
        return ()
    return ((f',parent_uuid="{escape(device.parent_uuid)}",gpu_instance="{device.gpu_instance_id}"', 1.0),)


def _clock_events(state: GpuState) -> Iterable[tuple[str, float]]:
    reasons = state.sample.clock_event_reasons
    if reasons is None:
        return ()
    return [(f',reason="{name}"', float(bool(reasons & bit))) for bit, name in CLOCK_EVENT_REASONS]


def _pair(label: str, first: tuple[str, str], second: tuple[str, str]) -> Values:
    def values(state: GpuState) -> Iterable[tuple[str, float]]:
        out = []
        for label_value, attribute in (first, second):
            value = getattr(state.sample, attribute)
            if value is not None:
                out.append((f',{label}="{label_value}"', float(value)))
        return out

    return values


def _xid(state: GpuState) -> Iterable[tuple[str, float]]:
    return [(f',xid="{code}"', float(count)) for code, count in sorted(state.sample.xid_errors.items())]


def _mismatch(state: GpuState) -> Iterable[tuple[str, float]]:
    if state.derived is None:
        return []
    rules = state.derived.mismatch
    return [(f',rule="{rule}"', float(rules[rule])) for rule in MISMATCH_RULES if rule in rules]


def _bottleneck(state: GpuState) -> Iterable[tuple[str, float]]:
    if state.derived is None:
        return []
    current = state.derived.bottleneck
    return [(f',class="{name}"', float(name == current)) for name in BOTTLENECK_CLASSES]


def _implausible(state: GpuState) -> Iterable[tuple[str, float]]:
    if state.derived is None:
        return []
    checks = state.derived.implausible
    return [(f',check="{check}"', float(checks[check])) for check in COUNTER_CHECKS if check in checks]


def _peak(attribute: str) -> Values:
    return one(lambda state: None if state.derived is None or state.derived.peak is None else getattr(state.derived.peak, attribute))


def _cost(state: GpuState, currency: str, priced: bool) -> Iterable[tuple[str, float]]:
    if not priced or state.sample.profiling.get("sm_active") is None:
        return ()
    return ((f',currency="{escape(currency)}"', state.totals.busy_idle_sm_cost),)


def _profiling_metric(key: str, name: str, help_text: str) -> GpuMetric:
    return GpuMetric(name, "gauge", help_text, profiling(key))


GPU_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("gpueff_gpu_up", "gauge", "1 if the GPU was read in the last poll, 0 if it is lost, unreadable or the data is stale.", one(lambda s: 1.0 if s.sample.up else 0.0), when_down=True),
    GpuMetric("gpueff_gpu_info", "gauge", "GPU identity: model, driver, PCI bus id, and the replayed trace (empty for a live GPU). Always 1.", _info, when_down=True),
    GpuMetric("gpueff_mig_device_info", "gauge", "A MIG device, exported like a GPU under its own MIG uuid (gpu is its physical GPU's index): the physical GPU's uuid and the GPU instance id. Always 1.", _mig_info, when_down=True),
    GpuMetric("gpueff_profiling_available", "gauge", "1 if SM activity and the other profiling metrics (GPM or DCGM) are read on this GPU, 0 if not (pre-Hopper without DCGM, or profiling restricted to admin).", one(lambda s: float(s.sample.profiling_available))),
    # Coarse NVML counters.
    GpuMetric("gpueff_gpu_utilization_ratio", "gauge", "Coarse utilization over the poll window: share of the window any kernel ran (one thread on one SM reads 1; not SM activity). The engine activity GPM GRAPHICS_UTIL / DCGM 1001 where profiling is read (nvidia-smi's quantity, averaged over the window every other figure covers); NVML's figure where it is not. Every derived figure uses this one.", derived_field("busy")),
    GpuMetric("gpueff_gpu_utilization_instant_ratio", "gauge", "NVML utilization as nvidia-smi shows it: the driver's latest ~200 ms sample at the poll, not a mean over the poll window (under a duty-cycled load it swings while the window's figure holds).", sample_field("gpu_utilization")),
    GpuMetric("gpueff_memory_utilization_ratio", "gauge", "Coarse NVML memory utilization: share of time device memory was read or written.", sample_field("memory_utilization")),
    GpuMetric("gpueff_power_watts", "gauge", "Power draw in watts.", sample_field("power_watts")),
    GpuMetric("gpueff_power_limit_watts", "gauge", "Enforced power limit in watts.", one(lambda s: s.sample.device.power_limit_watts)),
    GpuMetric("gpueff_energy_joules_total", "counter", "Energy consumed in joules (NVML counter since driver load; on replay, recorded power integrated over replay time). Read at the slow cadence.", sample_field("energy_joules")),
    GpuMetric("gpueff_temperature_celsius", "gauge", "GPU core temperature in degrees Celsius.", sample_field("temperature_celsius")),
    GpuMetric("gpueff_memory_temperature_celsius", "gauge", "GPU memory (HBM) temperature in degrees Celsius.", sample_field("memory_temperature_celsius")),
    GpuMetric("gpueff_sm_clock_hertz", "gauge", "Current SM clock in hertz.", sample_field("sm_clock_mhz", 1e6)),
    GpuMetric("gpueff_sm_clock_max_hertz", "gauge", "Maximum SM clock in hertz.", one(lambda s: None if s.sample.device.max_sm_clock_mhz is None else s.sample.device.max_sm_clock_mhz * 1e6)),
    GpuMetric("gpueff_memory_clock_hertz", "gauge", "Current memory clock in hertz.", sample_field("memory_clock_mhz", 1e6)),
    GpuMetric("gpueff_memory_clock_max_hertz", "gauge", "Maximum memory clock in hertz.", one(lambda s: None if s.sample.device.max_memory_clock_mhz is None else s.sample.device.max_memory_clock_mhz * 1e6)),
    GpuMetric("gpueff_memory_used_bytes", "gauge", "Device memory in use, bytes.", sample_field("memory_used_bytes")),
    GpuMetric("gpueff_memory_total_bytes", "gauge", "Device memory in all, bytes.", sample_field("memory_total_bytes")),
    GpuMetric("gpueff_memory_reserved_bytes", "gauge", "Device memory reserved by the driver and firmware, bytes.", sample_field("memory_reserved_bytes")),
    GpuMetric("gpueff_clock_event_active", "gauge", "1 while this clock-event (throttle) reason holds the clocks down.", _clock_events),
    GpuMetric("gpueff_ecc_errors_total", "counter", "ECC errors since driver load, by type (corrected, uncorrected).", _pair("type", ("corrected", "ecc_corrected_errors"), ("uncorrected", "ecc_uncorrected_errors"))),
    GpuMetric("gpueff_remapped_rows", "gauge", "Memory rows remapped, by cause (correctable, uncorrectable).", _pair("cause", ("correctable", "remapped_rows_correctable"), ("uncorrectable", "remapped_rows_uncorrectable"))),
    GpuMetric("gpueff_remapped_rows_pending", "gauge", "1 if a row remap is pending (the GPU needs a reset).", one(lambda s: flag(s.sample.remapped_rows_pending))),
    GpuMetric("gpueff_remapped_rows_failure", "gauge", "1 if a row remap has failed.", one(lambda s: flag(s.sample.remapped_rows_failure))),
    GpuMetric("gpueff_xid_errors_total", "counter", "Critical Xid errors seen since the daemon started, by Xid code.", _xid),
    GpuMetric("gpueff_compute_processes", "gauge", "Compute processes running on the GPU.", sample_field("process_count")),
    GpuMetric("gpueff_compute_process_memory_bytes", "gauge", "Device memory used by the running compute processes, bytes.", sample_field("process_memory_bytes")),
    # Profiling (GPM / DCGM).
    _profiling_metric("sm_active", "gpueff_sm_active_ratio", "SM activity: average share of SMs with at least one warp resident (GPM SM_UTIL / DCGM SM_ACTIVE). The truth that coarse utilization is not."),
    _profiling_metric("sm_occupancy", "gpueff_sm_occupancy_ratio", "SM occupancy: resident warps over the theoretical maximum."),
    _profiling_metric("graphics_active", "gpueff_graphics_engine_active_ratio", "Share of time the graphics/compute engine was active (GPM GRAPHICS_UTIL / DCGM GR_ENGINE_ACTIVE)."),
    _profiling_metric("tensor_active", "gpueff_tensor_active_ratio", "Share of cycles any tensor pipe was active."),
    _profiling_metric("tensor_hmma_active", "gpueff_tensor_hmma_active_ratio", "Share of cycles the HMMA (FP16/BF16/FP8) tensor pipe was active."),
    _profiling_metric("tensor_imma_active", "gpueff_tensor_imma_active_ratio", "Share of cycles the IMMA (integer) tensor pipe was active."),
    _profiling_metric("tensor_dfma_active", "gpueff_tensor_dfma_active_ratio", "Share of cycles the DFMA (FP64) tensor pipe was active."),
    _profiling_metric("dram_active", "gpueff_dram_active_ratio", "DRAM bandwidth used over its theoretical maximum."),
    _profiling_metric("fp64_active", "gpueff_fp64_active_ratio", "Share of cycles the non-tensor FP64 pipe was active."),
    _profiling_metric("fp32_active", "gpueff_fp32_active_ratio", "Share of cycles the non-tensor FP32 pipe was active."),
    _profiling_metric("fp16_active", "gpueff_fp16_active_ratio", "Share of cycles the non-tensor FP16 pipe was active."),
    _profiling_metric("integer_active", "gpueff_integer_active_ratio", "Share of cycles the integer pipe was active."),
    _profiling_metric("pcie_tx_bytes_per_second", "gpueff_pcie_tx_bytes_per_second", "PCIe traffic from the GPU, bytes per second over the last window."),
    _profiling_metric("pcie_rx_bytes_per_second", "gpueff_pcie_rx_bytes_per_second", "PCIe traffic to the GPU, bytes per second over the last window."),
    _profiling_metric("nvlink_tx_bytes_per_second", "gpueff_nvlink_tx_bytes_per_second", "NVLink traffic sent over all links, bytes per second over the last window."),
    _profiling_metric("nvlink_rx_bytes_per_second", "gpueff_nvlink_rx_bytes_per_second", "NVLink traffic received over all links, bytes per second over the last window."),
    # Derived.
    GpuMetric("gpueff_efficiency_ratio", "gauge", "SM activity / utilization over the same window, 0..1: how much of the 'busy' time the SMs really worked. Absent when utilization is 0.", derived_field("efficiency")),
    GpuMetric("gpueff_mismatch", "gauge", "1 while the GPU is 'busy but not working' by this rule: high_util_low_sm (utilization >= 0.8, SM activity < 0.3), low_efficiency (utilization >= 0.5, efficiency < 0.3). Never 1 while gpueff_readings_implausible is.", _mismatch),
    GpuMetric("gpueff_bottleneck", "gauge", "Roofline-style bottleneck class, a state set: exactly one class is 1 per GPU. Judged from the last bottleneck.window of readings; a new class must win bottleneck.hold_polls polls in a row. What to try: gpueff_bottleneck_class_info.", _bottleneck),
    GpuMetric("gpueff_readings_implausible", "gauge", "1 while this counter-health check finds the window's profiling readings physically impossible (the README says what each check means); the GPU's class is then unknown and it raises no mismatch or busy-but-idle time.", _implausible),
    GpuMetric("gpueff_estimated_tensor_flops_per_second", "gauge", "Estimated achieved tensor FLOP/s, BF16-equivalent: tensor activity x peak x SM clock / max SM clock, the clock being the mean of its readings at both ends of the window. Absent for models without a known peak.", derived_field("tensor_flops")),
    GpuMetric("gpueff_estimated_dram_bytes_per_second", "gauge", "Estimated achieved DRAM bandwidth: DRAM activity x peak bandwidth. Absent for models without a known peak.", derived_field("dram_bytes_per_second")),
    GpuMetric("gpueff_estimated_tensor_flop_per_joule", "gauge", "Estimated achieved tensor FLOP per joule (FLOP/s per watt).", derived_field("tensor_flop_per_joule")),
    GpuMetric("gpueff_peak_tensor_flops_per_second", "gauge", "Dense BF16 tensor peak FLOP/s of this model at its maximum clock.", _peak("tensor_flops")),
    GpuMetric("gpueff_peak_dram_bytes_per_second", "gauge", "Peak DRAM bandwidth of this model, bytes per second.", _peak("dram_bytes_per_second")),
    GpuMetric("gpueff_gpu_busy_seconds_total", "counter", "Integral of utilization (gpueff_gpu_utilization_ratio) over time: seconds the GPU counted as busy.", one(lambda s: s.totals.busy_seconds if s.derived is not None and s.derived.busy is not None else None)),
    GpuMetric("gpueff_sm_active_seconds_total", "counter", "Integral of SM activity over time: SM-active GPU-seconds.", one(lambda s: s.totals.sm_active_seconds if s.sample.profiling.get("sm_active") is not None else None)),
    GpuMetric("gpueff_busy_idle_sm_seconds_total", "counter", "Integral of max(0, utilization - SM activity) over windows whose counters are plausible: seconds the GPU looked busy while its SMs were not.", one(lambda s: s.totals.busy_idle_sm_seconds if s.sample.profiling.get("sm_active") is not None and s.derived is not None and s.derived.busy is not None else None)),
)


def _device_labels(state: GpuState) -> str:
    device = state.sample.device
    return f'gpu="{device.index}",uuid="{escape(device.uuid)}"'


def _pod_labels(owner: PodOwner) -> str:
    return f',namespace="{escape(owner.namespace)}",pod="{escape(owner.pod)}",container="{escape(owner.container)}"'


def _gpu_labels(state: GpuState, pod_labels: str) -> str:
    """gpu and uuid, plus namespace, pod and container while exactly one container holds the GPU
    (kubernetes.pod_labels every_series; with info_only they stay on gpueff_gpu_pod_info)."""
    owner = state.owners.single_pod if state.owners is not None and pod_labels == "every_series" else None
    return _device_labels(state) + ("" if owner is None else _pod_labels(owner))


# The fair split (docs/sharing.md): (name, HELP, the holder's value, whether the GPU exports its counterpart).
HOLDER_METRICS: tuple[tuple[str, str, Callable[[HolderTotals], float], Callable[[GpuState], bool]], ...] = (
    ("gpueff_holder_busy_seconds_total", "This holder's share of gpueff_gpu_busy_seconds_total, split by NVML's per-process utilization samples; the holders of a GPU add up to it.", lambda t: t.busy_seconds, lambda s: s.derived is not None and s.derived.busy is not None),
    ("gpueff_holder_sm_active_seconds_total", "This holder's share of gpueff_sm_active_seconds_total, split in proportion to busy time window by window (not measured per process).", lambda t: t.sm_active_seconds, lambda s: "sm_active" in s.sample.profiling),
    ("gpueff_holder_busy_idle_sm_seconds_total", "This holder's share of gpueff_busy_idle_sm_seconds_total, split in proportion to busy time window by window.", lambda t: t.busy_idle_sm_seconds, lambda s: "sm_active" in s.sample.profiling and s.derived is not None and s.derived.busy is not None),
    ("gpueff_holder_energy_joules_total", "This holder's share of the energy counter's advances since the daemon started, split by power-weighted holding time; unattributed takes the windows no holder ran in.", lambda t: t.energy_joules, lambda s: s.sample.energy_joules is not None),
)


def render_sharing(states: Iterable[GpuState], stale: bool) -> list[str]:
    """Per-holder counters of shared GPUs and the Slurm jobs on each GPU; nothing for a GPU that is
    down or a stale snapshot (both are derived from running processes)."""
    if stale:
        return []
    live = [(state, state.sharing) for state in states if state.sharing is not None and state.sample.up and state.derived is not None]
    lines: list[str] = []
    for name, help_text, value, exported in HOLDER_METRICS:
        body: list[str] = []
        for state, sharing in live:
            if exported(state):
                device = _device_labels(state)
                body.extend(f'{name}{{{device},holder_kind="{holder.kind}",holder="{escape(holder.name)}"}} {number(value(totals))}' for holder, totals in sharing.holders)
        lines += family(name, "counter", help_text, body)
    jobs = [f'gpueff_gpu_job_info{{{_device_labels(state)},job_id="{escape(job.job_id)}",user_id="{escape(job.user_id)}"}} 1' for state, sharing in live for job in sharing.jobs]
    return lines + family("gpueff_gpu_job_info", "gauge", "The Slurm jobs whose processes run on this GPU (from their cgroups), for joins with the GPU's series. user_id is known on cgroup v1 only. Always 1.", jobs)


def render_pods(states: Iterable[GpuState], stale: bool = False) -> list[str]:
    """Kubernetes attribution: every container a GPU is assigned to, and its processes by pod.
    A stale snapshot keeps the assignments (identity, like gpueff_gpu_info) but not the process counts."""
    info: list[str] = []
    processes: list[str] = []
    for state in states:
        if state.owners is None:
            continue
        device = _device_labels(state)
        info.extend(f"gpueff_gpu_pod_info{{{device}{_pod_labels(owner)}}} 1" for owner in state.owners.pods)
        if not stale:
            processes.extend(f'gpueff_pod_compute_processes{{{device},pod_uid="{escape(owner.pod_uid)}",container_id="{escape(owner.container_id)}"}} {count}' for owner, count in state.owners.processes)
    return family("gpueff_gpu_pod_info", "gauge", "The containers the kubelet assigned this GPU (or MIG instance) to, one series each (several under time-slicing). Always 1.", info) + family(
        "gpueff_pod_compute_processes", "gauge", "Compute processes on this GPU by the pod UID and container id of their cgroup (needs hostPID).", processes
    )


def render_gpus(states: Iterable[GpuState], snapshot: Snapshot, stale: bool) -> list[str]:
    lines: list[str] = []
    states = list(states)
    labels = [_gpu_labels(state, snapshot.config.kubernetes.pod_labels) for state in states]
    live = [(not stale) and state.sample.up and state.derived is not None for state in states]
    for metric in GPU_METRICS:
        body = []
        for state, label, up in zip(states, labels, live):
            if metric.name == "gpueff_gpu_up":
                body.append(f"gpueff_gpu_up{{{label}}} {1 if up else 0}")
                continue
            if not up and not metric.when_down:
                continue
            for extra, value in metric.values(state):
                body.append(f"{metric.name}{{{label}{extra}}} {number(value)}")
        lines += family(metric.name, metric.kind, metric.help, body)
    priced = snapshot.config.price_per_gpu_hour is not None
    cost: list[str] = []
    for state, label, up in zip(states, labels, live):
        if up:
            cost.extend(f"gpueff_busy_idle_sm_cost_total{{{label}{extra}}} {number(value)}" for extra, value in _cost(state, snapshot.config.currency, priced))
    return lines + family("gpueff_busy_idle_sm_cost_total", "counter", "What the busy-but-idle-SM seconds cost at price_per_gpu_hour, in the labelled currency.", cost)


@dataclass(frozen=True, slots=True)
class AppMetric:
    name: str
    kind: str
    help: str
    value: Callable[[AppState], float | None]
    unit_label: bool = True  # carries unit="<the app's unit>"


APP_METRICS: tuple[AppMetric, ...] = (
    AppMetric("gpueff_app_units_total", "counter", "Work the app reported done since the exporter started, in its unit: the increases of its counter, resets handled as rate() does.", lambda app: app.units_total),
    AppMetric("gpueff_app_throughput_per_second", "gauge", "Units of work per second between the app's two latest good scrapes.", lambda app: app.throughput),
    AppMetric("gpueff_app_requests_per_second", "gauge", "Requests per second between the app's two latest good scrapes (its requests_counter).", lambda app: app.requests_per_second, unit_label=False),
    AppMetric("gpueff_app_units_per_joule", "gauge", "Units of work per joule: throughput / summed power of the app's GPUs, both over the same window.", lambda app: app.units_per_joule),
    AppMetric("gpueff_app_units_per_sm_active_second", "gauge", "Units of work per SM-active GPU-second: throughput / summed SM activity of the app's GPUs.", lambda app: app.units_per_sm_active_second),
    AppMetric("gpueff_app_model_flops_utilization_ratio", "gauge", "Model FLOPs utilization: throughput x flops_per_unit / summed dense BF16 tensor peak of the app's GPUs.", lambda app: app.model_flops_utilization, unit_label=False),
    AppMetric("gpueff_app_scrape_duration_seconds", "gauge", "How long the app's last scrape took.", lambda app: app.scrape_duration_seconds, unit_label=False),
)


def render_apps(snapshot: Snapshot, stale: bool) -> list[str]:
    """Per-app metrics (exporter/apps, docs/apps.md). A stale snapshot shows only gpueff_app_up 0."""
    apps = snapshot.apps
    if not apps:
        return []
    names = [f'app="{escape(app.name)}"' for app in apps]
    lines = family("gpueff_app_up", "gauge", "1 if the app's last scrape answered with its counter, 0 if it was down, slow, too large or not Prometheus text.", [f"gpueff_app_up{{{name}}} {int(app.up and not stale)}" for app, name in zip(apps, names)])
    lines += family("gpueff_app_scrape_errors_total", "counter", "Failed scrapes of the app since the exporter started.", [f"gpueff_app_scrape_errors_total{{{name}}} {app.scrape_errors_total}" for app, name in zip(apps, names)])
    if stale:
        return lines
    lines += family("gpueff_app_gpus", "gauge", "GPUs attributed to the app at the last poll (by index, UUID, process name or Kubernetes pod).", [f"gpueff_app_gpus{{{name}}} {len(app.gpus)}" for app, name in zip(apps, names)])
    info = [f'gpueff_app_gpu_info{{{name},gpu="{device.index}",uuid="{escape(device.uuid)}"}} 1' for app, name in zip(apps, names) for device in app.gpus]
    lines += family("gpueff_app_gpu_info", "gauge", "The GPUs attributed to each app, for joins with the gpueff_ GPU metrics. Always 1.", info)
    for metric in APP_METRICS:
        body = []
        for app, name in zip(apps, names):
            value = metric.value(app) if app.up else None
            if value is not None:
                unit = f',unit="{escape(app.unit)}"' if metric.unit_label else ""
                body.append(f"{metric.name}{{{name}{unit}}} {number(value)}")
        lines += family(metric.name, metric.kind, metric.help, body)
    currency = escape(snapshot.config.currency)
    cost = [f'gpueff_app_cost_per_million_units{{{name},unit="{escape(app.unit)}",currency="{currency}"}} {number(app.cost_per_million_units)}' for app, name in zip(apps, names) if app.up and app.cost_per_million_units is not None]
    return lines + family("gpueff_app_cost_per_million_units", "gauge", "What a million units of the app's work cost at price_per_gpu_hour: its GPUs x price per second / throughput x 1e6.", cost)


def render_self(snapshot: Snapshot, stale: bool) -> list[str]:
    lines = [
        "# HELP gpueff_exporter_build_info The exporter's version and the backend it reads from (replayed=true: recorded traces, not live GPUs). Always 1.",
        "# TYPE gpueff_exporter_build_info gauge",
        f'gpueff_exporter_build_info{{version="{__version__}",backend="{snapshot.backend_name}",replayed="{str(snapshot.replayed).lower()}"}} 1',
        "# HELP gpueff_bottleneck_class_info What each gpueff_bottleneck class means and what to try, for joins and alert annotations. Always 1.",
        "# TYPE gpueff_bottleneck_class_info gauge",
        *(f'gpueff_bottleneck_class_info{{class="{each.name}",meaning="{escape(each.meaning)}",what_to_try="{escape(each.what_to_try)}"}} 1' for each in CLASSES),
        "# HELP gpueff_collect_duration_seconds Time one poll of all GPUs took.",
        "# TYPE gpueff_collect_duration_seconds summary",
        f"gpueff_collect_duration_seconds_sum {number(snapshot.collect_duration_sum_seconds)}",
        f"gpueff_collect_duration_seconds_count {snapshot.polls_total}",
        "# HELP gpueff_collect_errors_total Unexpected failures reading GPUs (lost GPUs, driver errors, backend failures).",
        "# TYPE gpueff_collect_errors_total counter",
        f"gpueff_collect_errors_total {snapshot.errors_total}",
        "# HELP gpueff_collect_stale 1 if the last poll is older than stale_after, so every GPU is served as down.",
        "# TYPE gpueff_collect_stale gauge",
        f"gpueff_collect_stale {int(stale)}",
    ]
    if snapshot.last_success_wall is not None:
        lines += [
            "# HELP gpueff_last_collect_success_timestamp_seconds Unix time of the last poll that read at least one GPU.",
            "# TYPE gpueff_last_collect_success_timestamp_seconds gauge",
            f"gpueff_last_collect_success_timestamp_seconds {number(snapshot.last_success_wall)}",
        ]
    return lines


def render_attribution(snapshot: Snapshot) -> list[str]:
    """The kubelet pod-resources calls' health (docs/kubernetes.md); nothing while kubernetes is disabled."""
    health = snapshot.attribution
    if health is None:
        return []
    lines = [
        "# HELP gpueff_kubernetes_attribution_up 1 if the last kubelet pod-resources List call answered; 0 if it failed (the last good pod assignment is kept for 3 refresh intervals).",
        "# TYPE gpueff_kubernetes_attribution_up gauge",
        f"gpueff_kubernetes_attribution_up {int(health.up)}",
        "# HELP gpueff_kubernetes_attribution_errors_total Kubelet pod-resources List calls that failed or could not be made (no socket, no grpcio).",
        "# TYPE gpueff_kubernetes_attribution_errors_total counter",
        f"gpueff_kubernetes_attribution_errors_total {health.errors_total}",
    ]
    if health.last_success_wall is not None:
        lines += [
            "# HELP gpueff_kubernetes_attribution_last_success_timestamp_seconds Unix time of the last kubelet pod-resources List answer.",
            "# TYPE gpueff_kubernetes_attribution_last_success_timestamp_seconds gauge",
            f"gpueff_kubernetes_attribution_last_success_timestamp_seconds {number(health.last_success_wall)}",
        ]
    return lines


def render(snapshot: Snapshot, stale: bool = False) -> bytes:
    lines = render_gpus(snapshot.gpus, snapshot, stale) + render_pods(snapshot.gpus, stale) + render_sharing(snapshot.gpus, stale) + render_self(snapshot, stale)
    lines += render_attribution(snapshot) + render_apps(snapshot, stale)
    return ("\n".join(lines) + "\n").encode()


class Exposition:
    """The rendered text of the latest snapshot, rendered once and served many times."""

    def __init__(self, current: Callable[[], Snapshot | None], clock: Callable[[], float] = time.monotonic) -> None:
        self.current = current
        self.clock = clock
        self._lock = threading.Lock()
        self._key: tuple[int, bool] | None = None
        self._body = b""

    def payload(self, gzip: bool = False) -> Payload | None:
        """The metrics for one scrape, or None before the first poll: the cached text and the
        snapshot-age lines apart (the server writes both without joining them). ``gzip`` (the
        scraper accepts it) is not acted on yet: the body goes out uncompressed."""
        snapshot = self.current()
        if snapshot is None:
            return None
        age = max(0.0, self.clock() - snapshot.taken_monotonic)
        stale = age > snapshot.config.effective_stale_after
        key = (snapshot.sequence, stale)
        with self._lock:
            if key != self._key:
                self._body = render(snapshot, stale)
                self._key = key
            body = self._body
        return Payload((body, b"%sgpueff_snapshot_age_seconds %.3f\n" % (_AGE_HEAD, age)), None)

    def body(self) -> bytes | None:
        """The metrics text, or None before the first poll."""
        payload = self.payload()
        return None if payload is None else b"".join(payload.parts)


class Payload(NamedTuple):
    """What a scrape sends: ``parts`` joined are the body (one write), ``encoding`` its Content-Encoding."""

    parts: tuple[bytes, ...]
    encoding: str | None  # "gzip" or None


_AGE_HEAD = b"# HELP gpueff_snapshot_age_seconds Age of the served data: seconds since the last poll finished.\n# TYPE gpueff_snapshot_age_seconds gauge\n"
