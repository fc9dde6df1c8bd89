"""Counter increases between scrapes, with resets handled the way Prometheus's rate() does."""

from __future__ import annotations

from exporter.apps.scrape import Series


class CounterIncrease:
    """Follows one counter's series from reading to reading.

    Per series: a value below the previous one means the counter was reset (the app restarted), and
    the new value is all increase since the reset. A series seen for the first time only sets its
    baseline. The increases of all series are summed.
    """

    def __init__(self) -> None:
        self._last: Series | None = None
        self.total = 0.0  # all increases seen since the daemon started
        self.resets = 0

    @property
    def primed(self) -> bool:
        return self._last is not None

    def add(self, series: Series) -> float:
        """The increase since the previous reading (0 for the first one)."""
        increase = 0.0
        if self._last is not None:
            for key, value in series.items():
                previous = self._last.get(key)
                if previous is None:
                    continue
                if value < previous:
                    self.resets += 1
                    increase += value
                else:
                    increase += value - previous
        self._last = dict(series)
        self.total += increase
        return increase
