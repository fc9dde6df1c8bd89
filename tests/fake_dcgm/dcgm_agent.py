"""Fake of DCGM's dcgm_agent module: the calls the exporter makes, with the real signatures and
errors, answered by fake_hostengine instead of libdcgm.
"""

import itertools

import dcgm_fields
import dcgm_structs
import dcgmvalue
import fake_hostengine

_sessions = {}
_handles = itertools.count(1)


class _Session:
    def __init__(self, engine, embedded, address=None):
        self.engine = engine
        self.embedded = embedded
        self.address = address
        self.generation = engine.generation
        self.open = True


def _raise(status_name):
    raise dcgm_structs.DCGMError(getattr(dcgm_structs, status_name))


def _session(handle):
    session = _sessions.get(handle)
    if session is None or not session.open:
        _raise("DCGM_ST_BADPARAM")
    if not session.embedded:
        fake_hostengine.follow_stop_file(session.engine)
    if not session.engine.running or session.engine.generation != session.generation:
        _raise("DCGM_ST_CONNECTION_NOT_VALID")
    return session


def _new_handle(session):
    handle = next(_handles)
    _sessions[handle] = session
    return handle


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
    address = ip_address.decode() if isinstance(ip_address, bytes) else ip_address
    engine = fake_hostengine.standalone_engine(address)
    if engine is None or not engine.running:
        _raise("DCGM_ST_CONNECTION_NOT_VALID")
    return _new_handle(_Session(engine, embedded=False, address=address))


def dcgmDisconnect(dcgm_handle):
    session = _sessions.pop(dcgm_handle, None)
    if session is None:
        _raise("DCGM_ST_BADPARAM")
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


def dcgmGroupCreate(dcgm_handle, type, groupName):
    engine = _session(dcgm_handle).engine
    group = engine.new_id()
    engine.groups[group] = list(range(len(engine.traces))) if type == dcgm_structs.DCGM_GROUP_DEFAULT else []
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
    engine.groups[group_id].append(entityId)
    return dcgm_structs.DCGM_ST_OK


def dcgmFieldGroupCreate(dcgm_handle, fieldIds, fieldGroupName):
    engine = _session(dcgm_handle).engine
    if not fieldIds or any(f not in fake_hostengine.CONTROL.known_field_ids for f in fieldIds):
        _raise("DCGM_ST_BADPARAM")
    field_group = engine.new_id()
    engine.field_groups[field_group] = list(fieldIds)
    return field_group


def dcgmFieldGroupDestroy(dcgm_handle, fieldGroupId):
    engine = _session(dcgm_handle).engine
    if engine.field_groups.pop(fieldGroupId, None) is None:
        _raise("DCGM_ST_BADPARAM")
    return dcgm_structs.DCGM_ST_OK


def dcgmWatchFields(dcgm_handle, groupId, fieldGroupId, updateFreq, maxKeepAge, maxKeepSamples):
    engine = _session(dcgm_handle).engine
    if groupId not in engine.groups or fieldGroupId not in engine.field_groups or updateFreq <= 0:
        _raise("DCGM_ST_BADPARAM")
    field_ids = engine.field_groups[fieldGroupId]
    profiling = [f for f in field_ids if f in fake_hostengine.PROFILING_IDS]
    if profiling and fake_hostengine.CONTROL.profiling_refusal:
        _raise(fake_hostengine.CONTROL.profiling_refusal)
    if len(profiling) > fake_hostengine.CONTROL.profiling_one_pass_max:
        _raise("DCGM_ST_PROFILING_MULTI_PASS")
    start = engine.now_us()
    for field_id in field_ids:
        engine.watches[field_id] = (int(updateFreq), start)
    return dcgm_structs.DCGM_ST_OK


def dcgmUpdateAllFields(dcgm_handle, waitForUpdate):
    _session(dcgm_handle)
    return dcgm_structs.DCGM_ST_OK


def dcgmEntitiesGetLatestValues(dcgmHandle, entities, fieldIds, flags):
    engine = _session(dcgmHandle).engine
    live = bool(flags & dcgm_structs.DCGM_FV_FLAG_LIVE_DATA)
    out = (dcgm_structs.c_dcgmFieldValue_v2 * (len(entities) * len(fieldIds)))()
    slot = 0
    for entity in entities:
        for field_id in fieldIds:
            value = out[slot]
            slot += 1
            value.version = dcgm_structs.dcgmFieldValue_version2
            value.entityGroupId = entity.entityGroupId
            value.entityId = entity.entityId
            value.fieldId = field_id
            kind = dcgm_fields.FIELD_NAMES[field_id][2] if field_id in dcgm_fields.FIELD_NAMES else "i"
            value.fieldType = ord(kind)
            if field_id not in fake_hostengine.CONTROL.known_field_ids:
                value.status = dcgm_structs.DCGM_ST_UNKNOWN_FIELD
                continue
            status, ts, number = engine.reading(entity.entityId, field_id, live)
            value.status = getattr(dcgm_structs, status)
            value.ts = ts
            if kind == "d":
                value.value.dbl = dcgmvalue.DCGM_FP64_NOT_SUPPORTED if number is None else float(number)
            else:
                value.value.i64 = dcgmvalue.DCGM_INT64_NOT_SUPPORTED if number is None else int(round(number))
    return out
