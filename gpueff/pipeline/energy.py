"""The split of a GPU's energy counter: each advance divided among keys (holders, states) in
proportion to the power x time each accrued since the previous advance. The counter is exact but
read at the slow cadence; the power is read every poll, so it only weighs the split, and the parts
of every advance add up to the advance itself."""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")


class EnergySplit(Generic[K]):
    def __init__(self) -> None:
        self.pending: dict[K, float] = {}  # power x time per key since the counter last moved
        self.last: float | None = None

    def accrue(self, key: K, weight: float) -> None:
        self.pending[key] = self.pending.get(key, 0.0) + weight

    def settle(self, energy: float | None, fallback: K) -> dict[K, float]:
        """The joules each key takes of the counter's advance to ``energy`` (none where it did not
        move, on its first reading, or where the driver's counter restarted); an advance no power
        was accrued for goes to ``fallback``."""
        if energy is None:
            return {}
        last, self.last = self.last, energy
        if last is None or energy < last:
            self.pending.clear()
            return {}
        if energy == last:
            return {}
        total = sum(self.pending.values())
        parts = {key: weight / total for key, weight in self.pending.items()} if total > 0 else {fallback: 1.0}
        self.pending.clear()
        return {key: part * (energy - last) for key, part in parts.items()}
