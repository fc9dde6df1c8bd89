"""Live GPUs through DCGM: profiling fields 1001-1016 and the device fields, in the GPM backend's shape.

NOT YET RUN AGAINST A REAL DCGM: written from DCGM's Python bindings and C sources and tested against a
fake of them (tests/support/fakes/dcgm). See docs/dcgm.md.

One DCGM group holds the GPUs; device fields are watched at the collect interval, costly ones (energy,
ECC, remapped rows) at the slow interval, and profiling fields at the collect interval in field groups of
their own (chosen per GPU by profiling), so a refused profiling watch leaves the rest working. Each
poll reads the latest cached device values of every GPU in one dcgmEntitiesGetLatestValues call, and
every profiling value and Xid DCGM cached since the previous poll (dcgmGetValuesSince_v2): a shared
host engine may sample a field faster than the exporter's watch, and the exported ratio is the mean
over the poll window (window). Only watched fields that have data are read, so the host engine logs no
error per poll. Blank values and values whose timestamp stopped moving are missing, never 0; a GPU none
of whose device fields has a value (a lost GPU reads blank with status OK) is down. A lost host engine
turns every GPU down and is reconnected with back-off; one GPU's errors (DCGM_ST_GPU_IS_LOST) and the
host engine's limits (DCGM_ST_MAX_LIMIT) stay that GPU's or that watch's.

The jobs live in their own modules of this package: bindings (loading), session (the connection, groups,
watches), resolve (field IDs and names), decode (values), freshness (staleness, update intervals),
window (the poll window's mean), profiling (which profiling fields to watch), contention (other
clients' profiling watches), discover (a running host engine first), mig (GPU instances), xid (Xid
events), fields (the field table).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpueff.backends.backoff import Backoff
from gpueff.backends.base import SLOW_INTERVAL, Backend, BackendUnavailable, CollectSettings, text
from gpueff.backends.dcgm import mig
from gpueff.backends.dcgm.bindings import Bindings, load_bindings
from gpueff.backends.dcgm.contention import NONE, Contention, contention
from gpueff.backends.dcgm.decode import BLANK, OK, STALE, Decoder, FieldReading, int32_or_none
from gpueff.backends.dcgm.discover import DEFAULT_SOCKET, find_host_engine
from gpueff.backends.dcgm.fields import (
    BOOLEAN_TARGETS,
    EVENT,
    FAST,
    INTEGER_TARGETS,
    NVLINK_LINK_PREFIX,
    PROFILING,
    SLOW,
    SM_ACTIVE_ID,
    STATIC,
)
from gpueff.backends.dcgm.freshness import FieldClocks
from gpueff.backends.dcgm.health import PREFIX as HEALTH_PREFIX
from gpueff.backends.dcgm.health import health
from gpueff.backends.dcgm.nvlink import Links, link_states
from gpueff.backends.dcgm.pause import pause_requested
from gpueff.backends.dcgm.profiling import MODULE_NOT_LOADED, REQUIRES_ROOT, GpuProfiling, refusal_reasons
from gpueff.backends.dcgm.profiling import plan as plan_profiling
from gpueff.backends.dcgm.profiling import watch as watch_profiling
from gpueff.backends.dcgm.resolve import ResolvedField, resolve_fields
from gpueff.backends.dcgm.session import DcgmSession, Entity, MigEntity, Watch
from gpueff.backends.dcgm.window import Sample, WindowMean, update_interval_us, window_mean
from gpueff.backends.dcgm.xid import XidCounter
from gpueff.logs import gpu_fields
from gpueff.metrics import PROFILING_RATIOS
from gpueff.sample import Cycles, DeviceInfo, GpuSample, Profiling, down_sample

log = logging.getLogger(__name__)

RECONNECT_BACKOFF = (1.0, 60.0)  # first and largest wait between reconnection attempts
# First and largest wait between tries of a profiling watch refused as a whole (DCGM_ST_IN_USE while
# Nsight runs, a profiling module that did not load in a shared nv-hostengine, the 64-group limit).
PROFILING_RETRY = (60.0, 960.0)
CONTENTION_CHECK = 60.0  # seconds between looks at other clients' field groups
FINAL_IN_EMBEDDED = (MODULE_NOT_LOADED, REQUIRES_ROOT)  # whole refusals an embedded engine gives for its whole life
PAUSED = "paused"
GPU_ENTITY = 1  # dcgm_fields.h DCGM_FE_GPU
CYCLES_PREFIX = "cycles."  # DCGM 4.6's monotonic counters (sample.Cycles)
POWER_LIMIT_TARGET = "power_limit_watts"  # the one DeviceInfo attribute read again (a limit changed at run time); the rest are read once
CONNECTION_ERRORS = {"DCGM_ST_CONNECTION_NOT_VALID", "DCGM_ST_UNINITIALIZED"}  # the host engine, not one watch
# Field 203 (NVML's utilization: any engine, copy engines included) is sampled at the driver's own
# sample period, so the mean of its samples in a poll window is nvidia-smi's utilization over the
# window (docs/gpu-facts.md: the driver samples every ~167-200 ms on an H100).
UTILIZATION_SAMPLE_INTERVAL = 0.2
UTILIZATION_WINDOW_KEY = -203  # its samples' key in the poll's windows, apart from the profiling fields'

__all__ = ["DcgmBackend", "FieldReading", "ResolvedField"]


@dataclass
class _Gpu:
    gpu_id: int  # DCGM's GPU ID
    info: DeviceInfo
    connected: bool = True
    lost: bool = False  # DCGM answered DCGM_ST_GPU_IS_LOST for it
    clocks: FieldClocks = field(default_factory=FieldClocks)
    readings: dict[int, FieldReading] = field(default_factory=dict)
    profiling: GpuProfiling = field(default_factory=GpuProfiling)
    windows: dict[int, WindowMean] = field(default_factory=dict)  # the last poll window's mean per profiling field
    contention: Contention = NONE
    mig: bool = False  # in MIG mode: its profiling is read per GPU instance
    parent: _Gpu | None = None  # a GPU instance's physical GPU (gpu_id is then the physical GPU's)
    instance: Entity | None = None  # a GPU instance's DCGM entity

    @property
    def entity(self) -> Entity:
        return self.instance if self.instance is not None else (GPU_ENTITY, self.gpu_id)


@dataclass
class _WindowRead:
    """A watch read with dcgmGetValuesSince_v2 every poll."""

    watch: Watch
    since_us: int = 0
    first: bool = True  # the first read returns what the cache held before: Xid's baseline


def _refused_whole(gpu: _Gpu) -> bool:
    """Whether DCGM refused the GPU's profiling as a whole (so trying again later may work)."""
    return bool(gpu.connected and gpu.profiling.whole_refusal)


