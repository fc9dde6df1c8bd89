"""Live GPUs through DCGM: profiling fields 1001-1016 and the device fields, in the GPM backend's shape.

NOT YET RUN AGAINST A REAL DCGM: written from DCGM's Python bindings and C sources and tested against a
fake of them (tests/fake_dcgm). See docs/dcgm.md.

One DCGM group holds the GPUs; device fields are watched at the collect interval, costly ones (energy,
ECC, remapped rows) at the slow interval, and profiling fields at the collect interval in field groups of
their own (chosen per GPU by profiling), so a refused profiling watch leaves the rest working. Each
poll reads the latest cached values of every GPU and field in one dcgmEntitiesGetLatestValues call.
Blank values and values whose timestamp stopped moving are missing, never 0; a GPU none of whose device
fields has a value (a lost GPU reads blank with status OK) is down. A lost host engine turns every GPU
down and is reconnected with back-off.

The jobs live in their own modules of this package: bindings (loading), session (the connection, groups,
watches), resolve (field IDs and names), decode (values), freshness (staleness and windows), profiling
(which profiling fields to watch), xid (Xid events), fields (the field table).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.backends.backoff import Backoff
from exporter.backends.base import Backend, BackendUnavailable, CollectSettings, text
from exporter.backends.dcgm.bindings import Bindings, load_bindings
from exporter.backends.dcgm.decode import BLANK, OK, STALE, Decoder, FieldReading, int32_or_none
from exporter.backends.dcgm.fields import (
    BOOLEAN_TARGETS,
    EVENT,
    FAST,
    INTEGER_TARGETS,
    PROFILING,
    SLOW,
    SM_ACTIVE_ID,
    STATIC,
)
from exporter.backends.dcgm.freshness import FieldClocks
from exporter.backends.dcgm.profiling import GpuProfiling
from exporter.backends.dcgm.profiling import plan as plan_profiling
from exporter.backends.dcgm.profiling import watch as watch_profiling
from exporter.backends.dcgm.resolve import ResolvedField, resolve_fields
from exporter.backends.dcgm.session import DcgmSession
from exporter.backends.dcgm.xid import XidCounter
from exporter.metrics import PROFILING_RATIOS
from exporter.sample import DeviceInfo, GpuSample, Profiling, down_sample

log = logging.getLogger(__name__)

RECONNECT_BACKOFF = (1.0, 60.0)  # first and largest wait between reconnection attempts
PROFILING_RETRY = 60.0  # seconds between tries of a profiling watch refused as a whole (e.g. DCGM_ST_IN_USE)
PAUSED = "paused"

__all__ = ["DcgmBackend", "FieldReading", "ResolvedField"]


@dataclass
class _Gpu:
    gpu_id: int  # DCGM's GPU ID
    info: DeviceInfo
    connected: bool = True
    clocks: FieldClocks = field(default_factory=FieldClocks)
    readings: dict[int, FieldReading] = field(default_factory=dict)
    profiling: GpuProfiling = field(default_factory=GpuProfiling)


def _refused_whole(gpu: _Gpu) -> bool:
    """Whether DCGM refused every profiling field chosen for the GPU (so trying again watches nothing twice)."""
    return bool(gpu.connected and gpu.profiling.chosen and not gpu.profiling.watched)


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
        multi_pass: bool = False,
        pause_file: str | None = None,
        wall_clock: Callable[[], float] = time.time,
        name_token: Callable[[], str] = lambda: secrets.token_hex(6),
    ) -> None:
        super().__init__()
        self.bindings_path = bindings_path
        self.host = host
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
        self._by_id: dict[int, ResolvedField] = {}  # every field read per poll
        self._read_ids: list[int] = []
        self._gpus: list[_Gpu] = []
        self._entities: list[Any] = []
        self._xid = XidCounter()
        self._reconnect_due: float | None = None
        self._backoff = Backoff(*RECONNECT_BACKOFF)
        self._paused = False
        self._all_gpus_group: Any = None
        self._profiling_groups = 0  # numbers the profiling groups' names
        self._profiling_retry_due: float | None = None
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
        session = DcgmSession(bindings, self.host, self.name_token)
        self.session = session
        self._decode = Decoder(bindings, session.status_name)
        self.fields, self.unknown_fields = resolve_fields(bindings.fields)
        try:
            self._connect(session)
        except session.error as error:
            session.close()
            where = f"nv-hostengine at {self.host}" if self.host else "an embedded DCGM host engine"
            raise BackendUnavailable(f"cannot use {where} through the bindings in {bindings.path}: {session.error_name(error)} ({error})") from None
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
        group = session.group(gpu_ids, "gpus")
        self._entities = session.entities(gpu_ids)
        self._by_id = {}
        for cadence, interval in ((FAST, self.collect_interval), (SLOW, self.slow_interval)):
            resolved = [f for f in self.fields if f.spec.cadence == cadence or (cadence == FAST and f.spec.cadence == EVENT)]
            if resolved:
                session.watch(group, [f.field_id for f in resolved], interval, cadence)
                self._by_id.update({f.field_id: f for f in resolved})
        self._all_gpus_group = group
        self._watch_profiling(session, [gpu for gpu in self._gpus if gpu.connected])
        if self._paused:
            session.pause_profiling()  # a new embedded engine starts unpaused
        session.update_all()

    def _watch_profiling(self, session: DcgmSession, gpus: list[_Gpu]) -> None:
        """Choose and watch the profiling fields of ``gpus``; a refusal that no smaller watch avoids
        (another profiler holds the counters, say) is tried again every PROFILING_RETRY seconds."""
        assert self._decode is not None
        profiling = {f.field_id: f for f in self.fields if f.spec.cadence == PROFILING}
        for gpu in gpus:
            gpu.profiling = plan_profiling(session, gpu.gpu_id, frozenset(profiling), self.multi_pass, self._decode)
        # DCGM watches profiling fields only on a group of identical GPUs; one group per model and choice.
        partitions: dict[tuple[str, frozenset[int]], list[_Gpu]] = {}
        for gpu in gpus:
            if gpu.profiling.chosen:
                partitions.setdefault((gpu.info.name, gpu.profiling.chosen), []).append(gpu)
        every_gpu = sorted(gpu.gpu_id for gpu in self._gpus if gpu.connected)
        for members in partitions.values():
            ids = [gpu.gpu_id for gpu in members]
            self._profiling_groups += 1
            label = f"prof{self._profiling_groups}"  # names stay unique across retries
            shared = sorted(ids) == every_gpu
            group = self._all_gpus_group if shared else session.group(ids, label)
            watch_profiling(session, group, [gpu.profiling for gpu in members], self.collect_interval, label)
            if not members[0].profiling.watched and not shared:
                session.drop_group(group)  # DCGM allows few groups: none is kept for a refused watch
            self._by_id.update({f: profiling[f] for gpu in members for f in gpu.profiling.watched})
        self._read_ids = list(self._by_id)
        self._report_profiling(gpus)
        self._profiling_retry_due = self.clock() + PROFILING_RETRY if any(_refused_whole(gpu) for gpu in gpus) else None

    def _retry_profiling(self, session: DcgmSession) -> None:
        self._profiling_retry_due = None
        retry = [gpu for gpu in self._gpus if gpu.connected and _refused_whole(gpu)]
        log.debug("trying the refused DCGM profiling watch again on GPU(s) %s", [gpu.info.index for gpu in retry])
        self._watch_profiling(session, retry)

    def _report_profiling(self, gpus: list[_Gpu]) -> None:
        reasons = []
        for gpu in gpus:
            state = gpu.profiling
            label = f"GPU {gpu.info.index} ({gpu.info.name})"
            if SM_ACTIVE_ID in state.watched:
                outside, refused = sorted(state.supported - state.chosen), sorted(state.refused)
                notes = ([f"outside the single pass (--dcgm.multi-pass watches them): {outside}"] if outside else []) + ([f"refused: {refused}"] if refused else [])
                log.info("%s: DCGM profiling fields watched %s%s", label, sorted(state.watched), "".join(f"; {note}" for note in notes))
                continue
            reason = state.not_supported or state.refused.get(SM_ACTIVE_ID) or "DCGM does not list SM activity (1002) for this GPU"
            reasons.append(reason)
            self.log_once(f"profiling-{gpu.info.uuid}-{reason}", logging.WARNING, "%s: no SM activity from DCGM (%s): SM activity and the other profiling metrics are missing there; gpueff_profiling_available is 0", label, reason)
        connected = [gpu for gpu in self._gpus if gpu.connected]
        if any(SM_ACTIVE_ID in gpu.profiling.watched for gpu in connected):
            self.profiling_refused = None
        elif reasons:
            self.profiling_refused = reasons[0]

    def _open_gpus(self, session: DcgmSession, gpu_ids: list[int]) -> None:
        value_module = session.bindings.value
        static = self._read_live(session, gpu_ids, [f for f in self.fields if f.spec.cadence == STATIC])
        known = {gpu.info.uuid: gpu for gpu in self._gpus}
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
        self._xid.forget_baseline()
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
        if not self.pause_file:
            return
        wanted = os.path.exists(self.pause_file)
        if wanted == self._paused:
            return
        try:
            session.pause_profiling() if wanted else session.resume_profiling()
        except session.error as error:
            self.log_once(f"pause-{wanted}-{error}", logging.WARNING, "cannot %s DCGM profiling (%s)", "pause" if wanted else "resume", session.error_name(error))
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
            values = session.latest(self._entities, self._read_ids)
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
        for gpu in self._gpus:
            if not gpu.connected:
                samples.append(down_sample(gpu.info, now))
                continue
            sample = self._sample(gpu, by_gpu.get(gpu.gpu_id, []), now)
            statuses = {reading.status for field_id, reading in gpu.readings.items() if field_id in fast}
            if OK not in statuses:
                self._log_down(session, gpu, statuses)
                sample = down_sample(gpu.info, now)
            else:
                self._logged.discard(f"down-{gpu.info.uuid}")
            samples.append(sample)
        return samples

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
        self.log_once(key, logging.WARNING, "GPU %d (%s): %s; it is reported down until its values come back", gpu.info.index, gpu.info.uuid, why)

    def _sample(self, gpu: _Gpu, values: list[Any], now: float) -> GpuSample:
        assert self._decode is not None
        sample = GpuSample(device=gpu.info, timestamp=now)
        profiling: dict[str, float] = {}
        for raw in values:
            resolved = self._by_id.get(raw.fieldId)
            if resolved is None:
                continue
            spec = resolved.spec
            number, status = self._decode(raw)
            if spec.cadence == EVENT:
                self._xid.observe(gpu.info.uuid, gpu.info.index, number if status == OK else None, raw.ts)
                gpu.readings[raw.fieldId] = FieldReading(number, status)
                continue
            if spec.cadence == PROFILING and raw.fieldId not in gpu.profiling.watched:
                continue  # watched on other GPUs only: DCGM answers DCGM_ST_NOT_WATCHED here
            if status == OK and not gpu.clocks.observe(raw.fieldId, raw.ts, now) and gpu.clocks.stale(raw.fieldId, now, self._stale_limit(spec.cadence)):
                status = STALE
            if spec.cadence == PROFILING and (self._paused or (status == OK and raw.ts < self._resume_guard_us)):
                status = PAUSED
            gpu.readings[raw.fieldId] = FieldReading(number if status == OK else None, status)
            if status != OK or number is None:
                continue
            if spec.target.startswith("profiling:"):
                key = spec.target.split(":", 1)[1]
                scaled = max(0.0, number * spec.scale)
                profiling[key] = min(scaled, 1.0) if key in PROFILING_RATIOS else scaled
                if raw.fieldId == SM_ACTIVE_ID:
                    sample.window_seconds = gpu.clocks.window(SM_ACTIVE_ID, self.collect_interval)
            elif spec.target in BOOLEAN_TARGETS:
                setattr(sample, spec.target, bool(number))
            elif spec.target in INTEGER_TARGETS:
                setattr(sample, spec.target, int(number))
            else:
                setattr(sample, spec.target, number * spec.scale)
        sample.xid_errors = self._xid.counts(gpu.info.uuid)
        sample.profiling = Profiling(**profiling)
        return sample

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
