"""The DCGM fields the DCGM backend watches, by ID, with the names DCGM has given them over time.

IDs are DCGM's stable ABI; names are not (DCGM 4.6 renamed many, e.g. DCGM_FI_PROF_SM_ACTIVE became
DCGM_FI_PROF_SM_UTIL_RATIO, both 1002). ``names`` lists the newest first; they are used to cross-check
the ID against the loaded bindings and to say which field is meant in logs and in ``check``.
"""

from __future__ import annotations

from typing import NamedTuple

MIB = 1024 * 1024

# Watch cadences: FAST at the collect interval, SLOW at slow_collect_interval (costly driver calls),
# PROFILING at the collect interval in its own field group (it may be refused while the rest works),
# EVENT like FAST but a new timestamp means a new event, STATIC read once at start.
FAST, SLOW, PROFILING, EVENT, STATIC = "fast", "slow", "profiling", "event", "static"


class DcgmField(NamedTuple):
    field_id: int
    names: tuple[str, ...]  # newest first
    target: str  # a GpuSample attribute, "profiling:<key>", or a DeviceInfo attribute for STATIC
    scale: float  # DCGM's unit -> the sample's
    cadence: str


def _f(field_id: int, names: str, target: str, scale: float, cadence: str) -> DcgmField:
    return DcgmField(field_id, tuple(names.split()), target, scale, cadence)


FIELDS: tuple[DcgmField, ...] = (
    # Static, read once.
    _f(52, "DCGM_FI_DEV_NVML_INDEX", "index", 1, STATIC),
    _f(113, "DCGM_FI_DEV_MAX_SM_CLOCK", "max_sm_clock_mhz", 1, STATIC),
    _f(114, "DCGM_FI_DEV_MAX_MEM_CLOCK", "max_memory_clock_mhz", 1, STATIC),
    # Device fields at the collect interval.
    _f(203, "DCGM_FI_DEV_GPU_UTIL_RATIO DCGM_FI_DEV_GPU_UTIL", "gpu_utilization", 0.01, FAST),
    _f(204, "DCGM_FI_DEV_MEM_COPY_UTIL", "memory_utilization", 0.01, FAST),
    _f(155, "DCGM_FI_DEV_BOARD_POWER_WATTS DCGM_FI_DEV_POWER_USAGE", "power_watts", 1, FAST),
    _f(150, "DCGM_FI_DEV_GPU_TEMP_CELSIUS DCGM_FI_DEV_GPU_TEMP", "temperature_celsius", 1, FAST),
    _f(100, "DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz", 1, FAST),
    _f(101, "DCGM_FI_DEV_MEM_CLOCK", "memory_clock_mhz", 1, FAST),
    _f(252, "DCGM_FI_DEV_FB_USED", "memory_used_bytes", MIB, FAST),
    _f(250, "DCGM_FI_DEV_FB_TOTAL", "memory_total_bytes", MIB, FAST),
    _f(253, "DCGM_FI_DEV_FB_RESERVED", "memory_reserved_bytes", MIB, FAST),
    _f(112, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "clock_event_reasons", 1, FAST),
    _f(230, "DCGM_FI_DEV_XID_ERROR DCGM_FI_DEV_XID_ERRORS", "xid_errors", 1, EVENT),
    # Costly or slow-moving device fields at the slow interval.
    _f(156, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_joules", 0.001, SLOW),
    _f(140, "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS DCGM_FI_DEV_MEMORY_TEMP", "memory_temperature_celsius", 1, SLOW),
    _f(310, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_corrected_errors", 1, SLOW),
    _f(311, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_uncorrected_errors", 1, SLOW),
    _f(394, "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "remapped_rows_correctable", 1, SLOW),
    _f(393, "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "remapped_rows_uncorrectable", 1, SLOW),
    _f(396, "DCGM_FI_DEV_ROW_REMAP_PENDING", "remapped_rows_pending", 1, SLOW),
    _f(395, "DCGM_FI_DEV_ROW_REMAP_FAILED DCGM_FI_DEV_ROW_REMAP_FAILURE", "remapped_rows_failure", 1, SLOW),
    # Profiling fields 1001-1016: ratios 0..1, bytes per second.
    _f(1001, "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO DCGM_FI_PROF_GR_ENGINE_ACTIVE", "profiling:graphics_active", 1, PROFILING),
    _f(1002, "DCGM_FI_PROF_SM_UTIL_RATIO DCGM_FI_PROF_SM_ACTIVE", "profiling:sm_active", 1, PROFILING),
    _f(1003, "DCGM_FI_PROF_SM_OCCUPANCY_RATIO DCGM_FI_PROF_SM_OCCUPANCY", "profiling:sm_occupancy", 1, PROFILING),
    _f(1004, "DCGM_FI_PROF_TENSOR_UTIL_RATIO DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "profiling:tensor_active", 1, PROFILING),
    _f(1005, "DCGM_FI_PROF_DRAM_UTIL_RATIO DCGM_FI_PROF_DRAM_ACTIVE", "profiling:dram_active", 1, PROFILING),
    _f(1006, "DCGM_FI_PROF_FP64_UTIL_RATIO DCGM_FI_PROF_PIPE_FP64_ACTIVE", "profiling:fp64_active", 1, PROFILING),
    _f(1007, "DCGM_FI_PROF_FP32_UTIL_RATIO DCGM_FI_PROF_PIPE_FP32_ACTIVE", "profiling:fp32_active", 1, PROFILING),
    _f(1008, "DCGM_FI_PROF_FP16_UTIL_RATIO DCGM_FI_PROF_PIPE_FP16_ACTIVE", "profiling:fp16_active", 1, PROFILING),
    _f(1009, "DCGM_FI_PROF_PCIE_TX_BYTES", "profiling:pcie_tx_bytes_per_second", 1, PROFILING),
    _f(1010, "DCGM_FI_PROF_PCIE_RX_BYTES", "profiling:pcie_rx_bytes_per_second", 1, PROFILING),
    _f(1011, "DCGM_FI_PROF_NVLINK_TX_BYTES", "profiling:nvlink_tx_bytes_per_second", 1, PROFILING),
    _f(1012, "DCGM_FI_PROF_NVLINK_RX_BYTES", "profiling:nvlink_rx_bytes_per_second", 1, PROFILING),
    _f(1013, "DCGM_FI_PROF_IMMA_UTIL_RATIO DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE", "profiling:tensor_imma_active", 1, PROFILING),
    _f(1014, "DCGM_FI_PROF_HMMA_UTIL_RATIO DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", "profiling:tensor_hmma_active", 1, PROFILING),
    _f(1015, "DCGM_FI_PROF_DFMA_UTIL_RATIO DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", "profiling:tensor_dfma_active", 1, PROFILING),
    _f(1016, "DCGM_FI_PROF_INT_UTIL_RATIO DCGM_FI_PROF_PIPE_INT_ACTIVE", "profiling:integer_active", 1, PROFILING),
)

SM_ACTIVE_ID = 1002
BOOLEAN_TARGETS = frozenset({"remapped_rows_pending", "remapped_rows_failure"})
INTEGER_TARGETS = frozenset({"clock_event_reasons", "index"})
