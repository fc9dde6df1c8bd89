"""Counter increases between scrapes, with resets handled the way Prometheus's rate() does, and
impossible increases (non-finite, or faster than MAX_UNITS_PER_SECOND) dropped."""

from __future__ import annotations

import math

from gpueff.apps.scrape import Series

# No app does more than 1e18 units of work a second (an exaFLOP counted as FLOPs): a larger increase
# is a broken or hostile counter (1.79e308, then 0, then 1.79e308...). Dropping it keeps
# gpueff_app_units_total and the figures derived from it finite.
MAX_UNITS_PER_SECOND = 1e18


class CounterIncrease:
    """Follows one counter's series from reading to reading.

    Per series: a value below the previous one means the counter was reset (the app restarted), and
    the new value is all increase since the reset. A series seen for the first time only sets its
    baseline. An increase that is not finite or above ``limit`` is dropped and counted in
    ``invalid``: the new value is only a baseline, as after a first sighting. The increases of all
    series are summed.
    """

    def __init__(self) -> None:
        self._last: Series | None = None
        self.total = 0.0  # all increases seen since the daemon started
        self.resets = 0
        self.invalid = 0

    @property
    def primed(self) -> bool:
        return self._last is not None

    def add(self, series: Series, limit: float = math.inf) -> float:
        """The increase since the previous reading (0 for the first one)."""
        increase = 0.0
        if self._last is not None:
            for key, value in series.items():
                previous = self._last.get(key)
                if previous is None:
                    continue
                reset = value < previous
                step = value if reset else value - previous
                if not math.isfinite(step) or step > limit:
                    self.invalid += 1
                    continue
                self.resets += reset
                increase += step
        self._last = dict(series)
        self.total += increase
        return increase
