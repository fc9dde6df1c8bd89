"""The NVML calls of one poll, taken from the backend itself (issue 28).

``record`` runs ``NvmlBackend`` (open, then polls at least ``interval`` seconds apart) on a proxy around the
pynvml module (the real one or tests/support/fakes/nvml.py) that notes every ``nvml*`` call the polling
thread makes, with its arguments and its wall and thread-CPU time as the backend made it. Every
``slow_every``-th poll the backend's clock is moved on by its slow interval, so that its slow round
comes due. Each distinct call (name and arguments) gets a cadence:

- ``open``: made while the backend starts (device info, GPM pairs, event sets);
- ``poll``: made in the ordinary polls, with how many times per poll (0.5: every other poll);
- ``slow``: made only in the polls where the slow round was made due, with how many times a round;
- ``first``: made in the first two polls only (they prime GPM and read its first window; a call
  that answered NotSupported is not made again; a cadence rarer than the slow round).

Calls of other threads (the Xid watcher's event wait) are counted apart, not timed. Timing the
calls where the backend makes them keeps its order and state: ``nvmlGpmMetricsGet`` reads the
request the backend built, on the fresh sample pair it just took, and ``nvmlDeviceGetSamples`` gets
the lastSeenTimeStamp the backend passes. So the list can never drift from the backend.
"""

from __future__ import annotations

import ctypes
import inspect
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, cast

POLL, SLOW, FIRST, OPEN = "poll", "slow", "first", "open"
FIRST_POLLS = 2  # GPM's first poll primes its sample pair, the second reads its first window (and the slow one's)
GPM_SAMPLE_CALLS = {"nvmlGpmSampleGet": 0, "nvmlGpmMigSampleGet": 0}  # the argument naming the device
# Arguments that change every call, shown by what they are (0 is kept: it asks for the whole buffer).
CHANGING_ARGUMENTS = {"nvmlDeviceGetSamples": {2: "last seen"}, "nvmlDeviceGetProcessUtilization": {1: "last seen"}, "nvmlSystemGetProcessName": {0: "pid"}}


@dataclass
class Call:
    """One call the backend made: where, what, how long, what came back."""

    poll: int  # -1 while the backend starts
    name: str
    arguments: str
    wall_us: float
    cpu_us: float
    error: str = ""


