"""Shared pieces of the benchmarks: a daemon subprocess on loopback, its RSS and CPU time, percentiles."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the loopback helpers and fakes, shared with the tests

from loopback import free_port  # noqa: E402

TRACES = sorted((ROOT / "gpueff" / "traces" / "h200").glob("*.json"))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def trace_files(count: int) -> list[str]:
    """``count`` shipped traces, repeating them in order where more are asked for than shipped."""
    return [str(TRACES[index % len(TRACES)]) for index in range(count)]


class Daemon:
    def __init__(self, process: subprocess.Popen, port: int) -> None:
        self.process = process
        self.port = port

    @property
    def pid(self) -> int:
        return self.process.pid

    def get(self, path: str = "/metrics") -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def rss_bytes(self) -> int:
        return _status_kib(self.pid, "VmRSS") * 1024

    def cpu_seconds(self) -> float:
        """User + system CPU time of the daemon process (all its threads) so far."""
        return process_cpu_seconds(self.pid)


def thread_cpu_ns(pid: int) -> dict[int, tuple[str, int]]:
    """Each live thread of ``pid``: its kernel name (comm) and the CPU it has run, in nanoseconds
    (``/proc/PID/task/TID/schedstat``). A thread that has exited is not listed."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            threads[int(task.name)] = ((task / "comm").read_text().strip(), int((task / "schedstat").read_text().split()[0]))
    return threads


def live_threads_cpu_ns(pid: int) -> int:
    """The CPU the live threads of ``pid`` have run, in nanoseconds (schedstat: finer than /proc/PID/stat's 10 ms ticks)."""
    return sum(ns for _, ns in thread_cpu_ns(pid).values())


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of every thread of ``pid``, exited ones included, in clock ticks (10 ms)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of ``pid`` in KiB (``/proc/PID/status``)."""
    return {key: _status_kib(pid, key) for key in ("VmRSS", "RssAnon", "RssFile")}


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


@contextlib.contextmanager
def daemon(command: list[str], ready_timeout: float = 30.0, cwd: Path | str = ROOT) -> Iterator[Daemon]:
    """Run ``command`` (a daemon taking --web.listen-address) on a free loopback port until /-/ready;
    ``python -m gpueff`` runs the tree in ``cwd`` (the working directory comes first on its path)."""
    port = free_port()
    process = subprocess.Popen([*command, "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warn"], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    stderr = process.stderr
    running = Daemon(process, port)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the daemon exited with {process.returncode}: {stderr.read()}")
            with contextlib.suppress(OSError):
                if running.get("/-/ready")[0] == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the daemon did not become ready")
            time.sleep(0.05)
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        stderr.close()


_POLLS = re.compile(rb"^gpueff_collect_duration_seconds_count (\d+)$", re.M)


def polls_served(body: bytes) -> int:
    """How many polls a /metrics body says the daemon has made."""
    match = _POLLS.search(body)
    if match is None:
        raise ValueError("no gpueff_collect_duration_seconds_count in the /metrics body")
    return int(match.group(1))


def replay_daemon_command(gpus: int, interval: str = "1s") -> list[str]:
    return [sys.executable, "-m", "gpueff", "--replay", *trace_files(gpus), "--collect-interval", interval]


def keepalive_latencies(port: int, request: bytes, body_end: bytes, seconds: float, pause: float) -> list[float]:
    """Send ``request`` again and again for ``seconds`` over one kept-alive loopback connection,
    ``pause`` seconds apart; each answer's latency (until ``body_end`` arrives) in seconds, sorted."""
    latencies = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            sock.sendall(request)
            data = b""
            while not data.endswith(body_end):
                data += sock.recv(1 << 20)
            latencies.append(time.perf_counter() - started)
            time.sleep(pause)
    return sorted(latencies)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in 0..100."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]
