"""``idle`` means it is known that no kernel ran: a profiling window read SM activity 0. The daemon's
first polls are replayed here as they run live, through the real NVML backend over a fake NVML that
plays the recorded traces: its first poll has no GPM window and no window of the driver's
utilization samples yet, only the driver's latest sample (the replay backend's first poll, which
tests/unit/pipeline/test_derive_corpus.py uses, holds a whole recorded window instead)."""

from __future__ import annotations

import pytest
from fakes.nvml import FakeClock, FakeNvml
from repo import ROOT

from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.poller import Poller
from gpueff.settings import Config
from gpueff.snapshot import GpuState
from gpueff.trace import Trace, load_trace

STARVED_H100 = ROOT / "evidence" / "2026-11-28-h100" / "verdicts" / "resnet18_starved.json"
# The shipped corpus and the live runs of 2026-11-28 on both cards (their traces beside the daemon's per-poll verdicts).
LIVE = ("2026-11-28-h100/verdicts", "2026-11-28-h200/verdicts", "2026-11-28-h200/point-estimate")
RECORDED = sorted((ROOT / "gpueff" / "traces").glob("*/*.json")) + sorted(path for folder in LIVE for path in (ROOT / "evidence" / folder).glob("*.json"))


def polled_live(trace: Trace, interval: float, polls: int) -> list[GpuState]:
    """The poller's state of the trace's GPU at each of ``polls`` polls, ``interval`` apart, from the daemon's first."""
    clock = FakeClock()
    backend = NvmlBackend(nvml=FakeNvml([trace], clock=clock), clock=clock, wall_clock=clock)
    poller = Poller(backend, Config(collect_interval=interval), clock=clock)
    poller._devices = backend.start()
    states = []
    for _ in range(polls):
        clock.advance(interval)
        states.append(poller.poll_once().gpus[0])
    return states


@pytest.mark.parametrize(("interval", "driver_sample", "first_class"), [(1.0, 0.0, "unknown"), (0.5, 0.03, "host")])
def test_a_starved_job_never_reads_idle_from_its_first_poll(interval, driver_sample, first_class):
    """ResNet-18 fed by one CPU thread on an H100 (utilization ~0.03, SM activity ~0.02) read ``idle``
    on its first two polls live: the first poll had no SM activity and a utilization below
    ``idle_utilization`` (the driver's latest sample), read as "no kernel ran", and the class then
    held for a poll against the window's ``host``. Without a window, a driver sample of 0 says
    nothing (``unknown``); one above 0 says an engine had work, and the GPU waited most of the time."""
    states = polled_live(load_trace(STARVED_H100), interval, 6)
    first = states[0]
    assert first.sample.profiling.sm_active is None and first.derived is not None and first.derived.busy == driver_sample
    assert [state.derived.bottleneck for state in states if state.derived] == [first_class] + ["host"] * 5


@pytest.mark.parametrize("interval", [1.0, 0.5])
def test_no_recorded_job_reads_idle_on_a_poll_without_a_window_of_sm_activity_0(interval):
    """Every recorded trace, from the daemon's first poll over one loop: ``idle`` only where this
    window's SM activity is known and exactly 0 (the idle GPUs, and multi-GPU jobs before their ranks
    start: docs/classes.md lists what was found)."""
    for path in RECORDED:
        trace = load_trace(path)
        states = polled_live(trace, interval, max(4, round(len(trace.samples) * trace.interval_s / interval)))
        idle_without_proof = [number for number, state in enumerate(states) if state.derived and state.derived.bottleneck == "idle" and state.sample.profiling.sm_active != 0]
        assert not idle_without_proof, (path.relative_to(ROOT), interval, idle_without_proof)
