"""``record``: write a GPU's readings (or every GPU's, from the same polls) to gpu-trace/1 files, for --replay anywhere."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import stat
import tempfile
import time
from collections.abc import Callable
from typing import Any

from exporter.backends.base import Backend, BackendUnavailable
from exporter.sample import DeviceInfo
from exporter.trace import FORMAT, TraceError, parse_trace, record_from_sample

log = logging.getLogger(__name__)


def record_trace(backend: Backend, gpu: int, duration: float, interval: float, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """One GPU's trace object: ``record_traces`` for that GPU alone."""
    return record_traces(backend, [gpu], duration, interval, sleep, clock)[0]


def record_traces(backend: Backend, gpus: list[int] | None, duration: float, interval: float, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> list[dict[str, Any]]:
    """Sample ``backend`` every ``interval`` for ``duration`` seconds; a trace object per GPU of
    ``gpus`` (None: every GPU), all from the same polls, so the GPUs of one job share their windows.

    ``clock`` must be the backend's clock: a reading never comes sooner than ``interval`` after the
    previous reading's timestamp, so every GPM window is longer than the 100 ms GPM needs.
    """
    devices = backend.start()
    try:
        chosen = list(range(len(devices))) if gpus is None else gpus
        for gpu in chosen:
            if not 0 <= gpu < len(devices):
                raise BackendUnavailable(f"--gpu {gpu}: this machine has GPUs 0..{len(devices) - 1}")
        previous = max(backend.collect()[gpu].timestamp for gpu in chosen)  # primes the GPM sample pairs and the driver samples: the first windows start here
        started = clock()
        samples: list[list[dict[str, Any]]] = [[] for _ in chosen]
        next_tick = started
        while True:
            next_tick = max(next_tick + interval, previous + interval)
            sleep(max(0.0, next_tick - clock()))
            readings = backend.collect()
            for gpu, kept in zip(chosen, samples, strict=True):
                reading = readings[gpu]
                if not reading.up:
                    raise BackendUnavailable(f"GPU {gpu} stopped answering while recording")
                kept.append(record_from_sample(reading, reading.timestamp - started))
            previous = readings[chosen[-1]].timestamp
            if readings[chosen[0]].timestamp - started >= duration:
                break
        return [_trace(devices[gpu], interval, kept) for gpu, kept in zip(chosen, samples, strict=True)]
    finally:
        backend.close()


def _trace(device: DeviceInfo, interval: float, samples: list[dict[str, Any]]) -> dict[str, Any]:
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


def format_trace(trace: dict[str, Any]) -> str:
    """A trace as JSON text with one sample a line: compact, and still readable and diffable."""
    head = {key: value for key, value in trace.items() if key != "samples"}
    lines = [json.dumps(sample, separators=(",", ":")) for sample in trace["samples"]]
    return json.dumps(head, indent=1)[:-2] + ',\n "samples": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"


def writable_output(path: str) -> None:
    """Raise OSError where ``path`` is there and is not a regular file: a symlink (planted by another
    user in a shared folder, it would make the writer overwrite its target), a FIFO, a device or a
    directory. Checked before recording (no recording is lost to it) and again when writing."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise OSError(errno.EEXIST, "it is a symbolic link, which record does not follow: remove it or choose another name")
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EEXIST, "it is there and is not a regular file")


def write_output(path: str, text: str) -> None:
    """``text`` into ``path`` without ever writing through a link: into a new file in the same folder
    (created exclusively, never opened through a name someone else made), then renamed over
    ``path``. The rename replaces the name, not what a link there points to, and leaves any other
    hard link of the old file as it was."""
    writable_output(path)
    folder = os.path.dirname(path) or "."
    descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".partial")
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(descriptor, 0o666 & ~mask)  # as an ordinary open() would have made it
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def record(args: argparse.Namespace) -> int:
    from exporter.backends.nvml.backend import NvmlBackend

    gpus = None if args.gpu == "all" else [int(args.gpu)]
    if gpus is None and "{gpu}" not in args.output:
        log.error("--gpu all writes one trace per GPU: --output must name them with {gpu} (e.g. job_gpu{gpu}.json)")
        return 2
    try:
        if gpus is not None:  # with --gpu all, each GPU's name is checked when it is written
            writable_output(args.output.replace("{gpu}", str(gpus[0])))
    except OSError as error:
        log.error("cannot write the trace to %s: %s", args.output, error.strerror or error)
        return 2
    try:
        traces = record_traces(NvmlBackend(slow_interval=args.interval, engine_every_poll=True), gpus, args.duration, args.interval)
    except BackendUnavailable as error:
        log.error("%s: record reads a live GPU through NVML; run it where the NVIDIA driver is", error)
        return 2
    truth = {}
    if args.truth_tflops is not None:
        truth["tflops"] = args.truth_tflops
    if args.truth_tbps is not None:
        truth["tbps"] = args.truth_tbps
    for position, trace in enumerate(traces):
        gpu = position if gpus is None else gpus[0]
        output = args.output.replace("{gpu}", str(gpu))
        trace.update(workload=args.workload.replace("{gpu}", str(gpu)), description=args.description.replace("{gpu}", str(gpu)), truth=truth, **({"job": args.job} if args.job else {}))
        try:
            parse_trace(trace, output)  # what we write must load back
        except TraceError as error:
            log.error("the recording cannot be written as a valid trace: %s", error)
            return 2
        try:
            write_output(output, format_trace(trace))
        except OSError as error:
            log.error("cannot write the trace to %s: %s", output, error.strerror or error)
            return 2
        log.info("wrote %d samples of GPU %d to %s", len(trace["samples"]), gpu, output)
    return 0
