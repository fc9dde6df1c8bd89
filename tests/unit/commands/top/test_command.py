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

from gpueff.apps.derive import AppState
from gpueff.backends.replay import ReplayBackend
from gpueff.commands.top.figures import CLASS_COLOURS, SHORT_CLASSES, TERMINAL_ESCAPES, usage_bar
from gpueff.commands.top.scrape import ScrapeError, metrics_url, parse
from gpueff.commands.top.table import Frame, render
from gpueff.commands.top.text import visible_width
from gpueff.commands.top.view import View, WasteWindow
from gpueff.commands.top.view import keys as view_keys
from gpueff.exposition.render import render as render_metrics
from gpueff.overview import GpuOverview, job_overviews, snapshot_overview
from gpueff.poller import Poller
from gpueff.settings import Config
from gpueff.taxonomy import CLASS_NAMES, CLASSES, TERMINAL_COLOURS
from gpueff.trace import demo_trace_paths, load_trace
from gpueff.trace_owners import demo_owners

pytestmark = pytest.mark.usefixtures("restore_logging")  # main() installs its own log handler

TOP = [sys.executable, "-m", "gpueff", "top"]
ESCAPE = re.compile(r"\x1b\[")


def demo_snapshot(polls: int = 3):
    backend = ReplayBackend([load_trace(path) for path in demo_trace_paths()])
    backend.start()
    poller = Poller(backend, Config())
    for _ in range(polls):
        snapshot = poller.poll_once()
    return snapshot


def owned_demo_snapshot(polls: int = 3):
    """The demo as --demo replays it: with its declared owners (pods, Slurm jobs, bare-host users) and their processes."""
    paths = demo_trace_paths()
    backend = ReplayBackend([load_trace(path) for path in paths], owners=demo_owners(paths))
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
    from gpueff.attribution.kubernetes.owners import GpuOwners, PodOwner
    from gpueff.attribution.slurm import SlurmJob
    from gpueff.pipeline.split import GpuSharing

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
    for key, field in (("u", "utilization"), ("s", "sm_active"), ("p", "power_watts"), ("m", "memory_used_bytes"), ("t", "temperature_celsius")):
        view = view.after(key)
        rows = rows_of(render(frame, 80, None, False, view).lines)
        leader = max(gpus, key=lambda gpu: getattr(gpu, field) or 0)
        assert int(rows[0].split()[0]) == leader.index, (key, rows[0])
    view = view.after("i")
    assert [int(row.split()[0]) for row in rows_of(render(frame, 80, None, False, view).lines)] == list(range(20))
    view = view.after("r")
    assert [int(row.split()[0]) for row in rows_of(render(frame, 80, None, False, view).lines)] == list(range(19, -1, -1))
    assert "sorted by GPU index, reversed" in render(frame, 80, None, False, view).lines[1]
    assert view.after(">").sort == "waste" and view.after("<").sort == "temperature"
    for key in ("h", "?", "f1"):
        helped = view.after(key)
        lines = render(frame, 80, 24, False, helped, live=True).lines
        assert lines[0].startswith("gpu-efficiency-exporter top: help") and len(lines) <= 24 and max(len(line) for line in lines) <= 80
        assert helped.after("x") == view and helped.after("q") == view  # any key closes it, and does nothing else
    assert view_keys(b"x?i\x1b[A\x1b[6~\x1b[2~q\x1bOBG \x1b") == ["x", "?", "i", "up", "page_down", "other", "q", "down", "G", " ", "escape"]
    assert view_keys(b"\x1bOP\x1b[11~\x1bOS\x1b[17~\x1b[21~\r\n\x7f\x08\x1b[C\x1b[D\t\x01") == ["f1", "f1", "f4", "f6", "f10", "enter", "enter", "backspace", "backspace", "right", "left", "tab", "other"]
    assert view_keys("/研究".encode()) == ["/", "研", "究"]  # a filter may be typed in any script


