"""The structured log: one logfmt line per event, exceptions included (issue 14 item 8)."""

from __future__ import annotations

import logging
import socket
import struct
import time

from waiting import PATIENCE

from exporter.logs import LogfmtFormatter, one_line
from exporter.web.server import WebServer


def format_exception_record(error: BaseException) -> str:
    try:
        raise error
    except BaseException:
        record = logging.getLogger("exporter.test").makeRecord("exporter.test", logging.ERROR, __file__, 1, "it failed", (), exc_info=__import__("sys").exc_info())
    return LogfmtFormatter().format(record)


def test_an_exception_is_one_line_with_its_type_message_and_place():
    line = format_exception_record(ValueError('bad "value"\nsecond line'))
    assert "\n" not in line
    assert line.startswith("ts=") and " level=error source=exporter.test " in line
    assert 'msg="it failed: ValueError: bad \\"value\\"\\nsecond line (at test_logs.py:' in line
    assert "Traceback" not in line


def test_a_huge_exception_message_is_cut():
    assert len(one_line(RuntimeError("x" * 100_000))) < 700


def test_a_client_reset_logs_one_line_and_no_traceback(caplog, capfd):
    server = WebServer("127.0.0.1:0", lambda gzip: None, lambda: True, "note")
    server.start()
    try:
        with caplog.at_level(logging.DEBUG, logger="exporter.web.server"):
            for _ in range(3):
                client = socket.create_connection(("127.0.0.1", server.port))
                client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # half a request, then a reset
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
            deadline = time.monotonic() + PATIENCE
            while len(caplog.records) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        server.close()
    assert "Traceback" not in capfd.readouterr().err
    assert caplog.records and all(record.levelno == logging.DEBUG and "ConnectionResetError" in record.getMessage() for record in caplog.records)
