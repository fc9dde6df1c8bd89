"""Fetching an app's metrics endpoint, bounded in time and size, and reading its counters.

``fetch`` speaks HTTP/1.1 over a plain socket (TLS for ``https://``) and sets every socket
operation's timeout to what is left of ONE deadline, so connect, TLS handshake, status line,
headers and body together finish within ``scrape_timeout``, however slowly a peer dribbles bytes.
(http.client and urllib3 time each socket read separately; a peer sending a byte every 0.2 s keeps
them waiting for minutes.) Host name resolution is the one step the deadline cannot interrupt.

The body is never held whole: ``LineFilter`` takes it chunk by chunk as it arrives and keeps only
the lines of the wanted metric names, so an answer of any size within ``max_response_bytes`` costs
a few MB and a C-level scan, and a flood of junk lines or one huge label value is dropped as it
streams past (docs/apps.md, "What a scrape costs"). The kept lines are parsed with
prometheus-client's parser, which stops at the scrape's deadline. That parser (0.26) names a counter family without its ``_total`` suffix and renames a bare counter sample
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

import codecs
import math
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TextIO, cast

from gpueff import __version__
from gpueff.config.values import cut, without_credentials
from gpueff.untrusted import whole_number

ACCEPT = "text/plain; version=0.0.4"
CHUNK_BYTES = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024  # status line and headers together
MAX_HEADERS = 100
MAX_INTERIM = 10  # 1xx interim answers skipped before the final one
MAX_REDIRECTS = 3
REDIRECTS = (301, 302, 303, 307, 308)
MAX_SERIES = 10_000  # sample lines of one configured counter; more fails the scrape
# What the line filter holds, whatever the body's size: one line being assembled, the body's first
# bytes, the wanted lines. prometheus-client's parser takes ~0.13 s per MB of wanted lines and holds
# about twice their size (bench/apps/app_parse_cost.py), so 4 MiB bound a scrape to ~10 MB and ~0.5 s of
# CPU; 10,000 series of two counters at 200 bytes a line fit.
MAX_LINE_BYTES = 64 * 1024  # a wanted line longer than this fails the scrape; another is dropped
MAX_KEPT_BYTES = 4 * 1024 * 1024
HEAD_BYTES = 16 * 1024
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
        if self.position == len(self.buffer) or (self.position > CHUNK_BYTES and self.position * 2 > len(self.buffer)):
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

    def exactly(self, count: int, sink: Callable[[bytes], None], what: str) -> None:
        """Hand the next ``count`` bytes to ``sink`` as they arrive."""
        while count > 0:
            if self.position == len(self.buffer) and not self._receive():
                raise ScrapeError(f"the connection closed before the end of the {what}")
            part = bytes(self.buffer[self.position : self.position + count])
            self.position += len(part)
            count -= len(part)
            sink(part)

    def rest(self, limit: int, sink: Callable[[bytes], None]) -> None:
        """Hand every byte up to the end of the stream to ``sink``; ScrapeError past ``limit`` bytes."""
        total = 0
        while True:
            part = bytes(self.buffer[self.position :])
            self.position += len(part)
            total += len(part)
            if total > limit:
                raise ScrapeError(f"response is over max_response_bytes ({limit})")
            if part:
                sink(part)
            if not self._receive():
                return


class Abort:
    """Lets another thread end a fetch at once: a scraper that is stopped (a reload) must not
    keep its thread for up to ``scrape_timeout``. ``abort`` shuts the fetch's socket down, which
    ends a blocked connect, send or receive."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.aborted = False

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            if self.aborted and sock is not None:
                raise ScrapeError("stopped")
            self._sock = sock

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def fetch(url: str, timeout: float, max_bytes: int, names: Iterable[str], abort: Abort | None = None) -> Answer:
    """GET ``url``: the lines of the metric ``names`` in its body (``LineFilter``). The whole
    exchange, redirects included, must finish within ``timeout`` seconds; the answer carries that
    deadline on to ``read_counter``. ``abort`` lets another thread end it early. Up to
    MAX_REDIRECTS redirects are followed, to the same scheme, host and port only: an app's answer
    never sends the scrape to another service of the node."""
    deadline = time.monotonic() + timeout
    for _ in range(MAX_REDIRECTS + 1):
        lines = LineFilter(names)
        location = _exchange(url, deadline, timeout, max_bytes, lines.feed, abort)
        if location is None:
            return lines.finish(deadline)
        target = urllib.parse.urljoin(url, location)
        if "@" in urllib.parse.urlsplit(target).netloc:
            raise ScrapeError(f"redirected from {url} to {cut(without_credentials(target))}: a redirect with credentials in its URL is not followed")
        if _origin(target) != _origin(url):
            raise ScrapeError(f"redirected from {url} to {cut(target)}: only redirects to the same scheme, host and port are followed (scrape the app's own URL)")
        url = target
    raise ScrapeError(f"more than {MAX_REDIRECTS} redirects")