def test_the_selection_follows_its_gpu_and_enter_opens_its_detail_with_every_process() -> None:
    gpus = snapshot_overview(owned_demo_snapshot(), stale=False)
    frame = Frame(("replayed traces",), gpus, time.time())
    screen = render(frame, 100, 30, False, View(), live=True)
    assert "\x1b[7m" not in "".join(screen.lines)  # nothing selected until an arrow picks a GPU
    view = View().after("down", screen.order, screen.page)
    assert view.selected == screen.order[0] and view.after("up", screen.order, screen.page).selected == screen.order[0]
    view = view.after("down", screen.order, screen.page).after("j", screen.order, screen.page)
    assert view.selected == screen.order[2]
    chosen = next(gpu for gpu in gpus if gpu.uuid == view.selected)
    selected = [line for line in render(frame, 100, 30, False, view, live=True).lines if line.startswith("\x1b[7m")]
    assert len(selected) == 1 and selected[0].startswith(f"\x1b[7m{chosen.index:>3} ") and visible_width(selected[0]) == 100  # highlighted across the screen
    assert rows_of(render(frame, 100, 30, False, view.after("i"), live=True).lines)  # a new order keeps the selection on its GPU
    moved = view.after("i")
    assert moved.selected == chosen.uuid and any(line.startswith(f"\x1b[7m{chosen.index:>3} ") for line in render(frame, 100, 30, False, moved, live=True).lines)
    end = View().after("end", screen.order, screen.page)
    shown = render(frame, 80, 24, False, end, live=True)
    assert end.selected == screen.order[-1] and any(line.startswith("\x1b[7m") for line in shown.lines)  # scrolled to it
    # Enter: the GPU's detail, its processes, every figure the table shortens; Esc returns.
    detail = view.after("enter", screen.order, screen.page)
    assert detail.detail and detail.selected == chosen.uuid
    lines = render(frame, 100, 30, False, detail, live=True).lines
    assert any(line.startswith(f"GPU {chosen.index} · {chosen.model}") for line in lines) and any(line.startswith("utilization ") for line in lines)
    assert any(line.startswith("memory ") and "temperature" in line for line in lines) and any(line.startswith("GPU     PID USER") for line in lines)
    assert lines[-1].startswith("Esc, Enter or ←: the table") and len(lines) <= 30 and max(visible_width(line) for line in lines) <= 100
    assert detail.after("tab", screen.order).selected == screen.order[3] and detail.after("p", screen.order).selected == screen.order[1]
    for key in ("escape", "enter", "left", "backspace"):
        assert not detail.after(key).detail
    assert detail.after("q").done and detail.after("f10").done and View().after("f10").done


def test_slash_filters_by_name_pod_namespace_job_user_and_class_and_f6_picks_an_order() -> None:
    snapshot = owned_demo_snapshot()
    gpus = snapshot_overview(snapshot, stale=False)
    frame = Frame(("replayed traces",), gpus, time.time(), jobs=job_overviews(snapshot, stale=False), users={"1003": "alice"})
    view = View()
    for key in "/class:host q":  # q is text while the prompt is open
        view = view.after(key)
    assert view.editing and view.query == "class:host q" and not view.done
    view = view.after("backspace").after("backspace").after("enter")
    lines = render(frame, 100, 40, False, view, live=True).lines
    hosts = [gpu.index for gpu in gpus if gpu.bottleneck == "host"]
    assert sorted(int(row.split()[0]) for row in rows_of(lines)) == sorted(hosts) and f"filter 'class:host': {len(hosts)} of 20 GPUs" in "\n".join(lines)
    found = lambda query: sorted(int(row.split()[0]) for row in rows_of(render(frame, 100, None, False, View(query=query)).lines))  # noqa: E731
    pods = {pod.namespace: gpu.index for gpu in gpus for pod in gpu.pods}
    assert found("ns:research") == [pods["research"]] and found("pod:sweep-lr") == [pods["research"]]
    assert found("SERVING") == sorted(gpu.index for gpu in gpus if any(pod.namespace == "serving" for pod in gpu.pods))  # letter case aside
    assert found("job:48377") == [gpu.index for gpu in gpus if any(job.job_id == "48377" for job in gpu.slurm_jobs)]
    assert found("user:alice") == found("user:1003") != []  # a user by name (top's own host) or uid
    assert found("job:2gpu_straggler") == [18, 19] and found("name:spin_1sm") == [4] and found("serving host") == found("ns:serving class:host")
    assert found("nothing-is-called-this") == [] and "no GPU matches 'nothing-is-called-this'" in render(frame, 100, 30, False, View(query="nothing-is-called-this"), live=True).lines[-1]
    assert View(query="x").after("escape").query == "" and View(query="x", editing=True).after("escape") == View()
    menu = View().after("f6")
    assert menu.sorting and menu.choice == 0
    lines = render(frame, 80, 24, False, menu.after("down"), live=True).lines
    assert lines[lines.index(next(line for line in lines if line.startswith("Sort by"))) + 2].startswith("\x1b[7m    u  utilization")
    assert menu.after("down").after("enter").sort == "utilization" and menu.after("t").sort == "temperature" and not menu.after("escape").sorting


