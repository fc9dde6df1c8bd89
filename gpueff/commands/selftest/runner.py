"""Runs the planted workloads on one GPU while the daemon's own NVML backend samples it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpueff.backends.base import Backend
from gpueff.commands.selftest.checks import Reading
from gpueff.commands.selftest.workloads import WORKLOADS, Engine, SelftestUnavailable
from gpueff.logs import gpu_fields
from gpueff.sample import DeviceInfo, GpuSample

log = logging.getLogger(__name__)


class Sampler:
    """Collects the backend every ``interval`` in a thread and keeps GPU ``gpu``'s up samples."""

    def __init__(self, backend: Backend, gpu: int, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.backend, self.gpu, self.interval, self.clock = backend, gpu, interval, clock
        self.samples: list[GpuSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="selftest-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        next_tick = self.clock()
        while not self._stop.is_set():
            try:
                sample = self.backend.collect()[self.gpu]
            except Exception:  # a failed read must not end the sampling: the checks report missing samples
                log.exception("sampling GPU %d failed", self.gpu, extra=gpu_fields(self.gpu))
            else:
                if sample.up:
                    with self._lock:
                        self.samples.append(sample)
            next_tick += self.interval
            self._stop.wait(max(0.0, next_tick - self.clock()))

    def within(self, start: float, end: float) -> list[GpuSample]:
        """The samples whose whole profiling window lies between ``start`` and ``end``."""
        with self._lock:
            samples = list(self.samples)
        return [s for s in samples if s.window_seconds is not None and s.timestamp - s.window_seconds >= start and s.timestamp <= end]


def run_workloads(engine: Engine, sampler: Sampler, device: DeviceInfo, names: list[str], seconds: float, warmup: float) -> list[Reading]:
    """Each workload: a warm-up run, then a measured run whose window the samples must lie in."""
    readings = []
    for name in names:
        workload = WORKLOADS[name]
        log.info("running %s: %.1fs warm-up, %.1fs measured", name, warmup, seconds)
        try:
            if warmup > 0:
                workload(engine, warmup, device)
            started = sampler.clock()
            truth = workload(engine, seconds, device)
            ended = sampler.clock()
        except SelftestUnavailable as error:
            readings.append(Reading(name, [], error=f"skipped: {error}"))
            continue
        except Exception as error:  # e.g. out of GPU memory: report it and go on with the next workload
            log.error("workload %s failed: %s: %s", name, type(error).__name__, error)
            readings.append(Reading(name, [], error=f"failed: {type(error).__name__}: {error}"))
            continue
        finally:
            engine.release()
        time.sleep(0.05)  # lets a collect that began before ``ended`` finish
        readings.append(Reading(name, sampler.within(started, ended), truth))
    return readings
