"""``gpu-efficiency-exporter top``: the same figures from a snapshot and from its /metrics page, the
table at 80 columns, a plain frame in a pipe, --url against the real daemon, and the live view in
a real terminal (tmux: send-keys, capture-pane)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import shutil
import subprocess
import sys
import time
import uuid as uuids

import pytest
from conftest import ROOT, free_port, running_daemon
from waiting import PATIENCE

from exporter.apps.derive import AppState
from exporter.backends.replay import ReplayBackend
from exporter.commands.top.scrape import ScrapeError, metrics_url, parse
from exporter.commands.top.table import Frame, render, usage_bar, visible_width
from exporter.config.file import Config
from exporter.exposition.render import render as render_metrics
from exporter.overview import GpuOverview, snapshot_overview
from exporter.poller import Poller
from exporter.trace import demo_trace_paths, load_trace

pytestmark = pytest.mark.usefixtures("restore_logging")  # main() installs its own log handler

TOP = [sys.executable, "-m", "exporter", "top"]
ESCAPE = re.compile(r"\x1b\[")


def demo_snapshot(polls: int = 3):
    backend = ReplayBackend([load_trace(path) for path in demo_trace_paths()])
    backend.start()
    poller = Poller(backend, Config())
    for _ in range(polls):
        snapshot = poller.poll_once()
    return snapshot


def same(left: GpuOverview, right: GpuOverview) -> list[str]:
    """The fields that differ (floats compared to 1e-9 relative: the exposition prints repr)."""
    differ = []
    for field in dataclasses.fields(GpuOverview):
        a, b = getattr(left, field.name), getattr(right, field.name)
        if isinstance(a, float) and isinstance(b, float):
            if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
                differ.append(field.name)
        elif a != b:
            differ.append(field.name)
    return differ


def test_a_metrics_page_reads_back_into_the_snapshots_own_figures() -> None:
    snapshot = demo_snapshot()
    matmul = snapshot.gpus[2].sample.device
    app = AppState(name="trainer", unit="samples", up=True, gpus=(matmul,), throughput=812.5, units_per_joule=1.25)
    snapshot = dataclasses.replace(snapshot, apps=(app,))
    direct = snapshot_overview(snapshot, stale=False)
    scraped = parse(render_metrics(snapshot).decode(), "the demo's page")
    assert scraped.backend == "replay" and scraped.replayed and not scraped.stale
    assert len(scraped.gpus) == len(direct) == 18
    assert {view.uuid: same(view, other) for view, other in zip(direct, scraped.gpus) if same(view, other)} == {}
    assert scraped.gpus[2].apps[0].throughput == 812.5
    stale = parse(render_metrics(snapshot, stale=True).decode(), "a stale page")
    assert stale.stale and not any(gpu.up for gpu in stale.gpus)


def test_a_page_that_is_not_prometheus_text_is_a_clear_error() -> None:
    with pytest.raises(ScrapeError, match="http://x/metrics is not Prometheus text"):
        parse("gpueff_gpu_up{uuid=\"a\" 1\n", "http://x/metrics")
    assert parse("# nothing of ours\nother_metric 1\n", "x").gpus == []
    assert metrics_url("http://node:9947") == "http://node:9947/metrics" and metrics_url("https://node/gpu-metrics") == "https://node/gpu-metrics"
    for bad in ("node:9947", "ftp://node/metrics", "http://user:secret@node:9947"):
        with pytest.raises(ScrapeError, match="--url"):
            metrics_url(bad)


def test_the_table_fits_80_columns_and_names_cannot_drive_the_terminal() -> None:
    gpus = snapshot_overview(demo_snapshot(), stale=False)
    hostile = dataclasses.replace(gpus[4], source="evil\x1b]0;pwned\x07\x1b[2J", model="x" * 300)
    frame = Frame(("replayed traces",), [*gpus[:4], hostile, *gpus[5:]], time.time())
    for colour in (False, True):
        lines = render(frame, 80, None, colour)
        assert max(visible_width(line) for line in lines) <= 80
        assert "\x1b]" not in "".join(lines) and "\x07" not in "".join(lines)
        assert ("\x1b[" in "".join(lines)) is colour
    wide = render(frame, 140, None, False)
    assert any("evil?]0;pwned??[2J" in line for line in wide) and max(len(line) for line in wide) <= 140
    spin = next(line for line in wide if "evil" in line)
    assert "[░░░░░░░░░░░░]" in spin and "busy-SMs-idle low-eff" in spin  # busy all the time, SMs idle: all waste
    short = render(frame, 80, 12, False)
    assert len(short) <= 12 and short[-1].startswith("… ") and "more rows" in short[-1]
    assert usage_bar(dataclasses.replace(gpus[4], utilization=0.5, sm_active=0.25), 8) == "██░░    "


def run_top(*args: str, env: dict[str, str] | None = None, timeout: float = PATIENCE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOP, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, "COLUMNS": "80", **(env or {})})


def test_in_a_pipe_it_prints_one_plain_frame_and_exits() -> None:
    done = run_top("--demo", "--interval", "200ms")  # no --once: a pipe gets one frame anyway
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert not ESCAPE.search(done.stdout) and max(len(line) for line in lines) <= 80
    assert lines[0].startswith("gpu-efficiency-exporter top ") and "replayed traces, not live GPUs" in lines[0]
    rows = [line for line in lines if re.match(r"^ {0,2}\d+ +\d+%", line)]
    assert len(rows) == 18
    assert re.search(r"underfilled .* busy-SMs-idle low-eff no-work$", rows[4])
    assert any(line.startswith("underfilled: Give each kernel more parallel work") for line in lines)


def test_local_gpus_are_read_through_the_nvml_backend_and_the_pipeline(monkeypatch, capsys, trace_paths) -> None:
    from fakes.nvml import FakeNvml

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([load_trace(trace_paths["spin_1sm"])]))  # the driver, answering as a real GPU would
    from exporter.commands.top.command import main

    assert main(["--backend", "nvml", "--once", "--interval", "200ms", "--color", "never"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("gpu-efficiency-exporter top ") and lines[0].endswith(" · nvml backend")
    row = next(line for line in lines if line.startswith("  0 "))
    # Two polls 200 ms apart: GPM's profiling readings are means over the window between them.
    assert re.search(r"^  0 100% +1% 0\.01 underfilled .* busy-SMs-idle low-eff no-work$", row), row


def test_without_a_driver_it_says_where_else_to_look(monkeypatch, capsys, trace_paths) -> None:
    from fakes.nvml import FakeNvml

    fake = FakeNvml([load_trace(trace_paths["idle"])])
    fake.unload_driver()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    from exporter.commands.top.command import main

    assert main(["--backend", "nvml", "--once"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("gpu-efficiency-exporter top: ") and "--demo" in error and "--url" in error and error.count("\n") == 1


def test_url_reads_a_running_exporter_and_says_when_it_cannot() -> None:
    with running_daemon("--demo") as daemon:
        done = run_top("--url", daemon.url, "--once")
        assert done.returncode == 0, done.stderr
        assert " · ".join(done.stdout.splitlines()[:2]).endswith(f" · {daemon.url}/metrics · replayed traces, not live GPUs")
        assert len(re.findall(r"(?m)^ {0,2}\d+ +\d+%", done.stdout)) == 18 and "busy-SMs-idle" in done.stdout
    port = free_port()
    gone = run_top("--url", f"http://127.0.0.1:{port}", "--once", "--timeout", "2s")
    assert gone.returncode == 1 and gone.stderr.startswith(f"gpu-efficiency-exporter top: cannot reach http://127.0.0.1:{port}/metrics")
    bad = run_top("--url", "127.0.0.1:9947")
    assert bad.returncode == 2 and "expected http://host:port" in bad.stderr


TMUX = shutil.which("tmux")


class Tmux:
    """A private tmux server (its own socket, no user config) with one session of a fixed size."""

    def __init__(self, command: list[str], width: int = 80, height: int = 30) -> None:
        assert TMUX is not None
        self.socket = f"gpueff-top-{uuids.uuid4().hex[:8]}"
        self.tmux("new-session", "-d", "-s", "top", "-x", str(width), "-y", str(height), " ".join(command))
        self.tmux("set-option", "-t", "top", "remain-on-exit", "on")

    def tmux(self, *args: str) -> str:
        done = subprocess.run([TMUX, "-L", self.socket, "-f", "/dev/null", *args], capture_output=True, text=True, timeout=PATIENCE)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def screen(self, escapes: bool = False) -> str:
        return self.tmux("capture-pane", "-p", "-t", "top", *(["-e"] if escapes else []))

    def wait_for(self, pattern: str, timeout: float = PATIENCE) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if re.search(pattern, screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not on the screen after {timeout} s:\n{screen}")
            time.sleep(0.1)

    def dead(self) -> bool:
        return self.tmux("display-message", "-p", "-t", "top", "#{pane_dead}").strip() == "1"

    def close(self) -> None:
        with contextlib.suppress(AssertionError, subprocess.SubprocessError):
            self.tmux("kill-server")


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed: tests/run.sh installs it (apt-get install tmux)")
def test_live_in_a_terminal_it_redraws_in_colour_and_q_quits() -> None:
    python = " ".join([sys.executable, "-m", "exporter", "top", "--demo", "--interval", "300ms"])
    terminal = Tmux([f"cd {ROOT} &&", python], width=80, height=30)
    try:
        first = terminal.wait_for(r"(?m)^ +4 .*underfilled.*busy-SMs-idle")
        lines = first.splitlines()
        assert max(len(line) for line in lines) <= 80 and len(lines) <= 30
        assert "replayed traces, not live GPUs" in lines[0]
        stamp = re.search(r"top (\d\d:\d\d:\d\d)", lines[0]).group(1)
        terminal.wait_for(r"top (?!" + stamp + r")\d\d:\d\d:\d\d")  # it redraws
        coloured = terminal.screen(escapes=True)
        assert re.search(r"\x1b\[31m.*busy-SMs-idle", coloured) and re.search(r"\x1b\[32m.*compute", coloured)
        terminal.tmux("send-keys", "-t", "top", "q")
        deadline = time.monotonic() + PATIENCE
        while not terminal.dead():
            assert time.monotonic() < deadline, "q did not quit"
            time.sleep(0.1)
        assert "busy-SMs-idle" not in terminal.screen()  # the alternate screen is gone, the shell's is back
    finally:
        terminal.close()


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed: tests/run.sh installs it (apt-get install tmux)")
def test_live_over_url_keeps_the_last_figures_and_says_when_the_exporter_stops() -> None:
    with running_daemon("--demo") as daemon:
        python = " ".join([sys.executable, "-m", "exporter", "top", "--url", daemon.url, "--interval", "300ms", "--timeout", "30s"])
        terminal = Tmux([f"cd {ROOT} &&", python], width=100, height=30)
        try:
            terminal.wait_for(r"(?m)^ +4 .*underfilled")
            daemon.stop()
            screen = terminal.wait_for(r"cannot reach http://127\.0\.0\.1:\d+/metrics")
            assert re.search(r"(?m)^ +4 .*underfilled", screen)  # the last figures stay
            terminal.tmux("send-keys", "-t", "top", "C-c")
            deadline = time.monotonic() + PATIENCE
            while not terminal.dead():
                assert time.monotonic() < deadline, "Ctrl-C did not quit"
                time.sleep(0.1)
        finally:
            terminal.close()
