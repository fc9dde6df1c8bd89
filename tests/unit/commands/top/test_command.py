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
from waiting import PATIENCE, wait_until

from exporter.apps.derive import AppState
from exporter.backends.replay import ReplayBackend
from exporter.commands.top.scrape import ScrapeError, metrics_url, parse
from exporter.commands.top.table import (
    CLASS_COLOURS,
    SHORT_CLASSES,
    TERMINAL_ESCAPES,
    Frame,
    render,
    usage_bar,
    visible_width,
)
from exporter.commands.top.view import View, WasteWindow
from exporter.commands.top.view import keys as view_keys
from exporter.exposition.render import render as render_metrics
from exporter.overview import GpuOverview, snapshot_overview
from exporter.poller import Poller
from exporter.settings import Config
from exporter.taxonomy import CLASS_NAMES, CLASSES, TERMINAL_COLOURS
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
    assert len(scraped.gpus) == len(direct) == 20
    assert {view.uuid: same(view, other) for view, other in zip(direct, scraped.gpus) if same(view, other)} == {}
    assert scraped.gpus[2].apps[0].throughput == 812.5
    stale = parse(render_metrics(snapshot, stale=True).decode(), "a stale page")
    assert stale.stale and not any(gpu.up for gpu in stale.gpus)


def test_pods_and_slurm_jobs_read_back_from_the_page_hostile_bytes_included() -> None:
    from exporter.attribution.kubernetes.owners import GpuOwners, PodOwner
    from exporter.attribution.slurm import SlurmJob
    from exporter.pipeline.split import GpuSharing

    snapshot = demo_snapshot(polls=2)
    pods = (PodOwner("ml", 'evil"}\n\x1b[2J', "main"), PodOwner("ml", "b", "c", (("team", "x"),)))
    first = dataclasses.replace(snapshot.gpus[0], owners=GpuOwners(pods=pods))
    second = dataclasses.replace(snapshot.gpus[1], sharing=GpuSharing(jobs=(SlurmJob("77", user_id="1000"), SlurmJob("78"))))
    snapshot = dataclasses.replace(snapshot, gpus=(first, second, *snapshot.gpus[2:]))
    direct = snapshot_overview(snapshot, stale=False)
    scraped = parse(render_metrics(snapshot).decode(), "a page with owners").gpus
    assert direct[0].pods == scraped[0].pods == (PodOwner("ml", "b", "c"), PodOwner("ml", 'evil"}\n\x1b[2J', "main"))
    assert direct[1].slurm_jobs == scraped[1].slurm_jobs == (SlurmJob("77", user_id="1000"), SlurmJob("78"))
    assert scraped[2].pods == scraped[2].slurm_jobs == ()


def test_a_page_that_is_not_prometheus_text_is_a_clear_error() -> None:
    with pytest.raises(ScrapeError, match="http://x/metrics is not Prometheus text"):
        parse("gpueff_gpu_up{uuid=\"a\" 1\n", "http://x/metrics")
    assert parse("# nothing of ours\nother_metric 1\n", "x").gpus == []
    assert metrics_url("http://node:9947") == "http://node:9947/metrics" and metrics_url("https://node/gpu-metrics") == "https://node/gpu-metrics"
    for bad in ("node:9947", "ftp://node/metrics", "http://user:secret@node:9947"):
        with pytest.raises(ScrapeError, match="--url"):
            metrics_url(bad)


def test_every_class_is_painted_in_the_colour_its_row_names() -> None:
    assert set(CLASS_COLOURS) == set(CLASS_NAMES) and set(TERMINAL_ESCAPES) == set(TERMINAL_COLOURS)
    first = snapshot_overview(demo_snapshot(1), stale=False)[0]
    for each in CLASSES:
        assert each.colour in TERMINAL_COLOURS, each.name
        lines = render(Frame(("test",), [dataclasses.replace(first, bottleneck=each.name)]), 100, None, colour=True).lines
        assert any(TERMINAL_ESCAPES[each.colour] + SHORT_CLASSES.get(each.name, each.name) in line for line in lines), each.name


