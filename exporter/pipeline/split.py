"""The fair split of a shared GPU among its holders (pods, Slurm jobs, named processes).

Each poll, every holder's weight is the sum of its processes' NVML per-process ``smUtil`` samples
taken since the previous poll: the time its kernels occupied the GPU. The GPU's increments of busy
time, SM-active time and busy-but-idle time over the same window are split in proportion to those
weights, so the holders' counters add up to the GPU's own counters exactly. Energy is split the
same way, window by window, in proportion to the polled power; where no holder ran in a window, its
energy goes to ``unattributed``. The method and its limits are in docs/sharing.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from exporter.attribution.holders import UNATTRIBUTED, Holder, HolderResolver, ProcessIdentity
from exporter.attribution.slurm import SlurmJob
from exporter.pipeline.totals import Growth
from exporter.sample import GpuSample

FORGET_AFTER_SECONDS = 300.0  # a holder not seen on a GPU for this long has its counters dropped
MAX_HOLDERS_PER_GPU = 64  # beyond this many holders on one GPU, new ones are counted as unattributed


def window_shares(sample: GpuSample, identities: Mapping[int, ProcessIdentity]) -> dict[Holder, float]:
    """Each holder's share (summing to 1) of the GPU's busy time in this poll's window.

    Where NVML gave per-process samples, shares follow their summed ``sm``. Without samples (none
    in the window, or the call unsupported, as on MIG devices) a GPU whose processes all belong to
    one holder is that holder's; otherwise the window is ``unattributed``.
    """
    weights: dict[Holder, float] = {}
    for entry in sample.process_utilization or ():
        if entry.sm > 0:
            holder = identities[entry.pid].holder if entry.pid in identities else UNATTRIBUTED
            weights[holder] = weights.get(holder, 0.0) + entry.sm
    total = sum(weights.values())
    if total > 0:
        return {holder: weight / total for holder, weight in weights.items()}
    present = {identities[process.pid].holder for process in sample.processes or () if process.pid in identities}
    if len(present) == 1:
        return {present.pop(): 1.0}
    return {UNATTRIBUTED: 1.0}


@dataclass(slots=True)
class HolderTotals:
    """One holder's attributed counters on one GPU since the daemon started (or it reappeared)."""

    busy_seconds: float = 0.0
    sm_active_seconds: float = 0.0
    busy_idle_sm_seconds: float = 0.0
    energy_joules: float = 0.0
    last_seen: float = 0.0


@dataclass(slots=True)
class GpuLedger:
    """One GPU's per-holder attributed counters, fed once per poll (kept by the GPU's tracker)."""

    holders: dict[Holder, HolderTotals] = field(default_factory=dict)
    last_timestamp: float | None = None
    last_energy: float | None = None
    pending_energy: dict[Holder, float] = field(default_factory=dict)  # power x time since the energy counter last moved

    def add(self, sample: GpuSample, shares: Mapping[Holder, float], delta: Growth, max_gap: float) -> dict[Holder, HolderTotals]:
        shares = _capped(shares, self.holders)
        now = sample.timestamp
        previous, self.last_timestamp = self.last_timestamp, (now if sample.up else None)
        if not sample.up:
            return self.holders
        nothing = delta.busy_seconds == delta.sm_active_seconds == delta.busy_idle_sm_seconds == 0
        for holder, share in shares.items():
            if nothing and holder not in self.holders:
                continue  # no series for a holder until something is attributed to it
            totals = self.holders.setdefault(holder, HolderTotals())
            totals.last_seen = now
            totals.busy_seconds += share * delta.busy_seconds
            totals.sm_active_seconds += share * delta.sm_active_seconds
            totals.busy_idle_sm_seconds += share * delta.busy_idle_sm_seconds
        if previous is not None and 0 < now - previous <= max_gap and sample.power_watts is not None:
            window_energy = sample.power_watts * (now - previous)
            for holder, share in shares.items():
                self.pending_energy[holder] = self.pending_energy.get(holder, 0.0) + share * window_energy
        self._settle_energy(sample.energy_joules, now)
        for holder in [holder for holder, totals in self.holders.items() if now - totals.last_seen > FORGET_AFTER_SECONDS]:
            del self.holders[holder]
        return self.holders

    def _settle_energy(self, energy: float | None, now: float) -> None:
        """Split each advance of the GPU's energy counter over the holders by the power-weighted
        time they held it since the previous advance (the counter is read at the slow cadence)."""
        if energy is None:
            return
        last, self.last_energy = self.last_energy, energy
        if last is None or energy < last:  # the first reading, or the driver's counter restarted
            self.pending_energy.clear()
            return
        if energy == last:
            return
        pending = self.pending_energy
        total = sum(pending.values())
        parts = {holder: weight / total for holder, weight in pending.items()} if total > 0 else {UNATTRIBUTED: 1.0}
        for holder, part in parts.items():
            totals = self.holders.setdefault(holder, HolderTotals(last_seen=now))
            totals.energy_joules += part * (energy - last)
        pending.clear()


def _capped(shares: Mapping[Holder, float], known: Mapping[Holder, HolderTotals]) -> dict[Holder, float]:
    """The shares with holders beyond MAX_HOLDERS_PER_GPU folded into unattributed, so that many
    differently named processes cannot grow the series without bound."""
    room = MAX_HOLDERS_PER_GPU - len(known) - (UNATTRIBUTED not in known)
    capped: dict[Holder, float] = {}
    for holder, share in sorted(shares.items(), key=lambda item: -item[1]):
        if holder not in known and holder != UNATTRIBUTED:
            if room <= 0:
                holder = UNATTRIBUTED
            else:
                room -= 1
        capped[holder] = capped.get(holder, 0.0) + share
    return capped


@dataclass(frozen=True, slots=True)
class GpuSharing:
    """What the fair split found for one GPU this poll: each holder's counters, and the Slurm jobs
    its processes run in."""

    holders: tuple[tuple[Holder, HolderTotals], ...] = ()
    jobs: tuple[SlurmJob, ...] = ()


class Sharing:
    """Identifies every GPU process once per poll (one per daemon); each GPU's ledger is its tracker's."""

    def __init__(self, proc_root: Path) -> None:
        self.resolver = HolderResolver(proc_root)

    def identities(self, samples: Iterable[GpuSample]) -> dict[int, ProcessIdentity]:
        """PID -> identity for the processes listed or sampled on any GPU this poll."""
        names: dict[int, str] = {}
        for sample in samples:
            for process in sample.processes or ():
                names[process.pid] = process.name
            for entry in sample.process_utilization or ():
                names.setdefault(entry.pid, "")
        return self.resolver.resolve(names.items())

    @staticmethod
    def split(ledger: GpuLedger, sample: GpuSample, identities: Mapping[int, ProcessIdentity], delta: Growth, max_gap: float) -> GpuSharing:
        """Add this poll's growth to the GPU's ledger, shared among its holders; what they hold now."""
        holders = ledger.add(sample, window_shares(sample, identities), delta, max_gap)
        jobs = {identities[p.pid].job for p in sample.processes or () if p.pid in identities and identities[p.pid].job is not None}
        copies = tuple(sorted((holder, replace(totals)) for holder, totals in holders.items()))
        return GpuSharing(copies, tuple(sorted({SlurmJob(job.job_id, user_id=job.user_id) for job in jobs if job is not None})))
