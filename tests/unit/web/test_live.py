"""The live page's data: the bounded history fed by the poller's snapshots, the /api/live JSON, the
page's files, and --no-web.ui."""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import threading

import pytest
from conftest import http_get, payloads_following, running_daemon
from waiting import PATIENCE, wait_until

from gpueff.apps.derive import AppState
from gpueff.backends.replay import ReplayBackend
from gpueff.overview import snapshot_overview
from gpueff.poller import Poller
from gpueff.settings import Config
from gpueff.taxonomy import CLASSES
from gpueff.trace import load_trace
from gpueff.web.history import History
from gpueff.web.live import LiveData, parse_after
from gpueff.web.page import ASSETS, UI, LivePage, landing_page
from gpueff.web.server import WebServer
from unit.web.test_server import request


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def replay_poller(trace_paths, clock: Clock, names=("spin_1sm", "matmul_8192")) -> Poller:
    backend = ReplayBackend([load_trace(trace_paths[name]) for name in names], clock=clock)
    backend.start()
    return Poller(backend, Config(), clock=clock)


def test_history_is_bounded_and_numbers_its_points(trace_paths) -> None:
    clock = Clock()
    poller = replay_poller(trace_paths, clock)
    history = History(capacity=5, wall_clock=lambda: clock.now + 1.7e9)
    poller.subscribe(history.add)
    for _ in range(12):
        clock.now += 1.0
        poller.poll_once()
    view = history.since(0)
    assert (view.first, view.last, len(view.times)) == (8, 12, 5)  # the oldest seven are gone
    assert view.times == sorted(view.times) and view.times[-1] == clock.now + 1.7e9
    spin = view.gpus["GPU-replay-0-spin_1sm"]
    assert all(value is not None and value > 950 for value in spin.utilization)  # thousandths
    assert all(value is not None and value < 20 for value in spin.sm_active)  # one SM of 132: the gap the page fills
    assert len(history._times) == 5 and all(len(ring.values) == 5 for ring in history._utilization.values())
    newer = history.since(10)
    assert (newer.first, newer.last, len(newer.times)) == (11, 12, 2)
    assert history.since(12).times == [] and history.since(12).gpus["GPU-replay-0-spin_1sm"].utilization == []


def test_polls_faster_than_the_resolution_are_averaged_into_one_point(trace_paths) -> None:
    clock = Clock()
    snapshot = replay_poller(trace_paths, clock, names=("matmul_8192",)).poll_once()
    state = snapshot.gpus[0]
    history = History(capacity=100, resolution=1.0, wall_clock=clock)
    for busy in (1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.2):  # every 250 ms
        derived = dataclasses.replace(state.derived, busy=busy)
        history.add(dataclasses.replace(snapshot, gpus=(dataclasses.replace(state, derived=derived),)))
        clock.now += 0.25
    view = history.since(0)
    assert view.gpus["GPU-replay-0-matmul_8192"].utilization == [1000, 500, 50]  # the first poll, then a second's mean each
    assert view.times == [1000.0, 1001.0, 1002.0]


def test_a_gpu_that_leaves_leaves_the_history_and_a_down_gpu_has_no_values(trace_paths) -> None:
    clock = Clock()
    poller = replay_poller(trace_paths, clock)
    history = History(capacity=10, wall_clock=clock)
    snapshot = poller.poll_once()
    history.add(snapshot)
    down = dataclasses.replace(snapshot.gpus[1], derived=None)
    clock.now += 1
    history.add(dataclasses.replace(snapshot, gpus=(snapshot.gpus[0], down)))
    assert history.since(0).gpus["GPU-replay-1-matmul_8192"].utilization[-1] is None
    clock.now += 1
    history.add(dataclasses.replace(snapshot, gpus=(snapshot.gpus[0],)))
    assert list(history.since(0).gpus) == ["GPU-replay-0-spin_1sm"]


def test_parse_after_takes_only_a_plain_number() -> None:
    assert parse_after("after=42") == 42 and parse_after("x=1&after=7") == 7 and parse_after("after=3&after=x") == 3
    assert parse_after("") == 0 and parse_after("x=1") == 0 and parse_after("after=" + "9" * 18) == 10**18 - 1
    # '²' (byte 0xB2 of the request, read as Latin-1) passes str.isdigit and made int() raise; '١٢' int() reads as 12.
    for query in ("after=", "after=-1", "after=1e9", "after=" + "9" * 19, "after=%31", "after=\xb2", "after=\u0661\u0662", "after=\uff11", "after= 1"):
        assert parse_after(query) is None, query


