"""Every threshold at its boundary. Utilization is an integer percent, so a reading of exactly 80 %
is common: these pin which side of each rule it falls on (``>=`` against ``<``), as docs/metrics.md says."""

from __future__ import annotations

import pytest

from gpueff.pipeline.derive import efficiency, mismatch
from gpueff.taxonomy import Activity, BottleneckThresholds, MismatchThresholds, classify

LIMITS = MismatchThresholds()
BOTTLENECK = BottleneckThresholds()


def percent(value: int) -> float:
    """A reading as NVML and GPM give it: an integer percent, as a ratio."""
    return value / 100


@pytest.mark.parametrize(("utilization", "sm_active", "fires"), [
    (80, 29, True),  # exactly 80 % utilization counts as high (>=)
    (79, 29, False),
    (80, 30, False),  # exactly 30 % SM activity is not low (<)
    (100, 0, True),
])
def test_high_util_low_sm_at_its_boundaries(utilization, sm_active, fires):
    busy, sm = percent(utilization), percent(sm_active)
    assert mismatch(busy, sm, efficiency(busy, sm), LIMITS)["high_util_low_sm"] is fires


@pytest.mark.parametrize(("utilization", "ratio", "fires"), [
    (50, 0.29, True),  # exactly 50 % utilization is enough (>=)
    (49, 0.29, False),
    (50, 0.30, False),  # an efficiency of exactly 0.3 is not low (<)
])
def test_low_efficiency_at_its_boundaries(utilization, ratio, fires):
    assert mismatch(percent(utilization), 0.0, ratio, LIMITS)["low_efficiency"] is fires


def test_efficiency_is_absent_at_zero_utilization_and_clamped_at_one():
    assert efficiency(0.0, 0.0) is None and efficiency(None, 0.5) is None
    assert efficiency(percent(50), percent(60)) == 1.0  # SM activity a hair above utilization (sampling skew)


def busy(utilization: int, **readings: float) -> str:
    return classify(Activity(busy=percent(utilization), **readings), BOTTLENECK)


def test_idle_and_host_at_their_boundaries():
    assert busy(0) == "unknown" and busy(1) == "host"  # without profiling nothing says no kernel ran; any engine work says it had work
    assert busy(4, sm_active=0.0) == "idle" and busy(5, sm_active=0.0) == "host"  # copy engines alone: idle below 5 %, not at it
    assert busy(4, sm_active=0.0) == "idle" and busy(4, sm_active=0.00001) == "host"  # a kernel ran: starved, not idle
    assert busy(0, sm_active=0.0001) == "host"  # kernels too short for the driver's samples are kernels
    assert busy(79, sm_active=0.75, pipes=0.75) == "host" and busy(80, sm_active=0.75, pipes=0.75) == "compute"  # host below 80 %
    assert busy(49, sm_active=0.45) == "host"  # waits longer than it works: host whatever the kernels do
    assert busy(60, sm_active=0.55, dram=0.12) == "memory_latency"  # the gaps (0.4) cost less than the kernels' headroom (0.45)
    assert busy(60, sm_active=0.55, dram=0.35) == "host"  # ... and more where the kernels run near the DRAM roof


def test_memory_compute_and_underfilled_at_their_boundaries():
    assert busy(100, sm_active=0.9, dram=0.65, pipes=0.65) == "memory"  # DRAM at exactly 0.65 and on the memory side
    assert busy(100, sm_active=0.9, dram=0.7, pipes=0.8) == "compute"  # the pipe nearer its roof (0.89 against 0.875)
    assert busy(100, sm_active=0.9, dram=0.64, pipes=0.1) == "memory_latency"  # below the roof band
    assert busy(100, sm_active=0.9, dram=0.1, pipes=0.1) == "memory_latency"  # DRAM at exactly 0.1, on the memory side
    assert busy(100, sm_active=0.9, dram=0.09, pipes=0.1) == "mixed"
    assert busy(100, sm_active=0.5, pipes=0.2) == "compute"  # pipe at exactly 0.2 with SM activity at exactly 0.5
    assert busy(100, sm_active=0.49, pipes=0.2) == "underfilled"
    assert busy(100, sm_active=0.49, link=0.3) == "communication"  # a link at exactly 30 % of its peak
    assert busy(100, sm_active=0.5, link=0.3, pipes=0.3) == "compute"  # SMs busy with a math pipe at work beside the link
    assert busy(100, sm_active=0.49, link=0.3, pipes=0.3) == "communication"
    assert busy(100, sm_active=0.5, link=0.3) == "communication"  # SMs busy, the link the only unit working: the warps wait on it
    assert busy(100, sm_active=0.9, link=0.1, pipes=0.09, dram=0.09) == "communication"  # at transfer_link, the rest below it
    assert busy(100, sm_active=0.9, link=0.099, pipes=0.09) == "mixed"
    assert busy(100, sm_active=0.9, link=0.3, pipes=0.1) == "mixed"  # a math pipe at a tenth of its peak is work the link does not explain


def test_latency_at_its_boundaries():
    assert busy(100, sm_active=0.99, sm_occupancy=0.09, pipes=0.19, dram=0.19) == "latency"
    assert busy(100, sm_active=0.99, sm_occupancy=0.1, pipes=0.19) == "mixed"  # occupancy of exactly 0.1 is not low
    assert busy(100, sm_active=0.99, sm_occupancy=0.09, pipes=0.2) == "compute"
