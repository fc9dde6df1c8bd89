"""logfmt logging, as Prometheus' own daemons write it."""

from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path

MAX_ERROR_CHARS = 500
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            message += ": " + one_line(record.exc_info[1])
        level = {"WARNING": "warn"}.get(record.levelname, record.levelname.lower())
        return f'ts={stamp} level={level} source={record.name} msg="{_escape(message)}"'


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


_SPECIAL = re.compile(r'[\\"\x00-\x1f\x7f-\x9f]')
_NAMED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(text: str) -> str:
    """A logfmt value: backslash, quote and line breaks escaped, and every other control character
    as ``\\xNN`` (a workload, GPU or process name's ESC or BEL must not drive the terminal that
    shows the log)."""
    return _SPECIAL.sub(lambda match: _NAMED.get(match.group(), f"\\x{ord(match.group()):02x}"), text)


def setup(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
