"""logfmt logging, as Prometheus' own daemons write it."""

from __future__ import annotations

import logging
import sys
import time

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        message = record.getMessage()
        if record.exc_info:
            message += " " + self.formatException(record.exc_info)
        message = message.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        level = {"WARNING": "warn"}.get(record.levelname, record.levelname.lower())
        return f'ts={stamp} level={level} source={record.name} msg="{message}"'


def setup(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
