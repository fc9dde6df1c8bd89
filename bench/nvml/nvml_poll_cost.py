#!/usr/bin/env python3
"""Where one NVML poll's time goes on this machine's GPU 0 (issue 28, round two).

``calls``: every NVML call of ``NvmlBackend.collect``, recorded where the backend makes it
(bench/nvml_calls.py, the list bench/gpu/compare_nvitop.py prints too), with its cadence (every poll,
the slow round, the first poll, opening) and its wall and thread-CPU time (median, microseconds),
over ``--polls`` polls ``--interval`` seconds apart (``--fake-gpus N``: on the fake pynvml).
``samples``: the parts of ``nvmlDeviceGetSamples``: pynvml's call (a count query, then the fill)
and each of its two driver calls alone, each with lastSeenTimeStamp 0 (the driver's whole buffer)
and with the newest timestamp of the previous 100 ms tick (what a poll asks). ``collect --tree T``: ``NvmlBackend.collect`` of tree T (this one or a baseline checkout)
polled every ``--interval`` seconds, wall and thread-CPU ms per poll. ``fake``: the same on one
fake GPU (tests/support/fakes/nvml.py, each call sleeping its H100 cost, a fake clock advancing
``--interval`` a poll), with the driver's samples dated on the backend's wall clock (as on a GPU:
calls that cannot find a new sample are skipped) and an hour off it (every poll asks, as before):
nvmlDeviceGetSamples calls and wall ms per poll, for ``--period`` seconds between driver samples.

    python bench/nvml/nvml_poll_cost.py calls [--interval 0.1] [--polls 30] [--fake-gpus N]
    python bench/nvml/nvml_poll_cost.py samples [--ticks 30]
    python bench/nvml/nvml_poll_cost.py collect --tree PATH [--interval 0.1] [--polls 100]
    python bench/nvml/nvml_poll_cost.py fake [--interval 0.1] [--polls 100] [--period 0.2]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def timed(call: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall and thread-CPU microseconds of one call, and its answer (or the NVML error)."""
    import pynvml

    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    try:
        answer: Any = call()
    except pynvml.NVMLError as error:
        answer = error
    return (time.perf_counter_ns() - wall) / 1e3, (time.thread_time_ns() - cpu) / 1e3, answer


def brief(answer: Any) -> str:
    """An answer in a few characters: pynvml's samples as their count, a driver call as (return code, count)."""
    if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], list):
        return f"{len(answer[1])} samples"
    return str(answer)[:30].replace("|", "/")


def row(name: str, walls: list[float], cpus: list[float], note: str = "") -> None:
    print(f"| {name} | {statistics.median(walls):.1f} | {statistics.median(cpus):.1f} | {max(walls):.1f} | {len(walls)} | {note} |", flush=True)


def calls(interval: float, polls: int, fake_gpus: int) -> None:
    """Every NVML call of the backend's polls, recorded where it makes them (bench/nvml_calls.py)."""
    from nvml_calls import markdown, record

    if fake_gpus:
        sys.path.insert(0, str(ROOT / "tests" / "support"))
        from fakes.nvml import H100_CALL_COSTS, FakeNvml

        from gpueff.trace import load_trace, planted_trace_paths

        traces = [load_trace(path) for path in planted_trace_paths()]
        nvml: Any = FakeNvml([traces[index % len(traces)] for index in range(fake_gpus)], call_cost=H100_CALL_COSTS, event_wait_cap=0.5)
        print(f"{fake_gpus} fake GPU(s) (tests/support/fakes/nvml.py, each call sleeping its H100 cost), Python {sys.version.split()[0]}\n")
    else:
        import pynvml

        nvml = pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        print(f"GPU 0: {pynvml.nvmlDeviceGetName(handle)}, driver {pynvml.nvmlSystemGetDriverVersion()}, Python {sys.version.split()[0]}\n")
        pynvml.nvmlShutdown()
    print(markdown(record(nvml, interval, polls)))


