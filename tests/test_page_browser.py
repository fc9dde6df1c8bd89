"""The live page in a real headless Chromium (Debian's package) against the real daemon on --demo:
it loads, draws a chart per GPU from the demo's data, updates, and says so plainly when the daemon
stops. GPUEFF_SCREENSHOTS=docs/images makes it save the screenshots the docs show."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from browser import CHROMIUM, Browser
from conftest import ROOT, running_daemon
from fakes.apps import serving

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: tests/run.sh installs it (apt-get install chromium)")]  # e2e: Debian's chromium

DEMO_GPUS = 18
RED, GREEN, BLUE = 0x1F, 0x9D, 0x55  # the SM activity line's colour in page.js

# Canvases in which the SM activity line was drawn: pixels of its colour exist.
CHARTS_DRAWN = f"""
[...document.querySelectorAll('#gpus .gpu canvas')].filter((canvas) => {{
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let found = 0;
  for (let i = 0; i < pixels.length; i += 4) {{
    if (Math.abs(pixels[i] - {RED}) < 12 && Math.abs(pixels[i + 1] - {GREEN}) < 12 && Math.abs(pixels[i + 2] - {BLUE}) < 12 && pixels[i + 3] > 200) found++;
  }}
  return found > 20;
}}).length
"""


def card_text(browser: Browser, trace: str) -> str:
    text: str = browser.evaluate(f"[...document.querySelectorAll('#gpus .gpu')].find((card) => card.querySelector('.source').textContent === {trace!r}).innerText")
    return text


def save(browser: Browser, name: str, height: int) -> None:
    folder = os.environ.get("GPUEFF_SCREENSHOTS")
    if folder:
        browser.screenshot(ROOT / folder / name, 1400, height)


def test_the_live_page_draws_updates_and_reports_a_stopped_daemon(tmp_path: Path) -> None:
    with running_daemon("--demo") as daemon, Browser(tmp_path / "profile") as browser:
        browser.navigate(daemon.url + "/")
        browser.wait_for(f"window.gpueffPage && gpueffPage.updates >= 1 && document.querySelectorAll('#gpus .gpu').length === {DEMO_GPUS}")
        assert "REPLAYED DATA" in browser.evaluate("document.querySelector('.note').textContent")
        assert browser.evaluate("typeof uPlot") == "function"  # the vendored library, served by the daemon

        # Every GPU's chart holds points and shows its SM activity line.
        browser.wait_for(f"gpueffPage.times.length >= 2 && ({CHARTS_DRAWN}) === {DEMO_GPUS}")

        # The figures beside the chart: the spinning GPU is flagged, its class says what to try.
        spin = card_text(browser, "spin_1sm")
        assert "underfilled" in spin and "What to try: Give each kernel more parallel work" in spin
        assert "busy, SMs idle" in spin and "low efficiency" in spin
        matmul = card_text(browser, "matmul_8192")
        assert "compute" in matmul and "TFLOP/s of 989 TFLOP/s" in matmul
        fleet = browser.evaluate("document.getElementById('fleet').textContent")
        assert fleet.startswith(f"{DEMO_GPUS} GPUs ({DEMO_GPUS} up)") and "busy but not working" in fleet

        # It updates: new history points arrive and the status line moves on.
        points, updates = browser.evaluate("[gpueffPage.times.length, gpueffPage.updates]")
        browser.wait_for(f"gpueffPage.updates > {updates} + 1 && gpueffPage.times.length > {points}")
        browser.wait_for("document.getElementById('status').textContent.startsWith('Updated')")
        if os.environ.get("GPUEFF_SCREENSHOTS"):
            browser.wait_for("gpueffPage.times.length >= 45")  # a chart worth looking at
        save(browser, "live-page.png", 1020)

        # The daemon stops: the page says so, and keeps the last figures.
        assert daemon.stop() == 0
        browser.wait_for("document.getElementById('status').classList.contains('error')")
        status = browser.evaluate("document.getElementById('status').textContent")
        assert status.startswith("Lost contact with the exporter at ") and "no answer: it has stopped or cannot be reached" in status
        assert browser.evaluate("document.querySelectorAll('#gpus .gpu').length") == DEMO_GPUS
        save(browser, "live-page-daemon-stopped.png", 430)


HOSTILE = '<img src=x onerror="document.title=1">&amp;'


def test_names_from_outside_are_text_and_an_apps_throughput_shows_on_its_gpu(tmp_path: Path, trace_paths) -> None:
    trace = json.loads(trace_paths["matmul_8192"].read_text())
    trace["workload"] = HOSTILE
    (tmp_path / "hostile.json").write_text(json.dumps(trace))
    started = time.monotonic()

    def app(handler) -> None:  # a trainer counting 500 samples a second
        body = f"# TYPE samples_total counter\nsamples_total {(time.monotonic() - started) * 500}\n".encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain; version=0.0.4")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    with serving(app) as url:
        config = tmp_path / "config.yml"
        config.write_text(f"apps:\n  - {{name: trainer, url: '{url}', counter: samples_total, unit: samples, gpus: [0], scrape_interval: 2s}}\n")
        with running_daemon("--replay", str(tmp_path / "hostile.json"), "--config", str(config)) as daemon, Browser(tmp_path / "profile") as browser:
            browser.navigate(daemon.url + "/")
            browser.wait_for("window.gpueffPage && gpueffPage.updates >= 1")
            assert browser.evaluate("document.querySelector('#gpus .gpu .source').textContent") == HOSTILE
            assert browser.evaluate("document.querySelectorAll('#gpus img').length") == 0 and browser.evaluate("document.title") == "gpu-efficiency-exporter"
            line = browser.wait_for("(document.querySelector('#gpus .gpu .apps').innerText.match(/trainer: .*samples\\/s · .*samples\\/J/) || [''])[0]")
            rate = float(line.removeprefix("trainer: ").split(" ")[0])
            # 500 a second, counted when the app answers and timed at the middle of each scrape: two
            # seconds between scrapes keep that difference small however long a busy machine makes them
            assert 400 < rate < 600, line
