"""The live table of tools/live_corpus.sh: one row per job from the LIVE summary lines of its
corpus logs (the daemon's poller beside the job), as Markdown.

    python3 tools/live_corpus_table.py OUTDIR > OUTDIR/live.md

Columns: the classes the daemon reported (polls each), the means over the polls after the first of
utilization, SM activity, occupancy, tensor and DRAM activity, the mismatch rules that fired (polls),
and each figure beside the job's own count with their ratio: the busy FLOP/s (the upper bound), the
point estimate (gpueff_estimated_flops_per_second; "withheld" where the counters support none; INT8
ops/s for the INT8 GEMM, whose count is in ops) and the DRAM bytes/s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def summaries(folder: Path) -> list[dict[str, Any]]:
    found = []
    for log in sorted(folder.glob("corpus-*.log")):
        for line in log.read_text().splitlines():
            _, marker, rest = line.partition("LIVE ")
            if marker:
                found.append(json.loads(rest))
    return found


def figure(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def versus(value: float | None, truth: float | None, unit: str) -> str:
    """A figure beside the job's own count, with their ratio: "742.2 vs 664.1 TFLOP/s (1.12x)"."""
    if value is None:
        return "withheld" if truth else "–"
    if not truth:
        return f"{figure(value, 1)} {unit}"
    return f"{figure(value, 1)} vs {figure(truth, 1)} {unit} ({value / truth:.2f}x)"


def row(job: dict[str, Any]) -> str:
    classes = ", ".join(f"`{name}` {count}" for name, count in sorted(job["classes"].items(), key=lambda item: -item[1]))
    mismatch = ", ".join(f"{rule} {count}" for rule, count in sorted(job.get("mismatch_polls", {}).items())) or "–"
    ops = "tops" in job.get("truth_keys", [])
    busy = job.get("imma_int8_t") if ops else job.get("tflops")
    estimate = job.get("estimated_int8_t") if ops else job.get("estimated_t")
    unit = "TOP/s" if ops else "TFLOP/s"
    truth = job.get("truth_tflops")
    polls = f" ({job['estimate_polls']}/{job['polls'] - 1} polls)" if estimate is not None and "estimate_polls" in job else ""
    memory = f"{figure(job.get('tbps'), 3)} vs {figure(job.get('truth_tbps'), 3)}" if job.get("truth_tbps") else figure(job.get("tbps"), 3)
    extra = ", ".join(f"{key} {job[key]}" for key in ("steps_per_s", "images_per_s", "tokens_per_s") if key in job)
    cells = [job["workload"], classes, figure(job.get("util")), figure(job.get("sm")), figure(job.get("occupancy")), figure(job.get("tensor")), figure(job.get("dram")), mismatch,
             versus(busy, truth, unit), versus(estimate, truth, unit) + polls if "estimated_t" in job else "–", memory, extra]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    folder = Path(sys.argv[1])
    print("| job | class (polls) | util | SM | occupancy | tensor | DRAM | mismatch (polls) | busy (upper bound) vs the job's own count | estimate vs the job's own count | DRAM TB/s estimate vs count | the job's own rate |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for job in summaries(folder):
        print(row(job))
    return 0


if __name__ == "__main__":
    sys.exit(main())
