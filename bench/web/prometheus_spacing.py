#!/usr/bin/env python3
"""Prometheus-like scrapes of the real daemon at 1, 8, 64 and 256 replayed GPUs (issue 15).

Prometheus scrapes once per scrape interval, so with the scrape interval at or above the collect
interval every scrape is the first after a poll. This benchmark reproduces that: a real daemon
subprocess replays N GPUs at a 0.25 s collect interval and one keep-alive client scrapes every
0.25-0.35 s (jittered), keeping only the scrapes that saw a new poll, alternately plain and with
``Accept-Encoding: gzip`` as Prometheus sends it. For each N it prints
- first-after-poll scrape latency p50/p99, plain and gzip (request to last byte, loopback);
- render time of one snapshot (in process, CPU), the text and gzip sizes and the gzip time;
- the daemon's CPU per GPU per poll when left alone at 1 s and at 100 ms (process CPU from /proc),
  and their ratio (target: within 2x), and at 100 ms scraped once a second (gzip, keep-alive);
- the daemon's RSS.
Targets are printed beside the figures, never asserted.

With ``--baseline TREE`` (another checkout, e.g. ``git worktree add /tmp/old <commit>``) the daemon
of that tree is measured the same way first, on the same machine in the same run: the gain of a change.

    python bench/web/prometheus_spacing.py [--gpus 1 8 64 256] [--scrapes 40] [--seconds 8] [--baseline TREE]
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import random
import re
import statistics
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import daemon, live_threads_cpu_ns, percentile, polls_served, replay_daemon_command, trace_files  # noqa: E402

from gpueff.backends.replay import ReplayBackend  # noqa: E402
from gpueff.exposition.render import render  # noqa: E402
from gpueff.poller import Poller  # noqa: E402
from gpueff.settings import Config  # noqa: E402
from gpueff.trace import load_trace  # noqa: E402
from gpueff.web.payload import GzipBody  # noqa: E402

POLLS = re.compile(rb"gpueff_collect_duration_seconds_count (\d+)")
P99_TARGET_MS = {1: 1.0, 8: 1.0, 64: 1.5, 256: 2.0}  # plain, issue 28


def render_costs(count: int, rounds: int = 20) -> dict[str, float]:
    """CPU ms to render one snapshot and to gzip it, and the sizes, in this process."""
    backend = ReplayBackend([load_trace(path) for path in trace_files(count)])
    poller = Poller(backend, Config())
    backend.start()
    snapshot = poller.poll_once()
    started = time.process_time()
    for _ in range(rounds):
        body = render(snapshot)
    render_ms = (time.process_time() - started) / rounds * 1000
    started = time.process_time()
    for _ in range(rounds):
        zipped = GzipBody.of(body)
    gzip_ms = (time.process_time() - started) / rounds * 1000
    return {"render_ms": render_ms, "gzip_ms": gzip_ms, "text_kib": len(body) / 1024, "gzip_kib": len(zipped.prefix) / 1024}


def _get(connection: http.client.HTTPConnection, gzip: bool) -> bytes:
    connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"} if gzip else {})
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise RuntimeError(f"GET /metrics answered {response.status}")
    return zlib.decompress(body, wbits=31) if response.getheader("Content-Encoding") == "gzip" else body


def scrapes(count: int, wanted: int, tree: Path = ROOT) -> dict[str, object]:
    """First-after-poll latencies (ms), plain and gzip, and the daemon's RSS, at a 0.25 s collect interval."""
    latencies: dict[bool, list[float]] = {False: [], True: []}
    with daemon(replay_daemon_command(count, "250ms"), cwd=tree) as running:
        connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
        last = POLLS.search(_get(connection, True))  # the first gzip request turns on per-poll gzip
        gzip, tries = False, 0
        while min(len(each) for each in latencies.values()) < wanted and tries < 6 * wanted:
            tries += 1
            time.sleep(random.uniform(0.25, 0.35))
            started = time.perf_counter()
            body = _get(connection, gzip)
            elapsed = (time.perf_counter() - started) * 1000
            polls = POLLS.search(body)
            if polls is not None and last is not None and polls.group(1) != last.group(1):
                latencies[gzip].append(elapsed)
                gzip = not gzip
            last = polls
        connection.close()
        rss = running.rss_bytes() / 2**20
    return {"plain": latencies[False], "gzip": latencies[True], "rss_mb": rss}


