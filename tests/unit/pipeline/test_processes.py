"""Each GPU's processes in view (gpueff/pipeline/processes.py): the rows, their cap and the rest
summed, the busy shares, names only where process_names allows; end to end from fake pynvml and a
fake /proc through the poller to the per_process collector's series (off by default), top --url's
reading of them and top's process panel."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from fakes.nvml import FakeClock, FakeGpu, FakeNvml
from fakes.proc import process
from prometheus_client.parser import text_string_to_metric_families

from gpueff.attribution.holders import Holder, ProcessIdentity
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.commands.top.processes import header, process_lines
from gpueff.commands.top.scrape import parse
from gpueff.commands.top.table import Frame, render
from gpueff.commands.top.text import display_width, visible_width
from gpueff.exposition.render import render as render_metrics
from gpueff.metrics import MAX_PROCESSES
from gpueff.overview import snapshot_overview
from gpueff.pipeline.processes import gpu_processes
from gpueff.poller import Poller
from gpueff.sample import DeviceInfo, GpuProcess, GpuSample, ProcessUtilization
from gpueff.settings import parse_config
from gpueff.trace import load_trace

POD = "1f2e3d4c-5b6a-4789-8a9b-0c1d2e3f4a5b"
POD_CGROUP = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e3d4c_5b6a_4789_8a9b_0c1d2e3f4a5b.slice/cri-containerd-" + "a" * 64 + ".scope"
SLURM = "0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0"
HOSTILE = "ev\x1b]0;x\x07il"  # a name that would retitle and ring a terminal


def sample(processes: list[tuple[int, float | None]], utilization: list[tuple[int, float]] | None) -> GpuSample:
    device = DeviceInfo(index=0, uuid="GPU-0", name="NVIDIA H200")
    samples = None if utilization is None else tuple(ProcessUtilization(pid, sm, 0.0, 1) for pid, sm in utilization)
    return GpuSample(device=device, timestamp=0.0, processes=tuple(GpuProcess(pid, "python3", memory) for pid, memory in processes), process_utilization=samples)


def test_rows_are_capped_the_most_memory_first_and_the_rest_summed() -> None:
    pids = list(range(100, 100 + MAX_PROCESSES + 4))
    found = gpu_processes(sample([(pid, float(pid)) for pid in pids], [(pid, 0.1) for pid in pids]), {}, names=True)
    assert found is not None and len(found.rows) == MAX_PROCESSES and found.others == 4
    assert [row.pid for row in found.rows] == sorted(pids, reverse=True)[:MAX_PROCESSES]  # the most memory first
    assert found.others_memory_bytes == float(sum(pids[:4])) and found.others_busy_share == pytest.approx(4 / len(pids))
    assert sum(row.busy_share or 0.0 for row in found.rows) + found.others_busy_share == pytest.approx(1.0)
    assert {row.holder_kind for row in found.rows} == {"unattributed"}  # no identity read: nobody's


def test_shares_follow_the_samples_and_are_unknown_without_them() -> None:
    one = gpu_processes(sample([(1, 1e9), (2, None)], [(1, 0.6), (1, 0.3), (2, 0.3)]), {}, names=True)
    assert one is not None and [(row.pid, row.busy_share, row.memory_bytes) for row in one.rows] == [(1, pytest.approx(0.75), 1e9), (2, pytest.approx(0.25), None)]
    idle = gpu_processes(sample([(1, 1e9)], []), {}, names=True)
    assert idle is not None and idle.rows[0].busy_share == 0.0  # NVML saw no kernel in the window
    unread = gpu_processes(sample([(1, 1e9)], None), {}, names=True)
    assert unread is not None and unread.rows[0].busy_share is None and not unread.rest
    assert gpu_processes(GpuSample(device=DeviceInfo(0, "GPU-0", "x"), timestamp=0.0), {}, names=True) is None  # a backend that lists none


def test_names_show_only_where_process_names_allows() -> None:
    identities = {1: ProcessIdentity(Holder("process", "secret-ft", "1001"), user_id="1001", name="secret-ft"), 2: ProcessIdentity(Holder("pod", POD), user_id="0", name="python3")}
    shown = gpu_processes(sample([(1, 2e9), (2, 1e9)], None), identities, names=True)
    hidden = gpu_processes(sample([(1, 2e9), (2, 1e9)], None), identities, names=False)
    assert shown is not None and [(row.name, row.holder_kind, row.holder) for row in shown.rows] == [("secret-ft", "process", "1001:secret-ft"), ("python3", "pod", POD)]
    assert hidden is not None and [(row.name, row.holder_kind, row.holder, row.user_id) for row in hidden.rows] == [("", "user", "1001", "1001"), ("", "pod", POD, "0")]


def run(tmp_path: Path, trace_paths, settings: dict, polls: int = 4) -> Poller:
    """GPU 0 shared by a pod, a Slurm job and two users of a bare host (one named hostilely, one
    with a CJK name), and 18 small processes of user 1003 beyond the cap; GPU 1 idle and free."""
    process(tmp_path, 10, "python3", cgroup=POD_CGROUP, uid=0)
    process(tmp_path, 20, "python3", cgroup=SLURM.format(job=4242), uid=2001)
    process(tmp_path, 30, HOSTILE, uid=1001)
    process(tmp_path, 31, "训练", uid=1002)
    small = list(range(100, 118))
    for pid in small:
        process(tmp_path, pid, "worker", uid=1003)
    gib = 1 << 30
    listed = [(10, 8 * gib, "/usr/bin/python3"), (20, 4 * gib, "/usr/bin/python3"), (30, 2 * gib, "/tmp/evil"), (31, gib, "/opt/x")] + [(pid, 1 << 20, "/bin/worker") for pid in small]
    busy = FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=listed, process_duty={10: 0.5, 20: 0.2, 30: 0.2, 31: 0.1})
    free = FakeGpu(load_trace(trace_paths["idle"]))
    clock = FakeClock()
    backend = NvmlBackend(slow_interval=5.0, nvml=FakeNvml([busy, free], clock=clock), clock=clock)
    backend.start()
    poller = Poller(backend, parse_config({"proc_root": str(tmp_path), **settings}), clock=clock)
    for _ in range(polls):
        poller.poll_once()
        clock.advance(1.0)
    return poller


def series(text: str, name: str) -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for each in family.samples:
            if each.name == name:
                found[each.labels["pid"]] = {**each.labels, "value": each.value}
    return found


def test_the_processes_of_every_owner_end_to_end_and_their_series_only_when_asked_for(tmp_path: Path, trace_paths) -> None:
    poller = run(tmp_path, trace_paths, {})
    snapshot = poller.poll_once()
    shared, free = snapshot.gpus[0].processes, snapshot.gpus[1].processes
    assert free is not None and free.rows == () and shared is not None
    head = [(row.pid, row.user_id, row.name, row.memory_bytes, row.holder_kind, row.holder) for row in shared.rows[:4]]
    assert head == [(10, "0", "python3", 8.0 * (1 << 30), "pod", POD), (20, "2001", "python3", 4.0 * (1 << 30), "slurm_job", "4242"),
                    (30, "1001", HOSTILE, 2.0 * (1 << 30), "process", f"1001:{HOSTILE}"), (31, "1002", "训练", 1.0 * (1 << 30), "process", "1002:训练")]
    assert len(shared.rows) == MAX_PROCESSES and shared.others == 22 - MAX_PROCESSES and shared.others_memory_bytes == 6.0 * (1 << 20)
    assert all(row.busy_share is None for row in shared.rows)  # no per-process samples read: neither the split nor the collector asks
    assert b"gpueff_process_" not in render_metrics(snapshot)  # the collector is off by default: /metrics is unchanged


def test_the_per_process_collector_exports_bounded_escaped_series_that_top_reads_back(tmp_path: Path, trace_paths) -> None:
    poller = run(tmp_path, trace_paths, {"collectors": {"enabled": ["per_process"]}})
    snapshot = poller.poll_once()
    text = render_metrics(snapshot).decode()
    memory, shares = series(text, "gpueff_process_memory_bytes"), series(text, "gpueff_process_busy_share_ratio")
    assert len(memory) == MAX_PROCESSES + 1 and memory["other"]["value"] == 6.0 * (1 << 20) and memory["other"]["command"] == ""
    assert memory["30"]["command"] == HOSTILE and memory["30"]["holder"] == f"1001:{HOSTILE}"  # escaped on the wire, the same bytes read back
    assert '\\x1b' not in text and "\x07" in text.split('pid="30"')[1].split("\n")[0]  # a label value holds the bytes; the exposition escapes only \\ " and newline
    assert shares["10"]["value"] == pytest.approx(0.5, abs=0.02) and shares["20"]["value"] == pytest.approx(0.2, abs=0.02)  # the samples' duty
    assert memory["10"]["holder_kind"] == "pod" and memory["20"]["holder"] == "4242" and memory["31"]["user_id"] == "1002"
    scraped = parse(text, "the page").gpus[0].processes
    assert scraped is not None and scraped.rows == snapshot.gpus[0].processes.rows and scraped.others == 22 - MAX_PROCESSES
    # top's panel from that page: every row safe, within the width, the rest on one line.
    gpus = parse(text, "the page").gpus
    for width in (60, 80, 160):
        lines = process_lines(gpus, {"1002": "李雷"}, width)
        assert all(display_width(line) <= width for line in lines) and not any("\x1b" in line or "\x07" in line for line in lines)
        assert display_width(header(width)) <= width
    wide = process_lines(gpus, {"1002": "李雷"}, 160)
    assert wide[0].split() == ["0", "10", "0", "8192MiB", "50%", "pod", POD, "python3"]
    assert "ev?]0;x?il" in wide[2] and "user 1001" in wide[2] and "李雷" in wide[3] and "job 4242" in wide[1]
    assert wide[-1].split() == ["0", "+6", "more", "6MiB", "0%"]
    screen = render(Frame(("x",), gpus, 0.0, users={"1002": "李雷"}), 120, None, False).lines  # a pipe: the panel below the advice
    panel = screen.index(header(120))
    assert screen[panel + 1 :] == process_lines(gpus, {"1002": "李雷"}, 120) and max(visible_width(line) for line in screen) <= 120


def test_without_process_names_no_name_reaches_any_reader(tmp_path: Path, trace_paths) -> None:
    poller = run(tmp_path, trace_paths, {"collectors": {"enabled": ["per_process"]}, "process_names": False})
    snapshot = poller.poll_once()
    text = render_metrics(snapshot).decode()
    assert [name for name in ("ev\x1b", "训练", 'command="worker"', ":python3") if name in text] == []
    rows = snapshot_overview(snapshot, stale=False)[0].processes
    assert rows is not None and {row.name for row in rows.rows} == {""} and rows.rows[2].holder == "1001"