def _origin(url: str) -> tuple[str, str, int | None]:
    """The scheme, host and port a URL reaches (the scheme's default port where it names none)."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None  # a bad port: the same as no other origin
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def _exchange(url: str, deadline: float, timeout: float, max_bytes: int, sink: Callable[[bytes], None], abort: Abort | None) -> str | None:
    """One request to ``url``: its body goes to ``sink``; the Location of a redirect is returned."""
    import ssl

    parts = urllib.parse.urlsplit(url)
    host = parts.hostname
    if not host:
        raise ScrapeError(f"the URL {url[:200]} names no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as error:
        raise ScrapeError(f"the URL {url[:200]} has a bad port: {error}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        host_header += f":{parts.port}"
    try:
        request = (
            f"GET {target} HTTP/1.1\r\nHost: {host_header}\r\nAccept: {ACCEPT}\r\nAccept-Encoding: identity\r\n"
            f"User-Agent: gpu-efficiency-exporter/{__version__}\r\nConnection: close\r\n\r\n"
        ).encode("ascii")
    except UnicodeEncodeError:  # a configured URL is checked at load; a redirect's is not
        raise ScrapeError(f"cannot request {url[:200]}: not ASCII") from None
    sock: socket.socket | None = None
    try:
        sock = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.001))
        if parts.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
        if abort is not None:
            abort.attach(sock)
        connection = _Connection(sock, deadline)
        if isinstance(sock, ssl.SSLSocket):
            sock.settimeout(connection.left())
            sock.do_handshake()
        sock.settimeout(connection.left())
        sock.sendall(request)
        return _response(connection, max_bytes, sink)
    except (_Deadline, TimeoutError):
        raise ScrapeError(f"no complete answer within scrape_timeout ({timeout:g}s)") from None
    except ConnectionRefusedError:
        raise ScrapeError("connection refused (is the app running and listening there?)") from None
    except ssl.SSLError as error:
        raise ScrapeError(f"TLS: {error.reason or error}") from None
    except (OSError, UnicodeError) as error:  # UnicodeError: a redirect's host name that cannot be encoded
        raise ScrapeError(f"{type(error).__name__}: {error}") from None
    finally:
        if abort is not None:
            abort.attach(None)
        if sock is not None:
            sock.close()


def _head(connection: _Connection) -> tuple[int, str, dict[str, str]]:
    """The status, reason and headers of the next response on the connection."""
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
    return status, reason, headers


def _response(connection: _Connection, max_bytes: int, sink: Callable[[bytes], None]) -> str | None:
    """Read the answer's head (past any 1xx interim answers: 100 Continue, 103 Early Hints) and
    hand its body to ``sink`` as it arrives; a redirect's Location is returned instead. ScrapeError
    for anything else but a usable 200."""
    for _ in range(MAX_INTERIM + 1):
        status, reason, headers = _head(connection)
        if not (100 <= status < 200 and status != 101):
            break
    else:
        raise ScrapeError(f"more than {MAX_INTERIM} interim (1xx) answers")
    if status in REDIRECTS:
        location = headers.get("location")
        if not location:
            raise ScrapeError(f"HTTP status {status} {reason} without a Location".rstrip())
        return location
    if status != 200:
        raise ScrapeError(f"HTTP status {status} {reason}".rstrip())
    encoding = headers.get("content-encoding", "identity").lower()
    if encoding != "identity":
        raise ScrapeError(f"a {encoding}-encoded body, though identity was asked for")
    if headers.get("transfer-encoding"):
        if headers["transfer-encoding"].lower().rsplit(",", 1)[-1].strip() != "chunked":
            raise ScrapeError(f"unsupported Transfer-Encoding {headers['transfer-encoding']!r}")
        _chunked(connection, max_bytes, sink)
        return None
    length = headers.get("content-length")
    if length is None:
        connection.rest(max_bytes, sink)
        return None
    values = {item.strip() for item in length.split(",")}
    size = whole_number(values.pop(), 18) if len(values) == 1 else None
    if size is None:
        raise ScrapeError(f"bad Content-Length {length[:40]!r}")
    if size > max_bytes:
        raise ScrapeError(f"response of {size} bytes is over max_response_bytes ({max_bytes})")
    connection.exactly(size, sink, "body")
    return None


def _chunked(connection: _Connection, max_bytes: int, sink: Callable[[bytes], None]) -> None:
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
        connection.exactly(length, sink, "chunked body")
        if connection.line(1024, "chunked body") != b"":
            raise ScrapeError("a chunk is not followed by CR LF")
    trailer = 0
    while connection.line(MAX_HEADER_BYTES, "trailer"):
        trailer += 1
        if trailer > MAX_HEADERS:
            raise ScrapeError(f"more than {MAX_HEADERS} trailer lines")


def escaped(name: str) -> str:
    """``name`` with its colons as underscores: prometheus_client's underscore escaping of a sample
    name (the only character of a valid name it changes), so both spellings compare equal."""
    return name.replace(":", "_")


def _names(name: str) -> tuple[str, ...]:
    """The sample and family names under which counter ``name`` may appear (with or without _total)."""
    base = name[:-6] if name.endswith("_total") else name
    return tuple(each for each in (base, base + "_total") if each)


def _prefixes(names: Iterable[str]) -> tuple[str, ...]:
    """How the sample, TYPE and HELP lines of ``names`` (see ``read_counter``) begin, colons read
    as underscores (compare with ``escaped`` lines)."""
    found = sorted({escaped(each) for name in names for each in _names(name)})
    return tuple(f"{name}{end}" for name in found for end in ("{", " ", "\t")) + tuple(f"# {kind} {name} " for name in found for kind in ("TYPE", "HELP"))


@dataclass(frozen=True, slots=True)
class Answer:
    """What is kept of an app's answer: the lines of the wanted names, the first bytes (to say why
    an answer holds none of them), the number of lines, and the scrape's deadline."""

    wanted: tuple[bytes, ...]
    head: bytes
    lines: int
    deadline: float = math.inf


