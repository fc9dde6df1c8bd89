"""The live page in a real headless Chromium (Debian's package) against the real daemon on --demo:
it loads, draws a chart per GPU from the demo's data, puts the GPU that wastes the most time first
and names it, says whose each GPU is (pods from a kubelet: the gRPC fake, the only part that cannot
exist here), filters by class, sorts as asked, fits a 1280x800 screen and a 390x844 phone at 8, 20
and 64 GPUs, updates, and says so plainly when the daemon stops, when it is not ready and when
JavaScript is off. GPUEFF_SCREENSHOTS=docs/images makes it save the screenshots the docs show."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import CHROMIUM, Browser
from conftest import ROOT, http_get, running_daemon
from fakes.apps import serving

from gpueff.backends.replay import ReplayBackend
from gpueff.trace import demo_trace_paths, load_trace

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: tests/run.sh installs it (apt-get install chromium)")]  # e2e: Debian's chromium

DEMO_GPUS = 20
DESKTOP, PHONE = (1280, 800), (390, 844)
RED, GREEN, BLUE = 0x1F, 0x9D, 0x55  # the SM activity line's colour in page.js
HOSTILE = '<img src=x onerror="document.title=1">&amp;'

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

# What a screen shows: nothing wider than the window (a phone's right border clipped), the summary's
# bottom, and the visible cards' sources in the order shown.
LAYOUT = """(() => {
  const cards = [...document.querySelectorAll('#gpus .gpu')].filter((card) => !card.hidden);
  return {
    overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
    widest: Math.max(...cards.map((card) => card.getBoundingClientRect().right), ...[...document.querySelectorAll('#gpus canvas')].map((c) => c.getBoundingClientRect().right)),
    width: document.documentElement.clientWidth,
    summary: document.getElementById('summary').getBoundingClientRect().bottom,
    tiles: document.querySelectorAll('#ranking a').length,
    order: cards.map((card) => card.querySelector('.source').textContent),
  };
})()"""


def card_text(browser: Browser, trace: str) -> str:
    text: str = browser.evaluate(f"[...document.querySelectorAll('#gpus .gpu')].find((card) => card.querySelector('.source').textContent === {trace!r}).innerText")
    return text


def save(browser: Browser, name: str, size: tuple[int, int]) -> None:
    folder = os.environ.get("GPUEFF_SCREENSHOTS")
    if folder:
        browser.screenshot(ROOT / folder / name, *size)


def resize(browser: Browser, size: tuple[int, int]) -> None:
    browser.set_viewport(*size)
    browser.wait_for(f"document.documentElement.clientWidth <= {size[0]} && [...document.querySelectorAll('#gpus canvas')].every((c) => c.getBoundingClientRect().right <= document.documentElement.clientWidth)")


def assert_fits(browser: Browser, size: tuple[int, int], gpus: int) -> dict:
    layout: dict = browser.evaluate(LAYOUT)
    assert layout["overflow"] <= 0 and layout["widest"] <= layout["width"], layout  # no clipped right border
    assert layout["summary"] <= size[1], layout  # the fleet summary and every GPU's tile: one screen
    assert layout["tiles"] == gpus
    return layout


@contextlib.contextmanager
def kubelet_config(tmp_path: Path, pods: dict[str, tuple[str, str, str]]) -> Iterator[Path]:
    """A config whose kubelet (the gRPC fake on a unix socket) assigns each GPU uuid its (namespace, pod, container)."""
    from fakes.kubelet import FakeKubelet, pod  # needs grpcio (test extra)

    socket_dir = Path(tempfile.mkdtemp(prefix="kl", dir="/tmp"))  # a unix socket's path must be short
    config = tmp_path / "config.yml"
    config.write_text(f"kubernetes:\n  enabled: true\n  pod_resources_socket: {socket_dir / 'kubelet.sock'}\n  refresh_interval: 5s\n  timeout: 5s\n")  # a List may take seconds on a busy machine
    messages = [pod(namespace, name, {container: {"nvidia.com/gpu": [uuid]}}) for uuid, (namespace, name, container) in pods.items()]
    try:
        with FakeKubelet(socket_dir / "kubelet.sock", messages):
            yield config
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


def demo_pods() -> dict[str, tuple[str, str, str]]:
    """Pods for four of the demo's GPUs, by the uuids the replay gives them."""
    backend = ReplayBackend([load_trace(path) for path in demo_trace_paths()])
    uuids = [device.uuid for device in backend.start()]
    backend.close()
    return {uuids[4]: ("research", "sweep-lr-3e4-0", "trainer"), uuids[10]: ("ml", "llama-train-0", "pytorch"), uuids[9]: ("serving", "llama-b64-7d9f", "vllm"), uuids[11]: ("ml", HOSTILE, "pytorch")}  # refused: not a pod name


