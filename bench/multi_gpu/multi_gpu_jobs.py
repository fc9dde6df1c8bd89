#!/usr/bin/env python3
"""Multi-GPU jobs beside the daemon (issue 35): what each GPU and each job reads, against the jobs' own
truth, and what the daemon costs at 1, 2 and 4 GPUs.

Parts (``--parts``, default both):

jobs
    Per layout (``--layouts``: ``4`` is one 4-rank job on GPUs 0-3; ``2x2`` two 2-rank jobs at once on
    GPUs 0-1 and 2-3, i.e. two jobs on one node), each job launched by its own ``torchrun`` (so the
    daemon finds each as one process group) runs the phases one after another in one NCCL process
    group, every phase ``--phase-seconds`` long: ``allreduce``, ``rs_ag`` (reduce-scatter +
    all-gather, FSDP/ZeRO), ``alltoall`` (expert-parallel MoE), ``sendrecv`` (a ring of point-to-point
    transfers), each bare and ``_overlap`` (bf16 matmuls on a side stream meanwhile), ``pipeline``
    (stages that receive, compute and send on), ``ddp`` (DistributedDataParallel training) and
    ``straggler`` (data parallel, the last rank does 3x the matmuls before each all-reduce). Each rank
    measures its own truth (NCCL bus bandwidth as nccl-tests defines it, TFLOP/s, steps/s). The daemon
    (all GPUs, 1 s) is scraped every second; ``record --gpu all --job`` records every phase from its
    third second. Scrapes in a phase's first ``WARMUP_SECONDS`` still judge the previous phase (the
    class window is 5 s and a new class must hold 2 polls) and are left out of its shares.

cost
    A bf16 matmul on every GPU; at 1, 2 and 4 GPUs (NVML's device count limited in the child, so the
    same machine stands for each): the NVML backend's collect, wall ms poll by poll (0.5 s apart,
    slow interval 2 s: where the slow rounds land), for this tree and ``--baseline``'s, and the
    daemon and nvitop-exporter at 1 s: CPU (% of a core) and RSS.

slowdown
    Does the daemon slow a training job? The ``ddp`` phase on ``--slowdown-gpus`` GPUs (one torchrun
    job), ``--slowdown-rounds`` rounds alternating without and with the daemon (all GPUs, 1 s, scraped
    every 15 s as Prometheus would), each for ``--phase-seconds``: every round's steps/s (the ranks'
    mean), the medians of each side and their ratio. Beside it, the topology the daemon exports
    (``gpueff_gpu_peer_info``, ``gpueff_gpu_peer_nvlinks``) and ``nvidia-smi topo -m``'s matrix.

Writes ``DIR/summary.json`` and everything else (scrapes, traces, logs) under DIR. Needs PyTorch with
CUDA, ``torchrun``, 4 GPUs for ``4`` and ``2x2``; NVLink multicast stays off for every child.

Run: python3 bench/multi_gpu/multi_gpu_jobs.py --out DIR [--parts jobs,cost] [--layouts 4,2x2] [--phase-seconds 16]
     python3 bench/multi_gpu/multi_gpu_jobs.py report DIR/summary.json    # the jobs part as a Markdown table
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import free_port  # bench/ is first on sys.path when a benchmark runs
from multi_gpu import ROOT, BenchError, Process, child_env, daemon, gpu_count, measure, parse, scrape

PHASES = ("allreduce", "allreduce_overlap", "rs_ag", "rs_ag_overlap", "alltoall", "alltoall_overlap", "sendrecv", "sendrecv_overlap", "pipeline", "ddp", "straggler")
WARMUP_SECONDS = 7.0
COLLECTIVE_BYTES = 256 * 1024 * 1024
KEPT = ("gpueff_bottleneck", "gpueff_gpu_utilization_ratio", "gpueff_sm_active_ratio", "gpueff_tensor_active_ratio", "gpueff_dram_active_ratio",
        "gpueff_nvlink_tx_bytes_per_second", "gpueff_nvlink_rx_bytes_per_second", "gpueff_pcie_tx_bytes_per_second", "gpueff_mismatch",
        "gpueff_peer_wait_seconds_total", "gpueff_job_gpus", "gpueff_job_gpu_info", "gpueff_job_straggler", "gpueff_job_peer_wait_ratio",
        "gpueff_job_efficiency_ratio", "gpueff_job_bottleneck_gpus", "gpueff_job_link_bytes_per_second", "gpueff_collect_duration_seconds_sum",
        "gpueff_collect_duration_seconds_count", "process_cpu_seconds_total")
LAYOUTS = {"4": [[0, 1, 2, 3]], "2x2": [[0, 1], [2, 3]], "2": [[0, 1]]}


# ---- one rank (run by torchrun: `multi_gpu_jobs.py rank OUT JOB SECONDS PHASES`) --------------------


def rank_main(out: Path, job: str, seconds: float, phases: list[str]) -> None:
    import torch
    import torch.distributed as dist

    local, rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
    results = []
    for phase in phases:
        dist.barrier()
        torch.cuda.synchronize()
        started = time.time()
        if rank == 0:
            (out / f"{job}.{phase}.start").write_text(f"{started}\n")
        stats = run_phase(phase, rank, world, device, seconds)
        results.append({"phase": phase, "start": started, "end": time.time(), **stats})
        torch.cuda.empty_cache()
    (out / f"{job}_rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


def run_phase(phase: str, rank: int, world: int, device: Any, seconds: float) -> dict[str, float]:
    """Run one phase for about ``seconds``; every rank stops after the same iteration."""
    import torch
    import torch.distributed as dist

    bf16 = torch.bfloat16
    overlap = phase.endswith("_overlap")
    side = torch.cuda.Stream(device) if overlap else None
    square = torch.randn(8192, 8192, dtype=bf16, device=device)
    buffer = torch.ones(COLLECTIVE_BYTES // 2, dtype=bf16, device=device)
    shard = torch.empty(buffer.numel() // world, dtype=bf16, device=device)
    received = torch.empty_like(buffer)
    activation = torch.randn(8192, 8192, dtype=bf16, device=device)  # the pipeline's input to each stage
    flag = torch.zeros(1, device=device)
    parameters = 0
    matmuls = 0
    moved = 0.0  # bus bytes (nccl-tests' busbw numerator) per rank
    steps = 0
    model = optimiser = batch = None
    if phase == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        layers = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192, dtype=bf16, device=device) for _ in range(4)])
        model = DistributedDataParallel(layers, device_ids=[device.index], bucket_cap_mb=100)
        optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4)
        batch = torch.randn(2048, 8192, dtype=bf16, device=device)
        parameters = sum(p.numel() for p in layers.parameters())
    grads = torch.ones(32 * 1024 * 1024, dtype=bf16, device=device)  # 64 MiB of gradients
    started = time.perf_counter()
    while True:
        if side is not None:
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(4):
                    square @ square
            matmuls += 4
        if phase.startswith("allreduce"):
            dist.all_reduce(buffer)
            moved += COLLECTIVE_BYTES * 2 * (world - 1) / world
        elif phase.startswith("rs_ag"):
            dist.reduce_scatter_tensor(shard, buffer)
            dist.all_gather_into_tensor(buffer, shard)
            moved += 2 * COLLECTIVE_BYTES * (world - 1) / world
        elif phase.startswith("alltoall"):
            dist.all_to_all_single(received, buffer)
            moved += COLLECTIVE_BYTES * (world - 1) / world
        elif phase.startswith("sendrecv"):
            half = buffer[: buffer.numel() // 4]
            into = received[: buffer.numel() // 4]
            ops = [dist.P2POp(dist.isend, half, (rank + 1) % world), dist.P2POp(dist.irecv, into, (rank - 1) % world)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()
            moved += half.numel() * 2
        elif phase == "pipeline":
            if rank > 0:
                dist.recv(activation, rank - 1)
            out = (activation @ square) @ square
            matmuls += 2
            if rank < world - 1:
                dist.send(out, rank + 1)
                moved += out.numel() * 2
        elif phase == "ddp":
            assert model is not None and optimiser is not None and batch is not None
            optimiser.zero_grad(set_to_none=True)
            model(batch).float().pow(2).mean().backward()
            optimiser.step()
            moved += parameters * 2 * 2 * (world - 1) / world
        elif phase == "straggler":
            for _ in range(12 if rank == world - 1 else 4):
                square @ square
            matmuls += 12 if rank == world - 1 else 4
            dist.all_reduce(grads)
            moved += grads.numel() * 2 * 2 * (world - 1) / world
        steps += 1
        if steps % 8 == 0:
            torch.cuda.synchronize()
            flag.fill_(float(time.perf_counter() - started >= seconds))
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item() > 0:
                break
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    stats = {"seconds": elapsed, "steps_per_s": steps / elapsed, "busbw_gbps": moved / elapsed / 1e9}
    if phase == "ddp":
        stats["tflops"] = steps * 6 * 2048 * parameters / elapsed / 1e12
    elif matmuls:
        stats["tflops"] = matmuls * 2 * 8192**3 / elapsed / 1e12
    return stats


# ---- part 1: the jobs beside the daemon -----------------------------------------------------------------


def launcher() -> list[str]:
    found = shutil.which("torchrun")
    return [found] if found else [sys.executable, "-m", "torch.distributed.run"]


def compact(body: bytes) -> list[tuple[str, dict[str, str], float]]:
    return [(name, labels, value) for name, labels, value in parse(body) if name in KEPT and not (name == "gpueff_bottleneck" and value == 0)]


def run_layout(layout: str, out: Path, daemon_port: int, seconds: float, phases: list[str]) -> dict[str, Any]:
    groups = LAYOUTS[layout]
    jobs = [f"{layout}gpu_job{number}" for number in range(len(groups))]
    ranks = []
    for job, gpus in zip(jobs, groups, strict=True):
        command = [*launcher(), "--nproc-per-node", str(len(gpus)), "--master-port", str(free_port()), __file__, "rank", str(out), job, f"{seconds:g}", ",".join(phases)]
        ranks.append(Process(command, out / f"{job}.log", env=child_env(CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)))))
    scrapes: list[dict[str, Any]] = []
    recorders: list[Process] = []
    recorded: set[str] = set()
    deadline = time.time() + 120 + len(phases) * (seconds + 15)
    try:
        tick = time.time()
        while any(rank.process.poll() is None for rank in ranks):
            if time.time() > deadline:
                raise BenchError(f"{layout}: the jobs did not finish in time (see {out}/{jobs[0]}.log)")
            taken = time.time()
            try:
                scrapes.append({"t": taken, "series": compact(scrape(daemon_port)[1])})
            except OSError as error:
                print(f"scrape failed: {error}", flush=True)
            for phase in phases:
                if phase not in recorded and (out / f"{jobs[0]}.{phase}.start").exists():
                    recorded.add(phase)
                    name = f"{layout}gpu_{phase}"
                    recorders.append(Process([sys.executable, "-m", "gpueff", "record", "--gpu", "all", "--job", name, "--interval", "1s", "--duration", f"{max(2.0, seconds - 5):g}s",
                                              "--workload", f"{name}_gpu{{gpu}}", "--description", f"{phase} on GPUs {groups} ({layout}), NCCL via torchrun, GPU {{gpu}}",
                                              "--output", str(out / f"{name}_gpu{{gpu}}.json"), "--log.level", "warn"], out / f"{name}.record.log"))
            tick += 1.0
            time.sleep(max(0.0, tick - time.time()))
        for recorder in recorders:
            recorder.process.wait(60)
    finally:
        for process in ranks + recorders:
            process.stop()
    if any(rank.process.returncode != 0 for rank in ranks):
        raise BenchError(f"{layout}: a job failed (see {out}/{layout}gpu_job*.log)")
    (out / f"{layout}gpu_scrapes.json").write_text(json.dumps(scrapes))
    return {"layout": layout, "jobs": [summarise_job(job, gpus, out, scrapes) for job, gpus in zip(jobs, groups, strict=True)]}


def summarise_job(job: str, gpus: list[int], out: Path, scrapes: list[dict[str, Any]]) -> dict[str, Any]:
    own = [json.loads((out / f"{job}_rank{rank}.json").read_text()) for rank in range(len(gpus))]
    phases = []
    for position, first in enumerate(own[0]):
        start, end = first["start"] + WARMUP_SECONDS, first["end"]
        window = [taken for taken in scrapes if start <= taken["t"] <= end]
        truth = {key: round(statistics.mean(rank[position][key] for rank in own), 2) for key in ("busbw_gbps", "tflops", "steps_per_s") if key in first}
        truth["tflops_per_rank"] = [round(rank[position].get("tflops", 0.0), 1) for rank in own]
        with_warmup = [taken for taken in scrapes if first["start"] <= taken["t"] <= end]
        phases.append({"phase": first["phase"], "scrapes": len(window), "truth": truth, "gpus": [per_gpu(gpu, window) for gpu in gpus], "job": per_job(gpus, window),
                       "classes_with_warmup": {gpu: per_gpu(gpu, with_warmup)["classes"] for gpu in gpus}})
    return {"job": job, "gpus": gpus, "phases": phases}


def per_gpu(gpu: int, window: list[dict[str, Any]]) -> dict[str, Any]:
    classes: Counter[str] = Counter()
    values: dict[str, list[float]] = {}
    for taken in window:
        for name, labels, value in taken["series"]:
            if labels.get("gpu") != str(gpu) or "job_kind" in labels:
                continue
            if name == "gpueff_bottleneck":
                classes[labels["class"]] += 1
            elif name not in ("gpueff_mismatch",):
                values.setdefault(name.removeprefix("gpueff_"), []).append(value)
    total = max(1, len(window))
    return {"gpu": gpu, "classes": {name: round(count / total, 2) for name, count in classes.most_common()},
            **{name: round(statistics.median(found), 4) for name, found in values.items() if not name.endswith("_total")}}


def per_job(gpus: list[int], window: list[dict[str, Any]]) -> dict[str, Any]:
    """The daemon's job series for the job holding these GPUs: its label, straggler, lost share."""
    stragglers: Counter[str] = Counter()
    lost: list[float] = []
    names: Counter[str] = Counter()
    for taken in window:
        members: dict[tuple[str, str], set[str]] = {}
        for name, labels, _ in taken["series"]:
            if name == "gpueff_job_gpu_info":
                members.setdefault((labels["job_kind"], labels["job_id"]), set()).add(labels["gpu"])
        mine = [key for key, found in members.items() if found == {str(gpu) for gpu in gpus}]
        if not mine:
            continue
        names[f"{mine[0][0]}/{mine[0][1]}"] += 1
        for name, labels, value in taken["series"]:
            if (labels.get("job_kind"), labels.get("job_id")) != mine[0]:
                continue
            if name == "gpueff_job_straggler":
                stragglers[labels["gpu"]] += 1
            elif name == "gpueff_job_peer_wait_ratio":
                lost.append(value)
    total = max(1, len(window))
    return {"found_as": dict(names), "straggler": {gpu: round(count / total, 2) for gpu, count in stragglers.items()},
            "peer_wait_ratio_median": round(statistics.median(lost), 3) if lost else None}


