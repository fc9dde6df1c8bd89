#!/usr/bin/env python3
"""Several GPUs of one host (issue 19): real collectives recorded, and the daemon's overhead at N GPUs.

Parts (``--parts``, default both):

collectives
    Three PyTorch/NCCL jobs, one process per GPU: ``allreduce`` (large bf16 buffers, NVLink carries
    the traffic), ``allreduce_overlap`` (the same all-reduce on one stream while bf16 matmuls run on
    another) and ``ddp_train`` (a small MLP trained with DistributedDataParallel). While each runs,
    every GPU is recorded with ``gpu-efficiency-exporter record`` (one recorder per GPU, GPM can be
    read by several processes at once) and a live daemon is scraped once a second. Each job measures
    its own bus bandwidth (NCCL's definition: algbw x 2(n-1)/n) and TFLOP/s, which go into the
    traces' ``truth``. Prints, per job and GPU: NVLink tx/rx from GPM against the job's bus
    bandwidth, SM activity, the bottleneck classes seen (share of scrapes) and the mismatch share.

overhead
    A bf16 matmul on every GPU, then this daemon and nvitop-exporter, each alone, at 1 s and 100 ms:
    CPU (% of a core), RSS, scrape p50/p99, series count and payload bytes per scrape, and the poll
    duration (from ``gpueff_collect_duration_seconds``). Also the NVML backend's own ``collect()``
    over the GPUs, median against max, which shows whether the slow-cadence reads land on one poll.

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1 are forced for every child). Needs PyTorch with CUDA and >= 2 GPUs for
``collectives``; nvitop-exporter on PATH for its half of ``overhead``.

Run: python3 bench/multi_gpu/multi_gpu.py --out DIR [--parts collectives,overhead] [--seconds 30]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import (  # bench/ is first on sys.path when a benchmark runs
    free_port,
    live_threads_cpu_ns,
    process_cpu_seconds,
)

ROOT = Path(__file__).resolve().parents[2]
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
SAMPLE_LINE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class BenchError(Exception):
    """The benchmark cannot run here; the message says why."""


def child_env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(part for part in (str(ROOT), os.environ.get("PYTHONPATH", "")) if part)  # carried packages (nvitop-exporter) stay importable
    return dict(os.environ, **NO_MULTICAST, PYTHONPATH=path, PYTHONUNBUFFERED="1", **extra)



def scrape(port: int) -> tuple[float, bytes]:
    """One GET of /metrics on a fresh connection: (seconds, body)."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    if response.status != 200:
        raise OSError(f"/metrics answered {response.status}")
    return time.perf_counter() - started, body


def parse(body: bytes) -> list[tuple[str, dict[str, str], float]]:
    series = []
    for line in body.decode().splitlines():
        match = SAMPLE_LINE.match(line)
        if match:
            labels = dict(LABEL.findall(match["labels"] or ""))
            series.append((match["name"], labels, float(match["value"])))
    return series


def rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES / 1e6