def test_the_table_fits_80_columns_and_names_cannot_drive_the_terminal() -> None:
    gpus = snapshot_overview(demo_snapshot(), stale=False)
    hostile = dataclasses.replace(gpus[4], source="evil\x1b]0;pwned\x07\x1b[2J", model="x" * 300)
    frame = Frame(("replayed traces",), [*gpus[:4], hostile, *gpus[5:]], time.time())
    for colour in (False, True):
        lines = render(frame, 80, None, colour).lines
        assert max(visible_width(line) for line in lines) <= 80
        assert "\x1b]" not in "".join(lines) and "\x07" not in "".join(lines)
        assert ("\x1b[" in "".join(lines)) is colour
    wide = render(frame, 140, None, False).lines
    assert any("evil?]0;pwned??[2J" in line for line in wide) and max(len(line) for line in wide) <= 140
    spin = next(line for line in wide if "evil" in line)
    assert "[░░░░░░░░░░░░]" in spin and "busy-SMs-idle low-eff" in spin  # busy all the time, SMs idle: all waste
    assert usage_bar(dataclasses.replace(gpus[4], utilization=0.5, sm_active=0.25), 8) == "██░░    "


def rows_of(lines: list[str]) -> list[str]:
    return [line for line in lines if re.match(r"^ {0,2}\d+ +(\d+%|–)", line)]


def test_the_gpu_that_wastes_most_comes_first_and_its_advice_stays_on_a_short_screen() -> None:
    gpus = snapshot_overview(demo_snapshot(), stale=False)
    waste = WasteWindow()
    waste.add(gpus, 0.0)
    later = [dataclasses.replace(gpu, busy_idle_sm_seconds=(gpu.busy_idle_sm_seconds or 0.0) + 30.0 * (gpu.utilization or 0) * (1 - (gpu.sm_active or 0))) for gpu in gpus]
    frame = Frame(("replayed traces",), later, time.time(), waste=waste.add(later, 30.0))
    screen = render(frame, 80, 24, False, live=True)
    assert len(screen.lines) == 24 and max(len(line) for line in screen.lines) <= 80
    rows = rows_of(screen.lines)
    assert rows[0].startswith("  4 100%") and "underfilled" in rows[0]
    assert screen.lines[screen.lines.index(rows[0]) + 1] == "     busy-SMs-idle low-eff no-work"  # too many flags beside the figures: whole, below
    assert re.search(r"underfilled +29\.\ds?|underfilled +30s", rows[0]), rows[0]  # 30 s busy, one SM of 132 working
    # 20 GPUs do not fit 24 lines: the rows scroll, and what to try for the flagged GPU's class stays, first.
    where = next(line for line in screen.lines if line.startswith("lines "))
    assert where.startswith(f"lines 1-{screen.page} of 21")  # 20 GPUs and the flags' own line
    advice = screen.lines[screen.lines.index(where) + 1 :]
    assert advice[0].startswith("underfilled (GPU 4): Give each kernel more parallel work")
    # Scrolled to the end, the last rows show; the advice stays.
    end = render(frame, 80, 24, False, View(scroll=1000), live=True)
    assert end.scroll == 21 - end.page and rows_of(end.lines)[-1] == rows_of(render(frame, 80, None, False).lines)[-1]
    assert any(line.startswith("underfilled (GPU 4)") for line in end.lines)
    # A pipe gets every row and all the advice, flagged classes first (no longer alphabetical).
    everything = render(frame, 80, None, False).lines
    assert len(rows_of(everything)) == 20
    classes = [line.split(" (GPU")[0] for line in everything if re.match(r"^\w+ \(GPU ", line)]
    assert classes[0] == "underfilled" and sorted(classes) != classes


