"""The HTTP side: a real WebServer on a loopback port, and the real daemon process."""

from __future__ import annotations

import http.client
import socket

import pytest
from conftest import http_get, running_daemon

from exporter.backends.replay import ReplayBackend
from exporter.config import Config
from exporter.exposition import CONTENT_TYPE, Exposition
from exporter.poller import Poller
from exporter.trace import load_trace
from exporter.web import ListenAddressError, WebServer, parse_listen_address


def request(port: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def start_server(trace_paths) -> tuple[WebServer, Poller]:
    """A real server over a real poller of two replayed traces that has not polled yet."""
    backend = ReplayBackend([load_trace(trace_paths["spin_1sm"]), load_trace(trace_paths["idle"])])
    backend.start()
    poller = Poller(backend, Config())
    exposition = Exposition(lambda: poller.snapshot)
    web = WebServer("127.0.0.1:0", exposition.body, poller.ready.is_set, "REPLAYED DATA: a note for the page")
    web.start()
    return web, poller


@pytest.fixture()
def fresh(trace_paths):
    web, poller = start_server(trace_paths)
    try:
        yield web, poller
    finally:
        web.close()


@pytest.fixture(scope="module")
def server(trace_paths):
    """Shared by the tests that do not need a server that has never polled (closing one takes 0.5 s)."""
    web, poller = start_server(trace_paths)
    poller.poll_once()
    try:
        yield web, poller
    finally:
        web.close()


def test_ready_is_503_before_the_first_poll_then_200(fresh):
    web, poller = fresh
    status, _, body = request(web.port, "GET", "/-/ready")
    assert status == 503 and b"first poll" in body
    status, _, body = request(web.port, "GET", "/metrics")
    assert status == 503 and b"first poll" in body
    assert request(web.port, "GET", "/-/healthy")[0] == 200  # alive all the same
    poller.poll_once()
    status, _, body = request(web.port, "GET", "/-/ready")
    assert status == 200 and body == b"Ready.\n"


def test_metrics_content_type_and_body(server):
    web, poller = server
    poller.poll_once()
    status, headers, body = request(web.port, "GET", "/metrics")
    assert status == 200
    assert headers["content-type"] == CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    assert int(headers["content-length"]) == len(body)
    text = body.decode()
    assert 'gpueff_gpu_up{gpu="0",uuid="GPU-replay-0-spin_1sm"} 1' in text
    assert 'gpueff_bottleneck{gpu="1",uuid="GPU-replay-1-idle",class="idle"} 1' in text
    assert text.endswith("\n")
    assert request(web.port, "GET", "/metrics?debug=1")[0] == 200  # a query string does not change the path


def test_landing_page(server):
    web, _ = server
    status, headers, body = request(web.port, "GET", "/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert b"REPLAYED DATA: a note for the page" in body
    assert b'href="/metrics"' in body and b"/-/healthy" in body and b"/-/ready" in body


def test_healthy(server):
    web, _ = server
    status, headers, body = request(web.port, "GET", "/-/healthy")
    assert status == 200 and body == b"Healthy.\n" and headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize("path", ["/nope", "/metrics/", "/-/", "/favicon.ico", "/-/reload"])
def test_unknown_paths_are_404(server, path):
    web, _ = server
    status, _, body = request(web.port, "GET", path)
    assert status == 404 and body == b"Not found.\n"


def test_head_sends_headers_without_a_body(server):
    web, poller = server
    poller.poll_once()
    _, get_headers, get_body = request(web.port, "GET", "/metrics")
    status, headers, body = request(web.port, "HEAD", "/metrics")
    assert status == 200 and body == b""
    assert headers["content-type"] == CONTENT_TYPE
    assert abs(int(headers["content-length"]) - len(get_body)) <= 3  # only the snapshot age may differ in width
    assert request(web.port, "HEAD", "/-/healthy")[:3:2] == (200, b"")
    assert request(web.port, "HEAD", "/nope")[0] == 404


def test_keep_alive_serves_several_requests_on_one_connection(server):
    web, poller = server
    poller.poll_once()
    connection = http.client.HTTPConnection("127.0.0.1", web.port, timeout=5)
    try:
        for path in ("/metrics", "/-/healthy", "/metrics"):
            connection.request("GET", path)
            response = connection.getresponse()
            assert response.status == 200 and response.read()
    finally:
        connection.close()


def test_port_zero_picks_a_free_port(server):
    web, _ = server
    assert web.port > 0


def test_a_port_in_use_raises_oserror():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            WebServer(f"127.0.0.1:{taken.getsockname()[1]}", lambda: b"", lambda: True, "")


@pytest.mark.parametrize(("address", "expected"), [("127.0.0.1:9947", ("127.0.0.1", 9947)), (":9947", ("", 9947)), ("[::1]:80", ("::1", 80)), ("localhost:0", ("localhost", 0))])
def test_listen_addresses(address, expected):
    assert parse_listen_address(address) == expected


@pytest.mark.parametrize("address", ["9947", "host", "host:", "host:port", "host:70000", "host:-1", ""])
def test_bad_listen_addresses(address):
    with pytest.raises(ListenAddressError, match="--web.listen-address"):
        parse_listen_address(address)


def test_the_daemon_process_serves_every_endpoint():
    with running_daemon("--demo", "--collect-interval", "200ms") as daemon:
        status, headers, body = request(daemon.port, "GET", "/metrics")
        assert status == 200 and headers["content-type"] == CONTENT_TYPE
        assert b'gpueff_exporter_build_info{' in body and b'gpueff_gpu_up{gpu="5"' in body
        status, headers, body = request(daemon.port, "GET", "/")
        assert status == 200 and headers["content-type"].startswith("text/html") and b"REPLAYED DATA" in body
        assert http_get(daemon.url + "/-/healthy") == (200, "Healthy.\n")
        assert http_get(daemon.url + "/-/ready") == (200, "Ready.\n")
        assert http_get(daemon.url + "/missing")[0] == 404
        status, headers, body = request(daemon.port, "HEAD", "/metrics")
        assert status == 200 and body == b"" and int(headers["content-length"]) > 1000


def test_the_daemon_serves_a_custom_telemetry_path():
    with running_daemon("--demo", "--web.telemetry-path", "/gpu-metrics") as daemon:
        assert http_get(daemon.url + "/gpu-metrics")[0] == 200
        assert http_get(daemon.url + "/metrics")[0] == 404
        assert b'href="/gpu-metrics"' in request(daemon.port, "GET", "/")[2]