def test_columns_give_way_by_priority_and_the_header_never_wraps() -> None:
    from gpueff.commands.top.columns import header, layout

    previous: set[str] = set()
    for width in range(40, 201):
        for owned in (False, True):
            names = [column.name for column in layout(width, owned)]
            assert visible_width(header(layout(width, owned))) <= width, (width, owned)
            if owned:
                assert previous <= set(names), width  # a wider terminal only adds columns
                previous = set(names)
    assert [column.name for column in layout(60, True)] == ["gpu", "util", "sm", "eff", "class", "waste", "whose"]
    assert [column.name for column in layout(80, True)] == ["gpu", "util", "sm", "eff", "class", "waste", "memory", "temperature", "power", "whose"]
    assert [column.name for column in layout(80, False)] == ["gpu", "util", "sm", "eff", "class", "waste", "memory", "temperature", "power", "tensor", "dram"]
    assert [column.name for column in layout(40, True)] == ["gpu", "util", "sm", "eff", "class"]
    assert len(layout(160, True)) == 13 and [column.width for column in layout(160, True) if column.name == "whose"] == [22]
    assert "bar" in {column.name for column in layout(112, True)} and "bar" not in {column.name for column in layout(112, True, len("no-profiling"))}  # room for a short flag beside its row
    snapshot = owned_demo_snapshot()
    frame = Frame(("replayed traces",), snapshot_overview(snapshot, stale=False), time.time(), jobs=job_overviews(snapshot, stale=False))
    for width, height in ((160, 48), (120, 40), (80, 24), (60, 24), (200, 60)):
        lines = render(frame, width, height, True, live=True).lines
        everything = render(frame, width, None, True).lines  # what a pipe gets: all there is to show
        assert len(lines) == min(height, len(everything)) and all(line.strip() for line in lines), (width, height)  # every row of the terminal used
        assert len(everything) > 48 or width > 160  # at 160x48 there is more than fits: no row is left blank
        assert max(visible_width(line) for line in lines) <= width
        head = next(line for line in lines if "GPU UTIL" in line)
        assert visible_width(head) <= width and "FLAGS" in head
    lines = render(frame, 160, 48, False, live=True).lines
    assert "MEM TEMP POWER" in next(line for line in lines if "GPU UTIL" in line)
    memory = next(gpu for gpu in frame.gpus if gpu.index == 0)
    assert re.search(rf"(?m)^  0 .* {memory.memory_used_bytes / 2**30:.1f}/140G +{memory.temperature_celsius:.0f}C ", "\n".join(lines))


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
    from gpueff.attribution.kubernetes.owners import PodOwner
    from gpueff.attribution.slurm import SlurmJob

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
    from gpueff.attribution.doctor import Attribution

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
    from gpueff.commands.top.command import main

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
    from gpueff.commands.top.command import main

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
    python = " ".join([sys.executable, "-m", "gpueff", "top", "--demo", "--interval", "300ms"])
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
        python = " ".join([sys.executable, "-m", "gpueff", "top", "--url", daemon.url, "--interval", "300ms", "--timeout", "30s"])
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
    python = " ".join([sys.executable, "-m", "gpueff", "top", "--demo", "--interval", "1h"])
    terminal = Tmux([f"cd {ROOT} &&", python], width=80, height=24)
    try:
        first = terminal.wait_for(r"(?m)^lines 1-\d+ of 22")  # 20 GPUs, the flags' own line and the demo's 2-GPU job
        lines = first.splitlines()
        assert len(lines) <= 24 and max(len(line) for line in lines) <= 80
        stamp = re.search(r"top (\d\d:\d\d:\d\d)", lines[0]).group(1)
        assert rows_of(lines)[0].startswith("  4 ") and lines[lines.index(rows_of(lines)[0]) + 1].strip().startswith("busy-SMs-idle")
        assert any(line.startswith("underfilled (GPU 4): Give each kernel more parallel work") for line in lines)  # the flagged GPU's advice, on screen
        terminal.tmux("send-keys", "-t", "top", "?")
        terminal.wait_for(r"top: help .*\n(.*\n)*  w u s e p m t i +order by waste")
        terminal.tmux("send-keys", "-t", "top", "x")  # any key closes the help
        terminal.wait_for(r"sorted by waste · h: help")
        terminal.tmux("send-keys", "-t", "top", "i")
        screen = terminal.wait_for(r"sorted by GPU index · h: help")
        assert rows_of(screen.splitlines())[0].startswith("  0 ")
        terminal.tmux("send-keys", "-t", "top", "End")
        screen = terminal.wait_for(r"(?m)^lines \d+-22 of 22")
        assert rows_of(screen.splitlines())[-1].startswith(" 19 ")
        assert re.search(r"(?m)^\x1b\[7m 19 ", terminal.screen(escapes=True))  # End selects the last GPU
        terminal.tmux("send-keys", "-t", "top", "Up")
        wait_until(lambda: re.search(r"(?m)^\x1b\[7m 18 ", terminal.screen(escapes=True)), "the selection one row up")
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
        assert len(lines) == 48 and all(line.strip() for line in lines)  # no blank row: the process panel takes what the table and the advice leave
        assert any(line.startswith("GPU     PID USER") for line in lines) and lines[-1].startswith("… ")
        terminal.tmux("send-keys", "-t", "top", "q")
        deadline = time.monotonic() + PATIENCE
        while not terminal.dead():
            assert time.monotonic() < deadline, "q did not quit"
            time.sleep(0.1)
    finally:
        terminal.close()


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed: tests/run.sh installs it (apt-get install tmux)")
def test_as_nvitop_users_expect_filter_f_keys_a_selected_gpus_detail_and_60_columns() -> None:
    python = " ".join([sys.executable, "-m", "gpueff", "top", "--demo", "--interval", "1h"])
    terminal = Tmux([f"cd {ROOT} &&", python], width=60, height=24)
    try:
        screen = terminal.wait_for(r"(?m)^lines 1-\d+ of 22")
        lines = screen.splitlines()
        head = next(line for line in lines if line.startswith("GPU UTIL"))
        assert head.rstrip().endswith("FLAGS") and max(len(line) for line in lines) <= 60  # the header whole on one line
        assert lines[lines.index(head) + 1].startswith("  4 ")  # the row right below it: nothing wrapped
        terminal.tmux("send-keys", "-t", "top", "F1")
        terminal.wait_for(r"top: help")
        terminal.tmux("send-keys", "-t", "top", "x")
        terminal.wait_for(r"sorted by waste")
        terminal.tmux("send-keys", "-t", "top", "/")
        terminal.wait_for(r"(?m)^filter: █")
        terminal.tmux("send-keys", "-t", "top", "-l", "ns:serving")
        screen = terminal.wait_for(r"filter 'ns:serving': 3 of 20 GPUs")
        assert sorted(int(row.split()[0]) for row in rows_of(screen.splitlines())) == [6, 8, 9]
        terminal.tmux("send-keys", "-t", "top", "Enter")
        terminal.wait_for(r"(?m)^(?!filter: )")
        terminal.tmux("send-keys", "-t", "top", "Down", "Down")
        wait_until(lambda: re.search(r"(?m)^\x1b\[7m  8 ", terminal.screen(escapes=True)), "GPU 8 selected")
        terminal.tmux("send-keys", "-t", "top", "Enter")
        screen = terminal.wait_for(r"(?m)^GPU 8 · ")
        assert "owner: pod serving/llama-b1-6f7c" in screen and re.search(r"(?m)^GPU +PID USER", screen) and re.search(r"(?m)^  8 +\d+ ", screen)  # its process
        terminal.tmux("send-keys", "-t", "top", "Escape")
        terminal.wait_for(r"(?m)^(lines |GPU UTIL)")
        terminal.tmux("send-keys", "-t", "top", "F6")
        terminal.wait_for(r"Sort by")
        terminal.tmux("send-keys", "-t", "top", "Down", "Enter")
        terminal.wait_for(r"sorted by utilization")
        terminal.tmux("send-keys", "-t", "top", "Escape")  # clears the filter: every GPU again, GPU 8 still selected and in sight
        screen = terminal.wait_for(r"(?m)^lines \d+-\d+ of 22")
        assert re.search(r"(?m)^\x1b\[7m  8 ", terminal.screen(escapes=True)) and "filter '" not in screen
        terminal.tmux("send-keys", "-t", "top", "F10")
        deadline = time.monotonic() + PATIENCE
        while not terminal.dead():
            assert time.monotonic() < deadline, "F10 did not quit"
            time.sleep(0.1)
    finally:
        terminal.close()
