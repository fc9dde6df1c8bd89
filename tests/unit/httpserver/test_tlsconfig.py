"""The --web.config.file loader: what it accepts, what it rejects and how it says so, and basic auth."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import bcrypt
import pytest
import yaml
from tls_certs import make_pki

from gpueff.httpserver.tlsconfig import CIPHER_SUITES, BasicAuth, WebConfigError, load_web_config, parse_web_config


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def fast_hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def write(folder: Path, data) -> Path:
    path = folder / "web.yml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_full_config_loads_with_paths_relative_to_the_file(pki):
    path = write(pki.folder, {
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key", "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "client-ca.crt", "min_version": "TLS13", "cipher_suites": ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"], "prefer_server_cipher_suites": False},
        "http_server_config": {"http2": True, "headers": {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "deny", "Content-Security-Policy": ""}},
        "basic_auth_users": {"prometheus": fast_hash("secret")},
    })
    config = load_web_config(path)
    assert config.tls.cert_file == pki.server.cert and config.tls.client_ca_file == pki.client_ca.cert
    assert config.ssl_context is not None and config.auth is not None
    assert config.headers == (("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "deny"))  # blank means unset
    assert config.describe() == "TLS TLS13..TLS13, client certificates: RequireAndVerifyClientCert, basic auth for 1 user(s)"


def test_empty_file_means_no_tls_and_no_auth(tmp_path):
    config = load_web_config(write(tmp_path, ""))
    assert config.tls is None and config.ssl_context is None and config.authorized(None)


def test_basic_auth_without_tls_is_allowed(tmp_path):
    config = load_web_config(write(tmp_path, {"basic_auth_users": {"alice": fast_hash("pw")}}))
    assert config.tls is None and not config.authorized(None) and config.authorized(basic("alice", "pw"))


TLS = {"cert_file": "server.crt", "key_file": "server.key"}


@pytest.mark.parametrize(("data", "expected"), [
    ({"tls_config": {}}, "'tls_config': unknown key (did you mean 'tls_server_config'? known keys here: basic_auth_users, http_server_config, tls_server_config)"),
    ({"tls_server_config": {"min_version": "TLS12"}}, "'tls_server_config.cert_file': missing"),  # any key given turns TLS on
    ({"tls_server_config": {"prefer_server_cipher_suites": True}}, "'tls_server_config.cert_file': missing"),
    ({"tls_server_config": {**TLS, "certfile": "x"}}, "'tls_server_config.certfile': unknown key"),
    ({"tls_server_config": {**TLS, "client_allowed_sans": ["a"]}}, "'tls_server_config.client_allowed_sans': not supported"),
    ({"tls_server_config": {**TLS, "curve_preferences": ["X25519"]}}, "'tls_server_config.curve_preferences': not supported"),
    ({"tls_server_config": {**TLS, "cert": "PEM"}}, "'tls_server_config.cert': inline certificates are not supported"),
    ({"rate_limit": {"interval": "1s", "burst": 2}}, "'rate_limit': not supported"),
    ({"tls_server_config": {"cert_file": "server.crt"}}, "'tls_server_config.key_file': missing"),
    ({"tls_server_config": {**TLS, "client_auth_type": "Always"}}, "'tls_server_config.client_auth_type': 'Always' is not one of NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"),
    ({"tls_server_config": {**TLS, "client_auth_type": "RequireAnyClientCert", "client_ca_file": "client-ca.crt"}}, "RequireAnyClientCert (a client certificate that is not verified) is not supported"),
    ({"tls_server_config": {**TLS, "client_ca_file": "client-ca.crt"}}, "'tls_server_config.client_ca_file': set, but client_auth_type is NoClientCert"),
    ({"tls_server_config": {**TLS, "client_auth_type": "RequireAndVerifyClientCert"}}, "RequireAndVerifyClientCert needs client_ca_file"),
    ({"tls_server_config": {**TLS, "min_version": "TLS1.2"}}, "'tls_server_config.min_version': 'TLS1.2' is not one of TLS10, TLS11, TLS12, TLS13"),
    ({"tls_server_config": {**TLS, "min_version": "TLS13", "max_version": "TLS12"}}, "TLS13 is above max_version TLS12"),
    ({"tls_server_config": {**TLS, "cipher_suites": ["TLS_INVENTED"]}}, "'tls_server_config.cipher_suites[0]': 'TLS_INVENTED' is not one of"),
    ({"tls_server_config": {**TLS, "cipher_suites": "TLS_RSA_WITH_AES_128_CBC_SHA"}}, "expected a list of cipher suite names"),
    ({"tls_server_config": {**TLS, "prefer_server_cipher_suites": "yes please"}}, "expected true or false"),
    ({"tls_server_config": {**TLS, "cert_file": "missing.crt"}}, "missing.crt: no such file"),
    ({"tls_server_config": {"cert_file": "server.crt", "key_file": "client.key"}}, "cannot use the certificate, key or client CA"),
    ({"tls_server_config": "on"}, "'tls_server_config': expected a mapping, got str"),
    ({"http_server_config": {"headers": {"Server": "nginx"}}}, "'http_server_config.headers.Server': not a header that can be set"),
    ({"http_server_config": {"headers": {"X-Frame-Options": "allow"}}}, "'allow' is not one of deny, sameorigin"),
    ({"http_server_config": {"headers": {"Content-Security-Policy": "a\r\nSet-Cookie: x"}}}, "contains a line break"),
    ({"http_server_config": {"http2": "no"}}, "'http_server_config.http2': expected true or false"),
    ({"basic_auth_users": {"alice": "plain-password"}}, "'basic_auth_users.alice': expected a bcrypt hash"),
    ({"basic_auth_users": {"a:b": "$2y$10$" + "a" * 53}}, "without ':'"),
    ({"basic_auth_users": {"alice": "$2y$\u0661\u0660$" + "a" * 53}}, "'basic_auth_users.alice': expected a bcrypt hash"),  # Arabic-Indic digits matched \d
    ({"basic_auth_users": ["alice"]}, "'basic_auth_users': expected a mapping, got list"),
    (["tls_server_config"], "expected a mapping, got list"),
])
def test_bad_values_are_rejected_naming_file_and_key(pki, data, expected):
    path = write(pki.folder, data)
    with pytest.raises(WebConfigError) as error:
        load_web_config(path)
    message = str(error.value)
    assert message.startswith(f"web config file {path}: ") and expected in message


def test_every_problem_is_named_at_once_with_its_key(pki):
    path = write(pki.folder, "tls_server_config: {cert_file: server.crt, key_file: server.key, min_version: TLS1.2, cipher_suites: [TLS_INVENTED]}\nhttp_server_config: {http2: maybe}\nrate_limit: {}\n")
    with pytest.raises(WebConfigError) as error:
        load_web_config(path)
    assert str(error.value) == (
        f"web config file {path}: 4 problems: 'tls_server_config.min_version': 'TLS1.2' is not one of TLS10, TLS11, TLS12, TLS13; "
        "'tls_server_config.cipher_suites[0]': 'TLS_INVENTED' is not one of " + ", ".join(CIPHER_SUITES) + "; "
        "'http_server_config.http2': expected true or false, got 'maybe'; "
        "'rate_limit': not supported by this exporter; scrapes are served from a cached snapshot and cost almost nothing"
    )


def test_file_level_errors(tmp_path):
    with pytest.raises(WebConfigError, match="cannot read it: No such file"):
        load_web_config(tmp_path / "nope.yml")
    with pytest.raises(WebConfigError, match=r"not valid YAML at line \d+, column \d+"):
        load_web_config(write(tmp_path, "basic_auth_users: {alice: [\n"))
    (tmp_path / "bin.yml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(WebConfigError, match="not UTF-8"):
        load_web_config(tmp_path / "bin.yml")


def test_basic_auth_checks():
    auth = BasicAuth({"alice": fast_hash("right").encode(), "bob": fast_hash("other").encode()})
    assert auth.check(basic("alice", "right"))
    assert auth.check(basic("alice", "right"))  # from the cache
    assert not auth.check(basic("alice", "wrong"))
    assert not auth.check(basic("bob", "right"))  # another user's password
    assert not auth.check(basic("mallory", "right"))
    for header in (None, "", "Basic", "Basic !!!", "Bearer abc", "Basic " + base64.b64encode(b"no-colon").decode(), "Basic " + base64.b64encode(b"\xff:x").decode()):
        assert not auth.check(header)
    long_password = "p" * 100  # bcrypt reads 72 bytes; a longer password must not crash the check
    assert BasicAuth({"carol": bcrypt.hashpw(long_password[:72].encode(), bcrypt.gensalt(4))}).check(basic("carol", long_password))


def test_hash_variants_2a_2b_2y_are_accepted():
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    for prefix in ("$2a$", "$2b$", "$2y$"):
        config = parse_web_config({"basic_auth_users": {"u": prefix + hashed[4:]}}, "inline", Path("."))
        assert config.authorized(basic("u", "pw")), prefix


def test_successful_checks_are_cached_and_unknown_users_cost_a_full_check():
    auth = BasicAuth({"alice": bcrypt.hashpw(b"right", bcrypt.gensalt(10))})

    def timed(header: str) -> tuple[bool, float]:
        """The check's result and the CPU time this thread spent on it (bcrypt is all CPU; a busy
        machine stretches wall time, not this)."""
        started = time.thread_time()
        result = auth.check(header)
        return result, time.thread_time() - started

    ok_first, first = timed(basic("alice", "right"))
    ok_again, again = timed(basic("alice", "right"))
    unknown, unknown_time = timed(basic("mallory", "right"))
    print(f"bcrypt cost 10: first check {first * 1000:.1f} ms CPU, cached {again * 1000:.3f} ms, unknown user {unknown_time * 1000:.1f} ms")
    assert ok_first and ok_again and not unknown
    assert again < first / 10
    assert unknown_time > first / 4  # the decoy hash has the same cost as the real ones


def test_weakened_by_names_what_a_new_config_would_turn_off(pki):
    tls = {"cert_file": "server.crt", "key_file": "server.key"}
    required = {**tls, "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "client-ca.crt"}
    users = {"alice": fast_hash("pw")}

    def config(data) -> object:
        return parse_web_config(data, "web.yml", pki.folder)

    strong = config({"tls_server_config": required, "basic_auth_users": users})
    assert strong.weakened_by(config({"tls_server_config": required, "basic_auth_users": {"bob": fast_hash("pw")}})) is None
    assert strong.weakened_by(config({})) == "TLS and basic auth"
    assert strong.weakened_by(config({"tls_server_config": tls, "basic_auth_users": users})) == "client certificate verification (RequireAndVerifyClientCert -> NoClientCert)"
    assert config({}).weakened_by(strong) is None  # turning things on is always taken
    assert config({"basic_auth_users": users}).weakened_by(config({"tls_server_config": tls})) == "basic auth"


def test_every_user_known_or_not_costs_one_bcrypt_check_at_each_configured_cost(monkeypatch):
    """With users of mixed costs, a cheap user's wrong password, a costly one's and an unknown user's
    do the same bcrypt work (compared as the checks made, not as time): before, the cheap user's
    check alone ran, and only a time floor hid it while the costliest check fitted under it."""
    cheap, costly = bcrypt.hashpw(b"a", bcrypt.gensalt(4)), bcrypt.hashpw(b"b", bcrypt.gensalt(6))
    auth = BasicAuth({"a": cheap, "b": cheap, "c": costly})
    checked: list[bytes] = []
    checkpw = bcrypt.checkpw
    monkeypatch.setattr(bcrypt, "checkpw", lambda password, hashed: checked.append(hashed[:7]) or checkpw(password, hashed))
    made = {}
    for user, password in (("a", b"wrong"), ("c", b"wrong"), ("mallory", b"a"), ("a", b"a"), ("c", b"b")):
        checked.clear()
        made[user, password] = (auth.verify(user, password), list(checked))
    assert made == {
        ("a", b"wrong"): (False, [b"$2b$04$", b"$2b$06$"]),
        ("c", b"wrong"): (False, [b"$2b$04$", b"$2b$06$"]),
        ("mallory", b"a"): (False, [b"$2b$04$", b"$2b$06$"]),
        ("a", b"a"): (True, [b"$2b$04$", b"$2b$06$"]),
        ("c", b"b"): (True, [b"$2b$04$", b"$2b$06$"]),
    }
    assert auth.cached("a", b"a") and not auth.cached("mallory", b"a")
