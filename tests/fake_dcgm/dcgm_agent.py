"""Fake of DCGM's dcgm_agent module (testing/python3/dcgm_agent.py): the calls the exporter makes, with the
real signatures, return shapes and errors, answered by fake_hostengine instead of libdcgm. Each behaviour
names the DCGM source file it follows.
"""

import itertools
import math

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
    return _new_handle(_Session(fake_hostengine.embedded_engine(), embedded=True))


def dcgmStopEmbedded(dcgm_handle):
    session = _sessions.pop(dcgm_handle, None)
    if session is None:
        _raise("DCGM_ST_BADPARAM")
    session.engine.stop()
    return dcgm_structs.DCGM_ST_OK


def dcgmConnect_v2(ip_address, connectParams, version=dcgm_structs.c_dcgmConnectV2Params_version):
    engine = fake_hostengine.standalone_engine(_name(ip_address))
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
    """DCGM 4.2.3 and newer; a DCGM_CHIP_ARCH_* value (dcgm_structs.h)."""
    engine = _session(dcgm_handle).engine
    if not 0 <= gpuId < len(engine.traces):
        _raise("DCGM_ST_BADPARAM")
    return engine.kinds[gpuId].chip_architecture


def dcgmGroupCreate(dcgm_handle, type, groupName):
    # DcgmGroupManager.cpp does not check group names for uniqueness (field groups' names are checked).
    engine = _session(dcgm_handle).engine
    group = engine.new_id()
    members = list(range(len(engine.traces))) if type == dcgm_structs.DCGM_GROUP_DEFAULT else []
    engine.groups[group] = (_name(groupName), members, dcgm_handle)
    return group


def dcgmGroupDestroy(dcgm_handle, group_id):
    engine = _session(dcgm_handle).engine
    if engine.groups.pop(group_id, None) is None:
        _raise("DCGM_ST_BADPARAM")
    return dcgm_structs.DCGM_ST_OK


def dcgmGroupAddEntity(dcgm_handle, group_id, entityGroupId, entityId):
    engine = _session(dcgm_handle).engine
    if group_id not in engine.groups or entityGroupId != dcgm_fields.DCGM_FE_GPU or not 0 <= entityId < len(engine.traces):
        _raise("DCGM_ST_BADPARAM")
    engine.groups[group_id][1].append(entityId)
    return dcgm_structs.DCGM_ST_OK


def dcgmFieldGroupCreate(dcgm_handle, fieldIds, fieldGroupName):
    engine = _session(dcgm_handle).engine
    known = set(dcgm_fields.FIELD_NAMES)
    if not fieldIds or any(not fake_hostengine.CONTROL.knows(f, known) for f in fieldIds):
        _raise("DCGM_ST_BADPARAM")
    name = _name(fieldGroupName)
    # DcgmFieldGroup.cpp AddFieldGroup: "See if a field group with the same name already exists" -> DUPLICATE_KEY,
    # across every client of the host engine.
    if any(existing == name for existing, _fields, _owner in engine.field_groups.values()):
        _raise("DCGM_ST_DUPLICATE_KEY")
    field_group = engine.new_id()
    engine.field_groups[field_group] = (name, list(fieldIds), dcgm_handle)
    return field_group


def dcgmFieldGroupDestroy(dcgm_handle, fieldGroupId):
    engine = _session(dcgm_handle).engine
    if engine.field_groups.pop(fieldGroupId, None) is None:
        _raise("DCGM_ST_BADPARAM")
    for key, by_group in list(engine.watches.items()):
        by_group.pop(fieldGroupId, None)
        if not by_group:
            del engine.watches[key]
    return dcgm_structs.DCGM_ST_OK


def dcgmWatchFields(dcgm_handle, groupId, fieldGroupId, updateFreq, maxKeepAge, maxKeepSamples):
    session = _session(dcgm_handle)
    engine = session.engine
    if groupId not in engine.groups or fieldGroupId not in engine.field_groups or updateFreq <= 0:
        _raise("DCGM_ST_BADPARAM")
    gpus = engine.groups[groupId][1]
    field_ids = engine.field_groups[fieldGroupId][1]
    return _check(engine.watch(gpus, fieldGroupId, field_ids, int(updateFreq), dcgm_handle, session.embedded))


def dcgmUpdateAllFields(dcgm_handle, waitForUpdate):
    _session(dcgm_handle)
    return dcgm_structs.DCGM_ST_OK


def dcgmProfGetSupportedMetricGroups(dcgmHandle, gpuId):
    engine = _session(dcgmHandle).engine
    if not 0 <= gpuId < len(engine.traces):
        _raise("DCGM_ST_BADPARAM")
    kind = engine.kinds[gpuId]
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


def dcgmProfPause(dcgmHandle):
    _session(dcgmHandle).engine.paused = True  # dcgm_agent.h: pausing while paused is a no-op
    return dcgm_structs.DCGM_ST_OK


def dcgmProfResume(dcgmHandle):
    _session(dcgmHandle).engine.paused = False
    return dcgm_structs.DCGM_ST_OK


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
        value.fieldId = field_id
        kind = dcgm_fields.FIELD_NAMES[field_id][2] if field_id in dcgm_fields.FIELD_NAMES else "i"
        value.fieldType = ord(kind)
        if not fake_hostengine.CONTROL.knows(field_id, known):
            value.status = dcgm_structs.DCGM_ST_UNKNOWN_FIELD
            continue
        status, ts, number = engine.reading(entity.entityId, field_id, live)
        value.status = getattr(dcgm_structs, status)
        value.ts = ts
        if kind == "d":
            value.value.dbl = _double(number)
        else:
            value.value.i64 = _int64(number)
    return out


def _double(number):
    if number is None:
        return dcgmvalue.DCGM_FP64_NOT_SUPPORTED
    return dcgmvalue.DCGM_FP64_BLANK if math.isnan(number) else float(number)  # NaN: fake_hostengine.LOST


def _int64(number):
    if number is None:
        return dcgmvalue.DCGM_INT64_NOT_SUPPORTED
    return dcgmvalue.DCGM_INT64_BLANK if math.isnan(number) else round(number)
