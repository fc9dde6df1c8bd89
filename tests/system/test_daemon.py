"""The daemon process: replayed data labelled as such, SIGHUP reload, SIGTERM, and startup failures."""

from __future__ import annotations

import ctypes.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, free_port, http_get, running_daemon
from waiting import PATIENCE, wait_until

WORKLOADS = ["copy_2GB", "idle", "matmul_8192", "matmul_8192_duty50", "spin_1sm", "tiny_kernels"]
SPIN_HIGH_UTIL = 'gpueff_mismatch{gpu="0",uuid="GPU-replay-0-spin_1sm",rule="high_util_low_sm"}'


def run_exporter(*args: str, timeout: float = PATIENCE) -> tuple[int, list[str]]:
    """Run the daemon to its exit; return its exit status and its output lines (stdout and stderr)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-m", "gpueff", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    return result.returncode, (result.stdout + result.stderr).splitlines()


def value_of(body: str, series: str) -> float | None:
    for line in body.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait_for_value(daemon, series: str, expected: float, timeout: float = PATIENCE, at_least: bool = False) -> str:
    """Scrape until ``series`` reads ``expected`` (or more, with ``at_least``)."""
    deadline = time.monotonic() + timeout
    while True:
        body = daemon.metrics()
        value = value_of(body, series)
        if value == expected or (at_least and value is not None and value >= expected):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"{series} stayed {value_of(body, series)}, expected {expected}")
        time.sleep(0.1)


def test_demo_serves_every_shipped_trace_labelled_as_replayed():
    with running_daemon("--demo", "--collect-interval", "200ms") as daemon:
        body = daemon.metrics()
    assert re.search(r'^gpueff_exporter_build_info\{version="[^"]+",backend="replay",replayed="true"\} 1$', body, re.M)
    # The demo's GPUs held by one declared pod carry its labels (kubernetes.pod_labels every_series).
    pod = '(?:namespace="[^"]+",pod="[^"]+",container="[^"]+",)?'
    traces = re.findall(rf'^gpueff_gpu_info\{{gpu="(\d)",uuid="[^"]+",{pod}model="NVIDIA H200",driver="580\.159\.04",pci_bus_id="replay:\d",trace="(\w+)"\}} 1$', body, re.M)
    assert traces == [(str(index), name) for index, name in enumerate(WORKLOADS)]
    assert body.count("gpueff_gpu_up{") == 20 and re.search(rf'^gpueff_gpu_up\{{gpu="0",uuid="GPU-replay-0-copy_2GB"(,{pod[3:-3]})?\}} 1$', body, re.M)


def test_replay_of_given_files_in_the_given_order(trace_paths, tmp_path):
    copy = tmp_path / "my_recording.json"
    copy.write_text(trace_paths["copy_2GB"].read_text())
    with running_daemon("--replay", str(trace_paths["spin_1sm"]), str(copy), "--collect-interval", "200ms") as daemon:
        body = daemon.metrics()
        status, page = http_get(daemon.url + "/")
    assert 'replayed="true"' in body
    assert re.findall(r'^gpueff_gpu_info\{gpu="(\d)".*trace="(\w+)"\} 1$', body, re.M) == [("0", "spin_1sm"), ("1", "copy_2GB")]
    assert body.count("gpueff_gpu_up{") == 2
    assert value_of(body, SPIN_HIGH_UTIL) == 1
    assert status == 200 and "REPLAYED DATA" in page and "gpu 0=spin_1sm, gpu 1=copy_2GB" in page


def test_sighup_reloads_a_valid_config_and_keeps_it_when_the_next_one_is_broken(trace_paths, tmp_path):
    config = tmp_path / "exporter.yml"
    config.write_text("currency: USD\n")
    with running_daemon("--replay", str(trace_paths["spin_1sm"]), "--config", str(config), "--collect-interval", "100ms") as daemon:
        body = daemon.metrics()
        assert value_of(body, SPIN_HIGH_UTIL) == 1
        assert "gpueff_busy_idle_sm_cost_total" not in body

        # collect_interval in the file: the --collect-interval flag still wins after the reload.
        config.write_text("collect_interval: 30s\nprice_per_gpu_hour: 4\ncurrency: EUR\nmismatch:\n  low_sm_active: 0.005\n  low_efficiency_ratio: 0.005\ndcgm:\n  host: localhost:5555\n")
        daemon.process.send_signal(signal.SIGHUP)
        body = wait_for_value(daemon, SPIN_HIGH_UTIL, 0)
        assert value_of(body, 'gpueff_mismatch{gpu="0",uuid="GPU-replay-0-spin_1sm",rule="low_efficiency"}') == 0
        assert 'gpueff_busy_idle_sm_cost_total{gpu="0",uuid="GPU-replay-0-spin_1sm",currency="EUR"}' in body
        polls = value_of(body, "gpueff_collect_duration_seconds_count")
        wait_for_value(daemon, "gpueff_collect_duration_seconds_count", polls + 3, at_least=True)

        config.write_text("price_per_gpu_hour: 4\nmismatch:\n  low_sm_activ: 0.5\n")
        daemon.process.send_signal(signal.SIGHUP)
        daemon.wait_for_output("reload failed, keeping the running configuration")
        polls = value_of(daemon.metrics(), "gpueff_collect_duration_seconds_count")
        body = wait_for_value(daemon, "gpueff_collect_duration_seconds_count", polls + 3, at_least=True)  # polls after the failed reload
        assert value_of(body, SPIN_HIGH_UTIL) == 0  # the last good config still runs
        assert 'currency="EUR"' in body
        assert daemon.stop() == 0
        output = daemon.finished_output()
    assert output.count("configuration reloaded from") == 1
    assert "reload: dcgm.host changed, but it is read only at start: restart the exporter to apply it" in output
    [failure] = [line for line in output.splitlines() if "level=error" in line]
    assert "reload failed, keeping the running configuration" in failure
    assert str(config) in failure and "'mismatch.low_sm_activ'" in failure and "unknown key" in failure


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_exits_0(signal_number):
    """How fast it stops is bench/'s to measure; that it stops at all, cleanly, is this test's."""
    with running_daemon("--demo", "--collect-interval", "100ms") as daemon:
        daemon.process.send_signal(signal_number)
        assert daemon.process.wait(PATIENCE) == 0
        output = daemon.finished_output()
    assert "level=error" not in output and "Traceback" not in output
    assert 'msg="stopping"' in output
    with pytest.raises(OSError):  # the port is closed
        http_get(daemon.url + "/-/healthy")


def assert_one_clear_line(status: int, lines: list[str], *fragments: str) -> None:
    assert status != 0
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_startup_with_a_bad_config_fails_with_one_line(tmp_path):
    config = tmp_path / "bad.yml"
    config.write_text("mismatch:\n  high_utilization: 2\n")
    status, lines = run_exporter("--demo", "--config", str(config), "--web.listen-address", f"127.0.0.1:{free_port()}")
    assert_one_clear_line(status, lines, "level=error", str(config), "'mismatch.high_utilization'", "between 0 and 1")


def test_startup_with_a_missing_config_fails_with_one_line(tmp_path):
    status, lines = run_exporter("--demo", "--config", str(tmp_path / "missing.yml"), "--web.listen-address", f"127.0.0.1:{free_port()}")
    assert_one_clear_line(status, lines, "level=error", str(tmp_path / "missing.yml"), "No such file")


def test_startup_with_a_bad_trace_fails_with_one_line(trace_paths, tmp_path):
    trace = tmp_path / "broken.json"
    data = json.loads(trace_paths["idle"].read_text())
    data["samples"][0]["SM_UTIL"] = "zero"
    trace.write_text(json.dumps(data))
    status, lines = run_exporter("--replay", str(trace_paths["spin_1sm"]), str(trace), "--web.listen-address", f"127.0.0.1:{free_port()}")
    assert_one_clear_line(status, lines, "level=error", str(trace), "samples[0].SM_UTIL")


def test_startup_with_a_missing_trace_fails_with_one_line(tmp_path):
    status, lines = run_exporter("--replay", str(tmp_path / "gone.json"), "--web.listen-address", f"127.0.0.1:{free_port()}")
    assert_one_clear_line(status, lines, "level=error", str(tmp_path / "gone.json"), "cannot read it")


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:99999", "127.0.0.1:port"])
def test_startup_with_a_bad_listen_address_fails_with_one_line(address):
    status, lines = run_exporter("--demo", "--web.listen-address", address)
    assert_one_clear_line(status, lines, "level=error", "--web.listen-address", repr(address))


def test_startup_on_a_port_in_use_fails_with_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        status, lines = run_exporter("--demo", "--web.listen-address", address)
    assert_one_clear_line(status, lines, "level=error", f"cannot listen on {address}", "Address already in use")


@pytest.mark.parametrize(("interval", "reason"), [("50ms", "must be at least 100ms"), ("fast", "expected a duration"), ("1", "expected a duration")])
def test_startup_with_a_bad_collect_interval_fails_with_one_line(interval, reason):
    status, lines = run_exporter("--demo", "--collect-interval", interval, "--web.listen-address", f"127.0.0.1:{free_port()}")
    assert_one_clear_line(status, lines, "--collect-interval", reason)


def test_an_unknown_flag_fails_with_one_line():
    status, lines = run_exporter("--demo", "--web.listen-adress", ":1")
    assert_one_clear_line(status, lines, "--web.listen-adress", "--help")


NO_DRIVER = ctypes.util.find_library("nvidia-ml") is None and not Path("/dev/nvidiactl").exists()


@pytest.mark.skipif(not NO_DRIVER, reason="this machine has an NVIDIA driver")
def test_without_a_driver_the_daemon_exits_with_a_line_that_mentions_demo():
    status, lines = run_exporter("--web.listen-address", f"127.0.0.1:{free_port()}")
    assert status != 0
    assert not any("Traceback" in line for line in lines)
    [error] = [line for line in lines if "level=error" in line]
    assert "--demo" in error and "NVML" in error


@pytest.mark.skipif(not NO_DRIVER, reason="this machine has an NVIDIA driver")
def test_without_a_driver_the_nvml_backend_fails_with_one_line_that_mentions_demo():
    status, lines = run_exporter("--backend", "nvml", "--web.listen-address", f"127.0.0.1:{free_port()}")
    assert_one_clear_line(status, lines, "level=error", "NVML", "--demo")


BILLION_LAUGHS = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]\n" for n in range(1, 10)
)


def test_hostile_configs_on_sighup_never_end_the_daemon(trace_paths, tmp_path):
    """Issue 14: a 570-byte alias bomb (config and web config), a duration that overflows a wait:
    each reload is refused on one log line, the old config keeps running, a good one recovers."""
    config = tmp_path / "exporter.yml"
    web = tmp_path / "web.yml"
    config.write_text("currency: USD\n")
    web.write_text("{}\n")
    with running_daemon("--replay", str(trace_paths["spin_1sm"]), "--config", str(config), "--web.config.file", str(web), "--collect-interval", "100ms") as daemon:
        # each reload refused on one line (two for the two bombs): the errors so far after each
        for text, web_text, errors_so_far in ((BILLION_LAUGHS, BILLION_LAUGHS, 2), ("collect_interval: 1000000y\n", "{}\n", 3), ("currency: EUR\ncurrency: USD\n", "{}\n", 4)):
            config.write_text(text)
            web.write_text(web_text)
            daemon.process.send_signal(signal.SIGHUP)
            daemon.wait_for_output("level=error", count=errors_so_far)
            assert http_get(daemon.url + "/-/ready")[0] == 200
        config.write_text("price_per_gpu_hour: 1\ncurrency: EUR\n")
        daemon.process.send_signal(signal.SIGHUP)
        wait_for_value(daemon, 'gpueff_busy_idle_sm_cost_total{gpu="0",uuid="GPU-replay-0-spin_1sm",currency="EUR"}', 0, at_least=True)
        assert daemon.stop() == 0
        output = daemon.finished_output()
    errors = [line for line in output.splitlines() if "level=error" in line]
    assert len(errors) == 4, errors  # bomb (config), bomb (web config), overflow, duplicate key
    assert sum("refused as an alias bomb" in line for line in errors) == 2
    assert any("'collect_interval': must be at most 1h" in line for line in errors)
    assert any("duplicate key 'currency'" in line for line in errors)
    assert all(len(line) < 1000 for line in output.splitlines())
    assert "Traceback" not in output


def thread_context_switches(pid: int) -> list[int]:
    counts = []
    for task in os.listdir(f"/proc/{pid}/task"):
        status = Path(f"/proc/{pid}/task/{task}/status").read_text()
        counts.append(sum(int(line.split()[1]) for line in status.splitlines() if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))))
    return counts


@pytest.mark.slow
def test_at_rest_only_the_poller_wakes_up():
    """The main thread sleeps on the signal wake-up fd and the HTTP thread on its selector, both
    without a timeout: at rest, with nobody scraping, neither wakes up (before: 4 and 2 times a second)."""
    windows = []

    def two_threads_asleep_for_three_seconds() -> bool:
        before = thread_context_switches(daemon.process.pid)
        time.sleep(3)
        after = thread_context_switches(daemon.process.pid)
        windows.append((before, after))
        return len(before) == len(after) and [b == a for b, a in zip(before, after)].count(True) == 2

    with running_daemon("--demo", "--collect-interval", "1s") as daemon:
        # The first window may still see the readiness probe's connection closed (late on a busy machine).
        wait_until(two_threads_asleep_for_three_seconds, "the main and HTTP threads to sleep through 3 s", interval=0)
        assert daemon.stop() == 0  # still answers signals
    assert len(windows[-1][0]) == 3, windows  # main, poller, http


LOADED_MODULES = r"""
import os, runpy, socket, sys, threading, time
port, patience = int(sys.argv[1]), float(sys.argv[2])
def report():
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=patience) as sock:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
                if sock.recv(12) == b"HTTP/1.1 200":
                    print(" ".join(sorted(sys.modules)), flush=True)
                    os._exit(0)
        except OSError:
            pass
        time.sleep(0.05)
    print(f"the daemon did not answer /metrics within {patience} s", file=sys.stderr, flush=True)
    os._exit(1)