def test_a_bad_after_gets_400_saying_why_and_the_connection_serves_on(trace_paths) -> None:
    # Before: '?after=\xb2' raised ValueError in the handler: HTTP 500.
    clock = Clock()
    poller = replay_poller(trace_paths, clock)
    history = History(wall_clock=clock)
    poller.subscribe(history.add)
    server = page_server(poller, history, clock)
    try:
        clock.now += 1
        poller.poll_once()
        with socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE) as sock:
            reader = sock.makefile("rb")
            for target in (b"/api/live?after=\xb2", b"/api/live?after=\xd9\xa1", b"/api/live?after=-1", b"/api/live?after=" + b"1" * 19):
                sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
                status, body = read_answer(reader)
                assert status == b"HTTP/1.1 400 Bad Request", (target, status)
                assert body == b"Bad query: 'after' must be a whole number of at most 18 digits 0-9.\n"
            sock.sendall(b"GET /api/live?after=0 HTTP/1.1\r\nHost: x\r\n\r\n")
            status, body = read_answer(reader)
            assert status == b"HTTP/1.1 200 OK" and json.loads(body)["history"]["last"] == 1
    finally:
        server.close()


def read_answer(reader) -> tuple[bytes, bytes]:
    """One HTTP answer's status line and body (it has a Content-Length)."""
    status = reader.readline().rstrip(b"\r\n")
    length = 0
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        length = int(value) if name.lower() == b"content-length" else length
    return status, reader.read(length)


def page_server(poller: Poller, history: History, clock: Clock) -> WebServer:
    note = "REPLAYED DATA: <test>"
    page = LivePage(LiveData(lambda: poller.snapshot, history, note, clock), note, "/metrics")
    exposition = payloads_following(poller)
    server = WebServer("127.0.0.1:0", exposition.payload, poller.ready.is_set, note, page=page)
    server.start()
    return server


def test_the_page_its_files_and_its_data_are_served_from_what_the_poller_published(trace_paths) -> None:
    clock = Clock()
    poller = replay_poller(trace_paths, clock)
    calls = 0
    collect = poller.backend.collect

    def counted():
        nonlocal calls
        calls += 1
        return collect()

    poller.backend.collect = counted
    history = History(wall_clock=clock)
    poller.subscribe(history.add)
    server = page_server(poller, history, clock)
    try:
        status, _, body = request(server.port, "GET", "/api/live")
        assert status == 503 and b"first poll" in body
        for _ in range(3):
            clock.now += 1
            poller.poll_once()
        status, headers, body = request(server.port, "GET", "/")
        assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
        assert b"REPLAYED DATA: &lt;test&gt;" in body and b'src="ui/uPlot.iife.min.js"' in body and b"http" not in body.replace(b"https://", b"").replace(b"http-equiv", b"")
        for path, (_, content_type) in ASSETS.items():
            status, headers, asset = request(server.port, "GET", path)
            assert status == 200 and headers["content-type"] == content_type and asset
        assert b"MIT License" in request(server.port, "GET", "/ui/LICENSE-uPlot.txt")[2]

        polls = calls
        for _ in range(5):  # the page's polls read the published snapshot: no backend call
            status, headers, body = request(server.port, "GET", "/api/live")
        assert calls == polls
        assert status == 200 and headers["content-type"] == "application/json" and headers["cache-control"] == "no-store"
        data = json.loads(body)
        assert data["replayed"] is True and data["stale"] is False and data["note"] == "REPLAYED DATA: <test>"
        assert set(data["classes"]) >= {"underfilled", "compute", "host"} and data["classes"]["underfilled"]["what_to_try"]
        spin, matmul = data["gpus"]
        assert spin["bottleneck"] == "underfilled" and spin["flags"] == ["high_util_low_sm", "low_efficiency", "high_util_low_work"]
        assert matmul["bottleneck"] == "compute" and 0.5e15 < matmul["tensor_flops"] < matmul["peak_tensor_flops"]
        assert data["fleet"]["gpus"] == 2 and data["fleet"]["flagged"] == 1 and data["fleet"]["classes"] == {"underfilled": 1, "compute": 1}
        assert data["history"]["last"] == 3 and len(data["history"]["times"]) == 3

        clock.now += 1
        poller.poll_once()
        newer = json.loads(request(server.port, "GET", "/api/live?after=3")[2])
        assert (newer["history"]["first"], newer["history"]["last"], len(newer["history"]["times"])) == (4, 4, 1)
        assert "classes" not in newer  # sent once, with the first answer

        clock.now += 60  # no poll since: the data is stale and every GPU is shown down, as /metrics does
        stale = json.loads(request(server.port, "GET", "/api/live?after=4")[2])
        assert stale["stale"] is True and not any(gpu["up"] for gpu in stale["gpus"]) and stale["fleet"]["up"] == 0
    finally:
        server.close()


