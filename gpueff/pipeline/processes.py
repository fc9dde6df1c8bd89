"""Each GPU's compute processes as a person looks at them (the live page, ``top``) and as the
``per_process`` collector exports them: PID, Unix user, program name, device memory, share of the
GPU's busy time in the poll window, and owner (the fair split's holder: pod, Slurm job, or on a
bare host the Unix user).

Bounded whatever the node runs: at most MAX_PROCESSES rows per GPU, the most memory first (then
the largest share, then the lowest PID); the rest are summed into one ``other`` entry. Names are
shown only where ``process_names`` allows (a process of a user holder is then its uid alone).
Pure: the sample and the processes' identities in, rows out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpueff.attribution.holders import UNATTRIBUTED, Holder, ProcessIdentity
from gpueff.metrics import MAX_PROCESSES
from gpueff.sample import GpuSample


@dataclass(frozen=True, slots=True)
class ProcessRow:
    pid: int
    user_id: str  # the real uid in decimal; "" where it cannot be read
    name: str  # the program's name; "" where process_names is false or it cannot be read
    memory_bytes: float | None  # None where the driver does not say
    busy_share: float | None  # share of the GPU's busy time in the window (0..1); None where per-process samples are not read
    holder_kind: str  # attribution/holders.py's HOLDER_KINDS
    holder: str  # the holder label: the pod UID, the Slurm job id, <uid>[:<name>], "" for unattributed


@dataclass(frozen=True, slots=True)
class GpuProcesses:
    rows: tuple[ProcessRow, ...] = ()
    others: int = 0  # processes beyond MAX_PROCESSES, summed below (top --url: 0 where the page does not say how many)
    others_memory_bytes: float | None = None
    others_busy_share: float | None = None

    @property
    def rest(self) -> bool:
        """Some processes are summed rather than listed."""
        return self.others > 0 or self.others_memory_bytes is not None or self.others_busy_share is not None


def _shares(sample: GpuSample) -> dict[int, float] | None:
    """PID -> its share of the window's per-process samples (the time its kernels ran); {} where
    none ran; None where the samples are not read."""
    if sample.process_utilization is None:
        return None
    weights: dict[int, float] = {}
    for entry in sample.process_utilization:
        if entry.sm > 0:
            weights[entry.pid] = weights.get(entry.pid, 0.0) + entry.sm
    total = sum(weights.values())
    return {pid: weight / total for pid, weight in weights.items()} if total > 0 else {}


def _sum(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def gpu_processes(sample: GpuSample, identities: Mapping[int, ProcessIdentity], names: bool, limit: int = MAX_PROCESSES) -> GpuProcesses | None:
    """The GPU's processes, bounded; None where the backend does not list them or the GPU is down."""
    if sample.processes is None or not sample.up:
        return None
    shares = _shares(sample)
    rows = []
    for process in {process.pid: process for process in sample.processes}.values():  # a PID listed twice is one process
        identity = identities.get(process.pid, ProcessIdentity(UNATTRIBUTED))
        holder = identity.holder
        if not names and holder.kind == "process":
            holder = Holder("user", "", holder.user)
        share = None if shares is None else shares.get(process.pid, 0.0)
        rows.append(ProcessRow(process.pid, identity.user_id, identity.name if names else "", process.memory_bytes, share, holder.kind, holder.label))
    rows.sort(key=lambda row: (-(row.memory_bytes or 0.0), -(row.busy_share or 0.0), row.pid))
    kept, rest = rows[:limit], rows[limit:]
    if not rest:
        return GpuProcesses(tuple(kept))
    return GpuProcesses(tuple(kept), len(rest), _sum([row.memory_bytes for row in rest]), _sum([row.busy_share for row in rest]))
