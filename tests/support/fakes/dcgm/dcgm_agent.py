"""Fake of DCGM's dcgm_agent module (testing/python3/dcgm_agent.py): the calls the exporter makes, with the
real signatures, return shapes and errors, answered by fake_hostengine instead of libdcgm. Each behaviour
names the DCGM source file it follows.
"""

import itertools
import math
from ctypes import CFUNCTYPE, POINTER, c_int32, c_uint32, c_void_p, pointer

import dcgm_fields
import dcgm_structs
import dcgmvalue

fake_hostengine = dcgm_structs.fake_hostengine
_sessions = {}
_handles = itertools.count(1)
DCGM_ENTITY_STATUS_OK = 1  # dcgm_structs.h DcgmEntityStatusOk
DCGM_ENTITY_STATUS_LOST = 4  # dcgm_structs.h DcgmEntityStatusLost


class _Session:
    def __init__(self, engine, embedded, address=None):
        self.engine = engine
        self.embedded = embedded
        self.address = address
        self.generation = engine.generation
        self.open = True


def _raise(status_name):
    raise dcgm_structs.DCGMError(getattr(dcgm_structs, status_name))


def _check(status_name):
    if status_name != "DCGM_ST_OK":
        _raise(status_name)
    return dcgm_structs.DCGM_ST_OK


def _session(handle):
    session = _sessions.get(handle)
    if session is None or not session.open:
        _raise("DCGM_ST_BADPARAM")
    if not session.embedded:
        fake_hostengine.follow_stop_file(session.engine)
    # A restarted nv-hostengine does not know the old connection (DcgmClientHandler.cpp).
    if not session.engine.running or session.engine.generation != session.generation:
        _raise("DCGM_ST_CONNECTION_NOT_VALID")
    return session


def _new_handle(session):
    handle = next(_handles)
    _sessions[handle] = session
    return handle


