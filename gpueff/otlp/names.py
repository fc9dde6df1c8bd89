"""How a catalogue metric is named over OTLP: ``gpueff_sm_active_ratio`` is ``gpueff.sm_active``
in unit ``1``, ``gpueff_energy_joules_total`` ``gpueff.energy`` in ``J``, ``gpueff_sm_active_seconds_total``
``gpueff.sm_active.time`` in ``s`` (OpenTelemetry's naming:
the unit is metadata, not part of the name; UCUM units). The OpenTelemetry GPU semantic
conventions (``hw.gpu.*``, ``hw.power``, ``hw.energy``) are published beside them, from the same
series, where a convention exists."""

from __future__ import annotations

from dataclasses import dataclass

from gpueff.metrics import COUNTER, Metric

UCUM = {  # the catalogue's base units -> UCUM (what OTLP back ends expect)
    "ratio": "1",
    "bytes": "By",
    "bytes_per_second": "By/s",
    "seconds": "s",
    "watts": "W",
    "joules": "J",
    "celsius": "Cel",
    "hertz": "Hz",
    "flops_per_second": "{flop}/s",
    "flop_per_joule": "{flop}/J",
    "ops_per_second": "{op}/s",
    "": "1",
}
PREFIX = "gpueff_"
SIMPLE_UNITS = frozenset({"ratio", "bytes", "seconds", "watts", "joules", "celsius", "hertz"})


def otlp_name(metric: Metric) -> str:
    """The metric's OTLP name: the prefix as a namespace, without its unit and ``_total``."""
    stem = metric.name.removeprefix(PREFIX)
    if metric.type == COUNTER:
        stem = stem.removesuffix("_total")
    if metric.unit in SIMPLE_UNITS:  # a rate (flops_per_second) keeps its name: the unit word is the quantity
        stem = stem.removesuffix("_" + metric.unit)
    if metric.type == COUNTER and metric.unit == "seconds":
        stem += ".time"  # OpenTelemetry's word for a time total (process.cpu.time); gpueff.sm_active is the ratio
    return ("gpueff." if metric.name.startswith(PREFIX) else "") + stem


def otlp_unit(metric: Metric) -> str:
    return UCUM[metric.unit]


@dataclass(frozen=True, slots=True)
class Convention:
    """A semantic-convention instrument fed by one catalogue series."""

    name: str
    kind: str  # gauge, counter or updowncounter
    unit: str
    source: str  # the gpueff_ series it reads
    extra: tuple[tuple[str, str], ...] = ()  # attributes it adds (hw.gpu.task)
    description: str = ""


CONVENTIONS: tuple[Convention, ...] = (
    Convention("hw.gpu.utilization", "gauge", "1", "gpueff_gpu_utilization_ratio", (("hw.gpu.task", "general"),), "Fraction of time the GPU had a kernel running (NVML utilization; not SM activity)."),
    Convention("hw.gpu.utilization", "gauge", "1", "gpueff_encoder_utilization_ratio", (("hw.gpu.task", "encoder"),)),
    Convention("hw.gpu.utilization", "gauge", "1", "gpueff_decoder_utilization_ratio", (("hw.gpu.task", "decoder"),)),
    Convention("hw.gpu.memory.usage", "updowncounter", "By", "gpueff_memory_used_bytes", description="GPU memory used."),
    Convention("hw.gpu.memory.limit", "updowncounter", "By", "gpueff_memory_total_bytes", description="Size of the GPU memory."),
    Convention("hw.power", "gauge", "W", "gpueff_power_watts", description="Instantaneous power consumed by the GPU."),
    Convention("hw.energy", "counter", "J", "gpueff_energy_joules_total", description="Energy consumed by the GPU."),
)
