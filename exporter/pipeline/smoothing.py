"""One GPU's state across polls that keeps every derived figure on one window and the class steady.
Immutable: each poll makes the next state from the previous one (``judge``).

- Instant readings (SM clock, power) are snapshots at the poll; the window they are combined with
  runs from the previous poll to this one, so the figure used is the mean of the readings at both
  ends of it (where the previous reading opened this window).
- The bottleneck class is judged from the time-weighted mean of the windows of the last
  ``bottleneck.window`` seconds (at least this poll's), and a new class is reported only once it
  has won ``bottleneck.hold_polls`` polls in a row, and only where the class in place would not be
  chosen with any one reading moved by ``bottleneck.margin`` (a band around every threshold): a
  job sitting on a threshold keeps one verdict, and a duty-cycled or data-starved job whose
  windows swing between busy and idle reads ``host`` steadily instead of flapping. While the
  windows since the GPU came up span less than ``bottleneck.window``, the verdict is provisional:
  it follows the growing mean without band or hold, so that the noise of the first window alone
  is not what the band then keeps for the job's life (a job a point above a threshold, noise
  of two points on its first window below it, would read the other class for good). Leaving
  ``unknown`` (the first poll has no profiling window yet) needs no hold, nor leaving ``idle`` once
  the readings show a kernel ran: ``idle`` is a fact (no kernel ran), and then no longer true.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.sample import GpuSample
from exporter.taxonomy import (
    ACTIVITY_FIELDS,
    Activity,
    BottleneckThresholds,
    activity_values,
    classes_within_margin,
    classify,
    kernels_ran,
)

WINDOW_START_TOLERANCE = 0.05  # seconds between the previous reading and the start of this window
MAX_WINDOWS = 600  # a bound on the history, whatever the span and interval
NO_COLUMNS: tuple[tuple[float, ...], ...] = ((),) * len(ACTIVITY_FIELDS)


@dataclass(frozen=True, slots=True)
class Smoothing:
    """One GPU's recent readings: made from every up sample in order, started afresh when it goes down."""

    previous: GpuSample | None = None
    # The recent windows, newest first: each one's length, and per Activity reading (ACTIVITY_FIELDS)
    # a column of its weight (the length where the reading was read, else 0.0) and of weight x reading.
    seconds: tuple[float, ...] = ()
    weights: tuple[tuple[float, ...], ...] = NO_COLUMNS
    products: tuple[tuple[float, ...], ...] = NO_COLUMNS
    reported: str | None = None
    challenger: str | None = None
    wins: int = 0
    settled: bool = False  # the class in place was judged from a mean spanning the whole window

    def opened_by_previous(self, sample: GpuSample) -> bool:
        previous, window = self.previous, sample.window_seconds
        return previous is not None and window is not None and abs(sample.timestamp - window - previous.timestamp) <= WINDOW_START_TOLERANCE

    def window_mean(self, sample: GpuSample, attribute: str) -> float | None:
        """The mean of an instant reading at both ends of the window, or this poll's where the start is unknown."""
        now: float | None = getattr(sample, attribute)
        start: float | None = getattr(self.previous, attribute) if self.opened_by_previous(sample) else None
        return now if now is None or start is None else (now + start) / 2

    def judge(self, sample: GpuSample, window: Activity, flagged: bool, limits: BottleneckThresholds) -> tuple[str, Smoothing]:
        """The class to report with this window added, and the state after it."""
        seconds = sample.window_seconds
        if seconds is None:  # no profiling window (NVML only): the time since the previous poll
            seconds = sample.timestamp - self.previous.timestamp if self.previous is not None else 0.0
        lengths, weights, products = self.seconds, self.weights, self.products
        ran: bool | None = None
        if flagged:
            candidate = "unknown"
        else:
            lengths = recent((seconds, *lengths[: MAX_WINDOWS - 1]), limits.window)
            older = len(lengths) - 1
            readings = activity_values(window)
            weights = tuple((0.0 if value is None else seconds, *column[:older]) for value, column in zip(readings, weights, strict=True))
            products = tuple((0.0 if value is None else seconds * value, *column[:older]) for value, column in zip(readings, products, strict=True))
            mean = Activity(*map(weighted_mean, products, weights)) if older else window
            candidate, ran = classify(mean, limits), kernels_ran(mean)
            if self.settled and candidate != self.reported and self.reported in classes_within_margin(mean, limits, limits.margin):
                candidate = self.reported  # the readings sit on a threshold's edge: the verdict in place stands
        reported, challenger, wins = self.reported, self.challenger, self.wins
        if reported in (None, "unknown") or not self.settled or candidate == reported or (reported == "idle" and ran):  # a provisional verdict in place, or kernels ran under "idle": no hold
            reported, challenger, wins = candidate, None, 0
        elif candidate == challenger:
            wins += 1
        else:
            challenger, wins = candidate, 1
        if challenger is not None and wins >= limits.hold_polls:
            reported, challenger, wins = challenger, None, 0
        settled = sum(lengths) >= limits.window or len(lengths) == MAX_WINDOWS  # the mean spans all it will: no better estimate comes
        return reported, Smoothing(sample, lengths, weights, products, reported, challenger, wins, settled)


def weighted_mean(products: tuple[float, ...], weights: tuple[float, ...]) -> float | None:
    """One reading's time-weighted mean over the windows that read it; None where none did (or
    they last no time). Plain sums of stored columns, newest first: a window without the reading
    adds exact zeros, so the result is the same float as summing only the windows that hold it."""
    total = sum(weights)
    return sum(products) / total if total > 0 else None


def recent(seconds: tuple[float, ...], span: float) -> tuple[float, ...]:
    """The lengths of the newest windows (newest first) that together cover ``span`` seconds, at least the newest's."""
    covered, keep = 0.0, 0
    for each in seconds:
        if keep and covered >= span:
            break
        keep += 1
        covered += each
    return seconds[:keep]
