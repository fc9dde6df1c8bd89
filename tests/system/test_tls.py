"""--web.config.file end to end: a real daemon, real TLS clients (ssl + http.client), real certificates."""

from __future__ import annotations

import base64
import contextlib
import http.client
import signal
import socket
import ssl
import subprocess
import sys
import time

import bcrypt
import pytest
import yaml
from conftest import ROOT, free_port, running_daemon
from tls_certs import make_pki
from waiting import PATIENCE


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


HASH = bcrypt.hashpw(b"right-password", bcrypt.gensalt(6)).decode()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def client_context(pki, *, cert=None, minimum=None, maximum=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.server_ca.cert))
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    if minimum:
        context.minimum_version = minimum
    if maximum:
        context.maximum_version = maximum
    return context


def get(port: int, path: str, context: ssl.SSLContext | None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=PATIENCE) if context else http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        connection.close()


@contextlib.contextmanager
def tls_daemon(config_path, ready_context: ssl.SSLContext, ready_headers: dict[str, str] | None = None):
    def is_ready(port: int) -> bool:
        with contextlib.suppress(ssl.SSLError, http.client.HTTPException):
            return get(port, "/-/ready", ready_context, ready_headers)[0] == 200
        return False

    with running_daemon("--demo", "--collect-interval", "200ms", "--web.config.file", str(config_path), is_ready=is_ready) as daemon:
        yield daemon


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end has closed ``sock`` (without waiting for it to)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


def write_config(folder, data) -> str:
    path = folder / "web.yml"
    path.write_text(yaml.safe_dump(data))
    return path


TLS = {"cert_file": "server.crt", "key_file": "server.key"}


