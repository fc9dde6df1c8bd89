#!/usr/bin/env python3
"""Add the bare send/recv ring of a `bench/multi_gpu_jobs.py --phases sendrecv,...` run (its --out
folder) to the multi-GPU corpus: one trace per GPU, named and tagged by job, with each rank's own
truth, as ../issue35/corpus_from_run.py did for the other phases (which left this one out).

Layout `4` gives job `4gpu_sendrecv` (GPUs 0-3); of the two 2-GPU jobs that ran at once, GPUs 0-1
give job `2gpu_sendrecv`. Leading samples taken while the job was still starting are marked warm-up.

Run: python3 corpus_from_run.py RUN_DIR exporter/traces/h200-jobs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PHASE = "sendrecv"
WHAT = "a ring of NCCL send/recv: 64 MiB bf16 to the next rank and from the previous, back to back"


def truth_of(ranks: list[list[dict[str, Any]]], rank: int) -> dict[str, float]:
    entry = next(each for each in ranks[rank] if each["phase"] == PHASE)
    return {key: round(float(entry[key]), 2) for key in ("busbw_gbps", "steps_per_s") if key in entry}


def warmup(samples: list[dict[str, Any]]) -> int:
    """The leading samples whose SM activity is under half the recording's last (the job still starting)."""
    last = samples[-1].get("SM_UTIL") or 0.0
    count = 0
    while count < len(samples) - 1 and (samples[count].get("SM_UTIL") or 0.0) < 0.5 * last:
        count += 1
    return count


def convert(run: Path, into: Path) -> list[Path]:
    written = []
    for layout, gpus, size in (("4", (0, 1, 2, 3), 4), ("2x2", (0, 1), 2)):
        ranks = [json.loads((run / f"{layout}gpu_job0_rank{rank}.json").read_text()) for rank in range(size)]
        job = f"{size}gpu_{PHASE}"
        for rank, gpu in enumerate(gpus):
            trace = json.loads((run / f"{layout}gpu_{PHASE}_gpu{gpu}.json").read_text())
            trace.update(
                workload=f"{job}_gpu{gpu}",
                job=job,
                description=f"{WHAT}; {size} x H200 (NVLink NV18 between every pair), one process per GPU under torchrun, rank {rank} of {size} on GPU {gpu}"
                + ("; another 2-GPU job ran the same on GPUs 2-3 meanwhile" if size == 2 else ""),
                truth=truth_of(ranks, rank),
                warmup_samples=warmup(trace["samples"]),
            )
            path = into / f"{job}_gpu{gpu}.json"
            head = {key: value for key, value in trace.items() if key != "samples"}
            lines = [json.dumps(sample, separators=(",", ":")) for sample in trace["samples"]]
            path.write_text(json.dumps(head, indent=1)[:-2] + ',\n "samples": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n", encoding="utf-8")
            written.append(path)
    return written


if __name__ == "__main__":
    for written_path in convert(Path(sys.argv[1]), Path(sys.argv[2])):
        print(written_path)