class LineFilter:
    """Keeps the lines of some metric names out of a body fed chunk by chunk, in bounded memory.

    Memory is bounded by MAX_LINE_BYTES (the line being assembled), HEAD_BYTES and MAX_KEPT_BYTES,
    whatever the body's size; a line of a wanted name over MAX_LINE_BYTES, more than MAX_KEPT_BYTES
    of wanted lines, more than MAX_SERIES samples per name, or bytes that are not UTF-8 raise
    ScrapeError at once. Each chunk costs a few C-level scans (``bytes.find``, ``bytes.count``),
    never a split of the body into lines, so the GIL is held for microseconds at a time.
    """

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(names)
        prefixes = _prefixes(self.names)
        self._prefixes = tuple(prefix.encode() for prefix in prefixes)
        self._longest = max(len(prefix) for prefix in self._prefixes)
        # Where a wanted line may begin, colons read as underscores: each name, and its TYPE and HELP
        # comments, after a line end.
        found = sorted({escaped(each) for name in self.names for each in _names(name)})
        self._needles = tuple(b"\n" + lead + each.encode() for each in found for lead in (b"", b"# TYPE ", b"# HELP "))
        self._max_samples = MAX_SERIES * len(self.names)
        self._kept: list[bytes] = []
        self._kept_bytes = 0
        self._samples = 0
        self._head = bytearray()
        self._partial = bytearray()  # the line begun at the end of the last chunk
        self._skipping = False  # in a line too long to be wanted: its bytes are dropped up to its end
        self._lines = 0
        self._fed = 0
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    def feed(self, chunk: bytes) -> None:
        self._check_utf8(chunk)
        if len(self._head) < HEAD_BYTES:
            self._head += chunk[: HEAD_BYTES - len(self._head)]
        start = 0
        if self._skipping or self._partial:
            end = chunk.find(b"\n")
            if end < 0:
                self._extend_partial(chunk)
                return
            if not self._skipping:
                self._extend_partial(chunk[:end])
                if not self._skipping:
                    self._keep_line(bytes(self._partial))
            self._partial.clear()
            self._skipping = False
            self._lines += 1
            start = end + 1
        last = chunk.rfind(b"\n")
        if last >= start:
            self._scan(b"\n" + chunk[start : last + 1])
            start = last + 1
        self._extend_partial(chunk[start:])

    def finish(self, deadline: float = math.inf) -> Answer:
        """The kept lines; a last line without a line end counts as a line."""
        self._check_utf8(b"", final=True)
        if self._partial:
            self._keep_line(bytes(self._partial))
        if self._partial or self._skipping:
            self._lines += 1
        return Answer(tuple(self._kept), bytes(self._head), self._lines, deadline)

    def _check_utf8(self, chunk: bytes, final: bool = False) -> None:
        pending = len(self._utf8.getstate()[0])
        try:
            self._utf8.decode(chunk, final)
        except UnicodeDecodeError as error:
            raise ScrapeError(f"response is not UTF-8 text (byte {self._fed - pending + error.start})") from None
        self._fed += len(chunk)

    def _scan(self, block: bytes) -> None:
        """Keep the wanted lines of ``block``: whole lines, led by a line end that is not part of them."""
        self._lines += block.count(b"\n") - 1
        keys = block.replace(b":", b"_")  # byte for byte the same lines as ``block``: only colons differ
        starts: list[int] = []
        for needle in self._needles:
            at = keys.find(needle)
            while at >= 0:
                starts.append(at + 1)
                at = keys.find(needle, at + 1)
        for at in sorted(set(starts)):  # a line of foo_total is found as foo and as foo_total
            self._keep_line(block[at : block.index(b"\n", at)])

    def _extend_partial(self, data: bytes) -> None:
        if self._skipping or not data:
            return
        self._partial += data
        if len(self._partial) > MAX_LINE_BYTES:
            if _begins(self._partial[: self._longest], self._prefixes):
                name = bytes(self._partial[:80]).split(b"{", 1)[0].split(b" ", 1)[0].decode(errors="backslashreplace")
                raise ScrapeError(f"a line of {name} is over {MAX_LINE_BYTES} bytes")
            self._partial.clear()
            self._skipping = True

    def _keep_line(self, line: bytes) -> None:
        if not _begins(line[: self._longest], self._prefixes):
            return
        if len(line) > MAX_LINE_BYTES:
            raise ScrapeError(f"a line of {' or '.join(sorted(self.names))} is over {MAX_LINE_BYTES} bytes")
        self._kept_bytes += len(line) + 1
        if self._kept_bytes > MAX_KEPT_BYTES:
            raise ScrapeError(f"the lines of {' or '.join(sorted(self.names))} are over {MAX_KEPT_BYTES} bytes")
        if not line.startswith(b"#"):
            self._samples += 1
            if self._samples > self._max_samples:
                raise ScrapeError(f"over {MAX_SERIES} series of {' or '.join(sorted(self.names))} in the response")
        self._kept.append(line)


