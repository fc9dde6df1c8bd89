"""A verdict within two polls of a change of regime (issue 43), on recorded transitions: two recorded
jobs joined end to end into one trace (the first one's steady samples, then the second's) and replayed
through the poller as the daemon runs it. A job that starts, stops or changes phase moves its readings
out of the range of its recent windows; the class's mean restarts there, so the class follows within
two polls of the change, while a job that alternates busy and idle keeps both levels in its range
and reads ``host`` steadily."""

from __future__ import annotations

import pytest

from gpueff.backends.replay import ReplayBackend
from gpueff.poller import Poller
from gpueff.settings import Config
from gpueff.trace import Trace, load_trace, parse_trace
from unit.pipeline.test_derive_corpus import TRACES, Clock, replayed

# (first job, its class; second job, its class): a job starting, stopping, and changing phase
TRANSITIONS = [
    ("h200/idle", "idle", "h200/matmul_8192", "compute"),  # issue 43: read host for up to bottleneck.window
    ("h200/matmul_8192", "compute", "h200/idle", "idle"),
    ("h200/matmul_8192", "compute", "h200/tiny_kernels", "host"),
    ("h200/tiny_kernels", "host", "h200/matmul_8192", "compute"),
    ("h200/spin_1sm", "underfilled", "h200/matmul_8192", "compute"),
    ("h200-live/embedding_bag_gather", "memory_latency", "h200/matmul_8192", "compute"),  # SM activity stays 0.95: the pipes step
    ("h200/matmul_8192", "compute", "h200/copy_2GB", "memory"),
    ("h200/copy_2GB", "memory", "h200/idle", "idle"),
]
INTERVALS = (1.0, 0.5)
FIRST_SECONDS = 10.0  # twice bottleneck.window: the first job's verdict is settled when the second starts


def steady(trace: Trace) -> list[dict]:
    """The recording's samples after its warm-up, without health readings (two recordings' counters do not join)."""
    return [{key: value for key, value in sample.items() if key != "health"} for sample in trace.samples[trace.warmup_samples:]]


def after(samples: list[dict], more: list[dict], interval: float) -> list[dict]:
    """``more`` recorded on after ``samples``, one interval after the last of them."""
    offset = samples[-1]["t"] - more[0]["t"] + interval
    return samples + [{**sample, "t": round(sample["t"] + offset, 3)} for sample in more]


def joined(first: str, second: str) -> tuple[Trace, float]:
    """One trace of ``first``'s steady samples (looped to at least FIRST_SECONDS, so its verdict is
    settled) followed by ``second``'s, and the time the second starts."""
    a, b = load_trace(TRACES / f"{first}.json"), load_trace(TRACES / f"{second}.json")
    assert a.interval_s == b.interval_s
    samples = steady(a)
    while samples[-1]["t"] - samples[0]["t"] < FIRST_SECONDS:
        samples = after(samples, steady(a), a.interval_s)
    change = samples[-1]["t"]
    samples = after(samples, steady(b), a.interval_s)
    data = {"format": "gpu-trace/1", "gpu": a.gpu, "workload": f"{a.workload}-then-{b.workload}", "description": "two recordings joined", "truth": {},
            "interval_s": a.interval_s, "samples": samples}
    return parse_trace(data, f"{first}+{second}"), change


def classes_once(trace: Trace, interval: float) -> list[tuple[float, str]]:
    """(replay time, reported class) at every poll of one pass through the trace."""
    clock = Clock()
    backend = ReplayBackend([trace], clock=clock)
    poller = Poller(backend, Config(collect_interval=interval), clock=clock)
    poller._devices = backend.start()
    out = []
    for number in range(1, round(trace.loop_seconds / interval)):
        clock.now += interval
        out.append((number * interval, poller.poll_once().gpus[0].derived.bottleneck))
    return out


@pytest.mark.parametrize("interval", INTERVALS)
@pytest.mark.parametrize(("first", "before", "second", "after"), TRANSITIONS, ids=[f"{a}->{c}" for a, _, c, _ in TRANSITIONS])
def test_the_class_follows_a_change_of_regime_within_two_polls(first, before, second, after, interval):
    trace, change = joined(first, second)
    polls = classes_once(trace, interval)
    at_change = change - trace.loop_start  # in replay time
    first_after = next(number for number, (at, _) in enumerate(polls) if at > at_change)  # the first poll whose window holds the change
    assert polls[first_after - 1][1] == before, (first, polls[:first_after])
    later = [each for _, each in polls[first_after + 1:]]  # from the second poll after the change on
    assert later == [after] * len(later), (second, polls[first_after - 1:first_after + 6])


@pytest.mark.parametrize("interval", INTERVALS)
@pytest.mark.parametrize("name", ["h200/matmul_8192_duty50", "h100/matmul_duty_50ms", "h100/matmul_duty_140ms", "h100/matmul_duty_250ms",
                                  "h100/matmul_duty_1s", "h100/matmul_duty_2s"])
def test_a_job_alternating_busy_and_idle_reads_host_steadily(name, interval):
    """Its windows swing between the two levels (at a 500 ms poll a 2 s duty cycle's windows read
    compute, compute, idle, idle ...), which stay in the range of its recent windows: no restart,
    one verdict from the first window on."""
    classes = [state.derived.bottleneck for state in replayed(name, interval)]
    first = classes.index("host")
    assert first * interval <= 6.0 and classes[first:] == ["host"] * (len(classes) - first), (name, classes[:20])