class DcgmBackend(Backend):
    name = "dcgm"

    def __init__(
        self,
        bindings_path: str | None = None,
        host: str | None = None,
        collect_interval: float = 1.0,
        slow_interval: float = SLOW_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        multi_pass: bool = False,
        pause_file: str | None = None,
        wall_clock: Callable[[], float] = time.time,
        name_token: Callable[[], str] = lambda: secrets.token_hex(6),
        discover: bool = False,
        environ: Mapping[str, str] = os.environ,
        socket_path: str = DEFAULT_SOCKET,
    ) -> None:
        super().__init__()
        self.bindings_path = bindings_path
        self.host = host
        self.discover = discover  # without a host: look for a running host engine before starting an embedded one
        self.environ = environ
        self.socket_path = socket_path
        self.collect_interval = collect_interval
        self.slow_interval = slow_interval
        self.clock = clock
        self.sleep = sleep
        self.multi_pass = multi_pass
        self.pause_file = pause_file
        self.wall_clock = wall_clock
        self.name_token = name_token
        self.session: DcgmSession | None = None
        self.fields: list[ResolvedField] = []
        self.unknown_fields: list[Any] = []  # the table's fields this DCGM does not know at all
        self.profiling_refused: str | None = None  # why no GPU gives SM activity, if so
        self._decode: Decoder | None = None
        self._by_id: dict[int, ResolvedField] = {}  # every field watched
        self._device_ids: list[int] = []  # read with dcgmEntitiesGetLatestValues
        self._device_entities: list[Any] = []
        self._profiling_reads: list[_WindowRead] = []
        self._utilization_read: _WindowRead | None = None
        self._xid_read: _WindowRead | None = None
        self._gpus: list[_Gpu] = []
        self._mig: dict[Entity, MigEntity] = {}
        self._xid = XidCounter()
        self._reconnect_due: float | None = None
        self._backoff = Backoff(*RECONNECT_BACKOFF)
        self._paused = False
        self._pause_unsupported = False
        self._all_gpus_group: Any = None
        self._profiling_groups = 0  # numbers the profiling groups' names
        self._profiling_retry_due: float | None = None
        self._profiling_backoff = Backoff(*PROFILING_RETRY)
        self._contention_due: float | None = None
        self._nvlink_due: float | None = None  # when the NVLink link states are read next (slow cadence); None: at once
        self._nvlink: dict[int, Links] = {}  # GPU ID -> its links' states, as last read
        self._resume_guard_us = 0  # embedded: profiling values older than this came from before the resume

    @property
    def mode(self) -> str:
        return f"standalone, nv-hostengine at {self.host}" if self.host else "embedded host engine"

    @property
    def bindings(self) -> Bindings:
        """The loaded bindings: there from ``start`` on."""
        if self.session is None:
            raise RuntimeError("DcgmBackend.bindings read before start")
        return self.session.bindings

    @property
    def profiling(self) -> dict[str, GpuProfiling]:
        """Per GPU UUID: which profiling fields DCGM supports and which are watched."""
        return {gpu.info.uuid: gpu.profiling for gpu in self._gpus}

    def configure(self, settings: CollectSettings) -> None:
        """The fields stay watched at the intervals the backend started with: a DCGM watch keeps its
        frequency, and watching anew would leave field groups behind. A change is logged once."""
        super().configure(settings)
        if (settings.collect_interval, settings.slow_interval) != (self.collect_interval, self.slow_interval):
            self.log_once(
                f"intervals-{settings.collect_interval}-{settings.slow_interval}",
                logging.WARNING,
                "the DCGM backend keeps watching its fields every %ss (slow fields every %ss) until a restart; the configuration now asks for %ss and %ss",
                self.collect_interval, self.slow_interval, settings.collect_interval, settings.slow_interval,
            )

    # ---- start, stop, reconnection ----------------------------------------------------------

    def start(self) -> list[DeviceInfo]:
        if self.session is not None and self.session.handle is not None:
            return [gpu.info for gpu in self._gpus]
        if self.pause_file and self.host:
            raise BackendUnavailable(f"--dcgm.pause-file is for the embedded host engine; to pause profiling on the nv-hostengine at {self.host} run `dcgmi profile --pause` (and `--resume`) there")
        bindings = load_bindings(self.bindings_path)
        if self.host is None and self.discover and not self.pause_file:
            self.host = find_host_engine(bindings, self.environ, self.socket_path, self.name_token)
        session = DcgmSession(bindings, self.host, self.name_token)
        self.session = session
        self._decode = Decoder(bindings, session.status_name)
        try:
            session.init()  # before it, the bindings cannot look a field up by ID
            self.fields, self.unknown_fields = resolve_fields(bindings.fields)
            self._connect(session)
        except session.error as error:
            session.close()
            where = f"nv-hostengine at {self.host}" if self.host else "an embedded DCGM host engine"
            name = session.error_name(error)
            hint = ""
            if name == "DCGM_ST_INIT_ERROR" and not self.host:
                hint = ". An embedded engine does not start at all as a normal user while any GPU has MIG on (DCGM reads MIG only as root): run the exporter as root, or use a root nv-hostengine through --dcgm.host"
            raise BackendUnavailable(f"cannot use {where} through the bindings in {bindings.path}: {name} ({error}){hint}") from None
        if not self._gpus:
            session.close()
            raise BackendUnavailable("DCGM found no supported GPU on this machine")
        return [gpu.info for gpu in self._gpus]

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session.shutdown()

    def _connect(self, session: DcgmSession) -> None:
        session.connect()
        gpu_ids = session.gpu_ids()
        self._open_gpus(session, gpu_ids)
        lost: set[Entity] = set()
        group = session.group([(GPU_ENTITY, gpu_id) for gpu_id in gpu_ids], "gpus", lost)
        for gpu in self._gpus:
            if (GPU_ENTITY, gpu.gpu_id) in lost:
                gpu.connected, gpu.lost = False, True
                self.log_once(f"lost-{gpu.info.uuid}", logging.WARNING, "GPU %d (%s): DCGM reports it lost (DCGM_ST_GPU_IS_LOST); it is reported down, the other GPUs are read", gpu.info.index, gpu.info.uuid, extra=gpu_fields(gpu.info.index, gpu.info.uuid))
        readable = [gpu.gpu_id for gpu in self._gpus if gpu.connected]
        self._device_entities = session.entities(readable)
        self._mig = {each.entity: each for each in mig.hierarchy(session, self.log_once) if each.gpu_id in readable}
        self._open_instances(session, list(self._mig.values()))
        self._by_id = {}
        for cadence, interval in ((FAST, self.collect_interval), (SLOW, self.slow_interval)):
            resolved = [f for f in self.fields if f.spec.cadence == cadence]
            if resolved:
                session.watch(group, [f.field_id for f in resolved], interval, cadence)
                self._by_id.update({f.field_id: f for f in resolved})
        self._device_ids = list(self._by_id)
        self._xid_read = None
        self._nvlink_due = None  # read the link states on the first poll of this connection
        events = [f for f in self.fields if f.spec.cadence == EVENT]
        if events:
            # Xids the driver attributes to a MIG instance are stored on its GPU and compute instance.
            gpus = [(GPU_ENTITY, gpu_id) for gpu_id in readable]
            self._xid_read = _WindowRead(mig.watch_xids(session, group, gpus, list(self._mig.values()), [f.field_id for f in events], self.collect_interval, self.log_once))
            self._by_id.update({f.field_id: f for f in events})
        self._all_gpus_group = group
        self._profiling_reads = []
        self._profiling_backoff.reset()
        self._watch_profiling(session, [gpu for gpu in self._gpus if gpu.connected and not gpu.mig])
        self._utilization_read = self._watch_utilization(session, group)  # last: the field groups the rest need come first
        if self._paused:
            session.pause_profiling()  # a new embedded engine starts unpaused
        session.update_all()

    def _open_instances(self, session: DcgmSession, instances: list[MigEntity]) -> None:
        """Mark the GPUs in MIG mode and add their GPU instances as devices of their own (mig)."""
        assert self._decode is not None
        parents = {gpu.gpu_id: gpu for gpu in self._gpus if gpu.connected and gpu.parent is None}
        for gpu in parents.values():
            gpu.mig = any(each.gpu_id == gpu.gpu_id for each in instances)
            if gpu.mig:
                gpu.profiling = GpuProfiling(not_supported="the GPU is in MIG mode: profiling fields are read per GPU instance")
                self.log_once(f"mig-{gpu.info.uuid}", logging.INFO, "GPU %d is in MIG mode: its GPU instances are exported as devices of their own, with DCGM's profiling fields", gpu.info.index, extra=gpu_fields(gpu.info.index, gpu.info.uuid))
        devices = mig.instance_devices(session, instances, {gpu_id: gpu.info for gpu_id, gpu in parents.items()}, self._decode, self.log_once)
        self._gpus += [_Gpu(gpu_id=each.gpu_id, info=info, parent=parents[each.gpu_id], instance=each.entity) for each, info in devices]

    def _watch_profiling(self, session: DcgmSession, gpus: list[_Gpu]) -> None:
        """Choose and watch the profiling fields of ``gpus``; a refusal that no smaller watch avoids
        (another profiler holds the counters, say) is tried again later, with back-off."""
        assert self._decode is not None
        profiling = {f.field_id: f for f in self.fields if f.spec.cadence == PROFILING}
        reasons = refusal_reasons(session)
        for gpu in gpus:
            gpu.profiling = plan_profiling(session, gpu.gpu_id, frozenset(profiling), self.multi_pass, self._decode)
        # DCGM watches profiling fields only on a group of identical GPUs; one group per model and choice.
        partitions: dict[tuple[str, frozenset[int]], list[_Gpu]] = {}
        for gpu in gpus:
            if gpu.profiling.chosen:
                partitions.setdefault((gpu.info.name, gpu.profiling.chosen), []).append(gpu)
        every_gpu = sorted((GPU_ENTITY, gpu.gpu_id) for gpu in self._gpus if gpu.connected and gpu.parent is None)
        for members in partitions.values():
            entities = [gpu.entity for gpu in members]
            self._profiling_groups += 1
            label = f"prof{self._profiling_groups}"  # names stay unique across retries
            shared = sorted(entities) == every_gpu
            try:
                group = self._all_gpus_group if shared else session.group(entities, label)
            except session.error as error:  # DCGM_ST_MAX_LIMIT, DCGM_ST_GPU_IS_LOST: this watch's problem, not the engine's
                name = session.error_name(error)
                reason = f"{name}: {reasons.get(name, str(error))}"
                for gpu in members:
                    gpu.profiling.watched, gpu.profiling.whole_refusal = frozenset(), reason
                    gpu.profiling.refused = dict.fromkeys(gpu.profiling.chosen, reason)
                continue
            made = watch_profiling(session, group, entities, [gpu.profiling for gpu in members], self.collect_interval, label)
            if not shared and not any(each.group is group for each in made):
                session.drop_group(group)  # DCGM allows 64 groups per host engine: none is kept without a watch
            self._profiling_reads += [_WindowRead(watch) for watch in made]
            self._by_id.update({f: profiling[f] for gpu in members for f in gpu.profiling.watched})
        self._report_profiling(gpus)
        self._check_contention(session)
        self._schedule_profiling_retry(session, gpus)

    def _schedule_profiling_retry(self, session: DcgmSession, gpus: list[_Gpu]) -> None:
        refused = [gpu for gpu in gpus if _refused_whole(gpu)]
        if not refused:
            self._profiling_retry_due = None
            self._profiling_backoff.reset()
            return
        if session.embedded and all((gpu.profiling.whole_refusal or "").startswith(FINAL_IN_EMBEDDED) for gpu in refused):
            # An embedded engine's module does not load later, and it runs as the exporter's own user,
            # which does not change while the exporter runs: no use asking again.
            self._profiling_retry_due = None
            return
        self._profiling_retry_due = self.clock() + self._profiling_backoff.wait
        log.info("trying the DCGM profiling watch of GPU(s) %s again in %.0fs", [gpu.info.index for gpu in refused], self._profiling_backoff.wait)
        self._profiling_backoff.grow()

    def _retry_profiling(self, session: DcgmSession) -> None:
        self._profiling_retry_due = None
        retry = [gpu for gpu in self._gpus if _refused_whole(gpu)]
        log.debug("trying the refused DCGM profiling watch again on GPU(s) %s", [gpu.info.index for gpu in retry])
        self._watch_profiling(session, retry)

    def _check_contention(self, session: DcgmSession) -> None:
        """Look for other clients' profiling watches that make DCGM multiplex our counters (contention)."""
        self._contention_due = self.clock() + CONTENTION_CHECK
        watching = [gpu for gpu in self._gpus if gpu.connected and gpu.profiling.watched and gpu.profiling.one_pass_limited]
        if not watching:
            return
        try:
            others = session.others_field_groups()
        except session.error as error:
            self.log_once("field-groups", logging.INFO, "cannot list the host engine's field groups (%s): another client's competing profiling watch goes unnoticed", session.error_name(error))
            return
        for gpu in watching:
            found = contention(gpu.profiling.groups, gpu.profiling.watched, others)
            if found.rivals and found.rivals != gpu.contention.rivals:
                rivals = ", ".join(f"'{name}' (metric group {major}.{minor})" for name, (major, minor) in found.rivals)
                log.warning(
                    "GPU %d (%s): another client of this DCGM host engine has a field group of profiling fields that share the GPU's counters with the exporter's: %s. "
                    "Where it watches them on this GPU, DCGM multiplexes them, and a profiling value can read 0 for an interval whose pass did not run (gpueff_profiling_multiplexed is 1). "
                    "DCGM's public API lists field groups, not where they are watched: it may be unwatched or on other GPUs. "
                    "Have both clients watch the same metric groups (docs/dcgm.md, sharing a host engine)",
                    gpu.info.index,
                    gpu.info.name,
                    rivals,
                )
            gpu.contention = found

    def _report_profiling(self, gpus: list[_Gpu]) -> None:
        reasons = []
        for gpu in gpus:
            state = gpu.profiling
            label = f"GPU {gpu.info.index} ({gpu.info.name})"
            if SM_ACTIVE_ID in state.watched:
                outside, refused = sorted(state.supported - state.chosen), sorted(state.refused)
                notes = ([f"outside the single pass (--dcgm.multi-pass watches them): {outside}"] if outside else []) + ([f"refused: {refused}"] if refused else [])
                log.info("%s: DCGM profiling fields watched %s%s", label, sorted(state.watched), "".join(f"; {note}" for note in notes), extra=gpu_fields(gpu.info.index, gpu.info.uuid))
                continue
            reason = state.whole_refusal or state.not_supported or state.refused.get(SM_ACTIVE_ID) or "DCGM does not list SM activity (1002) for this GPU"
            reasons.append(reason)
            self.log_once(f"profiling-{gpu.info.uuid}-{reason}", logging.WARNING, "%s: no SM activity from DCGM (%s): SM activity and the other profiling metrics are missing there; gpueff_profiling_available is 0", label, reason, extra=gpu_fields(gpu.info.index, gpu.info.uuid))
        connected = [gpu for gpu in self._gpus if gpu.connected]
        if any(SM_ACTIVE_ID in gpu.profiling.watched for gpu in connected):
            self.profiling_refused = None
        elif reasons:
            self.profiling_refused = reasons[0]

    def _open_gpus(self, session: DcgmSession, gpu_ids: list[int]) -> None:
        value_module = session.bindings.value
        static = self._read_live(session, gpu_ids, [f for f in self.fields if f.spec.cadence == STATIC])
        known = {gpu.info.uuid: gpu for gpu in self._gpus if gpu.parent is None}  # GPU instances are opened anew
        opened = []
        for gpu_id in gpu_ids:
            attributes = session.attributes(gpu_id)
            identifiers = attributes.identifiers
            extra: dict[str, Any] = {"index": gpu_id}
            for resolved in (f for f in self.fields if f.spec.cadence == STATIC):
                value = static.get((gpu_id, resolved.field_id))
                if value is not None:
                    extra[resolved.spec.target] = int(value) if resolved.spec.target in INTEGER_TARGETS else float(value)
            info = DeviceInfo(
                uuid=text(identifiers.uuid),
                name=text(identifiers.deviceName),
                driver=text(identifiers.driverVersion),
                pci_bus_id=text(identifiers.pciBusId),
                power_limit_watts=int32_or_none(attributes.powerLimits.enforcedPowerLimit, value_module),
                **extra,
            )
            previous = known.pop(info.uuid, None)
            opened.append(_Gpu(gpu_id=gpu_id, info=previous.info if previous else info))
        # GPUs that did not come back after a reconnect stay listed, down.
        self._gpus = opened + [_Gpu(gpu_id=-1, info=gone.info, connected=False) for gone in known.values()]

    def _read_live(self, session: DcgmSession, gpu_ids: list[int], resolved: list[ResolvedField]) -> dict[tuple[int, int], float]:
        """Read fields once without a watch (DCGM_FV_FLAG_LIVE_DATA); blank or failed values are left out."""
        assert self._decode is not None
        if not resolved or not gpu_ids:
            return {}
        try:
            values = session.latest(session.entities(gpu_ids), [f.field_id for f in resolved], live=True)
        except session.error as error:
            log.info("cannot read the static DCGM fields (%s): maximum clocks are not exported", error)
            return {}
        out = {}
        for value in values:
            number, status = self._decode(value)
            if status == OK and number is not None:
                out[(value.entityId, value.fieldId)] = number
        return out

    def _lost(self, session: DcgmSession, reason: str) -> None:
        """The host engine stopped answering: every GPU is down until a reconnect works."""
        session.close()
        for gpu in self._gpus:
            gpu.connected = False
            gpu.clocks.clear()
            gpu.readings.clear()
            gpu.windows.clear()
        self._reconnect_due = self.clock() + self._backoff.wait
        log.warning("lost DCGM (%s): every GPU is reported down; reconnecting in %.0fs", reason, self._backoff.wait)

    def _try_reconnect(self, session: DcgmSession) -> None:
        try:
            self._connect(session)
        except session.error as error:
            session.close()
            self._reconnect_due = self.clock() + self._backoff.grow()
            log.warning("reconnecting to DCGM failed (%s: %s); next try in %.0fs", session.error_name(error), error, self._backoff.wait)
            return
        self._reconnect_due = None
        self._backoff.reset()
        down = [gpu.info.index for gpu in self._gpus if not gpu.connected]
        log.info("reconnected to DCGM (%s): %d GPU(s) readable%s", self.mode, len(self._gpus) - len(down), f", still missing: {down}" if down else "")

    # ---- pausing profiling (embedded mode) -----------------------------------------------------

    def _follow_pause_file(self, session: DcgmSession) -> None:
        if not self.pause_file or self._pause_unsupported:
            return
        wanted, refusal = pause_requested(self.pause_file)
        if refusal is not None:
            self.log_once(f"pause-refused-{refusal}", logging.WARNING, "DCGM profiling not paused: %s is there, but %s; only a pause file of root or the exporter's user counts there (docs/security.md)", self.pause_file, refusal)
        if wanted == self._paused:
            return
        try:
            session.pause_profiling() if wanted else session.resume_profiling()
        except session.error as error:
            name = session.error_name(error)
            if name == "DCGM_ST_NOT_SUPPORTED":
                # DcgmApi.cpp helperProfPauseResume turns the module's MODULE_NOT_LOADED into NOT_SUPPORTED;
                # test_prof.py test_dcgm_prof_pause_resume_values expects it on GPM GPUs. The module is not
                # loaded where every GPU reads GPM (no profiler lock: Nsight runs without a pause) or where
                # it failed to load (DCGM 4 without its proprietary package): the two look alike here.
                self._pause_unsupported = True
                log.warning(
                    "DCGM cannot pause profiling here (DCGM_ST_NOT_SUPPORTED: its profiling module is not loaded in this host engine: "
                    "either every GPU reads GPM (Hopper and newer), which takes no profiler lock, so Nsight runs without a pause, "
                    "or the module failed to load (DCGM 4 without datacenter-gpu-manager-4-proprietary), and then no profiling metric is read either): %s is no longer followed",
                    self.pause_file,
                )
                return
            self.log_once(f"pause-{wanted}-{error}", logging.WARNING, "cannot %s DCGM profiling (%s)", "pause" if wanted else "resume", name)
            return
        self._paused = wanted
        if wanted:
            log.warning("DCGM profiling paused (%s exists): profiling metrics are missing until it is removed; Nsight and other profilers can run", self.pause_file)
        else:
            self._resume_guard_us = int((self.wall_clock() + self.collect_interval) * 1_000_000)
            log.info("DCGM profiling resumed (%s removed)", self.pause_file)

    # ---- collection ----------------------------------------------------------------------------

    def collect(self) -> list[GpuSample]:
        session = self.session
        if session is None:
            raise RuntimeError("DcgmBackend.collect called before start")
        if self._reconnect_due is not None and self.clock() >= self._reconnect_due:
            self._try_reconnect(session)
        now = self.clock()
        if session.handle is None:
            return [down_sample(gpu.info, now) for gpu in self._gpus]
        try:
            self._follow_pause_file(session)
            if self._profiling_retry_due is not None and now >= self._profiling_retry_due:
                self._retry_profiling(session)
            if self._contention_due is not None and now >= self._contention_due:
                self._check_contention(session)
            values = session.latest(self._device_entities, self._device_ids) if self._device_entities else []
            windows = self._read_windows(session)
            if self._nvlink_due is None or now >= self._nvlink_due:
                self._read_nvlink(session, now)
        except session.error as error:
            self.errors_total += 1
            self._lost(session, f"{session.error_name(error)}: {error}")
            return [down_sample(gpu.info, now) for gpu in self._gpus]
        by_gpu: dict[int, list[Any]] = {}
        for value in values:  # DCGM does not promise any order
            by_gpu.setdefault(value.entityId, []).append(value)
        fast = {f for f, resolved in self._by_id.items() if resolved.spec.cadence == FAST}
        not_watched = session.structs.DCGM_ST_NOT_WATCHED
        fast_statuses = [v.status for v in values if v.fieldId in fast]
        if fast_statuses and all(status == not_watched for status in fast_statuses):
            self.errors_total += 1
            self._lost(session, "DCGM no longer watches the exporter's fields (DCGM_ST_NOT_WATCHED)")
            return [down_sample(gpu.info, now) for gpu in self._gpus]
        samples = []
        up: dict[str, bool] = {}
        for gpu in self._gpus:  # physical GPUs first, then their GPU instances
            if not gpu.connected or (gpu.parent is not None and not up.get(gpu.parent.info.uuid)):
                if gpu.lost:
                    gpu.readings.clear()
                samples.append(down_sample(gpu.info, now))
                continue
            sample = self._sample(gpu, by_gpu.get(gpu.gpu_id, []) if gpu.parent is None else [], windows, now)
            up[gpu.info.uuid] = True
            statuses = {reading.status for field_id, reading in gpu.readings.items() if field_id in fast}
            if gpu.parent is None and OK not in statuses:
                up[gpu.info.uuid] = False
                self._log_down(session, gpu, statuses)
                sample = down_sample(gpu.info, now)
            else:
                self._logged.discard(f"down-{gpu.info.uuid}")
            samples.append(sample)
        return samples

    def _read_nvlink(self, session: DcgmSession, now: float) -> None:
        """Every GPU's NVLink link states, at the slow cadence; a connection error is the host engine's
        (it propagates), any other leaves the states absent until the next read, logged once."""
        self._nvlink_due = now + self.slow_interval
        try:
            self._nvlink = link_states(session.nvlink_status(), session.structs)
        except session.error as error:
            name = session.error_name(error)
            if name in CONNECTION_ERRORS:
                raise
            self._nvlink = {}
            self.log_once(f"nvlink-{name}", logging.WARNING, "DCGM answered %s for the NVLink link states: gpueff_nvlink_link_active is absent while it does", name)

    def _read_windows(self, session: DcgmSession) -> dict[tuple[Entity, int], list[Any]]:
        """Every profiling value cached since the previous poll, by (entity, field), oldest first; Xids
        are counted on the way. Only watched fields are asked for, and a field with no sample in the
        window answers DCGM_ST_NO_DATA, which dcgmGetValuesSince skips: the host engine logs nothing."""
        out: dict[tuple[Entity, int], list[Any]] = {}
        for read in self._profiling_reads:
            for entity, value in self._values_since(session, read):
                out.setdefault((entity, value.fieldId), []).append(value)
        if self._utilization_read is not None:
            values = self._values_since(session, self._utilization_read)
            if self._utilization_read.first:
                self._utilization_read.first = False  # what the cache held before the first window
            else:
                for entity, value in values:
                    out.setdefault((entity, UTILIZATION_WINDOW_KEY), []).append(value)
        if self._xid_read is not None:
            values = self._values_since(session, self._xid_read)
            if self._xid_read.first:
                self._xid_read.first = False  # what the cache held before: the baseline
            else:
                self._count_xids(values)
        for batch in out.values():
            batch.sort(key=lambda value: value.ts)
        return out

    def _watch_utilization(self, session: DcgmSession, group: Any) -> _WindowRead | None:
        """Field 203 watched again at the driver's own sample period and read with dcgmGetValuesSince,
        so each poll has every sample of its window; None where DCGM refuses (the window's
        utilization is then the graphics engine's activity, blind to copy-engine work)."""
        field = next((f for f in self.fields if f.spec.target == "gpu_utilization"), None)
        if field is None:
            return None
        try:
            # A second watch of one field by one client sets its interval: never slower than the poll's.
            return _WindowRead(session.watch(group, [field.field_id], min(UTILIZATION_SAMPLE_INTERVAL, self.collect_interval), "utilization"))
        except session.error as error:
            name = session.error_name(error)
            if name in CONNECTION_ERRORS:
                raise
            self.log_once(f"utilization-{name}", logging.WARNING, "DCGM refused to sample field %d every %.1f s (%s): the window's utilization is the graphics engine's activity, which does not count copy-engine work", field.field_id, UTILIZATION_SAMPLE_INTERVAL, name)
            return None

    def _utilization_window(self, batch: list[Any]) -> float | None:
        """The mean of the window's samples of field 203, as a ratio; None with none."""
        assert self._decode is not None
        numbers = [number for number, status in map(self._decode, batch) if status == OK and number is not None]
        return min(1.0, max(0.0, sum(numbers) / len(numbers) / 100)) if numbers else None

    def _values_since(self, session: DcgmSession, read: _WindowRead) -> list[tuple[Entity, Any]]:
        """One watch's new values. dcgmGetValuesSince stops at the first field whose cache answers an
        error other than DCGM_ST_NO_DATA (DcgmApi.cpp): that costs this watch's values this poll, not
        the connection; only a connection error is the host engine's."""
        try:
            values, read.since_us = session.values_since(read.watch, read.since_us)
        except session.error as error:
            name = session.error_name(error)
            if name in CONNECTION_ERRORS:
                raise
            self.log_once(f"since-{name}-{read.watch.field_ids}", logging.WARNING, "DCGM answered %s reading fields %s since the last poll: their values are missing while it does", name, list(read.watch.field_ids))
            return []
        return values

    def _count_xids(self, values: list[tuple[Entity, Any]]) -> None:
        assert self._decode is not None
        by_id = {gpu.gpu_id: gpu for gpu in self._gpus if gpu.connected and gpu.parent is None}
        for entity, value in sorted(values, key=lambda each: each[1].ts):
            number, status = self._decode(value)
            instance = self._mig.get(entity)
            gpu = by_id.get(instance.gpu_id if instance is not None else entity[1])
            if gpu is None or status != OK or number is None:
                continue
            where = f" (GPU instance {instance.instance_id})" if instance is not None else ""
            self._xid.count(gpu.info.uuid, gpu.info.index, int(number), where)

    def _log_down(self, session: DcgmSession, gpu: _Gpu, statuses: set[str]) -> None:
        key = f"down-{gpu.info.uuid}"
        if key in self._logged:
            return
        if statuses == {STALE} or statuses == {STALE, BLANK}:
            why = "DCGM's values stopped updating"
        elif session.gpu_lost(gpu.gpu_id) or "DCGM_ST_GPU_IS_LOST" in statuses:
            why = "DCGM reports it lost"
        else:
            why = f"none of its device fields has a value ({', '.join(sorted(statuses)) or 'no answer'})"
        self.log_once(key, logging.WARNING, "GPU %d (%s): %s; it is reported down until its values come back", gpu.info.index, gpu.info.uuid, why, extra=gpu_fields(gpu.info.index, gpu.info.uuid))

    def _sample(self, gpu: _Gpu, values: list[Any], windows: dict[tuple[Entity, int], list[Any]], now: float) -> GpuSample:
        assert self._decode is not None
        sample = GpuSample(device=gpu.info, timestamp=now)
        health_values: dict[str, float] = {}
        cycle_values: dict[str, float] = {}
        link_errors: list[tuple[int, str, float]] = []
        for raw in values:
            resolved = self._by_id.get(raw.fieldId)
            if resolved is None:
                continue
            spec = resolved.spec
            number, status = self._decode(raw)
            if status == OK and not gpu.clocks.observe(raw.fieldId, raw.ts, now) and gpu.clocks.stale(raw.fieldId, now, self._stale_limit(spec.cadence)):
                status = STALE
            gpu.readings[raw.fieldId] = FieldReading(number if status == OK else None, status)
            if status != OK or number is None:
                continue
            if spec.target == POWER_LIMIT_TARGET:
                if number * spec.scale != gpu.info.power_limit_watts:
                    gpu.info = dataclasses.replace(gpu.info, power_limit_watts=number * spec.scale)
                sample.device = gpu.info
            elif spec.target.startswith(HEALTH_PREFIX):
                health_values[spec.target.removeprefix(HEALTH_PREFIX)] = number * spec.scale
            elif spec.target.startswith(CYCLES_PREFIX):
                cycle_values[spec.target.removeprefix(CYCLES_PREFIX)] = number * spec.scale
            elif spec.target.startswith(NVLINK_LINK_PREFIX):
                link, kind = spec.target.removeprefix(NVLINK_LINK_PREFIX).split(":")
                link_errors.append((int(link), kind, number))
            elif spec.target in BOOLEAN_TARGETS:
                setattr(sample, spec.target, bool(number))
            elif spec.target in INTEGER_TARGETS:
                setattr(sample, spec.target, int(number))
            else:
                setattr(sample, spec.target, number * spec.scale)
        sample.health = health(health_values, self._nvlink.get(gpu.gpu_id) if gpu.parent is None else None, link_errors)
        sample.cycles = Cycles(**cycle_values)
        profiling: dict[str, float] = {}
        for field_id in sorted(gpu.profiling.watched):
            spec = self._by_id[field_id].spec
            mean, status = self._profiling_window(gpu, field_id, windows.get((gpu.entity, field_id), []), now)
            gpu.readings[field_id] = FieldReading(mean.value if mean is not None else None, status)
            if mean is None:
                continue
            key = spec.target.split(":", 1)[1]
            scaled = max(0.0, mean.value * spec.scale)
            profiling[key] = min(scaled, 1.0) if key in PROFILING_RATIOS else scaled
            if field_id == SM_ACTIVE_ID:
                sample.window_seconds = mean.seconds
        if gpu.parent is None:
            sample.xid_errors = self._xid.counts(gpu.info.uuid)
            sample.last_xid = self._xid.last(gpu.info.uuid)
            sample.gpu_utilization_window = self._utilization_window(windows.get((gpu.entity, UTILIZATION_WINDOW_KEY), []))
        sample.profiling = Profiling(**profiling)
        if gpu.profiling.watched:
            sample.profiling_multiplexed = gpu.profiling.one_pass_limited and (gpu.contention.multiplexed or _several_passes(gpu.profiling))
        return sample

    def _profiling_window(self, gpu: _Gpu, field_id: int, batch: list[Any], now: float) -> tuple[WindowMean | None, str]:
        """The poll window's mean of one profiling field and its status; with no new sample the previous
        window's mean stands until the field goes stale."""
        assert self._decode is not None
        if self._paused:
            gpu.windows.pop(field_id, None)  # nothing from before the pause is served after it
            return None, PAUSED
        previous = gpu.clocks.last_ts(field_id)
        fresh = [raw for raw in batch if previous is None or raw.ts > previous]
        if not fresh:
            if gpu.clocks.known(field_id) and gpu.clocks.stale(field_id, now, self._stale_limit(PROFILING)):
                gpu.windows.pop(field_id, None)
                return None, STALE
            last = gpu.windows.get(field_id)
            reading = gpu.readings.get(field_id)
            return (last, OK) if last is not None else (None, reading.status if reading is not None else BLANK)
        samples, statuses = [], []
        for raw in fresh:
            number, status = self._decode(raw)
            if status == OK and raw.ts < self._resume_guard_us:
                status = PAUSED  # sampled before the resume took effect
            samples.append(Sample(raw.ts, number if status == OK else None))
            statuses.append(status)
        watch_us = int(self.collect_interval * 1_000_000)
        interval = gpu.clocks.learn_interval(field_id, update_interval_us([each.ts for each in samples], previous), watch_us)
        if interval < 0.9 * watch_us:
            self.log_once(
                f"faster-{field_id}",
                logging.INFO,
                "DCGM updates field %d every %.3gs, faster than the exporter's %.3gs watch (another client of the host engine watches it): each poll exports the mean of the samples in its window",
                field_id,
                interval / 1e6,
                self.collect_interval,
            )
        gpu.clocks.observe(field_id, fresh[-1].ts, now)
        mean = window_mean(samples if previous is not None else samples[-1:], previous, interval)
        if mean is None:
            gpu.windows.pop(field_id, None)
            return None, statuses[-1]
        gpu.windows[field_id] = mean
        return mean, OK

    def _stale_limit(self, cadence: str) -> float:
        interval = self.slow_interval if cadence == SLOW else self.collect_interval
        return 3 * interval + 2.0

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
        """The last raw reading of every field read, by GPU UUID and field ID."""
        return {gpu.info.uuid: dict(gpu.readings) for gpu in self._gpus}


def _several_passes(state: GpuProfiling) -> bool:
    """Whether the watched fields span several metric groups of one major ID (--dcgm.multi-pass)."""
    keys = {(group.major, group.minor) for group in state.groups if group.field_ids & state.watched}
    majors = [major for major, _minor in keys]
    return len(majors) != len(set(majors))