def jobs_part(out: Path, layouts: list[str], seconds: float, phases: list[str]) -> list[dict[str, Any]]:
    port = free_port()
    reports = []
    with Process(daemon(port, "1s"), out / "daemon_jobs.log") as live:
        live.wait_port(port)
        for layout in layouts:
            report = run_layout(layout, out, port, seconds, phases)
            print(json.dumps(report), flush=True)
            reports.append(report)
        body = scrape(port)[1].decode()  # the NVLink series as exported (errors per link, link states, totals)
        (out / "nvlink_series.txt").write_text("".join(line + "\n" for line in body.splitlines() if line.startswith(("gpueff_nvlink", "# HELP gpueff_nvlink"))))
    return reports


# ---- part 2: cost at 1, 2, 4 GPUs -----------------------------------------------------------------------

LIMITED = "import sys, pynvml; n = int(sys.argv.pop(1)); pynvml.nvmlDeviceGetCount = lambda: n; "
OURS = LIMITED + "from gpueff.commands.cli import main; sys.argv[0] = 'gpu-efficiency-exporter'; sys.exit(main(sys.argv[1:]))"
NVITOP = LIMITED + "import nvitop; nvitop.Device.count = staticmethod(lambda: n); import runpy; sys.argv[0] = 'nvitop-exporter'; runpy.run_module('nvitop_exporter', run_name='__main__')"


