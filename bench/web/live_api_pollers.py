#!/usr/bin/env python3
"""What /api/live pollers cost everyone else (issue 39): a /metrics prober's latency with N clients
polling /api/live beside it, against the same with N clients polling /metrics.

The daemon replays ``--gpus`` traces at ``--interval`` and runs ``--fill`` seconds first, so its
history holds that many points a GPU (a point a second, 600 at most). Then, for each load, N
clients (threads of one separate process, kept-alive connections, no pause) poll either
``/api/live`` alternating ``?after=0`` and ``?after=1`` (the attack in issue 39: every request a
different answer) or ``/metrics``, while this process sends ``GET /metrics`` every 50 ms and records
each answer's latency. Printed: the prober's p50 and p99 and the requests the pollers made. With
``--tree`` the same runs against another checkout (e.g. one before the change) in the same run.

Run: .venv/bin/python bench/web/live_api_pollers.py [--clients 32] [--gpus 64] [--fill 120] [--seconds 20] [--tree PATH]
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import ROOT, daemon, percentile


def _get(sock: socket.socket, path: str) -> None:
    """One kept-alive GET, its whole answer read (Content-Length)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
    while len(body) < length:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        body += chunk


def _pollers(port: int, clients: int, paths: list[str], seconds: float, counts: multiprocessing.Queue) -> None:
    deadline = time.monotonic() + seconds

    def poll() -> None:
        done = 0
        with socket.create_connection(("127.0.0.1", port)) as sock:
            while time.monotonic() < deadline:
                _get(sock, paths[done % len(paths)])
                done += 1
        counts.put(done)

    threads = [threading.Thread(target=poll) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def probe(port: int, clients: int, paths: list[str], seconds: float) -> tuple[list[float], int]:
    counts: multiprocessing.Queue = multiprocessing.Queue()
    load = multiprocessing.Process(target=_pollers, args=(port, clients, paths, seconds, counts))
    load.start()
    time.sleep(0.5)  # the pollers connected and going
    latencies = []
    deadline = time.monotonic() + seconds - 1.0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            _get(sock, "/metrics")
            latencies.append(time.perf_counter() - started)
            time.sleep(0.05)
    load.join()
    return sorted(latencies), sum(counts.get() for _ in range(clients))


def run(tree: Path, args: argparse.Namespace) -> None:
    shipped = sorted((tree / "gpueff" / "traces" / "h200").glob("*.json"))  # each tree replays its own traces (their format changes)
    traces = [str(shipped[index % len(shipped)]) for index in range(args.gpus)]
    command = [sys.executable, "-m", "gpueff", "--replay", *traces, "--collect-interval", args.interval]
    with daemon(command, cwd=tree) as running:
        time.sleep(args.fill)
        first_answer = running.get("/api/live")
        for name, paths in (("/metrics pollers", ["/metrics"]), ("/api/live pollers", ["/api/live?after=0", "/api/live?after=1"])):
            latencies, requests = probe(running.port, args.clients, paths, args.seconds)
            print(
                f"  {args.clients} {name:<17}: prober GET /metrics n={len(latencies)} p50 {statistics.median(latencies) * 1e3:.1f} ms, "
                f"p99 {percentile(latencies, 99) * 1e3:.1f} ms; the pollers made {requests} requests ({requests / args.seconds:.0f}/s)"
            )
        print(f"  /api/live?after=0 is {len(first_answer[1]) / 1024:.0f} KiB; daemon CPU {running.cpu_seconds():.1f} s in all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--interval", default="100ms")
    parser.add_argument("--fill", type=float, default=120.0, help="seconds the daemon runs before the measurement (history points a GPU)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--tree", type=Path, action="append", default=[], help="another checkout to measure the same way (repeatable)")
    args = parser.parse_args()
    for tree in [ROOT, *args.tree]:
        print(f"{tree}: {args.gpus} replayed GPUs at {args.interval}, history filled for {args.fill:.0f} s")
        run(tree, args)


if __name__ == "__main__":
    main()
