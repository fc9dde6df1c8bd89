"""The figures the tests no longer bound (docs/architecture.md: tests wait for events, never for
speeds): how long the daemon takes to exit on SIGTERM, idle and with an NVML call hung for good,
and how long GET /metrics takes before and while that call hangs. Prints figures; asserts nothing.
Run it on a quiet machine.

The hung call comes from tests/system/test_faults.py run as a script (the real daemon over the fake NVML,
``FAULT_SCRIPT``): nvmlDeviceGetPowerUsage never returns once a trigger file appears.

    python bench/poll/stop_and_hang_latency.py [--rounds 5] [--scrapes 30]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import ROOT, Daemon, free_port, percentile, trace_files


def started(command: list[str], env: dict[str, str] | None = None) -> Daemon:
    """``command`` on a free loopback port, once /-/ready answers (its first poll is made)."""
    port = free_port()
    process = subprocess.Popen([*command, "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warn"], cwd=ROOT, env={**os.environ, **(env or {})},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    running = Daemon(process, port)
    deadline = time.monotonic() + 60
    while True:
        try:
            if running.get("/-/ready")[0] == 200:
                return running
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"{command[:4]} did not start")
        time.sleep(0.05)


def seconds_to_exit(running: Daemon) -> float:
    begun = time.perf_counter()
    running.process.send_signal(signal.SIGTERM)
    running.process.wait(120)
    return time.perf_counter() - begun


def scrape_latencies(running: Daemon, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        begun = time.perf_counter()
        status, _ = running.get("/metrics")
        latencies.append(time.perf_counter() - begun)
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        time.sleep(0.05)
    return latencies


def figures(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.1f} ms, p90 {percentile(values, 90) * 1000:.1f} ms, max {max(values) * 1000:.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="daemons started and stopped per case")
    parser.add_argument("--scrapes", type=int, default=30, help="GET /metrics before and while the call hangs, per round")
    args = parser.parse_args()

    idle_exits = [seconds_to_exit(started([sys.executable, "-m", "gpueff", "--demo", "--collect-interval", "100ms"])) for _ in range(args.rounds)]
    print(f"SIGTERM to exit, demo daemon at 100 ms ({args.rounds} rounds): {figures(idle_exits)}")

    before, during, hung_exits = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        for round_number in range(args.rounds):
            wedge = Path(folder) / f"wedge-{round_number}"
            script = {"traces": trace_files(1), "hang_when": {"nvmlDeviceGetPowerUsage": str(wedge)}}
            running = started([sys.executable, str(ROOT / "tests" / "system" / "test_faults.py"), "--backend", "nvml", "--collect-interval", "100ms"], {"FAULT_SCRIPT": json.dumps(script)})
            before += scrape_latencies(running, args.scrapes)
            wedge.touch()
            time.sleep(0.3)  # the watcher has seen the file and the poll thread is inside the call
            during += scrape_latencies(running, args.scrapes)
            hung_exits.append(seconds_to_exit(running))
    print(f"GET /metrics before the hang ({len(before)}): {figures(before)}")
    print(f"GET /metrics while nvmlDeviceGetPowerUsage hangs ({len(during)}): {figures(during)}")
    print(f"SIGTERM to exit with that call hung for good ({args.rounds} rounds): {figures(hung_exits)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