POLL_TAIL = """
import json, sys, time
tree, count = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, tree)
import pynvml
pynvml.nvmlDeviceGetCount = lambda: count
from gpueff.backends.nvml.backend import NvmlBackend
backend = NvmlBackend(slow_interval=2.0)
backend.start()
walls = []
try:
    due = time.monotonic()
    for _ in range(21):
        due += 0.5
        time.sleep(max(0.0, due - time.monotonic()))
        started = time.perf_counter()
        backend.collect()
        walls.append(round((time.perf_counter() - started) * 1000, 2))
finally:
    backend.close()
print(json.dumps(walls))
"""


def poll_walls(tree: Path, count: int) -> list[float]:
    """Each collect's wall ms over ``count`` GPUs, polls 0.5 s apart with a 2 s slow interval (5
    slow rounds in 10 s), the first poll (start-up) first: the code of ``tree``."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", POLL_TAIL, str(tree), str(count)], env=child_env(), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise BenchError(f"poll walls in {tree}: {done.stderr.strip()[-500:]}")
    walls: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return walls


def cost_part(out: Path, counts: list[int], seconds: float, baseline: Path | None) -> list[dict[str, Any]]:
    nvitop_ready = subprocess_ok([sys.executable, "-c", "import nvitop_exporter"])
    loads = [Process([sys.executable, str(ROOT / "bench" / "multi_gpu" / "multi_gpu.py"), "matmul", str(gpu)], out / f"matmul{gpu}.log") for gpu in range(max(counts))]
    rows: list[dict[str, Any]] = []
    try:
        time.sleep(8)
        for count in counts:
            row: dict[str, Any] = {"gpus": count, "collect_ms": poll_walls(ROOT, count)}
            if baseline is not None:
                row["baseline_collect_ms"] = poll_walls(baseline, count)
            port = free_port()
            row["ours_1s"] = measure([sys.executable, "-c", OURS, str(count), *daemon(port, "1s")[3:]], port, seconds, 20, out / f"ours_{count}.log", warmup=6)
            if nvitop_ready:
                port = free_port()
                row["nvitop_1s"] = measure([sys.executable, "-c", NVITOP, str(count), "--bind-address", "127.0.0.1", "--port", str(port), "--interval", "1"], port, seconds, 20, out / f"nvitop_{count}.log", warmup=6)
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        for load in loads:
            load.stop()
    return rows


def ddp_round(out: Path, name: str, gpus: int, seconds: float) -> float:
    """One torchrun ``ddp`` job on ``gpus`` GPUs: its ranks' mean steps/s."""
    command = [*launcher(), "--nproc-per-node", str(gpus), "--master-port", str(free_port()), __file__, "rank", str(out), name, f"{seconds:g}", "ddp"]
    with Process(command, out / f"{name}.log", env=child_env(CUDA_VISIBLE_DEVICES=",".join(map(str, range(gpus))))) as ranks:
        if ranks.process.wait(120 + seconds * 2) != 0:
            raise BenchError(f"{name}: the job failed (see {out}/{name}.log)")
    return statistics.fmean(json.loads((out / f"{name}_rank{rank}.json").read_text())[0]["steps_per_s"] for rank in range(gpus))


