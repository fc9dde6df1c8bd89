"""Scraping apps on their own threads, and joining their latest readings with the GPU polls.

Each app has a Scraper thread that scrapes on the app's ``scrape_interval`` and keeps only its
latest Reading. The poller calls ``AppMonitor.update`` once per poll: it records the app's GPU
figures and, when a new reading has arrived, derives the app's figures over the window between the
two latest good readings. Nothing here blocks the poller on the network.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpueff.apps.counters import MAX_UNITS_PER_SECOND, CounterIncrease
from gpueff.apps.derive import AppState, GpuFigures, Means, derive_app, gpu_figures
from gpueff.apps.scrape import Abort, ScrapeError, Series, fetch, read_counter
from gpueff.apps.settings import AppConfig, AppsSettings
from gpueff.attribution.kubernetes.owners import GpuOwners
from gpueff.attribution.owner import Owner
from gpueff.logs import fields
from gpueff.sample import GpuSample

log = logging.getLogger(__name__)

WINDOW_POLLS = 3600  # GPU figures kept per app between readings (an hour at the default 1s poll)
RETRY_AFTER_BUG = 1.0  # seconds a scraper waits after an unexpected error outside a scrape
RETIRE_WAIT = 1.0  # seconds to wait for stopped scrapers' threads (their scrapes are aborted at once)


@dataclass(frozen=True, slots=True)
class Reading:
    sequence: int
    timestamp: float  # monotonic, the middle of the request
    duration: float
    units: Series | None  # None when the scrape failed
    requests: Series | None
    error: str | None

    @property
    def finished(self) -> float:
        return self.timestamp + self.duration / 2


class Scraper:
    """Scrapes one app every ``scrape_interval`` on its own thread; ``latest`` is its last Reading."""

    def __init__(self, app: AppConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.clock = clock
        self.latest: Reading | None = None
        self.errors_total = 0
        self._sequence = 0
        self._was_up: bool | None = None
        self._requests_error: str | None = None
        self._stop = threading.Event()
        self._abort = Abort()
        self._duplicate_logged = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"app-{self.app.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop scraping; a scrape under way ends at once (its socket is shut down)."""
        self._stop.set()
        self._abort.abort()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        """Scrape until stopped; nothing ends the thread but ``stop``."""
        next_tick = self.clock()
        while not self._stop.is_set():
            try:
                self.scrape_once()
                interval = self.app.scrape_interval
                next_tick += interval
                now = self.clock()
                if next_tick < now:
                    next_tick = now + interval
                wait = next_tick - now
            except Exception as error:  # the scrape itself catches everything: this is a bug around it
                self.errors_total += 1
                log.error('app "%s": the scraper failed (%s: %s); retrying in %gs', self.app.name, type(error).__name__, error, RETRY_AFTER_BUG, extra=fields(app=self.app.name, url=self.app.url))
                wait = RETRY_AFTER_BUG
                next_tick = self.clock() + wait
            self._stop.wait(wait)

    def scrape_once(self) -> Reading:
        app = self.app
        started = self.clock()
        units = requests = None
        error = requests_error = None
        try:
            names = [app.counter] if app.requests_counter is None else [app.counter, app.requests_counter]
            answer = fetch(app.url, app.scrape_timeout, app.max_response_bytes, names, self._abort)
            units = read_counter(answer, app.counter, app.labels, self._duplicate)
            if app.requests_counter is not None:
                try:
                    requests = read_counter(answer, app.requests_counter, app.labels, self._duplicate)
                except ScrapeError as problem:
                    requests_error = str(problem)
        except ScrapeError as problem:
            error = str(problem)
        except Exception as problem:  # a bug here must not end the thread; the app reads as down
            error = f"unexpected {type(problem).__name__}: {problem}"
        finished = self.clock()
        self._sequence += 1
        reading = Reading(self._sequence, (started + finished) / 2, finished - started, units, requests, error)
        if error is not None:
            self.errors_total += 1
        self._log_changes(error, requests_error)
        self.latest = reading
        return reading

    def _duplicate(self, series: str) -> None:
        """Said once per scraper: an app that repeats a series usually does so on every scrape."""
        if not self._duplicate_logged:
            self._duplicate_logged = True
            log.warning('app "%s": %s answers with the series %s more than once; its last value is used (logged once)', self.app.name, self.app.url, series[:300], extra=fields(app=self.app.name, url=self.app.url))

    def _log_changes(self, error: str | None, requests_error: str | None) -> None:
        """One line per change of state, not one per scrape; nothing once stopped (a reload)."""
        if self._stop.is_set():
            return
        app = self.app
        up = error is None
        if up != self._was_up:
            if not up:
                log.warning('app "%s" is down (gpueff_app_up 0): scraping %s: %s', app.name, app.url, error, extra=fields(app=app.name, url=app.url))
            elif self._was_up is not None:
                log.info('app "%s" is up again: %s answers with %s', app.name, app.url, app.counter, extra=fields(app=app.name, url=app.url))
            self._was_up = up
        if up and (requests_error is None) != (self._requests_error is None):
            if requests_error is not None:
                log.warning('app "%s": requests_counter: %s; gpueff_app_requests_per_second is not exported', app.name, requests_error, extra=fields(app=app.name, url=app.url))
            else:
                log.info('app "%s": requests_counter %s is found again', app.name, app.requests_counter, extra=fields(app=app.name, url=app.url))
            self._requests_error = requests_error


