"""Instructions one poll costs on the zero-cost fake NVML, counted by valgrind: deterministic on a busy machine.

The poller, the NVML backend on tests/support/fakes/nvml.py and the payloads run in one process on a fake
clock, with a gzip scrape every ``--scrape-every`` fake seconds (after four scrapes, so the render
skipping knows their cadence), under ``valgrind --tool=cachegrind --cache-sim=no`` for N and for 2N
polls: the difference over N is one poll. The fake's own Python is counted the same way, by replaying
the NVML calls of those polls (each at its recorded fake time) once and twice, and subtracted: what
is left is the daemon's own Python. With ``--baseline TREE`` the same for that tree (a checkout of
the project). Prints figures; asserts nothing. Needs valgrind (Debian: apt-get install valgrind).

    python bench/poll/poll_instructions.py [--baseline TREE] [--gpus 1 8] [--interval 0.1] [--polls 150]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def child(tree: str, gpus: int, interval: float, polls: int, scrape_every: float, replays: int) -> None:
    """Run ``polls`` polls after the warm-up; with ``replays`` > 0, replay their NVML calls that often instead."""
    sys.path[:0] = [tree, str(Path(tree) / "tests" / "support")]
    from fakes.nvml import FakeClock, FakeNvml

    from gpueff.backends.nvml.backend import NvmlBackend
    from gpueff.poller import Poller
    from gpueff.settings import load_config
    from gpueff.trace import load_trace, planted_trace_paths
    from gpueff.web.history import History
    from gpueff.web.payload import Payloads

    traces = [load_trace(path) for path in planted_trace_paths()]
    clock = FakeClock(start=1.7e9)  # the fake dates the driver's samples on it: the backend's wall clock too
    fake = FakeNvml([traces[index % len(traces)] for index in range(gpus)], clock=clock, event_wait_cap=0.5)
    backend = NvmlBackend(nvml=fake, clock=clock, wall_clock=clock)
    poller = Poller(backend, dataclasses.replace(load_config(None), collect_interval=interval), clock=clock, wall_clock=clock)
    payloads, history = Payloads(clock), History(wall_clock=clock)
    poller.subscribe(payloads.publish)
    poller.subscribe(history.add)
    backend.start()  # the poller is not started: this thread polls
    next_scrape = clock() + interval / 2

    def poll(count: int) -> None:
        nonlocal next_scrape
        for _ in range(count):
            poller.poll_once()
            clock.advance(interval)
            if clock() >= next_scrape:
                payloads.payload(gzip=True)
                next_scrape += scrape_every

    poll(round(4 * scrape_every / interval))
    if not replays:
        poll(polls)
        return
    calls: list[tuple[float, Callable[..., Any], tuple[Any, ...]]] = []
    originals = {name: getattr(fake, name) for name in dir(FakeNvml) if getattr(getattr(FakeNvml, name), "fake_api", False) and name != "nvmlEventSetWait"}

    def recorded(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            calls.append((clock(), method, args))
            return method(*args)

        return call

    for name, method in originals.items():
        setattr(fake, name, recorded(method))
    poll(polls)
    for name, method in originals.items():
        setattr(fake, name, method)
    for _ in range(replays):
        for at, method, args in calls:
            clock.now = at
            try:
                method(*args)
            except Exception:  # noqa: S112 (the calls raise what they raised when recorded: NOT_FOUND and the like)
                continue


def instructions(tree: Path, gpus: int, interval: float, polls: int, scrape_every: float, replays: int) -> int:
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", sys.executable, __file__, "--child", str(tree), str(gpus), str(interval), str(polls), str(scrape_every), str(replays)]
    result = subprocess.run(command, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    found = REFS.search(result.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind: {result.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def per_poll(tree: Path, gpus: int, interval: float, polls: int, scrape_every: float) -> tuple[float, float]:
    """(instructions per poll, of which the fake pynvml's)."""
    total = (instructions(tree, gpus, interval, 2 * polls, scrape_every, 0) - instructions(tree, gpus, interval, polls, scrape_every, 0)) / polls
    fake = (instructions(tree, gpus, interval, polls, scrape_every, 2) - instructions(tree, gpus, interval, polls, scrape_every, 1)) / polls
    return total, fake


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        tree, gpus, interval, polls, scrape_every, replays = sys.argv[2:8]
        child(tree, int(gpus), float(interval), int(polls), float(scrape_every), int(replays))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="another checkout of the project, measured the same way")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--interval", type=float, default=0.1, help="collect interval in (fake) seconds (default 0.1)")
    parser.add_argument("--polls", type=int, default=150, help="N: polls counted (default 150)")
    parser.add_argument("--scrape-every", type=float, default=15.0)
    args = parser.parse_args()
    trees: list[tuple[str, Path]] = [("this", ROOT)] + ([("baseline", Path(args.baseline).resolve())] if args.baseline else [])
    print("| tree | GPUs | interval | instructions per poll | the fake pynvml's | the daemon's own |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    for gpus in args.gpus:
        for label, checkout in trees:
            total, fake = per_poll(checkout, gpus, args.interval, args.polls, args.scrape_every)
            print(f"| {label} | {gpus} | {args.interval:g} s | {total / 1e6:.3f} M | {fake / 1e6:.3f} M | {(total - fake) / 1e6:.3f} M |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
