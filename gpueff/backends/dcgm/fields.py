"""The DCGM fields the DCGM backend watches, by ID, with the names DCGM has given them over time:
the catalogue's DCGM sources (gpueff/metrics.py) plus the GPU's index, which labels every series.

IDs are DCGM's stable ABI; names are not (DCGM 4.6 renamed many, e.g. DCGM_FI_PROF_SM_ACTIVE became
DCGM_FI_PROF_SM_UTIL_RATIO, both 1002). ``names`` lists the newest first; they are used to cross-check
the ID against the loaded bindings and to say which field is meant in logs and in ``check``.
"""

from __future__ import annotations

from typing import NamedTuple

from gpueff.metrics import EVENT, FAST, PROFILING, READINGS, SLOW, STATIC

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

# Each NVLink link's error counters, links 0-17 (dcgm_fields.h; the host engine fills each with one
# nvmlDeviceGetNvLinkErrorCounter call, DcgmCacheManager.cpp TryGetNvLinkErrorFieldInfo): by type, the
# first ID of the runs of links 0-5, 6-11, 12-14 and 15-17. Target: "nvlink_link:<link>:<type>".
NVLINK_LINK_PREFIX = "nvlink_link:"
NVLINK_LINK_IDS = {"crc_flit": ("CRC_FLIT", (400, 451, 406, 481)), "crc_data": ("CRC_DATA", (410, 457, 416, 484)),
                   "replay": ("REPLAY", (420, 463, 426, 487)), "recovery": ("RECOVERY", (430, 469, 436, 491))}
_RUN_STARTS = (0, 6, 12, 15)


def _link_field_id(starts: tuple[int, ...], link: int) -> int:
    run = max(number for number, first in enumerate(_RUN_STARTS) if link >= first)
    return starts[run] + link - _RUN_STARTS[run]


NVLINK_LINK_FIELDS = tuple(
    DcgmField(_link_field_id(starts, link), (f"DCGM_FI_DEV_NVLINK_{name}_ERROR_L{link}_TOTAL", f"DCGM_FI_DEV_NVLINK_{name}_ERROR_COUNT_L{link}"), f"{NVLINK_LINK_PREFIX}{link}:{kind}", 1, SLOW)
    for kind, (name, starts) in NVLINK_LINK_IDS.items() for link in range(18)
)
FIELDS += NVLINK_LINK_FIELDS

SM_ACTIVE_ID = 1002
BOOLEAN_TARGETS = frozenset({"remapped_rows_pending", "remapped_rows_failure"})
INTEGER_TARGETS = frozenset({"clock_event_reasons", "index"})
