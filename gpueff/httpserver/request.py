"""Parsing an HTTP/1.x request head (request line and header fields), strictly and within bounds.

Only what this server needs: GET and HEAD take no body, so a request body is discarded (up to
``MAX_DISCARDED_BODY`` bytes) and never read as a request of its own; anything malformed is an
``HttpError`` that becomes a plain-text 4xx/5xx answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpueff.untrusted import whole_number

MAX_HEAD_BYTES = 16 * 1024  # request line and header fields together
MAX_HEADER_FIELDS = 100
MAX_DISCARDED_BODY = 64 * 1024  # a longer request body gets 413 and the connection is closed

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    417: "Expectation Failed",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(r"HTTP/([0-9])\.([0-9])")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class HttpError(Exception):
    """A request that gets an error answer and a closed connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # the target without its query string
    version: str
    headers: dict[str, str]  # lower-case names; repeated fields joined with ", "
    keep_alive: bool
    content_length: int
    query: str = ""  # what follows the first "?" of the target, undecoded
    expects_continue: bool = False  # "Expect: 100-continue" with a body: the client waits for "100 Continue"


def head_end(buffer: bytes | bytearray) -> tuple[int, int] | None:
    """Where the head in ``buffer`` ends and what follows it starts, or None while incomplete."""
    found = _HEAD_END.search(buffer)
    return None if found is None else (found.start(), found.end())


def parse_head(head: bytes) -> Request:
    """The request line and header fields (without the blank line that ends them)."""
    text = head.decode("latin-1")
    request_line, *fields = text.split("\n")
    parts = request_line.rstrip("\r").split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
        raise HttpError(400, "Bad request line: expected METHOD /path HTTP/1.1.")
    method, target, version = parts
    found = _VERSION.fullmatch(version)
    if found is None:
        raise HttpError(400, "Bad request line: expected METHOD /path HTTP/1.1.")
    if found.group(1) != "1":
        raise HttpError(505, "Only HTTP/1.0 and HTTP/1.1 are served here.")
    if not target.startswith("/") or _BAD_VALUE.search(target):
        raise HttpError(400, "Bad request target: expected a path starting with '/'.")
    if len(fields) > MAX_HEADER_FIELDS:
        raise HttpError(431, f"Too many header fields (at most {MAX_HEADER_FIELDS}).")
    headers: dict[str, str] = {}
    for line in fields:
        line = line.rstrip("\r")
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise HttpError(400, "Bad header field: expected 'Name: value' on one line.")
        value = value.strip(" \t")
        if _BAD_VALUE.search(value):
            raise HttpError(400, "Bad header field: a control character in a value.")
        name = name.lower()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    if "transfer-encoding" in headers:
        raise HttpError(400, "A request body with Transfer-Encoding is not accepted here.")
    content_length = _content_length(headers.get("content-length"))
    tokens = {token.strip().lower() for token in headers.get("connection", "").split(",")}
    keep_alive = "keep-alive" in tokens if found.group(2) == "0" else "close" not in tokens
    expect = headers.get("expect")
    if expect is not None and expect.lower() != "100-continue":
        raise HttpError(417, "Only 'Expect: 100-continue' is understood here.")
    path, _, query = target.partition("?")
    return Request(method, path, version, headers, keep_alive, content_length, query, expect is not None and content_length > 0 and found.group(2) == "1")


def _content_length(value: str | None) -> int:
    if value is None:
        return 0
    lengths = {length.strip() for length in value.split(",")}
    if len(lengths) != 1 or not all(length.isdigit() and length.isascii() for length in lengths):
        raise HttpError(400, "Bad Content-Length.")
    length = whole_number(lengths.pop(), 12)
    if length is None or length > MAX_DISCARDED_BODY:
        raise HttpError(413, f"A request body is not accepted here (at most {MAX_DISCARDED_BODY} bytes are read and discarded).")
    return length
