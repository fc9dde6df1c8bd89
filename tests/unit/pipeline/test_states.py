"""GPU time by state (gpueff/pipeline/states.py): each window's state from its own readings, the
states adding up exactly to the time observed, the energy counter's advances split by state, and
the holders adding up to their GPU for every state but free."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpueff.attribution.holders import UNATTRIBUTED, Holder, ProcessIdentity
from gpueff.backends.replay import ReplayBackend
from gpueff.pipeline.derive import derive
from gpueff.pipeline.split import Sharing
from gpueff.pipeline.states import (
    BUSY_NOT_WORKING,
    FREE,
    HELD_IDLE,
    HELD_STATES,
    HOST_STARVED,
    STATE_INDEX,
    STATES,
    UNKNOWN,
    WORKING,
    window_state,
)
from gpueff.pipeline.totals import Totals, integrate
from gpueff.pipeline.tracker import GpuTracker, TrackerSettings
from gpueff.poller import Poller
from gpueff.sample import DeviceInfo, GpuProcess, GpuSample, Profiling
from gpueff.settings import Config
from gpueff.trace import demo_trace_paths, load_trace

H200 = DeviceInfo(index=0, uuid="GPU-states", name="NVIDIA H200", sm_count=132, max_sm_clock_mhz=1980)
HELD = (GpuProcess(11, "python3"),)
# Window readings of each state: (utilization, profiling readings).
IDLE = (0.0, {"sm_active": 0.0, "graphics_active": 0.0, "sm_occupancy": 0.0, "dram_active": 0.0, "tensor_active": 0.0})
STARVED = (0.3, {"sm_active": 0.28, "graphics_active": 0.3, "sm_occupancy": 0.1, "tensor_active": 0.2, "dram_active": 0.1})
SPINNING = (1.0, {"sm_active": 0.0076, "graphics_active": 1.0, "sm_occupancy": 0.0001, "tensor_active": 0.0, "dram_active": 0.0})
MATMUL = (0.98, {"sm_active": 0.95, "graphics_active": 0.98, "sm_occupancy": 0.14, "tensor_active": 0.92, "dram_active": 0.25})
IMPLAUSIBLE = (0.9, {"sm_active": 0.9, "graphics_active": 0.2, "sm_occupancy": 0.1, "tensor_active": 0.1})
READINGS = {HELD_IDLE: IDLE, HOST_STARVED: STARVED, BUSY_NOT_WORKING: SPINNING, WORKING: MATMUL}


def window(t: float, readings: tuple[float, dict[str, float]], processes: tuple[GpuProcess, ...] | None = HELD, **fields: object) -> GpuSample:
    utilization, profiling = readings
    return GpuSample(device=H200, timestamp=t, window_seconds=1.0, gpu_utilization=utilization, sm_clock_mhz=1980, power_watts=400.0,
                     processes=processes, profiling=Profiling(**profiling), **fields)  # type: ignore[arg-type]


def state_of(sample: GpuSample) -> str:
    return window_state(sample, derive(sample))


def test_each_state_from_the_windows_own_readings():
    assert state_of(window(1, IDLE, processes=())) == FREE
    assert state_of(window(1, IDLE)) == HELD_IDLE
    assert state_of(window(1, STARVED)) == HOST_STARVED
    assert state_of(window(1, SPINNING)) == BUSY_NOT_WORKING
    assert state_of(window(1, MATMUL)) == WORKING
    # A kernel ran although the list is empty (the process ended before the poll): judged by its activity.
    assert state_of(window(1, MATMUL, processes=())) == WORKING


def test_what_the_readings_cannot_place_is_unknown():
    assert state_of(window(1, IDLE, processes=None)) == UNKNOWN  # DCGM or replay: free cannot be told from held
    assert state_of(window(1, IMPLAUSIBLE)) == UNKNOWN
    assert state_of(window(1, (0.9, {}))) == UNKNOWN  # no SM activity: working cannot be told from not
    assert state_of(window(1, (None, {}))) == UNKNOWN  # nothing read at all


def test_without_profiling_a_window_whose_driver_samples_all_read_zero_is_idle():
    assert state_of(window(1, (0.0, {}))) == HELD_IDLE
    assert state_of(window(1, (0.0, {}), processes=())) == FREE
    assert state_of(window(1, (0.0, {}), processes=None)) == UNKNOWN


def test_the_states_add_up_exactly_to_the_time_observed():
    rng = random.Random(44)
    choices = [(IDLE, ()), (IDLE, HELD), (IDLE, None), (STARVED, HELD), (SPINNING, HELD), (MATMUL, HELD), (IMPLAUSIBLE, HELD), ((None, {}), HELD)]
    totals, t, observed = Totals(), 100.0, 0.0
    seen = set()
    for step in range(400):
        gap = rng.choice((0.1, 0.5, 1.0, 1.7, 30.0))  # 30 s: longer than max_gap, not observed
        previous = totals.last_timestamp
        t += gap
        readings, processes = rng.choice(choices)
        up = step % 37 != 5
        sample = window(t, readings, processes) if up else GpuSample(device=H200, timestamp=t, up=False)
        totals, growth = integrate(totals, sample, derive(sample) if up else None, 10.0, 2.5)
        if up and previous is not None and gap <= 10.0:
            observed += t - previous
            assert growth.state is not None and growth.elapsed == t - previous
            seen.add(growth.state)
        else:
            assert growth.state is None and growth.elapsed == 0.0
    assert seen == set(STATES)
    assert sum(totals.state_seconds) == pytest.approx(observed, rel=1e-12)
    assert sum(totals.state_cost) == pytest.approx(observed * 2.5 / 3600, rel=1e-12)


def test_the_energy_counters_advances_are_split_by_state_and_add_up():
    tracker, config = GpuTracker(), TrackerSettings(stale_after=10.0)
    energy, advanced = 1000.0, 0.0
    plan = [(IDLE, ()), (IDLE, HELD), (MATMUL, HELD), (MATMUL, HELD), (SPINNING, HELD), (IDLE, ())] * 5
    for step, (readings, processes) in enumerate(plan):
        counter = None
        if step % 3 == 2:  # the counter is read at the slow cadence
            energy += 250.0 + 10 * step
            counter = energy
            advanced += 0.0 if step == 2 else 250.0 + 10 * step  # the first reading is the baseline
        tracker.advance(window(float(step), readings, processes, energy_joules=counter), config, None, {})
    joules = tracker.totals.state_joules
    assert sum(joules) == pytest.approx(advanced)
    assert joules[STATE_INDEX[WORKING]] > 0 and joules[STATE_INDEX[FREE]] > 0 and joules[STATE_INDEX[HOST_STARVED]] == 0


def test_holders_add_up_to_their_gpu_for_every_state_but_free():
    a, b = Holder("pod", "uid-a"), Holder("slurm_job", "42")
    identities = {11: ProcessIdentity(a), 12: ProcessIdentity(b)}
    both = (GpuProcess(11, "python3"), GpuProcess(12, "python3"))
    tracker, sharing, config = GpuTracker(), Sharing(Path("/nonexistent")), TrackerSettings(stale_after=10.0, price_per_gpu_hour=3.0)
    plan = [(IDLE, ())] + [(IDLE, both), (IDLE, HELD), (MATMUL, HELD), (SPINNING, both), (IDLE, ()), (STARVED, both)] * 4  # the first: the baseline
    for step, (readings, processes) in enumerate(plan):
        _, _, split = tracker.advance(window(float(step), readings, processes), config, sharing, identities)
    assert split is not None
    holders = dict(split.holders)
    gpu = tracker.totals.state_seconds
    for state in HELD_STATES:
        position = STATE_INDEX[state]
        assert sum(t.state_seconds[position] for t in holders.values()) == pytest.approx(gpu[position]), state
    assert all(t.state_seconds[STATE_INDEX[FREE]] == 0 for t in holders.values())
    assert gpu[STATE_INDEX[FREE]] == pytest.approx(4.0)
    # A held_idle window held by both is theirs equally; a busy window neither's samples name is unattributed.
    assert holders[b].state_seconds[STATE_INDEX[HELD_IDLE]] == pytest.approx(4 * 0.5)
    assert holders[a].state_seconds[STATE_INDEX[HELD_IDLE]] == pytest.approx(4 * 1.5)
    assert holders[UNATTRIBUTED].state_seconds[STATE_INDEX[BUSY_NOT_WORKING]] == pytest.approx(4.0)
    assert sum(sum(t.state_cost) for t in holders.values()) == pytest.approx((sum(gpu) - gpu[STATE_INDEX[FREE]]) * 3.0 / 3600)


def test_every_replayed_gpu_of_the_demo_adds_up_to_the_time_observed():
    now = [100.0]
    backend = ReplayBackend([load_trace(path) for path in demo_trace_paths()], clock=lambda: now[0])
    poller = Poller(backend, Config(), clock=lambda: now[0])
    backend.start()
    for _ in range(20):
        now[0] += 0.5
        snapshot = poller.poll_once()
    for gpu in snapshot.gpus:
        assert sum(gpu.totals.state_seconds) == pytest.approx(19 * 0.5), gpu.sample.device.source