def samples(ticks: int) -> None:
    """The parts of nvmlDeviceGetSamples on GPU 0: pynvml's call and each of its two driver calls."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    print(f"GPU 0: {pynvml.nvmlDeviceGetName(handle)}, driver {pynvml.nvmlSystemGetDriverVersion()}, Python {sys.version.split()[0]}")
    print("| call | wall µs p50 | thread CPU µs p50 | wall µs max | n | note |\n| --- | ---: | ---: | ---: | ---: | --- |")
    raw = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetSamples")
    utilization = pynvml.NVML_GPU_UTILIZATION_SAMPLES

    def raw_call(last_seen: int, buffer: Any, capacity: int) -> tuple[int, int]:
        kind, count = ctypes.c_uint(0), ctypes.c_uint(capacity)
        code = raw(handle, ctypes.c_uint(utilization), ctypes.c_ulonglong(last_seen), ctypes.byref(kind), ctypes.byref(count), buffer)
        return code, count.value

    size_code, capacity = raw_call(0, None, 0)
    print(f"count query with NULL, lastSeen 0: return {size_code}, count {capacity}")
    buffer = (pynvml.c_nvmlSample_t * max(capacity, 1))()
    parts: dict[str, tuple[list[float], list[float], list[Any]]] = {}

    def note(name: str, call: Callable[[], Any]) -> Any:
        wall, cpu, answer = timed(call)
        walls, cpus, answers = parts.setdefault(name, ([], [], []))
        walls.append(wall)
        cpus.append(cpu)
        answers.append(answer)
        return answer

    previous = 0
    for _ in range(ticks):
        time.sleep(0.1)
        note("GetSamples (pynvml), lastSeen 0", lambda: pynvml.nvmlDeviceGetSamples(handle, utilization, 0))
        note("GetSamples (pynvml), lastSeen previous tick", functools.partial(pynvml.nvmlDeviceGetSamples, handle, utilization, previous))
        note("  driver count query (NULL buffer), lastSeen 0", lambda: raw_call(0, None, 0))
        note("  driver count query (NULL buffer), lastSeen previous", functools.partial(raw_call, previous, None, 0))
        note(f"  driver fill ({capacity} slots), lastSeen 0", lambda: raw_call(0, buffer, capacity))
        note(f"  driver fill ({capacity} slots), lastSeen previous", functools.partial(raw_call, previous, buffer, capacity))
        _, _, fresh = timed(lambda: pynvml.nvmlDeviceGetSamples(handle, utilization, 0))
        if not isinstance(fresh, Exception) and fresh[1]:
            previous = max(int(sample.timeStamp) for sample in fresh[1])
    for name, (walls, cpus, answers) in parts.items():
        row(name, walls, cpus, "answers: " + ", ".join(sorted({brief(answer) for answer in answers}))[:80])
    pynvml.nvmlShutdown()


def collect(tree: Path, interval: float, polls: int) -> None:
    sys.path.insert(0, str(tree.resolve()))
    from gpueff.backends.nvml.backend import NvmlBackend

    backend = NvmlBackend()
    backend.start()
    walls, cpus = [], []
    deadline = time.monotonic()
    for _ in range(polls + 3):
        deadline += interval
        time.sleep(max(0.0, deadline - time.monotonic()))
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        backend.collect()
        walls.append((time.perf_counter_ns() - wall) / 1e6)
        cpus.append((time.thread_time_ns() - cpu) / 1e6)
    backend.close()
    walls, cpus = walls[3:], cpus[3:]  # the first polls prime GPM and the sample window
    print(f"| {tree.name} | {interval:g} s | {statistics.median(walls):.2f} | {statistics.fmean(walls):.2f} | {statistics.median(cpus):.2f} | {statistics.fmean(cpus):.2f} | {polls} |", flush=True)


def shifted(clock: Callable[[], float], offset: float) -> Callable[[], float]:
    return lambda: clock() + offset


def fake(interval: float, polls: int, period: float) -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from fakes.nvml import H100_CALL_COSTS, FakeClock, FakeNvml

    from gpueff.backends.nvml.backend import NvmlBackend
    from gpueff.trace import load_trace, planted_trace_paths

    trace = load_trace(planted_trace_paths()[0])
    print("| driver samples dated | interval | sample period | GetSamples calls per poll | collect wall ms per poll, mean | polls |\n| --- | --- | --- | ---: | ---: | ---: |")
    for label, offset in (("on the wall clock", 0.0), ("an hour off it", 3600.0)):
        clock = FakeClock()
        nvml = FakeNvml([trace], clock=clock, call_cost=H100_CALL_COSTS)
        nvml.DRIVER_SAMPLE_PERIOD = period
        backend = NvmlBackend(nvml=nvml, clock=clock, wall_clock=shifted(clock, offset))
        backend.start()
        for _ in range(3):  # prime GPM, the sample window and the slow readings
            clock.advance(interval)
            backend.collect()
        calls_before, walls = nvml.calls["nvmlDeviceGetSamples"], []
        for _ in range(polls):
            clock.advance(interval)
            started = time.perf_counter_ns()
            backend.collect()
            walls.append((time.perf_counter_ns() - started) / 1e6)
        backend.close()
        print(f"| {label} | {interval:g} s | {period:g} s | {(nvml.calls['nvmlDeviceGetSamples'] - calls_before) / polls:.2f} | {statistics.fmean(walls):.2f} | {polls} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("calls", "samples", "collect", "fake"))
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--fake-gpus", type=int, default=0, help="calls: record on this many fake GPUs (tests/support/fakes/nvml.py) instead of the real ones")
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--polls", type=int, help="polls (default: 30 for calls, 100 for collect and fake)")
    parser.add_argument("--period", type=float, default=0.2, help="fake: seconds between the driver's utilization samples")
    args = parser.parse_args()
    if args.mode in ("calls", "samples"):
        sys.path.insert(0, str(ROOT))
        if args.mode == "calls":
            calls(args.interval, args.polls or 30, args.fake_gpus)
        else:
            samples(args.ticks)
    elif args.mode == "collect":
        collect(args.tree, args.interval, args.polls or 100)
    else:
        fake(args.interval, args.polls or 100, args.period)
    return 0


if __name__ == "__main__":
    sys.exit(main())
