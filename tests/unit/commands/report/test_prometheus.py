"""The report's Prometheus client (gpueff/commands/report/prometheus.py) against a hostile or broken
server on loopback: every answer that is not the documented vector is an error naming the URL, the
query and what was wrong; a server that trickles is cut off at the deadline; sizes are bounded."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from gpueff.commands.report import prometheus as client
from gpueff.commands.report.prometheus import Prometheus, PrometheusError, api_url
from unit.commands.top.test_scrape import page

QUERY = "sum by (state) (increase(gpueff_gpu_state_seconds_total[7d]))"


@contextlib.contextmanager
def raw_server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A loopback server that reads each request whole (headers and form body) and lets ``answer``
    write whatever it likes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def read_request(client: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += client.recv(65536) or b"\r\n\r\n"
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length and (chunk := client.recv(65536)):
            body += chunk

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with client, contextlib.suppress(OSError):
                client.settimeout(30)
                read_request(client)
                answer(client)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def vector(*samples: tuple[dict[str, str], str]) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"metric": labels, "value": [1.0, value]} for labels, value in samples]}})


def ask(answer, timeout: float = 5.0) -> list[client.Sample]:
    with raw_server(answer) as url:
        return Prometheus(url, timeout).query(QUERY, 1_800_000_000.0)


def test_a_vector_reads_back() -> None:
    with raw_server(page(vector(({"state": "working"}, "3600"), ({"state": "free"}, "0")))) as url:
        samples = Prometheus(url + "/", 5.0).query(QUERY, 1_800_000_000.0)
    assert [(dict(sample.labels), sample.value) for sample in samples] == [({"state": "working"}, 3600.0), ({"state": "free"}, 0.0)]


@pytest.mark.parametrize(("body", "said"), [
    ("not json at all", "is not JSON"),
    ("[" * 100_000 + "]" * 100_000, "is not JSON"),
    (json.dumps([1, 2]), "is not a Prometheus API answer"),
    (json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at char 3\x1b[2J"}), '"bad_data": "parse error at char 3\\x1b[2J"'),
    (json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}), "is not a vector (data.resultType 'matrix')"),
    (json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1]}]}}), "holds a sample that is not"),
    (json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"a": 1}, "value": [1, "1"]}]}}), "holds labels that are not"),
    (json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {f"l{n}": "v" for n in range(40)}, "value": [1, "1"]}]}}), "at most 32 strings"),
    (json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"a": "x" * 2000}, "value": [1, "1"]}]}}), "at most 1024 characters"),
    (vector(({"state": "working"}, "NaN")), "holds a value that is not a finite number of at least 0: 'NaN'"),
    (vector(({"state": "working"}, "+Inf")), "not a finite number"),
    (vector(({"state": "working"}, "-3")), "not a finite number of at least 0"),
    (vector(({"state": "working"}, "1" * 100)), "not a finite number"),
])
def test_an_answer_that_is_not_the_documented_vector_is_refused_saying_what(body: str, said: str) -> None:
    with pytest.raises(PrometheusError) as error:
        ask(page(body))
    text = str(error.value)
    assert text.startswith("http://127.0.0.1:") and "sum by (state)" in text and said in text
    assert "\x1b" not in text


def test_http_errors_redirects_and_sizes_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PrometheusError, match='answered HTTP 500 "Internal Server Error" to .*: "upstream \\\\x1b'  ):
        ask(page("upstream \x1b[2J", "500 Internal Server Error"))
    with pytest.raises(PrometheusError, match="HTTP 302 .*does not follow redirects"):
        ask(page("", "302 Found"))
    with pytest.raises(PrometheusError, match='"bad_data": "invalid parameter"' ):  # the API's own 400 comes as JSON
        ask(page(json.dumps({"status": "error", "errorType": "bad_data", "error": "invalid parameter"}), "400 Bad Request"))
    monkeypatch.setattr(client, "MAX_BYTES", 1000)
    with pytest.raises(PrometheusError, match="is over 0 MiB: narrow the range"):
        ask(page(vector(*[({"uuid": f"GPU-{n}"}, "1") for n in range(100)])))
    monkeypatch.setattr(client, "MAX_SERIES", 10)
    monkeypatch.setattr(client, "MAX_BYTES", 1 << 20)
    with pytest.raises(PrometheusError, match="has 11 series, over 10"):
        ask(page(vector(*[({"uuid": f"GPU-{n}"}, "1") for n in range(11)])))


def test_a_server_that_trickles_is_cut_off_at_the_deadline() -> None:
    def trickle(sock: socket.socket) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(200):
            sock.sendall(b" ")
            time.sleep(0.05)

    started = time.monotonic()
    with pytest.raises(PrometheusError, match=r"no whole answer to .* within 0.5 s \(--timeout\)"):
        ask(trickle, timeout=0.5)
    assert time.monotonic() - started < 9  # cut off, not waited out (10 s of trickle)


def test_nothing_listening_and_bad_urls_say_so() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PrometheusError, match=f"cannot reach Prometheus at http://127.0.0.1:{port}"):
        Prometheus(f"http://127.0.0.1:{port}", 2.0).query(QUERY, 1.0)
    for bad in ("prometheus:9090", "ftp://p/", "http://user:pw@p:9090", "http://p:9090/?x=1"):
        with pytest.raises(PrometheusError, match="--prometheus"):
            api_url(bad)
    assert api_url("https://p.example/prom/") == "https://p.example/prom"


def test_the_servers_warnings_are_kept_bounded() -> None:
    body = json.loads(vector(({"state": "working"}, "1")))
    body["warnings"] = ["PromQL info: metric might not be a counter\x1b[2J"] * 20
    with raw_server(page(json.dumps(body))) as url:
        prometheus = Prometheus(url, 5.0)
        prometheus.query(QUERY, 1.0)
    assert len(prometheus.warnings) == 8 and prometheus.warnings[0].endswith('\\x1b[2J"')
