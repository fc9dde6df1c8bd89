"""Files an operator names (--config, --web.config.file, its certificates, traces) are read only
where they are regular files, with their size checked before reading: a huge sparse file costs
nothing, and a FIFO in a file's place never blocks a reload or the shutdown after it."""

from __future__ import annotations

import os
import signal
import threading
import tracemalloc
from pathlib import Path

import pytest
from conftest import running_daemon
from tls_certs import make_pki
from waiting import PATIENCE

from exporter.config.engine import ConfigError
from exporter.httpserver.tlsconfig import WebConfigError, load_web_config
from exporter.settings import load_config
from exporter.trace import TraceError, load_trace

SPARSE = 256 * 1024 * 1024  # no disk, but read whole it is 256 MB of memory


def sparse(path: Path) -> Path:
    with open(path, "wb") as file:
        file.truncate(SPARSE)
    return path


def bounded(function, seconds: float = PATIENCE) -> BaseException | None:
    """Run ``function`` on a thread; the exception it raised, failing the test if it is still
    running after ``seconds`` (a blocked read)."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        try:
            function()
        except BaseException as error:
            raised[0] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked"
    return raised[0]


@pytest.mark.parametrize(
    "load, error, limit",
    [(load_web_config, WebConfigError, 1048576), (load_config, ConfigError, 1048576), (load_trace, TraceError, None)],
    ids=["web-config", "config", "trace"],
)
def test_a_huge_sparse_file_is_refused_before_it_is_read(tmp_path, load, error, limit):
    path = sparse(tmp_path / "huge")
    tracemalloc.start()
    try:
        with pytest.raises(error, match=f"{SPARSE} bytes is over the {limit or ''}"):
            load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024  # before: the whole file was read (1.58 GB for a 1.5 GB web config)


@pytest.mark.parametrize(
    "load, error",
    [(load_web_config, WebConfigError), (load_config, ConfigError), (load_trace, TraceError)],
    ids=["web-config", "config", "trace"],
)
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path, load, error):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    try:
        raised = bounded(lambda: load(fifo))
    finally:
        try:  # a reader blocked in open() (the old behaviour) is let go
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    assert isinstance(raised, error) and "not a regular file" in str(raised), raised


def test_a_fifo_certificate_is_refused(tmp_path):
    pki = make_pki(tmp_path)
    fifo = tmp_path / "cert.fifo"
    os.mkfifo(fifo)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {fifo}\n  key_file: {pki.server.key}\n")
    raised = bounded(lambda: load_web_config(web))
    assert isinstance(raised, WebConfigError) and f"'tls_server_config.cert_file': cannot read {fifo}: not a regular file" in str(raised)


def test_sighup_with_a_fifo_web_config_then_sigterm_exits(trace_paths, tmp_path):
    """Before, the reload blocked in open() on the FIFO, in the thread that handles signals:
    SIGTERM was never acted on."""
    web = tmp_path / "web.yml"
    web.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    with running_daemon("--replay", str(trace_paths["idle"]), "--web.config.file", str(web)) as daemon:
        web.unlink()
        os.mkfifo(web)
        daemon.process.send_signal(signal.SIGHUP)
        daemon.wait_for_output("web config reload failed")  # refused, not opened: open() would block
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(PATIENCE) == 0
        output = daemon.finished_output()
    assert "web config reload failed, keeping the running TLS and auth settings" in output and "not a regular file" in output
