"""Shared fixtures: the shipped traces, free ports, and a real daemon process on loopback."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from loopback import free_port  # noqa: F401  (the tests import it from here)
from repo import ROOT, SUPPORT
from waiting import PATIENCE

from gpueff.snapshot import Snapshot
from gpueff.trace import planted_trace_paths
from gpueff.web.payload import Payloads

# No example may fail for taking long: a busy machine makes any example slow (tests/support/waiting.py).
# A test's own @settings keep these unless they name them.
settings.register_profile("busy-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("busy-machine")


@pytest.fixture(autouse=True)
def _stop_xid_watchers_left_running() -> Iterator[None]:
    """A test that leaves an NVML backend open leaves its Xid watcher waiting on the fake NVML, which
    wakes it every 50 ms (fakes/nvml.py: event_wait_cap). Hundreds of them (one per such test) kept
    each suite process's ~270 threads fighting for the GIL, and four suites side by side starved a
    2-core machine (load average 350). The watchers a test started are stopped when it ends: the
    thread's stop event (its second argument) ends its loop at the next wait, silently."""
    before = set(threading.enumerate())
    yield
    for thread in threading.enumerate():
        if thread.name == "xid-events" and thread not in before:
            thread._args[1].set()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def trace_paths() -> dict[str, Path]:
    """The six recorded H200 traces by workload name (file stem)."""
    return {path.stem: path for path in planted_trace_paths()}


DCGM_FAKE = str(SUPPORT / "fakes" / "dcgm")


@pytest.fixture()
def dcgm_engine(trace_paths):
    """The fake DCGM host engine's module (loaded as the bindings are, from DCGM_FAKE), reset, with two
    GPUs: 0 plays matmul_8192, 1 plays idle."""
    from gpueff.backends.dcgm.bindings import load_bindings

    load_bindings(DCGM_FAKE)
    import fake_hostengine

    fake_hostengine.reset()
    fake_hostengine.CONTROL.traces = [str(trace_paths["matmul_8192"]), str(trace_paths["idle"])]
    yield fake_hostengine
    fake_hostengine.reset()


def http_get(url: str, timeout: float = PATIENCE) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class Daemon:
    """A daemon process; a thread collects what it prints, so a test can wait for a line."""

    def __init__(self, process: subprocess.Popen, port: int) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._lines: list[str] = []
        self._ended = False  # the daemon closed its output
        self._printed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._printed:
                self._lines.append(line)
                self._printed.notify_all()
        with self._printed:
            self._ended = True
            self._printed.notify_all()

    @property
    def output(self) -> str:
        """What the daemon printed so far."""
        with self._printed:
            return "".join(self._lines)

    def wait_for_output(self, fragment: str, count: int = 1, timeout: float = PATIENCE) -> str:
        """Wait until the daemon has printed ``count`` lines holding ``fragment``; returns its output."""
        with self._printed:
            if not self._printed.wait_for(lambda: sum(fragment in line for line in self._lines) >= count or self._ended, timeout):
                raise AssertionError(f"gave up after {timeout:g} s waiting for the daemon to print {fragment!r}")
            text = "".join(self._lines)
        assert text.count(fragment) >= count, f"the daemon ended without printing {fragment!r}: {text}"
        return text

    def finished_output(self) -> str:
        """Everything the daemon printed, once it has exited."""
        self.process.wait(PATIENCE)
        self._reader.join(PATIENCE)
        return self.output

    def metrics(self) -> str:
        status, body = http_get(self.url + "/metrics")
        assert status == 200, body
        return body

    def stop(self, timeout: float = PATIENCE) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)


@contextlib.contextmanager
def running_daemon(*args: str, ready_timeout: float = PATIENCE, env: dict[str, str] | None = None, is_ready: Callable[[int], bool] | None = None):
    """Start ``python -m gpueff`` with ``args`` on a free loopback port; wait until /-/ready
    answers 200 (or until ``is_ready(port)``, for a daemon that speaks TLS). ``daemon.output``
    holds what it printed (all of it after the block)."""
    port = free_port()
    command = [sys.executable, "-m", "gpueff", "--web.listen-address", f"127.0.0.1:{port}", *args]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})})
    daemon = Daemon(process, port)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise AssertionError(f"daemon exited with {process.returncode}: {daemon.finished_output()}")
            with contextlib.suppress(OSError):
                if is_ready(port) if is_ready else http_get(daemon.url + "/-/ready", timeout=PATIENCE)[0] == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError("daemon did not become ready")
            time.sleep(0.05)
        yield daemon
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(PATIENCE)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        daemon.finished_output()
        if process.stdout:
            process.stdout.close()


def payloads_following(poller, clock: Callable[[], float] = time.monotonic) -> Payloads:
    """What the daemon's /metrics serves from ``poller``: each snapshot it publishes from now on
    (and the one it has, if any), rendered on the poller's side."""
    payloads = Payloads(clock)
    poller.subscribe(payloads.publish)
    if poller.snapshot is not None:
        payloads.publish(poller.snapshot)
    return payloads


def payloads_of(snapshot: Snapshot, clock: Callable[[], float] = time.monotonic) -> Payloads:
    """/metrics serving one snapshot."""
    payloads = Payloads(clock)
    payloads.publish(snapshot)
    return payloads


@pytest.fixture(autouse=True)
def restore_logging():
    """The commands' main() installs its own root handler (logs.setup) on the stream the test had;
    put pytest's back after every test, so a later test neither loses caplog's records nor has its
    lines written to a closed stream ("--- Logging error ---" on stderr)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
