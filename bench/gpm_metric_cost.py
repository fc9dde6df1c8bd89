#!/usr/bin/env python3
"""Does nvmlGpmMetricsGet cost grow with the number of metrics asked for? Times the call with 1, 4,
8, 12 and 16 of the daemon's GPM metrics (median of --repeat calls on one sample pair).

Run: python bench/gpm_metric_cost.py [--gpu 0] [--repeat 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pynvml  # noqa: E402

from exporter.backends.nvml.gpm_metrics import GPM_METRICS  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(handle, first)
    time.sleep(0.2)
    pynvml.nvmlGpmSampleGet(handle, second)
    print("| metrics asked for | nvmlGpmMetricsGet median ms |\n| ---: | ---: |")
    for count in (1, 2, 4, 8, 12, 16):
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = count
        request.sample1, request.sample2 = first, second
        for slot, metric in enumerate(GPM_METRICS[:count]):
            request.metrics[slot].metricId = metric.metric_id
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            pynvml.nvmlGpmMetricsGet(request)
            times.append(time.perf_counter() - started)
        print(f"| {count} ({', '.join(m.name for m in GPM_METRICS[:count]) if count <= 2 else '...'}) | {statistics.median(times) * 1000:.3f} |")
    pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
