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


def record_trace(backend: Backend, gpu: int, duration: float, interval: float, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Sample ``backend`` every ``interval`` for ``duration`` seconds and return the trace object.

    ``clock`` must be the backend's clock: a reading never comes sooner than ``interval`` after the
    previous reading's timestamp, so every GPM window is longer than the 100 ms GPM needs.
    """
    devices = backend.start()
    try:
        if not 0 <= gpu < len(devices):
            raise BackendUnavailable(f"--gpu {gpu}: this machine has GPUs 0..{len(devices) - 1}")
        previous = backend.collect()[gpu].timestamp  # primes the GPM sample pair and the driver samples: the first window starts here
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
        trace = record_trace(NvmlBackend(slow_interval=args.interval, engine_every_poll=True), args.gpu, args.duration, args.interval)
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
