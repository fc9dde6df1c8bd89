"""Fake of DCGM's dcgm_structs module (testing/python3/dcgm_structs.py): the status codes, DCGMError and
the ctypes structures the exporter uses, laid out as in DCGM's bindings. ``_dcgmInit`` loads no library:
the engine is tests/support/fakes/dcgm/fake_hostengine.py, loaded here by its path (the real module imports only
dcgmvalue and the standard library, and the exporter puts no bindings folder on sys.path).
"""

import importlib.util
import os
import sys
from ctypes import (
    Structure,
    Union,
    c_byte,
    c_char,
    c_double,
    c_int,
    c_int64,
    c_short,
    c_uint,
    c_uint16,
    c_uint32,
    c_ushort,
    c_void_p,
    sizeof,
)
from pathlib import Path


def _engine():
    loaded = sys.modules.get("fake_hostengine")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("fake_hostengine", Path(__file__).with_name("fake_hostengine.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["fake_hostengine"] = module
    spec.loader.exec_module(module)
    return module


fake_hostengine = _engine()

DCGM_MAX_STR_LENGTH = 256
DCGM_MAX_BLOB_LENGTH = 4096
DCGM_MAX_NUM_DEVICES = 32

DCGM_OPERATION_MODE_AUTO = 1
DCGM_OPERATION_MODE_MANUAL = 2

DCGM_ST_OK = 0
DCGM_ST_BADPARAM = -1
DCGM_ST_GENERIC_ERROR = -3
DCGM_ST_NOT_SUPPORTED = -6
DCGM_ST_INIT_ERROR = -7
DCGM_ST_UNINITIALIZED = -10
DCGM_ST_TIMEOUT = -11
DCGM_ST_UNKNOWN_FIELD = -13
DCGM_ST_NO_DATA = -14
DCGM_ST_STALE_DATA = -15
DCGM_ST_NOT_WATCHED = -16
DCGM_ST_NO_PERMISSION = -17
DCGM_ST_GPU_IS_LOST = -18
DCGM_ST_CONNECTION_NOT_VALID = -21
DCGM_ST_GPU_NOT_SUPPORTED = -22
DCGM_ST_GROUP_INCOMPATIBLE = -23
DCGM_ST_MAX_LIMIT = -24
DCGM_ST_LIBRARY_NOT_FOUND = -25
DCGM_ST_DUPLICATE_KEY = -26
DCGM_ST_REQUIRES_ROOT = -29
DCGM_ST_MODULE_NOT_LOADED = -33
DCGM_ST_IN_USE = -34
DCGM_ST_PROFILING_NOT_SUPPORTED = -36
DCGM_ST_PROFILING_LIBRARY_ERROR = -37
DCGM_ST_PROFILING_MULTI_PASS = -38
DCGM_ST_INSUFFICIENT_DRIVER_VERSION = -44

DCGM_CHIP_ARCH_VOLTA = 5
DCGM_CHIP_ARCH_AMPERE = 7
DCGM_CHIP_ARCH_ADA = 8
DCGM_CHIP_ARCH_HOPPER = 9
DCGM_CHIP_ARCH_BLACKWELL = 10
DCGM_CHIP_ARCH_UNKNOWN = 0xFFFFFFFF

DCGM_MAX_NUM_GROUPS = 64
DCGM_MAX_NUM_FIELD_GROUPS = 64
DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP = 128
DCGM_ORDER_ASCENDING = 1

DCGM_GROUP_DEFAULT = 0
DCGM_GROUP_EMPTY = 1
DCGM_FV_FLAG_LIVE_DATA = 0x00000001


class DCGMError(Exception):
    """Carries the DCGM status code in ``value``, as the real class does."""

    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        names = [name for name, number in globals().items() if name.startswith("DCGM_ST_") and number == self.value]
        return f"DCGM error {names[0] if names else self.value}"


def dcgmExceptionClass(error_code):
    return DCGMError


def _dcgmCheckReturn(ret):
    if ret != DCGM_ST_OK:
        raise DCGMError(ret)
    return ret


dcgmLib = None  # the real module's loaded libdcgm; here only whether _dcgmInit ran


def _dcgmInit(libDcgmPath=None):
    global dcgmLib
    if os.environ.get("FAKE_DCGM_NO_LIBRARY") or fake_hostengine.CONTROL.no_library:
        raise DCGMError(DCGM_ST_LIBRARY_NOT_FOUND)
    dcgmLib = True


def _dcgmGetFunctionPointer(name):
    """testing/python3/dcgm_structs.py: every call into libdcgm raises DCGM_ST_UNINITIALIZED before _dcgmInit."""
    if dcgmLib is None:
        raise DCGMError(DCGM_ST_UNINITIALIZED)


def make_dcgm_version(struct, ver):
    return sizeof(struct) | (ver << 24)


class c_dcgmConnectV2Params_v2(Structure):
    _fields_ = [("version", c_uint), ("persistAfterDisconnect", c_uint), ("timeoutMs", c_uint), ("addressIsUnixSocket", c_uint)]


c_dcgmConnectV2Params_version2 = make_dcgm_version(c_dcgmConnectV2Params_v2, 2)
c_dcgmConnectV2Params_version = c_dcgmConnectV2Params_version2


class c_dcgmGroupEntityPair_t(Structure):
    _fields_ = [("entityGroupId", c_uint32), ("entityId", c_uint32)]


class c_dcgmFieldValue_v1_value(Union):
    _fields_ = [("i64", c_int64), ("dbl", c_double), ("str", c_char * DCGM_MAX_STR_LENGTH), ("blob", c_byte * DCGM_MAX_BLOB_LENGTH)]


class c_dcgmFieldValue_v2(Structure):
    _fields_ = [
        ("version", c_uint),
        ("entityGroupId", c_uint),
        ("entityId", c_uint),
        ("fieldId", c_ushort),
        ("fieldType", c_short),
        ("status", c_int),
        ("unused", c_uint),
        ("ts", c_int64),
        ("value", c_dcgmFieldValue_v1_value),
    ]


dcgmFieldValue_version2 = make_dcgm_version(c_dcgmFieldValue_v2, 2)


class c_dcgmFieldValue_v1(Structure):
    _fields_ = [("version", c_uint), ("fieldId", c_ushort), ("fieldType", c_short), ("status", c_int), ("ts", c_int64), ("value", c_dcgmFieldValue_v1_value)]


dcgmFieldValue_version1 = make_dcgm_version(c_dcgmFieldValue_v1, 1)


class c_dcgmFieldGroupInfo_v1(Structure):
    _fields_ = [
        ("version", c_uint32),
        ("numFieldIds", c_uint32),
        ("fieldGroupId", c_void_p),
        ("fieldGroupName", c_char * DCGM_MAX_STR_LENGTH),
        ("fieldIds", c_uint16 * DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP),
    ]


dcgmFieldGroupInfo_version1 = make_dcgm_version(c_dcgmFieldGroupInfo_v1, 1)


class c_dcgmAllFieldGroup_v1(Structure):
    _fields_ = [("version", c_uint32), ("numFieldGroups", c_uint32), ("fieldGroups", c_dcgmFieldGroupInfo_v1 * DCGM_MAX_NUM_FIELD_GROUPS)]


dcgmAllFieldGroup_version1 = make_dcgm_version(c_dcgmAllFieldGroup_v1, 1)


class c_dcgmMigEntityInfo_t(Structure):
    _fields_ = [
        ("gpuUuid", c_char * 128),
        ("nvmlGpuIndex", c_uint),
        ("nvmlInstanceId", c_uint),
        ("nvmlComputeInstanceId", c_uint),
        ("nvmlMigProfileId", c_uint),
        ("nvmlProfileSlices", c_uint),
    ]


class c_dcgmMigHierarchyInfo_v2(Structure):
    _fields_ = [("entity", c_dcgmGroupEntityPair_t), ("parent", c_dcgmGroupEntityPair_t), ("info", c_dcgmMigEntityInfo_t)]


DCGM_MAX_INSTANCES_PER_GPU = 8
DCGM_MAX_TOTAL_INSTANCES = 14
DCGM_MAX_HIERARCHY_INFO = DCGM_MAX_NUM_DEVICES * DCGM_MAX_TOTAL_INSTANCES


class c_dcgmMigHierarchy_v2(Structure):
    _fields_ = [("version", c_uint), ("count", c_uint), ("entityList", c_dcgmMigHierarchyInfo_v2 * DCGM_MAX_HIERARCHY_INFO)]


c_dcgmMigHierarchy_version2 = make_dcgm_version(c_dcgmMigHierarchy_v2, 2)


class c_dcgmDevicePowerLimits_v1(Structure):
    _fields_ = [("version", c_uint), ("curPowerLimit", c_uint), ("defaultPowerLimit", c_uint), ("enforcedPowerLimit", c_uint), ("minPowerLimit", c_uint), ("maxPowerLimit", c_uint)]


class c_dcgmDeviceIdentifiers_v1(Structure):
    _fields_ = [
        ("version", c_uint),
        ("brandName", c_char * DCGM_MAX_STR_LENGTH),
        ("deviceName", c_char * DCGM_MAX_STR_LENGTH),
        ("pciBusId", c_char * DCGM_MAX_STR_LENGTH),
        ("serial", c_char * DCGM_MAX_STR_LENGTH),
        ("uuid", c_char * DCGM_MAX_STR_LENGTH),
        ("vbios", c_char * DCGM_MAX_STR_LENGTH),
        ("inforomImageVersion", c_char * DCGM_MAX_STR_LENGTH),
        ("pciDeviceId", c_uint32),
        ("pciSubSystemId", c_uint32),
        ("driverVersion", c_char * DCGM_MAX_STR_LENGTH),
        ("virtualizationMode", c_uint32),
    ]


class c_dcgmDeviceAttributes_v3(Structure):
    """The parts of DCGM's struct the exporter reads (clock sets, thermals and memory usage left out)."""

    _fields_ = [("version", c_uint), ("powerLimits", c_dcgmDevicePowerLimits_v1), ("identifiers", c_dcgmDeviceIdentifiers_v1)]


dcgmDeviceAttributes_version3 = make_dcgm_version(c_dcgmDeviceAttributes_v3, 3)


DCGM_PROF_MAX_NUM_GROUPS_V2 = 10
DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2 = 64


class c_dcgmProfMetricGroupInfo_v2(Structure):
    _fields_ = [("majorId", c_ushort), ("minorId", c_ushort), ("numFieldIds", c_uint32), ("fieldIds", c_ushort * DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2)]


class c_dcgmProfGetMetricGroups_v3(Structure):
    _fields_ = [
        ("version", c_uint32),
        ("unused", c_uint32),
        ("gpuId", c_uint32),
        ("numMetricGroups", c_uint32),
        ("metricGroups", c_dcgmProfMetricGroupInfo_v2 * DCGM_PROF_MAX_NUM_GROUPS_V2),
    ]


dcgmProfGetMetricGroups_version3 = make_dcgm_version(c_dcgmProfGetMetricGroups_v3, 3)


# dcgm_structs.h dcgmNvLinkLinkState_t
DcgmNvLinkLinkStateNotSupported = 0
DcgmNvLinkLinkStateDisabled = 1
DcgmNvLinkLinkStateDown = 2
DcgmNvLinkLinkStateUp = 3
DCGM_NVLINK_MAX_LINKS_PER_GPU = 36


class c_dcgmNvLinkGpuLinkStatus_v4(Structure):
    _fields_ = [("entityId", c_uint32), ("linkState", c_uint32 * DCGM_NVLINK_MAX_LINKS_PER_GPU)]


class c_dcgmNvLinkStatus_v5(Structure):
    """The NvSwitch part of the real struct is left out: nothing here reads it."""

    _fields_ = [("version", c_uint32), ("numGpus", c_uint32), ("gpus", c_dcgmNvLinkGpuLinkStatus_v4 * DCGM_MAX_NUM_DEVICES)]


dcgmNvLinkStatus_version5 = make_dcgm_version(c_dcgmNvLinkStatus_v5, 5)
dcgmNvLinkStatus_version = dcgmNvLinkStatus_version5
