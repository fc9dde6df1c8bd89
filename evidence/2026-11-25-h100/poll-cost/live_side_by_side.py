#!/usr/bin/env python3
"""This tree's daemon beside a baseline tree's on the live GPUs, at once, in one run (issue 28).

Four daemons read the real GPUs through NVML at the same time: this tree and ``--baseline`` at a
1 s and at a 100 ms collect interval, each scraped as Prometheus would (gzip, one keep-alive
connection, every ``--scrape-every`` seconds). After ``--warmup`` seconds (the scrapes' cadence is
learnt from three scrapes) each one's CPU is measured for ``--seconds`` from its threads' schedstat
(nanoseconds, all threads), with its RSS at the end and the wall time of one poll's collection
(``gpueff_collect_duration_seconds`` sum over count, NVML calls included). Prints a Markdown table;
nvitop-exporter's figure to compare with is the issue's (0.941 % of a core at 1 s on the same H100).
With ``--fake-gpus N`` the daemons run on the fake pynvml instead (``tools/fake_nvml_daemon.py`` of
each tree): the same comparison on a machine without a GPU, NVML's own cost left out.

An A/B of issue 28, kept beside its results (live.txt here and in ../issue28-nvml/);
`bench/run_all.py compare_nvitop --baseline TREE` measures each daemon alone, which replaced it.

    python evidence/2026-11-25-h100/poll-cost/live_side_by_side.py --baseline TREE [--seconds 20] [--warmup 12] [--scrape-every 5] [--fake-gpus N]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import re
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # this A/B lives beside its results, under evidence/
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from harness import Daemon, daemon  # noqa: E402

SUM = re.compile(rb"^gpueff_collect_duration_seconds_sum ([0-9.e+-]+)$", re.M)
COUNT = re.compile(rb"^gpueff_collect_duration_seconds_count (\d+)$", re.M)


def cpu_ns(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


def collect_figures(running: Daemon) -> tuple[float, int]:
    _, body = running.get()
    total, count = SUM.search(body), COUNT.search(body)
    if total is None or count is None:
        raise RuntimeError("no gpueff_collect_duration_seconds in /metrics")
    return float(total.group(1)), int(count.group(1))


def scrape_until(running: Daemon, every: float, stop: threading.Event) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
    while not stop.wait(every):
        connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        connection.getresponse().read()
    connection.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=12.0)
    parser.add_argument("--scrape-every", type=float, default=5.0)
    parser.add_argument("--fake-gpus", type=int, default=0, help="run on this many fake GPUs (tests/fakes/nvml.py) instead of the real ones")
    args = parser.parse_args()
    runs = [(label, tree, interval) for interval in ("1s", "100ms") for label, tree in (("baseline", Path(args.baseline).resolve()), ("this", ROOT))]
    stop = threading.Event()
    with contextlib.ExitStack() as stack:
        def command(tree: Path, interval: str) -> list[str]:
            start = [sys.executable, str(tree / "tools" / "fake_nvml_daemon.py"), str(args.fake_gpus)] if args.fake_gpus else [sys.executable, "-m", "gpueff"]
            return [*start, "--collect-interval", interval]

        daemons = [stack.enter_context(daemon(command(tree, interval), cwd=tree)) for _, tree, interval in runs]
        scrapers = [threading.Thread(target=scrape_until, args=(running, args.scrape_every, stop), daemon=True) for running in daemons]
        for scraper in scrapers:
            scraper.start()
        time.sleep(args.warmup)
        started = [(time.monotonic(), cpu_ns(running.pid), *collect_figures(running)) for running in daemons]
        time.sleep(args.seconds)
        print("| tree | interval | CPU, % of a core | collect ms per poll (wall) | polls | RSS MB |\n| --- | --- | ---: | ---: | ---: | ---: |")
        for (label, _, interval), running, (wall, cpu, total, count) in zip(runs, daemons, started, strict=True):
            elapsed = time.monotonic() - wall
            share = (cpu_ns(running.pid) - cpu) / 1e9 / elapsed * 100
            total_now, count_now = collect_figures(running)
            polls = count_now - count
            print(f"| {label} | {interval} | {share:.3f} | {(total_now - total) / max(polls, 1) * 1000:.2f} | {polls} | {running.rss_bytes() / 2**20:.1f} |", flush=True)
        stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