def test_sort_keys_order_the_gpus_and_any_key_closes_the_help() -> None:
    gpus = snapshot_overview(demo_snapshot(), stale=False)
    frame = Frame(("replayed traces",), gpus, time.time())
    view = View()
    for key, first in (("u", max), ("s", max), ("p", max)):
        view = view.after(view_keys(key.encode())[0], 10)
        field = {"u": "utilization", "s": "sm_active", "p": "power_watts"}[key]
        rows = rows_of(render(frame, 80, None, False, view).lines)
        leader = first(gpus, key=lambda gpu: getattr(gpu, field) or 0)
        assert int(rows[0].split()[0]) == leader.index, (key, rows[0])
    view = view.after("sort:index", 10)
    assert [int(row.split()[0]) for row in rows_of(render(frame, 80, None, False, view).lines)] == list(range(20))
    view = view.after("reverse", 10)
    assert [int(row.split()[0]) for row in rows_of(render(frame, 80, None, False, view).lines)] == list(range(19, -1, -1))
    assert "sorted by GPU index, reversed" in render(frame, 80, None, False, view).lines[1]
    assert view.after("next_sort", 10).sort == "waste" and view.after("previous_sort", 10).sort == "power"
    assert View(scroll=5).after("page_down", 10).scroll == 14 and View(scroll=5).after("home", 10).scroll == 0 and View(scroll=5).after("up", 10).scroll == 4
    helped = view.after("help", 10)
    lines = render(frame, 80, 24, False, helped, live=True).lines
    assert lines[0].startswith("gpu-efficiency-exporter top: help") and len(lines) <= 24 and max(len(line) for line in lines) <= 80
    assert helped.after("other", 10) == view  # any key closes it, and does nothing else
    assert view_keys(b"x?i\x1b[A\x1b[6~\x1b[2~q\x1bOBG \x1b") == ["other", "help", "sort:index", "up", "page_down", "other", "quit", "down", "end", "page_down", "other"]


def test_the_waste_window_keeps_ten_minutes_and_starts_again_with_the_counter() -> None:
    gpu = snapshot_overview(demo_snapshot(), stale=False)[4]
    window = WasteWindow(window=600.0, step=1.0)
    assert window.add([dataclasses.replace(gpu, busy_idle_sm_seconds=100.0)], 0.0) == {}
    for second in range(1, 1201):  # wasting 1 s each second for 20 minutes, a frame each 500 ms
        waste = window.add([dataclasses.replace(gpu, busy_idle_sm_seconds=100.0 + second)], float(second))
        window.add([dataclasses.replace(gpu, busy_idle_sm_seconds=100.0 + second + 0.5)], second + 0.5)
    assert waste[gpu.uuid] == pytest.approx(600.0, abs=1.0) and len(window._readings[gpu.uuid]) <= 602
    assert window.add([dataclasses.replace(gpu, busy_idle_sm_seconds=3.0)], 1201.0) == {}  # the exporter restarted
    assert window.add([], 1202.0) == {} and window._readings == {}


def test_whose_column_names_pods_and_jobs_safely_and_takes_tb_s_place_at_80_columns() -> None:
    from exporter.attribution.kubernetes.owners import PodOwner
    from exporter.attribution.slurm import SlurmJob

    gpus = snapshot_overview(demo_snapshot(), stale=False)
    pods = (PodOwner("ml\x1b[2J", "t\x07-0", "main"), PodOwner("ml", "other", "main"))
    owned = [dataclasses.replace(gpus[4], pods=pods), dataclasses.replace(gpus[2], slurm_jobs=(SlurmJob("4242"), SlurmJob("4243"))), *gpus[5:8]]
    frame = Frame(("x",), owned, time.time())
    narrow = render(frame, 80, None, True).lines
    assert max(visible_width(line) for line in narrow) <= 80 and "\x07" not in "".join(narrow) and "\x1b[2J" not in "".join(narrow)
    head = next(line for line in narrow if "GPU UTIL" in line)
    assert "WHOSE" in head and "TB/s" not in head
    plain = render(frame, 80, None, False).lines
    assert any(row.startswith("  4 ") and "ml?[2J/t?-0 +1" in row for row in plain)
    assert any(row.startswith("  2 ") and "job 4242,4243" in row for row in plain)
    wide = render(frame, 160, None, False).lines
    assert any(row.startswith("  5 ") and "tiny_kernels" in row for row in wide)  # no owner: the trace's name
    assert "TB/s" in next(line for line in wide if "GPU UTIL" in line)


