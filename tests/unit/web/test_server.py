"""The HTTP side: a real WebServer on a loopback port, and the real daemon process."""

from __future__ import annotations

import gzip
import http.client
import socket
import struct
import time

import pytest
from conftest import http_get, payloads_following, running_daemon
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from waiting import PATIENCE

from gpueff.backends.replay import ReplayBackend
from gpueff.exposition.text import CONTENT_TYPE
from gpueff.httpserver.request import REASONS, HttpError, head_end, parse_head
from gpueff.poller import Poller
from gpueff.settings import Config
from gpueff.trace import load_trace
from gpueff.web.payload import Payload
from gpueff.web.server import ListenAddressError, WebServer, parse_listen_address


def request(port: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE)
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
    exposition = payloads_following(poller)
    web = WebServer("127.0.0.1:0", exposition.payload, poller.ready.is_set, "REPLAYED DATA: a note for the page")
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
    assert status == 503 and b"no fresh GPU data" in body
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
    connection = http.client.HTTPConnection("127.0.0.1", web.port, timeout=PATIENCE)
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
            WebServer(f"127.0.0.1:{taken.getsockname()[1]}", lambda gzip: None, lambda: True, "")


@pytest.mark.parametrize(("address", "expected"), [("127.0.0.1:9947", ("127.0.0.1", 9947)), (":9947", ("", 9947)), ("[::1]:80", ("::1", 80)), ("localhost:0", ("localhost", 0))])
def test_listen_addresses(address, expected):
    assert parse_listen_address(address) == expected


@pytest.mark.parametrize("address", ["9947", "host", "host:", "host:port", "host:70000", "host:-1", "", "host:\u00b2", "host:\u0661", "host:+80"])
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


# --- the protocol: raw bytes on a socket -------------------------------------------------------


def raw_exchange(port: int, data: bytes, timeout: float = PATIENCE) -> bytes:
    """Send ``data``, half-close, and read everything until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def responses(data: bytes) -> list[tuple[str, dict[str, str], bytes]]:
    """Split a byte stream of HTTP responses (each with Content-Length) into (status line, headers, body)."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
        length = int(headers["content-length"])
        out.append((status_line, headers, rest[:length]))
        data = rest[length:]
    return out


def test_a_get_with_a_body_has_the_body_discarded_not_served_as_a_request(server):
    web, _ = server
    smuggled = b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
    stream = b"GET /-/healthy HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(smuggled), smuggled) + b"GET /-/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answers = responses(raw_exchange(web.port, stream))
    assert [(status, body) for status, _, body in answers] == [("HTTP/1.1 200 OK", b"Healthy.\n"), ("HTTP/1.1 200 OK", b"Ready.\n")]


def test_a_request_body_over_the_bound_gets_413_and_a_closed_connection(server):
    web, _ = server
    answers = responses(raw_exchange(web.port, b"GET /-/healthy HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n" + b"x" * 1000))
    assert len(answers) == 1
    status, headers, body = answers[0]
    assert status == "HTTP/1.1 413 Content Too Large" and headers["connection"] == "close" and b"not accepted" in body


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET / HTTP/1.1 extra\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET nope HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET / HTTP/1.1\r\n folded: header\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET / HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", "HTTP/1.1 413 Content Too Large"),
    (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported"),
    (b"GET / HTTP/1.1\r\nX-Long: " + b"a" * 20000 + b"\r\n\r\n", "HTTP/1.1 431 Request Header Fields Too Large"),
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi", "HTTP/1.1 405 Method Not Allowed"),
])
def test_bad_requests_get_a_plain_text_status_and_a_closed_connection(server, request_bytes, status):
    web, _ = server
    answers = responses(raw_exchange(web.port, request_bytes))
    assert len(answers) == 1, answers
    status_line, headers, body = answers[0]
    assert status_line == status
    assert headers["content-type"] == "text/plain; charset=utf-8" and headers["connection"] == "close"
    assert body.endswith(b".\n") and b"<" not in body  # a sentence, not an HTML page


def test_pipelined_requests_are_answered_in_order_and_http_1_0_closes(server):
    web, _ = server
    stream = b"GET /-/healthy HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\n\r\nGET /-/ready HTTP/1.0\r\n\r\nGET /-/healthy HTTP/1.1\r\n\r\n"
    answers = responses(raw_exchange(web.port, stream))
    assert [status for status, _, _ in answers] == ["HTTP/1.1 200 OK", "HTTP/1.1 404 Not Found", "HTTP/1.1 200 OK"]  # 1.0 without keep-alive: closed after it
    assert answers[2][1]["connection"] == "close"
    answers = responses(raw_exchange(web.port, b"GET /-/healthy HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /-/ready HTTP/1.0\r\n\r\n"))
    assert [headers.get("connection") for _, headers, _ in answers] == ["keep-alive", "close"]


def test_metrics_head_and_body_come_in_one_write(server, monkeypatch):
    """One sendmsg per answer: the head and the cached body are not sent (or joined) apart."""
    web, poller = server
    poller.poll_once()
    calls = []
    real_sendmsg = socket.socket.sendmsg

    def counting_sendmsg(self, buffers, *args):
        buffers = list(buffers)
        calls.append([len(buffer) for buffer in buffers])
        return real_sendmsg(self, buffers, *args)

    monkeypatch.setattr(socket.socket, "sendmsg", counting_sendmsg)
    status, _, body = request(web.port, "GET", "/metrics")
    assert status == 200
    assert len(calls) == 1 and len(calls[0]) == 3  # head, the cached text, the age line
    assert sum(calls[0][1:]) == len(body)