def test_the_live_page_answers_which_gpu_wastes_time_whose_it_is_and_what_to_try(tmp_path: Path) -> None:
    with kubelet_config(tmp_path, demo_pods()) as config, running_daemon("--demo", "--config", str(config)) as daemon, Browser(tmp_path / "profile", *DESKTOP) as browser:
        browser.navigate(daemon.url + "/")
        browser.wait_for(f"window.gpueffPage && gpueffPage.updates >= 1 && document.querySelectorAll('#gpus .gpu').length === {DEMO_GPUS}")
        assert "REPLAYED DATA" in browser.evaluate("document.querySelector('.note').textContent")
        assert browser.evaluate("document.querySelector('.note').textContent.includes('spin_1sm')") is False  # the traces are listed apart, not in bold
        assert browser.evaluate("typeof uPlot") == "function"  # the vendored library, served by the daemon
        browser.wait_for(f"gpueffPage.times.length >= 3 && ({CHARTS_DRAWN}) === {DEMO_GPUS}")
        # The first poll waits 1 s at most for the kubelet: on a busy machine its pods come with a later one.
        browser.wait_for("document.getElementById('flagged').textContent.includes('research/sweep-lr-3e4-0')")

        # Waste first: the GPU busy all the time with one SM of 132 working leads, with its pod and what to try.
        layout = assert_fits(browser, DESKTOP, DEMO_GPUS)
        assert layout["order"][0] == "spin_1sm", layout["order"]
        spin = card_text(browser, "spin_1sm")
        assert "pod research/sweep-lr-3e4-0 (trainer)" in spin and "underfilled" in spin
        assert "What to try: Give each kernel more parallel work" in spin and "busy, SMs idle" in spin and "low efficiency" in spin
        assert browser.evaluate("document.querySelector('#gpus .gpu').getBoundingClientRect().top") < DESKTOP[1] / 2  # on the first screen
        flagged = browser.evaluate("document.getElementById('flagged').textContent")
        assert flagged == "1 busy but not working: GPU 4 underfilled (research/sweep-lr-3e4-0 (trainer))"
        fleet = browser.evaluate("document.getElementById('fleet').textContent")
        assert fleet.startswith(f"{DEMO_GPUS} GPUs ({DEMO_GPUS} up)")
        matmul = card_text(browser, "llama_train")
        assert "compute" in matmul and "of 989 TFLOP/s" in matmul and "pod ml/llama-train-0 (pytorch)" in matmul
        # A kubelet answer's pod name that is no pod name (markup) is left out, never shown (the trace's
        # name, which may be any text, is shown as text: test_names_from_outside_are_text_...).
        assert browser.evaluate("[...document.querySelectorAll('#gpus .owner')].some((line) => line.textContent.includes('<img'))") is False
        assert browser.evaluate("document.querySelectorAll('img').length") == 0 and browser.evaluate("document.title") == "gpu-efficiency-exporter"
        if os.environ.get("GPUEFF_SCREENSHOTS"):
            browser.wait_for("gpueffPage.times.length >= 45")  # a chart worth looking at
        save(browser, "live-page.png", DESKTOP)

        # The sort the user picks, kept in the address.
        browser.evaluate("(() => { const s = document.getElementById('sort'); s.value = 'index'; s.dispatchEvent(new Event('change')); })()")
        assert browser.evaluate(LAYOUT)["order"][:3] == ["copy_2GB", "idle", "matmul_8192"] and browser.evaluate("location.search") == "?sort=index"
        # One click from the summary to the flagged GPU's card, now far down the page.
        browser.evaluate("document.querySelector('#flagged a').click()")
        top = browser.wait_for("(() => { const card = document.getElementById('gpu-4'); const top = card.getBoundingClientRect().top; return card.classList.contains('target') && top >= 0 && top < 100 ? top + 1 : 0; })()")
        assert top and browser.evaluate("scrollY") > 0
        # A class chip shows that class only; pressed again, every GPU.
        computes = browser.evaluate("gpueffPage.last.fleet.classes.compute")
        browser.evaluate("document.querySelector('#classes .chip[data-only=\"compute\"]').click()")
        shown = browser.evaluate("[...document.querySelectorAll('#gpus .gpu')].filter((card) => !card.hidden).map((card) => card.querySelector('.badge').textContent)")
        assert shown == ["compute"] * computes and browser.evaluate("document.querySelectorAll('#ranking a').length") == computes
        assert browser.evaluate("document.querySelector('#classes .chip[data-only=\"compute\"]').getAttribute('aria-pressed')") == "true"
        browser.evaluate("document.querySelector('#classes .chip[data-only=\"compute\"]').click()")
        assert len(browser.evaluate(LAYOUT)["order"]) == DEMO_GPUS and browser.evaluate("location.search") == "?sort=index"
        browser.evaluate("(() => { const s = document.getElementById('sort'); s.value = 'waste'; s.dispatchEvent(new Event('change')); })()")
        browser.evaluate("scrollTo(0, 0)")
        browser.wait_for("!document.querySelector('.gpu.target')")  # the outline fades

        # A phone: one column, nothing clipped, the summary on the first screen.
        resize(browser, PHONE)
        assert_fits(browser, PHONE, DEMO_GPUS)
        save(browser, "live-page-phone.png", PHONE)
        resize(browser, DESKTOP)

        # It updates: new history points arrive and the status line moves on.
        points, updates = browser.evaluate("[gpueffPage.times.length, gpueffPage.updates]")
        browser.wait_for(f"gpueffPage.updates > {updates} + 1 && gpueffPage.times.length > {points}")
        browser.wait_for("document.getElementById('status').textContent.startsWith('Updated')")

        # The daemon stops: the page says so, and keeps the last figures.
        assert daemon.stop() == 0
        browser.wait_for("document.getElementById('status').classList.contains('error')")
        status = browser.evaluate("document.getElementById('status').textContent")
        assert status.startswith("Lost contact with the exporter at ") and "no answer: it has stopped or cannot be reached" in status
        assert browser.evaluate("document.querySelectorAll('#gpus .gpu').length") == DEMO_GPUS
        save(browser, "live-page-daemon-stopped.png", (DESKTOP[0], 330))


