"""Peak figures per GPU model, the denominators of the achieved FLOP/s and bandwidth estimates.

Figures are dense (no sparsity), from NVIDIA's data sheets (docs/gpu-facts.md). A model that
is not in the table (or in the config's ``peaks:``) gets no estimate rather than a wrong one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from exporter.config.engine import load_section, setting
from exporter.config.values import cut, optional, positive, shown


@dataclass(frozen=True)
class PeakOverride:
    tensor_tflops: float | None = setting(None, optional(positive), "dense BF16/FP16 tensor TFLOP/s")
    dram_tbps: float | None = setting(None, optional(positive), "DRAM bandwidth in TB/s")
    pcie_gbps: float | None = setting(None, optional(positive), "PCIe bandwidth per direction in GB/s")
    nvlink_gbps: float | None = setting(None, optional(positive), "NVLink bandwidth per direction in GB/s")


def peak_overrides(value: Any) -> dict[str, PeakOverride]:
    """The ``peaks:`` config key: GPU model name -> the figures that replace the built-in ones."""
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of GPU model name to peak figures, got {shown(value)}")
    return {str(name): load_section(PeakOverride, spec, f"peaks.{cut(str(name))}") for name, spec in value.items()}


@dataclass(frozen=True, slots=True)
class Peak:
    tensor_flops: float | None  # dense BF16/FP16 tensor FLOP/s at the maximum SM clock
    dram_bytes_per_second: float | None
    pcie_bytes_per_second: float | None  # per direction
    nvlink_bytes_per_second: float | None  # per direction, all links


def _peak(tflops: float | None, dram_tbps: float | None, pcie_gbps: float | None, nvlink_gbps: float | None) -> Peak:
    scale = lambda value, factor: None if value is None else value * factor  # noqa: E731
    return Peak(scale(tflops, 1e12), scale(dram_tbps, 1e12), scale(pcie_gbps, 1e9), scale(nvlink_gbps, 1e9))


# NVML device names (nvmlDeviceGetName) -> peaks.
BUILTIN_PEAKS: dict[str, Peak] = {
    "NVIDIA H100 80GB HBM3": _peak(989.4, 3.35, 64, 450),
    "NVIDIA H100 PCIe": _peak(756, 2.0, 64, None),
    "NVIDIA H100 NVL": _peak(835, 3.9, 64, None),  # bf16 figure unverified on hardware
    "NVIDIA H200": _peak(989.4, 4.8, 64, 450),
    "NVIDIA H200 NVL": _peak(835, 4.8, 64, None),  # bf16 figure unverified on hardware
    "NVIDIA A100-SXM4-80GB": _peak(312, 2.039, 32, 300),
    "NVIDIA A100 80GB PCIe": _peak(312, 1.935, 32, None),
    "NVIDIA A100-SXM4-40GB": _peak(312, 1.555, 32, 300),
    "NVIDIA A100-PCIE-40GB": _peak(312, 1.555, 32, None),
    "NVIDIA L40S": _peak(362, 0.864, 32, None),
    "NVIDIA L4": _peak(121, 0.300, 32, None),
}
_BY_FOLDED_NAME = {name.casefold(): peak for name, peak in BUILTIN_PEAKS.items()}


def peak_for(model: str, overrides: dict[str, PeakOverride] | None = None) -> Peak | None:
    """The peaks of a model by its NVML name; config overrides win field by field."""
    folded = model.strip().casefold()
    peak = _BY_FOLDED_NAME.get(folded)
    override = next((given for name, given in (overrides or {}).items() if name.strip().casefold() == folded), None)
    if override is None:
        return peak
    given = _peak(override.tensor_tflops, override.dram_tbps, override.pcie_gbps, override.nvlink_gbps)
    if peak is None:
        return given
    return replace(peak, **{name: value for name, value in asdict(given).items() if value is not None})
