"""Real HTTP servers on 127.0.0.1 for the app-throughput tests: a prometheus-client registry that can
be swapped (an app restart), and misbehaving endpoints (slow, trickling, garbage, oversized)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest

from gpueff.apps.scrape import Answer, LineFilter

Respond = Callable[[BaseHTTPRequestHandler], None]


class _Server(ThreadingHTTPServer):
    daemon_threads = True


@contextlib.contextmanager
def serving(respond: Respond, port: int = 0) -> Iterator[str]:
    """Serve ``respond`` for every GET; yields the URL of /metrics."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            try:
                respond(self)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args: object) -> None:
            pass

    with _metrics_url_while_serving(_Server(("127.0.0.1", port), Handler)) as url:
        yield url


@contextlib.contextmanager
def _metrics_url_while_serving(server: HTTPServer) -> Iterator[str]:
    """Run ``server`` on a thread; yields the URL of its /metrics, then shuts it down and closes it."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


class _WsgiServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietWsgiHandler(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def wsgi_serving(app: Callable[..., Any]) -> Iterator[str]:
    """Serve a WSGI app (prometheus_client.make_wsgi_app: its own content negotiation); yields the URL of /metrics."""
    with _metrics_url_while_serving(make_server("127.0.0.1", 0, app, server_class=_WsgiServer, handler_class=_QuietWsgiHandler)) as url:
        yield url


def answer_of(body: str | bytes, *names: str, chunk: int = 1 << 30) -> Answer:
    """What the scraper keeps of ``body`` read for the metric ``names``, fed ``chunk`` bytes at a time."""
    data = body.encode() if isinstance(body, str) else body
    lines = LineFilter(names)
    for start in range(0, len(data), chunk):
        lines.feed(data[start : start + chunk])
    return lines.finish()


def send(handler: BaseHTTPRequestHandler, body: bytes, status: int = 200, length: bool = True) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "text/plain; version=0.0.4")
    if length:
        handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class App:
    """An app exporting real prometheus-client metrics; ``restart`` swaps in a fresh registry."""

    def __init__(self, build: Callable[[CollectorRegistry], object]) -> None:
        self.build = build
        self.restart()

    def restart(self) -> None:
        registry = CollectorRegistry()
        self.metrics = self.build(registry)
        self.registry = registry

    def respond(self, handler: BaseHTTPRequestHandler) -> None:
        send(handler, generate_latest(self.registry))


def slow(delay: float, stop: threading.Event) -> Respond:
    """Answers only after ``delay`` seconds (or when ``stop`` is set)."""

    def respond(handler: BaseHTTPRequestHandler) -> None:
        stop.wait(delay)
        send(handler, b"x_total 1\n")

    return respond


def trickle(stop: threading.Event, every: float = 0.05, limit: float = 5.0) -> Respond:
    """Headers at once, then one byte of a valid body every ``every`` seconds."""

    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.end_headers()
        deadline = time.monotonic() + limit
        while not stop.is_set() and time.monotonic() < deadline:
            handler.wfile.write(b"#")
            handler.wfile.flush()
            time.sleep(every)

    return respond


@contextlib.contextmanager
def raw_serving(answer: Callable[[socket.socket], None], tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """A bare TCP server on 127.0.0.1 (TLS with ``tls``): reads each request's head, then ``answer``
    writes raw bytes, then the server closes. Yields the URL of /metrics."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stop = threading.Event()

    def handle(connection: socket.socket) -> None:
        with connection:
            connection.settimeout(10)
            head = b""
            try:
                if tls is not None:
                    connection = tls.wrap_socket(connection, server_side=True)
                while b"\r\n\r\n" not in head:
                    chunk = connection.recv(4096)
                    if not chunk:
                        return
                    head += chunk
                answer(connection)
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=handle, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    finally:
        stop.set()
        thread.join(1)
        listener.close()


def dribble(data: bytes, every: float, stop: threading.Event) -> Callable[[socket.socket], None]:
    """Writes ``data`` one byte every ``every`` seconds until done or ``stop`` is set."""

    def answer(connection: socket.socket) -> None:
        for byte in data:
            if stop.wait(every):
                return
            connection.sendall(bytes([byte]))

    return answer
