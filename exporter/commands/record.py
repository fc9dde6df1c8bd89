"""``record``: write one GPU's readings to a gpu-trace/1 file, for --replay anywhere."""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporter.backends.base import Backend, BackendUnavailable
from exporter.trace import FORMAT, TraceError, parse_trace, record_from_sample

log = logging.getLogger(__name__)


class DriverSamples:
    """The mean of the driver's own utilization samples inside each recording window.

    ``nvmlDeviceGetSamples`` (2.7-2.9 ms a call on an H100) is too dear for the daemon's poll, but a
    recording keeps it as evidence: ``util_gpu_window`` says what the window-mean utilization really
    was, to check GPM ``GRAPHICS_UTIL`` against. Where the call is missing or refused, it is left out.
    (The driver's SM-clock samples, NVML_PROCESSOR_CLK_SAMPLES, answered nothing on an H100 with
    driver 580.159.04, so they are not asked for.)
    """

    def __init__(self, backend: Backend, gpu: int) -> None:
        nvml: Any = getattr(backend, "nvml", None)
        self._nvml = nvml
        self._call = getattr(nvml, "nvmlDeviceGetSamples", None) if nvml is not None else None
        self._handle = None
        self._seen: int | None = None  # the newest sample's timestamp; None until primed
        if self._call is not None:
            try:
                self._handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
            except nvml.NVMLError:
                self._call = None

    def window_mean(self) -> dict[str, float]:
        """The mean of the samples taken since the last call; {} where the driver cannot tell."""
        if self._call is None:
            return {}
        nvml: Any = self._nvml
        try:
            _, samples = self._call(self._handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, self._seen or 0)
        except nvml.NVMLError:  # NOT_FOUND: no sample since the last call
            return {}
        primed, seen = self._seen is not None, self._seen or 0
        fresh = [sample for sample in samples if sample.timeStamp > seen]
        if fresh:
            self._seen = max(sample.timeStamp for sample in fresh)
        elif self._seen is None:
            self._seen = 0
        if not primed or not fresh:
            return {}
        return {"util_gpu_window": sum(float(sample.sampleValue.uiVal) for sample in fresh) / len(fresh)}


def record_trace(backend: Backend, gpu: int, duration: float, interval: float, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Sample ``backend`` every ``interval`` for ``duration`` seconds and return the trace object.

    ``clock`` must be the backend's clock: a reading never comes sooner than ``interval`` after the
    previous reading's timestamp, so every GPM window is longer than the 100 ms GPM needs.
    """
    devices = backend.start()
    try:
        if not 0 <= gpu < len(devices):
            raise BackendUnavailable(f"--gpu {gpu}: this machine has GPUs 0..{len(devices) - 1}")
        driver = DriverSamples(backend, gpu)
        previous = backend.collect()[gpu].timestamp  # primes the GPM sample pair: the first profiling window starts here
        driver.window_mean()  # and the driver samples' window
        started = clock()
        samples = []
        next_tick = started
        while True:
            next_tick = max(next_tick + interval, previous + interval)
            sleep(max(0.0, next_tick - clock()))
            reading = backend.collect()[gpu]
            previous = reading.timestamp
            if not reading.up:
                raise BackendUnavailable(f"GPU {gpu} stopped answering while recording")
            record = record_from_sample(reading, reading.timestamp - started)
            record.update(driver.window_mean())
            samples.append(record)
            if reading.timestamp - started >= duration:
                break
        device = devices[gpu]
        return {
            "format": FORMAT,
            "gpu": {
                "name": device.name,
                "driver": device.driver,
                "max_sm_clock_mhz": device.max_sm_clock_mhz or 0,
                "power_limit_mw": round((device.power_limit_watts or 0) * 1000),
                "sm_count": device.sm_count or 0,
                "uuid": device.uuid,
                "pci_bus_id": device.pci_bus_id,
            },
            "interval_s": interval,
            "samples": samples,
        }
    finally:
        backend.close()


def format_trace(trace: dict[str, Any]) -> str:
    """A trace as JSON text with one sample a line: compact, and still readable and diffable."""
    head = {key: value for key, value in trace.items() if key != "samples"}
    lines = [json.dumps(sample, separators=(",", ":")) for sample in trace["samples"]]
    return json.dumps(head, indent=1)[:-2] + ',\n "samples": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"


def record(args: argparse.Namespace) -> int:
    from exporter.backends.nvml.backend import NvmlBackend

    try:
        trace = record_trace(NvmlBackend(slow_interval=args.interval), args.gpu, args.duration, args.interval)
    except BackendUnavailable as error:
        log.error("%s: record reads a live GPU through NVML; run it where the NVIDIA driver is", error)
        return 2
    truth = {}
    if args.truth_tflops is not None:
        truth["tflops"] = args.truth_tflops
    if args.truth_tbps is not None:
        truth["tbps"] = args.truth_tbps
    trace.update(workload=args.workload, description=args.description, truth=truth)
    try:
        parse_trace(trace, args.output)  # what we write must load back
    except TraceError as error:
        log.error("the recording cannot be written as a valid trace: %s", error)
        return 2
    try:
        Path(args.output).write_text(format_trace(trace), encoding="utf-8")
    except OSError as error:
        log.error("cannot write the trace to %s: %s", args.output, error.strerror or error)
        return 2
    log.info("wrote %d samples of GPU %d to %s", len(trace["samples"]), args.gpu, args.output)
    return 0
