"""The time totals behind the busy, busy-but-idle, activity and state counters: each GPU's ratios
integrated over the time between its consecutive up samples (with GPM, exactly the window its
profiling ratios are the means of: each window's ratio times its length, every window once, so
``rate()`` of an activity counter over any range is that range's mean activity), and each such window's time in its state
(pipeline/states.py). ``integrate`` returns the new totals and what they grew by (the fair split
divides that among the GPU's holders)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from operator import attrgetter
from typing import TYPE_CHECKING

from gpueff.pipeline.states import NO_TIME, plus, window_state
from gpueff.sample import GpuSample

if TYPE_CHECKING:
    from gpueff.pipeline.derive import Derived


# The pipes integrated into gpueff_pipe_active_seconds_total{pipe}: (label, Profiling field), in this order.
PIPE_SECONDS = (("tensor", "tensor_active"), ("tensor_hmma", "tensor_hmma_active"), ("tensor_imma", "tensor_imma_active"), ("tensor_dfma", "tensor_dfma_active"),
                ("fp64", "fp64_active"), ("fp32", "fp32_active"), ("fp16", "fp16_active"), ("integer", "integer_active"))
NO_PIPE_SECONDS = (0.0,) * len(PIPE_SECONDS)
_PIPE_READINGS = attrgetter(*(field for _, field in PIPE_SECONDS))  # a Profiling's pipe readings, in PIPE_SECONDS order


@dataclass(frozen=True, slots=True)
class Totals:
    """Time integrals of one GPU since the daemon started (Prometheus counters)."""

    busy_seconds: float = 0.0  # integral of coarse utilization
    sm_active_seconds: float = 0.0  # integral of SM activity
    pipe_active_seconds: tuple[float, ...] = NO_PIPE_SECONDS  # integral of each pipe's activity, in PIPE_SECONDS order
    dram_active_seconds: float = 0.0  # integral of DRAM activity
    busy_idle_sm_seconds: float = 0.0  # integral of max(0, utilization - SM activity), not while the counters are implausible
    busy_idle_sm_cost: float = 0.0  # the same in money, at the price in force at the time
    last_timestamp: float | None = None
    peer_wait_seconds: float = 0.0  # seconds lost waiting on a slower GPU of the job (pipeline/peers.py)
    state_seconds: tuple[float, ...] = NO_TIME  # observed time per state, in STATES order: they add up to every window integrated
    state_cost: tuple[float, ...] = NO_TIME  # the same in money, at the price in force at the time
    state_joules: tuple[float, ...] = NO_TIME  # the energy counter's advances split by state (pipeline/tracker.py)


@dataclass(frozen=True, slots=True)
class Growth:
    """What one GPU's time integrals grew by in one poll."""

    busy_seconds: float = 0.0
    sm_active_seconds: float = 0.0
    busy_idle_sm_seconds: float = 0.0
    state: str | None = None  # the window's state; None where no window was integrated
    elapsed: float = 0.0  # the window's length, seconds
    cost: float = 0.0  # the window's time at the price in force (0 without a price)


NO_GROWTH = Growth()


def integrate(totals: Totals, sample: GpuSample, derived: Derived | None, max_gap: float, price_per_gpu_hour: float | None = None) -> tuple[Totals, Growth]:
    """The totals after ``sample``, and what they grew by. A gap longer than ``max_gap`` (the GPU
    was down or the poller stalled) is not integrated: nothing is invented for time not observed."""
    if not sample.up or derived is None:
        return (totals if totals.last_timestamp is None else _at(totals, None)), NO_GROWTH
    previous = totals.last_timestamp
    if previous is None:
        return _at(totals, sample.timestamp), NO_GROWTH
    elapsed = sample.timestamp - previous
    if not 0 < elapsed <= max_gap:
        return _at(totals, sample.timestamp), NO_GROWTH
    sm_active = sample.profiling.sm_active
    busy = derived.busy * elapsed if derived.busy is not None else 0.0
    active = sm_active * elapsed if sm_active is not None else 0.0
    wasted = cost = 0.0
    if derived.busy is not None and sm_active is not None and not derived.counters_implausible:
        wasted = max(0.0, derived.busy - sm_active) * elapsed
        if price_per_gpu_hour is not None:
            cost = wasted * price_per_gpu_hour / 3600
    profiling = sample.profiling
    pipes = tuple([total + (value * elapsed if value is not None else 0.0) for total, value in zip(totals.pipe_active_seconds, _PIPE_READINGS(profiling), strict=True)])
    dram = profiling.dram_active * elapsed if profiling.dram_active is not None else 0.0
    state = window_state(sample, derived)
    window_cost = elapsed * price_per_gpu_hour / 3600 if price_per_gpu_hour is not None else 0.0
    grown = Totals(  # every field named (dataclasses.replace's introspection was a fifth of a poll's integration)
        busy_seconds=totals.busy_seconds + busy,
        sm_active_seconds=totals.sm_active_seconds + active,
        pipe_active_seconds=pipes,
        dram_active_seconds=totals.dram_active_seconds + dram,
        busy_idle_sm_seconds=totals.busy_idle_sm_seconds + wasted,
        busy_idle_sm_cost=totals.busy_idle_sm_cost + cost,
        last_timestamp=sample.timestamp,
        peer_wait_seconds=totals.peer_wait_seconds,
        state_seconds=plus(totals.state_seconds, state, elapsed),
        state_cost=plus(totals.state_cost, state, window_cost),
        state_joules=totals.state_joules,
    )
    growth = Growth(grown.busy_seconds - totals.busy_seconds, grown.sm_active_seconds - totals.sm_active_seconds, grown.busy_idle_sm_seconds - totals.busy_idle_sm_seconds, state, elapsed, window_cost)
    return grown, growth


def _at(totals: Totals, timestamp: float | None) -> Totals:
    return replace(totals, last_timestamp=timestamp)
