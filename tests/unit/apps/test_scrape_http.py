"""HTTP details on both sides: the app client skips 1xx interim answers, follows a few redirects
to the same scheme and says once when an app repeats a series; the server answers
``Expect: 100-continue``. Real loopback peers; real curl where it is installed."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess

import pytest
from fakes.apps import raw_serving, send, serving
from waiting import PATIENCE

from gpueff.apps.monitor import Scraper
from gpueff.apps.scrape import ScrapeError, fetch, read_counter
from gpueff.settings import parse_config
from gpueff.web.payload import Payload
from gpueff.web.server import WebServer

BODY = b"# TYPE x counter\nx_total 7\n"
FINAL = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY


def read(url: str) -> dict:
    return read_counter(fetch(url, 2.0, 1 << 20, ["x_total"]), "x_total", {})


def test_interim_answers_before_the_final_one_are_skipped():
    """Before: 'HTTP status 100' failed every scrape of an app whose server sends 100 Continue or 103 Early Hints."""
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    with raw_serving(lambda connection: connection.sendall(interim + FINAL)) as url:
        assert read(url) == {(): 7.0}
    with raw_serving(lambda connection: connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 20 + FINAL)) as url, pytest.raises(ScrapeError, match="more than 10 interim"):
        read(url)


def redirecting(location_of: dict[str, str]):
    def respond(handler) -> None:
        location = location_of.get(handler.path)
        if location is None:
            send(handler, BODY)
            return
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return respond


def test_redirects_are_followed_a_few_times_to_the_same_scheme():
    """Before: 'HTTP status 302' (Prometheus follows redirects; so does the join now)."""
    with serving(redirecting({"/metrics": "/v2/metrics", "/v2/metrics": "/v3"})) as url:
        assert read(url) == {(): 7.0}
    loop = {"/metrics": "/a", "/a": "/b", "/b": "/c", "/c": "/d", "/d": "/metrics"}
    with serving(redirecting(loop)) as url, pytest.raises(ScrapeError, match="more than 3 redirects"):
        read(url)
    with serving(redirecting({"/metrics": "https://127.0.0.1:1/metrics"})) as url, pytest.raises(ScrapeError, match="only redirects to the same scheme"):
        read(url)


def test_a_redirect_to_another_host_or_port_is_not_followed():
    """Before: an app's 302 sent the scrape to any host and port (another loopback service of the node)."""
    asked: list[str] = []

    def other_service(handler) -> None:
        asked.append(handler.path)
        send(handler, BODY)

    with serving(other_service) as other:
        port = other.split(":")[2].split("/")[0]
        for location in (f"http://127.0.0.1:{port}/metrics", f"http://localhost:{port}/metrics", f"//127.0.0.1:{port}/metrics"):
            with serving(redirecting({"/metrics": location})) as url, pytest.raises(ScrapeError, match=r"only redirects to the same scheme, host and port are followed"):
                read(url)
        with serving(redirecting({"/metrics": f"http://user:secret@127.0.0.1:{port}/metrics"})) as url, pytest.raises(ScrapeError) as raised:
            read(url)
        assert "a redirect with credentials in its URL is not followed" in str(raised.value) and "secret" not in str(raised.value)
    assert asked == []

    def to_itself_in_full(handler) -> None:
        host, port = handler.server.server_address[:2]
        redirecting({"/metrics": f"HTTP://{host}:{port}/v2/metrics"})(handler)

    with serving(to_itself_in_full) as url:  # the same origin, spelled out: followed
        assert read(url) == {(): 7.0}


def test_a_repeated_series_is_logged_once_and_its_last_value_used(caplog):
    """Before, the last value won silently: a page with two series of one name and labels."""
    body = b'x_total{a="1"} 5\nx_total{a="1"} 9\n'
    caplog.set_level(logging.WARNING, logger="gpueff.apps.monitor")
    with serving(lambda handler: send(handler, body)) as url:
        app = parse_config({"apps": [{"name": "llm", "url": url, "counter": "x_total", "unit": "tokens"}]}).apps[0]
        scraper = Scraper(app)
        readings = [scraper.scrape_once() for _ in range(3)]
    assert all(reading.units == {(("a", "1"),): 9.0} for reading in readings)
    lines = [record.getMessage() for record in caplog.records if "more than once" in record.getMessage()]
    assert len(lines) == 1 and 'x_total{a="1"}' in lines[0]


@pytest.fixture()
def web():
    server = WebServer("127.0.0.1:0", lambda gzip: Payload((b"m 1\n",), None), lambda: True, "expect")
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_expect_100_continue_is_answered_before_the_body(web):
    """Before, a client that waits for 100 Continue (curl does, for a second) got nothing until its own timeout."""
    with socket.create_connection(("127.0.0.1", web.port), timeout=PATIENCE) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        assert sock.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"hello")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK\r\n")
    with socket.create_connection(("127.0.0.1", web.port), timeout=PATIENCE) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 417 Expectation Failed\r\n")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_gets_its_100_continue(web):
    result = subprocess.run(["curl", "-sv", "--expect100-timeout", "30", "-X", "GET", "-H", "Expect: 100-continue", "--data-binary", "hello", f"http://127.0.0.1:{web.port}/metrics"], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0 and result.stdout == "m 1\n"
    assert "< HTTP/1.1 100 Continue" in result.stderr
