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
- Whether a power or thermal limit held the clocks at any reading of the last ``bottleneck.window``
  (``clocks_held_at``): the point estimates of work are withheld while it did
  (gpueff/pipeline/derive.py ``clocks_counted``).
- A change of regime restarts the mean: a window whose utilization, SM activity, busiest math pipe,
  DRAM or link lies more than ``bottleneck.step`` outside the range of every recent window's (a job
  started, stopped or changed phase) starts the mean afresh at it, so the class follows within
  ``hold_polls`` polls instead of waiting for the old windows to leave the mean. A job that
  alternates busy and idle keeps both levels within the range of its recent windows, so its
  windows never step out of it and its mean spans the whole window. A change inside a window
  (part old, part new) goes on at the next: a window further the same way restarts the mean again
  and the hold counts the first as a win; one odd window followed by one back in the old range is
  a blip: the mean spans the whole window again and the class in place stands.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpueff.sample import GpuSample
from gpueff.taxonomy import (
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
    fresh: int = 0  # the newest windows the class's mean spans: those since the last change of regime
    stepped: int = 0  # the newest window's step out of the recent range: +1 up, -1 down, 0 none (STEP_READINGS)
    clocks_held_at: float | None = None  # the newest reading at which a power or thermal limit held the clocks (or none was read)

    def opened_by_previous(self, sample: GpuSample) -> bool:
        previous, window = self.previous, sample.window_seconds
        return previous is not None and window is not None and abs(sample.timestamp - window - previous.timestamp) <= WINDOW_START_TOLERANCE

    def clocks_held_within(self, sample: GpuSample, span: float) -> bool:
        """Whether a reading of the last ``span`` seconds (at least this window's) found the clocks held."""
        held = self.clocks_held_at
        return held is not None and sample.timestamp - held <= max(span, sample.window_seconds or 0.0) + WINDOW_START_TOLERANCE

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
        fresh, stepped, carried = self.fresh, 0, 0
        if flagged:
            candidate = "unknown"
        else:
            lengths = recent((seconds, *lengths[: MAX_WINDOWS - 1]), limits.window)
            older = len(lengths) - 1
            stepped = step_out_of_range(window, self.weights, self.products, older, limits.step) if self.settled else 0
            blip = False
            if self.stepped and self.fresh == 1 and older > 1:
                if moves_on(window, self.weights, self.products, self.stepped, limits.margin):
                    stepped = self.stepped  # the change straddled the last poll: its window was part old, part new
                else:
                    blip = came_back(window, self.weights, self.products, older, self.stepped, limits.step)
            readings = activity_values(window)
            weights = tuple((0.0 if value is None else seconds, *column[:older]) for value, column in zip(readings, weights, strict=True))
            products = tuple((0.0 if value is None else seconds * value, *column[:older]) for value, column in zip(readings, products, strict=True))
            if stepped:
                fresh = 1  # a change of regime: the mean restarts at this window
            elif blip:
                fresh = len(lengths)  # one odd window, and back: no change of regime, the mean spans the window again
            else:
                fresh = min(self.fresh + 1, len(lengths))
            carried = int(bool(stepped) and stepped == self.stepped)  # the change straddled the last poll: that poll counts as a win
            mean = mean_of(products, weights, fresh) if fresh > 1 else window
            candidate, ran = classify(mean, limits), kernels_ran(mean)
            if self.settled and candidate != self.reported and self.reported in classes_within_margin(mean, limits, limits.margin):
                candidate = self.reported  # the readings sit on a threshold's edge: the verdict in place stands
        reported, challenger, wins = self.reported, self.challenger, self.wins
        if reported in (None, "unknown") or not self.settled or candidate == reported or (reported == "idle" and ran):  # a provisional verdict in place, or kernels ran under "idle": no hold
            reported, challenger, wins = candidate, None, 0
        elif candidate == challenger:
            wins += 1
        else:
            challenger, wins = candidate, 1 + carried
        if challenger is not None and wins >= limits.hold_polls:
            reported, challenger, wins = challenger, None, 0
        settled = sum(lengths) >= limits.window or len(lengths) == MAX_WINDOWS  # the mean spans all it will: no better estimate comes
        return reported, Smoothing(sample, lengths, weights, products, reported, challenger, wins, settled, fresh, stepped, self.clocks_held_at)

    def mean(self) -> Activity | None:
        """The readings' time-weighted mean the class in place was judged from: the windows since the last change of regime."""
        return mean_of(self.products, self.weights, self.fresh) if self.fresh else None


# What a job starting, stopping or changing phase moves: utilization, SM activity, and the units the
# classes weigh against their roofs (a GEMM phase after a gather moves the pipes, not SM activity).
STEP_READINGS = tuple(ACTIVITY_FIELDS.index(name) for name in ("busy", "sm_active", "pipes", "dram", "link"))


def step_out_of_range(window: Activity, weights: tuple[tuple[float, ...], ...], products: tuple[tuple[float, ...], ...], older: int, step: float) -> int:
    """+1 (-1) where one of the window's STEP_READINGS lies more than ``step`` above (below) that
    reading of every one of the ``older`` recent windows that read it, else 0. A job that alternates busy and
    idle keeps both levels in the range of its recent windows, so its windows never step out of it;
    one that starts, stops or changes phase leaves it at once."""
    readings = activity_values(window)
    for index in STEP_READINGS:
        value = readings[index]
        if value is None:
            continue
        seen = [product / weight for product, weight in zip(products[index][:older], weights[index][:older], strict=False) if weight > 0]
        if not seen:
            continue
        if value > max(seen) + step:
            return 1
        if value < min(seen) - step:
            return -1
    return 0


def moves_on(window: Activity, weights: tuple[tuple[float, ...], ...], products: tuple[tuple[float, ...], ...], direction: int, margin: float) -> bool:
    """Whether the window, the one after a change of regime, lies further the change's way than the
    window the change was found in (its readings newest in ``products``): by more than ``margin`` in a
    STEP_READING, or, going down, with no kernel run where that window still ran one (SM activity 0)."""
    readings = activity_values(window)
    for index in STEP_READINGS:
        value, weight = readings[index], weights[index][0] if weights[index] else 0.0
        if value is None or not weight:
            continue
        before = products[index][0] / weight
        if (value - before) * direction > margin:
            return True
    sm = ACTIVITY_FIELDS.index("sm_active")
    ran_before = products[sm][0] > 0 if products[sm] and weights[sm][0] else None
    return direction < 0 and readings[sm] == 0 and bool(ran_before)


def came_back(window: Activity, weights: tuple[tuple[float, ...], ...], products: tuple[tuple[float, ...], ...], older: int, direction: int, step: float) -> bool:
    """Whether the window after one that stepped out of the recent range (newest in ``products``) steps
    back from it, opposite ``direction``, into the range of the windows before it: that one was a blip."""
    newest = tuple(column[:1] for column in weights), tuple(column[:1] for column in products)
    before = tuple(column[1:older] for column in weights), tuple(column[1:older] for column in products)
    return step_out_of_range(window, *newest, 1, step) == -direction and step_out_of_range(window, *before, older - 1, step) == 0


def mean_of(products: tuple[tuple[float, ...], ...], weights: tuple[tuple[float, ...], ...], count: int) -> Activity:
    """Each reading's time-weighted mean over the newest ``count`` windows."""
    return Activity(*(weighted_mean(product[:count], weight[:count]) for product, weight in zip(products, weights, strict=True)))


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
