"""The GPM metrics, taken from the catalogue (gpueff/metrics.py): NVML_GPM_METRIC_<name>, its id,
the Profiling field it fills and its unit scale. The NVML backend asks for them (backends/nvml/gpm.py);
the trace format (gpu-trace/1) stores the same names with NVML's own units (percent, MiB/s).
"""

from __future__ import annotations

from typing import NamedTuple

from gpueff.metrics import GPM_READINGS


class GpmMetric(NamedTuple):
    name: str  # NVML_GPM_METRIC_<name>; also the key in a gpu-trace/1 sample
    metric_id: int
    key: str  # the field of sample.Profiling
    scale: float  # NVML unit -> sample unit (percent -> ratio, MiB/s -> bytes/s)


GPM_METRICS: tuple[GpmMetric, ...] = tuple(GpmMetric(r.gpm.name, r.gpm.metric_id, r.field, r.gpm.scale) for r in GPM_READINGS if r.gpm is not None)


def to_sample_unit(metric: GpmMetric, value: float) -> float:
    """NVML's unit to the sample's, clamping ratios to 0..1 (GPM can read a hair over 100 %)."""
    scaled = max(0.0, value * metric.scale)
    return min(scaled, 1.0) if metric.scale < 1 else scaled
