#!/usr/bin/env python3
"""What the NVLink error readings cost per GPU on this machine, and what they read.

For each GPU with NVLink: the NVML backend's three NVLink readers (gpueff/backends/nvml/health.py:
the error totals, the link states, the per-link error counters in one field-values call), each the
median and maximum of --repeat calls in ms, with what they return; beside them the per-link
alternative the docs set aside, nvmlDeviceGetNvLinkErrorCounter for every active link and each of
its counters (CRC flit, CRC data, replay, recovery, ECC data), timed once, with its counts.

Run: python bench/nvml/nvlink_errors_cost.py [--repeat 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pynvml  # noqa: E402

from gpueff.backends.nvml import health  # noqa: E402

COUNTERS = {"crc_flit": "NVML_NVLINK_ERROR_DL_CRC_FLIT", "crc_data": "NVML_NVLINK_ERROR_DL_CRC_DATA", "replay": "NVML_NVLINK_ERROR_DL_REPLAY",
            "recovery": "NVML_NVLINK_ERROR_DL_RECOVERY", "ecc_data": "NVML_NVLINK_ERROR_DL_ECC_DATA"}


def timed(call: Callable[[], Any], repeat: int) -> dict[str, Any]:
    walls, answer = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        try:
            answer = call()
        except pynvml.NVMLError as error:
            answer = f"NVMLError: {error}"
        walls.append((time.perf_counter() - started) * 1000)
    return {"median_ms": round(statistics.median(walls), 3), "max_ms": round(max(walls), 3), "answer": answer}


def per_link_calls(handle: Any, links: list[int]) -> dict[str, Any]:
    counts: dict[str, list[int | str]] = {}
    started = time.perf_counter()
    for kind, constant in COUNTERS.items():
        row: list[int | str] = []
        for link in links:
            try:
                row.append(int(pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, getattr(pynvml, constant))))
            except pynvml.NVMLError as error:
                row.append(str(error))
        counts[kind] = row
    return {"calls": len(links) * len(COUNTERS), "ms": round((time.perf_counter() - started) * 1000, 2), "counts_by_link": counts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pynvml.nvmlInit()
    report: dict[str, Any] = {"driver": pynvml.nvmlSystemGetDriverVersion(), "gpus": []}
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu: dict[str, Any] = {"gpu": index, "name": pynvml.nvmlDeviceGetName(handle)}
            readers: dict[str, health.Reader] = {"totals": health._nvlink_errors, "states": health._nvlink_states, "per_link": health._nvlink_link_errors}
            for name, reader in readers.items():
                gpu[name] = timed(partial(reader, pynvml, handle), args.repeat)
            states = gpu["states"]["answer"]
            if isinstance(states, dict):
                gpu["per_link_calls"] = per_link_calls(handle, [link for link, up in states["nvlink_links_active"] if up])
            report["gpus"].append(gpu)
    finally:
        pynvml.nvmlShutdown()
    text = json.dumps(report, default=str)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
