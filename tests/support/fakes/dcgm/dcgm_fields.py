"""Fake of DCGM's dcgm_fields module (testing/python3/dcgm_fields.py): entity groups, field types, field
IDs and their names.

Which names exist follows fake_hostengine.CONTROL.naming, as in the real releases:
"4.6": the names of DCGM's Field Naming Standard, the legacy ones resolved with a DeprecationWarning
(the real module's _install_deprecated_alias_resolver); "3": the legacy names only. DcgmFieldGetById
knows the IDs in fake_hostengine.CONTROL.known_field_ids.
"""

import warnings

import dcgm_structs

fake_hostengine = dcgm_structs.fake_hostengine

DCGM_FT_BINARY = "b"
DCGM_FT_DOUBLE = "d"
DCGM_FT_INT64 = "i"
DCGM_FT_STRING = "s"
DCGM_FT_TIMESTAMP = "t"

DCGM_FE_NONE = 0
DCGM_FE_GPU = 1
DCGM_FE_GPU_I = 4
DCGM_FE_GPU_CI = 5

# ID -> (DCGM 4.6 name, legacy name (None: the field is new in 4.6), field type)
FIELD_NAMES = {
    50: ("DCGM_FI_DEV_GPU_NAME", "DCGM_FI_DEV_NAME", "s"),
    52: ("DCGM_FI_DEV_NVML_INDEX", "DCGM_FI_DEV_NVML_INDEX", "i"),
    54: ("DCGM_FI_DEV_GPU_UUID", "DCGM_FI_DEV_UUID", "s"),
    63: ("DCGM_FI_CUDA_GPU_COMPUTE_CAPABILITY", "DCGM_FI_DEV_CUDA_COMPUTE_CAPABILITY", "i"),
    100: ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK", "i"),
    101: ("DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "i"),
    112: ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "i"),
    113: ("DCGM_FI_DEV_MAX_SM_CLOCK", "DCGM_FI_DEV_MAX_SM_CLOCK", "i"),
    114: ("DCGM_FI_DEV_MAX_MEM_CLOCK", "DCGM_FI_DEV_MAX_MEM_CLOCK", "i"),
    140: ("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", "DCGM_FI_DEV_MEMORY_TEMP", "i"),
    150: ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_GPU_TEMP", "i"),
    151: ("DCGM_FI_DEV_MEMORY_MAX_OP_TEMP_CELSIUS", "DCGM_FI_DEV_MEM_MAX_OP_TEMP", "i"),
    152: ("DCGM_FI_DEV_GPU_MAX_OP_TEMP_CELSIUS", "DCGM_FI_DEV_GPU_MAX_OP_TEMP", "i"),
    155: ("DCGM_FI_DEV_BOARD_POWER_WATTS", "DCGM_FI_DEV_POWER_USAGE", "d"),
    156: ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "i"),
    158: ("DCGM_FI_DEV_GPU_TEMP_SLOWDOWN_CELSIUS", "DCGM_FI_DEV_SLOWDOWN_TEMP", "i"),
    159: ("DCGM_FI_DEV_GPU_TEMP_SHUTDOWN_CELSIUS", "DCGM_FI_DEV_SHUTDOWN_TEMP", "i"),
    164: ("DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "d"),
    190: ("DCGM_FI_DEV_GPU_PSTATE", "DCGM_FI_DEV_PSTATE", "i"),
    191: ("DCGM_FI_DEV_FAN_SPEED", "DCGM_FI_DEV_FAN_SPEED", "i"),
    202: ("DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "i"),
    203: ("DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_GPU_UTIL", "i"),
    204: ("DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "i"),
    206: ("DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_ENC_UTIL", "i"),
    207: ("DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "i"),
    230: ("DCGM_FI_DEV_XID_ERROR", "DCGM_FI_DEV_XID_ERRORS", "i"),
    235: ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "i"),
    236: ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "i"),
    237: ("DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_GEN", "i"),
    238: ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "DCGM_FI_DEV_PCIE_LINK_WIDTH", "i"),
    240: ("DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_POWER_VIOLATION", "i"),
    241: ("DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION", "i"),
    242: ("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "i"),
    243: ("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "i"),
    244: ("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "DCGM_FI_DEV_LOW_UTIL_VIOLATION", "i"),
    245: ("DCGM_FI_DEV_RELIABILITY_VIOLATION", "DCGM_FI_DEV_RELIABILITY_VIOLATION", "i"),
    250: ("DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_TOTAL", "i"),
    252: ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED", "i"),
    253: ("DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_RESERVED", "i"),
    310: ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "i"),
    311: ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "i"),
    390: ("DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL", "DCGM_FI_DEV_RETIRED_SBE", "i"),
    391: ("DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL", "DCGM_FI_DEV_RETIRED_DBE", "i"),
    392: ("DCGM_FI_DEV_PAGE_RETIRED_PENDING", "DCGM_FI_DEV_RETIRED_PENDING", "i"),
    393: ("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "i"),
    394: ("DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "i"),
    395: ("DCGM_FI_DEV_ROW_REMAP_FAILED", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "i"),
    396: ("DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_PENDING", "i"),
    409: ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "i"),
    419: ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "i"),
    429: ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "i"),
    439: ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "i"),
    1001: ("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "d"),
    1002: ("DCGM_FI_PROF_SM_UTIL_RATIO", "DCGM_FI_PROF_SM_ACTIVE", "d"),
    1003: ("DCGM_FI_PROF_SM_OCCUPANCY_RATIO", "DCGM_FI_PROF_SM_OCCUPANCY", "d"),
    1004: ("DCGM_FI_PROF_TENSOR_UTIL_RATIO", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "d"),
    1005: ("DCGM_FI_PROF_DRAM_UTIL_RATIO", "DCGM_FI_PROF_DRAM_ACTIVE", "d"),
    1006: ("DCGM_FI_PROF_FP64_UTIL_RATIO", "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "d"),
    1007: ("DCGM_FI_PROF_FP32_UTIL_RATIO", "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "d"),
    1008: ("DCGM_FI_PROF_FP16_UTIL_RATIO", "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "d"),
    1009: ("DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_TX_BYTES", "i"),
    1010: ("DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES", "i"),
    1011: ("DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES", "i"),
    1012: ("DCGM_FI_PROF_NVLINK_RX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES", "i"),
    1013: ("DCGM_FI_PROF_IMMA_UTIL_RATIO", "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE", "d"),
    1014: ("DCGM_FI_PROF_HMMA_UTIL_RATIO", "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", "d"),
    1015: ("DCGM_FI_PROF_DFMA_UTIL_RATIO", "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", "d"),
    1016: ("DCGM_FI_PROF_INT_UTIL_RATIO", "DCGM_FI_PROF_PIPE_INT_ACTIVE", "d"),
    # New in DCGM 4.6 (no legacy name: DCGM 3 does not know them): monotonic counters, int64.
    1084: ("DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL", None, "i"),
    1085: ("DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL", None, "i"),
    1086: ("DCGM_FI_PROF_MMA_CYCLES_ACTIVE_TOTAL", None, "i"),
    1087: ("DCGM_FI_PROF_DMMA_CYCLES_ACTIVE_TOTAL", None, "i"),
    1088: ("DCGM_FI_PROF_HMMA_CYCLES_ACTIVE_TOTAL", None, "i"),
    1089: ("DCGM_FI_PROF_IMMA_CYCLES_ACTIVE_TOTAL", None, "i"),
    1090: ("DCGM_FI_PROF_DFMA_CYCLES_ACTIVE_TOTAL", None, "i"),
    1091: ("DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL", None, "i"),
    1092: ("DCGM_FI_PROF_PCIE_RX_BYTES_TOTAL", None, "i"),
    1093: ("DCGM_FI_PROF_INT_CYCLES_ACTIVE_TOTAL", None, "i"),
    1094: ("DCGM_FI_PROF_FP64_CYCLES_ACTIVE_TOTAL", None, "i"),
    1095: ("DCGM_FI_PROF_FP32_CYCLES_ACTIVE_TOTAL", None, "i"),
    1096: ("DCGM_FI_PROF_FP16_CYCLES_ACTIVE_TOTAL", None, "i"),
}
# The per-link NVLink error fields, links 0-17 (dcgm_fields.h, DCGM 4.6): by type, the first ID of the
# runs of links 0-5, 6-11, 12-14 and 15-17.
for _name, _starts in (("CRC_FLIT", (400, 451, 406, 481)), ("CRC_DATA", (410, 457, 416, 484)), ("REPLAY", (420, 463, 426, 487)), ("RECOVERY", (430, 469, 436, 491))):
    for _link in range(18):
        _run = 3 if _link >= 15 else 2 if _link >= 12 else 1 if _link >= 6 else 0
        FIELD_NAMES[_starts[_run] + _link - (0, 6, 12, 15)[_run]] = (f"DCGM_FI_DEV_NVLINK_{_name}_ERROR_L{_link}_TOTAL", f"DCGM_FI_DEV_NVLINK_{_name}_ERROR_COUNT_L{_link}", "i")
_NEW = {new: field_id for field_id, (new, _legacy, _kind) in FIELD_NAMES.items()}
_LEGACY = {legacy: field_id for field_id, (_new, legacy, _kind) in FIELD_NAMES.items() if legacy is not None}


def __getattr__(name):
    naming = fake_hostengine.CONTROL.naming
    if name in _NEW and naming == "4.6":
        return _NEW[name]
    if name in _LEGACY:
        if naming == "4.6" and name not in _NEW:
            warnings.warn(f"{name} is deprecated, use {FIELD_NAMES[_LEGACY[name]][0]} instead", DeprecationWarning, stacklevel=2)
        return _LEGACY[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class c_dcgm_field_meta_t:
    def __init__(self, fieldId, fieldType, tag):
        self.fieldId = fieldId
        self.fieldType = fieldType
        self.tag = tag


def DcgmFieldGetById(fieldId):
    """Metadata for a field ID, None where this (fake) DCGM version does not know it. Like the real one
    (testing/python3/dcgm_fields.py), it calls into libdcgm, so it raises before dcgm_structs._dcgmInit."""
    dcgm_structs._dcgmGetFunctionPointer("DcgmFieldGetById")
    if fieldId not in FIELD_NAMES or not fake_hostengine.CONTROL.knows(fieldId, set(FIELD_NAMES)):
        return None
    new, legacy, kind = FIELD_NAMES[fieldId]
    if fake_hostengine.CONTROL.naming != "4.6" and legacy is None:
        return None  # a field DCGM 3 does not have
    return c_dcgm_field_meta_t(fieldId, kind, (new if fake_hostengine.CONTROL.naming == "4.6" else legacy).lower())
