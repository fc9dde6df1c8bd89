"""``record``: write a GPU's readings (or every GPU's, from the same polls) to gpu-trace/1 files, for --replay anywhere."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import secrets
import stat
import time
from collections.abc import Callable
from typing import Any

from gpueff.backends.base import Backend, BackendUnavailable
from gpueff.sample import DeviceInfo
from gpueff.trace import FORMAT, TraceError, parse_trace, record_from_sample

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


def _checked_folder(descriptor: int, name: str) -> None:
    """Raise OSError where the folder open at ``descriptor`` belongs to another user who shares it
    with others (group- or other-writable without the sticky bit): a folder no one here controls."""
    info = os.fstat(descriptor)
    if info.st_uid not in (0, os.geteuid()) and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
        raise OSError(errno.EPERM, f"the folder {name} is owned by uid {info.st_uid} and writable by others without the sticky bit: record into a folder of your own")


def output_folder(path: str) -> tuple[int, str]:
    """A descriptor of the folder ``path`` names a file in, and the file's name there. The folder
    is opened one component at a time, each relative to the last one opened and never through a
    symbolic link (``O_NOFOLLOW``), so a link planted anywhere on the path (a shared folder's
    ``traces`` pointing elsewhere) is refused, and renaming folders meanwhile changes nothing."""
    folder, name = os.path.split(path)
    if not name or name in (".", ".."):
        raise OSError(errno.EISDIR, "it names a folder, not a file")
    walked = "/" if os.path.isabs(path) else "."
    descriptor = os.open(walked, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _checked_folder(descriptor, walked)
        for part in (part for part in folder.split("/") if part not in ("", ".")):
            walked = os.path.join(walked, part)
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=descriptor)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(os.lstat(part, dir_fd=descriptor).st_mode):
                    raise OSError(error.errno, f"{walked} is a symbolic link, which record does not follow: name the real folder") from None
                raise OSError(error.errno, f"{walked}: {error.strerror}") from None
            os.close(descriptor)
            descriptor = inner
            _checked_folder(descriptor, walked)
        return descriptor, name
    except BaseException:
        os.close(descriptor)
        raise


def _writable_in(descriptor: int, name: str) -> None:
    try:
        info = os.lstat(name, dir_fd=descriptor)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise OSError(errno.EEXIST, "it is a symbolic link, which record does not follow: remove it or choose another name")
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EEXIST, "it is there and is not a regular file")


def writable_output(path: str) -> None:
    """Raise OSError where ``path`` cannot be written safely: a symbolic link on its folder's path
    or in its place (planted by another user in a shared folder, it would make the writer replace
    a file elsewhere), a FIFO, a device or a directory there, a folder as ``_checked_folder``
    refuses. Checked before recording (no recording is lost to it) and again when writing."""
    descriptor, name = output_folder(path)
    try:
        _writable_in(descriptor, name)
    finally:
        os.close(descriptor)


def write_output(path: str, text: str) -> None:
    """``text`` into ``path`` without ever writing through a link: into a new file in the folder
    ``output_folder`` opened (created exclusively, never opened through a name someone else made,
    mode 0666 less the umask), then renamed over the name in that same folder. The rename replaces
    the name, not what a link there points to, and leaves any other hard link of the old file as it was."""
    writable_output(path)
    folder, name = output_folder(path)
    try:
        for _ in range(100):
            temporary = f".{name}.{secrets.token_hex(6)}.partial"
            try:
                descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=folder)
                break
            except FileExistsError:
                continue
        else:
            raise OSError(errno.EEXIST, "no temporary name was free next to it")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                file.write(text)
            os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder)
            raise
    finally:
        os.close(folder)


def record(args: argparse.Namespace) -> int:
    from gpueff.backends.nvml.backend import NvmlBackend

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
