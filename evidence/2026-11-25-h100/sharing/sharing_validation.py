"""Validate the fair split of a shared GPU on a real GPU (issue 18; results in evidence/*/sharing.md).

Two PyTorch processes time-slice one GPU, each running bf16 matmuls in bursts with host sleeps at a
known duty, while the daemon runs with ``sharing.enabled``. Each process counts its matmuls; its own
GPU-busy time is that count x one matmul's time measured alone beforehand. Phases:

1. ``duty70`` at 0.7 and ``duty30`` at 0.3 of each 200 ms period (together they ask for the whole GPU);
2. 0.5 and 0.2 (the GPU is idle about 30 % of the time);
3. ``duty30`` alone at 0.3, ``duty70`` idle but holding its context.

At each phase boundary the daemon is scraped; the per-holder counters' increments are compared with
the processes' own figures. A sampler thread also calls nvmlDeviceGetProcessUtilization itself, to
record what the driver returns (entries per call, timestamps, PIDs) and what one call costs.

Run on a GPU machine from a folder holding gpueff/ and bench/:
``PYTHONPATH=. python3 evidence/2026-11-25-h100/sharing/sharing_validation.py --out DIR``. Needs torch, nvidia-ml-py, prometheus-client.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]  # this proof lives beside its results, under evidence/
sys.path.insert(0, str(ROOT / "bench"))
from harness import free_port  # noqa: E402

PERIOD = 0.2  # seconds per burst-and-sleep cycle
SIZE = 8192
PHASES = [(("duty70", 0.7), ("duty30", 0.3)), (("duty70", 0.5), ("duty30", 0.2)), (("duty70", 0.0), ("duty30", 0.3))]
EXTRA_GIB = {"duty70": 3, "duty30": 7}  # different device memory, so NVML's entries can be told apart even by memory


def worker(name: str, plan: list[tuple[float, float, float]], matmul_seconds: float) -> None:
    """Run each (start wall time, end wall time, duty) phase; print one JSON line per phase."""
    Path("/proc/self/comm").write_text(name)
    import torch

    a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    ballast = torch.empty(EXTRA_GIB[name] << 30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print(json.dumps({"ready": name, "pid": os.getpid()}), flush=True)
    for start, end, duty in plan:
        while time.time() < start:
            time.sleep(0.005)
        per_burst = round(duty * PERIOD / matmul_seconds)
        count, bursts, burst_wall = 0, 0, 0.0
        next_period = start
        while True:
            now = time.time()
            if now >= end:
                break
            if per_burst:
                began = time.time()
                for _ in range(per_burst):
                    torch.matmul(a, b)
                torch.cuda.synchronize()
                burst_wall += time.time() - began
                count += per_burst
                bursts += 1
            next_period += PERIOD
            time.sleep(max(0.0, min(next_period, end) - time.time()))
        print(json.dumps({"name": name, "pid": os.getpid(), "duty": duty, "matmuls": count, "bursts": bursts, "burst_wall_seconds": burst_wall, "busy_seconds": count * matmul_seconds, "phase_seconds": end - start}), flush=True)
    del ballast


def calibrate() -> None:
    """One bf16 matmul's time with the GPU to itself, printed as JSON."""
    import torch

    a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    for _ in range(50):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = 400
    start.record()
    for _ in range(n):
        torch.matmul(a, b)
    stop.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(stop) / 1000 / n
    print(json.dumps({"matmul_seconds": seconds, "tflops": 2 * SIZE**3 / seconds / 1e12, "gpu": torch.cuda.get_device_name(0)}), flush=True)


