"""Issue 25 item 5: latency of an ordinary keep-alive scrape while other clients pipeline.

Four connections each send 500 pipelined ``GET /metrics`` at a time and read the answers, over and
over; one ordinary client scrapes ``/metrics`` one request at a time. Prints that client's p50 and
p99 and how many pipelined answers were served, on the real server over loopback.

    python bench/web/pipelining_fairness.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import keepalive_latencies  # noqa: E402

from gpueff.web.payload import Payload  # noqa: E402
from gpueff.web.server import WebServer  # noqa: E402

BODY = b"# a page of a small node\n" + b'gpueff_metric{gpu="0"} 1\n' * 2000  # 50 KB
REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"


def pipeline(port: int, stop: threading.Event, served: list[int]) -> None:
    try:
        _pipeline(port, stop, served)
    except OSError:  # the server closed at the end
        pass


def _pipeline(port: int, stop: threading.Event, served: list[int]) -> None:
    answer = len(BODY)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        while not stop.is_set():
            sock.sendall(REQUEST * 500)
            received = 0
            while received < 500 * answer and not stop.is_set():  # bodies dominate; heads are ~150 bytes more each
                chunk = sock.recv(1 << 20)
                if not chunk:
                    return
                received += len(chunk)
            served[0] += 500


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    web = WebServer("127.0.0.1:0", lambda gzip: Payload((BODY,), None), lambda: True, "bench")
    web.start()
    stop, served = threading.Event(), [0]
    threads = [threading.Thread(target=pipeline, args=(web.port, stop, served), daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    latencies = keepalive_latencies(web.port, REQUEST, BODY[-30:], args.seconds, 0.01)
    stop.set()
    web.close()
    p99 = latencies[int(len(latencies) * 0.99)]
    print(f"ordinary scrapes: {len(latencies)}, p50 {statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; pipelined answers served: {served[0]}")


if __name__ == "__main__":
    main()