def traces(count: int) -> list[str]:
    """``count`` recorded traces: the demo's and the H100 fleet corpus's, over again where more are asked for."""
    every = [*demo_trace_paths(), *sorted((ROOT / "gpueff" / "traces" / "h100-fleet").glob("*.json"))]
    return [str(path) for path in itertools.islice(itertools.cycle(every), count)]


@pytest.mark.parametrize("gpus", [8, 64])
def test_the_summary_stays_one_screen_from_8_to_64_gpus_on_a_desktop_and_a_phone(tmp_path: Path, gpus: int) -> None:
    with running_daemon("--replay", *traces(gpus)) as daemon, Browser(tmp_path / "profile", *DESKTOP) as browser:
        browser.navigate(daemon.url + "/")
        browser.wait_for(f"window.gpueffPage && gpueffPage.times.length >= 3 && document.querySelectorAll('#gpus .gpu').length === {gpus}")
        layout = assert_fits(browser, DESKTOP, gpus)
        assert layout["order"][0] == "spin_1sm"  # the flagged GPU leads at any size
        if gpus == 64 and os.environ.get("GPUEFF_SCREENSHOTS"):
            browser.wait_for("gpueffPage.times.length >= 30")
            save(browser, "live-page-64-gpus.png", DESKTOP)
        resize(browser, PHONE)
        assert_fits(browser, PHONE, gpus)