def test_apps_joined_with_a_gpu_show_on_its_card(trace_paths) -> None:
    clock = Clock()
    snapshot = replay_poller(trace_paths, clock).poll_once()
    matmul = snapshot.gpus[1].sample.device
    app = AppState(name="trainer", unit="samples", up=True, gpus=(matmul,), throughput=812.5, units_per_joule=1.25)
    spin_view, matmul_view = snapshot_overview(dataclasses.replace(snapshot, apps=(app,)), stale=False)
    assert spin_view.apps == ()
    assert [(each.name, each.unit, each.throughput, each.units_per_joule) for each in matmul_view.apps] == [("trainer", "samples", 812.5, 1.25)]


@pytest.mark.parametrize("flag", ["--no-web.ui"])
def test_no_web_ui_leaves_a_bare_exporter(flag: str) -> None:
    with running_daemon("--demo", flag) as daemon:
        status, page = http_get(daemon.url + "/")
        assert status == 200 and "/metrics" in page and "uPlot" not in page
        assert http_get(daemon.url + "/api/live")[0] == 404 and http_get(daemon.url + "/ui/page.js")[0] == 404
        assert http_get(daemon.url + "/metrics")[0] == 200


def polls_of(daemon) -> float:
    return float(daemon.metrics().split("\ngpueff_collect_duration_seconds_count ")[1].split()[0])


def test_the_history_grows_with_polls_not_with_requests() -> None:
    with running_daemon("--demo", "--collect-interval", "200ms") as daemon:
        first = json.loads(http_get(daemon.url + "/api/live")[1])["history"]["last"]
        # Nobody asks /api/live meanwhile. A point a second: 21 polls on a 200 ms grid span about 4 s and make
        # at least two more (/metrics says how many polls there were).
        polls = polls_of(daemon)
        wait_until(lambda: polls_of(daemon) >= polls + 21, "21 more polls")
        later = json.loads(http_get(daemon.url + "/api/live?after=" + str(first))[1])["history"]
        assert later["last"] - first >= 2 and len(later["times"]) == later["last"] - first


def test_requests_pick_answers_made_once_per_snapshot_never_per_request(trace_paths) -> None:
    """/api/live's cost on the serving thread does not grow with the history or the GPUs: whatever
    ``after`` a request sends, the history is read once per snapshot (by the poller's thread while a
    page watches), never by the thread that answers requests."""
    clock = Clock()
    poller = replay_poller(trace_paths, clock)
    history = History(wall_clock=clock)
    poller.subscribe(history.add)
    note = "note"
    live = LiveData(lambda: poller.snapshot, history, note, clock)
    poller.subscribe(live.prepare)
    reads: list[str] = []
    since = history.since

    def counted(after: int = 0):
        reads.append(threading.current_thread().name)
        return since(after)

    history.since = counted
    server = WebServer("127.0.0.1:0", payloads_following(poller).payload, poller.ready.is_set, note, page=LivePage(live, note, "/metrics"))
    server.start()
    try:
        for _ in range(30):
            clock.now += 1
            poller.poll_once()
        status, _, first = request(server.port, "GET", "/api/live")  # nobody watched: made once, on this request
        assert status == 200 and reads and all(name != "poller" for name in reads)
        made = len(reads)
        for after in [0, 1, 29, 30, 7, 0, 1, 12345, 3] * 5:  # alternating, as the attack in issue 39
            status, _, body = request(server.port, "GET", f"/api/live?after={after}")
            assert status == 200
        assert len(reads) == made  # the same snapshot: no request read the history again
        reads.clear()
        clock.now += 1
        poller.poll_once()  # watched now: the poller makes the next snapshot's answers as it publishes
        assert reads and set(reads) == {threading.current_thread().name}  # poll_once runs here, as the poller thread would
        reads.clear()
        for after in (0, 31, 30, 5):
            assert request(server.port, "GET", f"/api/live?after={after}")[0] == 200
        assert reads == []
        data = json.loads(request(server.port, "GET", "/api/live?after=5")[2])  # far behind: the whole window, the page takes what it lacks
        assert data["history"]["first"] == 1 and data["history"]["last"] == 31 and "classes" in data
        exact = json.loads(request(server.port, "GET", "/api/live?after=29")[2])
        assert (exact["history"]["first"], exact["history"]["last"], len(exact["history"]["times"])) == (30, 31, 2)
    finally:
        server.close()


