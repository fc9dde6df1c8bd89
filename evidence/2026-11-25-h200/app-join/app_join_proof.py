#!/usr/bin/env python3
"""Issue 11 item 6: the app join on the real runtime. A real PyTorch process runs bf16 matmuls on a
GPU and counts them itself in a prometheus-client Counter on a loopback port; the daemon (NVML
backend) joins it through ``apps:``. After a warm-up the script samples both for ``--seconds`` and
prints the daemon's gpueff_app_* figures next to the process's own count and rate, as Markdown
(also written to ``--out``/app_join.md, with the daemon's log beside it).

Run on a machine with an NVIDIA GPU, PyTorch, prometheus-client, pyyaml and nvidia-ml-py:

    PYTHONPATH=. python3 evidence/2026-11-25-h200/app-join/app_join_proof.py --out /tmp/proof [--gpu 0] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]  # this proof lives beside its results, under evidence/
sys.path.insert(0, str(ROOT / "bench"))
from harness import free_port  # noqa: E402

N = 8192  # matmul size: 2 * N^3 FLOP per matmul
BATCH = 20  # matmuls between two device syncs: the counter counts only finished work
PRICE_PER_GPU_HOUR = 2.5  # an example price, to show the cost figure
APP_SERIES = (
    "gpueff_app_up",
    "gpueff_app_units_total",
    "gpueff_app_throughput_per_second",
    "gpueff_app_units_per_joule",
    "gpueff_app_units_per_sm_active_second",
    "gpueff_app_model_flops_utilization_ratio",
    "gpueff_app_cost_per_million_units",
    "gpueff_app_scrape_errors_total",
)



def get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return str(response.read().decode())


def worker(port: int, gpu: int, seconds: float, stats: str) -> None:
    """The app: counts its own finished matmuls, serves them on 127.0.0.1:port, writes its totals."""
    import torch
    from prometheus_client import Counter, start_http_server

    matmuls = Counter("bench_matmuls", f"bf16 {N}x{N} matmuls finished (counted after a device sync).")
    start_http_server(port, addr="127.0.0.1")
    device = torch.device("cuda", gpu)
    a = torch.randn(N, N, device=device, dtype=torch.bfloat16)
    b = torch.randn(N, N, device=device, dtype=torch.bfloat16)
    c = torch.empty(N, N, device=device, dtype=torch.bfloat16)
    for _ in range(5):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize(device)
    started = time.monotonic()
    done = 0
    while time.monotonic() - started < seconds:
        for _ in range(BATCH):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize(device)
        matmuls.inc(BATCH)
        done += BATCH
    elapsed = time.monotonic() - started
    Path(stats).write_text(json.dumps({"matmuls": done, "seconds": elapsed, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(device)}))


def metrics(text: str, gpu: int) -> dict[str, float | str]:
    """The app's series, GPU power and SM activity of ``gpu``, and its model and driver."""
    found: dict[str, float | str] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        app_series = name in APP_SERIES and 'app="torch-matmul"' in line
        if app_series or (name in ("gpueff_power_watts", "gpueff_sm_active_ratio") and f'gpu="{gpu}"' in line):
            found[name] = float(line.rsplit(" ", 1)[1])
        elif name == "gpueff_gpu_info" and f'gpu="{gpu}"' in line:
            found["model"] = re.search(r'model="([^"]*)"', line).group(1)  # type: ignore[union-attr]
            found["driver"] = re.search(r'driver="([^"]*)"', line).group(1)  # type: ignore[union-attr]
    return found


