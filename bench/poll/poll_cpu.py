"""CPU the daemon spends per GPU per poll with the NVML backend on the fake pynvml (calls cost 0).

1. In process, on a fake clock 1 s per poll: thread CPU time of the backend's collect (NVML backend
   plus the fake's own Python, which a second run measures alone), of derivations + snapshot, and
   of rendering the exposition text, per GPU per poll, and the total as % of one core at 1 s.
2. The wall time of a poll when each fake call sleeps its H100 cost (what keeps the poller busy).
3. The real daemon process (tools/fake_nvml_daemon.py) left to poll for ~20 s at 1 s: its process
   CPU time (all threads: poller, HTTP server, Xid watcher) from /proc, as % of one core, and RSS.

Prints figures; asserts nothing.

    python bench/poll/poll_cpu.py [--polls 300] [--seconds 20] [--gpus 1 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import ROOT, daemon, trace_files

sys.path.insert(0, str(ROOT / "tests" / "support"))

from fakes.nvml import H100_CALL_COSTS, FakeClock, FakeNvml  # noqa: E402 (needs the path above)

from gpueff.backends.nvml.backend import NvmlBackend  # noqa: E402
from gpueff.poller import Poller  # noqa: E402
from gpueff.sample import GpuSample  # noqa: E402
from gpueff.settings import load_config  # noqa: E402
from gpueff.trace import load_trace  # noqa: E402
from gpueff.web.payload import Payloads  # noqa: E402


def fake_alone(gpus: int, polls: int = 300) -> dict:
    """Thread CPU per GPU per poll of the fake pynvml alone: one poll's NVML calls, recorded, then
    replayed on the fake ``polls`` times without the backend around them."""
    clock = FakeClock()
    fake = FakeNvml([load_trace(path) for path in trace_files(gpus)], clock=clock, event_wait_cap=0.5)
    backend = NvmlBackend(slow_interval=10.0, nvml=fake, clock=clock)
    backend.start()
    backend.collect()
    clock.advance(1.0)
    calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def recorded(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            calls.append((method, args))
            return method(*args)

        return call

    for name in dir(FakeNvml):
        if getattr(getattr(FakeNvml, name), "fake_api", False) and name != "nvmlEventSetWait":
            setattr(fake, name, recorded(getattr(fake, name)))
    backend.collect()  # a poll without the slow calls, as most are
    try:
        started = time.thread_time()
        for _ in range(polls):
            clock.advance(1.0)
            for method, args in calls:
                method(*args)
        spent = time.thread_time() - started
    finally:
        backend.close()
    return {"gpus": gpus, "fake": spent / polls / gpus}


def in_process(gpus: int, polls: int = 300) -> dict:
    """Median thread CPU per GPU per poll, in seconds, of each stage."""
    clock = FakeClock()
    fake = FakeNvml([load_trace(path) for path in trace_files(gpus)], clock=clock, event_wait_cap=0.5)
    backend = NvmlBackend(slow_interval=10.0, nvml=fake, clock=clock)
    poller = Poller(backend, load_config(None), clock=clock)
    exposition = Payloads(clock)
    poller.subscribe(exposition.publish)  # as the daemon: each poll's body rendered on the poller's thread
    collect_times: list[float] = []
    collect = backend.collect

    def timed_collect() -> list[GpuSample]:
        started = time.thread_time()
        samples = collect()
        collect_times.append(time.thread_time() - started)
        return samples

    backend.collect = timed_collect  # type: ignore[method-assign]  # times each collect in place
    backend.start()
    stages: dict[str, list[float]] = {"collect": [], "derive": [], "render": [], "total": []}
    try:
        for number in range(polls + 20):
            started = time.thread_time()
            poller.poll_once()
            polled = time.thread_time()
            exposition.body()
            rendered = time.thread_time()
            clock.advance(1.0)
            if number >= 20:  # the first polls warm caches and prime GPM
                stages["collect"].append(collect_times[-1])
                stages["derive"].append(polled - started - collect_times[-1])
                stages["render"].append(rendered - polled)
                stages["total"].append(rendered - started)
    finally:
        backend.close()
    calls_per_poll = sum(fake.calls.values()) / (polls + 20) / gpus
    return {"gpus": gpus, "calls_per_gpu_per_poll": calls_per_poll, **{stage: statistics.median(values) / gpus for stage, values in stages.items()}}


def poll_wall(gpus: int, polls: int = 30) -> dict:
    """Wall time of one collect when every fake call sleeps what it costs on an H100 (docs/gpu-facts.md):
    how long a poll keeps the poller thread busy. Fake time 1 s per poll, so every 10th is slow."""
    clock = FakeClock()
    fake = FakeNvml([load_trace(path) for path in trace_files(gpus)], clock=clock, call_cost=H100_CALL_COSTS, event_wait_cap=0.5)
    backend = NvmlBackend(slow_interval=10.0, nvml=fake, clock=clock)
    backend.start()
    walls = []
    try:
        for _ in range(polls):
            started = time.perf_counter()
            backend.collect()
            walls.append(time.perf_counter() - started)
            clock.advance(1.0)
    finally:
        backend.close()
    return {"gpus": gpus, "wall_p50": statistics.median(walls[1:]), "wall_max": max(walls[1:])}


def daemon_process(gpus: int, seconds: float = 20.0) -> dict:
    """Process CPU of the real daemon on the fake NVML over ``seconds`` at a 1 s interval."""
    command = [sys.executable, str(ROOT / "tools" / "fake_nvml_daemon.py"), str(gpus), "--collect-interval", "1s"]
    with daemon(command) as running:
        time.sleep(3.0)  # warm-up: imports settle, GPM primed
        running.get()
        cpu_before, wall_before = running.cpu_seconds(), time.monotonic()
        time.sleep(seconds)
        cpu, wall = running.cpu_seconds() - cpu_before, time.monotonic() - wall_before
        return {"gpus": gpus, "seconds": wall, "cpu_seconds": cpu, "core_percent": 100 * cpu / wall, "rss_bytes": running.rss_bytes()}


def report_in_process(result: dict) -> None:
    us = {stage: result[stage] * 1e6 for stage in ("collect", "fake", "derive", "render", "total")}
    print(
        f"{result['gpus']} GPU(s), per GPU per poll: collect {us['collect']:.0f} us (NVML backend + fake, {result['calls_per_gpu_per_poll']:.1f} calls; the fake alone {us['fake']:.0f} us), "
        f"derive {us['derive']:.0f} us, render {us['render']:.0f} us, total {us['total']:.0f} us = {result['total'] * 100:.3f} % of a core at 1 s"
    )


def report_daemon(result: dict) -> None:
    print(f"daemon with {result['gpus']} fake GPU(s), {result['seconds']:.0f} s at 1 s: {result['cpu_seconds']:.2f} CPU s = {result['core_percent']:.2f} % of a core ({result['core_percent'] / result['gpus']:.3f} % per GPU), RSS {result['rss_bytes'] / 1e6:.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=300, help="measured polls in process (default 300)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds the daemon process is watched (default 20)")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 8], help="fake GPU counts (default 1 8)")
    args = parser.parse_args()
    for gpus in args.gpus:
        report_in_process(in_process(gpus, args.polls) | fake_alone(gpus, args.polls))
    for gpus in args.gpus:
        wall = poll_wall(gpus)
        print(f"{gpus} GPU(s) with H100 call costs: a poll takes {wall['wall_p50'] * 1e3:.1f} ms (median), {wall['wall_max'] * 1e3:.1f} ms at the slow cadence")
    for gpus in args.gpus:
        report_daemon(daemon_process(gpus, args.seconds))


if __name__ == "__main__":
    main()
