"""Hostile input: the config, trace, web config and app-metrics parsers take anything and answer only
with their own documented error (ConfigError, TraceError, WebConfigError, ScrapeError): no other
exception, no crash, no hang (hypothesis' per-example deadline). Example counts are bounded so the
whole file runs in seconds; raise them with FUZZ_EXAMPLES=N for a longer hunt.
"""

from __future__ import annotations

import copy
import json
import os
import string
from pathlib import Path

import pytest
from fakes.apps import answer_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpueff.apps.scrape import ScrapeError, fetch, read_counter
from gpueff.config.engine import ConfigError
from gpueff.httpserver.tlsconfig import WebConfigError, load_web_config, parse_web_config
from gpueff.settings import config_reference, load_config, parse_config
from gpueff.trace import TraceError, load_trace, parse_trace

pytestmark = pytest.mark.slow  # property-based fuzzing

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
fuzz = settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture], derandomize=True)

CONFIG_KEYS = sorted({part for key, *_ in config_reference() for part in key.split(".")} | {"apps", "kubernetes", "name", "url", "metric", "gpus"})
TRACE_KEYS = ["format", "gpu", "workload", "interval_s", "samples", "t", "util_gpu", "power_mw", "throttle", "SM_UTIL", "name", "sm_count"]
WEB_KEYS = ["tls_server_config", "http_server_config", "basic_auth_users", "cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version", "cipher_suites", "headers", "http2", "X-Frame-Options", "RequireAndVerifyClientCert", "TLS13"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["1s", "100ms", "0s", "1e400s", "9" * 400 + "y", "-1", "nan", "inf", "$2y$10$" + "a" * 53, "TLS12", "NoClientCert", "server.crt", "http://127.0.0.1:1/metrics", ""]),
)


def documents(keys: list[str]) -> st.SearchStrategy:
    """YAML/JSON-shaped values whose mapping keys are mostly the schema's own, to get past the top level."""
    key = st.one_of(st.sampled_from(keys), st.text(max_size=8), st.integers(-3, 3))
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(key, inner, max_size=5)), max_leaves=25)


@fuzz
@given(documents(CONFIG_KEYS))
def test_parse_config_raises_only_config_error(data):
    try:
        parse_config(data)
    except ConfigError:
        pass


@fuzz
@given(st.dictionaries(st.sampled_from(CONFIG_KEYS), documents(CONFIG_KEYS), max_size=4))
def test_parse_config_on_top_level_keys_raises_only_config_error(data):
    try:
        parse_config(data)
    except ConfigError:
        pass


@fuzz
@given(documents(WEB_KEYS))
def test_parse_web_config_raises_only_web_config_error(data):
    try:
        parse_web_config(data, "fuzz.yml", Path("/nonexistent"))
    except WebConfigError:
        pass


@fuzz
@given(st.fixed_dictionaries({}, optional={"tls_server_config": documents(WEB_KEYS), "http_server_config": documents(WEB_KEYS), "basic_auth_users": documents(WEB_KEYS)}))
def test_parse_web_config_sections_raise_only_web_config_error(data):
    try:
        parse_web_config(data, "fuzz.yml", Path("/nonexistent"))
    except WebConfigError:
        pass


@pytest.fixture(scope="module")
def trace_data(trace_paths):
    return json.loads(trace_paths["matmul_8192"].read_text())


def _mutate(data, draw, depth=0):
    """One random change somewhere in a valid trace: replace a value, drop a key, or add one."""
    if isinstance(data, list) and data and depth < 4:
        index = draw(st.integers(0, len(data) - 1))
        if draw(st.booleans()):
            data[index] = _mutate(data[index], draw, depth + 1)
        else:
            data[index] = draw(documents(TRACE_KEYS))
        return data
    if isinstance(data, dict) and data and depth < 4:
        key = draw(st.sampled_from(sorted(data, key=repr)))  # keys of mixed types after an earlier mutation
        action = draw(st.sampled_from(["descend", "replace", "drop", "add"]))
        if action == "descend":
            data[key] = _mutate(data[key], draw, depth + 1)
        elif action == "replace":
            data[key] = draw(scalars)
        elif action == "drop":
            del data[key]
        else:
            data[draw(st.sampled_from(TRACE_KEYS))] = draw(documents(TRACE_KEYS))
        return data
    return draw(documents(TRACE_KEYS))


@fuzz
@given(st.data())
def test_parse_trace_of_a_mutated_trace_raises_only_trace_error(trace_data, data):
    mutated = copy.deepcopy(trace_data)
    mutated["samples"] = mutated["samples"][:5]
    for _ in range(data.draw(st.integers(1, 3))):
        mutated = _mutate(mutated, data.draw)
    try:
        trace = parse_trace(mutated, "fuzz.json")
    except TraceError:
        return
    assert trace.duration > 0  # what is accepted can be replayed


