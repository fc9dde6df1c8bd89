#!/usr/bin/env python3
"""Overhead on a real GPU, in one go (about 8 minutes with the defaults):

1. overhead: this daemon against nvitop-exporter, each alone at a 1 s interval on the same GPUs:
   CPU seconds per minute (process CPU time over --minutes, scraped every 15 s as Prometheus
   would), RSS, and scrape latency p50/p99 (--scrapes GETs on fresh connections, 1.05 s apart);
2. floor: the raw cost of the NVML calls of one poll, timed call by call in this process, and the
   daemon's own NVML backend (``NvmlBackend.collect``) around them;
3. perturbation: a bf16 matmul's own TFLOP/s with no exporter, with this daemon at 1 s and at
   100 ms, in interleaved rounds so that clock and thermal drift hit every condition alike.

Needs an NVIDIA GPU, nvitop-exporter (pip install nvitop-exporter) for part 1 and PyTorch or CuPy
for part 3; it stops with a clear message where one is missing. Prints Markdown tables.

Run: .venv/bin/python bench/compare_nvitop.py [--parts overhead,floor,perturbation] [--gpu 0]
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import free_port  # noqa: E402 (bench/ is first on sys.path when a benchmark runs)

from exporter.backends.nvml.gpm_metrics import GPM_METRICS  # noqa: E402
from exporter.commands.selftest.workloads import SelftestUnavailable  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


class BenchError(Exception):
    """The benchmark cannot run here; the message says why."""


# ---- processes, scrapes -------------------------------------------------------------------------



def get(port: int, path: str = "/metrics") -> float:
    """One GET on a fresh connection; its latency in seconds."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    if response.status != 200:
        raise OSError(f"GET {path} answered {response.status}")
    return time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / CLOCK_TICKS  # utime stime cutime cstime


def rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES / 1e6


class Exporter:
    """A running exporter process on a loopback port, ready to be scraped."""

    def __init__(self, command: list[str], port: int) -> None:
        self.port = port
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise BenchError(f"{command[0]} exited with {self.process.returncode}: {self.process.stderr.read().strip() if self.process.stderr else ''}")
            try:
                get(port)
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise BenchError(f"{' '.join(command)} did not serve /metrics within 60s") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Exporter:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def this_daemon(port: int, interval: str) -> list[str]:
    return [sys.executable, "-m", "exporter", "--web.listen-address", f"127.0.0.1:{port}", "--collect-interval", interval, "--log.level", "warn"]


def nvitop_exporter(port: int) -> list[str]:
    program = shutil.which("nvitop-exporter")
    if program is None:
        raise BenchError("nvitop-exporter is not installed: pip install nvitop-exporter (or leave 'overhead' out of --parts)")
    return [program, "--bind-address", "127.0.0.1", "--port", str(port), "--interval", "1.0"]


# ---- part 1: overhead ----------------------------------------------------------------------------


def overhead(name: str, command: Callable[[int], list[str]], minutes: float, scrapes: int) -> dict[str, float]:
    port = free_port()
    with Exporter(command(port), port) as exporter:
        pid = exporter.process.pid
        time.sleep(10)  # imports, NVML init and the first polls are not the steady state
        started, cpu_before = time.monotonic(), cpu_seconds(pid)
        while time.monotonic() - started < minutes * 60:
            get(port)
            time.sleep(min(15.0, max(0.0, minutes * 60 - (time.monotonic() - started))))
        cpu_per_minute = (cpu_seconds(pid) - cpu_before) / ((time.monotonic() - started) / 60)
        latencies = []
        for _ in range(scrapes):
            time.sleep(1.05)
            latencies.append(get(port) * 1000)
        latencies.sort()
        result = {
            "cpu_s_per_min": cpu_per_minute,
            "rss_mb": rss_mb(pid),
            "p50_ms": statistics.median(latencies),
            "p99_ms": latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))],
        }
    print(f"  {name}: {result}", file=sys.stderr)
    return result


