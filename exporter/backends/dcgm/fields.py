"""The DCGM fields the DCGM backend watches, by ID, with the names DCGM has given them over time:
the catalogue's DCGM sources (exporter/metrics.py) plus the GPU's index, which labels every series.

IDs are DCGM's stable ABI; names are not (DCGM 4.6 renamed many, e.g. DCGM_FI_PROF_SM_ACTIVE became
DCGM_FI_PROF_SM_UTIL_RATIO, both 1002). ``names`` lists the newest first; they are used to cross-check
the ID against the loaded bindings and to say which field is meant in logs and in ``check``.
"""

from __future__ import annotations

from typing import NamedTuple

from exporter.metrics import EVENT, FAST, PROFILING, READINGS, SLOW, STATIC

__all__ = ["EVENT", "FAST", "PROFILING", "SLOW", "STATIC", "FIELDS", "DcgmField"]


class DcgmField(NamedTuple):
    field_id: int
    names: tuple[str, ...]  # newest first
    target: str  # a GpuSample attribute, "profiling:<key>", "health.<Health field>", or a DeviceInfo attribute for STATIC
    scale: float  # DCGM's unit -> the sample's
    cadence: str


def _target(path: str) -> str:
    """A catalogue reading's path as the backend's target: sample.profiling.X -> profiling:X, sample[.device].X -> X."""
    if path.startswith("sample.profiling."):
        return "profiling:" + path.removeprefix("sample.profiling.")
    return path.removeprefix("sample.").removeprefix("device.")


# The GPU's NVML index labels its series (gpu="..."): read once, and no metric of its own.
IDENTITY = (DcgmField(52, ("DCGM_FI_DEV_NVML_INDEX",), "index", 1, STATIC),)
FIELDS: tuple[DcgmField, ...] = IDENTITY + tuple(
    DcgmField(r.dcgm.field_id, tuple(r.dcgm.names.split()), _target(r.path), r.dcgm.scale, r.dcgm.cadence) for _, r in READINGS if r.dcgm is not None
)

SM_ACTIVE_ID = 1002
BOOLEAN_TARGETS = frozenset({"remapped_rows_pending", "remapped_rows_failure"})
INTEGER_TARGETS = frozenset({"clock_event_reasons", "index"})