@fuzz
@given(documents(TRACE_KEYS))
def test_parse_trace_of_anything_raises_only_trace_error(data):
    try:
        parse_trace(data, "fuzz.json")
    except TraceError:
        pass


file_bytes = st.one_of(
    st.binary(max_size=300),
    st.text(alphabet=string.printable + "\u00e9\u2028\ufeff", max_size=300).map(str.encode),
    st.sampled_from([b"[" * 700, b"{a: " * 700, b"- " * 700, b"&a [*a, *a]", b"!!python/object:os.system {}", b"a: &x 1\nb: *y\n", b"\x00\x01", b"\xef\xbb\xbf{}", b"9" * 5000]),
)


@fuzz
@given(file_bytes)
def test_loaders_of_arbitrary_files_raise_only_their_own_errors(tmp_path, content):
    path = tmp_path / "fuzzed"
    path.write_bytes(content)
    for load, error in ((load_config, ConfigError), (load_trace, TraceError), (load_web_config, WebConfigError)):
        try:
            load(path)
        except error:
            pass


exposition_lines = st.one_of(
    st.text(max_size=60),
    st.sampled_from([
        "# TYPE jobs_total counter",
        "# TYPE jobs counter",
        "# HELP jobs_total Jobs.",
        "# TYPE jobs_total histogram",
        "jobs_total 3",
        'jobs_total{model="a"} 1e3',
        'jobs_total{model="a\\"b"} 2',
        "jobs_total NaN",
        "jobs_total -1",
        "jobs_total +Inf",
        'jobs_total{model="a",} 4',
        "jobs_total{model=} 4",
        'jobs_total{model="a"} 1 1700000000000',
        "vllm:generation_tokens_total 12",
        "jobs_total 1e999",
        "# EOF",
    ]),
)


@fuzz
@given(st.lists(exposition_lines, max_size=12).map("\n".join), st.sampled_from(["jobs_total", "jobs", "vllm:generation_tokens_total"]), st.dictionaries(st.sampled_from(["model", "x"]), st.text(max_size=3), max_size=2), st.integers(1, 64))
def test_app_metrics_parser_raises_only_scrape_error(text, name, labels, chunk):
    try:
        series = read_counter(answer_of(text, name, chunk=chunk), name, labels)
    except ScrapeError:
        return
    assert series and all(value >= 0 for value in series.values())


response_parts = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([
        b"HTTP/1.1 200 OK\r\n", b"HTTP/1.0 404 Nope\r\n", b"HTTP/2 200\r\n", b"HTTP/1.1 20 OK\r\n", b"\r\n", b"\n",
        b"Content-Length: 10\r\n", b"Content-Length: -1\r\n", b"Content-Length: 99999999999999999999\r\n", b"Content-Length: 1, 2\r\n",
        b"Transfer-Encoding: chunked\r\n", b"Transfer-Encoding: gzip, chunked\r\n", b"Content-Encoding: gzip\r\n", b"X: " + b"y" * 300 + b"\r\n",
        b"5\r\nx_tot\r\n", b"0\r\n\r\n", b"fffffffffffffffff\r\n", b"-1\r\n", b"a;ext\r\n", b"x_total 1\n", b"\xff\xfe",
    ]),
)


@fuzz
@given(st.lists(response_parts, max_size=10).map(b"".join))
def test_the_app_fetch_answers_any_bytes_with_a_body_or_a_scrape_error(http_peer, response):
    """Whatever a peer sends before closing, the fetch returns text or raises ScrapeError, within its deadline."""
    url, answers = http_peer
    answers[:] = [response]
    try:
        answer = fetch(url, timeout=1.0, max_bytes=1000, names=["x_total"])
    except ScrapeError:
        return
    assert sum(len(line) + 1 for line in answer.wanted) <= 1000


@pytest.fixture(scope="module")
def http_peer():
    from fakes.apps import raw_serving

    answers: list[bytes] = [b""]
    with raw_serving(lambda connection: connection.sendall(answers[0])) as url:
        yield url, answers


def test_deeply_nested_yaml_and_json_are_clear_errors(tmp_path):
    path = tmp_path / "deep"
    for content in ("[" * 100000, "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 1000)), "9" * 5000):
        path.write_text(content)
        for load, error in ((load_config, ConfigError), (load_trace, TraceError), (load_web_config, WebConfigError)):
            with pytest.raises(error):
                load(path)
