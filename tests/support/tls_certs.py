"""Test certificates made on the spot with the `cryptography` package: CAs, a server and clients."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    cert: Path
    key: Path
    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey


def _write(folder: Path, name: str, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Issued:
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return Issued(cert_path, key_path, certificate, key)


def _builder(subject: str, issuer: x509.Name | None, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def make_ca(folder: Path, name: str) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = _builder(name, None, key.public_key()).add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
    builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    return _write(folder, name, builder.sign(key, hashes.SHA256()), key)


def issue(folder: Path, name: str, ca: Issued, *, server: bool) -> Issued:
    """A leaf certificate signed by ``ca``: for 127.0.0.1/localhost if ``server``, else a client."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = _builder(name, ca.certificate.subject, key.public_key()).add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.private_key.public_key()), critical=False)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return _write(folder, name, builder.sign(ca.private_key, hashes.SHA256()), key)


@dataclass
class Pki:
    folder: Path
    server_ca: Issued
    server: Issued
    client_ca: Issued
    client: Issued
    rogue_client: Issued  # signed by a CA the server does not trust


def make_pki(folder: Path) -> Pki:
    server_ca = make_ca(folder, "server-ca")
    client_ca = make_ca(folder, "client-ca")
    rogue_ca = make_ca(folder, "rogue-ca")
    return Pki(
        folder,
        server_ca,
        issue(folder, "server", server_ca, server=True),
        client_ca,
        issue(folder, "client", client_ca, server=False),
        issue(folder, "rogue-client", rogue_ca, server=False),
    )