def test_the_data_says_whose_each_gpu_is_and_whether_the_exporter_is_ready(trace_paths) -> None:
    from gpueff.attribution.kubernetes.owners import GpuOwners, PodOwner
    from gpueff.attribution.slurm import SlurmJob
    from gpueff.pipeline.split import GpuSharing

    clock = Clock()
    snapshot = replay_poller(trace_paths, clock).poll_once()
    hostile = PodOwner("ml", '<img src=x onerror="alert(1)">', "main\x1b[2J", (("team", "a"),))
    spin = dataclasses.replace(snapshot.gpus[0], owners=GpuOwners(pods=(hostile, PodOwner("ml", "b", "c"))))
    matmul = dataclasses.replace(snapshot.gpus[1], sharing=GpuSharing(jobs=(SlurmJob("4242", user_id="1000"),)))
    snapshot = dataclasses.replace(snapshot, gpus=(spin, matmul))
    history = History(wall_clock=clock)
    answers = iter([False, True])
    live = LiveData(lambda: snapshot, history, "note", clock, ready=lambda: next(answers))
    data = json.loads(b"".join(live.answer(0)))
    first, second = data["gpus"]
    assert first["pods"] == [{"namespace": "ml", "pod": '<img src=x onerror="alert(1)">', "container": "main\x1b[2J"}, {"namespace": "ml", "pod": "b", "container": "c"}]
    assert first["slurm_jobs"] == [] and second["pods"] == []
    assert second["slurm_jobs"] == [{"id": "4242", "user_id": "1000"}]
    assert first["attribution"] == {"path": "none", "reason": "processes_not_listed"}  # a replay without owners
    assert data["attribution"]["reasons"]["processes_not_listed"].startswith("this backend cannot list") and "demo" in data["attribution"]["paths"]
    assert data["ready"] is False and json.loads(b"".join(live.answer(0)))["ready"] is True  # asked on each request, not made once per snapshot
    clock.now += 3600  # stale: not ready, whatever the poller says
    assert json.loads(b"".join(LiveData(lambda: snapshot, history, "note", clock, ready=lambda: True).answer(0)))["ready"] is False


def test_the_page_without_javascript_says_so_and_shows_no_loading_box() -> None:
    page = landing_page("REPLAYED DATA: recorded traces, not live GPUs.", "/metrics", "gpu 0=<b>spin</b>, gpu 1=copy").decode()
    status = re.search(r'<p id="status"[^>]*>', page).group(0)
    assert " hidden" in status  # the script shows it; without the script nothing claims to be loading
    noscript = re.search(r"<noscript>(.*?)</noscript>", page, re.S).group(1)
    assert "JavaScript is off" in noscript and 'href="/metrics"' in noscript
    assert '<p class="note">REPLAYED DATA: recorded traces, not live GPUs.</p>' in page
    assert "<details class=\"traces\"><summary>Which trace each GPU replays</summary><p>gpu 0=&lt;b&gt;spin&lt;/b&gt;, gpu 1=copy</p></details>" in page


def _luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(foreground: str, background: str) -> float:
    """WCAG 2's contrast ratio of two #rrggbb colours."""
    light, dark = sorted((_luminance(foreground), _luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_every_text_colour_on_the_page_passes_wcag_aa() -> None:
    css = (UI / "page.css").read_text()
    assert round(contrast("#ffffff", "#d4820f"), 1) == 3.0  # the old host badge the issue measured: the formula agrees
    classes = dict(re.findall(r"\.class-(\w+) \{ --class: (#[0-9a-f]{6}); \}", css))
    assert set(classes) == {each.name for each in CLASSES}  # a colour for every class, and the page's badges use it
    white_on = re.search(r"\.badge \{[^}]*color: #fff;[^}]*\}", css) and re.search(r"\.chip \{[^}]*color: #fff;[^}]*\}", css)
    assert white_on
    for name, colour in classes.items():
        assert contrast("#ffffff", colour) >= 4.5, (name, colour, contrast("#ffffff", colour))
    # Every rule that sets both a background and a text colour.
    pairs = re.findall(r"([^{}]+)\{[^}]*?background: (#[0-9a-f]{6});[^}]*?color: (#[0-9a-f]{6});", css)
    assert len(pairs) >= 6
    for selector, background, colour in pairs:
        assert contrast(colour, background) >= 4.5, (selector.strip(), colour, background)
    variables = dict(re.findall(r"--(\w+): (#[0-9a-f]{6});", css.split("}")[0]))
    for text in ("text", "muted"):
        for ground in ("card", "page"):
            assert contrast(variables[text], variables[ground]) >= 4.5, (text, ground)
