"""The GPM metrics the daemon reads: NVML_GPM_METRIC_<name>, its profiling key and unit scale.

The trace format (gpu-trace/1) stores the same names with NVML's own units (percent, MiB/s).
"""

from __future__ import annotations

from typing import NamedTuple

MIB = 1024 * 1024


class GpmMetric(NamedTuple):
    name: str  # NVML_GPM_METRIC_<name>; also the key in a gpu-trace/1 sample
    metric_id: int
    key: str  # key in GpuSample.profiling
    scale: float  # NVML unit -> sample unit (percent -> ratio, MiB/s -> bytes/s)


GPM_METRICS: tuple[GpmMetric, ...] = (
    GpmMetric("GRAPHICS_UTIL", 1, "graphics_active", 0.01),
    GpmMetric("SM_UTIL", 2, "sm_active", 0.01),
    GpmMetric("SM_OCCUPANCY", 3, "sm_occupancy", 0.01),
    GpmMetric("INTEGER_UTIL", 4, "integer_active", 0.01),
    GpmMetric("ANY_TENSOR_UTIL", 5, "tensor_active", 0.01),
    GpmMetric("DFMA_TENSOR_UTIL", 6, "tensor_dfma_active", 0.01),
    GpmMetric("HMMA_TENSOR_UTIL", 7, "tensor_hmma_active", 0.01),
    GpmMetric("IMMA_TENSOR_UTIL", 9, "tensor_imma_active", 0.01),
    GpmMetric("DRAM_BW_UTIL", 10, "dram_active", 0.01),
    GpmMetric("FP64_UTIL", 11, "fp64_active", 0.01),
    GpmMetric("FP32_UTIL", 12, "fp32_active", 0.01),
    GpmMetric("FP16_UTIL", 13, "fp16_active", 0.01),
    GpmMetric("PCIE_TX_PER_SEC", 20, "pcie_tx_bytes_per_second", MIB),
    GpmMetric("PCIE_RX_PER_SEC", 21, "pcie_rx_bytes_per_second", MIB),
    GpmMetric("NVLINK_TOTAL_RX_PER_SEC", 60, "nvlink_rx_bytes_per_second", MIB),
    GpmMetric("NVLINK_TOTAL_TX_PER_SEC", 61, "nvlink_tx_bytes_per_second", MIB),
)


def to_sample_unit(metric: GpmMetric, value: float) -> float:
    """NVML's unit to the sample's, clamping ratios to 0..1 (GPM can read a hair over 100 %)."""
    scaled = max(0.0, value * metric.scale)
    return min(scaled, 1.0) if metric.scale < 1 else scaled