def own_count(port: int) -> float:
    match = re.search(r"^bench_matmuls_total (\S+)$", get(f"http://127.0.0.1:{port}/metrics"), re.M)
    assert match, "the app does not expose bench_matmuls_total"
    return float(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window (default 60)")
    parser.add_argument("--warmup", type=float, default=12.0, help="seconds before the window (default 12)")
    parser.add_argument("--out", default=".", help="folder for app_join.md, daemon.log and samples.json")
    parser.add_argument("--worker", nargs=3, metavar=("PORT", "SECONDS", "STATS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(int(args.worker[0]), args.gpu, float(args.worker[1]), args.worker[2])
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    app_port, daemon_port = free_port(), free_port()
    stats = out / "worker.json"
    flops_per_unit = 2 * N**3
    run_for = args.warmup + args.seconds + 15
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    app = subprocess.Popen([sys.executable, __file__, "--gpu", str(args.gpu), "--worker", str(app_port), str(run_for), str(stats)], env=env)
    config = out / "gpueff.yml"
    config.write_text(
        f"price_per_gpu_hour: {PRICE_PER_GPU_HOUR}\n"
        "apps:\n"
        f"  - name: torch-matmul\n    url: http://127.0.0.1:{app_port}/metrics\n    counter: bench_matmuls_total\n"
        f"    unit: matmuls\n    gpus: [{args.gpu}]\n    flops_per_unit: {flops_per_unit}\n    scrape_interval: 1s  # scrape_timeout: the default, min(2s, 1s)\n"
    )
    log = (out / "daemon.log").open("w")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "gpueff", "--backend", "nvml", "--config", str(config), "--collect-interval", "1s", "--web.listen-address", f"127.0.0.1:{daemon_port}"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    samples: list[dict[str, float | str]] = []
    try:
        deadline = time.monotonic() + 60
        while True:  # the app answers and the daemon is ready
            try:
                own_count(app_port)
                if urllib.request.urlopen(f"http://127.0.0.1:{daemon_port}/-/ready", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or app.poll() is not None or daemon.poll() is not None:
                raise SystemExit(f"did not start: app {app.poll()}, daemon {daemon.poll()}; see {out / 'daemon.log'}")
            time.sleep(0.5)
        time.sleep(args.warmup)
        started = time.monotonic()
        while True:
            now = time.monotonic()
            sample = metrics(get(f"http://127.0.0.1:{daemon_port}/metrics"), args.gpu)
            sample["own_count"] = own_count(app_port)
            sample["t"] = now - started
            samples.append(sample)
            if now - started >= args.seconds:
                break
            time.sleep(5.0)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(15)
        log.close()
        app.wait(run_for + 30)
    (out / "samples.json").write_text(json.dumps(samples, indent=1))
    report = summary(samples, json.loads(stats.read_text()) if stats.exists() else {}, flops_per_unit, out)
    print(report)
    (out / "app_join.md").write_text(report)
    return 0


def summary(samples: list[dict[str, float | str]], own: dict[str, Any], flops_per_unit: float, out: Path) -> str:
    first, last = samples[0], samples[-1]
    window = float(last["t"]) - float(first["t"])
    own_delta = float(last["own_count"]) - float(first["own_count"])
    own_rate = own_delta / window
    joined_delta = float(last["gpueff_app_units_total"]) - float(first["gpueff_app_units_total"])
    up = [s.get("gpueff_app_up") for s in samples]
    throughput = [float(s["gpueff_app_throughput_per_second"]) for s in samples if "gpueff_app_throughput_per_second" in s]
    mean = lambda key: sum(float(s[key]) for s in samples if key in s) / max(1, sum(key in s for s in samples))  # noqa: E731
    power = mean("gpueff_power_watts")
    mfu = mean("gpueff_app_model_flops_utilization_ratio")
    peak = mean("gpueff_app_throughput_per_second") * flops_per_unit / mfu if mfu else float("nan")
    log = (out / "daemon.log").read_text()
    problems = [line for line in log.splitlines() if "level=warn" in line or "level=error" in line]
    rows = [
        ("gpueff_app_up (every sample)", " ".join(str(int(v)) if v is not None else "–" for v in up), "the app answered every scrape"),
        ("work over the window (matmuls)", f"{joined_delta:.0f} (Δ gpueff_app_units_total)", f"{own_delta:.0f} (Δ of its own counter)"),
        ("rate (matmuls/s)", f"{sum(throughput) / len(throughput):.1f} mean of gpueff_app_throughput_per_second ({min(throughput):.1f}–{max(throughput):.1f})", f"{own_rate:.1f}"),
        ("TFLOP/s", f"{mean('gpueff_app_throughput_per_second') * flops_per_unit / 1e12:.0f}", f"{own_rate * flops_per_unit / 1e12:.0f}"),
        ("model FLOPs utilization", f"{mfu:.3f} (peak used: {peak / 1e12:.1f} TFLOP/s bf16 dense)", f"{own_rate * flops_per_unit / peak:.3f} against the same peak"),
        ("matmuls per joule", f"{mean('gpueff_app_units_per_joule'):.3f}", f"{own_rate / power:.3f} = own rate / mean gpueff_power_watts ({power:.0f} W)"),
        ("matmuls per SM-active second", f"{mean('gpueff_app_units_per_sm_active_second'):.1f}", f"{own_rate / mean('gpueff_sm_active_ratio'):.1f} = own rate / mean SM activity ({mean('gpueff_sm_active_ratio'):.3f})"),
        (f"cost per million matmuls (at {PRICE_PER_GPU_HOUR} USD/GPU-hour)", f"{mean('gpueff_app_cost_per_million_units'):.3f} USD", f"{PRICE_PER_GPU_HOUR / 3600 / own_rate * 1e6:.3f} USD"),
        ("scrape errors (gpueff_app_scrape_errors_total)", f"{float(last.get('gpueff_app_scrape_errors_total', float('nan'))):.0f}", ""),
    ]
    lines = [
        "# The app join on a real GPU",
        "",
        f"{last.get('model', '?')}, driver {last.get('driver', '?')}, Python {platform.python_version()}, PyTorch {own.get('torch', '?')}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Script: `evidence/2026-11-25-h200/app-join/app_join_proof.py` (issue 11 item 6).",
        "",
        f"A PyTorch process ran bf16 {N}x{N} matmuls on GPU 0 and counted each batch of {BATCH} after a device sync in a",
        "prometheus-client Counter (`bench_matmuls_total`) on a loopback port. The daemon (NVML backend, 1 s polls) joined it with",
        f"`apps:` (`scrape_interval: 1s`, so `scrape_timeout` took its default of 1s; `flops_per_unit: {flops_per_unit}`;",
        f"`price_per_gpu_hour: {PRICE_PER_GPU_HOUR}`, an example price). Both were sampled every 5 s over {window:.0f} s after a warm-up.",
        "",
        "| figure | the daemon (`gpueff_app_*`) | the process's own |",
        "| --- | --- | --- |",
        *[f"| {name} | {joined} | {own_figure} |" for name, joined, own_figure in rows],
        "",
        f"The process's own totals: {own.get('matmuls', '?')} matmuls in {float(own.get('seconds', 0)):.1f} s "
        f"({float(own.get('matmuls', 0)) / max(float(own.get('seconds', 1)), 1e-9):.1f}/s over its whole run, warm-up included).",
        "",
        f"Daemon log: {len(log.splitlines())} lines, {len(problems)} at warn or error" + (":" if problems else "."),
        *[f"    {line}" for line in problems[:10]],
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
