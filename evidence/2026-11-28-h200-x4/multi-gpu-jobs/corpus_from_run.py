#!/usr/bin/env python3
"""Turn a `bench/multi_gpu/multi_gpu_jobs.py` run (its --out folder) into the multi-GPU corpus: the recorded
traces of each job, one file per GPU, named and tagged by job, with each rank's own truth.

The 4-GPU layout's traces are kept as they are (job `4gpu_<phase>`); of the two 2-GPU jobs that ran
at once, GPUs 0-1 become job `2gpu_<phase>`. A recording's first samples taken while the job was
still starting (DDP builds its model and broadcasts it for about 5 s: utilization 0) are marked as
warm-up, so replay skips them. Phases left out unless named: the bare send/recv ring, whose
readings sat on the class and mismatch thresholds (see README.md); ../issue35-s2 added it once the
class rule covered it.

Run: python3 corpus_from_run.py RUN_DIR gpueff/traces/h200-jobs [PHASE,...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

LEFT_OUT = {"sendrecv"}
WHAT = {
    "allreduce": "NCCL all-reduce of 256 MiB bf16, back to back",
    "allreduce_overlap": "the same all-reduce while 4 bf16 8192^3 matmuls a step run on a side stream",
    "rs_ag": "reduce-scatter then all-gather of 256 MiB bf16 (FSDP/ZeRO's pattern)",
    "rs_ag_overlap": "the same with 4 bf16 matmuls a step on a side stream",
    "alltoall": "all-to-all of 256 MiB bf16 (expert parallel MoE's pattern)",
    "alltoall_overlap": "the same with 4 bf16 matmuls a step on a side stream",
    "sendrecv": "a ring of NCCL send/recv: 64 MiB bf16 to the next rank and from the previous, back to back",
    "sendrecv_overlap": "a ring of 64 MiB send/recv with 4 bf16 matmuls a step on a side stream",
    "pipeline": "pipeline stages: receive 8192x8192 bf16 activations from the previous rank, two matmuls, send them on",
    "ddp": "DistributedDataParallel training of a 4 x 8192 bf16 MLP, batch 2048, AdamW",
    "straggler": "data parallel: 4 bf16 8192^3 matmuls a step on every rank but the last, which does 12, then an all-reduce of 64 MiB",
}


def truth_of(ranks: list[list[dict[str, Any]]], phase: str, rank: int) -> dict[str, float]:
    entry = next(each for each in ranks[rank] if each["phase"] == phase)
    return {key: round(float(entry[key]), 2) for key in ("busbw_gbps", "tflops", "steps_per_s") if key in entry}


def warmup(samples: list[dict[str, Any]]) -> int:
    """The leading samples whose SM activity is under half the recording's last (the job still starting)."""
    last = samples[-1].get("SM_UTIL") or 0.0
    count = 0
    while count < len(samples) - 1 and (samples[count].get("SM_UTIL") or 0.0) < 0.5 * last:
        count += 1
    return count


def convert(run: Path, into: Path, phases: list[str]) -> list[Path]:
    into.mkdir(parents=True, exist_ok=True)
    written = []
    for layout, gpus, size in (("4", (0, 1, 2, 3), 4), ("2x2", (0, 1), 2)):
        ranks = [json.loads((run / f"{layout}gpu_job0_rank{rank}.json").read_text()) for rank in range(size)]
        for phase in phases:
            job = f"{size}gpu_{phase}"
            for rank, gpu in enumerate(gpus):
                trace = json.loads((run / f"{layout}gpu_{phase}_gpu{gpu}.json").read_text())
                trace.update(
                    workload=f"{job}_gpu{gpu}",
                    job=job,
                    description=f"{WHAT[phase]}; {size} x H200 (NVLink NV18 between every pair), one process per GPU under torchrun, rank {rank} of {size} on GPU {gpu}"
                    + ("; another 2-GPU job ran the same on GPUs 2-3 meanwhile" if size == 2 else ""),
                    truth=truth_of(ranks, phase, rank),
                    warmup_samples=warmup(trace["samples"]),
                )
                path = into / f"{job}_gpu{gpu}.json"
                head = {key: value for key, value in trace.items() if key != "samples"}
                lines = [json.dumps(sample, separators=(",", ":")) for sample in trace["samples"]]
                path.write_text(json.dumps(head, indent=1)[:-2] + ',\n "samples": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n", encoding="utf-8")
                written.append(path)
    return written


if __name__ == "__main__":
    named = sys.argv[3].split(",") if len(sys.argv) > 3 else [phase for phase in WHAT if phase not in LEFT_OUT]
    for written_path in convert(Path(sys.argv[1]), Path(sys.argv[2]), named):
        print(written_path)