def test_the_owners_line_says_whose_each_gpu_is_and_why_none_is_named() -> None:
    from exporter.attribution.doctor import Attribution

    snapshot = demo_snapshot(polls=2)
    said = [Attribution("kubelet", "ok"), Attribution("none", "socket_missing"), Attribution("pod_cgroup", "no_gpu_limit"), Attribution("none", "no_process"), Attribution("none", "socket_missing")]
    gpus = tuple(dataclasses.replace(state, attribution=found) for state, found in zip(snapshot.gpus, said, strict=False))
    snapshot = dataclasses.replace(snapshot, gpus=gpus + snapshot.gpus[len(gpus):])
    page = render_metrics(snapshot).decode()
    page = page.replace('path="kubelet",reason="ok"', 'path="\x1b[2J",reason="ok"', 1)  # a value no exporter writes: ignored
    scraped = parse(page, "a page with attributions").gpus
    assert scraped[0].attribution is None and scraped[1].attribution == ("none", "socket_missing") and scraped[5].attribution == ("none", "processes_not_listed")
    plain = render(Frame(("x",), snapshot_overview(snapshot, stale=False)[:5], time.time()), 120, None, False).lines
    owners = next(line for line in plain if line.startswith("owners: "))
    assert owners == "owners: kubelet 1 · socket missing: GPU 1, 4 · no gpu limit: GPU 2 · free: GPU 3"
    assert any(row.startswith("  2 ") and "? no gpu limit" in row for row in plain) and any(row.startswith("  3 ") and "] free" in row for row in plain)


def run_top(*args: str, env: dict[str, str] | None = None, timeout: float = PATIENCE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOP, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, "COLUMNS": "80", **(env or {})})


def test_in_a_pipe_it_prints_one_plain_frame_and_exits() -> None:
    done = run_top("--demo", "--interval", "200ms")  # no --once: a pipe gets one frame anyway
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert not ESCAPE.search(done.stdout) and max(len(line) for line in lines) <= 80
    assert lines[0].startswith("gpu-efficiency-exporter top ") and "replayed traces, not live GPUs" in lines[0]
    rows = [line for line in lines if re.match(r"^ {0,2}\d+ +\d+%", line)]
    assert len(rows) == 20
    assert rows[0].startswith("  4 ") and "underfilled" in rows[0] and lines[lines.index(rows[0]) + 1] == "     busy-SMs-idle low-eff no-work"  # the most waste first
    assert "sorted by waste" in lines[1] and "h: help" not in done.stdout  # no keys in a pipe
    assert lines[lines.index(rows[-1]) + 1].startswith("job trace 2gpu_straggler: GPUs 18,19")  # the demo's multi-GPU job, below its GPUs
    assert lines[lines.index(rows[-1]) + 2].startswith("underfilled (GPU 4): Give each kernel more parallel work")


