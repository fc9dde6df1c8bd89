"""Collectors: the per-GPU metric families a large fleet can switch off, node_exporter style
(``--no-collector.nvlink``, or ``collectors: {disabled: [nvlink]}`` in the config file).

A disabled collector's series are not exported, and where its readings cost NVML calls of their
own (the health collectors) those calls are not made. The GPU's identity (``gpueff_gpu_up``,
``gpueff_gpu_info``, ``gpueff_mig_device_info``, ``gpueff_gpu_attribution_info``), the per-pod, per-holder and per-app series (each
behind its own feature switch) and the exporter's own series are always exported. Series per node
for each collector: docs/collectors.md (bench/poll/series_per_node.py). Each metric names its collector on
its row of the catalogue (gpueff/metrics.py); this module says what each collector is.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpueff.config.engine import SettingError, setting
from gpueff.config.values import boolean, cut, shown
from gpueff.metrics import GPU, MAX_PROCESSES, METRICS


@dataclass(frozen=True, slots=True)
class Collector:
    help: str
    metrics: tuple[str, ...]  # the catalogue's rows that name it, in the catalogue's order


_HELP = {
    "utilization": "coarse GPU and memory utilization",
    "power": "power draw, power limit, energy",
    "thermal": "GPU and memory temperature, temperature limits",
    "clocks": "SM and memory clocks, clock-event reasons, P-state",
    "memory": "device memory used, total, reserved",
    "errors": "ECC errors, remapped rows, retired pages, Xid errors",
    "processes": "compute processes and their memory",
    "profiling": "SM activity and occupancy, engine, tensor, DRAM and pipe activity, PCIe and NVLink traffic (GPM or DCGM)",
    "efficiency": "efficiency, mismatch, bottleneck class, counter health, their time integrals and cost, and GPU time, energy and cost by state (the recording rules and alerts read these)",
    "estimates": "busy FLOP/s per math pipe (an upper bound of the work), INT8 ops, their total and busy share of each pipe's rate, the point estimates of the work where the counters support one, estimated DRAM bandwidth, busy FLOP per joule, and the model's figures",
    "pcie": "PCIe replays, link generation and width",
    "nvlink": "NVLink error counters and link state (one series per link)",
    "topology": "how each GPU reaches the node's other GPUs: PCIe path, NVLink (read once per device open)",
    "violations": "time the clocks were held down, by policy",
    "video": "video encoder and decoder utilization",
    "fan": "fan speed",
    "per_process": f"each compute process's device memory and share of the GPU's busy time, by PID, user, program and holder (at most {MAX_PROCESSES} per GPU, the rest summed as pid=\"other\")",
}
COLLECTORS: dict[str, Collector] = {name: Collector(help, tuple(metric.name for metric in METRICS if metric.collector == name)) for name, help in _HELP.items()}
# Off unless asked for (node_exporter's default-disabled collectors): a series per PID churns with
# every process started, so only an operator who wants them pays for them.
OFF_BY_DEFAULT = frozenset({"per_process"})
ALWAYS = frozenset(metric.name for metric in METRICS if metric.scope == GPU and not metric.collector)
COLLECTOR_OF: dict[str, str] = {metric.name: metric.collector for metric in METRICS if metric.collector}


def disabled_metrics(disabled: tuple[str, ...]) -> frozenset[str]:
    """The metric names the disabled collectors would export."""
    return frozenset(metric for name in disabled for metric in COLLECTORS[name].metrics)


def collector_names(value: object) -> tuple[str, ...]:
    """A list of collector names, each known; sorted, without repeats."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"expected a list of collector names, got {shown(value)}")
    unknown = sorted(set(value) - set(COLLECTORS))
    if unknown:
        raise ValueError(f"unknown collector {cut(unknown[0])!r}; the collectors are {', '.join(COLLECTORS)}")
    return tuple(sorted(set(value)))


def off_by_default_names(value: object) -> tuple[str, ...]:
    """A list of the collectors that are off by default; sorted, without repeats."""
    names = collector_names(value)
    usual = sorted(set(names) - OFF_BY_DEFAULT)
    if usual:
        raise ValueError(f"{cut(usual[0])!r} is on by default (only {', '.join(sorted(OFF_BY_DEFAULT))} need enabling)")
    return names


@dataclass(frozen=True)
class CollectorsConfig:
    """Which per-GPU metric families are exported (docs/collectors.md)."""

    disabled: tuple[str, ...] = setting((), collector_names, f"collectors not to export: {', '.join(COLLECTORS)} (the --collector.NAME and --no-collector.NAME flags override it)")
    enabled: tuple[str, ...] = setting((), off_by_default_names, f"collectors that are off by default to export: {', '.join(sorted(OFF_BY_DEFAULT))} (--collector.NAME)")
    exporter_metrics: bool = setting(True, boolean, "export the daemon's own process_* series (CPU, memory, file descriptors); --web.disable-exporter-metrics turns them off")

    def check(self) -> None:
        both = sorted(set(self.disabled) & set(self.enabled))
        if both:
            raise SettingError("enabled", f"{both[0]!r} is also in disabled: name it in one of the two")

    @property
    def off(self) -> tuple[str, ...]:
        """Every collector not exported: those disabled, and those off by default not enabled."""
        return tuple(sorted(set(self.disabled) | (OFF_BY_DEFAULT - set(self.enabled))))
