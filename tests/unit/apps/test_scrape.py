"""The app fetch against real loopback peers that answer byte by byte: every HTTP/1.x framing a
metrics endpoint uses, and peers that dribble, hang, refuse or send too much. One deadline covers
the whole exchange, so a 1 s scrape_timeout ends in about 1 s however the peer behaves."""

from __future__ import annotations

import ssl
import threading

import pytest
from conftest import free_port
from fakes.apps import App, answer_of, dribble, raw_serving, serving
from prometheus_client import Counter
from prometheus_client.parser import text_string_to_metric_families
from waiting import PATIENCE

from gpueff.apps.scrape import MAX_SERIES, ScrapeError, fetch, read_counter
from gpueff.backends.replay import ReplayBackend
from gpueff.exposition.render import render
from gpueff.poller import Poller
from gpueff.settings import parse_config
from gpueff.trace import load_trace

BODY = b"# TYPE x counter\nx_total 7\n"
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"


def answering(data: bytes):
    return lambda connection: connection.sendall(data)


@pytest.mark.parametrize(
    "response",
    [
        HEAD + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY) + BODY,  # closed right after (3.12+ broke here)
        HEAD + b"Connection: close\r\n\r\n" + BODY,  # no Content-Length: the body ends when the peer closes
        b"HTTP/1.0 200 OK\n\n" + BODY,  # HTTP/1.0, bare LF line ends
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\n# TYP\r\n" + b"%x\r\n" % (len(BODY) - 5) + BODY[5:] + b"\r\n0\r\nX-Trailer: t\r\n\r\n",
        HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY + b"HTTP/1.1 200 OK\r\n",  # bytes past Content-Length are not read
    ],
    ids=["connection-close", "no-content-length", "http-1.0", "chunked", "keep-alive-extra-bytes"],
)
def test_framings_give_the_body(response):
    with raw_serving(answering(response)) as url:
        answer = fetch(url, timeout=PATIENCE, max_bytes=1 << 20, names=["x_total"])
    assert answer.wanted == (b"# TYPE x counter", b"x_total 7") and answer.lines == 2
    assert read_counter(answer, "x_total", {}) == {(): 7.0}


def test_a_real_prometheus_client_endpoint_on_every_python():
    app = App(lambda registry: Counter("work_units", "Units.", registry=registry))
    app.metrics.inc(42)
    with serving(app.respond) as url:
        for _ in range(3):  # the same scraper fetches again and again, as a Scraper does
            assert read_counter(fetch(url, PATIENCE, 1 << 20, ["work_units_total"]), "work_units_total", {}) == {(): 42.0}


@pytest.mark.parametrize(
    "response, reason",
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n", "not an HTTP/1.x answer"),
        (HEAD + b"Content-Length: 50\r\n\r\n" + BODY, "closed before the end of the body"),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n", "not followed by CR LF"),
        (HEAD + b"Transfer-Encoding: gzip\r\n\r\n", "unsupported Transfer-Encoding"),
        (HEAD + b"Content-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc", "gzip-encoded body"),
        (HEAD + b"Content-Length: -1\r\n\r\n", "bad Content-Length"),
        (HEAD + b"Content-Length: 3, 4\r\n\r\nabcd", "bad Content-Length"),
        (HEAD + b"Content-Length: \xb2\r\n\r\nab", "bad Content-Length"),  # '\xb2' passed isdigit, then int() raised: a scraper error, not a failed scrape
        (HEAD + b"Bad Header\r\n\r\n", "malformed header line"),
        (HEAD + b"".join(b"X-%d: y\r\n" % n for n in range(200)) + b"\r\n", "more than 100 headers"),
        (HEAD + b"X: " + b"y" * 70000 + b"\r\n\r\n", "header block is over"),
        (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", "HTTP status 404 Not Found"),
        (HEAD, "closed in the middle of the header block"),
    ],
)
def test_broken_answers_are_failed_scrapes(response, reason):
    with raw_serving(answering(response)) as url, pytest.raises(ScrapeError, match=reason):
        fetch(url, timeout=PATIENCE, max_bytes=1 << 20, names=["x_total"])


@pytest.mark.parametrize(
    "response",
    [
        HEAD + b"Content-Length: 2000001\r\n\r\n",  # refused from the header, before any body is read
        HEAD + b"Connection: close\r\n\r\n" + b"# pad\n" * 400_000,
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"10000\r\n" + b"#" * 0x10000 + b"\r\n" * 1 + (b"10000\r\n" + b"#" * 0x10000 + b"\r\n") * 40 + b"0\r\n\r\n",
    ],
    ids=["content-length", "until-close", "chunked"],
)
def test_oversized_answers_are_cut_at_max_bytes(response):
    with raw_serving(answering(response)) as url, pytest.raises(ScrapeError, match=r"over max_response_bytes \(2000000\)"):
        fetch(url, timeout=PATIENCE, max_bytes=2_000_000, names=["x_total"])


