"""Faults: what the daemon does when NVML hangs, loses a GPU, answers NotSupported, or has no driver yet.

Two set-ups, both with tests/support/fakes/nvml.py standing in for the driver:
- in process: the daemon's own parts (NvmlBackend -> Poller -> Payloads -> WebServer on loopback),
  with faults injected into the fake while real HTTP scrapes run;
- a real daemon process: this file run as a script puts a scripted FakeNvml in place of pynvml
  (``FAULT_SCRIPT``: which traces, which file's appearance loads the driver or wedges a call, where
  to report the calls made so far) and runs the CLI; the test makes each fault happen when it is
  ready for it, however slowly a busy machine starts the daemon;
  app endpoints that hang or flood (raw sockets on loopback) and a DCGM host engine that goes away
  (tests/support/fakes/dcgm) against the real daemon too.
SIGHUP with a broken config and SIGTERM without faults are covered in test_daemon.py and test_tls.py beside this file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # tests/support/repo.py says the same, once importable
if __name__ == "__main__":  # the launcher: make the package and the fake importable
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]

import pynvml  # noqa: E402 (the real module: constants only)
from fakes.nvml import FakeNvml  # noqa: E402
from waiting import PATIENCE  # noqa: E402

from gpueff.backends.nvml.backend import NvmlBackend  # noqa: E402
from gpueff.poller import Poller  # noqa: E402
from gpueff.settings import Config  # noqa: E402
from gpueff.trace import load_trace  # noqa: E402
from gpueff.web.server import WebServer  # noqa: E402

HANG_LIMIT = 60.0  # a hung fake call gives up after this long, so no test leaves a thread behind for good


def hang(fake: FakeNvml, function: str, limit: float | None = HANG_LIMIT) -> threading.Event:
    """Make ``function`` block until the returned event is set (a wedged driver call), for at most
    ``limit`` seconds (None: for the life of the process)."""
    release = threading.Event()
    original = getattr(fake, function)

    def blocked(*args):
        release.wait(limit)
        return original(*args)

    setattr(fake, function, blocked)
    return release


# ---- the launcher (this file run as a script) -------------------------------------------------


def launch() -> int:
    """``FAULT_SCRIPT``: {"traces": [...], "driver_when": a file that loads the driver when it
    appears (the driver is missing till then), "hang_when": {call: a file that wedges the call for
    good when it appears}, "report": a file kept holding the fake's call counts as JSON}."""
    script = json.loads(os.environ["FAULT_SCRIPT"])
    fake = FakeNvml([load_trace(path) for path in script["traces"]], event_wait_cap=0.5)
    driver_when, hang_when, report = script.get("driver_when"), dict(script.get("hang_when", {})), script.get("report")
    if driver_when is not None:
        fake.unload_driver()

    def follow_the_script() -> None:
        nonlocal driver_when
        while True:
            if driver_when is not None and os.path.exists(driver_when):
                fake.load_driver()
                driver_when = None
            for function, trigger in list(hang_when.items()):
                if os.path.exists(trigger):
                    hang(fake, function, limit=None)
                    del hang_when[function]
            if report is not None:
                Path(report + ".new").write_text(json.dumps(dict(fake.calls)))
                os.replace(report + ".new", report)
            time.sleep(0.05)

    threading.Thread(target=follow_the_script, daemon=True).start()
    sys.modules["pynvml"] = fake
    from gpueff.commands.cli import main

    return main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(launch())


# ---- tests ------------------------------------------------------------------------------------

from conftest import free_port, http_get, payloads_following, running_daemon  # noqa: E402

pytestmark = pytest.mark.slow  # fault injection into running daemons


@pytest.fixture(scope="module")
def traces(trace_paths):
    return [load_trace(trace_paths[name]) for name in ("matmul_8192", "idle", "spin_1sm")]


@contextlib.contextmanager
def wired(fake: FakeNvml, **config):
    """The daemon's parts over ``fake``: backend, poller thread, exposition and HTTP on loopback."""
    backend = NvmlBackend(slow_interval=1.0, nvml=fake)
    devices = backend.start()
    poller = Poller(backend, Config(collect_interval=0.1, **config))
    server = WebServer(f"127.0.0.1:{free_port()}", payloads_following(poller).payload, poller.ready.is_set, "faults")
    poller.start(devices)
    server.start()
    try:
        assert poller.ready.wait(PATIENCE)
        yield f"http://127.0.0.1:{server.port}/metrics"
    finally:
        server.close()
        poller.stop(1.0)


def scrape(url: str) -> tuple[str, float]:
    started = time.monotonic()
    status, body = http_get(url)
    assert status == 200, body
    return body, time.monotonic() - started


def wait_for(url: str, predicate, timeout: float = PATIENCE) -> str:
    """Scrape until ``predicate(body)``. A 503 before the daemon's first poll has finished is a
    "not yet" (a busy machine can hold that poll back for many seconds after the port answers)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = http_get(url)
        if status == 200 and predicate(body):
            return body
        assert status == 200 or (status == 503 and body.startswith("no data yet")), (status, body[-2000:])
        assert time.monotonic() < deadline, (status, body[-2000:])
        time.sleep(0.05)


def errors_total(body: str) -> int:
    return int(next(line for line in body.splitlines() if line.startswith("gpueff_collect_errors_total ")).split()[1])


def up(body: str, gpu: int) -> str | None:
    for line in body.splitlines():
        if line.startswith(f'gpueff_gpu_up{{gpu="{gpu}",'):
            return line.rsplit(" ", 1)[1]
    return None


def test_a_hanging_nvml_call_never_stalls_scrapes_and_goes_down_after_stale_after(traces):
    fake = FakeNvml(traces)
    with wired(fake, stale_after=0.6) as url:
        wait_for(url, lambda b: "gpueff_sm_active_ratio{" in b)
        release = hang(fake, "nvmlDeviceGetPowerUsage")  # until the test releases it: every scrape below answers while it hangs
        try:
            hung_at = time.monotonic()
            latencies, bodies = [], []
            while not bodies or "\ngpueff_collect_stale 1\n" not in bodies[-1][1]:
                assert time.monotonic() - hung_at < PATIENCE, "never stale"
                body, latency = scrape(url)
                latencies.append(latency)
                bodies.append((time.monotonic() - hung_at, body))
                time.sleep(0.05)
            print(f"{len(latencies)} scrapes while NVML hung: slowest {max(latencies) * 1000:.1f} ms")
            # Each page says how old its snapshot is: up to stale_after (0.6 s) the last snapshot is
            # served as it was, past it every GPU is down.
            for _, body in bodies:
                age = float(body.rsplit("\ngpueff_snapshot_age_seconds ", 1)[1].split()[0])  # to the ms
                if abs(age - 0.6) > 0.001:
                    assert ("\ngpueff_collect_stale 0\n" in body and up(body, 0) == "1") == (age < 0.6), body[-3000:]
            late = bodies[-1][1]
            assert [up(late, gpu) for gpu in range(3)] == ["0", "0", "0"]
            assert "gpueff_sm_active_ratio{" not in late and "gpueff_power_watts{" not in late
        finally:
            release.set()
        wait_for(url, lambda b: "\ngpueff_collect_stale 0\n" in b and up(b, 0) == "1")


def test_a_gpu_lost_mid_run_goes_down_alone_and_comes_back(traces):
    fake = FakeNvml(traces)
    with wired(fake) as url:
        wait_for(url, lambda b: up(b, 1) == "1")
        fake.lose_gpu(1)
        body = wait_for(url, lambda b: up(b, 1) == "0")
        assert up(body, 0) == "1" and up(body, 2) == "1"
        assert 'gpueff_power_watts{gpu="1"' not in body and 'gpueff_power_watts{gpu="0"' in body
        assert 'gpueff_gpu_info{gpu="1"' in body  # identity stays, so alerts can name the lost GPU
        assert errors_total(body) >= 1
        fake.recover_gpu(1)
        wait_for(url, lambda b: up(b, 1) == "1" and 'gpueff_power_watts{gpu="1"' in b)  # after the re-init backoff (1 s)


def test_one_metric_not_supported_is_absent_not_zero(traces):
    fake = FakeNvml(traces)
    fake.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=0)
    with wired(fake) as url:
        body = wait_for(url, lambda b: "gpueff_sm_active_ratio{" in b)
        assert up(body, 0) == "1"
        assert 'gpueff_power_watts{gpu="0"' not in body and 'gpueff_power_watts{gpu="1"' in body
        assert 'gpueff_sm_active_ratio{gpu="0"' in body  # the rest of the GPU is still read
        assert errors_total(body) == 0  # NotSupported is no error
    assert fake.device_calls["nvmlDeviceGetPowerUsage", 0] == 1  # asked once, then never again


def test_the_driver_gone_mid_run_takes_every_gpu_down_until_it_is_back(traces):
    fake = FakeNvml(traces)
    with wired(fake) as url:
        wait_for(url, lambda b: up(b, 0) == "1")
        fake.unload_driver()
        body = wait_for(url, lambda b: [up(b, gpu) for gpu in range(3)] == ["0", "0", "0"])
        assert "gpueff_exporter_build_info{" in body  # the daemon itself still answers
        fake.load_driver()
        wait_for(url, lambda b: [up(b, gpu) for gpu in range(3)] == ["1", "1", "1"])


@contextlib.contextmanager
def fault_daemon(script: dict, *flags: str):
    """A real daemon process on the scripted fake; yields (process, base url) once it answers."""
    port = free_port()
    command = [sys.executable, str(Path(__file__)), "--backend", "nvml", "--collect-interval", "100ms", "--web.listen-address", f"127.0.0.1:{port}", *flags]
    env = {**os.environ, "FAULT_SCRIPT": json.dumps(script)}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + PATIENCE
        while True:
            assert process.poll() is None, process.stdout.read()
            with contextlib.suppress(OSError):
                if http_get(url + "/-/healthy")[0] == 200:
                    break
            assert time.monotonic() < deadline, "the daemon did not answer"
            time.sleep(0.05)
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()


def test_without_the_flag_a_missing_driver_stops_the_start_with_the_demo_hint(trace_paths, tmp_path):
    script = {"traces": [str(trace_paths["idle"])], "driver_when": str(tmp_path / "never")}
    command = [sys.executable, str(Path(__file__)), "--backend", "nvml", "--web.listen-address", f"127.0.0.1:{free_port()}"]
    result = subprocess.run(command, cwd=ROOT, env={**os.environ, "FAULT_SCRIPT": json.dumps(script)}, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 2
    assert "cannot initialise NVML" in result.stderr and "--demo" in result.stderr and "Traceback" not in result.stderr


def test_wait_for_driver_serves_at_once_and_picks_the_gpus_up_when_the_driver_appears(trace_paths, tmp_path):
    driver = tmp_path / "driver-loaded"
    script = {"traces": [str(trace_paths["matmul_8192"]), str(trace_paths["idle"])], "driver_when": str(driver)}
    with fault_daemon(script, "--wait-for-driver") as (process, url):
        body = wait_for(url + "/metrics", lambda b: 'backend="waiting"' in b)  # its first poll, however late
        assert "gpueff_gpu_up{" not in body
        # Serving, but not ready: readiness means GPU data, and there is none yet.
        assert http_get(url + "/-/ready")[0] == 503 and http_get(url + "/-/healthy")[0] == 200
        driver.touch()
        wait_for(url + "/metrics", lambda b: up(b, 0) == "1" and up(b, 1) == "1" and 'backend="nvml"' in b)
        assert http_get(url + "/-/ready") == (200, "Ready.\n")
        process.send_signal(signal.SIGTERM)
        assert process.wait(PATIENCE) == 0
        log = process.stdout.read()
    assert "waiting for the NVIDIA driver (--wait-for-driver): cannot initialise NVML" in log
    assert "the nvml backend started: reading 2 GPU(s)" in log


def test_sigterm_exits_cleanly_while_an_nvml_call_hangs_for_good(trace_paths, tmp_path):
    config = tmp_path / "config.yml"
    config.write_text("stale_after: 500ms\n")
    wedge = tmp_path / "wedge"
    script = {"traces": [str(trace_paths["matmul_8192"])], "hang_when": {"nvmlDeviceGetPowerUsage": str(wedge)}}
    with fault_daemon(script, "--config", str(config)) as (process, url):
        wait_for(url + "/metrics", lambda b: up(b, 0) == "1")
        wedge.touch()  # the call never returns from now on: a daemon that waited for it would never exit
        wait_for(url + "/metrics", lambda b: "\ngpueff_collect_stale 1\n" in b)
        stopped = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(PATIENCE) == 0
        print(f"SIGTERM with a hung NVML call: exited 0 after {time.monotonic() - stopped:.2f} s")


# ---- app endpoints that hang or flood, and DCGM disconnects (real daemon processes) -------------


class HostileApp:
    """A raw TCP app endpoint on loopback: ``hang`` accepts and never answers; ``flood`` answers
    with an endless body as fast as it can. Bounded: every connection ends when the test does."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.connections = 0
        self.sent = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            if self.mode == "hang":
                self.stop.wait()  # till the test ends (close)
                return
            connection.settimeout(1)
            chunk = b"# TYPE jobs_total counter\n" + b'jobs_total{flood="x"} 1\n' * 2000
            try:
                connection.recv(4096)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
                while not self.stop.is_set():
                    connection.sendall(chunk)
                    self.sent += len(chunk)
            except OSError:
                return  # the exporter hung up: what it should do

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


def app_value(body: str, metric: str, app: str) -> str | None:
    prefix = f'{metric}{{app="{app}"'
    for line in body.splitlines():
        if line.startswith(prefix):
            return line.rsplit(" ", 1)[1]
    return None


def test_app_endpoints_that_hang_or_flood_never_hold_scrapes_or_grow_memory(tmp_path):
    """The hanging app's one scrape lasts the whole test (its timeout is an hour, past any busy
    machine's wait for the flood's retries): /metrics answers all along. The flooding app is cut at max_response_bytes and retried, in bounded memory."""
    hanging, flooding = HostileApp("hang"), HostileApp("flood")
    config = tmp_path / "config.yml"
    config.write_text(
        "apps:\n"
        f"  - {{name: hang, url: 'http://127.0.0.1:{hanging.port}/metrics', counter: jobs_total, unit: jobs, scrape_interval: 1h, scrape_timeout: 1h}}\n"
        f"  - {{name: flood, url: 'http://127.0.0.1:{flooding.port}/metrics', counter: jobs_total, unit: jobs, scrape_interval: 1s, scrape_timeout: 1s, max_response_bytes: 1000000}}\n"
    )
    try:
        with running_daemon("--demo", "--collect-interval", "200ms", "--config", str(config)) as daemon:
            url = daemon.url + "/metrics"
            latencies, rss = [], []
            started = time.monotonic()
            while True:  # until the flood was cut and retried twice, with the hung scrape under way
                body, latency = scrape(url)
                latencies.append(latency)
                rss.append(int(Path(f"/proc/{daemon.process.pid}/status").read_text().split("VmRSS:")[1].split()[0]) * 1024)
                if hanging.connections >= 1 and flooding.connections >= 3 and int(app_value(body, "gpueff_app_scrape_errors_total", "flood") or 0) >= 2:
                    break
                assert time.monotonic() - started < PATIENCE, body
                time.sleep(0.1)
            assert hanging.connections == 1 and not hanging.stop.is_set()  # its one scrape still hangs
            assert app_value(body, "gpueff_app_up", "hang") == "0" and app_value(body, "gpueff_app_up", "flood") == "0"
            assert up(body, 0) == "1" and "gpueff_sm_active_ratio{" in body  # the GPUs are served as usual
            print(f"hostile apps: {hanging.connections} hung and {flooding.connections} flooding scrapes ({flooding.sent / 2**20:.0f} MiB offered); "
                  f"/metrics slowest {max(latencies) * 1000:.1f} ms; daemon RSS {min(rss) / 2**20:.0f}..{max(rss) / 2**20:.0f} MiB")
            assert max(rss) < 200 * 2**20  # the flood is cut at max_response_bytes, never buffered whole
    finally:
        hanging.close()
        flooding.close()


def test_a_dcgm_disconnect_is_served_as_down_and_recovers(trace_paths, tmp_path):
    fake_bindings = str(ROOT / "tests" / "support" / "fakes" / "dcgm")
    engine = f"127.0.0.1:{free_port()}"
    stop_file = tmp_path / "hostengine-stopped"
    env = {"FAKE_DCGM_SERVE": engine, "FAKE_DCGM_STOP_FILE": str(stop_file), "FAKE_DCGM_TRACES": str(trace_paths["matmul_8192"])}
    with running_daemon("--backend", "dcgm", "--dcgm.bindings-path", fake_bindings, "--dcgm.host", engine, "--collect-interval", "100ms", env=env) as daemon:
        url = daemon.url + "/metrics"
        wait_for(url, lambda b: up(b, 0) == "1" and "gpueff_sm_active_ratio{" in b)
        stop_file.touch()
        latencies = []
        started = time.monotonic()
        while True:  # scrapes answer while the daemon reconnects (each try waits up to 5 s)
            body, latency = scrape(url)
            latencies.append(latency)
            if up(body, 0) == "0":
                break
            assert time.monotonic() - started < PATIENCE, body
            time.sleep(0.1)
        print(f"DCGM disconnected: {len(latencies)} scrapes, slowest {max(latencies) * 1000:.1f} ms")
        assert "gpueff_sm_active_ratio{" not in body
        stop_file.unlink()
        wait_for(url, lambda b: up(b, 0) == "1" and "gpueff_sm_active_ratio{" in b)