def _name(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def dcgmInit():
    return dcgm_structs.DCGM_ST_OK


def dcgmShutdown():
    return dcgm_structs.DCGM_ST_OK


def dcgmStartEmbedded(opMode):
    engine = fake_hostengine.embedded_engine()
    if engine.mig and not engine.root:
        # DcgmCacheManager.cpp: "MIG mode is currently enabled; DCGM must be run as root if MIG mode is
        # enabled" (DCGM_ST_REQUIRES_ROOT), so DcgmHostEngineHandler::Init fails and DcgmApi.cpp answers
        # dcgmStartEmbedded with DCGM_ST_INIT_ERROR.
        engine.stop()
        _raise("DCGM_ST_INIT_ERROR")
    return _new_handle(_Session(engine, embedded=True))


def dcgmStopEmbedded(dcgm_handle):
    session = _sessions.pop(dcgm_handle, None)
    if session is None:
        _raise("DCGM_ST_BADPARAM")
    session.engine.stop()
    return dcgm_structs.DCGM_ST_OK


def dcgmConnect_v2(ip_address, connectParams, version=dcgm_structs.c_dcgmConnectV2Params_version):
    engine = fake_hostengine.standalone_engine(_name(ip_address), bool(connectParams.addressIsUnixSocket))
    if engine is None or not engine.running:
        _raise("DCGM_ST_CONNECTION_NOT_VALID")
    return _new_handle(_Session(engine, embedded=False, address=_name(ip_address)))


def dcgmDisconnect(dcgm_handle):
    session = _sessions.pop(dcgm_handle, None)
    if session is None:
        _raise("DCGM_ST_BADPARAM")
    if session.engine.generation == session.generation:
        session.engine.remove_owner(dcgm_handle)
    return dcgm_structs.DCGM_ST_OK


def dcgmGetAllSupportedDevices(dcgm_handle):
    engine = _session(dcgm_handle).engine
    return list(range(len(engine.traces)))


def dcgmGetDeviceAttributes(dcgm_handle, gpuId, version=dcgm_structs.dcgmDeviceAttributes_version3):
    engine = _session(dcgm_handle).engine
    if not 0 <= gpuId < len(engine.traces):
        _raise("DCGM_ST_BADPARAM")
    values = engine.device_attributes(gpuId)
    attributes = dcgm_structs.c_dcgmDeviceAttributes_v3()
    attributes.version = version
    identifiers = attributes.identifiers
    for name in ("deviceName", "uuid", "pciBusId", "driverVersion"):
        setattr(identifiers, name, values[name].encode())
    attributes.powerLimits.enforcedPowerLimit = values["enforcedPowerLimit"]
    return attributes


def dcgmGetGpuStatus(dcgm_handle, gpuId):
    """DCGM 4.0 and newer; a DcgmEntityStatus_t value (dcgm_structs.h)."""
    engine = _session(dcgm_handle).engine
    if not 0 <= gpuId < len(engine.traces):
        _raise("DCGM_ST_BADPARAM")
    return DCGM_ENTITY_STATUS_LOST if gpuId in engine.lost else DCGM_ENTITY_STATUS_OK


def dcgmGetGpuChipArchitecture(dcgm_handle, gpuId):
    """DCGM 4.2.3 and newer; a DCGM_CHIP_ARCH_* value (dcgm_structs.h), read into a c_int32 by the real
    binding (testing/python3/dcgm_agent.py), so DCGM_CHIP_ARCH_UNKNOWN (0xFFFFFFFF) arrives as -1."""
    engine = _session(dcgm_handle).engine
    if not 0 <= gpuId < len(engine.traces):
        _raise("DCGM_ST_BADPARAM")
    return c_int32(engine.kinds[gpuId].chip_architecture).value


def dcgmGetGpuInstanceHierarchy(dcgm_handle):
    """The MIG entities: GPU instances (parent: their GPU) and compute instances (parent: their GPU instance)."""
    engine = _session(dcgm_handle).engine
    hierarchy = dcgm_structs.c_dcgmMigHierarchy_v2()
    hierarchy.version = dcgm_structs.c_dcgmMigHierarchy_version2
    for slot, (entity, parent, number) in enumerate(engine.instances()):
        each = hierarchy.entityList[slot]
        each.entity.entityGroupId, each.entity.entityId = entity
        each.parent.entityGroupId, each.parent.entityId = parent
        gpu = engine.gpu_of(entity)
        each.info.gpuUuid = engine.device_attributes(gpu)["uuid"].encode()
        each.info.nvmlGpuIndex = gpu
        each.info.nvmlInstanceId = number
        each.info.nvmlComputeInstanceId = 0
        each.info.nvmlProfileSlices = 1
    hierarchy.count = len(engine.instances())
    return hierarchy


def _handle_id(value):
    """Groups and field groups are c_void_p handles in the real bindings (testing/python3/dcgm_agent.py)."""
    return value.value if isinstance(value, c_void_p) else value


def dcgmGroupCreate(dcgm_handle, type, groupName):
    # DcgmGroupManager.cpp does not check group names for uniqueness (field groups' names are checked);
    # DcgmGroupManager.inl AddNewGroup: at most DCGM_MAX_NUM_GROUPS for the whole host engine.
    engine = _session(dcgm_handle).engine
    if len(engine.groups) >= fake_hostengine.MAX_GROUPS:
        _raise("DCGM_ST_MAX_LIMIT")
    group = engine.new_id()
    members = [(fake_hostengine.GPU, gpu) for gpu in range(len(engine.traces))] if type == dcgm_structs.DCGM_GROUP_DEFAULT else []
    engine.groups[group] = (_name(groupName), members, dcgm_handle)
    return c_void_p(group)


def dcgmGroupDestroy(dcgm_handle, group_id):
    engine = _session(dcgm_handle).engine
    if engine.groups.pop(_handle_id(group_id), None) is None:
        _raise("DCGM_ST_BADPARAM")
    return dcgm_structs.DCGM_ST_OK


def dcgmGroupAddEntity(dcgm_handle, group_id, entityGroupId, entityId):
    engine = _session(dcgm_handle).engine
    group_id = _handle_id(group_id)
    entity = (entityGroupId, entityId)
    if group_id not in engine.groups or not engine.entity_exists(entity) or entity in engine.groups[group_id][1]:
        _raise("DCGM_ST_BADPARAM")
    if engine.gpu_of(entity) in engine.lost:
        _raise("DCGM_ST_GPU_IS_LOST")  # DcgmGroupManager.inl AddEntityToGroup: an entity in DcgmEntityStatusLost
    engine.groups[group_id][1].append(entity)
    return dcgm_structs.DCGM_ST_OK


def dcgmFieldGroupCreate(dcgm_handle, fieldIds, fieldGroupName):
    engine = _session(dcgm_handle).engine
    known = set(dcgm_fields.FIELD_NAMES)
    if not fieldIds or any(not fake_hostengine.CONTROL.knows(f, known) for f in fieldIds):
        _raise("DCGM_ST_BADPARAM")
    name = _name(fieldGroupName)
    # DcgmFieldGroup.cpp AddFieldGroup: at most DCGM_MAX_NUM_FIELD_GROUPS for the whole host engine, then
    # "See if a field group with the same name already exists" -> DUPLICATE_KEY, across every client.
    if len(engine.field_groups) >= fake_hostengine.MAX_GROUPS:
        _raise("DCGM_ST_MAX_LIMIT")
    if any(existing == name for existing, _fields, _owner in engine.field_groups.values()):
        _raise("DCGM_ST_DUPLICATE_KEY")
    field_group = engine.new_id()
    engine.field_groups[field_group] = (name, list(fieldIds), dcgm_handle)
    return c_void_p(field_group)


def dcgmFieldGroupDestroy(dcgm_handle, fieldGroupId):
    # DcgmFieldGroup.cpp RemoveFieldGroup removes the field group only: its watches stay (dcgmUnwatchFields ends them).
    engine = _session(dcgm_handle).engine
    if engine.field_groups.pop(_handle_id(fieldGroupId), None) is None:
        _raise("DCGM_ST_NO_DATA")
    return dcgm_structs.DCGM_ST_OK


def dcgmFieldGroupGetAll(dcgm_handle):
    """Every client's field groups (DcgmFieldGroup.cpp PopulateFieldGroupGetAll)."""
    engine = _session(dcgm_handle).engine
    answer = dcgm_structs.c_dcgmAllFieldGroup_v1()
    answer.version = dcgm_structs.dcgmAllFieldGroup_version1
    for slot, (field_group, (name, field_ids, _owner)) in enumerate(engine.field_groups.items()):
        each = answer.fieldGroups[slot]
        each.fieldGroupId = field_group
        each.fieldGroupName = name.encode()
        each.numFieldIds = len(field_ids)
        for index, field_id in enumerate(field_ids):
            each.fieldIds[index] = field_id
    answer.numFieldGroups = len(engine.field_groups)
    return answer


def dcgmWatchFields(dcgm_handle, groupId, fieldGroupId, updateFreq, maxKeepAge, maxKeepSamples):
    session = _session(dcgm_handle)
    engine = session.engine
    groupId, fieldGroupId = _handle_id(groupId), _handle_id(fieldGroupId)
    if groupId not in engine.groups or fieldGroupId not in engine.field_groups or updateFreq <= 0:
        _raise("DCGM_ST_BADPARAM")
    entities = engine.groups[groupId][1]
    field_ids = engine.field_groups[fieldGroupId][1]
    keep_us = int(max(maxKeepAge, maxKeepSamples * updateFreq / 1e6) * 1e6)  # DcgmNs::Utils::GetMaxAge
    return _check(engine.watch(entities, field_ids, int(updateFreq), keep_us, dcgm_handle, groupId))


def dcgmUnwatchFields(dcgm_handle, groupId, fieldGroupId):
    engine = _session(dcgm_handle).engine
    groupId, fieldGroupId = _handle_id(groupId), _handle_id(fieldGroupId)
    if groupId not in engine.groups or fieldGroupId not in engine.field_groups:
        _raise("DCGM_ST_BADPARAM")
    engine.unwatch(engine.groups[groupId][1], engine.field_groups[fieldGroupId][1], dcgm_handle, groupId)
    return dcgm_structs.DCGM_ST_OK


def dcgmUpdateAllFields(dcgm_handle, waitForUpdate):
    _session(dcgm_handle)
    return dcgm_structs.DCGM_ST_OK


# testing/python3/dcgm_agent.py: the callback dcgmGetValuesSince_v2 calls, per entity, with its values.
dcgmFieldValueEntityEnumeration_f = CFUNCTYPE(c_int32, c_uint32, c_uint32, POINTER(dcgm_structs.c_dcgmFieldValue_v1), c_int32, c_void_p)


def dcgmGetValuesSince_v2(dcgm_handle, groupId, fieldGroupId, sinceTimestamp, enumCB, userData):
    """DcgmApi.cpp helperGetValuesSince: for each entity of the group and each field of the field group,
    the cached samples from ``sinceTimestamp`` up to the engine's time at the start of the call, oldest
    first, one callback per value; DCGM_ST_NO_DATA (no sample in the range) is skipped, any other error
    ends the call with that error. Returns the next ``sinceTimestamp``: that time + 1."""
    engine = _session(dcgm_handle).engine
    groupId, fieldGroupId = _handle_id(groupId), _handle_id(fieldGroupId)
    if groupId not in engine.groups or fieldGroupId not in engine.field_groups:
        _raise("DCGM_ST_BADPARAM")
    end = engine.now_us()
    for entity in engine.groups[groupId][1]:
        for field_id in engine.field_groups[fieldGroupId][1]:
            status, samples = engine.samples(entity, field_id, sinceTimestamp, end)
            if status == "DCGM_ST_NO_DATA":
                continue
            _check(status)
            for ts, number in samples:
                value = dcgm_structs.c_dcgmFieldValue_v1()
                value.version = dcgm_structs.dcgmFieldValue_version1
                _fill(value, field_id, "DCGM_ST_OK", ts, number)
                if enumCB(entity[0], entity[1], pointer(value), 1, None) != 0:
                    return end + 1  # the caller asked to stop
    return end + 1


def dcgmGetNvLinkLinkStatus(dcgmHandle):
    """testing/python3/dcgm_agent.py: the struct of the bindings' version; every GPU of the engine, its
    links refreshed from NVML first (DcgmCacheManager.cpp PopulateNvLinkLinkStatusImpl)."""
    engine = _session(dcgmHandle).engine
    status = dcgm_structs.c_dcgmNvLinkStatus_v5()
    status.version = dcgm_structs.dcgmNvLinkStatus_version
    status.numGpus = len(engine.traces)
    for gpu in range(len(engine.traces)):
        status.gpus[gpu].entityId = gpu
        states = engine.link_states(gpu, dcgm_structs.DcgmNvLinkLinkStateUp, dcgm_structs.DcgmNvLinkLinkStateDown, dcgm_structs.DcgmNvLinkLinkStateNotSupported)
        for link, state in enumerate(states):
            status.gpus[gpu].linkState[link] = state
    return status


def dcgmProfGetSupportedMetricGroups(dcgmHandle, gpuId):
    engine = _session(dcgmHandle).engine
    if not 0 <= gpuId < len(engine.traces):
        _raise("DCGM_ST_BADPARAM")
    kind = engine.kinds[gpuId]
    if kind.metric_groups and kind.one_pass_limited and not engine.profiling_module_loads:
        # DcgmModuleCore.cpp ProcessProfGetMetricGroups routes non-GPM GPUs to the profiling module: one
        # that did not load answers DCGM_ST_MODULE_NOT_LOADED, for the life of the engine.
        _raise("DCGM_ST_MODULE_NOT_LOADED")
    if not kind.metric_groups:
        _raise("DCGM_ST_NOT_SUPPORTED")  # dcgm_agent.h: "if profiling metrics are not supported for the given GPU group"
    msg = dcgm_structs.c_dcgmProfGetMetricGroups_v3()
    msg.version = dcgm_structs.dcgmProfGetMetricGroups_version3
    msg.gpuId = gpuId
    msg.numMetricGroups = len(kind.metric_groups)
    for slot, (major, minor, fields) in enumerate(kind.metric_groups):
        group = msg.metricGroups[slot]
        group.majorId, group.minorId, group.numFieldIds = major, minor, len(fields)
        for index, field_id in enumerate(fields):
            group.fieldIds[index] = field_id
    return msg


def _pause_or_resume(dcgmHandle, paused):
    engine = _session(dcgmHandle).engine
    if not engine.profiling_module_loads:
        # DcgmApi.cpp helperProfPauseResume: the request goes to the profiling module, and "for GPM-enabled
        # platforms, the profiling module may not be loadable": DCGM_ST_MODULE_NOT_LOADED -> DCGM_ST_NOT_SUPPORTED.
        _raise("DCGM_ST_NOT_SUPPORTED")
    engine.paused = paused  # dcgm_agent.h: pausing while paused is a no-op
    return dcgm_structs.DCGM_ST_OK


def dcgmProfPause(dcgmHandle):
    return _pause_or_resume(dcgmHandle, True)


def dcgmProfResume(dcgmHandle):
    return _pause_or_resume(dcgmHandle, False)


def dcgmEntitiesGetLatestValues(dcgmHandle, entities, fieldIds, flags):
    engine = _session(dcgmHandle).engine
    live = bool(flags & dcgm_structs.DCGM_FV_FLAG_LIVE_DATA)
    known = set(dcgm_fields.FIELD_NAMES)
    pairs = [(entity, field_id) for entity in entities for field_id in fieldIds]
    # DcgmCacheManager.cpp GetMultipleLatestLiveSamples: "we don't guarantee any order of returned results".
    engine.shuffle.shuffle(pairs)
    out = (dcgm_structs.c_dcgmFieldValue_v2 * len(pairs))()
    for value, (entity, field_id) in zip(out, pairs):
        value.version = dcgm_structs.dcgmFieldValue_version2
        value.entityGroupId = entity.entityGroupId
        value.entityId = entity.entityId
        if not fake_hostengine.CONTROL.knows(field_id, known):
            value.fieldId, value.fieldType, value.status = field_id, ord("i"), dcgm_structs.DCGM_ST_UNKNOWN_FIELD
            continue
        _fill(value, field_id, *engine.latest((entity.entityGroupId, entity.entityId), field_id, live))
    return out


def _fill(value, field_id, status, ts, number):
    kind = dcgm_fields.FIELD_NAMES[field_id][2] if field_id in dcgm_fields.FIELD_NAMES else "i"
    value.fieldId = field_id
    value.fieldType = ord(kind)
    value.status = getattr(dcgm_structs, status)
    value.ts = ts
    if kind == "d":
        value.value.dbl = _double(number)
    elif kind == "s":
        value.value.str = (dcgmvalue.DCGM_STR_BLANK if number is None else str(number)).encode()
    else:
        value.value.i64 = _int64(number)


def _double(number):
    if number is None:
        return dcgmvalue.DCGM_FP64_NOT_SUPPORTED
    return dcgmvalue.DCGM_FP64_BLANK if math.isnan(number) else float(number)  # NaN: fake_hostengine.LOST


def _int64(number):
    if number is None:
        return dcgmvalue.DCGM_INT64_NOT_SUPPORTED
    return dcgmvalue.DCGM_INT64_BLANK if math.isnan(number) else round(number)
