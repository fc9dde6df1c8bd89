"""Live GPUs through DCGM: profiling fields 1001-1016 and the device fields, in the GPM backend's shape.

NOT YET RUN AGAINST A REAL DCGM: written from the documented API of DCGM's Python bindings and tested
against a fake of them (tests/fake_dcgm). See docs/dcgm.md.

One DCGM group holds the GPUs; three field groups are watched: device fields at the collect interval,
costly ones (energy, ECC, remapped rows) at the slow interval, and profiling fields at the collect
interval on their own, so a refused profiling watch leaves the rest working. Each poll reads the latest
cached values of every GPU and field in one dcgmEntitiesGetLatestValues call. Blank values (DCGM's
*_BLANK / NOT_FOUND / NOT_SUPPORTED / NOT_PERMISSIONED sentinels) and values whose timestamp stopped
moving are missing, never 0. A lost host engine turns every GPU down and is reconnected with back-off.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.backends.base import Backend, BackendUnavailable
from exporter.backends.dcgm_bindings import Bindings, load_bindings
from exporter.backends.dcgm_field_table import (
    BOOLEAN_TARGETS,
    CORE_PROFILING_IDS,
    EVENT,
    FAST,
    FIELDS,
    INTEGER_TARGETS,
    PROFILING,
    SLOW,
    SM_ACTIVE_ID,
    STATIC,
    DcgmField,
)
from exporter.sample import ACTIVITY_METRICS, DeviceInfo, GpuSample, down_sample

log = logging.getLogger(__name__)

RECONNECT_BACKOFF = (1.0, 60.0)  # first and largest wait between reconnection attempts
CONNECT_TIMEOUT = 5.0  # standalone mode: how long to wait for nv-hostengine to accept
PROFILING_REFUSALS = {
    "DCGM_ST_PROFILING_NOT_SUPPORTED": "this GPU or DCGM build does not support profiling metrics",
    "DCGM_ST_NOT_SUPPORTED": "this GPU or DCGM build does not support profiling metrics",
    "DCGM_ST_IN_USE": "another profiler holds the GPU's performance counters (Nsight, or another DCGM client on a pre-Hopper GPU)",
    "DCGM_ST_REQUIRES_ROOT": "nv-hostengine must run as root for profiling metrics",
    "DCGM_ST_NO_PERMISSION": "profiling is restricted to admin users (driver option RmProfilingAdminOnly=1)",
    "DCGM_ST_PROFILING_MULTI_PASS": "the profiling fields cannot be collected in one pass on this GPU",
    "DCGM_ST_MODULE_NOT_LOADED": "DCGM's profiling module is not loaded",
}


@dataclass(frozen=True)
class ResolvedField:
    spec: DcgmField
    field_id: int
    name: str  # the name the loaded bindings give this ID (the newest of the table's where they give none)


@dataclass
class FieldReading:
    """The last raw reading of one field on one GPU, for ``check``."""

    value: float | None
    status: str  # "ok", "blank", "stale", or why there is no value


@dataclass
class _Gpu:
    gpu_id: int  # DCGM's GPU ID
    info: DeviceInfo
    connected: bool = True
    last_ts: dict[int, tuple[int, float]] = field(default_factory=dict)  # field -> (DCGM ts, first seen monotonic)
    readings: dict[int, FieldReading] = field(default_factory=dict)


class DcgmBackend(Backend):
    name = "dcgm"

    def __init__(
        self,
        bindings_path: str | None = None,
        host: str | None = None,
        collect_interval: float = 1.0,
        slow_interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__()
        self.bindings_path = bindings_path
        self.host = host
        self.collect_interval = collect_interval
        self.slow_interval = slow_interval
        self.clock = clock
        self.sleep = sleep
        self.bindings: Bindings | None = None
        self.fields: list[ResolvedField] = []
        self.unknown_fields: list[DcgmField] = []  # fields this DCGM does not know at all
        self.profiling_refused: str | None = None  # why profiling fields are not watched, if so
        self._handle: Any = None
        self._group: Any = None
        self._field_groups: list[Any] = []
        self._watched: dict[int, ResolvedField] = {}  # field ID -> field, every watched non-static field
        self._gpus: list[_Gpu] = []
        self._entities: list[Any] = []
        self._xid_counts: dict[str, dict[int, int]] = {}  # uuid -> Xid -> count since start
        self._reconnect_due: float | None = None
        self._backoff = RECONNECT_BACKOFF[0]
        self._logged: set[str] = set()

    @property
    def mode(self) -> str:
        return f"standalone, nv-hostengine at {self.host}" if self.host else "embedded host engine"

    @property
    def _loaded(self) -> Bindings:
        """The bindings start() loaded: every DCGM call runs after it."""
        if self.bindings is None:
            raise BackendUnavailable("the DCGM backend was used before start()")
        return self.bindings

    # ---- start, stop, reconnection ----------------------------------------------------------

    def start(self) -> list[DeviceInfo]:
        if self._handle is not None:
            return [gpu.info for gpu in self._gpus]
        self.bindings = load_bindings(self.bindings_path)
        try:
            self._connect()
        except self.bindings.structs.DCGMError as error:
            self._teardown()
            where = f"nv-hostengine at {self.host}" if self.host else "an embedded DCGM host engine"
            raise BackendUnavailable(f"cannot use {where} through the bindings in {self.bindings.path}: {self._error_name(error)} ({error})") from None
        if not self._gpus:
            self._teardown()
            raise BackendUnavailable("DCGM found no supported GPU on this machine")
        return [gpu.info for gpu in self._gpus]

    def close(self) -> None:
        self._teardown()
        if self.bindings is not None:
            try:
                self.bindings.agent.dcgmShutdown()
            except self.bindings.structs.DCGMError:
                pass

    def _connect(self) -> None:
        bindings = self.bindings
        assert bindings is not None
        structs, agent = bindings.structs, bindings.agent
        structs._dcgmInit()
        agent.dcgmInit()
        if not self.fields and not self.unknown_fields:
            self._resolve_fields()
        if self.host:
            params = structs.c_dcgmConnectV2Params_v2()
            params.version = structs.c_dcgmConnectV2Params_version2
            params.persistAfterDisconnect = 0
            params.timeoutMs = int(CONNECT_TIMEOUT * 1000)
            params.addressIsUnixSocket = 0
            self._handle = agent.dcgmConnect_v2(self.host, params)
        else:
            self._handle = agent.dcgmStartEmbedded(structs.DCGM_OPERATION_MODE_AUTO)
        gpu_ids = list(agent.dcgmGetAllSupportedDevices(self._handle))
        self._open_gpus(gpu_ids)
        self._group = agent.dcgmGroupCreate(self._handle, structs.DCGM_GROUP_EMPTY, f"gpueff-{os.getpid()}")
        self._entities = []
        for gpu_id in gpu_ids:
            agent.dcgmGroupAddEntity(self._handle, self._group, bindings.fields.DCGM_FE_GPU, gpu_id)
            pair = structs.c_dcgmGroupEntityPair_t()
            pair.entityGroupId = bindings.fields.DCGM_FE_GPU
            pair.entityId = gpu_id
            self._entities.append(pair)
        self._watch()
        agent.dcgmUpdateAllFields(self._handle, 1)

    def _resolve_fields(self) -> None:
        """Map every field of the table to an ID this DCGM knows: by ID first, by its names as fallback."""
        fields_module = self._loaded.fields
        for spec in FIELDS:
            by_name = {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # DCGM 4.6 warns on the legacy names
                for name in spec.names:
                    value = getattr(fields_module, name, None)
                    if isinstance(value, int):
                        by_name[name] = value
            matching = [name for name, number in by_name.items() if number == spec.field_id]
            for name, number in by_name.items():
                if number != spec.field_id:
                    self._log_once(f"renumbered-{name}", logging.WARNING, "the DCGM bindings define %s as %d, not %d: watching %d (IDs are DCGM's stable interface)", name, number, spec.field_id, spec.field_id)
            known = self._field_known(spec.field_id)
            if known is None:  # the bindings have no metadata lookup: their names decide
                known = bool(matching)
            if known:
                self.fields.append(ResolvedField(spec, spec.field_id, matching[0] if matching else spec.names[0]))
            else:
                self.unknown_fields.append(spec)
        if self.unknown_fields:
            log.info("this DCGM does not know field(s) %s: they are not exported", ", ".join(f"{spec.names[0]} ({spec.field_id})" for spec in self.unknown_fields))

    def _field_known(self, field_id: int) -> bool | None:
        """Whether DCGM has metadata for ``field_id``; None where the bindings cannot say."""
        lookup = getattr(self._loaded.fields, "DcgmFieldGetById", None)
        if lookup is None:
            return None
        try:
            return lookup(field_id) is not None
        except Exception:  # the lookup goes through ctypes into libdcgm; any failure means "cannot say"
            return None

    def _open_gpus(self, gpu_ids: list[int]) -> None:
        agent, value_module = self._loaded.agent, self._loaded.value
        static = self._read_live(gpu_ids, [f for f in self.fields if f.spec.cadence == STATIC])
        known = {gpu.info.uuid: gpu for gpu in self._gpus}
        opened = []
        for gpu_id in gpu_ids:
            attributes = agent.dcgmGetDeviceAttributes(self._handle, gpu_id)
            identifiers = attributes.identifiers
            extra: dict[str, Any] = {"index": gpu_id}
            for resolved in (f for f in self.fields if f.spec.cadence == STATIC):
                value = static.get((gpu_id, resolved.field_id))
                if value is not None:
                    extra[resolved.spec.target] = int(value) if resolved.spec.target in INTEGER_TARGETS else float(value)
            power_limit = _number(attributes.powerLimits.enforcedPowerLimit, value_module)
            info = DeviceInfo(
                uuid=_text(identifiers.uuid),
                name=_text(identifiers.deviceName),
                driver=_text(identifiers.driverVersion),
                pci_bus_id=_text(identifiers.pciBusId),
                power_limit_watts=power_limit,
                **extra,
            )
            previous = known.pop(info.uuid, None)
            opened.append(_Gpu(gpu_id=gpu_id, info=previous.info if previous else info))
        # GPUs that did not come back after a reconnect stay listed, down.
        self._gpus = opened + [_Gpu(gpu_id=-1, info=gone.info, connected=False) for gone in known.values()]

    def _read_live(self, gpu_ids: list[int], resolved: list[ResolvedField]) -> dict[tuple[int, int], float]:
        """Read fields once without a watch (DCGM_FV_FLAG_LIVE_DATA); blank or failed values are left out."""
        if not resolved or not gpu_ids:
            return {}
        structs, fields_module = self._loaded.structs, self._loaded.fields
        entities = []
        for gpu_id in gpu_ids:
            pair = structs.c_dcgmGroupEntityPair_t()
            pair.entityGroupId = fields_module.DCGM_FE_GPU
            pair.entityId = gpu_id
            entities.append(pair)
        try:
            values = self._loaded.agent.dcgmEntitiesGetLatestValues(self._handle, entities, [f.field_id for f in resolved], structs.DCGM_FV_FLAG_LIVE_DATA)
        except structs.DCGMError as error:
            log.info("cannot read the static DCGM fields (%s): maximum clocks are not exported", error)
            return {}
        out = {}
        for value in values:
            number, status = self._decode(value)
            if number is not None and status == "ok":
                out[(value.entityId, value.fieldId)] = number
        return out

    def _watch(self) -> None:
        structs = self._loaded.structs
        groups = {
            FAST: [f for f in self.fields if f.spec.cadence in (FAST, EVENT)],
            SLOW: [f for f in self.fields if f.spec.cadence == SLOW],
        }
        self._watched = {}
        for cadence, resolved in groups.items():
            interval = self.slow_interval if cadence == SLOW else self.collect_interval
            self._watch_group(cadence, resolved, interval)
        profiling = [f for f in self.fields if f.spec.cadence == PROFILING]
        self.profiling_refused = None
        for attempt in (profiling, [f for f in profiling if f.field_id in CORE_PROFILING_IDS]):
            try:
                self._watch_group(PROFILING, attempt, self.collect_interval)
            except structs.DCGMError as error:
                name = self._error_name(error)
                self.profiling_refused = f"{name}: {PROFILING_REFUSALS.get(name, str(error))}"
                if name == "DCGM_ST_PROFILING_MULTI_PASS" and len(attempt) > len(CORE_PROFILING_IDS):
                    log.info("DCGM cannot watch all %d profiling fields in one pass here; watching the core set %s", len(attempt), sorted(CORE_PROFILING_IDS))
                    continue
                break
            self.profiling_refused = None
            break
        if self.profiling_refused:
            self._log_once(f"profiling-{self.profiling_refused}", logging.WARNING, "DCGM refused the profiling fields (%s): SM activity and the other profiling metrics are not exported; gpueff_profiling_available is 0", self.profiling_refused)

    def _watch_group(self, cadence: str, resolved: list[ResolvedField], interval: float) -> None:
        if not resolved:
            return
        agent = self._loaded.agent
        field_group = agent.dcgmFieldGroupCreate(self._handle, [f.field_id for f in resolved], f"gpueff-{cadence}-{os.getpid()}")
        try:
            agent.dcgmWatchFields(self._handle, self._group, field_group, int(interval * 1_000_000), max(3 * interval, 10.0), 2)
        except self._loaded.structs.DCGMError:
            agent.dcgmFieldGroupDestroy(self._handle, field_group)
            raise
        self._field_groups.append(field_group)
        for each in resolved:
            self._watched[each.field_id] = each

    def _teardown(self) -> None:
        """Drop the connection and everything made on it, ignoring errors (the engine may be gone)."""
        if self.bindings is None or self._handle is None:
            self._handle = None
            return
        agent, error_type = self._loaded.agent, self._loaded.structs.DCGMError
        calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [(agent.dcgmFieldGroupDestroy, (self._handle, fg)) for fg in self._field_groups]
        if self._group is not None:
            calls.append((agent.dcgmGroupDestroy, (self._handle, self._group)))
        calls.append((agent.dcgmDisconnect if self.host else agent.dcgmStopEmbedded, (self._handle,)))
        for call, args in calls:
            try:
                call(*args)
            except error_type:
                pass
        self._handle, self._group, self._field_groups, self._watched = None, None, [], {}

    def _lost(self, reason: str) -> None:
        """The host engine stopped answering: every GPU is down until a reconnect works."""
        self._teardown()
        for gpu in self._gpus:
            gpu.connected = False
            gpu.last_ts.clear()
            gpu.readings.clear()
        self._reconnect_due = self.clock() + self._backoff
        log.warning("lost DCGM (%s): every GPU is reported down; reconnecting in %.0fs", reason, self._backoff)

    def _try_reconnect(self) -> None:
        structs = self._loaded.structs
        try:
            self._connect()
        except structs.DCGMError as error:
            self._teardown()
            self._backoff = min(self._backoff * 2, RECONNECT_BACKOFF[1])
            self._reconnect_due = self.clock() + self._backoff
            log.warning("reconnecting to DCGM failed (%s: %s); next try in %.0fs", self._error_name(error), error, self._backoff)
            return
        self._reconnect_due = None
        self._backoff = RECONNECT_BACKOFF[0]
        down = [gpu.info.index for gpu in self._gpus if not gpu.connected]
        log.info("reconnected to DCGM (%s): %d GPU(s) readable%s", self.mode, len(self._gpus) - len(down), f", still missing: {down}" if down else "")

    # ---- collection ----------------------------------------------------------------------------

    def collect(self) -> list[GpuSample]:
        if self._reconnect_due is not None and self.clock() >= self._reconnect_due:
            self._try_reconnect()
        now = self.clock()
        if self._handle is None:
            return [down_sample(gpu.info, now) for gpu in self._gpus]
        structs = self._loaded.structs
        try:
            values = self._loaded.agent.dcgmEntitiesGetLatestValues(self._handle, self._entities, list(self._watched), 0)
        except structs.DCGMError as error:
            self.errors_total += 1
            self._lost(f"{self._error_name(error)}: {error}")
            return [down_sample(gpu.info, now) for gpu in self._gpus]
        by_gpu: dict[int, list[Any]] = {}
        for value in values:
            by_gpu.setdefault(value.entityId, []).append(value)
        samples = []
        for gpu in self._gpus:
            gpu_values = by_gpu.get(gpu.gpu_id, [])
            if not gpu.connected or (gpu_values and all(v.status == structs.DCGM_ST_GPU_IS_LOST for v in gpu_values)):
                self._log_once(f"lost-{gpu.info.uuid}", logging.WARNING, "GPU %d (%s): DCGM reports it lost; it is reported down", gpu.info.index, gpu.info.uuid)
                samples.append(down_sample(gpu.info, now))
                continue
            sample = self._sample(gpu, gpu_values, now)
            statuses = [reading.status for field_id, reading in gpu.readings.items() if field_id in self._watched and self._watched[field_id].spec.cadence == FAST]
            if "stale" in statuses and "ok" not in statuses:
                self._log_once(f"stale-{gpu.info.uuid}", logging.WARNING, "GPU %d (%s): DCGM's values stopped updating; it is reported down until they move again", gpu.info.index, gpu.info.uuid)
                sample = down_sample(gpu.info, now)
            samples.append(sample)
        return samples

    def _sample(self, gpu: _Gpu, values: list[Any], now: float) -> GpuSample:
        sample = GpuSample(device=gpu.info, timestamp=now)
        counts = self._xid_counts.setdefault(gpu.info.uuid, {})
        for raw in values:
            resolved = self._watched.get(raw.fieldId)
            if resolved is None:
                continue
            spec = resolved.spec
            number, status = self._decode(raw)
            previous = gpu.last_ts.get(raw.fieldId)
            if spec.cadence == EVENT:
                # The first reading after (re)connecting is the baseline: an Xid counts when its timestamp is new.
                if number is not None and status == "ok" and previous is not None and raw.ts != previous[0]:
                    counts[int(number)] = counts.get(int(number), 0) + 1
                    log.warning("Xid %d on GPU %d (%s)", int(number), gpu.info.index, gpu.info.uuid)
                if previous is None or raw.ts != previous[0]:
                    gpu.last_ts[raw.fieldId] = (raw.ts, now)
                gpu.readings[raw.fieldId] = FieldReading(number, status)
                continue
            if status == "ok":
                if previous is None or raw.ts != previous[0]:
                    gpu.last_ts[raw.fieldId] = (raw.ts, now)
                elif now - previous[1] > self._stale_limit(spec.cadence):
                    status = "stale"
            gpu.readings[raw.fieldId] = FieldReading(number if status == "ok" else None, status)
            if number is None or status != "ok":
                continue
            if spec.target.startswith("profiling:"):
                key = spec.target.split(":", 1)[1]
                scaled = max(0.0, number * spec.scale)
                sample.profiling[key] = min(scaled, 1.0) if key in ACTIVITY_METRICS else scaled
                if raw.fieldId == SM_ACTIVE_ID:
                    sample.window_seconds = self._window(previous, raw.ts)
            elif spec.target in BOOLEAN_TARGETS:
                setattr(sample, spec.target, bool(number))
            elif spec.target in INTEGER_TARGETS:
                setattr(sample, spec.target, int(number))
            else:
                setattr(sample, spec.target, number * spec.scale)
        sample.xid_errors = dict(counts)
        sample.profiling_available = "sm_active" in sample.profiling
        return sample

    def _window(self, previous: tuple[int, float] | None, ts: int) -> float:
        """The time a profiling ratio covers: the gap between DCGM's last two updates, else the watch interval."""
        if previous is not None and ts > previous[0]:
            return (ts - previous[0]) / 1_000_000
        return self.collect_interval

    def _stale_limit(self, cadence: str) -> float:
        interval = self.slow_interval if cadence == SLOW else self.collect_interval
        return 3 * interval + 2.0

    def _decode(self, raw: Any) -> tuple[float | None, str]:
        """A field value's number and status; DCGM's blank sentinels are "blank", never a number."""
        structs, value_module = self._loaded.structs, self._loaded.value
        if raw.status != structs.DCGM_ST_OK:
            return None, self._status_name(raw.status)
        kind = chr(raw.fieldType)
        if kind == self._loaded.fields.DCGM_FT_DOUBLE:
            number = float(raw.value.dbl)
            return (None, "blank") if value_module.DCGM_FP64_IS_BLANK(number) else (number, "ok")
        if kind in (self._loaded.fields.DCGM_FT_INT64, self._loaded.fields.DCGM_FT_TIMESTAMP):
            number = int(raw.value.i64)
            return (None, "blank") if value_module.DCGM_INT64_IS_BLANK(number) else (float(number), "ok")
        return None, f"unexpected field type {kind!r}"

    # ---- auto selection and check ----------------------------------------------------------------

    def profiling_answers(self, timeout: float) -> bool:
        """Whether any GPU gives a non-blank SM activity within ``timeout`` seconds (profiling needs two updates)."""
        deadline = self.clock() + timeout
        while True:
            if self.profiling_refused:
                return False
            if any(sample.profiling_available for sample in self.collect()):
                return True
            if self.clock() >= deadline:
                return False
            self.sleep(min(0.25, self.collect_interval))

    def readings(self) -> dict[str, dict[int, FieldReading]]:
        """The last raw reading of every watched field, by GPU UUID and field ID."""
        return {gpu.info.uuid: dict(gpu.readings) for gpu in self._gpus}

    # ---- helpers -------------------------------------------------------------------------------

    def _error_name(self, error: Exception) -> str:
        return self._status_name(getattr(error, "value", None))

    def _status_name(self, code: Any) -> str:
        for name in dir(self._loaded.structs):
            if name.startswith("DCGM_ST_") and getattr(self._loaded.structs, name) == code:
                return name
        return f"DCGM status {code}"

    def _log_once(self, key: str, level: int, message: str, *args: Any) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, message, *args)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _number(value: Any, value_module: Any) -> float | None:
    """A number from a device-attributes struct, None where DCGM left it blank."""
    if value is None or value_module.DCGM_INT32_IS_BLANK(int(value)):
        return None
    return float(value)