class Process:
    """A child process that is stopped (SIGTERM, then SIGKILL) when the block ends."""

    def __init__(self, command: list[str], log: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.log = open(log, "w") if log else None  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(command, cwd=ROOT, env=env or child_env(), stdout=self.log or subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def wait_port(self, port: int, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while True:
            if self.process.poll() is not None:
                raise BenchError(f"{self.process.args!r} exited with {self.process.returncode}")
            try:
                scrape(port)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise BenchError(f"{self.process.args!r} did not serve /metrics in {seconds}s") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def gpu_count() -> int:
    import pynvml

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def daemon(port: int, interval: str) -> list[str]:
    return [sys.executable, "-m", "gpueff", "--backend", "nvml", "--web.listen-address", f"127.0.0.1:{port}", "--collect-interval", interval, "--log.level", "warn"]


# ---- the jobs (run as `multi_gpu.py job NAME RANK WORLD PORT SECONDS RESULT`) --------------------


def job(name: str, rank: int, world: int, port: int, seconds: float, result: Path) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    ready = result.with_suffix(".ready")  # written when the timed loop starts: the recorders wait for every rank's
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    device = torch.device("cuda", rank)
    stats: dict[str, float] = {}
    if name in ("allreduce", "allreduce_overlap"):
        buffer = torch.ones(256 * 1024 * 1024 // 2, dtype=torch.bfloat16, device=device)  # 256 MiB
        side = torch.cuda.Stream(device) if name == "allreduce_overlap" else None
        a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device) if side else None
        for _ in range(3):
            dist.all_reduce(buffer)
        torch.cuda.synchronize()
        reduces = matmuls = 0
        ready.touch()
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            if side is not None and a is not None:
                with torch.cuda.stream(side):
                    for _ in range(4):
                        a @ a
                    matmuls += 4
            dist.all_reduce(buffer)
            reduces += 1
            if reduces % 8 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - started
        algbw = reduces * buffer.numel() * buffer.element_size() / elapsed
        stats = {"busbw_gbps": algbw * 2 * (world - 1) / world / 1e9, "tflops": matmuls * 2 * 8192**3 / elapsed / 1e12}
    elif name == "ddp_train":
        from torch.nn.parallel import DistributedDataParallel

        width = 8192
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width, dtype=torch.bfloat16, device=device) for _ in range(4)])
        ddp = DistributedDataParallel(model, device_ids=[rank], bucket_cap_mb=100)
        optimiser = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
        batch = torch.randn(2048, width, dtype=torch.bfloat16, device=device)
        steps = 0
        ready.touch()
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            optimiser.zero_grad(set_to_none=True)
            ddp(batch).float().pow(2).mean().backward()
            optimiser.step()
            steps += 1
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - started
        params = sum(p.numel() for p in model.parameters())
        stats = {
            "tflops": steps * 6 * 2048 * params / elapsed / 1e12,  # forward + backward, 6 FLOP per parameter per row
            "busbw_gbps": steps * params * 2 * 2 * (world - 1) / world / elapsed / 1e9,  # bf16 gradients all-reduced
        }
    else:
        raise BenchError(f"unknown job {name}")
    stats["rank"] = rank
    result.write_text(json.dumps(stats))
    dist.destroy_process_group()


# ---- part 1: collectives -----------------------------------------------------------------------


def run_collective(name: str, gpus: int, seconds: float, out: Path, daemon_port: int) -> dict[str, Any]:
    port = free_port()
    results = [out / f"{name}_rank{rank}.json" for rank in range(gpus)]
    ranks = [
        Process([sys.executable, __file__, "job", name, str(rank), str(gpus), str(port), str(seconds + 15), str(results[rank])], out / f"{name}_rank{rank}.log")
        for rank in range(gpus)
    ]
    try:
        deadline = time.monotonic() + 180  # NCCL set-up, model build, first steps
        while not all(path.with_suffix(".ready").exists() for path in results):
            if time.monotonic() > deadline or any(rank.process.poll() not in (None, 0) for rank in ranks):
                raise BenchError(f"{name}: not every rank started its timed loop (see {out}/{name}_rank*.log)")
            time.sleep(0.2)
        time.sleep(3)  # the loops' first iterations (allocator, cuBLAS, NCCL warm-up) are not the steady state
        recorders = [
            Process(
                [sys.executable, "-m", "gpueff", "record", "--gpu", str(gpu), "--duration", f"{seconds:g}s", "--interval", "1s",
                 "--workload", f"{name}_gpu{gpu}", "--description", f"{name} over {gpus} GPUs (NCCL, one process per GPU), GPU {gpu}",
                 "--output", str(out / f"{name}_gpu{gpu}.json")],
                out / f"{name}_record{gpu}.log",
            )
            for gpu in range(gpus)
        ]
        scrapes = []
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            time.sleep(1.0)
            scrapes.append(parse(scrape(daemon_port)[1]))
        for recorder in recorders:
            recorder.process.wait(seconds + 60)
            recorder.stop()
        for rank in ranks:
            rank.process.wait(seconds + 120)
    finally:
        for rank in ranks:
            rank.stop()
    own = [json.loads(path.read_text()) for path in results if path.exists()]
    if len(own) != gpus:
        raise BenchError(f"{name}: only {len(own)} of {gpus} ranks reported (see {out}/{name}_rank*.log)")
    busbw = statistics.mean(item["busbw_gbps"] for item in own)
    tflops = statistics.mean(item["tflops"] for item in own)
    for gpu in range(gpus):
        trace_path = out / f"{name}_gpu{gpu}.json"
        if trace_path.exists():
            trace = json.loads(trace_path.read_text())
            trace["truth"] = {"busbw_gbps": round(busbw, 1), **({"tflops": round(tflops, 1)} if tflops else {})}
            trace_path.write_text(json.dumps(trace, indent=1) + "\n")
    return {"job": name, "gpus": gpus, "own_busbw_gbps": busbw, "own_tflops": tflops, "per_gpu": summarise(scrapes, gpus)}


