#!/usr/bin/env python3
"""Where the daemon's CPU goes on a real GPU: process CPU with the backend open but not polled
(the Xid event thread and the baseline), then N polls at the collect interval under cProfile,
split into NVML calls and the daemon's own Python, and the RSS after each import stage.

Run: python bench/poll/profile_poll.py [--polls 30] [--interval 1]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=30)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    print(f"RSS at start: {rss_mb():.1f} MB")
    import pynvml  # noqa: F401

    print(f"RSS after import pynvml: {rss_mb():.1f} MB")
    from gpueff.commands import daemon  # noqa: F401  (everything the daemon imports at start)

    print(f"RSS after import gpueff.commands.daemon: {rss_mb():.1f} MB")
    from gpueff.backends.nvml.backend import NvmlBackend
    from gpueff.pipeline.derive import derive

    backend = NvmlBackend()
    backend.start()
    print(f"RSS after NVML init: {rss_mb():.1f} MB")
    idle_started, cpu_started = time.monotonic(), time.process_time()
    time.sleep(10)
    idle_cpu = time.process_time() - cpu_started
    print(f"CPU with NVML open, no polls (Xid thread + baseline): {idle_cpu / (time.monotonic() - idle_started) * 60:.4f} s/min")
    profiler = cProfile.Profile()
    cpu_started, wall_started = time.process_time(), time.monotonic()
    for _ in range(args.polls):
        tick = time.monotonic()
        profiler.enable()
        for sample in backend.collect():
            derive(sample)
        profiler.disable()
        time.sleep(max(0.0, args.interval - (time.monotonic() - tick)))
    cpu = time.process_time() - cpu_started
    wall = time.monotonic() - wall_started
    print(f"CPU over {args.polls} polls: {cpu / wall * 60:.4f} s/min ({cpu / args.polls * 1000:.3f} ms per poll)")
    print(f"RSS after polls: {rss_mb():.1f} MB")
    stats = pstats.Stats(profiler)
    entries = stats.stats  # type: ignore[attr-defined]  # pstats keeps them there; typeshed does not say so
    nvml_time = sum(entry[2] for key, entry in entries.items() if "pynvml" in key[0] or key[0] == "~")
    print(f"time inside pynvml and C calls: {nvml_time / args.polls * 1000:.3f} ms per poll")
    stats.sort_stats("tottime").print_stats(25)
    backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
