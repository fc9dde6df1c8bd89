"""Issue 25 item 6: kept-alive TLS scrapes while other clients flood the server with handshakes.

Three threads open TLS connections as fast as they can, finish the handshake and close; one
client keeps one TLS connection alive and scrapes ``/metrics`` every 10 ms; another opens a fresh
TLS connection per scrape every 100 ms. Printed for an RSA-4096 and an ECDSA P-256 server key:
handshakes the flood completed per second and both clients' p50/p99, on loopback.

    python bench/web/tls_handshake_flood.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

from gpueff.httpserver.tlsconfig import load_web_config  # noqa: E402
from gpueff.web.payload import Payload  # noqa: E402
from gpueff.web.server import WebServer  # noqa: E402

BODY = b'gpueff_metric{gpu="0"} 1\n' * 400
REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"


def self_signed(folder: Path, key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> Path:
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench")])
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(1)
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    (folder / "server.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / "server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    web = folder / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    return web


def client_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def read_answer(sock: ssl.SSLSocket) -> None:
    data = b""
    while not data.endswith(BODY[-40:]):
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk


def flood(port: int, stop: threading.Event, done: list[int]) -> None:
    context = client_context()
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, context.wrap_socket(raw):
                done[0] += 1
        except OSError:
            pass


def measure(web_config: Path, seconds: float) -> str:
    server = WebServer("127.0.0.1:0", lambda gzip: Payload((BODY,), None), lambda: True, "bench", web_config=load_web_config(web_config))
    server.start()
    stop, done = threading.Event(), [0]
    flooders = [threading.Thread(target=flood, args=(server.port, stop, done), daemon=True) for _ in range(3)]
    kept: list[float] = []
    fresh: list[float] = []

    def fresh_scrapes() -> None:
        context = client_context()
        while not stop.is_set():
            started = time.perf_counter()
            try:
                with socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw, context.wrap_socket(raw) as sock:
                    sock.sendall(REQUEST)
                    read_answer(sock)
                fresh.append(time.perf_counter() - started)
            except OSError:
                pass
            time.sleep(0.1)

    fresh_thread = threading.Thread(target=fresh_scrapes, daemon=True)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw, client_context().wrap_socket(raw) as sock:
        for thread in flooders:
            thread.start()
        fresh_thread.start()
        time.sleep(0.5)
        started_flood, before = time.monotonic(), done[0]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            sock.sendall(REQUEST)
            read_answer(sock)
            kept.append(time.perf_counter() - started)
            time.sleep(0.01)
        rate = (done[0] - before) / (time.monotonic() - started_flood)
    stop.set()
    server.close()

    def p(values: list[float], q: float) -> float:
        return sorted(values)[min(len(values) - 1, int(len(values) * q))] * 1000 if values else float("nan")

    return (f"{rate:.0f} handshakes/s; kept-alive scrape p50 {statistics.median(kept) * 1000:.1f} ms, p99 {p(kept, 0.99):.1f} ms ({len(kept)}); "
            f"fresh TLS scrape p50 {p(fresh, 0.5):.0f} ms, p99 {p(fresh, 0.99):.0f} ms ({len(fresh)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    keys: list[tuple[str, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey]] = [("RSA-4096", rsa.generate_private_key(65537, 4096)), ("ECDSA P-256", ec.generate_private_key(ec.SECP256R1()))]
    for label, key in keys:
        with tempfile.TemporaryDirectory() as folder:
            print(f"{label}: {measure(self_signed(Path(folder), key), args.seconds)}")


if __name__ == "__main__":
    main()
