"""The structured log: one logfmt line per event, exceptions included (issue 14 item 8)."""

from __future__ import annotations

import json
import logging
import re
import socket
import struct
import subprocess
import sys
import time

import pytest
from conftest import ROOT, running_daemon
from waiting import PATIENCE

from gpueff import __version__
from gpueff.logs import JsonFormatter, LogfmtFormatter, fields, one_line, record_fields
from gpueff.web.server import WebServer


def format_exception_record(error: BaseException) -> str:
    try:
        raise error
    except BaseException:
        record = logging.getLogger("gpueff.test").makeRecord("gpueff.test", logging.ERROR, __file__, 1, "it failed", (), exc_info=__import__("sys").exc_info())
    return LogfmtFormatter().format(record)


def test_an_exception_is_one_line_with_its_type_message_and_place():
    line = format_exception_record(ValueError('bad "value"\nsecond line'))
    assert "\n" not in line
    assert line.startswith("ts=") and " level=error source=gpueff.test " in line
    assert 'msg="it failed: ValueError: bad \\"value\\"\\nsecond line (at test_logs.py:' in line
    assert "Traceback" not in line


def test_a_huge_exception_message_is_cut():
    assert len(one_line(RuntimeError("x" * 100_000))) < 700


def test_a_client_reset_logs_one_line_and_no_traceback(caplog, capfd):
    server = WebServer("127.0.0.1:0", lambda gzip: None, lambda: True, "note")
    server.start()
    try:
        with caplog.at_level(logging.DEBUG, logger="gpueff.web.server"):
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


# --- --log.format, structured keys, hostile bytes (issue 36) ---------------------------------------

HOSTILE = 'pod "a" x=forged\nts=0 level=error\r\x1b[31mred\x1b[0m \u202egnp.exe \u2028next \x00\x7f\x85 é 日本'


def logfmt_pairs(line: str) -> list[tuple[str, str]]:
    """A strict logfmt reader: key=bare or key="quoted with \\ escapes", separated by one space."""
    pairs, position = [], 0
    pattern = re.compile(r'([a-z_]+)=(?:"((?:[^"\\]|\\.)*)"|([!#-<>-\[\]-~]+))(?: |$)')
    while position < len(line):
        match = pattern.match(line, position)
        assert match, f"not logfmt at {position}: {line[position:position + 40]!r}"
        pairs.append((match.group(1), match.group(2) if match.group(2) is not None else match.group(3)))
        position = match.end()
    return pairs


def unescape(text: str) -> str:
    """A quoted logfmt value back to the text it stands for."""
    named = {'"': '"', "\\": "\\", "n": "\n", "r": "\r", "t": "\t"}
    return re.sub(r'\\(["\\nrt]|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})', lambda m: named.get(m.group(1)) or chr(int(m.group(1)[1:], 16)), text)


def record(message: str, *args: object, extra: dict | None = None) -> logging.LogRecord:
    return logging.getLogger("gpueff.test").makeRecord("gpueff.test", logging.WARNING, __file__, 1, message, args, None, extra=extra)


def test_logfmt_escapes_hostile_bytes_and_forges_no_key() -> None:
    line = LogfmtFormatter().format(record("app %s is down", HOSTILE, extra=fields(app=HOSTILE, gpu=3, uuid="GPU-1b2c", url="http://x/m?a=1", ratio=0.5, up=False, none=None)))
    assert line.isascii() or all(char.isprintable() for char in line), "no control character reaches the terminal"
    assert not any(char in line for char in "\n\r\x1b\x00\x7f\x85\u2028\u202e")
    pairs = logfmt_pairs(line)
    assert [key for key, _ in pairs] == ["ts", "level", "source", "msg", "app", "gpu", "uuid", "url", "ratio", "up"]
    values = dict(pairs)
    assert values["gpu"] == "3" and values["uuid"] == "GPU-1b2c" and values["ratio"] == "0.5" and values["up"] == "false"
    assert unescape(values["url"]) == "http://x/m?a=1", "an = makes the value quoted"
    assert unescape(values["app"]) == HOSTILE and unescape(values["msg"]) == f"app {HOSTILE} is down", "nothing lost"
    assert "\\x1b[31m" in values["app"] and "\\u202e" in values["app"] and "\\u2028" in values["app"] and "\\n" in values["app"] and '\\"a\\"' in values["app"]
    assert "é 日本" in values["app"], "printable non-ASCII stays readable"


