"""The HTTP side: /metrics (the prepared exposition), a landing page, /-/healthy and /-/ready.

Connections, time limits and TLS are the event loop's (``gpueff.httpserver.loop``); this module answers
requests. Every answer goes out in one write: a head built from pieces prepared per web config,
followed by the body's chunks as they are (the exposition's cached text is never copied).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from gpueff import __version__
from gpueff.exposition.text import CONTENT_TYPE
from gpueff.httpserver.loop import DEFAULT_LIMITS, Connection, EventLoop, Limits, Reply
from gpueff.httpserver.request import REASONS, Request
from gpueff.untrusted import whole_number
from gpueff.web.live import AFTER_DIGITS, parse_after
from gpueff.web.page import LivePage, escape_html

if TYPE_CHECKING:
    import ssl

    from gpueff.httpserver.login import LoginGuard
    from gpueff.httpserver.tlsconfig import WebConfig



class Payload(Protocol):
    """What ``metrics(gzip)`` returns (web.payload.Payload): the body's pieces, written as they are
    after the head, and its Content-Encoding ("gzip" or None)."""

    @property
    def parts(self) -> Sequence[bytes]: ...

    @property
    def encoding(self) -> str | None: ...


_WWW_AUTHENTICATE = b'WWW-Authenticate: Basic realm="gpu-efficiency-exporter", charset="UTF-8"\r\n'
_TEXT = b"text/plain; charset=utf-8"
_VARY = b"Vary: Accept-Encoding\r\n"
_JSON = b"application/json"
_NO_STORE = b"Cache-Control: no-store\r\n"


class ListenAddressError(ValueError):
    pass


def parse_listen_address(address: str) -> tuple[str, int]:
    """``host:port``, ``:port`` (all interfaces) or ``[::1]:port``."""
    host, separator, port_text = address.rpartition(":")
    port = whole_number(port_text, 5)
    if not separator or port is None or port > 65535:
        raise ListenAddressError(f"--web.listen-address {address!r}: expected host:port, :port or [ipv6]:port")
    return host.strip("[]"), port


SYSTEMD_FIRST_FD = 3  # sd_listen_fds(3): passed sockets start at file descriptor 3


def systemd_sockets(environ: Mapping[str, str], pid: int) -> list[socket.socket]:
    """The listening sockets systemd passed by socket activation (LISTEN_PID, LISTEN_FDS), for
    --web.systemd-socket; a ListenAddressError says what is missing."""
    if environ.get("LISTEN_PID", "") != str(pid):
        raise ListenAddressError(f"--web.systemd-socket: no sockets were passed to this process (LISTEN_PID is {environ.get('LISTEN_PID', 'unset')!r}, this process is {pid}): start it from a systemd .socket unit")
    count = environ.get("LISTEN_FDS", "")
    if not (count.isascii() and count.isdigit()) or not 1 <= int(count) <= 64:
        raise ListenAddressError(f"--web.systemd-socket: LISTEN_FDS is {count!r}, expected the number of sockets passed (1 to 64)")
    sockets = []
    for fd in range(SYSTEMD_FIRST_FD, SYSTEMD_FIRST_FD + int(count)):
        sock = socket.socket(fileno=fd)
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
            raise ListenAddressError(f"--web.systemd-socket: file descriptor {fd} is not a stream socket (ListenStream= in the .socket unit)")
        sockets.append(sock)
    return sockets


def listen(address: str, backlog: int) -> socket.socket:
    host, port = parse_listen_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host or "0.0.0.0", port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


class WebServer:
    """Serves every listen address (or the ``sockets`` given, from systemd) in one background
    thread; ``close`` stops it."""

    def __init__(self, address: str | Sequence[str], metrics: Callable[[bool], Payload | None], ready: Callable[[], bool], landing_note: str, telemetry_path: str = "/metrics", web_config: WebConfig | None = None, limits: Limits = DEFAULT_LIMITS, page: LivePage | None = None, sockets: Sequence[socket.socket] = ()) -> None:
        self.metrics = metrics
        self.ready = ready
        self.telemetry_path = telemetry_path
        self.page = page  # the live page on / (gpueff/web/page.py); None: a bare exporter with a page of links
        self._landing = page.landing if page is not None else _landing_page(landing_note, telemetry_path)
        self._date_second = -1
        self._date = b""
        self._login: LoginGuard | None = None
        self.set_web_config(web_config)
        listeners = list(sockets)
        try:
            for each in () if sockets else [address] if isinstance(address, str) else address:
                listeners.append(listen(each, limits.listen_backlog))
        except OSError:
            for opened in listeners:
                opened.close()
            raise
        self._loop = EventLoop(listeners, self, limits)
        self.ports = [listener.getsockname()[1] if listener.family != socket.AF_UNIX else 0 for listener in listeners]
        self.port = self.ports[0]

    def start(self) -> None:
        self._loop.start()

    def set_web_config(self, web_config: WebConfig | None) -> None:
        """Take a reloaded --web.config.file; new connections and requests use it."""
        common = f"Server: gpu-efficiency-exporter/{__version__}\r\n".encode()
        for name, value in web_config.headers if web_config else ():
            common += f"{name}: {value}\r\n".encode("latin-1")
        old = getattr(self, "web_config", None)
        if old is not None and old.auth is not None and web_config is not None and web_config.auth is not None:
            web_config.auth.keep_cache_of(old.auth)  # Prometheus needs no new bcrypt check after a reload
        self._common = common
        self.web_config = web_config

    def close(self) -> None:
        self._loop.close()
        if self._login is not None:
            self._login.close()

    # --- the event loop's handler --------------------------------------------------------------

    def tls_context(self) -> ssl.SSLContext | None:
        config = self.web_config
        return config.ssl_context if config is not None else None

    def error(self, status: int, message: str) -> Reply:
        return Reply(self._response(status, _TEXT, (f"{message}\n".encode(),), close=True), close=True)

    def respond(self, request: Request, connection: Connection) -> Reply | None:
        if request.method not in ("GET", "HEAD"):
            return Reply(self._response(405, _TEXT, (b"Only GET and HEAD are served here.\n",), extra=b"Allow: GET, HEAD\r\n", close=True), close=True)
        auth = self.web_config.auth if self.web_config is not None else None
        if auth is None:
            return self._route(request)
        if self._login is None:
            from gpueff.httpserver.login import LoginGuard

            self._login = LoginGuard()
        from gpueff.httpserver.login import ALLOWED, BUSY, FAILED_LOGIN_DELAY, MISSING, THROTTLED

        received = time.monotonic()

        def done(ok: bool) -> None:
            # Every check does the same bcrypt work (BasicAuth.verify); the floor hides the rest.
            reply = self._route(request) if ok else self._unauthorized(request, not_before=received + FAILED_LOGIN_DELAY)
            self._loop.complete(connection, reply)

        verdict = self._login.check(auth, request.headers.get("authorization"), connection.client, done)
        if verdict == ALLOWED:
            return self._route(request)
        if verdict == MISSING:
            return self._unauthorized(request)
        if verdict in (THROTTLED, BUSY):
            message = b"Too many failed logins from this address; try again later.\n" if verdict == THROTTLED else b"Too many logins being checked; try again shortly.\n"
            return Reply(self._response(429, _TEXT, (message,), extra=b"Retry-After: 5\r\n", request=request), close=not request.keep_alive)
        return None

    # --- answers -------------------------------------------------------------------------------

    def _unauthorized(self, request: Request, not_before: float = 0.0) -> Reply:
        return Reply(self._response(401, _TEXT, (b"Unauthorized.\n",), extra=_WWW_AUTHENTICATE, request=request), close=not request.keep_alive, not_before=not_before)

    def _route(self, request: Request) -> Reply:
        path = request.path
        if path == self.telemetry_path:
            payload = self.metrics(accepts_gzip(request.headers.get("accept-encoding")))
            if payload is None:
                return self._text(request, 503, b"no data yet: the first poll has not finished\n")
            extra = _VARY + (b"Content-Encoding: %s\r\n" % payload.encoding.encode() if payload.encoding else b"")
            return Reply(self._response(200, CONTENT_TYPE.encode(), payload.parts, extra=extra, request=request), close=not request.keep_alive)
        if path == "/":
            return Reply(self._response(200, b"text/html; charset=utf-8", (self._landing,), request=request), close=not request.keep_alive)
        if self.page is not None:
            if path == "/api/live":
                after = parse_after(request.query)
                if after is None:
                    return self._text(request, 400, f"Bad query: 'after' must be a whole number of at most {AFTER_DIGITS} digits 0-9.\n".encode())
                answer = self.page.live.answer(after)
                if answer is None:
                    return self._text(request, 503, b"no data yet: the first poll has not finished\n")
                return Reply(self._response(200, _JSON, answer, extra=_NO_STORE, request=request), close=not request.keep_alive)
            asset = self.page.assets.get(path)
            if asset is not None:
                return Reply(self._response(200, asset[0], (asset[1],), request=request), close=not request.keep_alive)
        if path == "/-/healthy":
            return self._text(request, 200, b"Healthy.\n")
        if path == "/-/ready":
            return self._text(request, 200, b"Ready.\n") if self.ready() else self._text(request, 503, b"Not ready: no fresh GPU data (no poll has finished yet, the last is older than stale_after, or no NVIDIA driver has answered yet under --wait-for-driver).\n")
        return self._text(request, 404, b"Not found.\n")

    def _text(self, request: Request, status: int, body: bytes) -> Reply:
        return Reply(self._response(status, _TEXT, (body,), request=request), close=not request.keep_alive)

    def _response(self, status: int, content_type: bytes, chunks: Sequence[bytes], extra: bytes = b"", request: Request | None = None, close: bool = False) -> list[bytes]:
        """The head and, unless the request is HEAD, the body's chunks: one write's worth."""
        if request is not None and not request.keep_alive:
            close = True
        connection = b"Connection: close\r\n" if close else b"Connection: keep-alive\r\n" if request is not None and request.version == "HTTP/1.0" else b""
        length = sum(len(chunk) for chunk in chunks)
        head = b"".join((b"HTTP/1.1 %d %s\r\nContent-Type: " % (status, REASONS[status].encode()), content_type, b"\r\nContent-Length: %d\r\n" % length, self._date_line(), self._common, extra, connection, b"\r\n"))
        if request is not None and request.method == "HEAD":
            return [head]
        return [head, *chunks]

    def _date_line(self) -> bytes:
        second = int(time.time())
        if second != self._date_second:
            self._date = time.strftime("Date: %a, %d %b %Y %H:%M:%S GMT\r\n", time.gmtime(second)).encode()
            self._date_second = second
        return self._date


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an Accept-Encoding header allows gzip (``gzip``, ``x-gzip`` or ``*``, not at q=0)."""
    for item in (accept_encoding or "").lower().split(","):
        coding, _, parameters = item.partition(";")
        if coding.strip() in ("gzip", "x-gzip", "*"):
            name, _, quality = parameters.strip().partition("=")
            try:
                return name.strip() != "q" or float(quality) > 0
            except ValueError:
                return False
    return False


def _landing_page(note: str, telemetry_path: str) -> bytes:
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>gpu-efficiency-exporter</title></head>
<body style="font-family: sans-serif; max-width: 48em; margin: 2em auto">
<h1>gpu-efficiency-exporter {escape_html(__version__)}</h1>
<p>How much real work each NVIDIA GPU does: SM activity, occupancy, tensor and DRAM activity beside
coarse utilization, with efficiency, mismatch and bottleneck derived from them.</p>
<p><strong>{escape_html(note)}</strong></p>
<ul>
<li><a href="{escape_html(telemetry_path)}">{escape_html(telemetry_path)}</a>: the metrics</li>
<li><a href="/-/healthy">/-/healthy</a>: the process is up</li>
<li><a href="/-/ready">/-/ready</a>: 200 while GPU data is served fresh (a GPU source has started and a poll finished within stale_after)</li>
</ul>
</body></html>
""".encode()