class AppTracker:
    """The poller's side of one app: GPU figures per poll, counters per reading, the derived state."""

    def __init__(self, app: AppConfig) -> None:
        self.app = app
        self.units = CounterIncrease()
        self.requests = CounterIncrease()
        self._window: deque[GpuFigures] = deque(maxlen=WINDOW_POLLS)
        self._before: GpuFigures | None = None  # the last poll at or before the previous reading
        self._seen = 0
        self._last_good: float | None = None
        self._state = AppState(app.name, app.unit, up=False)

    def update(self, scraper: Scraper, samples: Sequence[GpuSample], now: float, settings: AppsSettings, owners: Mapping[str, GpuOwners] | None = None, process_owners: Mapping[int, Owner] | None = None) -> AppState:
        figures = gpu_figures(self.app, samples, now, settings.peaks, owners, process_owners)
        if self._window and self._window[-1].gpus == figures.gpus:
            # The same GPUs as the poll before: share its tuple, so an app that stays down (whose
            # window fills to WINDOW_POLLS) holds one tuple of devices, not one per poll.
            figures = dataclasses.replace(figures, gpus=self._window[-1].gpus)
        self._window.append(figures)
        reading = scraper.latest
        if reading is not None and reading.sequence != self._seen:
            self._seen = reading.sequence
            self._state = self._take(reading, settings.price_per_gpu_hour)
        if self._state.up and reading is not None and now - reading.finished > self.stale_after:
            # The scraper has not finished a scrape for too long (a hung name lookup, a bug): the
            # last figures are not live any more.
            self._state = AppState(self.app.name, self.app.unit, up=False)
        return dataclasses.replace(self._state, gpus=figures.gpus, scrape_errors_total=scraper.errors_total)

    @property
    def stale_after(self) -> float:
        """Seconds after a reading by which the next one must have come."""
        return 2 * self.app.scrape_interval + self.app.scrape_timeout

    def _take(self, reading: Reading, default_price: float | None) -> AppState:
        app = self.app
        if reading.units is None:
            return AppState(app.name, app.unit, up=False, scrape_duration_seconds=reading.duration)
        requests_primed = self.requests.primed
        limit = MAX_UNITS_PER_SECOND * (reading.timestamp - self._last_good) if self._last_good is not None else 0.0
        increase = self.units.add(reading.units, limit)
        requests_increase = None if reading.requests is None else self.requests.add(reading.requests, limit)
        state = AppState(
            app.name,
            app.unit,
            up=True,
            units_total=self.units.total,
            scrape_duration_seconds=reading.duration,
        )
        previous, self._last_good = self._last_good, reading.timestamp
        window = self._figures_until(reading.timestamp, previous)
        if previous is None or reading.timestamp <= previous or not window:
            return state
        elapsed = reading.timestamp - previous
        if requests_increase is not None and requests_primed:
            state = dataclasses.replace(state, requests_per_second=requests_increase / elapsed)
        price = app.price_per_gpu_hour if app.price_per_gpu_hour is not None else default_price
        return derive_app(app, state, increase / elapsed, Means.of(window), price)

    def _figures_until(self, end: float, start: float | None) -> list[GpuFigures]:
        """The polls in (start, end], or else the last poll before ``end``; those are then dropped."""
        inside = []
        while self._window and self._window[0].timestamp <= end:
            figures = self._window.popleft()
            if start is None or figures.timestamp > start:
                inside.append(figures)
            self._before = figures
        if not inside and self._before is not None:
            inside = [self._before]
        return inside


class AppMonitor:
    """All configured apps: their scraper threads and trackers. ``configure`` takes a reloaded config."""

    def __init__(self, settings: AppsSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._apps: tuple[tuple[Scraper, AppTracker], ...] = ()
        self._retiring: list[Scraper] = []  # stopped, their threads not yet seen to end
        self._started = False
        self.configure(settings)

    def configure(self, settings: AppsSettings) -> None:
        """Keep the apps whose config is unchanged (with their counters); restart the others."""
        self._settings = settings
        old = {scraper.app.name: (scraper, tracker) for scraper, tracker in self._apps}
        current = []
        for app in settings.apps:
            kept = old.get(app.name)
            if kept is not None and kept[0].app == app:
                del old[app.name]
                current.append(kept)
                continue
            scraper = Scraper(app, self.clock)
            current.append((scraper, AppTracker(app)))
            if self._started:
                scraper.start()
        self._apps = tuple(current)
        for scraper, _ in old.values():
            scraper.stop()
        self._retiring += [scraper for scraper, _ in old.values()]
        deadline = time.monotonic() + RETIRE_WAIT
        for scraper in self._retiring:  # stopped scrapes end at once: wait a moment for their threads
            scraper.join(max(0.0, deadline - time.monotonic()))
        self._retiring = [scraper for scraper in self._retiring if scraper.alive()]

    @property
    def scrapers(self) -> tuple[Scraper, ...]:
        return tuple(scraper for scraper, _ in self._apps)

    def start(self) -> None:
        self._started = True
        for scraper, _ in self._apps:
            scraper.start()

    def stop(self) -> None:
        for scraper, _ in self._apps:
            scraper.stop()
        for scraper in (*self.scrapers, *self._retiring):
            scraper.join(RETIRE_WAIT)

    def update(self, samples: Sequence[GpuSample], now: float, owners: Mapping[str, GpuOwners] | None = None, process_owners: Mapping[int, Owner] | None = None) -> tuple[AppState, ...]:
        """Called by the poller after each poll, with the GPUs' pod owners and the owner of each GPU
        process (attribution/owner.py); never waits on the network."""
        settings = self._settings
        return tuple(tracker.update(scraper, samples, now, settings, owners, process_owners) for scraper, tracker in self._apps)