def _begins(line: bytes | bytearray, prefixes: tuple[bytes, ...]) -> bool:
    """Whether ``line``, colons read as underscores, begins with one of ``prefixes``."""
    return bytes(line).replace(b":", b"_").startswith(prefixes)


def _lines_of(answer: Answer, name: str) -> Iterator[str]:
    """The kept lines of ``name``, each checked against the scrape's deadline as the parser takes it."""
    prefixes = tuple(prefix.encode() for prefix in _prefixes([name]))
    longest = max(len(prefix) for prefix in prefixes)
    for line in answer.wanted:
        if _begins(line[:longest], prefixes):
            if time.monotonic() > answer.deadline:
                raise _Deadline
            yield line.decode("utf-8") + "\n"


def read_counter(answer: Answer, name: str, labels: dict[str, str], on_duplicate: Callable[[str], None] | None = None) -> Series:
    """The series of counter ``name`` whose labels include ``labels``; ScrapeError where there are none.
    A series that appears twice keeps its last value (as Prometheus's parser would refuse the page,
    this is said through ``on_duplicate``, with the series).

    ``name`` matches in either spelling (``vllm:x_total`` or ``vllm_x_total``); where both are on
    the page, only the series spelled like ``name`` count. Only the lines of ``name`` (and its
    ``_total`` twin) are parsed; the rest of the response is not checked, except to tell why it
    holds none of them. The parse stops at the scrape's deadline.
    """
    from prometheus_client.parser import text_fd_to_metric_families  # 12 MB: loaded with the first app scrape

    wanted, spellings = escaped(name), _names(name)
    found: dict[bool, Series] = {True: {}, False: {}}  # spelled as configured or not -> series
    try:
        lines = cast(TextIO, _lines_of(answer, name))  # the parser only iterates over its file's lines
        for family in text_fd_to_metric_families(lines):
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
                key = tuple(sorted(sample.labels.items()))
                if key in series and on_duplicate is not None:
                    on_duplicate(sample.name + "{" + ",".join(f'{label}="{value}"' for label, value in key) + "}")
                series[key] = float(sample.value)
                if len(series) > MAX_SERIES:
                    raise ScrapeError(f"over {MAX_SERIES} series of {name} in the response")
    except _Deadline:
        raise ScrapeError(f"no complete answer within scrape_timeout (reading the lines of {name})") from None
    except (ValueError, IndexError, KeyError, TypeError) as error:
        raise ScrapeError(f"not Prometheus text format: {error}"[:300]) from None
    found_series = found[True] or found[False]
    if not found_series:
        _diagnose(answer.head)
        matching = "".join(f',{key}="{value}"' for key, value in labels.items())
        selector = f"{name}{{{matching[1:]}}}" if labels else name
        raise ScrapeError(f"no series {selector} among the {answer.lines} lines of the response")
    return found_series


def _diagnose(head: bytes) -> None:
    """Raise 'not Prometheus text format' where the first whole lines of the answer do not parse."""
    from prometheus_client.parser import text_string_to_metric_families

    lines = head.decode("utf-8", errors="replace").split("\n", DIAGNOSE_LINES)[:DIAGNOSE_LINES]
    if len(head) == HEAD_BYTES:
        lines = lines[:-1]  # the last may be cut short
    try:
        for _ in text_string_to_metric_families("\n".join(lines) + "\n"):
            pass
    except (ValueError, IndexError, KeyError, TypeError) as error:
        raise ScrapeError(f"not Prometheus text format: {error}"[:300]) from None