def test_json_lines_round_trip_hostile_bytes_as_ascii() -> None:
    line = JsonFormatter().format(record("app %s is down", HOSTILE, extra=fields(app=HOSTILE, gpu=3, ratio=float("nan"), none=None)))
    assert line.isascii() and "\n" not in line
    document = json.loads(line)
    assert list(document) == ["ts", "level", "source", "msg", "app", "gpu", "ratio"]
    assert document["app"] == HOSTILE and document["msg"] == f"app {HOSTILE} is down" and document["gpu"] == 3
    assert document["ratio"] == "nan" and document["level"] == "warn"


def test_fields_refuse_the_lines_own_keys() -> None:
    with pytest.raises(ValueError, match="msg"):
        fields(msg="x")


def test_gpu_and_xid_lines_carry_gpu_and_uuid(caplog) -> None:
    from gpueff.backends.dcgm.xid import XidCounter

    with caplog.at_level(logging.WARNING, logger="gpueff.backends.dcgm.xid"):
        XidCounter().count("GPU-5e2d", 2, 79)
    (logged,) = caplog.records
    assert record_fields(logged) == {"gpu": 2, "uuid": "GPU-5e2d", "xid": 79}
    assert LogfmtFormatter().format(logged).endswith(" gpu=2 uuid=GPU-5e2d xid=79")


def daemon_lines(*args: str) -> list[str]:
    with running_daemon("--demo", *args) as daemon:
        url = daemon.url
    return [url, *daemon.output.splitlines()]


def test_the_daemon_logs_json_with_a_startup_line_of_version_backend_and_url() -> None:
    url, *lines = daemon_lines("--log.format=json")
    documents = [json.loads(line) for line in lines]
    (start,) = [document for document in documents if "version" in document]
    assert start["version"] == __version__ and start["backend"] == "replay" and start["url"] == f"{url}/metrics" and start["gpus"] == 20
    assert start["level"] == "info" and start["source"] == "gpueff" and start["interval"] == "1s"
    assert documents[-1]["msg"] == "stopping"


def test_the_daemon_logs_logfmt_by_default_and_log_level_filters() -> None:
    url, *lines = daemon_lines()
    (start,) = [dict(logfmt_pairs(line)) for line in lines if " version=" in line]
    assert start["version"] == __version__ and start["backend"] == "replay" and unescape(start["url"]) == f"{url}/metrics"
    _, *quiet = daemon_lines("--log.level=error")
    assert quiet == [], "warn and info lines are filtered out at --log.level=error"


def test_log_flags_are_node_exporters() -> None:
    from gpueff.commands.cli import daemon_parser

    args = daemon_parser().parse_args(["--log.format=json", "--log.level=warn"])
    assert (args.log_format, args.log_level) == ("json", "warn")
    assert (daemon_parser().parse_args([]).log_format, daemon_parser().parse_args([]).log_level) == ("logfmt", "info")
    with pytest.raises(SystemExit):
        daemon_parser().parse_args(["--log.format=text"])


def test_a_port_in_use_is_one_error_line_naming_the_address() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = subprocess.run([sys.executable, "-m", "gpueff", "--demo", f"--web.listen-address={address}"], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 2
    (line,) = [line for line in done.stderr.splitlines() if "level=error" in line]
    assert dict(logfmt_pairs(line))["address"] == address and "cannot listen on" in line
