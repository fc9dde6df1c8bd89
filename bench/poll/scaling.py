#!/usr/bin/env python3
"""CPU-only scaling benchmark: 1, 8 and 64 replayed GPUs (the shipped traces, repeated).

For each GPU count it measures
- poll CPU: process CPU time of a fixed number of in-process polls (ReplayBackend -> Poller ->
  derivations), divided by the number of polls;
- render CPU: process CPU time of rendering one fresh snapshot as Prometheus text;
- scrape latency p50/p99: real HTTP GETs of /metrics from a real daemon subprocess on loopback,
  spaced wider than its collect interval so that nearly every scrape renders a fresh snapshot;
- the daemon's own mean poll time (gpueff_collect_duration_seconds sum/count) and its RSS.
Growth ratios are against 1 GPU; "no worse than linear" means ratio <= GPU count.

Run: .venv/bin/python bench/poll/scaling.py [--gpus 1,8,64] [--scrapes 100] [--polls 200]; prints Markdown tables.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import daemon, percentile, replay_daemon_command, trace_files  # noqa: E402

from gpueff.backends.replay import ReplayBackend  # noqa: E402
from gpueff.poller import Poller  # noqa: E402
from gpueff.settings import Config  # noqa: E402
from gpueff.trace import load_trace  # noqa: E402
from gpueff.web.payload import Payloads  # noqa: E402

COLLECT_INTERVAL = 0.1  # the daemon's minimum: the most polls (and fresh renders) per second


@dataclass
class Result:
    gpus: int
    poll_cpu_ms: float
    render_cpu_ms: float
    scrape_p50_ms: float
    scrape_p99_ms: float
    fresh_scrapes: float  # share of scrapes that saw a new snapshot (rendered it)
    daemon_poll_ms: float
    rss_mb: float
    body_kib: float


def in_process_costs(count: int, polls: int) -> tuple[float, float]:
    """(CPU ms per poll, CPU ms per render of a fresh snapshot), measured in this process."""
    backend = ReplayBackend([load_trace(path) for path in trace_files(count)])
    poller = Poller(backend, Config())
    exposition = Payloads()
    poller.subscribe(exposition.publish)  # as the daemon: each poll's body rendered on the poller's thread
    backend.start()
    poller.poll_once()
    started = time.process_time()
    for _ in range(polls):
        poller.poll_once()
    poll_cpu = (time.process_time() - started) / polls
    render_cpu = 0.0
    for _ in range(polls):
        poller.poll_once()
        started = time.process_time()
        exposition.body()
        render_cpu += time.process_time() - started
    return poll_cpu * 1000, render_cpu / polls * 1000


def metric(body: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", body, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{name} is missing from /metrics")
    return float(match.group(1))


def daemon_costs(count: int, scrapes: int) -> tuple[list[float], float, float, float, float]:
    """(scrape seconds, fresh share, mean poll ms, RSS MB, body KiB) from a real daemon subprocess."""
    with daemon(replay_daemon_command(count, f"{int(COLLECT_INTERVAL * 1000)}ms")) as running:
        time.sleep(5 * COLLECT_INTERVAL)
        latencies, fresh, last_count, body = [], 0, -1.0, b""
        for _ in range(scrapes):
            time.sleep(1.5 * COLLECT_INTERVAL)
            started = time.perf_counter()
            status, body = running.get()  # a fresh connection, as Prometheus' first scrape
            latencies.append(time.perf_counter() - started)
            if status != 200:
                raise RuntimeError(f"GET /metrics answered {status}")
            count_now = metric(body.decode(), "gpueff_collect_duration_seconds_count")
            fresh += count_now != last_count
            last_count = count_now
        text = body.decode()
        poll_ms = metric(text, "gpueff_collect_duration_seconds_sum") / metric(text, "gpueff_collect_duration_seconds_count") * 1000
        return latencies, fresh / scrapes, poll_ms, running.rss_bytes() / 2**20, len(body) / 1024


def measure(count: int, scrapes: int, polls: int) -> Result:
    poll_cpu, render_cpu = in_process_costs(count, polls)
    latencies, fresh, poll_ms, rss, body_kib = daemon_costs(count, scrapes)
    return Result(count, poll_cpu, render_cpu, statistics.median(latencies) * 1000, percentile(latencies, 99) * 1000, fresh, poll_ms, rss, body_kib)


def table(results: list[Result]) -> str:
    base = results[0]
    head = ["GPUs", "poll CPU ms", "render CPU ms", "scrape p50 ms", "scrape p99 ms", "fresh scrapes", "daemon poll ms", "RSS MB", "body KiB"]
    rows = [[str(r.gpus), f"{r.poll_cpu_ms:.3f}", f"{r.render_cpu_ms:.3f}", f"{r.scrape_p50_ms:.2f}", f"{r.scrape_p99_ms:.2f}", f"{r.fresh_scrapes:.0%}", f"{r.daemon_poll_ms:.3f}", f"{r.rss_mb:.1f}", f"{r.body_kib:.0f}"] for r in results]
    lines = ["| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)] + ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", "Growth against 1 GPU (linear growth = the GPU count):", "", "| GPUs | poll CPU | render CPU | scrape p50 | scrape p99 | daemon poll | no worse than linear |", "|" + " ---: |" * 7]
    for r in results[1:]:
        ratios = [r.poll_cpu_ms / base.poll_cpu_ms, r.render_cpu_ms / base.render_cpu_ms, r.scrape_p50_ms / base.scrape_p50_ms, r.scrape_p99_ms / base.scrape_p99_ms, r.daemon_poll_ms / base.daemon_poll_ms]
        scale = r.gpus / base.gpus
        verdict = "yes" if all(ratio <= scale for ratio in ratios) else "NO"
        lines.append(f"| {r.gpus} | " + " | ".join(f"{ratio:.1f}x" for ratio in ratios) + f" | {verdict} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default="1,8,64", help="comma-separated replayed GPU counts (default 1,8,64)")
    parser.add_argument("--scrapes", type=int, default=100, help="HTTP scrapes per GPU count (default 100)")
    parser.add_argument("--polls", type=int, default=200, help="in-process polls (and renders) per GPU count (default 200)")
    args = parser.parse_args()
    counts = [int(part) for part in args.gpus.split(",")]
    if not counts or min(counts) < 1 or args.scrapes < 1 or args.polls < 1:
        parser.error("GPU counts, --scrapes and --polls must be positive")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = [measure(count, args.scrapes, args.polls) for count in counts]
    load = os.getloadavg()
    print(f"Date: {started}; machine: {platform.machine()} {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}; load average after the run {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}")
    print(f"Daemon collect interval {COLLECT_INTERVAL * 1000:.0f}ms; {args.scrapes} scrapes per count on fresh connections, {args.polls} in-process polls per count.\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
