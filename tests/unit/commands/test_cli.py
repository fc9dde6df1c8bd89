"""node_exporter's command-line habits: every listen address served, socket activation, the
collector and exporter-metrics switches, flags from GPUEFF_* variables, --version with a revision."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest
from conftest import ROOT, http_get, running_daemon
from waiting import PATIENCE, wait_until

from gpueff.commands.cli import DEFAULT_LISTEN_ADDRESS, daemon_parser
from gpueff.commands.environment import arguments_from_environment, variable_name, variables


def parsed(argv: list[str], environ: dict[str, str]):
    parser = daemon_parser()
    return parser.parse_args(arguments_from_environment(parser, argv, environ) + argv)


def exporter(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpueff", *args], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE, env={**os.environ, **(env or {})})


def test_every_flag_has_a_variable_named_after_it():
    names = {name for name, _ in variables(daemon_parser())}
    assert {"GPUEFF_WEB_LISTEN_ADDRESS", "GPUEFF_WEB_CONFIG_FILE", "GPUEFF_COLLECT_INTERVAL", "GPUEFF_DEMO", "GPUEFF_LOG_LEVEL", "GPUEFF_COLLECTOR_NVLINK", "GPUEFF_DCGM_HOST"} <= names
    assert variable_name("--collector.disable-defaults") == "GPUEFF_COLLECTOR_DISABLE_DEFAULTS"
    assert "GPUEFF_HELP" not in names and "GPUEFF_VERSION" not in names


def test_the_environment_sets_flags_and_the_command_line_wins():
    args = parsed([], {"GPUEFF_COLLECT_INTERVAL": "5s", "GPUEFF_LOG_LEVEL": "debug", "GPUEFF_WEB_UI": "false", "GPUEFF_DEMO": "yes"})
    assert (args.collect_interval, args.log_level, args.web_ui, args.demo) == (5.0, "debug", False, True)
    args = parsed(["--collect-interval", "2s", "--web.ui"], {"GPUEFF_COLLECT_INTERVAL": "5s", "GPUEFF_WEB_UI": "false"})
    assert (args.collect_interval, args.web_ui) == (2.0, True)
    args = parsed(["--collect-interval=2s"], {"GPUEFF_COLLECT_INTERVAL": "5s"})
    assert args.collect_interval == 2.0


def test_repeated_flags_come_comma_separated_and_a_rival_on_the_command_line_wins():
    args = parsed([], {"GPUEFF_WEB_LISTEN_ADDRESS": "127.0.0.1:1, [::1]:2"})
    assert args.listen_address == ["127.0.0.1:1", "[::1]:2"]
    args = parsed(["--replay", "a.json"], {"GPUEFF_DEMO": "true"})
    assert (args.demo, args.replay) == (False, ["a.json"])
    assert parsed([], {"GPUEFF_REPLAY": "a.json b.json"}).replay == ["a.json", "b.json"]


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"GPUEFF_COLLECT_INTERVAL": "5ms"}, "environment variable GPUEFF_COLLECT_INTERVAL: must be at least 100ms"),
        ({"GPUEFF_DEMO": "maybe"}, "environment variable GPUEFF_DEMO: expected true or false, got 'maybe'"),
        ({"GPUEFF_LOG_LEVEL": "loud"}, "environment variable GPUEFF_LOG_LEVEL: 'loud' is not one of"),
    ],
)
def test_a_bad_variable_is_named_in_the_error(environ, message):
    result = exporter(env=environ)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_usage_names_the_subcommands_and_version_the_revision():
    assert "{record,check,top,report,selftest}" in exporter("--help").stdout
    version = exporter("--version", env={"GPU_EFFICIENCY_EXPORTER_REVISION": "0123abcd"}).stdout
    assert version.startswith("gpu-efficiency-exporter, version ") and "(revision: 0123abcd)" in version and "python: " in version


def test_every_listen_address_is_served():
    """A second --web.listen-address (port 0: the kernel picks one, so no other test can hold it) is
    served beside the first; the start line names both."""
    assert parsed([], {}).listen_address is None and DEFAULT_LISTEN_ADDRESS == ":9947"
    with running_daemon("--demo", "--web.listen-address", "127.0.0.1:0") as daemon:
        line = next(line for line in daemon.wait_for_output(" serving ").splitlines() if " serving " in line)
        ports = [int(port) for port in re.findall(r"http://127\.0\.0\.1:([0-9]+)/metrics", line.split(" url=")[0])]
        assert len(ports) == 2 and ports[0] == daemon.port and ports[1] not in (0, daemon.port), line
        for port in ports:
            status, body = http_get(f"http://127.0.0.1:{port}/metrics")
            assert status == 200 and "gpueff_gpu_up{" in body


def test_the_systemd_socket_is_served(tmp_path):
    """Socket activation as systemd does it: the listening socket at fd 3, LISTEN_FDS=1 and LISTEN_PID
    this process (set by a wrapper that then execs the daemon, keeping its PID)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    wrapper = ("import os, sys; os.dup2(int(sys.argv[1]), 3); os.environ.update(LISTEN_FDS='1', LISTEN_PID=str(os.getpid())); "
               "os.execv(sys.executable, [sys.executable, '-m', 'gpueff', '--demo', '--web.systemd-socket'])")
    process = subprocess.Popen([sys.executable, "-c", wrapper, str(listener.fileno())], cwd=ROOT, pass_fds=(listener.fileno(),), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    listener.close()
    try:
        wait_until(lambda: _ready(port), what="the socket-activated daemon to answer /-/ready")
        status, body = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and "gpueff_gpu_up{" in body
    finally:
        process.terminate()
        output = process.communicate(timeout=PATIENCE)[0]
    assert process.returncode == 0, output


def _ready(port: int) -> bool:
    try:
        return http_get(f"http://127.0.0.1:{port}/-/ready")[0] == 200
    except OSError:
        return False


def test_systemd_socket_without_sockets_is_a_clear_error():
    result = exporter("--demo", "--web.systemd-socket", env={"LISTEN_PID": "1", "LISTEN_FDS": "1"})
    assert result.returncode == 2 and "--web.systemd-socket: no sockets were passed to this process" in result.stderr


def test_disable_defaults_keeps_only_the_collectors_named_and_exporter_metrics_can_go():
    with running_daemon("--demo", "--collector.disable-defaults", "--collector.power", "--web.disable-exporter-metrics") as daemon:
        body = daemon.metrics()
    assert "gpueff_power_watts{" in body and "gpueff_gpu_up{" in body
    assert "gpueff_sm_active_ratio" not in body and "gpueff_temperature_celsius" not in body
    assert "process_resident_memory_bytes" not in body and "gpueff_exporter_build_info" in body
