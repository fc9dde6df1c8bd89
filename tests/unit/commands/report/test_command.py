"""``report``'s command line (gpueff/commands/report/command.py): the range's flags, the exit
status with no data and with a Prometheus that cannot be asked, each in one clear line."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys

import pytest
from conftest import ROOT
from waiting import PATIENCE

from gpueff.commands.report import command
from gpueff.commands.report.command import parser, until_time
from unit.commands.report.test_prometheus import raw_server, vector
from unit.commands.top.test_scrape import page


def test_until_takes_now_a_unix_time_or_an_rfc3339_utc_time() -> None:
    assert until_time("1795000000") == 1_795_000_000.0 and until_time("1795000000.5") == 1_795_000_000.5
    assert until_time("2026-12-01T00:00:00Z") == 1_796_083_200.0
    assert abs(until_time("now") - __import__("time").time()) < 60
    args = parser().parse_args(["--prometheus", "http://p:9090"])
    assert args.since == 7 * 86400 and args.format == "text" and args.by == "owner"


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpueff", "report", *argv], capture_output=True, text=True, cwd=ROOT, timeout=PATIENCE)


def test_usage_errors_are_one_line() -> None:
    for argv, said in ((["--since", "7d"], "--prometheus"), (["--prometheus", "http://p", "--since", "1s"], "--since"),
                       (["--prometheus", "http://p", "--until", "yesterday"], "expected now, a Unix time"), (["--prometheus", "http://p", "--format", "xml"], "--format")):
        result = run(*argv)
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and said in result.stderr, result.stderr


def test_a_prometheus_that_cannot_be_asked_exits_2_naming_it() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run("--prometheus", f"http://127.0.0.1:{port}", "--timeout", "2s")
    assert result.returncode == 2 and result.stderr.startswith(f"gpu-efficiency-exporter report: cannot reach Prometheus at http://127.0.0.1:{port}") and result.stdout == ""


def test_no_state_series_in_the_range_exits_1_saying_what_to_check(capsys: pytest.CaptureFixture[str]) -> None:
    with raw_server(page(vector())) as url:
        args = parser().parse_args(["--prometheus", url, "--until", "1795000000", "--since", "24h"])
        out = io.StringIO()
        assert command.report(args, out) == 1
    assert out.getvalue() == "" and "holds no gpueff_gpu_state_seconds_total in the 24 h before 2026-11-18T" in capsys.readouterr().err


def test_a_report_is_written_in_the_format_asked() -> None:
    answer = vector(({"instance": "n:9947", "uuid": "GPU-a", "gpu": "0", "state": "held_idle", "namespace": "ml", "pod": "x"}, "7200"))
    with raw_server(page(answer)) as url:  # every query gets the same answer: enough for the shape
        args = parser().parse_args(["--prometheus", url, "--format", "json", "--until", "1795000000"])
        out = io.StringIO()
        assert command.report(args, out) == 0
    body = json.loads(out.getvalue())
    assert body["owners"][0]["name"] == "ml/x" and body["end"] == 1_795_000_000.0 and body["start"] == 1_795_000_000.0 - 7 * 86400
