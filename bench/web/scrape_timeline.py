#!/usr/bin/env python3
"""Where a first-after-poll scrape's time goes: a timeline of each scrape across client and daemon.

A real daemon subprocess replays N GPUs at a 0.25 s collect interval, with its event loop, poller and
payloads wrapped to note ``time.perf_counter()`` (CLOCK_MONOTONIC, one clock for both processes) at:
the selector returning, the request read, the answer fully sent, each poll's start, the snapshot
handed to the payloads and its publication done. A keep-alive client scrapes as Prometheus does
(every 0.25-0.35 s, alternately plain and gzip, keeping the scrapes that saw a new poll) and notes
its own send, first response bytes and end. Each scrape's latency is split into
- ``wake``: client send to the daemon's selector returning with the request (the kernel's wake-up
  and the serving thread taking the GIL back);
- ``serve``: selector return to the last byte handed to the kernel (parse, route, payload, sendmsg);
- ``client``: the rest (the client waking, reading headers and body, gunzipping);
and said whether a poll (collect, derive, render, gzip) ran during it. Medians and p99 per part, and
the median of the scrapes a poll overlapped beside that of the others (on a busy machine the
share that overlaps varies from run to run: compare like with like).

    python bench/web/scrape_timeline.py [--gpus 1 256] [--scrapes 40] [--baseline TREE]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import daemon, percentile, polls_served, trace_files  # noqa: E402

# Runs in the daemon's process: wraps the loop, poller and payloads, then starts the daemon as usual.
_WRAPPER = r"""
import atexit, json, selectors, sys, time
out = sys.argv.pop(1)
marks = {"select": [], "read": [], "sent": [], "poll": [], "publish": [], "published": []}
clock = time.perf_counter
def _wrap(owner, name, before=None, after=None):
    original = getattr(owner, name)
    def wrapped(*args, **kwargs):
        if before: marks[before].append(clock())
        result = original(*args, **kwargs)
        if after: marks[after].append(clock())
        return result
    setattr(owner, name, wrapped)
_select = selectors.DefaultSelector.select
def select(self, timeout=None):
    events = _select(self, timeout)
    if events: marks["select"].append(clock())
    return events
selectors.DefaultSelector.select = select
from gpueff.web import loop, payload
from gpueff import poller
_wrap(loop.EventLoop, "_read", before="read")
_write = loop.EventLoop._write
def write(self, connection, now):
    done = _write(self, connection, now)
    if not connection.output: marks["sent"].append(clock())
    return done
loop.EventLoop._write = write
_wrap(poller.Poller, "poll_once", before="poll")
_wrap(payload.Payloads, "publish", before="publish", after="published")
atexit.register(lambda: open(out, "w").write(json.dumps(marks)))
from gpueff.commands.cli import main
sys.argv[0] = "gpu-efficiency-exporter"
sys.exit(main())
"""


def _get(connection: http.client.HTTPConnection, gzip: bool) -> tuple[bytes, float]:
    connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"} if gzip else {})
    response = connection.getresponse()
    first = time.perf_counter()
    body = response.read()
    if response.getheader("Content-Encoding") == "gzip":
        body = zlib.decompress(body, wbits=31)
    return body, first


def timeline(count: int, wanted: int, tree: Path) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Each first-after-poll scrape's parts (ms) and whether a poll overlapped it (1.0 or 0.0), and
    the median poll and publication times (ms)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "marks.json"
        command = [sys.executable, "-c", _WRAPPER, str(out), "--replay", *trace_files(count), "--collect-interval", "250ms"]
        scrapes: list[tuple[float, float, float, bool]] = []
        with daemon(command, cwd=tree) as running:
            connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
            body, _ = _get(connection, True)
            last = polls_served(body)
            gzip, tries = False, 0
            while sum(1 for each in scrapes if each[3] == gzip) < wanted and tries < 6 * wanted:
                tries += 1
                time.sleep(random.uniform(0.25, 0.35))
                started = time.perf_counter()
                body, first = _get(connection, gzip)
                ended = time.perf_counter()
                served = polls_served(body)
                if served != last:
                    scrapes.append((started, first, ended, gzip))
                    gzip = not gzip
                last = served
            connection.close()
        marks = json.loads(out.read_text())
    polls = list(zip(marks["poll"], marks["published"], strict=False))
    rows = []
    for started, first, ended, gzip in scrapes:
        selected = next((moment for moment in marks["select"] if moment >= started), None)
        sent = next((moment for moment in marks["sent"] if moment >= started), None)
        if selected is None or sent is None or sent > ended:
            continue
        overlap = any(begin < ended and end > started for begin, end in polls)
        rows.append({"gzip": float(gzip), "total": (ended - started) * 1e3, "wake": (selected - started) * 1e3, "serve": (sent - selected) * 1e3, "client": (ended - sent) * 1e3, "first_byte": (first - started) * 1e3, "poll": float(overlap)})
    publish = [(end - begin) * 1e3 for begin, end in zip(marks["publish"], marks["published"], strict=False)]
    poll = [(end - begin) * 1e3 for begin, end in polls]
    return rows, {"publish_ms": statistics.median(publish) if publish else 0.0, "poll_ms": statistics.median(poll) if poll else 0.0}


def report(label: str, count: int, measured: tuple[list[dict[str, float]], dict[str, float]]) -> None:
    scrapes, costs = measured
    for gzip in (False, True):
        chosen = [row for row in scrapes if bool(row["gzip"]) == gzip]
        if not chosen:
            continue
        parts = []
        for part in ("total", "wake", "serve", "client"):
            values = [float(row[part]) for row in chosen]
            parts.append(f"{statistics.median(values):.3f} / {percentile(values, 99):.3f}")
        during = [float(row["total"]) for row in chosen if row["poll"]]
        alone = [float(row["total"]) for row in chosen if not row["poll"]]
        split = " / ".join(f"{statistics.median(each):.3f}" if each else "-" for each in (during, alone))
        print(f"| {label} | {count} | {'gzip' if gzip else 'plain'} | {' | '.join(parts)} | {len(during)}/{len(chosen)} | {split} | {costs['poll_ms']:.2f} / {costs['publish_ms']:.2f} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--scrapes", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=1, help="measure the trees alternately this many times per GPU count")
    parser.add_argument("--baseline", help="another source tree, measured the same way in the same run (alternating per GPU count)")
    args = parser.parse_args()
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, load {os.getloadavg()[0]:.2f}")
    print("| tree | GPUs | mode | total p50 / p99 ms | wake | serve | client | with a poll | total p50 with / without a poll | poll / publish ms (p50) |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    trees = [("baseline", Path(args.baseline).resolve())] if args.baseline else []
    trees.append(("this", ROOT))
    for count in args.gpus:
        for _ in range(args.rounds):
            for label, tree in trees:
                report(label, count, timeline(count, args.scrapes, tree))
    print(f"Load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
