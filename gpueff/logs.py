"""The log, as Prometheus' own daemons write it: one line per event, logfmt (default) or JSON
(``--log.format``), with the event's structured keys (``gpu=``, ``uuid=``, ``app=``, ``url=``, ...)
beside ``msg``. Every value is escaped: a process name, pod label or app answer in a message
cannot break the line, forge a key or reach the terminal as a control sequence."""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

MAX_ERROR_CHARS = 500
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
FORMATS = ("logfmt", "json")
FIELDS = "structured_fields"  # the LogRecord attribute that ``fields()`` sets through ``extra=``
RESERVED = frozenset({"ts", "level", "source", "msg"})
NAMED_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def fields(**values: object) -> dict[str, Any]:
    """``extra=`` for a log call: the keys that go on the line beside ``msg``, in this order; None
    values are left out. ``log.warning("...", extra=fields(gpu=0, uuid=uuid))``."""
    clash = RESERVED.intersection(values)
    if clash:
        raise ValueError(f"log keys {sorted(clash)} are the line's own")
    return {FIELDS: values}


def gpu_fields(index: int, uuid: str | None = None, **more: object) -> dict[str, Any]:
    """``extra=`` for a line about one GPU: ``gpu=<index> uuid=<uuid>``."""
    return fields(gpu=index, uuid=uuid, **more)


def record_fields(record: logging.LogRecord) -> dict[str, object]:
    return {key: value for key, value in getattr(record, FIELDS, {}).items() if value is not None}


def quote(text: str, always: bool = False) -> str:
    """A logfmt value: bare when it is plain printable ASCII without space, quote, equals sign or
    backslash (and not ``always``); otherwise quoted, with every character that is not printable escaped (control
    characters, terminal escapes, bidirectional overrides, line and paragraph separators)."""
    if not always and text and all("!" <= char <= "~" and char not in '"=\\' for char in text):
        return text
    return '"' + "".join(_escaped(char) for char in text) + '"'


def _escaped(char: str) -> str:
    if char in NAMED_ESCAPES:
        return NAMED_ESCAPES[char]
    if char.isprintable():
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return value if isinstance(value, str) else str(value)


def _message(record: logging.LogRecord) -> str:
    message = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        message += ": " + one_line(record.exc_info[1])
    return message


def _head(record: logging.LogRecord) -> tuple[str, str]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
    return stamp, {"WARNING": "warn"}.get(record.levelname, record.levelname.lower())


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp, level = _head(record)
        line = f"ts={stamp} level={level} source={quote(record.name)} msg={quote(_message(record), always=True)}"
        for key, value in record_fields(record).items():
            line += f" {key}={quote(_value(value))}"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line; non-ASCII and control characters as \\u escapes."""

    def format(self, record: logging.LogRecord) -> str:
        import json  # only where --log.format=json: the daemon's own modules leave json unloaded (memory)

        stamp, level = _head(record)
        document: dict[str, object] = {"ts": stamp, "level": level, "source": record.name, "msg": _message(record)}
        for key, value in record_fields(record).items():
            plain = isinstance(value, (bool, int)) or (isinstance(value, float) and math.isfinite(value))
            document[key] = value if plain else _value(value)
        return json.dumps(document, ensure_ascii=True, allow_nan=False, separators=(",", ":"), default=str)


def one_line(error: BaseException) -> str:
    """An exception as one line: its type, its message, and where it was raised (file:line).

    A traceback spans lines, which breaks logfmt readers and lets a peer that resets connections
    fill the log; the innermost frame is enough to find the place."""
    text = f"{type(error).__name__}: {str(error)[:MAX_ERROR_CHARS]}"
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    if frame is not None:
        text += f" (at {Path(frame.tb_frame.f_code.co_filename).name}:{frame.tb_lineno})"
    return text


def setup(level: str, log_format: str = "logfmt") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