def test_not_ready_is_not_green_and_without_javascript_the_page_says_so(tmp_path: Path) -> None:
    # No NVIDIA driver here: under --wait-for-driver the daemon serves, and /-/ready answers 503.
    healthy = lambda port: http_get(f"http://127.0.0.1:{port}/-/healthy")[0] == 200  # noqa: E731
    with running_daemon("--backend", "nvml", "--wait-for-driver", is_ready=healthy) as daemon, Browser(tmp_path / "profile", *DESKTOP) as browser:
        assert http_get(daemon.url + "/-/ready")[0] == 503
        browser.navigate(daemon.url + "/")
        browser.wait_for("window.gpueffPage && gpueffPage.updates >= 1")
        status = browser.evaluate("(() => { const s = document.getElementById('status'); return [s.className, s.textContent, getComputedStyle(s).backgroundColor]; })()")
        assert status[0] == "status pending" and status[1].startswith("Not ready (/-/ready answers 503): No GPU yet: waiting for the NVIDIA driver"), status
        assert status[2] != "rgb(232, 244, 236)"  # not the green of a healthy page
        assert browser.evaluate("document.getElementById('gpus').textContent") == "No GPU in the exporter's last poll."

        browser.call("Emulation.setScriptExecutionDisabled", {"value": True}, session=browser.session)
        browser.navigate(daemon.url + "/")
        browser.wait_for("document.readyState === 'complete' && !window.gpueffPage")
        text = browser.evaluate("document.body.innerText")
        assert "JavaScript is off, so this page shows no figures and no charts." in text
        assert "Loading" not in text and browser.evaluate("document.getElementById('status').getClientRects().length") == 0
        save(browser, "live-page-no-javascript.png", (DESKTOP[0], 200))


def test_a_sort_in_the_address_that_names_an_objects_own_property_is_ignored(tmp_path: Path) -> None:
    # Before: "__proto__" in SORTS was true through the prototype, so ?sort=__proto__ made every
    # render throw: no cards, and a false "Lost contact with the exporter".
    with running_daemon("--demo") as daemon, Browser(tmp_path / "profile", *DESKTOP) as browser:
        for name in ("__proto__", "constructor", "toString", "hasOwnProperty"):
            browser.navigate(f"{daemon.url}/?sort={name}")
            browser.wait_for("window.gpueffPage && (gpueffPage.updates >= 1 || document.getElementById('status').classList.contains('error'))")
            status = browser.evaluate("document.getElementById('status').textContent")
            assert status.startswith("Updated "), (name, status)
            assert browser.evaluate("[gpueffPage.sort, document.getElementById('sort').value]") == ["waste", "waste"], name
            assert browser.evaluate("[...document.querySelectorAll('#gpus .gpu')].filter((card) => !card.hidden).length") == DEMO_GPUS, name
        # A page that fails to show an answer says so, and does not blame the exporter (before, any
        # TypeError, its own included, read "Lost contact ... no answer: it has stopped").
        browser.evaluate("gpueffPage.sort = '__proto__'")
        status = browser.wait_for("(s => s.startsWith('The exporter answered') && s)(document.getElementById('status').textContent)")
        assert status.startswith("The exporter answered, but this page could not show it (") and "Lost contact" not in status


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
            assert browser.evaluate("document.querySelector('.traces').textContent").endswith("gpu 0=" + HOSTILE)
            assert browser.evaluate("document.querySelectorAll('img').length") == 0 and browser.evaluate("document.title") == "gpu-efficiency-exporter"
            line = browser.wait_for("(document.querySelector('#gpus .gpu .apps').innerText.match(/trainer: .*samples\\/s · .*samples\\/J/) || [''])[0]")
            rate = float(line.removeprefix("trainer: ").split(" ")[0])
            # 500 a second, counted when the app answers and timed at the middle of each scrape: two
            # seconds between scrapes keep that difference small however long a busy machine makes them
            assert 400 < rate < 600, line


def test_a_multi_gpu_job_shows_in_the_summary_with_its_straggler_one_click_away(tmp_path: Path, trace_paths) -> None:
    paths = []
    for name in ("spin_1sm", "matmul_8192"):  # one job of two ranks, one far slower than the other: the exporter names the straggler
        trace = json.loads(trace_paths[name].read_text())
        trace["job"] = '<img src=x onerror="document.title=1">'
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(trace))
    with running_daemon("--replay", *map(str, paths)) as daemon, Browser(tmp_path / "profile", *DESKTOP) as browser:
        browser.navigate(daemon.url + "/")
        line = browser.wait_for("(document.querySelector('#jobs .job.straggling') || {}).textContent")
        assert line.startswith('trace <img src=x onerror="document.title=1">: GPUs 0, 1 · ') and " waits on GPU " in line
        assert browser.evaluate("document.querySelectorAll('img').length") == 0 and browser.evaluate("document.title") == "gpu-efficiency-exporter"
        straggler = browser.evaluate("gpueffPage.last.jobs[0].straggler")
        browser.evaluate("document.querySelector('#jobs .job.straggling a').click()")
        browser.wait_for(f"document.getElementById('gpu-{straggler}').classList.contains('target')")
        owner = browser.evaluate("document.querySelector('#gpu-0 .owner').textContent")
        assert owner == 'job trace <img src=x onerror="document.title=1"> (GPUs 0, 1)'


