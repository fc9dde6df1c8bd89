"""The fair split of a shared GPU among its holders (pods, Slurm jobs, users' programs).

Each poll, every holder's weight is the sum of its processes' NVML per-process ``smUtil`` samples
taken since the previous poll: the time its kernels occupied the GPU. The GPU's increments of busy
time, SM-active time and busy-but-idle time over the same window are split in proportion to those
weights, so the holders' counters add up to the GPU's own counters exactly; so is each window's
time in its state (pipeline/states.py), but for free time, which no one holds. Energy is split the
same way, window by window, in proportion to the polled power; where no holder ran in a window, its
energy goes to ``unattributed``. The method and its limits are in docs/sharing.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpueff.attribution.holders import UNATTRIBUTED, Holder, HolderResolver, ProcessIdentity
from gpueff.attribution.slurm import SlurmJob
from gpueff.pipeline.energy import EnergySplit
from gpueff.pipeline.states import FREE, HELD_IDLE, NO_TIME, UNKNOWN, plus
from gpueff.pipeline.totals import Growth
from gpueff.sample import GpuSample

FORGET_AFTER_SECONDS = 300.0  # a holder not seen on a GPU for this long has its counters dropped
MAX_HOLDERS_PER_GPU = 64  # beyond this many holders on one GPU, new ones are counted as unattributed
MAX_NAMES_PER_USER = 8  # one user's program names on one GPU kept apart; its further ones share its user holder


def present_holders(sample: GpuSample, identities: Mapping[int, ProcessIdentity]) -> frozenset[Holder]:
    """The holders of the processes NVML lists on the GPU at this poll."""
    return frozenset(identities[process.pid].holder for process in sample.processes or () if process.pid in identities)


def window_shares(sample: GpuSample, identities: Mapping[int, ProcessIdentity], state: str | None = None, before: frozenset[Holder] | None = None) -> dict[Holder, float]:
    """Each holder's share (summing to 1) of the GPU's busy time in this poll's window.

    Where NVML gave per-process samples, shares follow their summed ``sm``. Without samples (none
    in the window, or the call unsupported, as on MIG devices) a window in ``state`` held_idle (no
    kernel ran) is shared equally by the holders present, each of which holds the GPU through it; a
    GPU that one holder held alone at both ends of the window (``before``: the holders of the poll
    before, None where there was none) is that holder's; otherwise the window is ``unattributed``.
    A busy window in which a holder left is never the remaining one's: its kernels may be the one
    that left (on an H200 a tenant's last quarter second, its samples gone with it, went to the
    other tenant's holder before).
    """
    weights: dict[Holder, float] = {}
    for entry in sample.process_utilization or ():
        if entry.sm > 0:
            holder = identities[entry.pid].holder if entry.pid in identities else UNATTRIBUTED
            weights[holder] = weights.get(holder, 0.0) + entry.sm
    total = sum(weights.values())
    if total > 0:
        return {holder: weight / total for holder, weight in weights.items()}
    present = present_holders(sample, identities)
    if present and state == HELD_IDLE:
        return dict.fromkeys(present, 1 / len(present))
    if len(present) == 1 and (before is None or before <= present):
        return dict.fromkeys(present, 1.0)
    return {UNATTRIBUTED: 1.0}


@dataclass(slots=True)
class HolderTotals:
    """One holder's attributed counters on one GPU since the daemon started (or it reappeared)."""

    busy_seconds: float = 0.0
    sm_active_seconds: float = 0.0
    busy_idle_sm_seconds: float = 0.0
    energy_joules: float = 0.0
    last_seen: float = 0.0
    state_seconds: tuple[float, ...] = NO_TIME  # in STATES order; free stays 0 (no one holds a free GPU)
    state_cost: tuple[float, ...] = NO_TIME
    state_joules: tuple[float, ...] = NO_TIME  # free: the unattributed holder's energy of windows no one held


@dataclass(slots=True)
class GpuLedger:
    """One GPU's per-holder attributed counters, fed once per poll (kept by the GPU's tracker)."""

    holders: dict[Holder, HolderTotals] = field(default_factory=dict)
    last_timestamp: float | None = None
    present: frozenset[Holder] | None = None  # the holders listed at the last poll that read the GPU; None before one
    energy: EnergySplit[tuple[Holder, str]] = field(default_factory=EnergySplit)  # by holder and the state it held the GPU in

    def add(self, sample: GpuSample, shares: Mapping[Holder, float], delta: Growth, max_gap: float) -> dict[Holder, HolderTotals]:
        shares = _capped(shares, self.holders)
        now = sample.timestamp
        previous, self.last_timestamp = self.last_timestamp, (now if sample.up else None)
        if not sample.up:
            return self.holders
        held = delta.state if delta.state != FREE else None  # the state the holders held the GPU in; None: no one held it
        nothing = delta.busy_seconds == delta.sm_active_seconds == delta.busy_idle_sm_seconds == 0 and held is None
        for holder, share in shares.items():
            if nothing and holder not in self.holders:
                continue  # no series for a holder until something is attributed to it
            totals = self.holders.setdefault(holder, HolderTotals())
            totals.last_seen = now
            totals.busy_seconds += share * delta.busy_seconds
            totals.sm_active_seconds += share * delta.sm_active_seconds
            totals.busy_idle_sm_seconds += share * delta.busy_idle_sm_seconds
            if held is not None:
                totals.state_seconds = plus(totals.state_seconds, held, share * delta.elapsed)
                totals.state_cost = plus(totals.state_cost, held, share * delta.cost)
        if previous is not None and 0 < now - previous <= max_gap and sample.power_watts is not None:
            window_energy = sample.power_watts * (now - previous)
            for holder, share in shares.items():
                self.energy.accrue((holder, delta.state or UNKNOWN), share * window_energy)
        for (holder, state), joules in self.energy.settle(sample.energy_joules, (UNATTRIBUTED, UNKNOWN)).items():
            totals = self.holders.setdefault(holder, HolderTotals(last_seen=now))
            totals.energy_joules += joules
            totals.state_joules = plus(totals.state_joules, state, joules)
        for holder in [holder for holder, totals in self.holders.items() if now - totals.last_seen > FORGET_AFTER_SECONDS]:
            del self.holders[holder]
        return self.holders


def _capped(shares: Mapping[Holder, float], known: Mapping[Holder, HolderTotals]) -> dict[Holder, float]:
    """The shares with a user's program names beyond MAX_NAMES_PER_USER on this GPU folded into that
    user's own ``user`` holder, then holders beyond MAX_HOLDERS_PER_GPU into unattributed: one
    user's many names take at most its own few slots, never another owner's, and the series stay
    bounded."""
    names = Counter(holder.user for holder in known if holder.kind == "process")
    room = MAX_HOLDERS_PER_GPU - len(known) - (UNATTRIBUTED not in known)
    capped: dict[Holder, float] = {}
    for holder, share in sorted(shares.items(), key=lambda item: -item[1]):
        if holder.kind == "process" and holder not in known:
            if names[holder.user] >= MAX_NAMES_PER_USER:
                holder = Holder("user", "", holder.user)
            else:
                names[holder.user] += 1
        if holder not in known and holder not in capped and holder != UNATTRIBUTED:
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

    def __init__(self, proc_root: Path, names: bool = True) -> None:
        self.resolver = HolderResolver(proc_root, names)

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
        holders = ledger.add(sample, window_shares(sample, identities, delta.state, ledger.present), delta, max_gap)
        ledger.present = present_holders(sample, identities) if sample.up else None
        jobs = {identities[p.pid].job for p in sample.processes or () if p.pid in identities and identities[p.pid].job is not None}
        copies = tuple(sorted((holder, replace(totals)) for holder, totals in holders.items()))
        return GpuSharing(copies, tuple(sorted({SlurmJob(job.job_id, user_id=job.user_id) for job in jobs if job is not None})))