threading.Thread(target=report, daemon=True).start()
program, flags = sys.argv[3], sys.argv[4:]
sys.argv = [program, *flags, "--web.listen-address", f"127.0.0.1:{port}"]
if program.endswith(".py"):
    runpy.run_path(program, run_name="__main__")
else:
    runpy.run_module(program, run_name="__main__")
"""


def modules_loaded_by(program: str, *flags: str) -> set[str]:
    """The modules (and their top-level packages) a daemon has loaded once it answers /metrics."""
    result = subprocess.run([sys.executable, "-c", LOADED_MODULES, str(free_port()), str(PATIENCE), program, *flags], cwd=ROOT, capture_output=True, text=True, timeout=2 * PATIENCE)
    names = set(result.stdout.split())
    assert "gpueff" in names, result.stderr
    return {name.split(".")[0] for name in names} | names


def test_a_daemon_without_tls_users_config_or_apps_loads_none_of_their_modules():
    """Issue 15: ssl, http.client and email (http.server pulled them in), yaml, bcrypt and
    prometheus_client (the apps' parser) cost about 8 MB of RSS where nothing uses them; issue 28:
    the API server client's ssl and http.client 5 MB, importlib.resources 1.2 MB, html's entity table
    0.5 MB."""
    loaded = modules_loaded_by("gpueff", "--demo")
    unused = {"ssl", "http", "email", "yaml", "bcrypt", "prometheus_client", "socketserver", "importlib.resources", "tempfile", "html"}
    assert loaded.isdisjoint(unused), sorted(loaded & unused)


def test_a_plain_nvml_daemon_on_auto_without_dcgm_bindings_loads_no_dcgm_backend():
    """Issue 28: auto imported DCGM's whole backend (1 MB of RSS, and secrets -> hashlib -> libcrypto's
    3 MB of mapped file) before finding no bindings."""
    loaded = modules_loaded_by("tools/fake_nvml_daemon.py", "1", "--dcgm.bindings-path", str(ROOT / "nowhere"))
    assert "gpueff.backends.nvml.backend" in loaded
    unused = {"gpueff.backends.dcgm.backend", "gpueff.backends.dcgm.session", "secrets", "hashlib", "html", "ssl", "http"}
    assert loaded.isdisjoint(unused), sorted(loaded & unused)


def test_a_plain_nvml_daemon_loads_neither_the_otlp_pusher_nor_what_only_errors_and_version_need():
    """The OTLP pusher and its names (the otlp extra's side, 0.05 MB) came with every daemon for
    an exception class and the protocols' names; difflib (0.2 MB with heapq) for the 'did you mean'
    of an unknown config key; platform (0.1 MB) for --version."""
    loaded = modules_loaded_by("tools/fake_nvml_daemon.py", "1")
    assert "gpueff.otlp" in loaded and "gpueff.config.engine" in loaded
    unused = {"gpueff.otlp.push", "gpueff.otlp.names", "difflib", "platform"}
    assert loaded.isdisjoint(unused), sorted(loaded & unused)


def test_the_live_daemons_modules_import_neither_the_trace_reader_nor_json():
    """Issue 28: json (0.5 MB of RSS) and the trace reader came with every daemon; the first is for
    the live page's /api/live, the second for --demo and --replay."""
    imports = "import sys; import gpueff.commands.cli, gpueff.commands.daemon, gpueff.backends.auto, gpueff.backends.nvml.backend; print(' '.join(sys.modules))"
    result = subprocess.run([sys.executable, "-c", imports], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    loaded = set(result.stdout.split())
    assert "gpueff.commands.daemon" in loaded, result.stderr
    assert loaded.isdisjoint({"json", "gpueff.trace"}), sorted(loaded & {"json", "gpueff.trace"})


def test_a_sigterm_before_the_first_wait_for_signals_is_kept_not_fatal():
    """The handlers were installed when the main loop first waited, after the server answered
    /-/ready: a SIGTERM in between (a busy machine, a quick rollout) killed the daemon by default
    action, without its "stopping" line. They are installed before anything is served."""
    code = "import os, signal; from gpueff.commands.daemon import signals; arriving = signals(); os.kill(os.getpid(), signal.SIGTERM); print(next(arriving))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert (result.returncode, result.stdout) == (0, f"{int(signal.SIGTERM)}\n"), result