def test_local_gpus_are_read_through_the_nvml_backend_and_the_pipeline(monkeypatch, capsys, trace_paths) -> None:
    from fakes.nvml import FakeNvml

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([load_trace(trace_paths["spin_1sm"])]))  # the driver, answering as a real GPU would
    from exporter.commands.top.command import main

    assert main(["--backend", "nvml", "--once", "--interval", "200ms", "--color", "never"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("gpu-efficiency-exporter top ") and lines[0].endswith(" · nvml backend · sorted by waste")
    row = next(line for line in lines if line.startswith("  0 "))
    # Two polls 200 ms apart: GPM's profiling readings are means over the window between them.
    assert re.search(r"^  0 100% +1% 0\.01 underfilled ", row) and lines[lines.index(row) + 1] == "     busy-SMs-idle low-eff no-work", row


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
        assert " · ".join(done.stdout.splitlines()[:2]).endswith(f" · {daemon.url}/metrics · replayed traces, not live GPUs · sorted by waste")
        assert len(re.findall(r"(?m)^ {0,2}\d+ +\d+%", done.stdout)) == 20 and "busy-SMs-idle" in done.stdout
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
        first = terminal.wait_for(r"(?m)^ +4 .*underfilled.*\n +busy-SMs-idle")
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


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed: tests/run.sh installs it (apt-get install tmux)")
def test_keys_sort_scroll_and_help_and_a_resize_redraws_at_once_at_80x24_and_160x48() -> None:
    # One poll an hour: every change below is drawn by a key or a resize, not by a new poll (the stamp stays).
    python = " ".join([sys.executable, "-m", "exporter", "top", "--demo", "--interval", "1h"])
    terminal = Tmux([f"cd {ROOT} &&", python], width=80, height=24)
    try:
        first = terminal.wait_for(r"(?m)^lines 1-\d+ of 22")  # 20 GPUs, the flags' own line and the demo's 2-GPU job
        lines = first.splitlines()
        assert len(lines) <= 24 and max(len(line) for line in lines) <= 80
        stamp = re.search(r"top (\d\d:\d\d:\d\d)", lines[0]).group(1)
        assert rows_of(lines)[0].startswith("  4 ") and lines[lines.index(rows_of(lines)[0]) + 1].strip().startswith("busy-SMs-idle")
        assert any(line.startswith("underfilled (GPU 4): Give each kernel more parallel work") for line in lines)  # the flagged GPU's advice, on screen
        terminal.tmux("send-keys", "-t", "top", "?")
        terminal.wait_for(r"top: help .*\n(.*\n)*  w u s e p i +order by waste")
        terminal.tmux("send-keys", "-t", "top", "x")  # any key closes the help
        terminal.wait_for(r"sorted by waste · h: help")
        terminal.tmux("send-keys", "-t", "top", "i")
        screen = terminal.wait_for(r"sorted by GPU index · h: help")
        assert rows_of(screen.splitlines())[0].startswith("  0 ")
        terminal.tmux("send-keys", "-t", "top", "End")
        screen = terminal.wait_for(r"(?m)^lines \d+-22 of 22")
        assert rows_of(screen.splitlines())[-1].startswith(" 19 ")
        terminal.tmux("send-keys", "-t", "top", "Up")
        terminal.wait_for(r"(?m)^lines \d+-21 of 22")
        terminal.tmux("send-keys", "-t", "top", "r")
        screen = terminal.wait_for(r"sorted by GPU index, reversed")
        assert rows_of(screen.splitlines())[0].startswith(" 19 ") and "lines 1-" in screen  # a new order starts at the top
        terminal.tmux("send-keys", "-t", "top", "w")
        terminal.tmux("resize-window", "-t", "top", "-x", "160", "-y", "48")
        terminal.wait_for(r"UTIL vs SM +WHOSE")
        # The frame's head may be captured before tmux has read the rest of it: wait for the rows too.
        whole = lambda: (lines if len(rows_of(lines := terminal.screen().splitlines())) == 20 else None)  # noqa: E731
        lines = wait_until(whole, "the 160x48 frame's 20 rows")
        assert len(rows_of(lines)) == 20 and not any(line.startswith("lines ") for line in lines) and max(len(line) for line in lines) <= 160
        assert f"top {stamp} " in lines[0] and rows_of(lines)[0].startswith("  4 ") and "research/sweep-lr-3e4" in rows_of(lines)[0] and rows_of(lines)[0].endswith("busy-SMs-idle low-eff no-work")
        terminal.tmux("send-keys", "-t", "top", "q")
        deadline = time.monotonic() + PATIENCE
        while not terminal.dead():
            assert time.monotonic() < deadline, "q did not quit"
            time.sleep(0.1)
    finally:
        terminal.close()
