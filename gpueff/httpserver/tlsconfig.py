"""``--web.config.file``: TLS, basic auth and response headers in the Prometheus exporter-toolkit format.

The file looks like the one every official Prometheus exporter takes::

    tls_server_config:
      cert_file: server.crt            # relative paths are relative to this file's folder
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: clients-ca.crt
      min_version: TLS12
    http_server_config:
      headers:
        X-Content-Type-Options: nosniff
    basic_auth_users:
      prometheus: $2y$10$...           # bcrypt hash, e.g. from: htpasswd -nBC 10 user | cut -d: -f2

Everything is validated when the file is loaded (at start and on SIGHUP), by the config engine
(gpueff/config/engine.py) like the config file: unknown keys, bad values, unreadable certificates
and malformed hashes raise ``WebConfigError`` naming the file and each key in error. Keys of the
toolkit format that this exporter cannot honour with Python's ``ssl`` module are rejected with the
reason rather than silently ignored (a section's ``REFUSED``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from gpueff.config.engine import ConfigError, PartError, SettingError, load_section, section, setting
from gpueff.config.values import boolean, cut, shown
from gpueff.config.yaml_safe import read_yaml

if TYPE_CHECKING:
    import ssl


class WebConfigError(Exception):
    """A web config problem, phrased for the user: names the file, the key and the reason."""


# Names -> ssl.TLSVersion member names, oldest first (ssl is imported only where TLS is configured).
TLS_VERSIONS = {"TLS10": "TLSv1", "TLS11": "TLSv1_1", "TLS12": "TLSv1_2", "TLS13": "TLSv1_3"}
# client_auth_type -> ssl verify mode. Go's RequestClientCert and RequireAnyClientCert ask for a
# certificate without verifying it, which Python's ssl module cannot do: they are rejected.
# Weakest first: a reload may not move down this list (see WebConfig.weakened_by).
CLIENT_AUTH_TYPES = {"NoClientCert": "CERT_NONE", "VerifyClientCertIfGiven": "CERT_OPTIONAL", "RequireAndVerifyClientCert": "CERT_REQUIRED"}
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")
# Go cipher suite names (TLS 1.2 and older; TLS 1.3 suites are not configurable) -> OpenSSL names.
CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
# http_server_config.headers: the toolkit's allowed headers, and the values it accepts (None: any).
HEADERS: dict[str, tuple[str, ...] | None] = {
    "Content-Security-Policy": None,
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",),
    "X-XSS-Protection": None,
    "Strict-Transport-Security": None,
}
_BCRYPT_HASH = re.compile(r"\$2[aby]?\$([0-9][0-9])\$[./A-Za-z0-9]{53}")
_MAX_FILE_BYTES = 1024 * 1024
_AUTH_CACHE_SIZE = 1024


@dataclass(frozen=True)
class TlsServerConfig:
    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True

    def context(self) -> ssl.SSLContext:
        """A server-side SSLContext; raises ``ssl.SSLError``/``OSError`` on unusable files."""
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion[TLS_VERSIONS[self.min_version]]
        context.maximum_version = ssl.TLSVersion[TLS_VERSIONS[self.max_version]]
        if self.cipher_suites:
            context.set_ciphers(":".join(CIPHER_SUITES[name] for name in self.cipher_suites))
        if self.prefer_server_cipher_suites:
            context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        context.load_cert_chain(self.cert_file, self.key_file)
        context.verify_mode = ssl.VerifyMode[CLIENT_AUTH_TYPES[self.client_auth_type]]
        if self.client_ca_file is not None:
            context.load_verify_locations(cafile=self.client_ca_file)
        return context


class BasicAuth:
    """Checks ``Authorization: Basic`` credentials against bcrypt hashes.

    bcrypt is slow on purpose (~70 ms at cost 10), so successful checks are cached (keyed by a
    SHA-256 of user, password and hash; at most 1024 entries). Every check does the same work,
    whoever the user: one bcrypt check at each cost the users' hashes have, in order of cost, the
    user's own hash at its cost and a throwaway hash of that cost at the others (an unknown user
    gets throwaways only). So with users of mixed costs, a wrong password of any user and an
    unknown user cost the same, however busy the machine (a time floor alone hid the difference
    only while the costliest check fitted under it). ``cached`` is the cheap part, ``verify`` the
    bcrypt checks (the server runs them off its thread).
    """

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self.costs = sorted({_cost(hashed) for hashed in users.values()})
        self._decoys: dict[int, bytes] = {}  # a throwaway hash per cost, made when first needed
        self._cache: dict[bytes, None] = {}
        self._lock = threading.Lock()

    @staticmethod
    def credentials(header: str | None) -> tuple[str, bytes] | None:
        """(user, password) from an ``Authorization: Basic`` header, or None where it is not one."""
        return _basic_credentials(header)

    def _key(self, user: str, password: bytes) -> bytes:
        return hashlib.sha256(b"\0".join((user.encode(), password, self.users.get(user, b"")))).digest()

    def cached(self, user: str, password: bytes) -> bool:
        """True where these credentials passed a bcrypt check before."""
        if user not in self.users:
            return False
        key = self._key(user, password)
        with self._lock:
            return key in self._cache

    def verify(self, user: str, password: bytes) -> bool:
        """The bcrypt checks (slow: one per configured cost, whoever the user); a success is cached."""
        import bcrypt

        hashed = self.users.get(user)
        own = None if hashed is None else _cost(hashed)
        ok = False
        # bcrypt reads at most 72 bytes of a password; newer bcrypt packages refuse longer ones.
        for cost in self.costs:
            if cost == own and hashed is not None:
                ok = bcrypt.checkpw(password[:72], hashed)
            else:
                bcrypt.checkpw(password[:72], self._decoy(cost))
        if not ok:
            return False
        key = self._key(user, password)
        with self._lock:
            if len(self._cache) >= _AUTH_CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = None
        return True

    def _decoy(self, cost: int) -> bytes:
        import bcrypt

        decoy = self._decoys.get(cost)
        if decoy is None:
            decoy = self._decoys[cost] = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(cost))
        return decoy

    def keep_cache_of(self, old: BasicAuth) -> None:
        """Take over the successes ``old`` has cached (after a reload): entries are keyed by the
        hash too, so those of changed or removed users never match again."""
        with old._lock:
            cache = dict(old._cache)
        with self._lock:
            self._cache.update(cache)

    def check(self, header: str | None) -> bool:
        credentials = _basic_credentials(header)
        if credentials is None:
            return False
        return self.cached(*credentials) or self.verify(*credentials)


def _cost(hashed: bytes) -> int:
    """The cost of a ``$2b$<cost>$...`` hash (its form is checked by the loader)."""
    return int(hashed.split(b"$")[2])


def _basic_credentials(header: str | None) -> tuple[str, bytes] | None:
    if not header:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, separator, password = decoded.partition(b":")
    if not separator:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class WebConfig:
    path: str
    tls: TlsServerConfig | None = None
    headers: tuple[tuple[str, str], ...] = ()
    users: dict[str, bytes] = field(default_factory=dict)
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)
    auth: BasicAuth | None = field(default=None, compare=False)

    def authorized(self, header: str | None) -> bool:
        """True where no basic auth is configured or the Authorization header matches a user."""
        return self.auth is None or self.auth.check(header)

    def describe(self) -> str:
        parts = [f"TLS {self.tls.min_version}..{self.tls.max_version}, client certificates: {self.tls.client_auth_type}" if self.tls else "no TLS"]
        parts.append(f"basic auth for {len(self.users)} user(s)" if self.users else "no basic auth")
        return ", ".join(parts)

    def weakened_by(self, new: WebConfig) -> str | None:
        """What ``new`` would turn off of what this config enforces (TLS, client certificate
        verification, basic auth), or None where it keeps all of it. Certificates, users and
        headers may change freely."""
        lost = []
        if self.tls is not None and new.tls is None:
            lost.append("TLS")
        elif self.tls is not None and new.tls is not None:
            levels = list(CLIENT_AUTH_TYPES)
            if levels.index(new.tls.client_auth_type) < levels.index(self.tls.client_auth_type):
                lost.append(f"client certificate verification ({self.tls.client_auth_type} -> {new.tls.client_auth_type})")
        if self.users and not new.users:
            lost.append("basic auth")
        return " and ".join(lost) or None


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {shown(value)}")
    return value


def _choice(choices: Iterable[str]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = _text(value)
        if text not in choices:
            raise ValueError(f"{shown(text)} is not one of {', '.join(choices)}")
        return text

    return parse


def _client_auth_type(value: Any) -> str:
    if value in UNVERIFIED_CLIENT_AUTH:
        raise ValueError(f"{value} (a client certificate that is not verified) is not supported by this exporter; use VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file")
    return _choice(CLIENT_AUTH_TYPES)(value)


def _cipher_suites(value: Any) -> tuple[str, ...]:
    if not value:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"expected a list of cipher suite names, got {shown(value)}")
    known = _choice(CIPHER_SUITES)
    for number, name in enumerate(value):
        try:
            known(name)
        except ValueError as error:
            raise PartError(f"[{number}]", str(error)) from None
    return tuple(value)


def _mapping(value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping, got {type(value).__name__}")
    return value


def _headers(value: Any) -> tuple[tuple[str, str], ...]:
    out = []
    for name, given in _mapping(value).items():
        part = f".{cut(str(name))}"
        if name not in HEADERS:
            raise PartError(part, f"not a header that can be set (allowed: {', '.join(HEADERS)})")
        if given is None or given == "":
            continue  # blank: unset, as in the toolkit
        try:
            text = _text(given)
        except ValueError as error:
            raise PartError(part, str(error)) from None
        if any(character in text for character in "\r\n\0"):
            raise PartError(part, "the value contains a line break or NUL")
        allowed = HEADERS[name]
        if allowed is not None and text.lower() not in allowed:
            raise PartError(part, f"{shown(text)} is not one of {', '.join(allowed)}")
        out.append((name, text))
    return tuple(out)


def _users(value: Any) -> dict[str, bytes]:
    users = {}
    for user, hashed in _mapping(value).items():
        part = f".{cut(str(user))}"
        if not isinstance(user, str) or not user or ":" in user:
            raise PartError(part, "a user name must be a non-empty string without ':'")
        if not isinstance(hashed, str) or not _BCRYPT_HASH.fullmatch(hashed):
            raise PartError(part, "expected a bcrypt hash such as $2y$10$... (htpasswd -nBC 10 user | cut -d: -f2 makes one), not a plain password")
        users[user] = hashed.encode()
    return users


@dataclass(frozen=True)
class TlsSection:
    """``tls_server_config:`` as written; a key left out is None. TLS is on where any key is given."""

    REFUSED: ClassVar[dict[str, str]] = {
        "cert": "inline certificates are not supported here; put it in a file and use cert_file",
        "key": "inline keys are not supported here; put it in a file and use key_file",
        "client_ca": "inline client CAs are not supported here; put them in a file and use client_ca_file",
        "client_allowed_sans": "not supported by this exporter; issue client certificates from a CA of their own and set client_ca_file",
        "curve_preferences": "not supported by this exporter (Python's ssl module takes a single curve); leave it out to use OpenSSL's defaults",
    }
    cert_file: str | None = setting(None, _text, "the server's certificate (PEM), relative to this file's folder")
    key_file: str | None = setting(None, _text, "its private key (PEM), relative to this file's folder")
    client_auth_type: str | None = setting(None, _client_auth_type, "NoClientCert (default), VerifyClientCertIfGiven or RequireAndVerifyClientCert")
    client_ca_file: str | None = setting(None, _text, "the CA that signs the client certificates, relative to this file's folder")
    min_version: str | None = setting(None, _choice(TLS_VERSIONS), "the oldest TLS version served (default TLS12)")
    max_version: str | None = setting(None, _choice(TLS_VERSIONS), "the newest TLS version served (default TLS13)")
    cipher_suites: tuple[str, ...] | None = setting(None, _cipher_suites, "the TLS 1.2 cipher suites, by Go's names (default: OpenSSL's)")
    prefer_server_cipher_suites: bool | None = setting(None, boolean, "the server's order of cipher suites wins (default true)")

    def check(self) -> None:
        if all(getattr(self, spec.name) is None for spec in fields(self)):
            return
        for name in ("cert_file", "key_file"):
            if getattr(self, name) is None:
                raise SettingError(name, "missing (tls_server_config needs both cert_file and key_file)")
        auth = self.client_auth_type or "NoClientCert"
        if self.client_ca_file is not None and auth == "NoClientCert":
            raise SettingError("client_ca_file", "set, but client_auth_type is NoClientCert: set client_auth_type to RequireAndVerifyClientCert (or VerifyClientCertIfGiven)")
        if self.client_ca_file is None and auth != "NoClientCert":
            raise SettingError("client_auth_type", f"{auth} needs client_ca_file, the CA that signs the client certificates")
        low, high = self.min_version or "TLS12", self.max_version or "TLS13"
        order = list(TLS_VERSIONS)
        if order.index(low) > order.index(high):
            raise SettingError("min_version", f"{low} is above max_version {high}")

    def server_config(self, base: Path) -> TlsServerConfig | None:
        """The TLS to serve (None: none), its files relative to ``base``."""
        if self.cert_file is None or self.key_file is None:
            return None
        return TlsServerConfig(
            base / self.cert_file,
            base / self.key_file,
            self.client_auth_type or "NoClientCert",
            base / self.client_ca_file if self.client_ca_file is not None else None,
            self.min_version or "TLS12",
            self.max_version or "TLS13",
            self.cipher_suites or (),
            self.prefer_server_cipher_suites is not False,
        )


@dataclass(frozen=True)
class HttpSection:
    """``http_server_config:``."""

    # HTTP/2 is never served here (Prometheus scrapes over HTTP/1.1 by default); http2 is accepted for compatibility.
    http2: bool = setting(True, boolean, "accepted for compatibility; HTTP/2 is never served here")
    headers: tuple[tuple[str, str], ...] = setting((), _headers, f"response headers to set ({', '.join(HEADERS)}); a blank value sets none")


@dataclass(frozen=True)
class WebConfigFile:
    """The ``--web.config.file`` as written (the exporter-toolkit format)."""

    REFUSED: ClassVar[dict[str, str]] = {"rate_limit": "not supported by this exporter; scrapes are served from a cached snapshot and cost almost nothing"}
    tls_server_config: TlsSection = section(TlsSection, "TLS (none unless a key is given)")
    http_server_config: HttpSection = section(HttpSection, "HTTP response headers")
    basic_auth_users: dict[str, bytes] = setting({}, _users, "user name -> bcrypt hash of the password")


def parse_web_config(data: Any, path: str, base: Path) -> WebConfig:
    """Validate decoded YAML; ``base`` is the folder that relative file names are relative to."""
    where = f"web config file {path}"
    try:
        written = load_section(WebConfigFile, data, "")
    except ConfigError as error:
        raise WebConfigError(f"{where}: {error}") from None
    tls = written.tls_server_config.server_config(base)
    users = written.basic_auth_users
    context = None
    if tls is not None:
        for name in ("cert_file", "key_file", "client_ca_file"):
            file = getattr(tls, name)
            problem = _unusable(file) if file is not None else None
            if problem is not None:
                raise WebConfigError(f"{where}: 'tls_server_config.{name}': cannot read {file}: {problem}")
        try:
            context = tls.context()
        except OSError as error:  # ssl.SSLError is an OSError
            raise WebConfigError(f"{where}: 'tls_server_config': cannot use the certificate, key or client CA ({tls.cert_file}, {tls.key_file}, {tls.client_ca_file}): {error}") from None
    return WebConfig(path, tls, written.http_server_config.headers, users, context, BasicAuth(users) if users else None)


def _unusable(file: Path) -> str | None:
    """Why a certificate, key or CA file cannot be handed to ``ssl`` (which would wait on a FIFO
    and read a file of any size), or None."""
    try:
        info = file.stat()
    except OSError:
        return "no such file"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file (a FIFO, device or directory is refused)"
    if info.st_size > _MAX_FILE_BYTES:
        return f"{info.st_size} bytes is over the {_MAX_FILE_BYTES} byte limit"
    return None


def load_web_config(path: str | Path) -> WebConfig:
    """Read and validate a web config file; every error names the file."""
    path = Path(path)
    data = read_yaml(path, "web config file", WebConfigError)
    return parse_web_config(data, str(path), path.parent)
