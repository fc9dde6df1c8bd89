"""Per-GPU state across polls that keeps every derived figure on one window and the class steady.

- Instant readings (SM clock, power) are snapshots at the poll; the window they are combined with
  runs from the previous poll to this one, so the figure used is the mean of the readings at both
  ends of it (where the previous reading opened this window).
- The bottleneck class is judged from the time-weighted mean of the windows of the last
  ``bottleneck.window`` seconds (at least this poll's), and a new class is reported only once it
  has won ``bottleneck.hold_polls`` polls in a row: a duty-cycled or data-starved job whose
  windows swing between busy and idle reads ``host`` steadily instead of flapping. Leaving
  ``unknown`` (the first poll has no profiling window yet) needs no hold.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from exporter.sample import GpuSample
from exporter.taxonomy import Activity, BottleneckThresholds, classify, mean_activity

WINDOW_START_TOLERANCE = 0.05  # seconds between the previous reading and the start of this window
MAX_WINDOWS = 600  # a bound on the history, whatever the span and interval


@dataclass
class WindowState:
    """One GPU's recent readings; feed it every up sample in order, ``reset()`` when it goes down."""

    previous: GpuSample | None = None
    windows: deque[tuple[float, Activity]] = field(default_factory=lambda: deque(maxlen=MAX_WINDOWS))  # (seconds, activity), oldest first
    reported: str | None = None
    challenger: str | None = None
    wins: int = 0

    def reset(self) -> None:
        self.previous, self.reported, self.challenger, self.wins = None, None, None, 0
        self.windows.clear()

    def opened_by_previous(self, sample: GpuSample) -> bool:
        previous, window = self.previous, sample.window_seconds
        return previous is not None and window is not None and abs(sample.timestamp - window - previous.timestamp) <= WINDOW_START_TOLERANCE

    def window_mean(self, sample: GpuSample, attribute: str) -> float | None:
        """The mean of an instant reading at both ends of the window, or this poll's where the start is unknown."""
        now: float | None = getattr(sample, attribute)
        start: float | None = getattr(self.previous, attribute) if self.opened_by_previous(sample) else None
        return now if now is None or start is None else (now + start) / 2

    def judge(self, sample: GpuSample, window: Activity, flagged: bool, limits: BottleneckThresholds) -> str:
        """Add this window and return the class to report."""
        seconds = sample.window_seconds
        if seconds is None:  # no profiling window (NVML only): the time since the previous poll
            seconds = sample.timestamp - self.previous.timestamp if self.previous is not None else 0.0
        if flagged:
            candidate = "unknown"
        else:
            self.windows.append((seconds, window))
            candidate = classify(self.smoothed(limits.window), limits)
        self.previous = sample
        if self.reported in (None, "unknown") or candidate == self.reported:  # a first verdict needs no hold
            self.reported, self.challenger, self.wins = candidate, None, 0
        elif candidate == self.challenger:
            self.wins += 1
        else:
            self.challenger, self.wins = candidate, 1
        if self.challenger is not None and self.wins >= limits.hold_polls:
            self.reported, self.challenger, self.wins = self.challenger, None, 0
        return self.reported

    def smoothed(self, span: float) -> Activity:
        """The mean of the newest windows that together cover ``span`` seconds (at least the newest)."""
        kept: list[tuple[float, Activity]] = []
        covered = 0.0
        for seconds, activity in reversed(self.windows):
            if kept and covered >= span:
                break
            kept.append((seconds, activity))
            covered += seconds
        while len(self.windows) > len(kept):
            self.windows.popleft()
        return mean_activity(kept) if len(kept) > 1 else kept[0][1]


@dataclass
class WindowStates:
    """The WindowState of every GPU, by uuid."""

    states: dict[str, WindowState] = field(default_factory=dict)

    def of(self, sample: GpuSample) -> WindowState:
        state = self.states.setdefault(sample.device.uuid, WindowState())
        if not sample.up:
            state.reset()
        return state

    def forget_except(self, uuids: set[str]) -> None:
        for uuid in set(self.states) - uuids:
            del self.states[uuid]
