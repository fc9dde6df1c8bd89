"""Shared fixtures: the shipped traces, free ports, and a real daemon process on loopback."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from harness import free_port  # noqa: F401  (the tests import it from here)
from waiting import PATIENCE

from exporter.snapshot import Snapshot
from exporter.trace import planted_trace_paths
from exporter.web.payload import Payloads

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def trace_paths() -> dict[str, Path]:
    """The six recorded H200 traces by workload name (file stem)."""
    return {path.stem: path for path in planted_trace_paths()}


DCGM_FAKE = str(ROOT / "tests" / "fakes" / "dcgm")


@pytest.fixture()
def dcgm_engine(trace_paths):
    """The fake DCGM host engine's module (loaded as the bindings are, from DCGM_FAKE), reset, with two
    GPUs: 0 plays matmul_8192, 1 plays idle."""
    from exporter.backends.dcgm.bindings import load_bindings

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
    def __init__(self, process: subprocess.Popen, port: int) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.output = ""  # what the daemon printed, once it has stopped

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
    """Start ``python -m exporter`` with ``args`` on a free loopback port; wait until /-/ready
    answers 200 (or until ``is_ready(port)``, for a daemon that speaks TLS)."""
    port = free_port()
    command = [sys.executable, "-m", "exporter", "--web.listen-address", f"127.0.0.1:{port}", *args]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})})
    daemon = Daemon(process, port)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise AssertionError(f"daemon exited with {process.returncode}: {process.stdout.read()}")
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
        if process.stdout:
            daemon.output = process.stdout.read()
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


@pytest.fixture()
def restore_logging():
    """The commands' main() installs its own root handler (logs.setup); put pytest's back afterwards,
    so later tests' caplog still sees records."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
