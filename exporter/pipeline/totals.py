"""The time integrals behind the busy-but-idle counters: the one stateful part of the derivations."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.pipeline.derive import Derived
from exporter.sample import GpuSample


@dataclass(slots=True)
class Totals:
    """Time integrals of one GPU since the daemon started (Prometheus counters)."""

    busy_seconds: float = 0.0  # integral of coarse utilization
    sm_active_seconds: float = 0.0  # integral of SM activity
    busy_idle_sm_seconds: float = 0.0  # integral of max(0, utilization - SM activity), not while the counters are implausible
    busy_idle_sm_cost: float = 0.0  # the same in money, at the price in force at the time
    last_timestamp: float | None = None


@dataclass
class Integrator:
    """Integrates each GPU's ratios over the time between its consecutive up samples.

    A gap longer than ``max_gap`` (the GPU was down or the poller stalled) is not integrated:
    nothing is invented for time that was not observed.
    """

    max_gap: float
    totals: dict[str, Totals] = field(default_factory=dict)

    def add(self, sample: GpuSample, derived: Derived | None, price_per_gpu_hour: float | None = None) -> Totals:
        totals = self.totals.setdefault(sample.device.uuid, Totals())
        if not sample.up or derived is None:
            totals.last_timestamp = None
            return totals
        previous, totals.last_timestamp = totals.last_timestamp, sample.timestamp
        if previous is None:
            return totals
        elapsed = sample.timestamp - previous
        if not 0 < elapsed <= self.max_gap:
            return totals
        sm_active = sample.profiling.sm_active
        if derived.busy is not None:
            totals.busy_seconds += derived.busy * elapsed
        if sm_active is not None:
            totals.sm_active_seconds += sm_active * elapsed
        if derived.busy is not None and sm_active is not None and not derived.counters_implausible:
            wasted = max(0.0, derived.busy - sm_active) * elapsed
            totals.busy_idle_sm_seconds += wasted
            if price_per_gpu_hour is not None:
                totals.busy_idle_sm_cost += wasted * price_per_gpu_hour / 3600
        return totals

    def forget_except(self, uuids: set[str]) -> None:
        """Drop the totals of GPUs that are gone for good (not merely down)."""
        for uuid in set(self.totals) - uuids:
            del self.totals[uuid]