def summarise(scrapes: list[list[tuple[str, dict[str, str], float]]], gpus: int) -> list[dict[str, Any]]:
    rows = []
    for gpu in range(gpus):
        classes: dict[str, int] = {}
        values: dict[str, list[float]] = {}
        mismatch = 0
        for series in scrapes:
            for name, labels, value in series:
                if labels.get("gpu") != str(gpu):
                    continue
                if name == "gpueff_bottleneck" and value == 1:
                    classes[labels["class"]] = classes.get(labels["class"], 0) + 1
                elif name == "gpueff_mismatch" and labels.get("rule") == "high_util_low_sm" and value == 1:
                    mismatch += 1
                elif name in ("gpueff_nvlink_tx_bytes_per_second", "gpueff_nvlink_rx_bytes_per_second", "gpueff_sm_active_ratio", "gpueff_gpu_utilization_ratio", "gpueff_tensor_active_ratio"):
                    values.setdefault(name, []).append(value)
        rows.append({
            "gpu": gpu,
            "classes": {name: round(count / max(1, len(scrapes)), 2) for name, count in sorted(classes.items(), key=lambda item: -item[1])},
            "high_util_low_sm_share": round(mismatch / max(1, len(scrapes)), 2),
            **{name.removeprefix("gpueff_"): round(statistics.median(vals), 4) for name, vals in values.items()},
        })
    return rows


def collectives(gpus: int, seconds: float, out: Path, smoke: bool) -> list[dict[str, Any]]:
    if gpus < 2 and not smoke:
        raise BenchError(f"collectives need at least 2 GPUs; NVML sees {gpus}")
    port = free_port()
    reports = []
    with Process(daemon(port, "1s"), out / "daemon_collectives.log") as live:
        live.wait_port(port)
        for name in ("allreduce", "allreduce_overlap", "ddp_train"):
            report = run_collective(name, gpus, seconds, out, port)
            print(json.dumps(report), flush=True)
            reports.append(report)
    return reports


# ---- part 2: overhead at N GPUs ------------------------------------------------------------------


def matmul_forever(gpu: int) -> None:
    import torch

    torch.cuda.set_device(gpu)
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    while True:
        for _ in range(16):
            a @ a
        torch.cuda.synchronize()


def measure(command: list[str], port: int, seconds: float, scrapes: int, log: Path, warmup: float = 10.0) -> dict[str, float]:
    with Process(command, log) as exporter:
        exporter.wait_port(port)
        time.sleep(warmup)  # imports, NVML init and the first polls are not the steady state
        pid = exporter.process.pid
        cpu_before, ns_before, started = process_cpu_seconds(pid), live_threads_cpu_ns(pid), time.monotonic()
        latencies, sizes, series = [], [], []
        while time.monotonic() - started < seconds:
            time.sleep(max(0.0, seconds / scrapes))
            took, body = scrape(port)
            latencies.append(took * 1000)
            sizes.append(len(body))
            series.append(sum(1 for line in body.splitlines() if line and not line.startswith(b"#")))
        elapsed = time.monotonic() - started
        cpu = (process_cpu_seconds(pid) - cpu_before) / elapsed * 100
        cpu_fine = (live_threads_cpu_ns(pid) - ns_before) / 1e9 / elapsed * 100
        last = parse(body)
        durations = {name: value for name, _, value in last if name.startswith("gpueff_collect_duration_seconds")}
        latencies.sort()
        return {
            "cpu_percent_of_core": round(cpu, 3),
            "cpu_percent_of_core_schedstat": round(cpu_fine, 3),
            "rss_mb": round(rss_mb(pid), 1),
            "scrape_p50_ms": round(statistics.median(latencies), 2),
            "scrape_p99_ms": round(latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))], 2),
            "payload_bytes": statistics.median(sizes),
            "series": statistics.median(series),
            **({"poll_mean_ms": round(1000 * durations["gpueff_collect_duration_seconds_sum"] / durations["gpueff_collect_duration_seconds_count"], 3)}
               if durations.get("gpueff_collect_duration_seconds_count") else {}),
        }