@contextlib.contextmanager
def nvml_page(tmp_path: Path, trace_paths, gpus: list, processes: dict[int, tuple[str, str | None, int]], settings: dict | None = None) -> Iterator[str]:
    """The live page of the daemon's own server and poller over the fake pynvml (real time), its
    processes' /proc in ``tmp_path``: pid -> (name, cgroup or None for a login session, uid)."""
    from fakes.nvml import FakeNvml
    from fakes.proc import process

    from gpueff.backends.nvml.backend import NvmlBackend
    from gpueff.commands.daemon import live_page
    from gpueff.poller import Poller
    from gpueff.settings import parse_config
    from gpueff.web.payload import Payloads
    from gpueff.web.server import WebServer

    proc = tmp_path / "proc"
    for pid, (name, cgroup, uid) in processes.items():
        process(proc, pid, name, cgroup=cgroup, uid=uid)
    backend = NvmlBackend(nvml=FakeNvml(gpus))
    devices = backend.start()
    poller = Poller(backend, parse_config({"proc_root": str(proc), "collect_interval": "500ms", **(settings or {})}))
    payloads = Payloads()
    poller.subscribe(payloads.publish)
    page = live_page(poller, "fake NVML", "/metrics")
    web = WebServer("127.0.0.1:0", payloads.payload, poller.is_ready, "fake NVML", page=page)
    web.start()
    poller.start(devices)
    try:
        yield f"http://127.0.0.1:{web.port}"
    finally:
        poller.stop()
        web.close()
        backend.close()


POD_CGROUP = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e3d4c_5b6a_4789_8a9b_0c1d2e3f4a5b.slice/cri-containerd-" + "a" * 64 + ".scope"
PROCESS_TABLE = "[...document.querySelectorAll('#gpu-{index} .procs tr')].map((row) => [...row.children].map((cell) => cell.textContent))"


def test_each_gpu_card_lists_its_processes_with_their_owners_and_names_as_text(tmp_path: Path, trace_paths) -> None:
    from fakes.nvml import FakeGpu

    from gpueff.trace import load_trace

    gib = 1 << 30
    shared = FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(10, 8 * gib, "/usr/bin/python3"), (20, 2 * gib, "/usr/bin/python3"), (30, gib, "/tmp/x")], process_duty={10: 0.6, 20: 0.3, 30: 0.1})
    free = FakeGpu(load_trace(trace_paths["idle"]))
    processes = {10: ("python3", POD_CGROUP, 0), 20: ("python3", "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0", 2001), 30: ("<b>x</b>", None, 1001)}
    with nvml_page(tmp_path, trace_paths, [shared, free], processes, {"sharing": {"enabled": True}}) as url, Browser(tmp_path / "profile", *DESKTOP) as browser:
        browser.navigate(url + "/")
        browser.wait_for("window.gpueffPage && gpueffPage.updates >= 1 && document.querySelectorAll('#gpus .gpu').length === 2")
        browser.wait_for("document.querySelector('#gpu-0 .procs td:nth-child(4)').textContent === '60 %'")  # a window's per-process samples (the first poll only primes them)
        assert browser.evaluate("document.querySelector('#gpu-0 .procs summary').textContent") == "3 processes · 11264 MiB"
        assert browser.evaluate("document.querySelector('#gpu-0 .procs').open") is True  # a few: shown at once
        rows = browser.evaluate(PROCESS_TABLE.format(index=0))
        assert rows == [
            ["PID", "user", "memory", "busy", "owner", "command"],
            ["10", "0", "8192 MiB", "60 %", "pod 1f2e3d4c-5b6a-4789-8a9b-0c1d2e3f4a5b", "python3"],
            ["20", "2001", "2048 MiB", "30 %", "job 4242", "python3"],
            ["30", "1001", "1024 MiB", "10 %", "user 1001", "<b>x</b>"],  # a bare host's Unix user owns it; its name is text
        ]
        assert browser.evaluate("document.querySelectorAll('#gpus b').length") == browser.evaluate("document.querySelectorAll('#gpus .figures b').length")  # no <b> from the name
        assert browser.evaluate("document.querySelector('#gpu-1 .procs summary').textContent") == "no compute process"
        save(browser, "live-page-processes.png", DESKTOP)


