"""GPU time by state: each observed poll window of a GPU is put whole in one of six exclusive
states, so that a GPU's state seconds add up to the time it was observed (every window between two
consecutive up samples at most ``stale_after`` apart; a longer gap is time not observed).

The states, judged in this order from the window's own readings (docs/metrics.md gives the physical
argument for each):

- ``free``: no kernel ran and no compute process holds the GPU;
- ``held_idle``: no kernel ran while a compute process holds the GPU (a context, and with it device
  memory, is held);
- ``host_starved``: the window's class is ``host``: the GPU had nothing queued for longer than its
  kernels could save, or only its copy engines worked;
- ``busy_not_working``: a ``gpueff_mismatch`` rule holds: utilization says busy, the SMs (or every
  unit) say not;
- ``working``: the rest of the time a kernel ran;
- ``unknown``: the readings cannot place the window: the utilization was not read, the profiling
  counters are implausible, the SM activity needed to tell working from not is missing, or no kernel
  ran and the backend cannot list the GPU's processes (DCGM, a replay without owners), so free cannot
  be told from held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpueff.sample import GpuSample

if TYPE_CHECKING:
    from gpueff.pipeline.derive import Derived

FREE, HELD_IDLE, HOST_STARVED, BUSY_NOT_WORKING, WORKING, UNKNOWN = "free", "held_idle", "host_starved", "busy_not_working", "working", "unknown"
STATES = (FREE, HELD_IDLE, HOST_STARVED, BUSY_NOT_WORKING, WORKING, UNKNOWN)
HELD_STATES = STATES[1:]  # the states a holder's time can be in: free time is no one's
WASTE_STATES = (HELD_IDLE, HOST_STARVED, BUSY_NOT_WORKING)  # time held but not doing the GPU's work
STATE_INDEX = {state: position for position, state in enumerate(STATES)}
NO_TIME: tuple[float, ...] = (0.0,) * len(STATES)


def quiet(sample: GpuSample, derived: Derived) -> bool:
    """No kernel ran and no engine was busy over the window: its class is ``idle`` (SM activity, or
    the engine's, exactly 0 and utilization below bottleneck.idle_utilization), or, where no
    profiling reading exists, every utilization sample the driver took in the window read 0."""
    if derived.window_bottleneck == "idle":
        return True
    profiling = sample.profiling
    return derived.busy == 0 and profiling.sm_active is None and profiling.graphics_active is None


def window_state(sample: GpuSample, derived: Derived) -> str:
    """The state of the window that ``sample`` ends."""
    if quiet(sample, derived):
        if sample.processes is None:
            return UNKNOWN
        return HELD_IDLE if sample.processes else FREE
    if derived.busy is None or derived.counters_implausible:
        return UNKNOWN
    if derived.window_bottleneck == "host":
        return HOST_STARVED
    if any(derived.mismatch.values()):
        return BUSY_NOT_WORKING
    if derived.window_bottleneck == "unknown":
        return UNKNOWN
    return WORKING


def plus(amounts: tuple[float, ...], state: str, amount: float) -> tuple[float, ...]:
    """``amounts`` (one per state, in STATES order) with ``amount`` added to ``state``'s."""
    position = STATE_INDEX[state]
    return (*amounts[:position], amounts[position] + amount, *amounts[position + 1:])
