"""The background poller: samples the backend every collect interval, derives, renders, and publishes
an immutable Snapshot with its metrics text. Scrapes only ever read the latest Snapshot; they never
call the backend and, while it is fresh, never render.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gpueff.apps.monitor import AppMonitor
from gpueff.attribution.declared import declared_identities, declared_pods
from gpueff.attribution.doctor import Doctor
from gpueff.attribution.jobs import JobKey, JobResolver, memberships
from gpueff.attribution.kubernetes.attribution import Attributor
from gpueff.backends.base import Backend, CollectSettings
from gpueff.config.values import MAX_DURATION
from gpueff.logs import fields, one_line
from gpueff.peaks import DERIVED_FROM_DEVICE, peak_for, unknown_model_note
from gpueff.pipeline.peers import across_gpus
from gpueff.pipeline.processes import gpu_processes
from gpueff.pipeline.split import Sharing
from gpueff.pipeline.tracker import Trackers
from gpueff.sample import DeviceInfo, GpuSample, down_sample
from gpueff.selfstats import ProcessStats, read_process_stats
from gpueff.settings import Config
from gpueff.snapshot import GpuState, PollSettings, Snapshot

log = logging.getLogger(__name__)

# The poller renders each snapshot in one go (23 ms at 256 GPUs) while holding the GIL; a scrape
# arriving meanwhile waits up to one switch interval each time its thread takes the GIL back: when
# the selector wakes it and after recv (each system call lets the GIL go; by the time sendmsg returns
# the answer is with the kernel). At Python's default 5 ms the first-after-poll p99 at 256 replayed
# GPUs was 7.4-7.7 ms, at 0.5 ms 2.7-3.1 ms; at 0.1 ms the two hand-overs cost at most 0.2 ms
# (docs/benchmarks.md). The interval only matters while a
# thread waits for the GIL, so an idle exporter pays nothing for it.
GIL_SWITCH_INTERVAL = 0.0001
PROCESS_STATS_EVERY = 1.0  # seconds: the daemon's own /proc figures are read at most this often


class Poller:
    def __init__(
        self,
        backend: Backend,
        config: Config,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
        process_stats: Callable[[], ProcessStats | None] = read_process_stats,
    ) -> None:
        self.backend = backend
        self.config = config
        self.clock = clock
        self.wall_clock = wall_clock
        self.timer = timer  # measures each poll's duration
        self.process_stats = process_stats
        self.ready = threading.Event()
        self.attributor = Attributor(clock, wall_clock)  # Kubernetes pod attribution, on its own thread
        self._devices: list[DeviceInfo] = []
        self._trackers = Trackers()  # every GPU's state across polls
        self._models_seen: set[str] = set()  # GPU models whose peaks were looked up (one log line per unknown one)
        self._snapshot: Snapshot | None = None
        self._polls = 0
        self._duration_sum = 0.0
        self._own_errors = 0
        self._last_success: float | None = None
        self._last_error: str | None = None
        self._last_poll_error: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop and set_config
        self._thread: threading.Thread | None = None
        self._subscribers: list[Callable[[Snapshot], None]] = []
        self._process: tuple[float, ProcessStats | None] | None = None  # (when read, what)
        self._config_parts = _ConfigParts(config)
        self.apps = AppMonitor(config.apps_settings, clock)  # scrapes apps on their own threads
        self._sharing: Sharing | None = None
        self._jobs = JobResolver(Path(config.proc_root), config.process_names)  # which job holds each GPU (pipeline/peers.py)
        self._doctor = Doctor(Path(config.proc_root))  # which path named each GPU's owner, or why none did
        self.backend.configure(collect_settings(config))

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def subscribe(self, receive: Callable[[Snapshot], None]) -> None:
        """Hand each new snapshot to ``receive`` on the poller's thread, before it is published."""
        self._subscribers.append(receive)

    def set_config(self, config: Config) -> None:
        """Take a reloaded config; the next poll uses it."""
        self.config = config
        self._models_seen.clear()  # new peaks: say again which models still have none
        self.backend.configure(collect_settings(config))
        self.apps.configure(config.apps_settings)
        self._wake.set()  # the wait is re-timed with the new collect_interval (no poll is forced)

    def start(self, devices: list[DeviceInfo]) -> None:
        self._devices = list(devices)
        sys.setswitchinterval(GIL_SWITCH_INTERVAL)
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)
        self._thread.start()
        self.apps.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.attributor.close()
        self.apps.stop()

    def _run(self) -> None:
        """Poll until stopped. Nothing ends the thread but ``stop``: a failure is logged on one line,
        counted in gpueff_collect_errors_total, and polling goes on. A reload never forces a poll:
        it re-times the wait from the last poll's start with the new collect_interval, so a storm of
        SIGHUPs adds no polls and polls stay an interval apart (GPM needs 100 ms between samples)."""
        next_tick = self.clock()
        while not self._stop.is_set():
            started = self.clock()
            try:
                try:
                    self.poll_once()
                    self._last_poll_error = None
                except Exception as error:  # the data goes stale and is served as such
                    self._poll_failed(error)
                next_tick = self._next_tick(next_tick + self.config.collect_interval)
            except Exception as error:  # a bug outside the poll itself: try again in a second
                self._poll_failed(error)
                next_tick = self.clock() + 1.0
            while not self._stop.is_set() and (left := next_tick - self.clock()) > 0:
                if self._wake.wait(min(left, MAX_DURATION)):  # a reload (or stop)
                    self._wake.clear()
                    next_tick = started + self.config.collect_interval  # already past: poll now

    def _next_tick(self, due: float) -> float:
        """``due``, or one interval from now where a poll overran it (missed ticks are skipped, not burst)."""
        now = self.clock()
        return due if due >= now else now + self.config.collect_interval

    def _poll_failed(self, error: Exception) -> None:
        self._own_errors += 1
        message = f"{type(error).__name__}: {error}"
        if message != self._last_poll_error:
            log.error("a poll failed; the served data goes stale until a poll works again: %s", one_line(error))
        self._last_poll_error = message

    def is_ready(self) -> bool:
        """/-/ready: GPU data is served: a GPU source has started (not still waiting for the driver
        under --wait-for-driver) and a snapshot exists that is not stale (the poller keeps polling)."""
        snapshot = self._snapshot
        return not self.backend.waiting and snapshot is not None and self.clock() - snapshot.taken_monotonic <= snapshot.settings.stale_after

    def _collect(self) -> list[GpuSample]:
        try:
            samples = self.backend.collect()
        except Exception as error:  # a backend bug must not kill the poller or serve stale data
            self._own_errors += 1
            message = f"{type(error).__name__}: {error}"
            if message != self._last_error:
                log.exception("collecting from the %s backend failed; every GPU is reported down until it works again", self.backend.name, extra=fields(backend=self.backend.name))
            self._last_error = message
            now = self.clock()
            return [down_sample(device, now) for device in self._devices]
        if self._last_error is not None:
            log.info("collecting from the %s backend works again", self.backend.name, extra=fields(backend=self.backend.name))
            self._last_error = None
        self._devices = [sample.device for sample in samples]
        for sample in samples:
            model = sample.device.name
            if model not in self._models_seen:
                self._models_seen.add(model)
                peak = peak_for(model, self.config.peaks, sample.device)
                if peak is None:
                    log.warning("%s", unknown_model_note(model))
                elif peak.source.startswith(DERIVED_FROM_DEVICE):
                    log.info("GPU model %r is not in the built-in peaks table: its peaks are %s (docs/peaks.md)", model, peak.source)
        return samples

    def _memberships(self, samples: list[GpuSample], proc_root: Path, names: bool) -> dict[str, list[JobKey]]:
        """The jobs that hold each GPU (attribution/jobs.py), by a resolver made anew when /proc
        moves or process_names changes."""
        if self._jobs.proc_root != proc_root or self._jobs.names != names:
            self._jobs = JobResolver(proc_root, names)
        return memberships(samples, self._jobs)

    @property
    def tracked_gpus(self) -> int:
        """How many GPUs have state kept across polls (those of the last poll)."""
        return len(self._trackers)

    def _sharing_for(self, config: Config, declared: bool = False) -> Sharing | None:
        """The process identification of the fair split, made anew (with every GPU's ledger) when
        it is switched on, its /proc moves or process_names changes. A backend that declares its
        GPUs' owners (the demo) has them split whether or not sharing.enabled."""
        settings = config.sharing
        if not settings.enabled and not declared:
            self._sharing = None
        elif self._sharing is None or str(self._sharing.resolver.proc_root) != config.proc_root or self._sharing.resolver.names != config.process_names:
            self._sharing = Sharing(Path(config.proc_root), config.process_names)
            self._trackers.restart_split()
        return self._sharing

    def _process_stats(self) -> ProcessStats | None:
        """The daemon's own /proc figures, read again once ``PROCESS_STATS_EVERY`` has passed
        (three file reads a poll were a tenth of a one-GPU poll at 100 ms)."""
        now = self.clock()
        if self._process is None or now - self._process[0] >= PROCESS_STATS_EVERY:
            self._process = (now, self.process_stats())
        return self._process[1]

    def poll_once(self) -> Snapshot:
        started = self.timer()
        samples = self._collect()
        config = self.config
        if self._config_parts.config is not config:
            self._config_parts = _ConfigParts(config)
        parts = self._config_parts
        assigned = self.attributor.owners(config.kubernetes, samples, self.clock(), parts.proc_root)  # the kubelet's
        declared = self.backend.declared_owners()  # a replay's demo owners: its processes are known from them, never from /proc
        sharing = self._sharing_for(config, bool(declared))
        owners = assigned
        if declared:
            owners = {**declared_pods(declared), **assigned}  # a kubelet's answer says which pods hold the GPUs it names
            identities = declared_identities(samples, declared, config.process_names)
        else:
            identities = sharing.identities(samples) if sharing is not None else {}
        if self._doctor.proc_root != parts.proc_root:
            self._doctor = Doctor(parts.proc_root)
        seen = identities if sharing is not None or declared else self._doctor.identities(samples)  # the split's (or the declared ones), else the doctor's own
        attribution = self._doctor.diagnose(samples, assigned, self.attributor.kubelet(), parts.switches, seen, declared)
        per_gpu = [(sample, *self._trackers.of(sample.device.uuid).advance(sample, parts.tracker_settings, sharing, identities)) for sample in samples]
        self._trackers.forget({sample.device.uuid for sample in samples})
        # the cross-GPU stage, pure: each multi-GPU job's GPUs judged together (pipeline/peers.py)
        membership = self._memberships(samples, parts.proc_root, config.process_names)
        judgement, judged = across_gpus([(sample, derived, totals) for sample, derived, totals, _ in per_gpu], membership, self._jobs.launcher_names)
        states = []
        for (sample, _, totals, split), (derived, after) in zip(per_gpu, judged, strict=True):
            uuid = sample.device.uuid
            if after is not totals:
                self._trackers.of(uuid).keep(after)
            states.append(GpuState(sample, derived, after, owners.get(uuid), split, attribution[uuid], gpu_processes(sample, seen, config.process_names)))
        duration = self.timer() - started
        self._polls += 1
        self._duration_sum += duration
        if any(sample.up for sample in samples):
            self._last_success = self.wall_clock()
        snapshot = Snapshot(
            sequence=self._polls,
            gpus=tuple(states),
            taken_monotonic=self.clock(),
            settings=parts.poll_settings,
            backend_name=self.backend.name,
            replayed=self.backend.replayed,
            polls_total=self._polls,
            collect_duration_sum_seconds=self._duration_sum,
            errors_total=self._own_errors + self.backend.errors_total,
            last_success_wall=self._last_success,
            apps=self.apps.update(samples, self.clock(), owners, self._jobs.owners),
            attribution=self.attributor.health(),
            process=self._process_stats(),
            jobs=judgement.jobs,
        )
        for receive in self._subscribers:
            receive(snapshot)
        self._snapshot = snapshot
        if not self.ready.is_set():
            self.ready.set()
        return snapshot


class _ConfigParts:
    """What each poll needs made from its config, made once per config (a reload brings a new one)."""

    __slots__ = ("config", "poll_settings", "proc_root", "switches", "tracker_settings")

    def __init__(self, config: Config) -> None:
        self.config = config
        self.poll_settings = poll_settings(config)
        self.proc_root = Path(config.proc_root)
        self.tracker_settings = config.tracker_settings
        self.switches = config.attribution_switches


def poll_settings(config: Config) -> PollSettings:
    """What a snapshot's readers need of the config it was polled under."""
    return PollSettings(config.collect_interval, config.effective_stale_after, config.kubernetes.pod_labels, config.price_per_gpu_hour, config.currency, config.collectors.off, config.collectors.exporter_metrics)


def collect_settings(config: Config) -> CollectSettings:
    """What the backend follows of the config: per-process samples for the fair split and for the
    per_process collector's busy shares."""
    off = config.collectors.off
    return CollectSettings(config.collect_interval, config.slow_collect_interval, config.sharing.enabled or "per_process" not in off, off)

