"""One connection to DCGM (an embedded host engine, or nv-hostengine over TCP) and what is made on it.

The session holds the loaded bindings from the start, so no caller ever sees them missing; its handle
exists between ``connect`` and ``close``. Group and field-group names carry a random token per session:
DCGM refuses a field-group name that any client of the same host engine already uses
(``DCGM_ST_DUPLICATE_KEY``), e.g. two containers that are each PID 1; on that refusal a new token is drawn.

Groups and field groups come from one table of 64 each for the whole host engine, shared by every
client (``DCGM_ST_MAX_LIMIT`` beyond), so every one made is destroyed again: at ``close``, or at once
when the watch it was made for is refused. Destroying a field group does not end its watches
(DcgmFieldGroup.cpp RemoveFieldGroup), so a watch is ended with ``dcgmUnwatchFields`` first.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpueff.backends.dcgm.bindings import Bindings

CONNECT_TIMEOUT = 5.0  # standalone mode: how long to wait for nv-hostengine to accept
NAME_ATTEMPTS = 5  # fresh tokens tried when a name is taken
ENTITY_STATUS_LOST = 4  # dcgm_structs.h DcgmEntityStatusLost (the Python bindings define no constant for it)
UNIX_SOCKET_PREFIX = "unix:"  # --dcgm.host unix:/tmp/nv-hostengine: a host engine's unix socket
ARCHITECTURE_UNKNOWN = (-1, 0xFFFFFFFF)  # DCGM_CHIP_ARCH_UNKNOWN as the c_int32 binding reads it, and as defined
Entity = tuple[int, int]  # (DCGM entity group, entity ID)


@dataclass(frozen=True)
class Watch:
    """A watch this session made: the field group holds ``field_ids``, watched on ``group``."""

    group: Any
    field_group: Any
    field_ids: tuple[int, ...]


@dataclass(frozen=True)
class MigEntity:
    """A GPU instance or compute instance of a GPU in MIG mode (dcgmGetGpuInstanceHierarchy)."""

    entity: Entity
    parent: Entity
    gpu_id: int  # the physical GPU's DCGM ID
    instance_id: int  # the GPU instance's NVML ID on its GPU
    slices: int  # the MIG profile's slices


@dataclass(frozen=True)
class MetricGroup:
    """One profiling metric group of a GPU: groups with the same major ID cannot be watched together in one pass."""

    major: int
    minor: int
    field_ids: frozenset[int]


class DcgmSession:
    def __init__(self, bindings: Bindings, host: str | None, token: Callable[[], str] = lambda: secrets.token_hex(6)) -> None:
        self.bindings = bindings
        self.host = host
        self.structs = bindings.structs
        self.agent = bindings.agent
        self.error: type[Exception] = bindings.structs.DCGMError
        self._token = token
        self.name_token = token()
        self.handle: Any = None
        self._groups: list[Any] = []
        self._watches: list[Watch] = []
        self.field_group_names: set[str] = set()  # every field-group name this session made
        self._status_names: dict[Any, str] = {}
        for name in sorted(dir(self.structs), reverse=True):  # where two names share a code, the first alphabetically
            if name.startswith("DCGM_ST_"):
                self._status_names[getattr(self.structs, name)] = name

    @property
    def embedded(self) -> bool:
        return not self.host

    @property
    def mode(self) -> str:
        return f"standalone, nv-hostengine at {self.host}" if self.host else "embedded host engine"

    # ---- connection ----------------------------------------------------------------------------

    def init(self) -> None:
        """Load libdcgm (before it, the bindings' field metadata lookup cannot answer)."""
        self.structs._dcgmInit()
        self.agent.dcgmInit()

    def connect(self, timeout: float = CONNECT_TIMEOUT) -> None:
        if self.host:
            address, unix_socket = split_address(self.host)
            params = self.structs.c_dcgmConnectV2Params_v2()
            params.version = self.structs.c_dcgmConnectV2Params_version2
            params.persistAfterDisconnect = 0  # the host engine drops our groups and watches when we go
            params.timeoutMs = int(timeout * 1000)
            params.addressIsUnixSocket = int(unix_socket)
            self.handle = self.agent.dcgmConnect_v2(address, params)
        else:
            self.handle = self.agent.dcgmStartEmbedded(self.structs.DCGM_OPERATION_MODE_AUTO)

    def close(self) -> None:
        """Drop the connection and everything made on it, ignoring errors (the engine may be gone)."""
        if self.handle is None:
            return
        for watch in list(self._watches):
            self.unwatch(watch)
        for group in list(self._groups):
            self.drop_group(group)
        try:
            (self.agent.dcgmStopEmbedded if self.embedded else self.agent.dcgmDisconnect)(self.handle)
        except self.error:
            pass
        self.handle, self._groups, self._watches = None, [], []

    def shutdown(self) -> None:
        try:
            self.agent.dcgmShutdown()
        except self.error:
            pass

    # ---- GPUs --------------------------------------------------------------------------------

    def gpu_ids(self) -> list[int]:
        return list(self.agent.dcgmGetAllSupportedDevices(self.handle))

    def attributes(self, gpu_id: int) -> Any:
        return self.agent.dcgmGetDeviceAttributes(self.handle, gpu_id)

    def gpu_lost(self, gpu_id: int) -> bool | None:
        """Whether DCGM marks the GPU lost; None where this DCGM cannot say (dcgmGetGpuStatus is DCGM 4+)."""
        query = getattr(self.agent, "dcgmGetGpuStatus", None)
        if query is None:
            return None
        try:
            return bool(query(self.handle, gpu_id) == ENTITY_STATUS_LOST)
        except self.error:
            return None

    def chip_architecture(self, gpu_id: int) -> int | None:
        """DCGM's DCGM_CHIP_ARCH_* for the GPU; None where this DCGM cannot say (the call is DCGM 4.2.3+,
        and its binding reads the answer into a c_int32, so DCGM_CHIP_ARCH_UNKNOWN arrives as -1)."""
        query = getattr(self.agent, "dcgmGetGpuChipArchitecture", None)
        if query is None:
            return None
        try:
            architecture = int(query(self.handle, gpu_id))
        except self.error:
            return None
        return None if architecture in ARCHITECTURE_UNKNOWN else architecture

    def nvlink_status(self) -> Any:
        """Every GPU's NVLink link states (dcgmGetNvLinkLinkStatus, in the struct version these bindings use)."""
        return self.agent.dcgmGetNvLinkLinkStatus(self.handle)

    def entities(self, gpu_ids: list[int]) -> list[Any]:
        return self.pairs([(self.bindings.fields.DCGM_FE_GPU, gpu_id) for gpu_id in gpu_ids])

    def pairs(self, entities: list[Entity]) -> list[Any]:
        pairs = []
        for group, entity_id in entities:
            pair = self.structs.c_dcgmGroupEntityPair_t()
            pair.entityGroupId = group
            pair.entityId = entity_id
            pairs.append(pair)
        return pairs

    def mig_entities(self) -> list[MigEntity]:
        """The GPU instances and compute instances of GPUs in MIG mode (none where no GPU has MIG on)."""
        fields = self.bindings.fields
        answer = self.agent.dcgmGetGpuInstanceHierarchy(self.handle)
        out = []
        gpu_of: dict[int, int] = {}
        for index in range(answer.count):
            each = answer.entityList[index]
            entity = (int(each.entity.entityGroupId), int(each.entity.entityId))
            parent = (int(each.parent.entityGroupId), int(each.parent.entityId))
            if entity[0] == fields.DCGM_FE_GPU_I and parent[0] == fields.DCGM_FE_GPU:
                gpu_of[entity[1]] = parent[1]
            out.append((entity, parent, int(each.info.nvmlInstanceId), int(each.info.nvmlProfileSlices)))
        mig = []
        for entity, parent, instance_id, slices in out:
            gpu_id = parent[1] if parent[0] == fields.DCGM_FE_GPU else gpu_of.get(parent[1])
            if gpu_id is not None and entity[0] in (fields.DCGM_FE_GPU_I, fields.DCGM_FE_GPU_CI):
                mig.append(MigEntity(entity, parent, gpu_id, instance_id, slices))
        return mig

    # ---- groups and watches --------------------------------------------------------------------

    def _named(self, purpose: str, create: Callable[[str], Any]) -> Any:
        for attempt in range(NAME_ATTEMPTS):
            try:
                return create(f"gpueff-{self.name_token}-{purpose}")
            except self.error as error:
                if getattr(error, "value", None) != self.structs.DCGM_ST_DUPLICATE_KEY or attempt == NAME_ATTEMPTS - 1:
                    raise
                self.name_token = self._token()
        raise AssertionError("unreachable")

    def group(self, entities: list[Entity], purpose: str, lost: set[Entity] | None = None) -> Any:
        """A DCGM group of ``entities``. An entity DCGM answers DCGM_ST_GPU_IS_LOST for is left out and put
        in ``lost`` where that is given (else the error is raised); on any other error the half-made group
        is destroyed before the error is raised."""
        group = self._named(purpose, lambda name: self.agent.dcgmGroupCreate(self.handle, self.structs.DCGM_GROUP_EMPTY, name))
        self._groups.append(group)
        for entity in entities:
            try:
                self.agent.dcgmGroupAddEntity(self.handle, group, *entity)
            except self.error as error:
                if lost is not None and getattr(error, "value", None) == self.structs.DCGM_ST_GPU_IS_LOST:
                    lost.add(entity)
                    continue
                self.drop_group(group)
                raise
        return group

    def drop_group(self, group: Any) -> None:
        try:
            self.agent.dcgmGroupDestroy(self.handle, group)
        except self.error:
            pass
        self._groups.remove(group)

    def watch(self, group: Any, field_ids: list[int], interval: float, purpose: str) -> Watch:
        """Watch ``field_ids`` on ``group`` every ``interval`` seconds. DCGM watches all of them or none;
        a refusal raises DCGMError and leaves no field group behind."""
        name_made: list[str] = []

        def create(name: str) -> Any:
            made = self.agent.dcgmFieldGroupCreate(self.handle, field_ids, name)
            name_made.append(name)
            return made

        field_group = self._named(purpose, create)
        self.field_group_names.update(name_made)
        try:
            self.agent.dcgmWatchFields(self.handle, group, field_group, int(interval * 1_000_000), max(3 * interval, 10.0), 2)
        except self.error:
            self._destroy_field_group(field_group)
            raise
        watch = Watch(group, field_group, tuple(field_ids))
        self._watches.append(watch)
        return watch

    def unwatch(self, watch: Watch) -> None:
        """End a watch and destroy its field group, ignoring errors (the engine may be gone)."""
        try:
            self.agent.dcgmUnwatchFields(self.handle, watch.group, watch.field_group)
        except self.error:
            pass
        self._destroy_field_group(watch.field_group)
        self._watches.remove(watch)

    def _destroy_field_group(self, field_group: Any) -> None:
        try:
            self.agent.dcgmFieldGroupDestroy(self.handle, field_group)
        except self.error:
            pass

    def update_all(self) -> None:
        self.agent.dcgmUpdateAllFields(self.handle, 1)

    def latest(self, entities: list[Any], field_ids: list[int], live: bool = False) -> Any:
        flags = self.structs.DCGM_FV_FLAG_LIVE_DATA if live else 0
        return self.agent.dcgmEntitiesGetLatestValues(self.handle, entities, field_ids, flags)

    def strings(self, entities: list[Any], field_id: int, decode: Any) -> dict[Entity, str]:
        """A string field read once without a watch, by entity; blank or failed values are left out."""
        out = {}
        for value in self.latest(entities, [field_id], live=True):
            read = decode.text(value)
            if read is not None:
                out[(int(value.entityGroupId), int(value.entityId))] = read
        return out

    def values_since(self, watch: Watch, since_us: int) -> tuple[list[tuple[Entity, Any]], int]:
        """Every cached value of the watch's fields on its group's entities from ``since_us`` on, oldest
        first per entity and field, and the ``since_us`` of the next call (dcgmGetValuesSince_v2)."""
        values: list[tuple[Entity, Any]] = []
        value_type = self.structs.c_dcgmFieldValue_v1

        def each(entity_group: int, entity_id: int, answers: Any, count: int, _user: Any) -> int:
            for index in range(count):  # the buffer is DCGM's: copy before the callback returns
                values.append(((int(entity_group), int(entity_id)), value_type.from_buffer_copy(answers[index])))
            return 0

        callback = self.agent.dcgmFieldValueEntityEnumeration_f(each)
        next_since = self.agent.dcgmGetValuesSince_v2(self.handle, watch.group, watch.field_group, since_us, callback, None)
        return values, int(next_since)

    def others_field_groups(self) -> list[tuple[str, frozenset[int]]]:
        """The field groups other clients of this host engine made: (name, field IDs)."""
        answer = self.agent.dcgmFieldGroupGetAll(self.handle)
        out = []
        for index in range(answer.numFieldGroups):
            each = answer.fieldGroups[index]
            name = bytes(each.fieldGroupName).split(b"\0", 1)[0].decode("utf-8", "backslashreplace")
            if name not in self.field_group_names:
                out.append((name, frozenset(int(f) for f in each.fieldIds[: each.numFieldIds])))
        return out

    # ---- profiling ---------------------------------------------------------------------------

    def metric_groups(self, gpu_id: int) -> list[MetricGroup]:
        """The profiling metric groups DCGM supports on this GPU (dcgmProfGetSupportedMetricGroups)."""
        answer = self.agent.dcgmProfGetSupportedMetricGroups(self.handle, gpu_id)
        groups = []
        for index in range(answer.numMetricGroups):
            each = answer.metricGroups[index]
            groups.append(MetricGroup(int(each.majorId), int(each.minorId), frozenset(int(f) for f in each.fieldIds[: each.numFieldIds])))
        return groups

    def pause_profiling(self) -> None:
        self.agent.dcgmProfPause(self.handle)

    def resume_profiling(self) -> None:
        self.agent.dcgmProfResume(self.handle)

    # ---- status codes --------------------------------------------------------------------------

    def error_name(self, error: Exception) -> str:
        return self.status_name(getattr(error, "value", None))

    def status_name(self, code: Any) -> str:
        return self._status_names.get(code, f"DCGM status {code}")


def split_address(host: str) -> tuple[str, bool]:
    """``--dcgm.host`` as dcgmConnect_v2 takes it: (address, whether it is a unix socket's path)."""
    if host.startswith(UNIX_SOCKET_PREFIX):
        return host.removeprefix(UNIX_SOCKET_PREFIX), True
    return host, False