def test_tls_with_basic_auth_right_and_wrong_passwords(pki):
    path = write_config(pki.folder, {"tls_server_config": TLS, "basic_auth_users": {"prometheus": HASH}, "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}}})
    context = client_context(pki)
    with tls_daemon(path, context, basic("prometheus", "right-password")) as daemon:
        port = daemon.port
        status, headers, body = get(port, "/metrics", context, basic("prometheus", "right-password"))
        assert status == 200 and "gpueff_gpu_up" in body and headers["X-Content-Type-Options"] == "nosniff"
        for credentials in (basic("prometheus", "wrong"), basic("nobody", "right-password"), {}):
            status, headers, body = get(port, "/metrics", context, credentials)
            assert status == 401 and "gpueff" not in body
            assert headers["WWW-Authenticate"].startswith("Basic realm=")
        assert get(port, "/-/healthy", context)[0] == 401  # every path needs the password
        status, _, body = get(port, "/metrics", None)  # plain HTTP to the TLS port: a clear 400, as Go servers say it
        assert status == 400 and body == "Client sent an HTTP request to an HTTPS server.\n"
        with pytest.raises(ssl.SSLCertVerificationError):  # the client refuses a server its CA did not sign
            get(port, "/metrics", ssl.create_default_context(cafile=str(pki.client_ca.cert)))


def test_required_client_certificate(pki):
    path = write_config(pki.folder, {"tls_server_config": {**TLS, "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "client-ca.crt"}})
    good = client_context(pki, cert=pki.client)
    with tls_daemon(path, good) as daemon:
        port = daemon.port
        assert get(port, "/metrics", good)[0] == 200
        for context in (client_context(pki), client_context(pki, cert=pki.rogue_client)):  # no certificate; one from an untrusted CA
            with pytest.raises((ssl.SSLError, ConnectionError)):
                get(port, "/metrics", context)
        assert get(port, "/metrics", good)[0] == 200  # refused handshakes leave the server serving


def test_optional_client_certificate_is_verified_when_given(pki):
    path = write_config(pki.folder, {"tls_server_config": {**TLS, "client_auth_type": "VerifyClientCertIfGiven", "client_ca_file": "client-ca.crt"}})
    anonymous = client_context(pki)
    with tls_daemon(path, anonymous) as daemon:
        port = daemon.port
        assert get(port, "/metrics", anonymous)[0] == 200
        assert get(port, "/metrics", client_context(pki, cert=pki.client))[0] == 200
        with pytest.raises((ssl.SSLError, ConnectionError)):
            get(port, "/metrics", client_context(pki, cert=pki.rogue_client))


def test_minimum_tls_version(pki):
    path = write_config(pki.folder, {"tls_server_config": {**TLS, "min_version": "TLS13"}})
    modern = client_context(pki, minimum=ssl.TLSVersion.TLSv1_3)
    with tls_daemon(path, modern) as daemon:
        port = daemon.port
        assert get(port, "/metrics", modern)[0] == 200
        with pytest.raises(ssl.SSLError):
            get(port, "/metrics", client_context(pki, maximum=ssl.TLSVersion.TLSv1_2))


def test_a_client_that_never_handshakes_does_not_block_others(pki):
    path = write_config(pki.folder, {"tls_server_config": TLS})
    context = client_context(pki)
    with tls_daemon(path, context) as daemon:
        port = daemon.port
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]  # TCP open, no ClientHello
        try:
            assert get(port, "/metrics", context)[0] == 200
            # Answered while the server still waits for every idle client's hello (it gives up on
            # them only after its 10 s header timeout): it did not wait for them first.
            assert not any(closed_by_peer(sock) for sock in idle)
        finally:
            for sock in idle:
                sock.close()


def test_sighup_reloads_web_config_and_keeps_the_old_one_when_bad(pki):
    path = write_config(pki.folder, {"tls_server_config": TLS, "basic_auth_users": {"alice": HASH}})
    context = client_context(pki)
    with tls_daemon(path, context, basic("alice", "right-password")) as daemon:
        port, process = daemon.port, daemon.process
        path.write_text("basic_auth_users: {alice: not-a-hash}\n")
        process.send_signal(signal.SIGHUP)
        daemon.wait_for_output("web config reload failed")
        assert get(port, "/metrics", context, basic("alice", "right-password"))[0] == 200  # old settings kept
        assert get(port, "/metrics", context)[0] == 401
        write_config(pki.folder, {"tls_server_config": TLS, "basic_auth_users": {"bob": HASH}})
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + PATIENCE
        while get(port, "/metrics", context, basic("bob", "right-password"))[0] != 200:
            if time.monotonic() > deadline:
                process.kill()
                raise AssertionError(process.stdout.read())
            time.sleep(0.1)
        assert get(port, "/metrics", context, basic("alice", "right-password"))[0] == 401
    assert "web config reload failed, keeping the running TLS and auth settings" in daemon.output


def test_bad_web_config_stops_the_start_with_a_clear_error(tmp_path):
    path = tmp_path / "web.yml"
    path.write_text("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n")
    result = subprocess.run([sys.executable, "-m", "gpueff", "--demo", "--web.listen-address", f"127.0.0.1:{free_port()}", "--web.config.file", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 2
    assert f"web config file {path}: 'tls_server_config.cert_file': cannot read {tmp_path / 'nope.crt'}: no such file" in result.stderr + result.stdout


def wait_until(condition, what: str, process, seconds: float = PATIENCE) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"{what}: {process.stdout.read()}")
        time.sleep(0.1)


def test_a_reload_never_turns_tls_auth_or_client_certificates_off(pki):
    """An empty file (a config tool writing it in place), a file without TLS, without users, or
    with weaker client certificate checks: each SIGHUP is refused with one line, and TLS and auth
    stay on. Rotating users is still taken."""
    path = write_config(pki.folder, {"tls_server_config": {**TLS, "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "client-ca.crt"}, "basic_auth_users": {"alice": HASH}})
    context = client_context(pki, cert=pki.client)
    alice = basic("alice", "right-password")
    with tls_daemon(path, context, alice) as daemon:
        port, process = daemon.port, daemon.process
        weaker = [
            "",
            yaml.safe_dump({"basic_auth_users": {"alice": HASH}}),
            yaml.safe_dump({"tls_server_config": {**TLS, "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "client-ca.crt"}}),
            yaml.safe_dump({"tls_server_config": {**TLS, "client_auth_type": "VerifyClientCertIfGiven", "client_ca_file": "client-ca.crt"}, "basic_auth_users": {"alice": HASH}}),
        ]
        for refused, text in enumerate(weaker, 1):
            path.write_text(text)
            process.send_signal(signal.SIGHUP)
            daemon.wait_for_output("web config reload refused", count=refused)
            assert get(port, "/metrics", context)[0] == 401  # auth still on
            assert get(port, "/metrics", context, alice)[0] == 200  # over TLS, with the client certificate
            with pytest.raises((ssl.SSLError, ConnectionError)):
                get(port, "/metrics", client_context(pki), alice)  # still required
            assert get(port, "/metrics", None, alice)[0] == 400  # plain HTTP is still refused
        write_config(pki.folder, {"tls_server_config": {**TLS, "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "client-ca.crt"}, "basic_auth_users": {"bob": HASH}})
        process.send_signal(signal.SIGHUP)
        wait_until(lambda: get(port, "/metrics", context, basic("bob", "right-password"))[0] == 200, "the valid reload was not taken", process)
    refusals = [line for line in daemon.output.splitlines() if "web config reload refused" in line]
    assert len(refusals) == len(weaker)
    assert "would turn off TLS and basic auth" in refusals[0] and "restart" in refusals[0]
    assert "would turn off TLS" in refusals[1] and "would turn off basic auth" in refusals[2]
    assert "client certificate verification (RequireAndVerifyClientCert -> VerifyClientCertIfGiven)" in refusals[3]


def test_the_live_page_sits_behind_the_same_tls_and_basic_auth(pki):
    path = write_config(pki.folder, {"tls_server_config": TLS, "basic_auth_users": {"prometheus": HASH}})
    context = client_context(pki)
    with tls_daemon(path, context, basic("prometheus", "right-password")) as daemon:
        for page in ("/", "/api/live", "/ui/page.js", "/ui/uPlot.iife.min.js"):
            status, _, body = get(daemon.port, page, context)
            assert status == 401 and "gpueff" not in body and "uPlot" not in body
            assert get(daemon.port, page, context, basic("prometheus", "right-password"))[0] == 200
        status, _, body = get(daemon.port, "/api/live", context, basic("prometheus", "right-password"))
        assert status == 200 and '"gpus":[' in body
