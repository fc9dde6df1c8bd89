"""Runs every benchmark (about 1.5 minutes) and prints one markdown table of the figures.

    python bench/run_all.py

Figures, not assertions: the "target" column says what the figure is measured against.
"""

from __future__ import annotations

import datetime
import os
import platform
import time

import poll_cpu
import scrape_latency

GPU_COUNTS = (1, 8)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def machine() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} CPU(s) ({model}), Linux {platform.release()}, Python {platform.python_version()}, no GPU"


def main() -> None:
    started = time.monotonic()
    load_before = os.getloadavg()
    scrapes = {gpus: scrape_latency.measure(gpus) for gpus in GPU_COUNTS}
    cpu = {gpus: poll_cpu.in_process(gpus) | poll_cpu.fake_alone(gpus) for gpus in GPU_COUNTS}
    walls = {gpus: poll_cpu.poll_wall(gpus) for gpus in GPU_COUNTS}
    processes = {gpus: poll_cpu.daemon_process(gpus) for gpus in GPU_COUNTS}
    load_after = os.getloadavg()

    rows = []
    for mode in ("keep-alive", "new connection"):
        rows.append((f"/metrics latency, {mode}: p50 / p99", *(f"{ms(scrapes[g][mode]['p50'])} / {ms(scrapes[g][mode]['p99'])}" for g in GPU_COUNTS), "p99 <= 1.7 ms (1 GPU), <= 5 ms (8 GPUs)"))
    for mode in ("keep-alive", "new connection"):
        rows.append((f"first scrape after a poll (renders), {mode}: p50 / max", *(f"{ms(scrapes[g][mode]['after_poll_p50'])} / {ms(scrapes[g][mode]['after_poll_max'])} (n={scrapes[g][mode]['after_poll_count']})" for g in GPU_COUNTS), ""))
    rows.append(("scrapes measured (keep-alive + new connection)", *(str(scrapes[g]["keep-alive"]["count"] + scrapes[g]["new connection"]["count"]) for g in GPU_COUNTS), ""))
    rows.append(("HTTP floor: GET /-/healthy keep-alive p50 / p99", *(f"{ms(scrapes[g]['healthy_p50'])} / {ms(scrapes[g]['healthy_p99'])}" for g in GPU_COUNTS), ""))
    rows.append(("/metrics body size", *(f"{scrapes[g]['body_bytes'] / 1024:.1f} KiB" for g in GPU_COUNTS), ""))
    rows.append(("daemon RSS, replay backend (after the scrapes)", *(f"{scrapes[g]['rss_bytes'] / 1e6:.1f} MB" for g in GPU_COUNTS), "<= 45 MB"))
    rows.append(("daemon RSS, NVML backend on the fake pynvml", *(f"{processes[g]['rss_bytes'] / 1e6:.1f} MB" for g in GPU_COUNTS), "<= 45 MB"))
    for stage, label in (("collect", "NVML backend collect (incl. the fake)"), ("fake", "of which the fake pynvml's own Python"), ("derive", "derivations + snapshot"), ("render", "exposition render")):
        rows.append((f"CPU per GPU per poll: {label}", *(f"{cpu[g][stage] * 1e6:.0f} us" for g in GPU_COUNTS), ""))
    rows.append(("CPU per GPU per poll: total, as % of a core at 1 s", *(f"{cpu[g]['total'] * 1e6:.0f} us = {cpu[g]['total'] * 100:.3f} %" for g in GPU_COUNTS), "<= 0.5 % per GPU"))
    rows.append(("poll wall time with H100 call costs (sleeps): median / slow-cadence poll", *(f"{ms(walls[g]['wall_p50'])} / {ms(walls[g]['wall_max'])}" for g in GPU_COUNTS), "well under the 1 s interval"))
    rows.append(("daemon process CPU over ~20 s at 1 s (fake NVML), % of a core", *(f"{processes[g]['core_percent']:.2f} % ({processes[g]['core_percent'] / g:.3f} % per GPU)" for g in GPU_COUNTS), "<= 0.5 % per GPU"))

    print(f"Benchmarks of gpu-efficiency-exporter, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"Machine: {machine()}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; run took {time.monotonic() - started:.0f} s")
    print()
    print("| measure | 1 GPU | 8 GPUs | target |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