def scrape_like_prometheus(port: int, done: threading.Event, topology: list[str]) -> None:
    """Scrape every 15 s until ``done``; the first answer's topology series go into ``topology``."""
    while not done.is_set():
        with contextlib.suppress(OSError):
            body = scrape(port)[1]
            if not topology:
                topology.extend(line for line in body.decode().splitlines() if line.startswith(("gpueff_gpu_peer_info", "gpueff_gpu_peer_nvlinks")))
        done.wait(15)


def slowdown_part(out: Path, gpus: int, rounds: int, seconds: float) -> dict[str, Any]:
    port = free_port()
    steps: dict[str, list[float]] = {"without": [], "with": []}
    topology: list[str] = []
    for number in range(rounds):
        side = "with" if number % 2 else "without"
        if side == "without":
            steps[side].append(ddp_round(out, f"slowdown{number}_{side}", gpus, seconds))
            continue
        with Process(daemon(port, "1s"), out / f"slowdown{number}_daemon.log") as exporter:
            exporter.wait_port(port)
            done = threading.Event()
            scraper = threading.Thread(target=scrape_like_prometheus, args=(port, done, topology), daemon=True)
            scraper.start()
            steps[side].append(ddp_round(out, f"slowdown{number}_{side}", gpus, seconds))
            done.set()
    (out / "topology_exported.txt").write_text("\n".join(topology) + "\n")
    matrix = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=False).stdout
    (out / "topology_nvidia_smi.txt").write_text(matrix)
    without, with_daemon = statistics.median(steps["without"]), statistics.median(steps["with"])
    return {"gpus": gpus, "seconds": seconds, "steps_per_s": steps, "median_without": without, "median_with": with_daemon,
            "ratio_with_to_without": with_daemon / without, "topology_series": len(topology)}