class RecordingNvml:
    """Stands in for the pynvml module: passes everything through, notes the polling thread's
    ``nvml*`` calls (``poll`` says which poll they belong to)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.calls: list[Call] = []
        self.other_threads: Counter[str] = Counter()
        self.poll = -1
        self._owner = threading.get_ident()
        self._labels: dict[int, str] = {}  # device handle address -> label
        self._sample_devices: dict[int, str] = {}  # GPM sample address -> the device it was taken of
        self._metric_names = {value: name.removeprefix("NVML_GPM_METRIC_") for value, name in _constants(nvml, "NVML_GPM_METRIC_").items()}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.nvml, name)
        if not name.startswith("nvml") or not callable(value) or inspect.isclass(value):
            return value  # constants, structs, NVMLError
        return self._recorded(name, value)

    def _recorded(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if threading.get_ident() != self._owner:
                self.other_threads[name] += 1
                return function(*args)
            arguments = self._arguments(name, args)
            error = ""
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return function(*args)
            except self.nvml.NVMLError as raised:
                error = str(raised)
                raise
            finally:
                wall, cpu = time.perf_counter_ns() - wall, time.thread_time_ns() - cpu
                self.calls.append(Call(self.poll, name, arguments, wall / 1e3, cpu / 1e3, error))

        return call

    def _arguments(self, name: str, args: tuple[Any, ...]) -> str:
        changing = CHANGING_ARGUMENTS.get(name, {})
        labels = [changing[slot] if slot in changing and value != 0 else self._describe(value) for slot, value in enumerate(args)]
        if name in GPM_SAMPLE_CALLS and args:  # the request that reads this sample names its device
            self._sample_devices[_address(args[-1])] = labels[GPM_SAMPLE_CALLS[name]]
        return ", ".join(labels)

    def _describe(self, value: Any) -> str:
        """An argument as a short stable label: numbers as they are, a device handle as the order it was
        first seen in, a GPM sample as ``sample``, a GPM request as its metrics."""
        if value is None or isinstance(value, int | float | str | bytes):
            return repr(value)
        if isinstance(value, list | tuple):
            return "[" + ", ".join(self._describe(each) for each in value) + "]"
        kind = type(value).__name__
        if hasattr(value, "numMetrics") and hasattr(value, "metrics"):
            ids = [int(value.metrics[slot].metricId) for slot in range(int(value.numMetrics))]
            device = self._sample_devices.get(_address(value.sample2), "?")
            return f"{device}, {len(ids)} metrics: " + " ".join(self._metric_names.get(metric, str(metric)) for metric in ids)
        if "GpmSample" in kind:
            return "sample"
        if "Device" in kind:
            return self._labels.setdefault(_address(value), f"device {len(self._labels)}")
        return kind


def _address(pointer: Any) -> int:
    try:
        return ctypes.cast(pointer, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        return id(pointer)


def _constants(nvml: Any, prefix: str) -> dict[int, str]:
    module = nvml if isinstance(nvml, ModuleType) else __import__("pynvml")
    return {value: name for name, value in vars(module).items() if name.startswith(prefix) and isinstance(value, int) and name != prefix + "MAX"}


@dataclass
class Recording:
    calls: list[Call]
    polls: int
    slow_polls: frozenset[int]  # the polls whose slow round was made due (the clock moved on)
    interval: float
    slow_interval: float
    collect_wall_ms: list[float] = field(default_factory=list)  # NvmlBackend.collect, ordinary polls
    collect_cpu_ms: list[float] = field(default_factory=list)
    other_threads: Counter[str] = field(default_factory=Counter)


def record(nvml: Any, interval: float, polls: int, slow_every: int = 4) -> Recording:
    """Open the NVML backend on ``nvml`` (pynvml or a fake) through a recording proxy and poll it
    ``polls`` times at least ``interval`` seconds apart, under the daemon's default settings. The first
    ``FIRST_POLLS`` polls are the start-up's; every ``slow_every``-th poll after them the backend's
    clock is moved on by its slow interval."""
    from gpueff.backends.base import CollectSettings
    from gpueff.backends.nvml.backend import NvmlBackend
    from gpueff.poller import collect_settings
    from gpueff.settings import load_config

    proxy = RecordingNvml(nvml)
    skew = 0.0
    backend = NvmlBackend(nvml=cast(ModuleType, proxy), clock=lambda: time.monotonic() + skew)
    defaults = collect_settings(load_config(None))
    backend.configure(CollectSettings(interval, defaults.slow_interval, defaults.process_utilization, defaults.disabled_collectors))
    recording = Recording([], polls, frozenset(), interval, backend.slow_interval)
    slow_polls = set()
    backend.start()
    try:
        due = ended = time.monotonic()
        for poll in range(polls):
            # On the grid, but never sooner than ``interval`` after the last poll ended: a poll that a
            # busy machine delayed must not make the next one too soon for GPM (100 ms between
            # samples), whose window would then not close and its calls not be made.
            due = max(due + interval, ended + interval)
            time.sleep(max(0.0, due - time.monotonic()))
            if poll >= FIRST_POLLS and poll % slow_every == 0:
                skew += backend.slow_interval
                slow_polls.add(poll)
            proxy.poll = poll
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            backend.collect()
            ended = time.monotonic()
            if poll >= FIRST_POLLS and poll not in slow_polls:
                recording.collect_wall_ms.append((time.perf_counter_ns() - wall) / 1e6)
                recording.collect_cpu_ms.append((time.thread_time_ns() - cpu) / 1e6)
    finally:
        proxy.poll = polls
        backend.close()
    recording.calls = [call for call in proxy.calls if call.poll < polls]  # not the closing calls
    recording.slow_polls = frozenset(slow_polls)
    recording.other_threads = proxy.other_threads
    return recording


@dataclass
class CallRow:
    name: str
    arguments: str
    cadence: str
    per_round: float  # calls per ordinary poll (``poll``) or per slow round (``slow``), or in all (``first``, ``open``)
    wall_us: list[float]
    cpu_us: list[float]
    errors: list[str]

    @property
    def label(self) -> str:
        return f"{self.name}({self.arguments})"


def rows(recording: Recording) -> list[CallRow]:
    """One row per distinct call (name and arguments), in the order first made."""
    ordinary = [poll for poll in range(FIRST_POLLS, recording.polls) if poll not in recording.slow_polls]
    slow = sorted(recording.slow_polls)
    grouped: dict[tuple[bool, str, str], list[Call]] = {}
    for call in recording.calls:
        grouped.setdefault((call.poll < 0, call.name, call.arguments), []).append(call)
    result = []
    for (opening, name, arguments), calls in grouped.items():
        made_in = Counter(call.poll for call in calls)
        in_ordinary = sum(made_in[poll] for poll in ordinary)
        if opening:
            cadence, per_round = OPEN, float(len(calls))
        elif in_ordinary:
            cadence, per_round = POLL, in_ordinary / max(len(ordinary), 1)
        elif any(made_in[poll] for poll in slow):
            cadence, per_round = SLOW, sum(made_in[poll] for poll in slow) / len(slow)
        else:
            cadence, per_round = FIRST, float(len(calls))
        result.append(CallRow(name, arguments, cadence, per_round, [c.wall_us for c in calls], [c.cpu_us for c in calls], [c.error for c in calls if c.error]))
    return result


def markdown(recording: Recording) -> str:
    """The recording as a Markdown table of calls and the per-poll sums."""
    table = rows(recording)
    lines = [
        f"NVML calls of NvmlBackend.collect, recorded in place: {recording.polls} polls {recording.interval:g} s apart (the first {FIRST_POLLS} are start-up), the slow round ({recording.slow_interval:g} s) made due in polls {sorted(recording.slow_polls)}",
        "",
        "| call | cadence | calls per round | wall µs p50 | thread CPU µs p50 | wall µs max | n | note |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    order = {POLL: 0, SLOW: 1, FIRST: 2, OPEN: 3}
    for row in sorted(table, key=lambda row: order[row.cadence]):
        note = "; ".join(sorted(set(row.errors)))[:60].replace("|", "/")
        if row.errors and len(row.errors) < len(row.wall_us):
            note = f"{len(row.errors)} of {len(row.wall_us)}: {note}"
        lines.append(f"| `{row.label}` | {row.cadence} | {row.per_round:.2f} | {statistics.median(row.wall_us):.1f} | {statistics.median(row.cpu_us):.1f} | {max(row.wall_us):.1f} | {len(row.wall_us)} | {note} |")
    per_poll = sum(statistics.median(row.cpu_us) * row.per_round for row in table if row.cadence == POLL)
    per_slow = sum(statistics.median(row.cpu_us) * row.per_round for row in table if row.cadence == SLOW)
    lines.append("")
    lines.append(f"- NVML thread CPU per ordinary poll (sum of p50 x calls per poll): **{per_poll / 1e3:.2f} ms**; per slow round: {per_slow / 1e3:.2f} ms, "
                 f"{per_slow / 1e3 * recording.interval / recording.slow_interval:.3f} ms a poll at {recording.interval:g} s")
    if recording.collect_wall_ms:
        lines.append(f"- NvmlBackend.collect per ordinary poll, p50 wall / thread CPU: **{statistics.median(recording.collect_wall_ms):.2f} / {statistics.median(recording.collect_cpu_ms):.2f} ms** ({len(recording.collect_wall_ms)} polls)")
    if recording.other_threads:
        lines.append("- other threads' calls (not timed): " + ", ".join(f"{name} x{count}" for name, count in sorted(recording.other_threads.items())))
    return "\n".join(lines)
