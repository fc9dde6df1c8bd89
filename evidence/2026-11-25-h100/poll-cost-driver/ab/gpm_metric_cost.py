#!/usr/bin/env python3
"""What nvmlGpmMetricsGet costs by the metrics asked for, on a fresh sample pair each time (the
daemon's pattern): each GPM metric of the catalogue alone, the daemon's per-poll request on a full
GPU (every metric but GRAPHICS_UTIL), and all of them (its request on MIG devices). Thread CPU, median
of --repeat windows --gap seconds long; a second call on the same pair is shown beside it (the driver
caches part of the work, so timing a reused pair understates a poll's cost).

A one-off probe of issue 28 (round three), kept beside its result (gpm_metric_cost.txt). Run on a GPU
with some load: python evidence/2026-11-25-h100/poll-cost-driver/ab/gpm_metric_cost.py [--gpu 0] [--repeat 8] [--gap 0.15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # this probe lives beside its results, under evidence/

import pynvml  # noqa: E402

from gpueff.gpm_metrics import GPM_METRICS, GpmMetric  # noqa: E402


def timed(request: Any) -> float:
    started = time.thread_time_ns()
    pynvml.nvmlGpmMetricsGet(request)
    return (time.thread_time_ns() - started) / 1e3


def row(label: str, metrics: tuple[GpmMetric, ...], handle: Any, pair: list[Any], repeat: int, gap: float) -> None:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(metrics)
    for slot, metric in enumerate(metrics):
        request.metrics[slot].metricId = metric.metric_id
    fresh, again = [], []
    for _ in range(repeat):
        time.sleep(gap)
        pynvml.nvmlGpmSampleGet(handle, pair[1])
        request.sample1, request.sample2 = pair[0], pair[1]
        fresh.append(timed(request))
        again.append(timed(request))
        pair.reverse()
    print(f"| {label} | {len(metrics)} | {statistics.median(fresh):.1f} | {statistics.median(again):.1f} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--gap", type=float, default=0.15, help="seconds between the two samples of a window (GPM needs more than 0.1)")
    args = parser.parse_args()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    print(f"GPU {args.gpu}: {pynvml.nvmlDeviceGetName(handle)}, driver {pynvml.nvmlSystemGetDriverVersion()}, Python {sys.version.split()[0]}")
    pair = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
    pynvml.nvmlGpmSampleGet(handle, pair[0])
    print("| metrics | count | fresh pair, µs CPU p50 | same pair again, µs CPU p50 |\n| --- | ---: | ---: | ---: |")
    for metric in GPM_METRICS:
        row(metric.name, (metric,), handle, pair, args.repeat, args.gap)
    row("all but GRAPHICS_UTIL (a full GPU's poll)", tuple(m for m in GPM_METRICS if m.name != "GRAPHICS_UTIL"), handle, pair, args.repeat, args.gap)
    row("all (a MIG device's poll)", GPM_METRICS, handle, pair, args.repeat, args.gap)
    for sample in pair:
        pynvml.nvmlGpmSampleFree(sample)
    pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
