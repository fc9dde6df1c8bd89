"""The daemon's own process metrics (process_cpu_seconds_total and friends), read from /proc.

Every Prometheus client library exports these under the same names; reading them costs two small
file reads and one directory listing per poll. On a system without /proc they are absent.
"""

from __future__ import annotations

import ctypes
import os
import resource
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = resource.getpagesize()


@dataclass(frozen=True, slots=True)
class ProcessStats:
    cpu_seconds: float
    resident_bytes: int
    virtual_bytes: int
    open_fds: int | None
    max_fds: int | None
    start_time_seconds: float | None


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", "rb") as stat:
            for line in stat:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


_BOOT_TIME = _boot_time()


def read_process_stats() -> ProcessStats | None:
    """This process's CPU time, memory, file descriptors and start time; None without /proc."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text[text.rindex(b")") + 2 :].split()  # after "pid (comm) ": the comm may hold spaces
    # man 5 proc: utime 14, stime 15, starttime 22, vsize 23, rss 24 (1-based; fields[0] is field 3).
    utime, stime, start_ticks, vsize, rss = int(fields[11]), int(fields[12]), int(fields[19]), int(fields[20]), int(fields[21])
    try:
        open_fds: int | None = len(os.listdir("/proc/self/fd"))
    except OSError:
        open_fds = None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return ProcessStats(
        cpu_seconds=(utime + stime) / _TICKS,
        resident_bytes=rss * _PAGE,
        virtual_bytes=vsize,
        open_fds=open_fds,
        max_fds=None if soft == resource.RLIM_INFINITY else soft,
        start_time_seconds=None if _BOOT_TIME is None else _BOOT_TIME + start_ticks / _TICKS,
    )


M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
MALLOC_ARENAS = 2


def limit_malloc_arenas() -> None:
    """At most ``MALLOC_ARENAS`` glibc malloc arenas, called before any thread starts. glibc gives
    each thread that allocates an arena of its own (up to 8 per core), each holding freed memory
    of its own; under the GIL two threads seldom allocate at once, so sharing costs nothing. RSS at
    256 replayed GPUs: 36.0 -> 32.7 MB (docs/benchmarks.md). Nothing where libc is not glibc."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(M_ARENA_MAX, MALLOC_ARENAS)
    except (OSError, AttributeError):
        pass


def release_freed_memory() -> None:
    """Hand the heap that start-up freed back to the OS (glibc's malloc_trim): importing pynvml and
    initialising NVML leave megabytes freed but held (docs/gpu-facts.md). Nothing where libc is not glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
