"""SIGHUP storms: reloads are coalesced, never force a poll, and join the app scrapers they stop."""

from __future__ import annotations

import re
import signal
import threading
import time

from conftest import running_daemon
from fakes.apps import raw_serving
from waiting import PATIENCE, wait_until

from gpueff.apps.monitor import AppMonitor
from gpueff.backends.replay import ReplayBackend
from gpueff.poller import Poller
from gpueff.settings import Config, parse_config
from gpueff.trace import load_trace
from unit.test_poller import assert_a_reload_to_a_short_interval_polls_at_once


def test_reloads_never_force_a_poll_and_polls_stay_an_interval_apart(trace_paths):
    """Before, each reload woke the poller to poll at once: 903 SIGHUPs in 5 s made 585 polls, and
    on NVML polls under 100 ms apart drop GPM readings. A busy machine only makes polls late: the
    k-th poll never starts before k intervals after the first, however many reloads came."""
    started: list[float] = []

    class Recording(Poller):
        def poll_once(self):
            started.append(time.monotonic())
            return super().poll_once()

    backend = ReplayBackend([load_trace(trace_paths["spin_1sm"])])
    poller = Recording(backend, Config(collect_interval=0.5))
    poller.start(backend.start())
    try:
        assert poller.ready.wait(PATIENCE)
        for _ in range(100):
            poller.set_config(Config(collect_interval=0.5))
            time.sleep(0.01)
        wait_until(lambda: len(started) >= 3, "three polls")
    finally:
        poller.stop(PATIENCE)
    early = [(k, round(at - started[0], 3)) for k, at in enumerate(started) if at - started[0] < k * 0.5 - 0.02]
    assert not early, early  # (poll, seconds after the first): a reload forced it


def test_a_shorter_interval_from_a_reload_applies_without_waiting_out_the_old_one(trace_paths):
    backend = ReplayBackend([load_trace(trace_paths["spin_1sm"])])
    poller = Poller(backend, Config(collect_interval=3600.0))
    poller.start(backend.start())
    try:
        assert poller.ready.wait(PATIENCE)
        time.sleep(0.3)  # the poller is (most likely) inside its hour-long wait
        assert_a_reload_to_a_short_interval_polls_at_once(poller)
    finally:
        poller.stop()


def test_a_storm_of_sighups_is_a_few_reloads(trace_paths, tmp_path):
    config = tmp_path / "exporter.yml"
    config.write_text("currency: USD\n")
    started = time.monotonic()  # before the daemon: its whole life is shorter than what is measured from here
    with running_daemon("--replay", str(trace_paths["spin_1sm"]), "--config", str(config), "--collect-interval", "1s") as daemon:
        for _ in range(300):
            daemon.process.send_signal(signal.SIGHUP)
            time.sleep(0.005)
        daemon.wait_for_output("configuration reloaded from")
        polls = re.search(r"^gpueff_collect_duration_seconds_count (\S+)$", daemon.metrics(), re.M)
        lived = time.monotonic() - started
        assert daemon.stop() == 0
        output = daemon.finished_output()
    reloads = output.count("configuration reloaded from")
    assert 1 <= reloads <= lived / 0.25 + 1, (reloads, lived)  # at most one per RELOAD_GAP (0.25 s); before, one per SIGHUP
    assert polls is not None and float(polls.group(1)) <= lived / 1.0 + 1, (polls.group(1), lived)  # one a second; before, hundreds


def test_reloads_that_replace_apps_leave_no_scraper_threads_behind():
    """Two configs alternated: each reload stopped the old scrapers without joining them, and each
    stayed blocked in a hung app's scrape for scrape_timeout (up to 337 threads)."""
    stop = threading.Event()
    scrapes: list[object] = []

    def hang(connection) -> None:  # answers nothing: every scrape hangs
        scrapes.append(connection)
        stop.wait(PATIENCE)

    with raw_serving(hang) as url:
        configs = [parse_config({"apps": [{"name": name, "url": url, "counter": "x_total", "unit": "tokens", "scrape_interval": "60s", "scrape_timeout": "60s"}]}).apps_settings for name in ("a", "b")]
        monitor = AppMonitor(configs[0])
        monitor.start()
        try:
            for round_ in range(20):
                wait_until(lambda round_=round_: len(scrapes) > round_, "the new scraper inside its hung scrape")
                monitor.configure(configs[(round_ + 1) % 2])
            scrapers = [thread for thread in threading.enumerate() if thread.name.startswith("app-")]
        finally:
            monitor.stop()
            stop.set()
    assert len(scrapers) <= 2, [thread.name for thread in scrapers]  # the current app's, and at most one still ending
