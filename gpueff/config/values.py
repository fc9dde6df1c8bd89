"""Value parsers for config keys: each turns a raw YAML value into the key's value or raises
``ValueError`` with the reason (durations, numbers, names, URLs, paths), and ``shown`` quotes a
rejected value briefly."""

from __future__ import annotations

import math
import re
import reprlib
import urllib.parse
from collections.abc import Callable
from typing import Any

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_duration(text: Any) -> float:
    """Parse a Prometheus-style duration (``500ms``, ``1s``, ``1m30s``) into seconds."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"expected a duration such as 500ms, 1s or 1m30s, got {shown(text)}")
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(text):
        raise ValueError(f"expected a duration such as 500ms, 1s or 1m30s, got {shown(text)}")
    return total


def format_duration(seconds: float) -> str:
    if seconds < 1 or seconds != int(seconds):
        return f"{round(seconds * 1000)}ms"
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{int(seconds) // size}{unit}"
    return f"{int(seconds)}s"


SHOWN_CHARS = 200  # at most this much of a rejected value is quoted in an error message
_SHORT = reprlib.Repr()
_SHORT.maxlevel = 3  # with at most 10 items per level: a nested value is never expanded past 1,000 items
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 10
_SHORT.maxstring = _SHORT.maxother = SHOWN_CHARS


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, at most SHOWN_CHARS characters (cut with an ellipsis)."""
    return cut(_SHORT.repr(value))


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"expected a number, got {shown(value)}")
    return float(value)


def ratio(value: Any) -> float:
    number = _number(value)
    if not 0 <= number <= 1:
        raise ValueError(f"expected a ratio between 0 and 1, got {shown(value)}")
    return number


def positive(value: Any) -> float:
    number = _number(value)
    if number <= 0:
        raise ValueError(f"expected a number above 0, got {shown(value)}")
    return number


def non_negative(value: Any) -> float:
    number = _number(value)
    if number < 0:
        raise ValueError(f"expected a number of 0 or more, got {shown(value)}")
    return number


def optional(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else parse(value)


MAX_DURATION = 3600.0  # every interval and timeout: longer ones are typos, and overflow waits
MIN_COLLECT_INTERVAL = 0.1  # the shortest poll and app scrape interval


def min_duration(minimum: float, maximum: float = MAX_DURATION) -> Callable[[Any], float]:
    """A duration parser bounded to [minimum, maximum]."""

    def parse(value: Any) -> float:
        seconds = parse_duration(value)
        if seconds < minimum:
            raise ValueError(f"must be at least {format_duration(minimum)}, got {shown(value)}")
        if not seconds <= maximum:
            raise ValueError(f"must be at most {format_duration(maximum)}, got {shown(value)}")
        return seconds

    return parse


def positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"expected a whole number above 0, got {shown(value)}")
    return value


def whole_number(maximum: int, why: str) -> Callable[[Any], int]:
    """A whole number from 1 to ``maximum``; the error says ``why`` a larger one cannot work."""

    def parse(value: Any) -> int:
        number = positive_int(value)
        if number > maximum:
            raise ValueError(f"must be at most {maximum:,} ({why}), got {shown(value)}")
        return number

    return parse


def unix_user_id(value: Any) -> int:
    """A Unix user id: 0 (root) to 4294967294 (2^32 - 1 is the kernel's "no user")."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < (1 << 32) - 1:
        raise ValueError(f"expected a Unix user id, a whole number from 0 to 4294967294 (id -u NAME gives it), got {shown(value)}")
    return value


def label_value(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 64:
        raise ValueError(f"expected a non-empty string of at most 64 characters, got {shown(value)}")
    return value


_CREDENTIALS = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")  # the userinfo of a URL's authority
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_UNIT = re.compile(r"[a-z][a-z0-9_]{0,31}")


def without_credentials(url: str) -> str:
    """``url`` with any ``user:password@`` of its authority replaced, for a message or a log line."""
    return _CREDENTIALS.sub(r"\1<credentials>@", url)


def http_url(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected an http:// or https:// URL such as http://127.0.0.1:8000/metrics, got {shown(value)}")
    quoted = shown(without_credentials(value))
    if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", value):
        raise ValueError(f"expected an http:// or https:// URL such as http://127.0.0.1:8000/metrics, got {quoted}")
    parts = urllib.parse.urlsplit(value)
    if not parts.hostname:
        raise ValueError(f"{quoted} names no host: expected a URL such as http://127.0.0.1:8000/metrics")
    if "@" in parts.netloc:
        raise ValueError(f"{quoted}: credentials in an app's URL (user:password@) are refused: a scrape never sends them, and they would be logged with the URL; apps have no credentials setting, so scrape an endpoint that needs none")
    try:
        port = parts.port
    except ValueError as error:  # not a number, or out of range
        raise ValueError(f"{quoted}: {error}") from None
    if port == 0:
        raise ValueError(f"{quoted}: port 0 cannot be scraped")
    if not value.isascii() or not value.isprintable():
        raise ValueError(f"{quoted}: a URL is ASCII: percent-encode other characters of the path (%C3%A9 for é) and give an international host name in its xn-- form")
    try:
        parts.hostname.encode("idna")
    except UnicodeError:
        raise ValueError(f"{quoted}: the host name has an empty part or one over 63 characters") from None
    return value


def metric_name(value: Any) -> str:
    if not isinstance(value, str) or not _METRIC_NAME.fullmatch(value):
        raise ValueError(f"expected a Prometheus metric name such as vllm:generation_tokens_total, got {shown(value)}")
    return value


def unit_name(value: Any) -> str:
    if not isinstance(value, str) or not _UNIT.fullmatch(value):
        raise ValueError(f"expected a lowercase word such as tokens, images, samples or requests, got {shown(value)}")
    return value


def label_matchers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of label name to exact value, got {shown(value)}")
    for name, label in value.items():
        if not isinstance(name, str) or not _LABEL_NAME.fullmatch(name) or not isinstance(label, str):
            raise ValueError(f"expected label name: \"value\" pairs, got {shown(name)}: {shown(label)}")
    return dict(value)


def gpu_selectors(value: Any) -> tuple[int | str, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"expected a non-empty list of GPU indices and/or UUIDs, got {shown(value)}")
    for item in value:
        if isinstance(item, bool) or not (isinstance(item, int) and item >= 0 or isinstance(item, str) and item):
            raise ValueError(f"expected GPU indices (0, 1, ...) or UUIDs (GPU-...), got {shown(item)}")
    return tuple(value)


def positive_scientific(value: Any) -> float:
    """A number above 0; also ``1.6e10``, which YAML 1.1 (PyYAML) reads as a string."""
    if isinstance(value, str) and re.fullmatch(r"\d+(\.\d*)?[eE][-+]?\d+", value.strip()):
        value = float(value)
    return positive(value)


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {shown(value)}")
    return value


def absolute_path(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"expected an absolute path, got {shown(value)}")
    return value


def resource_patterns(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(item, str) and item for item in value):
        raise ValueError(f"expected a non-empty list of resource names (shell-style * allowed), got {shown(value)}")
    return tuple(value)


def one_of(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {shown(value)}")
        return str(value)

    return parse


def cut(text: str) -> str:
    """``text``, at most SHOWN_CHARS characters (cut with an ellipsis)."""
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
