"""A recording whose profiling counters froze at 0 while the GPU stayed busy, as DCGM issue 303 shows
(after an Xid 31, on Turing: DCGM_FI_DEV_GPU_UTIL 100, every DCGM_FI_PROF_* field 0 until the host
engine restarts): the recorded bf16 matmul with every GPM reading, links included, set to 0."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from repo import ROOT

from gpueff.gpm_metrics import GPM_METRICS
from gpueff.trace import Trace, load_trace, parse_trace

MATMUL = ROOT / "gpueff" / "traces" / "h200" / "matmul_8192.json"


def frozen_data() -> dict:
    trace = load_trace(MATMUL)
    samples = copy.deepcopy(trace.samples)
    for record in samples:
        record.update({metric.name: 0.0 for metric in GPM_METRICS if record.get(metric.name) is not None})
        record.pop("health", None)
    return {"format": "gpu-trace/1", "gpu": trace.gpu, "workload": "matmul_8192_profiling_frozen", "description": "the bf16 matmul with its profiling counters frozen at 0",
            "truth": {}, "interval_s": trace.interval_s, "samples": samples, "warmup_samples": trace.warmup_samples}


def frozen_trace() -> Trace:
    return parse_trace(frozen_data(), "matmul_8192_profiling_frozen")


def frozen_trace_file(folder: Path) -> Path:
    path = folder / "matmul_8192_profiling_frozen.json"
    path.write_text(json.dumps(frozen_data()))
    return path
