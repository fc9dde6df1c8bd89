"""The HTTP side: /metrics (the cached exposition), a landing page, /-/healthy and /-/ready."""

from __future__ import annotations

import html
import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from exporter import __version__
from exporter.exposition import CONTENT_TYPE
from exporter.logs import one_line
from exporter.webconfig import WebConfig

log = logging.getLogger(__name__)

CONNECTION_TIMEOUT = 60.0  # seconds a connection may sit idle or half-sent before it is closed


class ListenAddressError(ValueError):
    pass


def parse_listen_address(address: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[::1]:port``."""
    host, separator, port_text = address.rpartition(":")
    if not separator or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ListenAddressError(f"--web.listen-address {address!r}: expected host:port, :port or [ipv6]:port")
    host = host.strip("[]")
    return host, int(port_text)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    web_config: WebConfig | None = None  # read per connection, so a SIGHUP reload applies to the next one

    def finish_request(self, request: socket.socket | tuple[bytes, socket.socket], client_address: object) -> None:
        """The TLS handshake happens here, in the connection's own thread, never in the accept loop."""
        config = self.web_config
        if config is None or config.ssl_context is None or not isinstance(request, socket.socket):
            super().finish_request(request, client_address)
            return
        request.settimeout(CONNECTION_TIMEOUT)
        try:
            if request.recv(1, socket.MSG_PEEK).isalpha():  # "GET ..." where a TLS record (0x16) belongs
                request.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
                return
            tls_socket = config.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as error:
            log.debug("TLS handshake with %s failed: %s", client_address, error)
            return
        try:
            super().finish_request(tls_socket, client_address)
        finally:
            tls_socket.close()

    def handle_error(self, request: object, client_address: object) -> None:
        """One log line for a connection that failed, never socketserver's traceback on stderr."""
        error = sys.exc_info()[1]
        if error is None:
            return
        level = logging.DEBUG if isinstance(error, (ConnectionError, TimeoutError)) else logging.WARNING  # a peer's reset is routine
        log.log(level, "connection from %s failed: %s", client_address, one_line(error))


class _Server6(_Server):
    address_family = socket.AF_INET6


class WebServer:
    """Serves in a background thread; ``close`` stops it."""

    def __init__(self, address: str, metrics: Callable[[], bytes | None], ready: Callable[[], bool], landing_note: str, telemetry_path: str = "/metrics", web_config: WebConfig | None = None) -> None:
        host, port = parse_listen_address(address)
        handler = _handler(metrics, ready, landing_note, telemetry_path)
        server_class = _Server
        if ":" in host:
            server_class = _Server6
        elif host == "":
            host = "0.0.0.0"
        self.server = server_class((host, port), handler)
        self.server.web_config = web_config
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def set_web_config(self, web_config: WebConfig | None) -> None:
        """Take a reloaded --web.config.file; new connections and requests use it."""
        self.server.web_config = web_config

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _landing_page(note: str, telemetry_path: str) -> bytes:
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>gpu-efficiency-exporter</title></head>
<body style="font-family: sans-serif; max-width: 48em; margin: 2em auto">
<h1>gpu-efficiency-exporter {html.escape(__version__)}</h1>
<p>How much real work each NVIDIA GPU does: SM activity, occupancy, tensor and DRAM activity beside
coarse utilization, with efficiency, mismatch and bottleneck derived from them.</p>
<p><strong>{html.escape(note)}</strong></p>
<ul>
<li><a href="{html.escape(telemetry_path)}">{html.escape(telemetry_path)}</a>: the metrics</li>
<li><a href="/-/healthy">/-/healthy</a>: the process is up</li>
<li><a href="/-/ready">/-/ready</a>: the first poll has finished</li>
</ul>
</body></html>
""".encode()


def _handler(metrics: Callable[[], bytes | None], ready: Callable[[], bool], note: str, telemetry_path: str) -> type[BaseHTTPRequestHandler]:
    landing = _landing_page(note, telemetry_path)

    class Handler(BaseHTTPRequestHandler):
        server: _Server
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: with Nagle on, a keep-alive client's delayed ACK
        # holds the body back ~40 ms on every scrape after the first (bench/scrape_latency.py).
        disable_nagle_algorithm = True
        server_version = f"gpu-efficiency-exporter/{__version__}"
        timeout = CONNECTION_TIMEOUT

        def _send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8", extra_headers: tuple[tuple[str, str], ...] = ()) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            config = self.server.web_config
            for name, value in (config.headers if config else ()) + extra_headers:
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            config = self.server.web_config
            if config is not None and not config.authorized(self.headers.get("Authorization")):
                self._send(401, b"Unauthorized.\n", extra_headers=(("WWW-Authenticate", 'Basic realm="gpu-efficiency-exporter", charset="UTF-8"'),))
                return
            path = self.path.split("?", 1)[0]
            if path == telemetry_path:
                body = metrics()
                if body is None:
                    self._send(503, b"no data yet: the first poll has not finished\n")
                else:
                    self._send(200, body, CONTENT_TYPE)
            elif path == "/":
                self._send(200, landing, "text/html; charset=utf-8")
            elif path == "/-/healthy":
                self._send(200, b"Healthy.\n")
            elif path == "/-/ready":
                if ready():
                    self._send(200, b"Ready.\n")
                else:
                    self._send(503, b"Not ready: the first poll has not finished.\n")
            else:
                self._send(404, b"Not found.\n")

        do_HEAD = do_GET

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            log.debug("http %s %s", self.address_string(), format % args)

    return Handler