def subprocess_ok(command: list[str]) -> bool:
    import subprocess

    return subprocess.run(command, env=child_env(), capture_output=True).returncode == 0


def report(summary: dict[str, Any]) -> str:
    """summary.json as Markdown: per job, phase and GPU, the classes, readings and the job's own truth."""
    lines = ["| layout | phase | GPU | classes (share of scrapes after the first 7 s) | util | SM | tensor | NVLink tx GB/s | job's truth | straggler (share) | lost |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
    for layout in summary.get("jobs", []):
        for job in layout["jobs"]:
            for phase in job["phases"]:
                truth = phase["truth"]
                own = ", ".join(f"{key} {truth[key]}" for key in ("busbw_gbps", "steps_per_s", "tflops") if key in truth)
                if any(truth.get("tflops_per_rank", [])):
                    own += " (per rank " + "/".join(f"{value:g}" for value in truth["tflops_per_rank"]) + ")"
                found = phase["job"]
                straggler = ", ".join(f"GPU {gpu} {share:.0%}" for gpu, share in found["straggler"].items()) or "none"
                lost = found["peer_wait_ratio_median"]
                for position, gpu in enumerate(phase["gpus"]):
                    classes = ", ".join(f"{name} {share:.0%}" for name, share in gpu["classes"].items())
                    nvlink = gpu.get("nvlink_tx_bytes_per_second")
                    cells = [f"{layout['layout']} {job['job'].rsplit('_', 1)[-1]}" if position == 0 else "", phase["phase"] if position == 0 else "", str(gpu["gpu"]), classes,
                             f"{gpu.get('gpu_utilization_ratio', 0):.2f}", f"{gpu.get('sm_active_ratio', 0):.2f}", f"{gpu.get('tensor_active_ratio', 0):.2f}",
                             "–" if nvlink is None else f"{nvlink / 1e9:.1f}", own if position == 0 else "", straggler if position == 0 else "",
                             ("–" if lost is None else f"{lost:.2f}") if position == 0 else ""]
                    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "report":
        print(report(json.loads(Path(sys.argv[2]).read_text())))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        out, job, seconds, phases = sys.argv[2:6]
        rank_main(Path(out), job, float(seconds), phases.split(","))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default="jobs,cost")
    parser.add_argument("--layouts", default="4,2x2", help=f"comma-separated, of {', '.join(LAYOUTS)}")
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--phase-seconds", type=float, default=16.0)
    parser.add_argument("--cost-gpus", default="1,2,4")
    parser.add_argument("--cost-seconds", type=float, default=15.0)
    parser.add_argument("--baseline", type=Path, help="another tree whose NVML backend's collect is timed beside this one's")
    parser.add_argument("--slowdown-gpus", type=int, default=2)
    parser.add_argument("--slowdown-rounds", type=int, default=4, help="alternating without and with the daemon, without first")
    args = parser.parse_args()
    os.environ.update(child_env())
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    try:
        results["gpus"] = gpu_count()
        results["started"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        if "jobs" in args.parts:
            results["jobs"] = jobs_part(args.out, args.layouts.split(","), args.phase_seconds, args.phases.split(","))
        if "cost" in args.parts:
            results["cost"] = cost_part(args.out, [int(each) for each in args.cost_gpus.split(",")], args.cost_seconds, args.baseline)
        if "slowdown" in args.parts:
            results["slowdown"] = slowdown_part(args.out, args.slowdown_gpus, args.slowdown_rounds, args.phase_seconds)
    except BenchError as error:
        print(f"multi_gpu_jobs.py: {error}", file=sys.stderr)
        return 2
    finally:
        (args.out / "summary.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
