"""Everything the daemon keeps across polls for one GPU, in one place: its smoothing (window-mean
clock and power, the steady class), its time totals with the split of its energy by state and,
while the fair split is on, its ledger of holders. One ``forget`` drops all of it when the GPU is
gone (a MIG device re-created under a new UUID, a GPU that falls off the bus), so nothing grows
with the GPUs ever seen."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from gpueff.attribution.holders import ProcessIdentity
from gpueff.pipeline.derive import DEFAULTS, Derived, DeriveSettings, step
from gpueff.pipeline.energy import EnergySplit
from gpueff.pipeline.smoothing import Smoothing
from gpueff.pipeline.split import GpuLedger, GpuSharing, Sharing
from gpueff.pipeline.states import UNKNOWN, plus
from gpueff.pipeline.totals import Growth, Totals, integrate
from gpueff.sample import GpuSample

START = Smoothing()


@dataclass(frozen=True, slots=True)
class TrackerSettings:
    """What a tracker takes of the config: the derivation's settings, the longest gap between two
    samples still counted in the time totals (the staleness), and the price of a GPU-hour."""

    stale_after: float
    price_per_gpu_hour: float | None = None
    derive: DeriveSettings = DEFAULTS


@dataclass(slots=True)
class GpuTracker:
    """One GPU's state across polls; ``advance`` takes its next sample."""

    smoothing: Smoothing = START
    totals: Totals = field(default_factory=Totals)
    ledger: GpuLedger | None = None  # while the fair split is on
    energy: EnergySplit[str] = field(default_factory=EnergySplit)  # the energy counter's advances by state

    def advance(self, sample: GpuSample, settings: TrackerSettings, sharing: Sharing | None, identities: Mapping[int, ProcessIdentity]) -> tuple[Derived | None, Totals, GpuSharing | None]:
        """Derive, integrate and (with ``sharing``) split one sample; the state moves on by one poll."""
        derived: Derived | None = None
        if sample.up:
            derived, following = step(sample, settings.derive, self.smoothing)
            self.smoothing = following or START
        else:
            self.smoothing = START  # a GPU that comes back starts its windows afresh
        max_gap = settings.stale_after
        self.totals, growth = integrate(self.totals, sample, derived, max_gap, settings.price_per_gpu_hour)
        self._split_energy(sample, growth)
        split = None
        if sharing is None:
            self.ledger = None
        elif sample.processes is not None:
            if self.ledger is None:
                self.ledger = GpuLedger()
            split = sharing.split(self.ledger, sample, identities, growth, max_gap)
        return derived, self.totals, split

    def _split_energy(self, sample: GpuSample, growth: Growth) -> None:
        """Weigh the window's state by power x time, and split any advance of the energy counter by
        those weights: the states' joules add up to the counter's advances since the start (an
        advance over time no window observed goes to unknown)."""
        if growth.state is not None and sample.power_watts is not None:
            self.energy.accrue(growth.state, sample.power_watts * growth.elapsed)
        settled = self.energy.settle(sample.energy_joules if sample.up else None, UNKNOWN)
        if settled:
            joules = self.totals.state_joules
            for state, part in settled.items():
                joules = plus(joules, state, part)
            self.totals = replace(self.totals, state_joules=joules)

    def keep(self, totals: Totals) -> None:
        """Take the totals as the cross-GPU stage left them (pipeline/peers.py ``across_gpus``: the
        time lost waiting on a slower GPU of its job counted): the next poll integrates on from them."""
        self.totals = totals


@dataclass
class Trackers:
    """The tracker of every GPU present, by UUID."""

    gpus: dict[str, GpuTracker] = field(default_factory=dict)

    def of(self, uuid: str) -> GpuTracker:
        tracker = self.gpus.get(uuid)
        if tracker is None:
            tracker = self.gpus[uuid] = GpuTracker()
        return tracker

    def forget(self, present: Collection[str]) -> None:
        """Drop every GPU not in ``present``: all of its state at once."""
        for uuid in [uuid for uuid in self.gpus if uuid not in present]:
            del self.gpus[uuid]

    def restart_split(self) -> None:
        """Start every GPU's ledger afresh (the fair split was switched on again or its /proc moved)."""
        for tracker in self.gpus.values():
            tracker.ledger = None

    def __len__(self) -> int:
        return len(self.gpus)
