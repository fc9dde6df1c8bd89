"""One connection to DCGM (an embedded host engine, or nv-hostengine over TCP) and what is made on it.

The session holds the loaded bindings from the start, so no caller ever sees them missing; its handle
exists between ``connect`` and ``close``. Group and field-group names carry a random token per session:
DCGM refuses a field-group name that any client of the same host engine already uses
(``DCGM_ST_DUPLICATE_KEY``), e.g. two containers that are each PID 1; on that refusal a new token is drawn.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.backends.dcgm.bindings import Bindings

CONNECT_TIMEOUT = 5.0  # standalone mode: how long to wait for nv-hostengine to accept
NAME_ATTEMPTS = 5  # fresh tokens tried when a name is taken
ENTITY_STATUS_LOST = 4  # dcgm_structs.h DcgmEntityStatusLost (the Python bindings define no constant for it)


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
        self._field_groups: list[Any] = []
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

    def connect(self) -> None:
        self.structs._dcgmInit()
        self.agent.dcgmInit()
        if self.host:
            params = self.structs.c_dcgmConnectV2Params_v2()
            params.version = self.structs.c_dcgmConnectV2Params_version2
            params.persistAfterDisconnect = 0  # the host engine drops our groups and watches when we go
            params.timeoutMs = int(CONNECT_TIMEOUT * 1000)
            params.addressIsUnixSocket = 0
            self.handle = self.agent.dcgmConnect_v2(self.host, params)
        else:
            self.handle = self.agent.dcgmStartEmbedded(self.structs.DCGM_OPERATION_MODE_AUTO)

    def close(self) -> None:
        """Drop the connection and everything made on it, ignoring errors (the engine may be gone)."""
        if self.handle is None:
            return
        calls: list[tuple[Callable[..., Any], Any]] = [(self.agent.dcgmFieldGroupDestroy, each) for each in self._field_groups]
        calls += [(self.agent.dcgmGroupDestroy, each) for each in self._groups]
        for call, made in calls:
            try:
                call(self.handle, made)
            except self.error:
                pass
        try:
            (self.agent.dcgmStopEmbedded if self.embedded else self.agent.dcgmDisconnect)(self.handle)
        except self.error:
            pass
        self.handle, self._groups, self._field_groups = None, [], []

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
        """DCGM's DCGM_CHIP_ARCH_* for the GPU; None where this DCGM cannot say (the call is DCGM 4.2.3+)."""
        query = getattr(self.agent, "dcgmGetGpuChipArchitecture", None)
        unknown = getattr(self.structs, "DCGM_CHIP_ARCH_UNKNOWN", None)
        if query is None:
            return None
        try:
            architecture = int(query(self.handle, gpu_id))
        except self.error:
            return None
        return None if architecture == unknown else architecture

    def entities(self, gpu_ids: list[int]) -> list[Any]:
        pairs = []
        for gpu_id in gpu_ids:
            pair = self.structs.c_dcgmGroupEntityPair_t()
            pair.entityGroupId = self.bindings.fields.DCGM_FE_GPU
            pair.entityId = gpu_id
            pairs.append(pair)
        return pairs

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

    def group(self, gpu_ids: list[int], purpose: str) -> Any:
        group = self._named(purpose, lambda name: self.agent.dcgmGroupCreate(self.handle, self.structs.DCGM_GROUP_EMPTY, name))
        self._groups.append(group)
        for gpu_id in gpu_ids:
            self.agent.dcgmGroupAddEntity(self.handle, group, self.bindings.fields.DCGM_FE_GPU, gpu_id)
        return group

    def drop_group(self, group: Any) -> None:
        try:
            self.agent.dcgmGroupDestroy(self.handle, group)
        except self.error:
            pass
        self._groups.remove(group)

    def watch(self, group: Any, field_ids: list[int], interval: float, purpose: str) -> None:
        """Watch ``field_ids`` on ``group`` every ``interval`` seconds. DCGM watches all of them or none;
        a refusal raises DCGMError and leaves no field group behind."""
        field_group = self._named(purpose, lambda name: self.agent.dcgmFieldGroupCreate(self.handle, field_ids, name))
        try:
            self.agent.dcgmWatchFields(self.handle, group, field_group, int(interval * 1_000_000), max(3 * interval, 10.0), 2)
        except self.error:
            try:
                self.agent.dcgmFieldGroupDestroy(self.handle, field_group)
            except self.error:
                pass
            raise
        self._field_groups.append(field_group)

    def update_all(self) -> None:
        self.agent.dcgmUpdateAllFields(self.handle, 1)

    def latest(self, entities: list[Any], field_ids: list[int], live: bool = False) -> Any:
        flags = self.structs.DCGM_FV_FLAG_LIVE_DATA if live else 0
        return self.agent.dcgmEntitiesGetLatestValues(self.handle, entities, field_ids, flags)

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
