"""The one runner of the benchmarks. Figures, not assertions.

    python bench/run_all.py                  # the quick set (about 1.5 minutes, no GPU): one markdown table
    python bench/run_all.py --list           # every benchmark: what it needs, what it measures, where its figures are
    python bench/run_all.py NAME [ARGS...]   # one benchmark, e.g. prometheus_spacing --gpus 1 8 (or web/prometheus_spacing)
    python bench/run_all.py --cpu            # every benchmark that needs no GPU, one after another, with its defaults

The benchmarks sit by subject: web/ (the HTTP side and the live page), poll/ (a poll's CPU, memory
and series), nvml/ (NVML's calls on a GPU), apps/ (app scraping), gpu/ (the daemon beside real jobs
on a GPU), multi_gpu/ (several GPUs); harness.py and nvml_calls.py are what they share.

In the quick table the "target" column says what each figure is measured against. One-off proofs
whose result is recorded live beside that result under evidence/, not here.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
GPU_COUNTS = (1, 8)


class Benchmark(NamedTuple):
    script: str
    needs: str  # "no GPU", "valgrind", "a GPU", "several GPUs"
    measures: str
    doc: str  # the page (and section) holding its figures


BENCHMARKS = (
    Benchmark("web/scrape_latency.py", "no GPU", "/metrics latency (keep-alive, new connection), HTTP floor, RSS; 1 and 8 replayed GPUs", "docs/benchmarks.md#running-them"),
    Benchmark("web/http_overhead.py", "no GPU", "the HTTP server against a bare http.server, failed logins, idle wake-ups", "docs/benchmarks.md#the-http-server-imports-and-idle-wake-ups-issue-15"),
    Benchmark("web/prometheus_spacing.py", "no GPU", "first-after-poll scrapes (plain, gzip) at 1-256 GPUs, CPU at 1 s and 100 ms, RSS; --baseline TREE", "docs/benchmarks.md#rendering-in-the-poller-gzip-the-catalogue-issue-15"),
    Benchmark("web/scrape_timeline.py", "no GPU", "where a first-after-poll scrape waits: wake, serve, client; --baseline TREE", "docs/benchmarks.md#first-after-poll-waits-poll-cpu-and-memory-issue-28"),
    Benchmark("web/live_page_memory.py", "no GPU", "the live page's history when full, /api/live answers, RSS with the page", "docs/benchmarks.md#the-live-page-issue-29"),
    Benchmark("web/live_api_pollers.py", "no GPU", "a /metrics prober beside 32 /api/live or /metrics pollers; --tree TREE", "docs/benchmarks.md#apilive-pollers-beside-a-metrics-prober-issue-39"),
    Benchmark("web/pipelining_fairness.py", "no GPU", "an ordinary scrape's latency while other clients pipeline", "docs/benchmarks.md#pipelining-clients-issue-25"),
    Benchmark("web/tls_handshake_flood.py", "no GPU", "kept-alive and fresh TLS scrapes during a handshake flood", "docs/benchmarks.md#tls-handshake-floods-issue-25"),
    Benchmark("poll/poll_cpu.py", "no GPU", "CPU per GPU per poll on the fake pynvml, by stage; the daemon process's CPU", "docs/benchmarks.md#running-them"),
    Benchmark("poll/scaling.py", "no GPU", "poll and render CPU, scrape latency at 1, 8 and 64 replayed GPUs", "docs/selftest.md#cpu-only-scaling"),
    Benchmark("poll/poll_instructions.py", "valgrind", "instructions per poll, the daemon's own against the fake's; --baseline TREE", "docs/benchmarks.md#the-daemons-own-python-per-poll-issue-28-round-three"),
    Benchmark("poll/series_per_node.py", "no GPU", "series, bytes and RSS of a node (8 GPUs, 8 x 7 MIG) on the fake pynvml", "docs/benchmarks.md#series-and-memory-per-node-issue-18"),
    Benchmark("poll/stop_and_hang_latency.py", "no GPU", "SIGTERM to exit (idle, and with an NVML call hung), /metrics latency before and during the hang", "docs/benchmarks.md#what-the-tests-no-longer-time-issue-39"),
    Benchmark("poll/profile_poll.py", "a GPU", "process CPU with NVML open, polls under cProfile, RSS by start-up stage", "docs/selftest.md#overhead-benchmark-on-a-gpu-benchgpucompare_nvitoppy"),
    Benchmark("nvml/nvml_poll_cost.py", "a GPU", "every NVML call of a poll with its cadence and cost, nvmlDeviceGetSamples' parts, collect of two trees", "docs/benchmarks.md#nvml-cost-per-poll-issue-28-round-two"),
    Benchmark("nvml/nvml_health_cost.py", "a GPU", "what each NVML health reading answers and costs", "docs/health.md"),
    Benchmark("nvml/nvlink_errors_cost.py", "a GPU", "what the NVLink error readings (totals, link states, per-link counters) cost and read", "docs/health.md"),
    Benchmark("apps/app_parse_cost.py", "no GPU", "CPU, wall time and memory of reading one counter out of large app answers; --old FILE", "docs/apps.md"),
    Benchmark("gpu/compare_nvitop.py", "a GPU", "overhead beside nvitop-exporter and a baseline tree, the NVML calls of a poll (--fake-gpus N: the logic on the fake)", "docs/benchmarks.md#issue-28s-targets-after-round-three"),
    Benchmark("gpu/live_verdicts.py", "a GPU", "the daemon's poller on a live GPU: every poll's verdicts as JSON lines (tools/record_corpus.py --live)", "docs/selftest.md#real-workloads-on-a-real-nvidia-h100-80gb-hbm3-2026-11-25"),
    Benchmark("gpu/tensor_clock.py", "a GPU", "what a busy tensor cycle does and at which SM clock: NVML's clock, a clock64 probe and GPM's cycle counters beside a bf16 GEMM, a ViT step and a TF32 GEMM", "docs/peaks.md"),
    Benchmark("gpu/two_owners.py", "a GPU", "two Unix users on one GPU beside the daemon: GPU 0's class, the holders, jobs and an app's process join, phase by phase (owners never cross)", "docs/security.md#owners-never-cross"),
    Benchmark("multi_gpu/multi_gpu.py", "several GPUs", "NCCL collectives recorded on every GPU, the overhead at N GPUs", "docs/benchmarks.md#several-gpus"),
    Benchmark("multi_gpu/multi_gpu_jobs.py", "several GPUs", "multi-GPU jobs (one and two per node) beside the daemon, per GPU and per job; a DDP job's steps/s without and with the daemon", "docs/benchmarks.md#several-gpus"),
)
NOT_BENCHMARKS = ("harness.py", "nvml_calls.py", "run_all.py")  # shared modules and the runner


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


def quick_table() -> None:
    """scrape_latency and poll_cpu with 1 and 8 GPUs, as one table."""
    sys.path[:0] = [str(HERE / "web"), str(HERE / "poll")]
    import poll_cpu
    import scrape_latency

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


def listing() -> str:
    width = max(len(bench.script) for bench in BENCHMARKS)
    return "\n".join(f"{bench.script:<{width}}  [{bench.needs}]  {bench.measures}  ({bench.doc})" for bench in BENCHMARKS)


def find(name: str) -> Benchmark:
    for bench in BENCHMARKS:
        if name in (bench.script, bench.script.rsplit(".", 1)[0], Path(bench.script).name, Path(bench.script).stem):
            return bench
    raise SystemExit(f"run_all: no benchmark named {name!r}; --list shows them")


def run(bench: Benchmark, arguments: list[str]) -> int:
    program = ["bash"] if bench.script.endswith(".sh") else [sys.executable]
    return subprocess.run([*program, str(HERE / bench.script), *arguments], check=False).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list every benchmark and exit")
    parser.add_argument("--cpu", action="store_true", help="run every benchmark that needs no GPU, with its defaults")
    parser.add_argument("name", nargs="?", help="one benchmark to run (its script's name, .py optional)")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="passed on to that benchmark")
    args = parser.parse_args()
    if args.list:
        print(listing())
        return 0
    if args.name:
        return run(find(args.name), args.arguments)
    if args.cpu:
        failed = []
        for bench in BENCHMARKS:
            if bench.needs == "no GPU":
                print(f"\n## {bench.script}: {bench.measures}\n", flush=True)
                if run(bench, []) != 0:
                    failed.append(bench.script)
        if failed:
            print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1 if failed else 0
    quick_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
