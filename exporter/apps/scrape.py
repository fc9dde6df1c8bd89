"""Fetching an app's metrics endpoint, bounded in time and size, and reading its counters.

``fetch`` speaks HTTP/1.1 over a plain socket (TLS for ``https://``) and sets every socket
operation's timeout to what is left of ONE deadline, so connect, TLS handshake, status line,
headers and body together finish within ``scrape_timeout``, however slowly a peer dribbles bytes.
(http.client and urllib3 time each socket read separately; a peer sending a byte every 0.2 s keeps
them waiting for minutes.) Host name resolution is the one step the deadline cannot interrupt.

The text is parsed with prometheus-client's parser, after a line filter keeps only the lines of the
wanted metric names (``wanted_lines``): a large response costs a scan, not a full parse. That
parser (0.26) names a counter family without its ``_total`` suffix and renames a bare counter sample
``foo`` to ``foo_total``, so a configured name matches a sample by its own name, or, for a counter
family, by the family's name with or without ``_total``. Names with colons
(``vllm:generation_tokens_total``) parse as they are.

Either spelling of a colon name joins: prometheus_client's content negotiation writes
``vllm:generation_tokens_total`` as ``vllm_generation_tokens_total`` in an OpenMetrics answer to a
scraper that does not ask for ``escaping=allow-utf-8`` (Prometheus 2.x), so that is the name users
see there. Names are compared with colons read as underscores (``escaped``); where the page holds
both spellings, the series spelled as configured win.
"""

from __future__ import annotations

import math
import re
import socket
import time
import urllib.parse
from collections.abc import Iterable

from exporter import __version__

ACCEPT = "text/plain; version=0.0.4"
CHUNK_BYTES = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024  # status line and headers together
MAX_HEADERS = 100
MAX_SERIES = 10_000  # sample lines of one configured counter; more fails the scrape
DIAGNOSE_LINES = 50  # lines the full parser reads to say why a response has none of the wanted lines

_HEX = re.compile(rb"[0-9a-fA-F]{1,16}")

Series = dict[tuple[tuple[str, str], ...], float]  # sorted label pairs -> value


class ScrapeError(Exception):
    """A scrape that gave no usable counter; the message says why, for the log."""


class _Deadline(Exception):
    """The scrape's deadline passed."""