@pytest.mark.parametrize(
    "what",
    ["status line", "headers", "body", "hang"],
)
def test_one_deadline_covers_the_whole_exchange(what):
    """A peer sending one byte every 0.2 s: each byte comes well within the timeout, so only a
    deadline over the whole exchange ends it; sent whole, this answer would take over 20 s."""
    stop = threading.Event()
    head = HEAD + b"X-Padding: " + b"p" * 100 + b"\r\nContent-Length: %d\r\n\r\n" % len(BODY)
    answer = {
        "status line": dribble(head + BODY, 0.2, stop),
        "headers": lambda connection: (connection.sendall(head[:20]), dribble(head[20:] + BODY, 0.2, stop)(connection)),
        "body": lambda connection: (connection.sendall(head), dribble(BODY * 5, 0.2, stop)(connection)),
        "hang": lambda connection: stop.wait(PATIENCE),
    }[what]
    try:
        with raw_serving(answer) as url, pytest.raises(ScrapeError, match=r"no complete answer within scrape_timeout \(1s\)"):
            fetch(url, timeout=1.0, max_bytes=1 << 20, names=["x_total"])  # per-read timeouts would read it all
    finally:
        stop.set()


def test_refused_and_no_host():
    with pytest.raises(ScrapeError, match="connection refused"):
        fetch(f"http://127.0.0.1:{free_port()}/metrics", 1, 1000, ["x_total"])
    with pytest.raises(ScrapeError, match="names no host"):
        fetch("http://:8000/metrics", 1, 1000, ["x_total"])


def test_https_verifies_the_peer(tmp_path, monkeypatch):
    tls_certs = pytest.importorskip("tls_certs")
    pki = tls_certs.make_pki(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(pki.server.cert, pki.server.key)

    def answer(connection):
        connection.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)

    with raw_serving(answer, tls=server_context) as url:
        url = url.replace("http://", "https://")
        with pytest.raises(ScrapeError, match="TLS: CERTIFICATE_VERIFY_FAILED"):
            fetch(url, PATIENCE, 1 << 20, ["x_total"])
        monkeypatch.setenv("SSL_CERT_FILE", str(pki.server_ca.cert))  # the system CA store, as the test sets it
        assert fetch(url, PATIENCE, 1 << 20, ["x_total"]).wanted == (b"# TYPE x counter", b"x_total 7")


# ---- the joined app: served as down, never as live, when the fetch fails ------------------------


def app_metrics(snapshot) -> dict[str, float]:
    text = render(snapshot).decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text) for sample in family.samples if sample.name.startswith("gpueff_app_")}


def test_a_dribbling_app_is_down_after_its_timeout(trace_paths):
    stop = threading.Event()
    mode = {"dribble": False}
    good = HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY

    def answer(connection):
        if mode["dribble"]:
            dribble(good, 0.2, stop)(connection)
        else:
            connection.sendall(good)

    backend = ReplayBackend([load_trace(trace_paths["matmul_8192"])])
    backend.start()
    try:
        with raw_serving(answer) as url:
            config = parse_config({"apps": [{"name": "job", "url": url, "counter": "x_total", "unit": "steps", "scrape_interval": "1s"}]})
            assert config.apps[0].scrape_timeout == 1.0  # Prometheus' default: min(2s, scrape_interval)
            poller = Poller(backend, config)
            scraper = poller.apps.scrapers[0]
            scraper.scrape_once()
            assert app_metrics(poller.poll_once())["gpueff_app_up"] == 1
            mode["dribble"] = True
            reading = scraper.scrape_once()  # the whole answer would take 20+ s
            metrics = app_metrics(poller.poll_once())
    finally:
        stop.set()
    assert "scrape_timeout (1s)" in reading.error
    assert metrics["gpueff_app_up"] == 0
    assert "gpueff_app_throughput_per_second" not in metrics


def test_a_stuck_scraper_is_not_served_as_live(trace_paths):
    """Whatever holds a scrape past its deadline (a name lookup, a bug), the last figures go stale."""
    now = [1000.0]
    backend = ReplayBackend([load_trace(trace_paths["matmul_8192"])], clock=lambda: now[0])
    backend.start()
    app = App(lambda registry: Counter("x", "X.", registry=registry))
    with serving(app.respond) as url:
        config = parse_config({"apps": [{"name": "job", "url": url, "counter": "x_total", "unit": "steps", "scrape_interval": "5s"}]})
        poller = Poller(backend, config, clock=lambda: now[0])
        poller.apps.scrapers[0].scrape_once()
        assert poller.poll_once().apps[0].up
        now[0] += 11.0  # within 2 x scrape_interval + scrape_timeout (12 s): still the last reading
        assert poller.poll_once().apps[0].up
        now[0] += 2.0
        assert not poller.poll_once().apps[0].up


# ---- a large but allowed response: only the wanted lines are parsed -------------------------------


def test_only_the_wanted_families_are_parsed_and_series_are_capped():
    noise = "".join(f'other_metric{{id="{n}"}} {n}\n' for n in range(50_000))
    text = f"# HELP x_total X.\n# TYPE x_total counter\n{noise}x_total{{a=\"1\"}} 2\nx_total{{a=\"2\"}} 3\n"
    assert sum(read_counter(answer_of(text, "x_total"), "x_total", {}).values()) == 5
    assert read_counter(answer_of(text + "garbage that is never parsed {\n", "x_total"), "x_total", {"a": "2"}) == {(("a", "2"),): 3.0}
    many = "".join(f'x_total{{id="{n}"}} 1\n' for n in range(MAX_SERIES + 1))
    with pytest.raises(ScrapeError, match=f"over {MAX_SERIES} series of x_total"):
        answer_of(many, "x_total")
