#!/usr/bin/env python3
"""The daemon on a real GPU beside planted workloads: what it reports for a 1-thread spin kernel and
a bf16 matmul, next to the matmul's own TFLOP/s. Needs an NVIDIA GPU with PyTorch or CuPy.

Starts ``python -m gpueff --backend nvml`` at a 1 s interval, runs each workload for --seconds,
scrapes /metrics near the end of each run and prints the key series as a Markdown table.

A one-off proof, kept beside its results (live.md here and in ../2026-11-21-h100/); the
`selftest` command checks the same workloads on any GPU. Run from anywhere:
python evidence/2026-11-21-h200/live_daemon_proof.py [--gpu 0] [--seconds 10]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # this proof lives beside its results, under evidence/
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from harness import free_port  # noqa: E402

from gpueff.backends.nvml.backend import NvmlBackend  # noqa: E402
from gpueff.commands.selftest.workloads import WORKLOADS, load_engine  # noqa: E402

SERIES = (
    "gpueff_gpu_utilization_ratio",
    "gpueff_sm_active_ratio",
    "gpueff_sm_occupancy_ratio",
    "gpueff_tensor_active_ratio",
    "gpueff_efficiency_ratio",
    "gpueff_mismatch",
    "gpueff_bottleneck",
    "gpueff_busy_flops_per_second",
    "gpueff_sm_clock_hertz",
    "gpueff_power_watts",
)


def scrape(port: int, gpu: int) -> dict[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r'(gpueff_\w+)\{gpu="(\d+)"[^}]*?(?:,(rule|class)="(\w+)")?\} (\S+)$', line)
        if not match or int(match.group(2)) != gpu or match.group(1) not in SERIES:
            continue
        name, label, value = match.group(1), match.group(4), match.group(5)
        if name == "gpueff_bottleneck":
            if value == "1":
                found[name] = label
        elif name == "gpueff_mismatch":
            if value == "1":
                found[name] = ", ".join(filter(None, [found.get(name), label]))
        else:
            found[name] = value
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    backend = NvmlBackend()
    device = backend.start()[args.gpu]
    backend.close()
    engine = load_engine(args.gpu)
    port = free_port()
    daemon = subprocess.Popen([sys.executable, "-m", "gpueff", "--backend", "nvml", "--collect-interval", "1s", "--web.listen-address", f"127.0.0.1:{port}"], cwd=ROOT)
    try:
        time.sleep(3)
        rows = []
        for name in ("idle", "spin_1sm", "matmul_8192"):
            readings: dict[str, str] = {}

            def late_scrape(into: dict[str, str]) -> None:
                time.sleep(args.seconds * 0.8)
                into.update(scrape(port, args.gpu))

            scraper = threading.Thread(target=late_scrape, args=(readings,))
            scraper.start()
            truth = WORKLOADS[name](engine, args.seconds, device)
            scraper.join()
            rows.append((name, truth, readings))
        print(f"GPU {args.gpu}: {device.name}, driver {device.driver}, {device.sm_count} SMs, max SM clock {device.max_sm_clock_mhz} MHz, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
        print("| workload | own figure | " + " | ".join(s.removeprefix("gpueff_") for s in SERIES) + " |")
        print("| --- | --- | " + " | ".join("---" for _ in SERIES) + " |")
        for name, truth, readings in rows:
            own = f"{truth['tflops']:.0f} TFLOP/s" if "tflops" in truth else ""
            cells = []
            for series in SERIES:
                value = readings.get(series, "–")
                if series == "gpueff_busy_flops_per_second" and value != "–":
                    value = f"{float(value) / 1e12:.0f} TFLOP/s"
                elif series == "gpueff_sm_clock_hertz" and value != "–":
                    value = f"{float(value) / 1e6:.0f} MHz"
                elif re.fullmatch(r"[0-9.e+-]+", value):
                    value = f"{float(value):.4g}"
                cells.append(value)
            print(f"| {name} | {own} | " + " | ".join(cells) + " |")
    finally:
        daemon.terminate()
        daemon.wait(10)
        engine.release()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
