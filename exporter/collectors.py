"""Collectors: the per-GPU metric families a large fleet can switch off, node_exporter style
(``--no-collector.nvlink``, or ``collectors: {disabled: [nvlink]}`` in the config file).

A disabled collector's series are not exported, and where its readings cost NVML calls of their
own (the health collectors) those calls are not made. The GPU's identity (``gpueff_gpu_up``,
``gpueff_gpu_info``, ``gpueff_mig_device_info``), the per-pod, per-holder and per-app series (each
behind its own feature switch) and the exporter's own series are always exported. Series per node
for each collector: docs/collectors.md (bench/series_per_node.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.config.engine import setting
from exporter.config.values import boolean, cut, shown


@dataclass(frozen=True, slots=True)
class Collector:
    help: str
    metrics: tuple[str, ...]


COLLECTORS: dict[str, Collector] = {
    "utilization": Collector("coarse GPU and memory utilization", ("gpueff_gpu_utilization_ratio", "gpueff_gpu_utilization_instant_ratio", "gpueff_memory_utilization_ratio")),
    "power": Collector("power draw, power limit, energy", ("gpueff_power_watts", "gpueff_power_limit_watts", "gpueff_energy_joules_total")),
    "thermal": Collector("GPU and memory temperature, temperature limits", ("gpueff_temperature_celsius", "gpueff_memory_temperature_celsius", "gpueff_temperature_limit_celsius")),
    "clocks": Collector("SM and memory clocks, clock-event reasons, P-state",
                        ("gpueff_sm_clock_hertz", "gpueff_sm_clock_max_hertz", "gpueff_memory_clock_hertz", "gpueff_memory_clock_max_hertz", "gpueff_clock_event_active", "gpueff_performance_state")),
    "memory": Collector("device memory used, total, reserved", ("gpueff_memory_used_bytes", "gpueff_memory_total_bytes", "gpueff_memory_reserved_bytes")),
    "errors": Collector("ECC errors, remapped rows, retired pages, Xid errors",
                        ("gpueff_ecc_errors_total", "gpueff_remapped_rows", "gpueff_remapped_rows_pending", "gpueff_remapped_rows_failure", "gpueff_retired_pages",
                         "gpueff_retired_pages_pending", "gpueff_xid_errors_total", "gpueff_xid_last_code")),
    "processes": Collector("compute processes and their memory", ("gpueff_compute_processes", "gpueff_compute_process_memory_bytes")),
    "profiling": Collector("SM activity and occupancy, engine, tensor, DRAM and pipe activity, PCIe and NVLink traffic (GPM or DCGM)",
                           ("gpueff_profiling_available", "gpueff_profiling_multiplexed", "gpueff_sm_active_ratio", "gpueff_sm_occupancy_ratio", "gpueff_graphics_engine_active_ratio", "gpueff_graphics_engine_active_slow_window_ratio", "gpueff_tensor_active_ratio",
                            "gpueff_tensor_hmma_active_ratio", "gpueff_tensor_imma_active_ratio", "gpueff_tensor_dfma_active_ratio", "gpueff_dram_active_ratio", "gpueff_fp64_active_ratio",
                            "gpueff_fp32_active_ratio", "gpueff_fp16_active_ratio", "gpueff_integer_active_ratio", "gpueff_pcie_tx_bytes_per_second", "gpueff_pcie_rx_bytes_per_second",
                            "gpueff_nvlink_tx_bytes_per_second", "gpueff_nvlink_rx_bytes_per_second")),
    "efficiency": Collector("efficiency, mismatch, bottleneck class, counter health, their time integrals and cost, and GPU time, energy and cost by state (the recording rules and alerts read these)",
                            ("gpueff_efficiency_ratio", "gpueff_mismatch", "gpueff_bottleneck", "gpueff_readings_implausible", "gpueff_gpu_busy_seconds_total",
                             "gpueff_sm_active_seconds_total", "gpueff_busy_idle_sm_seconds_total", "gpueff_busy_idle_sm_cost_total", "gpueff_peer_wait_seconds_total",
                             "gpueff_gpu_state_seconds_total", "gpueff_gpu_state_joules_total", "gpueff_gpu_state_cost_total")),
    "estimates": Collector("busy FLOP/s per math pipe (an upper bound of the work), INT8 ops, their total and busy share of each pipe's rate, the point estimates of the work where the counters support one, estimated DRAM bandwidth, busy FLOP per joule, and the model's figures",
                           ("gpueff_pipe_busy_flops_per_second", "gpueff_pipe_busy_int8_ops_per_second", "gpueff_busy_flops_per_second", "gpueff_estimated_flops_per_second",
                            "gpueff_estimated_int8_ops_per_second", "gpueff_pipe_peak_ratio",
                            "gpueff_estimated_dram_bytes_per_second", "gpueff_busy_flop_per_joule", "gpueff_peak_tensor_flops_per_second", "gpueff_peak_dram_bytes_per_second", "gpueff_peak_info")),
    "pcie": Collector("PCIe replays, link generation and width", ("gpueff_pcie_replay_errors_total", "gpueff_pcie_link_generation", "gpueff_pcie_link_max_generation",
                                                                 "gpueff_pcie_link_width", "gpueff_pcie_link_max_width")),
    "nvlink": Collector("NVLink error counters and link state (one series per link)", ("gpueff_nvlink_errors_total", "gpueff_nvlink_link_active", "gpueff_nvlink_link_errors_total")),
    "topology": Collector("how each GPU reaches the node's other GPUs: PCIe path, NVLink (read once per device open)", ("gpueff_gpu_peer_info", "gpueff_gpu_peer_nvlinks")),
    "violations": Collector("time the clocks were held down, by policy", ("gpueff_clock_violation_seconds_total",)),
    "video": Collector("video encoder and decoder utilization", ("gpueff_encoder_utilization_ratio", "gpueff_decoder_utilization_ratio")),
    "fan": Collector("fan speed", ("gpueff_fan_speed_ratio",)),
}
ALWAYS = frozenset({"gpueff_gpu_up", "gpueff_gpu_info", "gpueff_mig_device_info"})
COLLECTOR_OF: dict[str, str] = {metric: name for name, collector in COLLECTORS.items() for metric in collector.metrics}


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


@dataclass(frozen=True)
class CollectorsConfig:
    """Which per-GPU metric families are exported (docs/collectors.md)."""

    disabled: tuple[str, ...] = setting((), collector_names, f"collectors not to export: {', '.join(COLLECTORS)} (the --collector.NAME and --no-collector.NAME flags override it)")
    exporter_metrics: bool = setting(True, boolean, "export the daemon's own process_* series (CPU, memory, file descriptors); --web.disable-exporter-metrics turns them off")