SHOWN = "[...document.querySelectorAll('#gpus .gpu')].filter((card) => !card.hidden).map((card) => card.id)"


def test_the_search_finds_gpus_by_pod_namespace_job_or_user_and_stays_in_the_address(tmp_path: Path) -> None:
    with running_daemon("--demo") as daemon, Browser(tmp_path / "profile", *DESKTOP) as browser:
        browser.navigate(daemon.url + "/")
        browser.wait_for(f"window.gpueffPage && gpueffPage.updates >= 1 && document.querySelectorAll('#gpus .gpu').length === {DEMO_GPUS}")
        typed = "(text) => { const box = document.getElementById('search'); box.value = text; box.dispatchEvent(new Event('input')); }"
        browser.evaluate(f"({typed})('ns:serving')")
        assert sorted(browser.evaluate(SHOWN)) == ["gpu-6", "gpu-8", "gpu-9"] and browser.evaluate("document.querySelectorAll('#ranking a').length") == 3
        assert browser.evaluate("location.search") == "?q=ns%3Aserving" and browser.evaluate("document.getElementById('found').textContent") == f"3 of {DEMO_GPUS} GPUs"
        for query, cards in (("job:48213", ["gpu-13", "gpu-14", "gpu-15", "gpu-16", "gpu-17"]), ("user:1005", ["gpu-18", "gpu-19"]), ("pod:sweep-lr", ["gpu-4"]), ("jupyter", ["gpu-1"]), ("SERVING host", ["gpu-8", "gpu-9"])):
            browser.evaluate(f"({typed})({json.dumps(query)})")
            assert sorted(browser.evaluate(SHOWN), key=lambda card: int(card.split("-")[1])) == cards, query
        save(browser, "live-page-search.png", DESKTOP)
        # The search, the class and the order together, in the address: a new page opened on it shows the same.
        browser.evaluate(f"({typed})('ns:serving')")
        browser.evaluate("document.querySelector('#classes .chip[data-only=\"host\"]').click()")
        browser.evaluate("(() => { const s = document.getElementById('sort'); s.value = 'index'; s.dispatchEvent(new Event('change')); })()")
        address = browser.evaluate("location.search")
        assert address == "?sort=index&only=host&q=ns%3Aserving"
        browser.navigate(daemon.url + "/" + address)
        browser.wait_for("window.gpueffPage && gpueffPage.updates >= 1")
        assert browser.evaluate(SHOWN) == ["gpu-8", "gpu-9"] and browser.evaluate("document.getElementById('search').value") == "ns:serving"
        # Nothing found says so; a flagged GPU named in the summary is shown on a click, the search cleared.
        browser.evaluate(f"({typed})('nothing-is-called-this')")
        assert browser.evaluate("document.querySelector('#gpus .empty').textContent") == "No GPU matches the search." and browser.evaluate(SHOWN) == []
        browser.evaluate("document.querySelector('#flagged a').click()")
        browser.wait_for("document.getElementById('gpu-4').classList.contains('target') && !document.getElementById('gpu-4').hidden")
        assert browser.evaluate("[document.getElementById('search').value, location.search]") == ["", "?sort=index"]
        # Words from the address are the search's text, never keys into the page's objects.
        for query in ("__proto__:x", "constructor", "toString:1", "hasOwnProperty"):
            browser.navigate(f"{daemon.url}/?q={query}")
            browser.wait_for("window.gpueffPage && (gpueffPage.updates >= 1 || document.getElementById('status').classList.contains('error'))")
            assert browser.evaluate("document.getElementById('status').textContent").startswith("Updated "), query
            assert browser.evaluate(SHOWN) == [] and browser.evaluate("document.querySelector('#gpus .empty').textContent") == "No GPU matches the search.", query
