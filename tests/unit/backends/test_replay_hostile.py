"""Replay traces written by someone else: strings no page can encode, names that carry terminal
escapes, and sample counts that must cost the replay's start-up and each poll in proportion."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from conftest import ROOT, running_daemon
from waiting import PATIENCE

from gpueff.backends.replay import ReplayBackend
from gpueff.logs import LogfmtFormatter
from gpueff.trace import TraceError, load_trace, parse_trace


def trace_object(samples: int = 4, **changes) -> dict:
    trace = {
        "format": "gpu-trace/1",
        "gpu": {"name": "NVIDIA H100", "driver": "570", "max_sm_clock_mhz": 1980, "power_limit_mw": 700000, "sm_count": 132},
        "workload": "w",
        "interval_s": 0.5,
        "samples": [{"t": 0.5 * (number + 1), "util_gpu": 50, "SM_UTIL": 25.0} for number in range(samples)],
    }
    trace.update(changes)
    return trace


@pytest.mark.parametrize(("change", "where"), [
    ({"gpu": {**trace_object()["gpu"], "name": "bad\ud800name"}}, "'gpu.name'"),
    ({"gpu": {**trace_object()["gpu"], "uuid": "GPU-\udfff"}}, "'gpu.uuid'"),
    ({"workload": "w\ud800"}, "'workload'"),
    ({"description": "\udc80"}, "'description'"),
    ({"truth": {"t\ud800": 1.0}}, "a key of 'truth'"),
])
def test_a_lone_surrogate_in_a_trace_string_is_refused_at_start(tmp_path, change, where) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(trace_object(**change)))  # json.dumps writes it as \\udXXX, as an attacker's file would
    with pytest.raises(TraceError, match=rf"trace .*bad\.json: {where}: contains a lone UTF-16 surrogate"):
        load_trace(path)
    done = subprocess.run([sys.executable, "-m", "gpueff", "--replay", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 2 and "lone UTF-16 surrogate" in done.stderr  # refused at start, not 503 on every poll


GPU = trace_object()["gpu"]


@pytest.mark.parametrize(("change", "where", "limit"), [
    ({"workload": "w" * (1 << 20)}, "'workload'", 128),
    ({"gpu": {**GPU, "name": "n" * 129}}, "'gpu.name'", 128),
    ({"gpu": {**GPU, "driver": "5" * 129}}, "'gpu.driver'", 128),
    ({"gpu": {**GPU, "uuid": "GPU-" + "0" * 125}}, "'gpu.uuid'", 128),
    ({"gpu": {**GPU, "pci_bus_id": "0" * 129}}, "'gpu.pci_bus_id'", 128),
    ({"job": "j" * 129}, "'job'", 128),
    ({"description": "d" * 4097}, "'description'", 4096),
    ({"truth": {"t" * 65: 1.0}}, "a key of 'truth'", 64),
])
def test_every_string_of_a_trace_is_bounded_and_the_error_names_the_key_and_the_file(tmp_path, change, where, limit) -> None:
    # Before: a 1 MiB workload loaded, and as part of the uuid of a UUID-less GPU it made 113 MB of /metrics.
    path = tmp_path / "long.json"
    path.write_text(json.dumps(trace_object(**change)))
    with pytest.raises(TraceError, match=rf"trace .*long\.json: {where}") as raised:
        load_trace(path)
    assert f"at most {limit} characters" in str(raised.value) and len(str(raised.value)) < 600


def test_an_error_quotes_at_most_a_bounded_part_of_what_it_refuses(tmp_path) -> None:
    huge = "k" * (1 << 20)
    for change in ({huge: 1}, {"format": huge}, {"warmup_samples": huge}, {"gpu": {**GPU, huge: "x"}}, {"samples": [{"t": 0.5, huge: 1}]}, {"samples": [{"t": 0.5, "health": {huge: 1}}]}):
        with pytest.raises(TraceError) as raised:
            parse_trace({**trace_object(), **change}, "t.json")
        assert "t.json" in str(raised.value) and len(str(raised.value)) < 2000, str(raised.value)[:300]


def test_escape_and_bell_in_a_workload_name_never_reach_the_log_raw(tmp_path) -> None:
    record = logging.LogRecord("gpueff", logging.INFO, __file__, 1, "replaying %s", ("\x1b]2;T\x07\x1b[2J\x9b",), None)
    line = LogfmtFormatter().format(record)
    assert "\x1b" not in line and "\x07" not in line and "\x9b" not in line and r"\x1b]2;T\x07\x1b[2J\x9b" in line
    path = tmp_path / "escapes.json"
    path.write_text(json.dumps(trace_object(workload="\x1b]2;T\x07")))
    with running_daemon("--replay", str(path), "--log.level", "info") as daemon:
        pass
    assert " version=" in daemon.output and "\x1b" not in daemon.output and "\x07" not in daemon.output


class Counted(list):
    """A list that counts the items read from it, however they are read."""

    reads = 0

    def __getitem__(self, item):
        found = super().__getitem__(item)
        Counted.reads += len(found) if isinstance(item, slice) else 1
        return found

    def __iter__(self):
        for item in super().__iter__():
            Counted.reads += 1
            yield item


def reads_to_start_and_poll(samples: int) -> tuple[int, int]:
    """Items read from the trace's samples and the replay's window ends to start a replay, and to make 10 polls."""
    trace = parse_trace(trace_object(samples), "counted")
    object.__setattr__(trace, "samples", Counted(trace.samples))
    now = [0.0]
    Counted.reads = 0
    backend = ReplayBackend([trace], clock=lambda: now[0])
    backend.start()
    backend._ends = [Counted(ends) for ends in backend._ends]
    started = Counted.reads
    Counted.reads = 0
    for _ in range(10):
        now[0] += 1.0
        backend.collect()
    return started, Counted.reads


def test_start_up_grows_in_proportion_to_the_samples_and_a_poll_with_the_window() -> None:
    # Compared with itself at ten times the samples: linear start-up, polls that do not grow.
    small_start, small_polls = reads_to_start_and_poll(2_000)
    large_start, large_polls = reads_to_start_and_poll(20_000)
    assert large_start <= 12 * small_start, (small_start, large_start)  # before: ~100x (a slice of all samples per sample)
    assert large_polls <= 2 * small_polls, (small_polls, large_polls)  # before: every poll read every sample
