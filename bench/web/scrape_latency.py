"""Scrape latency and memory of the real daemon replaying traces, over real HTTP on loopback.

For 1 and 8 replayed GPUs (collect interval 1s) it times GET /metrics from request to the last body
byte, on one keep-alive connection and on a new connection per scrape, for scrapes spread over
several polls. The first scrape after each poll renders the text (later ones are served from cache):
those are reported apart as "after a poll", the case Prometheus meets when it scrapes every 15s. GET /-/healthy (a few bytes) gives the floor: the
HTTP round trip with this Python client. Then the daemon's resident memory (VmRSS) after that warm-up. Prints figures; asserts nothing.

    python bench/web/scrape_latency.py [--seconds 5] [--gpus 1 8]
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import daemon, percentile, polls_served, replay_daemon_command


def _scrapes(port: int, seconds: float, spacing: float, keep_alive: bool, path: str = "/metrics") -> tuple[list[float], list[float]]:
    """Latencies (seconds) of all scrapes, and of those that were the first after a poll."""
    latencies, after_poll = [], []
    last_poll = None
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10) if keep_alive else None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        if connection is None:
            fresh = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            fresh.request("GET", path)
            body = fresh.getresponse().read()
            fresh.close()
        else:
            connection.request("GET", path)
            body = connection.getresponse().read()
        elapsed = time.perf_counter() - started
        latencies.append(elapsed)
        poll = polls_served(body) if path == "/metrics" else None
        if last_poll is not None and poll != last_poll:
            after_poll.append(elapsed)
        last_poll = poll
        time.sleep(spacing)
    if connection is not None:
        connection.close()
    return latencies, after_poll


def measure(gpus: int, seconds: float = 5.0, spacing: float = 0.003) -> dict:
    with daemon(replay_daemon_command(gpus, "1s")) as running:
        _scrapes(running.port, 1.5, spacing, keep_alive=True)  # warm-up
        result: dict[str, Any] = {"gpus": gpus, "body_bytes": len(running.get()[1])}
        for mode, keep_alive in (("keep-alive", True), ("new connection", False)):
            latencies, after_poll = _scrapes(running.port, seconds, spacing, keep_alive)
            result[mode] = {
                "count": len(latencies),
                "p50": statistics.median(latencies),
                "p99": percentile(latencies, 99),
                "after_poll_count": len(after_poll),
                "after_poll_p50": statistics.median(after_poll) if after_poll else None,
                "after_poll_max": max(after_poll) if after_poll else None,
            }
        floor, _ = _scrapes(running.port, 2.0, spacing, keep_alive=True, path="/-/healthy")
        result["healthy_p50"], result["healthy_p99"] = statistics.median(floor), percentile(floor, 99)  # the HTTP round trip itself
        result["rss_bytes"] = running.rss_bytes()
    return result


def report(result: dict) -> None:
    print(f"{result['gpus']} replayed GPU(s), body {result['body_bytes']} bytes, RSS {result['rss_bytes'] / 1e6:.1f} MB, GET /-/healthy p50 {result['healthy_p50'] * 1e3:.2f} ms, p99 {result['healthy_p99'] * 1e3:.2f} ms")
    for mode in ("keep-alive", "new connection"):
        figures = result[mode]
        after = "" if figures["after_poll_p50"] is None else f"; first scrape after a poll (n={figures['after_poll_count']}): p50 {figures['after_poll_p50'] * 1e3:.2f} ms, max {figures['after_poll_max'] * 1e3:.2f} ms"
        print(f"  {mode:>14}: n={figures['count']} p50 {figures['p50'] * 1e3:.2f} ms, p99 {figures['p99'] * 1e3:.2f} ms{after}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of scraping per connection mode (default 5)")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 8], help="replayed GPU counts (default 1 8)")
    args = parser.parse_args()
    for gpus in args.gpus:
        report(measure(gpus, args.seconds))


if __name__ == "__main__":
    main()
