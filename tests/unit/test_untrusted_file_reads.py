"""Files an operator names (--config, --web.config.file, its certificates, traces) are read only
where they are regular files, with their size checked before reading: a huge sparse file costs
nothing, and a FIFO in a file's place never blocks a reload or the shutdown after it."""

from __future__ import annotations

import os
import re
import signal
import threading
import tracemalloc
from pathlib import Path

import pytest
from conftest import running_daemon
from tls_certs import make_pki
from waiting import PATIENCE

from gpueff.config.engine import ConfigError
from gpueff.httpserver.tlsconfig import WebConfigError, load_web_config
from gpueff.settings import load_config
from gpueff.trace import TraceError, load_trace
from gpueff.untrusted import writable_by_others

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


# ---- a config another user can change ------------------------------------------------------------

STRANGER = 4242  # another user's uid (the test, as root, makes files of it with chown)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="makes files of another user (chown): needs root")


def shared_folder(tmp_path: Path, mode: int) -> Path:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    return folder


@needs_root
def test_a_config_another_user_can_change_is_refused_naming_who_and_how(tmp_path):
    """The daemon, often root, would take it as the operator's word: a tenant who could edit it
    would choose proc_root (and so every GPU's owners), the app URLs it fetches, the kubelet socket
    and, in a web config, who may log in. Before, each of these loaded."""
    own = tmp_path / "own.yml"
    own.write_text("currency: EUR\n")
    assert writable_by_others(own) is None and load_config(own).currency == "EUR"
    own.chmod(0o666)
    assert writable_by_others(own) == f"anyone can write to {own} (chmod o-w)"
    with pytest.raises(ConfigError, match=re.escape(f"config file {own}: refused, since another user could change what it says: anyone can write to {own}")):
        load_config(own)

    public = shared_folder(tmp_path, 0o1777)  # /tmp's mode: a stranger may create a file first
    planted = public / "config.yml"
    planted.write_text("proc_root: /home/tenant/proc\n")
    assert writable_by_others(planted) is None  # root's own file there: the sticky bit keeps it root's
    os.chown(planted, STRANGER, STRANGER)
    assert writable_by_others(planted) == f"{planted} is owned by uid {STRANGER} in {public}, a folder anyone can write to"
    link = public / "web.yml"
    link.symlink_to(own)
    own.chmod(0o644)
    assert writable_by_others(link) is None
    os.lchown(link, STRANGER, STRANGER)  # a stranger's link to a file of root's: the stranger chooses which
    assert writable_by_others(link) == f"it is a symbolic link of uid {STRANGER} in {public}, a folder anyone can write to"
    with pytest.raises(WebConfigError, match="refused, since another user could change what it says: it is a symbolic link of uid 4242"):
        load_web_config(link)

    (tmp_path / "x").mkdir()
    open_folder = shared_folder(tmp_path / "x", 0o777)  # anyone may rename the file away and put another in its place
    inner = open_folder / "config.yml"
    inner.write_text("currency: EUR\n")
    assert writable_by_others(inner) == f"anyone can replace it: its folder {open_folder} is writable by anyone, without the sticky bit"


def test_a_config_on_a_read_only_file_system_is_no_ones_to_change(tmp_path, monkeypatch):
    """A Kubernetes ConfigMap: its folder reads 0777, but the volume is mounted read-only."""
    folder = shared_folder(tmp_path, 0o777)
    config = folder / "config.yml"
    config.write_text("currency: EUR\n")
    config.chmod(0o666)
    assert writable_by_others(config) is not None
    read_only = os.statvfs_result((4096, 4096, 1, 1, 1, 1, 1, 1, os.ST_RDONLY, 255))
    monkeypatch.setattr(os, "statvfs", lambda path: read_only)
    assert writable_by_others(config) is None and load_config(config).currency == "EUR"