class Sampler(threading.Thread):
    """Calls nvmlDeviceGetProcessUtilization every second like the daemon does, keeping what it returns."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.calls: list[dict[str, Any]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        nvml, seen = self.nvml, 0
        while not self.stop.wait(1.0):
            began = time.perf_counter()
            try:
                entries = nvml.nvmlDeviceGetProcessUtilization(self.handle, seen)
                error = None
            except nvml.NVMLError as failure:
                entries, error = [], str(failure)
            cost = time.perf_counter() - began
            processes = [(int(p.pid), int(p.usedGpuMemory or 0)) for p in nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)]
            utilization = nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
            record = {
                "wall": time.time(),
                "seen": seen,
                "cost_seconds": cost,
                "error": error,
                "gpu_util": utilization,
                "processes": processes,
                "entries": [(int(e.pid), int(e.timeStamp), int(e.smUtil), int(e.memUtil)) for e in entries],
            }
            if entries:
                seen = max(int(e.timeStamp) for e in entries)
            self.calls.append(record)



def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    values: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return values


def holders(values: dict, name: str) -> dict[str, float]:
    return {f'{dict(k)["holder_kind"]}/{dict(k)["holder"]}': v for k, v in values.get(name, {}).items() if dict(k).get("gpu") == "0"}


def gpu(values: dict, name: str) -> float | None:
    return next((v for k, v in values.get(name, {}).items() if dict(k).get("gpu") == "0"), None)


HOLDER_METRICS = ("gpueff_holder_busy_seconds_total", "gpueff_holder_sm_active_seconds_total", "gpueff_holder_busy_idle_sm_seconds_total", "gpueff_holder_energy_joules_total")
GPU_METRICS = ("gpueff_gpu_busy_seconds_total", "gpueff_sm_active_seconds_total", "gpueff_busy_idle_sm_seconds_total", "gpueff_energy_joules_total")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--phase-seconds", type=float, default=80.0)
    parser.add_argument("--worker", nargs=3, metavar=("NAME", "PLAN_JSON", "MATMUL_SECONDS"))
    parser.add_argument("--calibrate", action="store_true")
    args = parser.parse_args()
    if args.calibrate:
        calibrate()
        return 0
    if args.worker:
        name, plan, seconds = args.worker
        worker(name, [tuple(p) for p in json.loads(plan)], float(seconds))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, os.path.abspath(__file__)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    result: dict[str, Any] = {"phases": []}
    calibration = json.loads(subprocess.run([*me, "--calibrate", "--out", str(out)], capture_output=True, text=True, check=True, env=env).stdout.strip().splitlines()[-1])
    result["calibration"] = calibration
    sampler = Sampler()
    sampler.start()
    time.sleep(3)  # idle calls: NOT_FOUND and its cost
    config = out / "sharing.yaml"
    config.write_text("sharing:\n  enabled: true\n")
    port = free_port()
    logs = contextlib.ExitStack()
    daemon_log = logs.enter_context(open(out / "daemon.log", "w"))  # noqa: SIM115 (closed by the ExitStack)
    daemon = subprocess.Popen([sys.executable, "-m", "gpueff", "--backend", "nvml", "--config", str(config), "--web.listen-address", f"127.0.0.1:{port}"], stdout=daemon_log, stderr=subprocess.STDOUT, env=env)
    for _ in range(100):
        try:
            scrape(port)
            break
        except OSError:
            if daemon.poll() is not None:
                raise SystemExit(f"the daemon exited ({daemon.returncode}): see {out / 'daemon.log'}") from None
            time.sleep(0.2)
    t0 = time.time() + 25  # torch import, CUDA contexts and ballast before the first phase
    bounds = [(t0 + i * args.phase_seconds, t0 + (i + 1) * args.phase_seconds) for i in range(len(PHASES))]
    workers = {}
    for slot, name in enumerate(("duty70", "duty30")):
        plan = [(start, end, PHASES[i][slot][1]) for i, (start, end) in enumerate(bounds)]
        workers[name] = subprocess.Popen([*me, "--out", str(out), "--worker", name, json.dumps(plan), str(calibration["matmul_seconds"])], stdout=subprocess.PIPE, stderr=logs.enter_context(open(out / f"{name}.err", "w")), text=True, env=env)  # noqa: SIM115
    scrapes = []
    for boundary in [bounds[0][0]] + [end for _, end in bounds]:
        time.sleep(max(0.0, boundary - time.time()) + 1.5)  # one poll past the boundary
        scrapes.append((time.time(), scrape(port)))
    reports: dict[str, list[dict]] = {}
    for name, process in workers.items():
        stdout, _ = process.communicate(timeout=120)
        reports[name] = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    sampler.stop.set()
    daemon.terminate()
    daemon.wait(10)
    logs.close()
    pids = {name: next(r["pid"] for r in lines if "ready" in r) for name, lines in reports.items()}
    result["worker_pids"] = pids
    for index in range(len(PHASES)):
        before, after = scrapes[index][1], scrapes[index + 1][1]
        phase: dict[str, Any] = {"duties": dict(PHASES[index]), "workers": {name: [r for r in lines if "matmuls" in r][index] for name, lines in reports.items()}}
        for metric in HOLDER_METRICS:
            b, a = holders(before, metric), holders(after, metric)
            phase[metric] = {h: a[h] - b.get(h, 0.0) for h in a}
        for metric in GPU_METRICS:
            gpu_before, gpu_after = gpu(before, metric), gpu(after, metric)
            phase[metric] = None if gpu_after is None or gpu_before is None else gpu_after - gpu_before
        phase["scrape_seconds"] = scrapes[index + 1][0] - scrapes[index][0]
        result["phases"].append(phase)
    result["job_info"] = [dict(k) for k in scrapes[-1][1].get("gpueff_gpu_job_info", {})]
    calls = sampler.calls
    costs = sorted(c["cost_seconds"] for c in calls if c["entries"])
    idle_costs = sorted(c["cost_seconds"] for c in calls if not c["entries"])
    result["process_utilization_call"] = {
        "calls": len(calls),
        "with_entries": len(costs),
        "cost_median_seconds_with_entries": costs[len(costs) // 2] if costs else None,
        "cost_max_seconds_with_entries": costs[-1] if costs else None,
        "cost_median_seconds_without": idle_costs[len(idle_costs) // 2] if idle_costs else None,
        "errors_seen": sorted({c["error"] for c in calls if c["error"]}),
        "entries_per_call_median": sorted(len(c["entries"]) for c in calls if c["entries"])[len(costs) // 2] if costs else None,
        "nvml_pids_seen": sorted({e[0] for c in calls for e in c["entries"]}),
        "process_list_seen": sorted({tuple(p) for c in calls for p in c["processes"]})[:10],
    }
    # the method's own arithmetic from the raw entries, per phase, by PID (no /proc needed)
    by_phase = []
    for start, end in bounds:
        sums: dict[int, float] = defaultdict(float)
        for call in calls:
            for pid, stamp, sm, _ in call["entries"]:
                if start <= stamp / 1e6 < end:
                    sums[pid] += sm
        by_phase.append(dict(sums))
    result["raw_sm_sums_by_pid"] = by_phase
    (out / "sharing.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "raw_calls.json").write_text(json.dumps(calls[:400]))
    print(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
