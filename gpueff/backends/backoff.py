"""The one back-off every retry loop uses: NVML re-initialisation, DCGM reconnection, waiting for the driver."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Backoff:
    """A wait that starts at ``first`` and doubles on each ``grow`` up to ``largest``."""

    first: float
    largest: float
    wait: float = field(init=False)

    def __post_init__(self) -> None:
        self.wait = self.first

    def grow(self) -> float:
        """Double the wait (up to ``largest``) and return it."""
        self.wait = min(self.wait * 2, self.largest)
        return self.wait

    def reset(self) -> None:
        self.wait = self.first