def test_client_resets_leave_one_line_at_most_never_a_traceback():
    """Connections reset mid-request, mid-answer (50 pipelined scrapes, none read) and mid-handshake."""
    with running_daemon("--demo") as daemon:
        for number in range(30):
            sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=PATIENCE)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends a reset
            if number % 3 == 0:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            elif number % 3 == 1:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 50)
                time.sleep(0.01)
            sock.close()
        assert b"gpueff_gpu_up" in request(daemon.port, "GET", "/metrics")[2]
        assert daemon.stop() == 0
    assert "Traceback" not in daemon.output and "Exception" not in daemon.output, daemon.output


def test_metrics_ask_for_gzip_when_the_scraper_accepts_it_and_say_how_they_are_encoded():
    asked: list[bool] = []

    def metrics(gzip: bool) -> Payload:
        asked.append(gzip)
        return Payload((b"\x1f\x8b-compressed", b"-tail"), "gzip") if gzip else Payload((b"m 1\n",), None)

    web = WebServer("127.0.0.1:0", metrics, lambda: True, "gzip")
    web.start()
    try:
        for accept in ("gzip", "deflate, gzip;q=0.5", "*", "gzip;q=0", "identity", None):
            connection = http.client.HTTPConnection("127.0.0.1", web.port, timeout=PATIENCE)
            connection.request("GET", "/metrics", headers={"Accept-Encoding": accept} if accept else {"Accept-Encoding": ""})
            response = connection.getresponse()
            body = response.read()
            connection.close()
            assert response.getheader("Vary") == "Accept-Encoding"
            if asked[-1]:
                assert response.getheader("Content-Encoding") == "gzip" and body == b"\x1f\x8b-compressed-tail"
            else:
                assert response.getheader("Content-Encoding") is None and body == b"m 1\n"
    finally:
        web.close()
    assert asked == [True, True, True, False, False, False]


REQUEST_PIECES = [b"GET ", b"HEAD ", b"POST ", b"/metrics", b"/", b"?x=1", b" HTTP/1.1", b" HTTP/1.0", b" HTTP/2.0", b"\r\n", b"\n", b"\r\n\r\n",
                  b"Host: x", b"Connection: close", b"Connection: keep-alive", b"Content-Length: 3", b"Content-Length: -1", b"Content-Length: 99999999999999999999",
                  b"Transfer-Encoding: chunked", b"Authorization: Basic Zm9vOmJhcg==", b": ", b" ", b"\t", b"\x00", b"\xff", b"abc"]
request_bytes = st.one_of(st.binary(max_size=300), st.lists(st.sampled_from(REQUEST_PIECES), max_size=30).map(b"".join))


@settings(max_examples=300, derandomize=True)
@given(request_bytes)
def test_the_request_parser_answers_a_request_or_an_http_error_for_any_bytes(data):
    found = head_end(data)
    head = data[: found[0]] if found else data
    try:
        parsed = parse_head(head)
    except HttpError as error:
        assert error.status in REASONS and error.message.endswith(".")
    else:
        assert parsed.method and parsed.path.startswith("/") and parsed.content_length >= 0


@settings(max_examples=60, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=request_bytes)
def test_the_server_answers_any_bytes_with_a_status_line_or_a_close_and_keeps_serving(server, data):
    web, _ = server
    answer = raw_exchange(web.port, data)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 ") or answer.startswith(b"HTTP/1.0 400"), answer[:100]
    assert request(web.port, "GET", "/-/healthy")[0] == 200


def test_a_real_scrape_with_gzip_decompresses_to_the_plain_text(server):
    web, _ = server
    connection = http.client.HTTPConnection("127.0.0.1", web.port, timeout=PATIENCE)
    try:
        connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        response = connection.getresponse()
        zipped = response.read()
        assert response.status == 200 and response.getheader("Content-Encoding") == "gzip" and int(response.getheader("Content-Length")) == len(zipped)
        connection.request("GET", "/metrics")
        text = connection.getresponse().read()
    finally:
        connection.close()
    assert gzip.decompress(zipped).split(b"gpueff_snapshot_age_seconds ")[0] == text.split(b"gpueff_snapshot_age_seconds ")[0]


def test_a_failing_metrics_source_gets_500_on_one_line_and_the_server_serves_on(caplog):
    def broken(gzip: bool) -> Payload:
        raise RuntimeError("a bug\nwith a second line")

    web = WebServer("127.0.0.1:0", broken, lambda: True, "bug")
    web.start()
    try:
        status, _, body = request(web.port, "GET", "/metrics")
        assert status == 500 and body == b"Internal error; see the exporter's log.\n"
        assert request(web.port, "GET", "/-/healthy")[0] == 200
    finally:
        web.close()
    lines = [record.getMessage() for record in caplog.records if "internal error answering GET '/metrics'" in record.getMessage()]
    assert len(lines) == 1 and "RuntimeError: a bug" in lines[0]