def backend_polls(gpus: int, interval: float, polls: int) -> dict[str, float]:
    """The NVML backend's own collect() over all GPUs, in this process: median and max wall ms."""
    sys.path.insert(0, str(ROOT))
    from gpueff.backends.nvml.backend import NvmlBackend

    backend = NvmlBackend(slow_interval=10.0)
    backend.start()
    times = []
    try:
        for _ in range(polls):
            time.sleep(interval)
            started = time.perf_counter()
            backend.collect()
            times.append((time.perf_counter() - started) * 1000)
    finally:
        backend.close()
    times.sort()
    return {"gpus": gpus, "interval_s": interval, "collect_median_ms": round(statistics.median(times), 3), "collect_max_ms": round(times[-1], 3), "collect_p90_ms": round(times[int(0.9 * (len(times) - 1))], 3)}


def overhead(gpus: int, seconds: float, out: Path) -> list[dict[str, Any]]:
    nvitop = shutil.which("nvitop-exporter")
    loads = [Process([sys.executable, __file__, "matmul", str(gpu)], out / f"matmul{gpu}.log") for gpu in range(gpus)]
    rows: list[dict[str, Any]] = []
    try:
        time.sleep(10)
        for interval, seconds_text in ((1.0, "1s"), (0.1, "100ms")):
            port = free_port()
            row = {"exporter": "gpu-efficiency-exporter", "interval_s": interval, **measure(daemon(port, seconds_text), port, seconds, 40, out / f"ours_{seconds_text}.log")}
            print(json.dumps(row), flush=True)
            rows.append(row)
            if nvitop:
                port = free_port()
                command = [nvitop, "--bind-address", "127.0.0.1", "--port", str(port), "--interval", str(interval)]
                row = {"exporter": "nvitop-exporter", "interval_s": interval, **measure(command, port, seconds, 40, out / f"nvitop_{seconds_text}.log")}
                print(json.dumps(row), flush=True)
                rows.append(row)
            row = {"exporter": "NvmlBackend.collect (in process)", **backend_polls(gpus, interval, 60 if interval >= 1 else 300)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        for load in loads:
            load.stop()
    return rows


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "job":
        name, rank, world, port, seconds, result = sys.argv[2:8]
        job(name, int(rank), int(world), int(port), float(seconds), Path(result))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "matmul":
        matmul_forever(int(sys.argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for traces, logs and results.json")
    parser.add_argument("--parts", default="collectives,overhead", help="comma-separated: collectives, overhead")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per job / per exporter and interval (default 30)")
    parser.add_argument("--smoke", action="store_true", help="let 'collectives' run on one GPU, to check the script itself (no traffic crosses a link)")
    args = parser.parse_args()
    os.environ.update(NO_MULTICAST)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        gpus = gpu_count()
        print(f"{gpus} GPU(s); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
        results: dict[str, Any] = {"gpus": gpus}
        parts = set(args.parts.split(","))
        if "collectives" in parts:
            results["collectives"] = collectives(gpus, args.seconds, args.out, args.smoke)
        if "overhead" in parts:
            results["overhead"] = overhead(gpus, args.seconds, args.out)
    except BenchError as error:
        print(f"multi_gpu.py: {error}", file=sys.stderr)
        return 2
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