class _Connection:
    """One socket read through a buffer; every blocking call gets what is left of the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buffer = bytearray()
        self.position = 0  # bytes of ``buffer`` already consumed

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Deadline
        return left

    def _receive(self) -> bool:
        """Append what arrives next; False at the end of the stream."""
        if self.position > CHUNK_BYTES and self.position * 2 > len(self.buffer):
            del self.buffer[: self.position]
            self.position = 0
        import ssl  # here and below, not at the top: a daemon without apps never loads ssl (issue 15)

        self.sock.settimeout(self.left())
        try:
            chunk = self.sock.recv(CHUNK_BYTES)
        except ssl.SSLEOFError:
            chunk = b""
        except TimeoutError:  # socket.timeout on 3.11 is TimeoutError too
            raise _Deadline from None
        if not chunk:
            return False
        self.buffer += chunk
        return True

    def line(self, limit: int, what: str) -> bytes:
        """The next line without its CR LF; ScrapeError past ``limit`` bytes or at the end of the stream."""
        scanned = 0  # bytes after ``position`` known to hold no newline
        while True:
            end = self.buffer.find(b"\n", self.position + scanned)
            if end - self.position > limit:
                raise ScrapeError(f"{what} is over {limit} bytes")
            if end >= 0:
                line = bytes(self.buffer[self.position : end])
                self.position = end + 1
                return line[:-1] if line.endswith(b"\r") else line
            scanned = len(self.buffer) - self.position
            if scanned > limit:
                raise ScrapeError(f"{what} is over {limit} bytes")
            if not self._receive():
                raise ScrapeError(f"the connection closed in the middle of the {what}")

    def exactly(self, count: int, what: str) -> bytes:
        while len(self.buffer) - self.position < count:
            if not self._receive():
                raise ScrapeError(f"the connection closed before the end of the {what}")
        data = bytes(self.buffer[self.position : self.position + count])
        self.position += count
        return data

    def rest(self, limit: int) -> bytes:
        while len(self.buffer) - self.position <= limit:
            if not self._receive():
                return bytes(self.buffer[self.position :])
        raise ScrapeError(f"response is over max_response_bytes ({limit})")


def fetch(url: str, timeout: float, max_bytes: int) -> str:
    """GET ``url``: the body as text. The whole exchange must finish within ``timeout`` seconds."""
    import ssl

    deadline = time.monotonic() + timeout
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname
    if not host:
        raise ScrapeError(f"the URL {url} names no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as error:
        raise ScrapeError(f"the URL {url} has a bad port: {error}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        host_header += f":{parts.port}"
    request = (
        f"GET {target} HTTP/1.1\r\nHost: {host_header}\r\nAccept: {ACCEPT}\r\nAccept-Encoding: identity\r\n"
        f"User-Agent: gpu-efficiency-exporter/{__version__}\r\nConnection: close\r\n\r\n"
    ).encode("latin-1")
    sock: socket.socket | None = None
    try:
        sock = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.001))
        if parts.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
        connection = _Connection(sock, deadline)
        if isinstance(sock, ssl.SSLSocket):
            sock.settimeout(connection.left())
            sock.do_handshake()
        sock.settimeout(connection.left())
        sock.sendall(request)
        body = _response(connection, max_bytes)
    except (_Deadline, TimeoutError):
        raise ScrapeError(f"no complete answer within scrape_timeout ({timeout:g}s)") from None
    except ConnectionRefusedError:
        raise ScrapeError("connection refused (is the app running and listening there?)") from None
    except ssl.SSLError as error:
        raise ScrapeError(f"TLS: {error.reason or error}") from None
    except OSError as error:
        raise ScrapeError(f"{type(error).__name__}: {error}") from None
    finally:
        if sock is not None:
            sock.close()
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScrapeError(f"response is not UTF-8 text (byte {error.start})") from None


def _response(connection: _Connection, max_bytes: int) -> bytes:
    """Read the status line, headers and body of the answer; ScrapeError for anything but a usable 200."""
    status_line = connection.line(MAX_HEADER_BYTES, "status line")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not (parts[1].isdigit() and len(parts[1]) == 3):
        raise ScrapeError(f"not an HTTP/1.x answer: {status_line[:80]!r}")
    status, reason = int(parts[1]), parts[2].decode("latin-1").strip() if len(parts) > 2 else ""
    headers: dict[str, str] = {}
    header_bytes = len(status_line)
    for _ in range(MAX_HEADERS + 1):
        line = connection.line(MAX_HEADER_BYTES - header_bytes, "header block")
        header_bytes += len(line) + 2
        if not line:
            break
        name, colon, value = line.partition(b":")
        if not colon or not name.strip() or name != name.strip():
            raise ScrapeError(f"malformed header line {line[:80]!r}")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip()
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    else:
        raise ScrapeError(f"more than {MAX_HEADERS} headers")
    if status != 200:
        raise ScrapeError(f"HTTP status {status} {reason}".rstrip())
    encoding = headers.get("content-encoding", "identity").lower()
    if encoding != "identity":
        raise ScrapeError(f"a {encoding}-encoded body, though identity was asked for")
    if headers.get("transfer-encoding"):
        if headers["transfer-encoding"].lower().rsplit(",", 1)[-1].strip() != "chunked":
            raise ScrapeError(f"unsupported Transfer-Encoding {headers['transfer-encoding']!r}")
        return _chunked(connection, max_bytes)
    length = headers.get("content-length")
    if length is None:
        return connection.rest(max_bytes)
    values = {item.strip() for item in length.split(",")}
    if len(values) != 1 or not next(iter(values)).isdigit():
        raise ScrapeError(f"bad Content-Length {length[:40]!r}")
    size = int(next(iter(values)))
    if size > max_bytes:
        raise ScrapeError(f"response of {size} bytes is over max_response_bytes ({max_bytes})")
    return connection.exactly(size, "body")


def _chunked(connection: _Connection, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        line = connection.line(1024, "chunk size line")
        digits = line.split(b";", 1)[0].strip()
        if not _HEX.fullmatch(digits):
            raise ScrapeError(f"bad chunk size {line[:40]!r}")
        length = int(digits, 16)
        if length == 0:
            break
        size += length
        if size > max_bytes:
            raise ScrapeError(f"response is over max_response_bytes ({max_bytes})")
        chunks.append(connection.exactly(length, "chunked body"))
        if connection.line(1024, "chunked body") != b"":
            raise ScrapeError("a chunk is not followed by CR LF")
    trailer = 0
    while connection.line(MAX_HEADER_BYTES, "trailer"):
        trailer += 1
        if trailer > MAX_HEADERS:
            raise ScrapeError(f"more than {MAX_HEADERS} trailer lines")
    return b"".join(chunks)


def escaped(name: str) -> str:
    """``name`` with its colons as underscores: prometheus_client's underscore escaping of a sample
    name (the only character of a valid name it changes), so both spellings compare equal."""
    return name.replace(":", "_")


def _names(name: str) -> tuple[str, ...]:
    """The sample and family names under which counter ``name`` may appear (with or without _total)."""
    base = name[:-6] if name.endswith("_total") else name
    return tuple(each for each in (base, base + "_total") if each)


def wanted_lines(text: str, names: Iterable[str]) -> str:
    """Only the sample, TYPE and HELP lines of the metric names ``names``, in either spelling (see
    ``read_counter``).

    A scan with ``str.startswith`` over the lines with colons read as underscores, about 20 times
    cheaper than parsing every line; ScrapeError where one name has more than MAX_SERIES sample lines.
    """
    names = tuple(names)
    found = {escaped(each) for name in names for each in _names(name)}
    prefixes = tuple(f"{name}{end}" for name in found for end in ("{", " ", "\t")) + tuple(f"# {kind} {name} " for name in found for kind in ("TYPE", "HELP"))
    keys = escaped(text).split("\n")  # line for line the same as text's lines: only colons differ
    kept = [line for line, key in zip(text.split("\n"), keys, strict=True) if key.startswith(prefixes)]
    samples = sum(1 for line in kept if not line.startswith("#"))
    if samples > MAX_SERIES * len(names):
        raise ScrapeError(f"over {MAX_SERIES} series of {' or '.join(sorted(names))} in the response")
    return "\n".join(kept) + "\n"


def read_counter(text: str, name: str, labels: dict[str, str]) -> Series:
    """The series of counter ``name`` whose labels include ``labels``; ScrapeError where there are none.

    ``name`` matches in either spelling (``vllm:x_total`` or ``vllm_x_total``); where both are on
    the page, only the series spelled like ``name`` count. Only the lines of ``name`` (and its
    ``_total`` twin) are parsed; the rest of the response is not checked, except to tell why it
    holds none of them.
    """
    from prometheus_client.parser import text_string_to_metric_families  # 12 MB: loaded with the first app scrape

    wanted, spellings = escaped(name), _names(name)
    found: dict[bool, Series] = {True: {}, False: {}}  # spelled as configured or not -> series
    try:
        for family in text_string_to_metric_families(wanted_lines(text, [name])):
            family_name = escaped(family.name)
            counter_family = family.type == "counter" and wanted in (family_name, family_name + "_total")
            for sample in family.samples:
                sample_name = escaped(sample.name)
                if sample_name != wanted and not (counter_family and sample_name == family_name + "_total"):
                    continue
                if any(sample.labels.get(key) != value for key, value in labels.items()):
                    continue
                if not math.isfinite(sample.value) or sample.value < 0:
                    raise ScrapeError(f"{sample.name} has the value {sample.value}, not a counter's")
                series = found[sample.name in spellings]
                series[tuple(sorted(sample.labels.items()))] = float(sample.value)
                if len(series) > MAX_SERIES:
                    raise ScrapeError(f"over {MAX_SERIES} series of {name} in the response")
    except (ValueError, IndexError, KeyError, TypeError) as error:
        raise ScrapeError(f"not Prometheus text format: {error}"[:300]) from None
    found_series = found[True] or found[False]
    if not found_series:
        _diagnose(text)
        matching = "".join(f',{key}="{value}"' for key, value in labels.items())
        selector = f"{name}{{{matching[1:]}}}" if labels else name
        lines = text.count("\n")
        raise ScrapeError(f"no series {selector} among the {lines} lines of the response")
    return found_series


def _diagnose(text: str) -> None:
    """Raise 'not Prometheus text format' where the first lines of ``text`` do not parse."""
    from prometheus_client.parser import text_string_to_metric_families

    head = "\n".join(text.split("\n", DIAGNOSE_LINES)[:DIAGNOSE_LINES]) + "\n"
    try:
        for _ in text_string_to_metric_families(head):
            pass
    except (ValueError, IndexError, KeyError, TypeError) as error:
        raise ScrapeError(f"not Prometheus text format: {error}"[:300]) from None
