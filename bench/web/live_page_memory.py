#!/usr/bin/env python3
"""The live page's cost: the history's memory when full, the /api/live answer's size and build time,
and the daemon's RSS with the page on and off (issue 29).

1. In process, for 8, 64 and 256 replayed GPUs: a real poller's snapshots fill a History to its
   capacity (600 points, ten minutes at 1 s; a fake clock, so it takes seconds), and tracemalloc
   measures what the history holds; then the median time to make a snapshot's answers (once per
   poll), the bytes a new page gets (the whole window) and a polling page gets (one point), and
   what a request then costs.
2. The real daemon on --demo (18 GPUs), with the page on and with --no-web.ui, each for --seconds
   with one client polling /api/live every second as an open page does: RSS at the end.

Run: .venv/bin/python bench/web/live_page_memory.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import ROOT, daemon, trace_files

sys.path.insert(0, str(ROOT))

from gpueff.backends.replay import ReplayBackend  # noqa: E402
from gpueff.poller import Poller  # noqa: E402
from gpueff.settings import Config  # noqa: E402
from gpueff.trace import load_trace  # noqa: E402
from gpueff.web.history import DEFAULT_CAPACITY, History  # noqa: E402
from gpueff.web.live import LiveData  # noqa: E402

MIB = 1024 * 1024


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def in_process(gpus: int) -> None:
    clock = FakeClock()
    backend = ReplayBackend([load_trace(path) for path in trace_files(gpus)], clock=clock)
    backend.start()
    poller = Poller(backend, Config(), clock=clock)
    snapshots = []
    for _ in range(20):  # the replayed loads' variety; the history's size does not depend on the values
        clock.now += 1.0
        snapshots.append(poller.poll_once())
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    history = History(wall_clock=lambda: clock.now)
    for point in range(DEFAULT_CAPACITY + 50):
        clock.now += 1.0
        history.add(snapshots[point % len(snapshots)])
    held = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    sizes, times = {}, {}
    made = []
    for _ in range(15):  # each a snapshot's answers made afresh (what the poller does once per poll while a page watches)
        live = LiveData(lambda: snapshots[-1], history, "note", clock)
        started = time.perf_counter()
        live.prepare(snapshots[-1])
        live.answer(0)
        made.append(time.perf_counter() - started)
    per_poll = []
    for snapshot in snapshots[:15]:  # while a page watches: each poll's answers, the history as it was (a point closes once a second)
        started = time.perf_counter()
        live.prepare(snapshot)
        per_poll.append(time.perf_counter() - started)
    for name, after in (("new page", 0), ("polling page", history.since(0).last - 1)):
        samples = []
        for _ in range(15):
            started = time.perf_counter()
            answer = live.answer(after)  # what a request costs: picking the bytes made for the snapshot
            samples.append(time.perf_counter() - started)
        assert answer is not None
        sizes[name], times[name] = sum(len(part) for part in answer), statistics.median(samples)
    print(
        f"{gpus:4d} GPUs: history full ({DEFAULT_CAPACITY} points) holds {held / MIB:.2f} MiB ({held / gpus / 1024:.1f} KiB per GPU); "
        f"/api/live answers made in {statistics.median(made) * 1000:.1f} ms with the whole history, {statistics.median(per_poll) * 1000:.1f} ms for a poll that closed no point; "
        f"a new page's answer {sizes['new page'] / 1024:.0f} KiB, a polling page's {sizes['polling page'] / 1024:.1f} KiB, "
        f"each request {times['polling page'] * 1e6:.0f} us"
    )


def daemon_rss(flags: list[str], seconds: float) -> float:
    with daemon([sys.executable, "-m", "gpueff", "--demo", *flags]) as running:
        after = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if "--no-web.ui" not in flags:
                status, body = running.get(f"/api/live?after={after}")
                assert status == 200
                after = int(body.split(b'"last":', 1)[1].split(b",", 1)[0])
            time.sleep(1.0)
        return running.rss_bytes() / MIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    for gpus in (8, 64, 256):
        in_process(gpus)
    on = daemon_rss([], args.seconds)
    off = daemon_rss(["--no-web.ui"], args.seconds)
    print(f"daemon --demo (18 GPUs) after {args.seconds:.0f} s: RSS {on:.1f} MiB with the page (one page polling), {off:.1f} MiB with --no-web.ui")


if __name__ == "__main__":
    main()