# ---- part 2: the NVML floor --------------------------------------------------------------------


def timed(call: Callable[[], Any], repeat: int) -> float:
    """Median wall seconds of one call."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def nvml_floor(gpu: int, repeat: int) -> list[tuple[str, float]]:
    """(call, median ms) for each raw NVML call of one poll, their sum, and the daemon's whole poll."""
    import pynvml as nvml

    from exporter.backends.nvml.backend import NvmlBackend

    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
        calls: list[tuple[str, Callable[[], Any]]] = [
            ("nvmlDeviceGetUtilizationRates", lambda: nvml.nvmlDeviceGetUtilizationRates(handle)),
            ("nvmlDeviceGetPowerUsage", lambda: nvml.nvmlDeviceGetPowerUsage(handle)),
            ("nvmlDeviceGetTemperature", lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            ("nvmlDeviceGetClockInfo (SM)", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            ("nvmlDeviceGetClockInfo (memory)", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
            ("nvmlDeviceGetMemoryInfo", lambda: nvml.nvmlDeviceGetMemoryInfo(handle)),
            ("nvmlDeviceGetCurrentClocksEventReasons", lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
            ("nvmlDeviceGetComputeRunningProcesses", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)),
        ]
        rows = [(name, timed(call, repeat) * 1000) for name, call in calls]
        if nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            first, second = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
            try:
                rows.append(("nvmlGpmSampleGet", timed(lambda: nvml.nvmlGpmSampleGet(handle, first), repeat) * 1000))
                time.sleep(0.2)
                nvml.nvmlGpmSampleGet(handle, second)
                request = nvml.c_nvmlGpmMetricsGet_t()
                request.version = nvml.NVML_GPM_METRICS_GET_VERSION
                request.numMetrics = len(GPM_METRICS)
                for slot, metric in enumerate(GPM_METRICS):
                    request.metrics[slot].metricId = metric.metric_id
                request.sample1, request.sample2 = first, second
                rows.append((f"nvmlGpmMetricsGet ({len(GPM_METRICS)} metrics)", timed(lambda: nvml.nvmlGpmMetricsGet(request), repeat) * 1000))
            finally:
                nvml.nvmlGpmSampleFree(first)
                nvml.nvmlGpmSampleFree(second)
        rows.append(("sum of the raw calls (the floor)", sum(ms for _, ms in rows)))
    finally:
        nvml.nvmlShutdown()
    backend = NvmlBackend(slow_interval=3600.0)
    backend.start()
    try:
        backend.collect()
        polls, cpu = [], []
        for _ in range(repeat):
            time.sleep(0.2)  # GPM samples must be more than 100 ms apart
            started, cpu_started = time.perf_counter(), time.process_time()
            backend.collect()
            polls.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
    finally:
        backend.close()
    rows.append(("the daemon's NvmlBackend.collect(), all GPUs: wall", statistics.median(polls) * 1000))
    rows.append(("the daemon's NvmlBackend.collect(), all GPUs: CPU", statistics.median(cpu) * 1000))
    return rows


# ---- part 3: perturbation ------------------------------------------------------------------------


def perturbation(gpu: int, seconds: float, rounds: int) -> dict[str, list[float]]:
    from exporter.backends.nvml.backend import NvmlBackend
    from exporter.commands.selftest.workloads import load_engine, matmul  # PyTorch or CuPy, imported only here

    engine = load_engine(gpu)
    backend = NvmlBackend()
    device = backend.start()[gpu]
    backend.close()
    matmul(engine, 10.0, device)  # clocks and power settle before the first measured run
    conditions: dict[str, str | None] = {"no exporter": None, "this daemon at 1s": "1s", "this daemon at 100ms": "100ms"}
    results: dict[str, list[float]] = {name: [] for name in conditions}
    for round_number in range(rounds):
        for name, interval in conditions.items():
            port = free_port()
            exporter = Exporter(this_daemon(port, interval), port) if interval else None
            try:
                if exporter:
                    time.sleep(3)
                results[name].append(matmul(engine, seconds, device)["tflops"])
            finally:
                if exporter:
                    exporter.stop()
            print(f"  round {round_number + 1}, {name}: {results[name][-1]:.1f} TFLOP/s", file=sys.stderr)
    return results


# ---- report ------------------------------------------------------------------------------------


def gpu_line(gpu: int) -> str:
    try:
        import pynvml as nvml
    except ImportError:
        raise BenchError("the nvidia-ml-py package (module pynvml) is not installed") from None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        raise BenchError(f"this benchmark needs an NVIDIA GPU: NVML cannot start ({error})") from None
    try:
        count = nvml.nvmlDeviceGetCount()
        if not 0 <= gpu < count:
            raise BenchError(f"--gpu {gpu}: NVML sees {count} GPU(s)")
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
        name, driver = nvml.nvmlDeviceGetName(handle), nvml.nvmlSystemGetDriverVersion()
    finally:
        nvml.nvmlShutdown()
    text = lambda value: value.decode() if isinstance(value, bytes) else str(value)  # noqa: E731
    return f"GPU {gpu}: {text(name)} ({count} GPU(s) on the machine), driver {text(driver)}, date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="overhead,floor,perturbation", help="comma-separated parts to run (default all three)")
    parser.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU the floor and the matmul use (default 0)")
    parser.add_argument("--minutes", type=float, default=1.0, help="CPU measurement window per exporter (default 1)")
    parser.add_argument("--scrapes", type=int, default=50, help="timed scrapes per exporter (default 50)")
    parser.add_argument("--repeat", type=int, default=100, help="repetitions of each NVML call (default 100)")
    parser.add_argument("--matmul-seconds", type=float, default=15.0, help="one measured matmul run (default 15)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the three perturbation conditions (default 3)")
    args = parser.parse_args()
    parts = {part.strip() for part in args.parts.split(",") if part.strip()}
    unknown = parts - {"overhead", "floor", "perturbation"}
    if unknown or not parts:
        parser.error(f"--parts: unknown part(s) {sorted(unknown)}; choose from overhead, floor, perturbation")
    try:
        print(gpu_line(args.gpu) + "\n")
        if "overhead" in parts:
            nvitop_exporter(0)  # fails early, before minutes of measuring, where it is not installed
            ours = overhead("this daemon", lambda port: this_daemon(port, "1s"), args.minutes, args.scrapes)
            theirs = overhead("nvitop-exporter", nvitop_exporter, args.minutes, args.scrapes)
            print("| exporter (1 s interval) | CPU s/min | RSS MB | scrape p50 ms | scrape p99 ms |\n| --- | ---: | ---: | ---: | ---: |")
            for name, row in (("gpu-efficiency-exporter", ours), ("nvitop-exporter", theirs)):
                print(f"| {name} | {row['cpu_s_per_min']:.3f} | {row['rss_mb']:.1f} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} |")
            print(f"\nCPU ratio (this daemon / nvitop-exporter): {ours['cpu_s_per_min'] / theirs['cpu_s_per_min']:.2f} (target: at most 0.5)\n")
        if "floor" in parts:
            print(f"| NVML call (median of {args.repeat}) | ms |\n| --- | ---: |")
            for name, ms in nvml_floor(args.gpu, args.repeat):
                print(f"| {name} | {ms:.3f} |")
            print()
        if "perturbation" in parts:
            results = perturbation(args.gpu, args.matmul_seconds, args.rounds)
            baseline = statistics.fmean(results["no exporter"])
            print("| condition | bf16 matmul TFLOP/s (mean) | min | max | change |\n| --- | ---: | ---: | ---: | ---: |")
            for name, values in results.items():
                mean = statistics.fmean(values)
                print(f"| {name} | {mean:.1f} | {min(values):.1f} | {max(values):.1f} | {mean / baseline - 1:+.2%} |")
            print("\n(target: under 0.5 % slower than no exporter)")
    except (BenchError, SelftestUnavailable) as error:
        print(f"compare_nvitop: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