def cpu_per_gpu_per_poll(count: int, interval: float, seconds: float, tree: Path = ROOT, scrape_every: float = 0.0) -> float:
    """Daemon process CPU µs per GPU per poll over ``seconds``, left alone, or scraped every
    ``scrape_every`` seconds on one keep-alive connection as Prometheus does (after three scrapes
    that show the daemon the cadence; the scrapes' own serving counted, and no other request)."""
    with daemon(replay_daemon_command(count, f"{int(interval * 1000)}ms"), cwd=tree) as running:
        time.sleep(1.0)
        connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
        if scrape_every:
            for _ in range(3):
                _get(connection, True)
                time.sleep(scrape_every)
            body = _get(connection, True)
        else:
            body = running.get()[1]
        first_cpu, first_polls = live_threads_cpu_ns(running.pid), polls_served(body)
        ends = time.monotonic() + seconds
        if scrape_every:
            while time.monotonic() < ends:
                time.sleep(scrape_every)
                body = _get(connection, True)
        else:
            time.sleep(seconds)
            body = running.get()[1]
        connection.close()
        cpu = (live_threads_cpu_ns(running.pid) - first_cpu) / 1e9
        polls = polls_served(body) - first_polls
    return cpu / max(polls, 1) / count * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--scrapes", type=int, default=40, help="first-after-poll scrapes per mode (plain, gzip) and GPU count (default 40)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds left alone per CPU measurement (default 8)")
    parser.add_argument("--baseline", help="a source tree whose daemon is measured first (scrapes, CPU and RSS only)")
    args = parser.parse_args()
    if args.baseline:
        print(f"Baseline daemon from {args.baseline}:")
        print("| GPUs | plain p50 / p99 ms | gzip p50 / p99 ms | CPU µs/GPU/poll 1 s | 100 ms | 100 ms, scraped 1/s | RSS MB |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        tree = Path(args.baseline).resolve()
        for count in args.gpus:
            seen = scrapes(count, args.scrapes, tree)
            plain, zipped = seen["plain"], seen["gzip"]
            assert isinstance(plain, list) and isinstance(zipped, list)
            slow, fast = cpu_per_gpu_per_poll(count, 1.0, args.seconds, tree), cpu_per_gpu_per_poll(count, 0.1, args.seconds, tree)
            scraped = cpu_per_gpu_per_poll(count, 0.1, args.seconds, tree, scrape_every=1.0)
            print(f"| {count} | {statistics.median(plain):.2f} / {percentile(plain, 99):.2f} | {statistics.median(zipped):.2f} / {percentile(zipped, 99):.2f} | {slow:.0f} | {fast:.0f} | {scraped:.0f} | {seen['rss_mb']:.1f} |", flush=True)
        print("\nThis tree:")
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()} {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}")
    print("| GPUs | plain p50 / p99 ms | gzip p50 / p99 ms | p99 target | render ms | gzip ms | text / gzip KiB | CPU µs/GPU/poll 1 s | 100 ms | ratio | 100 ms, scraped 1/s | RSS MB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for count in args.gpus:
        costs = render_costs(count)
        seen = scrapes(count, args.scrapes)
        plain, zipped = seen["plain"], seen["gzip"]
        assert isinstance(plain, list) and isinstance(zipped, list)
        slow = cpu_per_gpu_per_poll(count, 1.0, args.seconds)
        fast = cpu_per_gpu_per_poll(count, 0.1, args.seconds)
        scraped = cpu_per_gpu_per_poll(count, 0.1, args.seconds, scrape_every=1.0)
        target = P99_TARGET_MS.get(count)
        print(
            f"| {count} | {statistics.median(plain):.2f} / {percentile(plain, 99):.2f} | {statistics.median(zipped):.2f} / {percentile(zipped, 99):.2f} | {'-' if target is None else f'<= {target:g}'} "
            f"| {costs['render_ms']:.2f} | {costs['gzip_ms']:.2f} | {costs['text_kib']:.0f} / {costs['gzip_kib']:.1f} | {slow:.0f} | {fast:.0f} | {f'{fast / slow:.2f}' if slow else 'n/a'} (<= 2) | {scraped:.0f} | {seen['rss_mb']:.1f} |",
            flush=True,
        )
    load = os.getloadavg()
    print(f"\nLoad average after the run: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
