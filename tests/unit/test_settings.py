"""The YAML config: defaults, durations, and errors that name the file, the dotted key and the reason."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from repo import ROOT
from waiting import PATIENCE

from gpueff.apps.settings import AppsSettings
from gpueff.backends.base import CollectSettings
from gpueff.backends.dcgm.backend import DcgmBackend
from gpueff.backends.dcgm.settings import DcgmConfig
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.commands.flags import dcgm_settings
from gpueff.config.engine import RESTART, ConfigError, restart_only_changes
from gpueff.config.values import parse_duration
from gpueff.peaks import PeakOverride
from gpueff.pipeline.derive import DeriveSettings
from gpueff.pipeline.tracker import TrackerSettings
from gpueff.settings import Config, config_reference, load_config, parse_config
from gpueff.taxonomy import MismatchThresholds


def write(tmp_path: Path, text: str | bytes, name: str = "config.yml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def load_error(tmp_path: Path, text: str | bytes) -> tuple[Path, str]:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return path, str(caught.value)


def test_the_backends_default_to_the_30_second_slow_cadence():
    assert CollectSettings().slow_interval == NvmlBackend().slow_interval == DcgmBackend().slow_interval == 30.0


def test_no_file_gives_the_documented_defaults():
    config = load_config(None)
    assert config == Config()
    assert config.collect_interval == 1.0
    assert config.slow_collect_interval == 30.0  # dcgm-exporter's default too (docs/health.md)
    assert config.stale_after is None
    assert config.price_per_gpu_hour is None
    assert config.currency == "USD"
    assert config.peaks == {}
    assert config.mismatch == MismatchThresholds(high_utilization=0.8, low_sm_active=0.3, low_work_activity=0.1, low_efficiency_utilization=0.5, low_efficiency_ratio=0.3)
    assert config.bottleneck.idle_utilization == 0.05
    assert config.bottleneck.host_utilization == 0.8


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_file_gives_the_defaults(tmp_path, text):
    assert load_config(write(tmp_path, text)) == Config()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("1s", 1.0), ("1m30s", 90.0), ("2h", 7200.0), ("1d", 86400.0), ("1h1m1s", 3661.0), ("1s500ms", 1.5), ("0s", 0.0)],
)
def test_prometheus_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "s", "1 s", "1x", "-1s", "1s ", "ms", "1.s", "abc", 1, 1.5, None, True, ["1s"]])
def test_bad_durations_are_refused_with_an_example(text):
    with pytest.raises(ValueError, match="500ms, 1s or 1m30s"):
        parse_duration(text)


def test_every_setting_is_read_from_the_file(tmp_path):
    path = write(
        tmp_path,
        """
collect_interval: 500ms
slow_collect_interval: 1m
stale_after: 10s
price_per_gpu_hour: 2.5
currency: EUR
mismatch:
  high_utilization: 0.9
  low_sm_active: 0.2
bottleneck:
  idle_utilization: 0.1
  memory_dram: 0.7
  window: 3s
  hold_polls: 3
peaks:
  NVIDIA Future GPU:
    tensor_tflops: 2000
    dram_tbps: 8
""",
    )
    config = load_config(path)
    assert config.collect_interval == 0.5
    assert config.slow_collect_interval == 60.0
    assert config.effective_stale_after == 10.0
    assert config.price_per_gpu_hour == 2.5
    assert config.currency == "EUR"
    assert config.mismatch.high_utilization == 0.9 and config.mismatch.low_sm_active == 0.2
    assert config.mismatch.low_efficiency_ratio == 0.3  # untouched keys keep their default
    assert config.bottleneck.idle_utilization == 0.1 and config.bottleneck.memory_dram == 0.7
    assert config.bottleneck.window == 3.0 and config.bottleneck.hold_polls == 3
    assert config.bottleneck.host_utilization == 0.8
    assert config.peaks == {"NVIDIA Future GPU": PeakOverride(tensor_tflops=2000.0, dram_tbps=8.0)}


@pytest.mark.parametrize(("interval", "stale"), [("1s", 5.0), ("500ms", 3.5), ("10s", 32.0), ("100ms", 2.3)])
def test_stale_after_defaults_to_three_intervals_plus_two_seconds(tmp_path, interval, stale):
    config = load_config(write(tmp_path, f"collect_interval: {interval}\n"))
    assert config.stale_after is None
    assert config.effective_stale_after == pytest.approx(stale)


def test_explicit_stale_after_wins(tmp_path):
    config = load_config(write(tmp_path, "collect_interval: 10s\nstale_after: 1s\n"))
    assert config.effective_stale_after == 1.0


def test_each_feature_is_handed_its_own_part_of_the_file():
    config = parse_config({
        "collect_interval": "2s", "price_per_gpu_hour": 3.5, "peaks": {"NVIDIA H200": {"dram_tbps": 4.0}}, "mismatch": {"low_efficiency_ratio": 0.2},
        "bottleneck": {"host_utilization": 0.4}, "apps": [{"name": "llm", "url": "http://127.0.0.1:1/metrics", "counter": "x_total", "unit": "tokens"}],
    })  # fmt: skip
    derive = config.derive_settings
    assert (derive.peaks, derive.mismatch, derive.bottleneck) == (config.peaks, config.mismatch, config.bottleneck)
    assert derive.mismatch.low_efficiency_ratio == 0.2 and derive.bottleneck.host_utilization == 0.4
    assert config.tracker_settings == TrackerSettings(stale_after=8.0, price_per_gpu_hour=3.5, derive=derive)
    assert config.apps_settings == AppsSettings(config.apps, config.peaks, 3.5)
    assert Config().derive_settings == DeriveSettings() and Config().apps_settings == AppsSettings()


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("colect_interval: 1s\n", "'colect_interval'", "unknown key"),
        ("mismatch:\n  high_util: 0.5\n", "'mismatch.high_util'", "unknown key"),
        ("bottleneck:\n  idle: 0.5\n", "'bottleneck.idle'", "unknown key"),
        ("peaks:\n  NVIDIA H200:\n    tflops: 1\n", "'peaks.NVIDIA H200.tflops'", "unknown key"),
        ("mismatch:\n  high_utilization: 1.5\n", "'mismatch.high_utilization'", "between 0 and 1"),
        ("bottleneck:\n  compute_pipe: -0.1\n", "'bottleneck.compute_pipe'", "between 0 and 1"),
        ("bottleneck:\n  hold_polls: 0\n", "'bottleneck.hold_polls'", "above 0"),
        ("collect_interval: 50ms\n", "'collect_interval'", "at least 100ms"),
        ("collect_interval: 99ms\n", "'collect_interval'", "at least 100ms"),
        ("slow_collect_interval: 500ms\n", "'slow_collect_interval'", "at least 1s"),
        ("stale_after: 10ms\n", "'stale_after'", "at least 100ms"),
        ("collect_interval: 1000000y\n", "'collect_interval'", "at most 1h, got '1000000y'"),
        ("collect_interval: 3601s\n", "'collect_interval'", "at most 1h"),
        ("collect_interval: 99999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999999s\n", "'collect_interval'", "at most 1h"),
        ("slow_collect_interval: 2h\n", "'slow_collect_interval'", "at most 1h"),
        ("stale_after: 5h\n", "'stale_after'", "at most 4h"),
        ("kubernetes:\n  refresh_interval: 1y\n", "'kubernetes.refresh_interval'", "at most 1h"),
        ("kubernetes:\n  timeout: 2h\n", "'kubernetes.timeout'", "at most 1h"),
        ("apps:\n  - {name: a, url: 'http://h/m', counter: c, unit: u, scrape_interval: 1000000y}\n", "'apps[0].scrape_interval'", "at most 1h"),
        ("apps:\n  - {name: a, url: 'http://h/m', counter: c, unit: u, scrape_timeout: 2h}\n", "'apps[0].scrape_timeout'", "at most 1h"),
        ("collect_interval: 1\n", "'collect_interval'", "duration"),
        ("collect_interval: soon\n", "'collect_interval'", "duration"),
        ("mismatch:\n  high_utilization: high\n", "'mismatch.high_utilization'", "expected a number"),
        ("mismatch:\n  high_utilization: true\n", "'mismatch.high_utilization'", "expected a number"),
        ("mismatch:\n  high_utilization: .nan\n", "'mismatch.high_utilization'", "expected a number"),
        ("price_per_gpu_hour: -1\n", "'price_per_gpu_hour'", "0 or more"),
        ("price_per_gpu_hour: ten\n", "'price_per_gpu_hour'", "expected a number"),
        ("currency: 5\n", "'currency'", "non-empty string"),
        ("currency: ''\n", "'currency'", "non-empty string"),
        ("mismatch: 3\n", "'mismatch'", "expected a mapping"),
        ("bottleneck: [0.1]\n", "'bottleneck'", "expected a mapping"),
        ("peaks: [1, 2]\n", "'peaks'", "expected a mapping"),
        ("peaks:\n  NVIDIA H200: 5\n", "'peaks.NVIDIA H200'", "expected a mapping"),
        ("peaks:\n  NVIDIA H200:\n    tensor_tflops: 0\n", "'peaks.NVIDIA H200.tensor_tflops'", "above 0"),
        ("peaks:\n  NVIDIA H200:\n    dram_tbps: fast\n", "'peaks.NVIDIA H200.dram_tbps'", "expected a number"),
    ],
)
def test_errors_name_the_file_the_dotted_key_and_the_reason(tmp_path, text, key, reason):
    path, message = load_error(tmp_path, text)
    assert message.startswith(f"config file {path}: ")
    assert key in message
    assert reason in message


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://:8000/metrics", "names no host"),
        ("https://:443/", "names no host"),
        ("http://user@:8000/metrics", "names no host"),
        ("http://127.0.0.1:99999/metrics", "out of range"),
        ("http://127.0.0.1:http/metrics", "'http://127.0.0.1:http/metrics'"),
        ("http://127.0.0.1:0/metrics", "port 0"),
    ],
)
def test_an_app_url_without_a_usable_host_and_port_is_refused(tmp_path, url, reason):
    """Such a URL used to load and then fail every scrape with a TypeError outside the scrape's error path."""
    text = f"apps:\n  - name: llm\n    url: '{url}'\n    counter: tokens_total\n    unit: tokens\n"
    path, message = load_error(tmp_path, text)
    assert message.startswith(f"config file {path}: 'apps[0].url': ")
    assert reason in message


def test_unknown_key_lists_the_known_keys(tmp_path):
    _, message = load_error(tmp_path, "mismatch:\n  high_util: 0.5\n")
    assert "high_utilization" in message and "low_sm_active" in message


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "just a string\n", "42\n"])
def test_a_top_level_that_is_not_a_mapping_is_refused(tmp_path, text):
    path, message = load_error(tmp_path, text)
    assert str(path) in message and "top level" in message and "expected a mapping" in message


def test_bad_yaml_names_the_line(tmp_path):
    path, message = load_error(tmp_path, "collect_interval: 1s\nmismatch:\n  high_utilization: [0.5\n  low_sm_active: 0.1\n")
    assert str(path) in message
    assert "not valid YAML" in message
    assert "line 4" in message


def test_bad_yaml_indentation_names_the_line(tmp_path):
    path, message = load_error(tmp_path, "collect_interval: 1s\ncurrency: EUR\n  bad: indent\n")
    assert str(path) in message and "line 3" in message


def test_a_missing_file_is_reported_with_its_path(tmp_path):
    path = tmp_path / "nope.yml"
    with pytest.raises(ConfigError, match=rf"config file {path}: cannot read it: No such file or directory"):
        load_config(path)


def test_a_directory_is_reported_with_its_path(tmp_path):
    with pytest.raises(ConfigError, match=rf"config file {tmp_path}: cannot read it"):
        load_config(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_reported_with_its_path(tmp_path):
    path = write(tmp_path, "collect_interval: 1s\n")
    path.chmod(0)
    with pytest.raises(ConfigError, match=rf"config file {path}: cannot read it: Permission denied"):
        load_config(path)


def test_a_file_that_is_not_utf8_is_reported_with_its_path(tmp_path):
    path, message = load_error(tmp_path, b"currency: \xff\xfe\n")
    assert message.startswith(f"config file {path}: ") and "UTF-8" in message


def test_peaks_override_several_models(tmp_path):
    config = load_config(write(tmp_path, "peaks:\n  NVIDIA H200:\n    dram_tbps: 5\n  NVIDIA L4:\n    tensor_tflops: 100\n    pcie_gbps: 16\n    nvlink_gbps: 0.5\n"))
    assert config.peaks["NVIDIA H200"] == PeakOverride(dram_tbps=5.0)
    assert config.peaks["NVIDIA L4"] == PeakOverride(tensor_tflops=100.0, pcie_gbps=16.0, nvlink_gbps=0.5)


def test_config_is_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().collect_interval = 5  # type: ignore[misc]


def test_reference_documents_every_key():
    keys = {key for key, *_ in config_reference()}
    assert {"collect_interval", "stale_after", "mismatch.high_utilization", "bottleneck.latency_work", "peaks", "currency"} <= keys
    assert all(doc for _, _, doc, _ in config_reference())


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**6), max_value=10**6) | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(["1s", "50ms", "1m30s", "x", "", "0.5", "USD"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["high_utilization", "compute_pipe", "tensor_tflops", "NVIDIA H200", "bogus"]), children, max_size=3),
    max_leaves=5,
)
known_keys = st.sampled_from([key for key, *_ in config_reference()] + ["mismatch", "bottleneck", "peaks", "bogus"])


@pytest.mark.slow
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(document=st.dictionaries(known_keys, yaml_values, max_size=4))
def test_any_config_document_is_a_config_or_a_config_error(tmp_path, document):
    """Nested keys written flat ("mismatch.busy") are split into sections; nothing but ConfigError escapes."""
    nested: dict = {}
    for key, value in document.items():
        section, _, leaf = key.partition(".")
        if leaf:
            if not isinstance(nested.get(section), dict):
                nested[section] = {}
            nested[section][leaf] = value
        else:
            nested[key] = value
    path = tmp_path / "fuzzed.yml"
    path.write_text(yaml.safe_dump(nested))
    try:
        config = load_config(path)
    except ConfigError as error:
        assert str(error).startswith(f"config file {path}: ")
        return
    assert config.collect_interval >= 0.1 and config.effective_stale_after > 0


# ---- hostile YAML: alias bombs, recursion, duplicate keys, huge values ---------------------------


def billion_laughs(levels: int = 10, fanout: int = 10) -> str:
    """The 373-byte shape of issue 14: each level an anchored list of ``fanout`` aliases of the last."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * fanout) + "]"]
    lines += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * fanout) + "]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [4, 7, 10])
def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path, levels):
    path, message = load_error(tmp_path, billion_laughs(levels))
    assert message.startswith(f"config file {path}: ") and "refused as an alias bomb" in message
    assert len(message) < 400


def test_a_few_aliases_as_real_configs_use_them_are_fine(tmp_path):
    text = "apps:\n  - &llm {name: a, url: 'http://h:1/m', counter: c_total, unit: tokens, scrape_interval: 10s}\n  - {<<: *llm, name: b, url: 'http://h:2/m'}\n"
    apps = load_config(write(tmp_path, text)).apps
    assert [(app.name, app.url, app.scrape_interval) for app in apps] == [("a", "http://h:1/m", 10.0), ("b", "http://h:2/m", 10.0)]


def test_a_recursive_alias_is_refused(tmp_path):
    _, message = load_error(tmp_path, "peaks: &p\n  NVIDIA H200: *p\n")
    assert "refers to a node that contains it" in message


@pytest.mark.parametrize(
    "text, key, line",
    [
        ("collect_interval: 1s\ncurrency: EUR\ncollect_interval: 2s\n", "'collect_interval'", 3),
        ("mismatch:\n  low_sm_active: 0.2\n  low_sm_active: 0.4\n", "'low_sm_active'", 3),
        ("apps:\n  - {name: a, url: 'http://h/m', counter: c, unit: u, name: b}\n", "'name'", 2),
    ],
)
def test_duplicate_keys_are_refused_with_the_key_and_line(tmp_path, text, key, line):
    path, message = load_error(tmp_path, text)
    assert message.startswith(f"config file {path}: not valid YAML at line {line}")
    assert f"duplicate key {key}" in message


@pytest.mark.parametrize(
    "text",
    ["currency: " + "E" * 100_000 + "\n", "collect_interval: [" + ", ".join(["1s"] * 50_000) + "]\n", "X" * 100_000 + ": 1\n"],
)
def test_error_messages_quote_at_most_200_characters_of_a_value(tmp_path, text):
    _, message = load_error(tmp_path, text)
    assert len(message) < 600


def test_scrape_timeout_defaults_like_prometheus(tmp_path):
    entry = "{name: a, url: 'http://h/m', counter: c, unit: u, scrape_interval: %s}"
    for interval, timeout in (("1s", 1.0), ("500ms", 0.5), ("5s", 2.0), ("1m", 2.0)):
        assert load_config(write(tmp_path, f"apps:\n  - {entry % interval}\n")).apps[0].scrape_timeout == timeout
    _, message = load_error(tmp_path, "apps:\n  - {name: a, url: 'http://h/m', counter: c, unit: u, scrape_interval: 1s, scrape_timeout: 2s}\n")
    assert "'apps[0].scrape_timeout': must not exceed scrape_interval (1s), got 2s" in message


def test_the_generated_key_reference_is_current():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "config_reference.py"), "--check"], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stderr


def test_restart_only_keys_are_named_when_a_reload_changes_them():
    running = parse_config({"dcgm": {"host": "localhost:5555"}, "collect_interval": "1s"})
    reloaded = parse_config({"dcgm": {"host": "10.0.0.2:5555", "multi_pass": True}, "collect_interval": "2s"})
    assert restart_only_changes(running, reloaded) == ["dcgm.host", "dcgm.multi_pass"]
    assert dict((key, reload) for key, _, _, reload in config_reference())["dcgm.pause_file"] == RESTART


@pytest.mark.parametrize("key, value, reason", [("host", "a host:5555", "HOST:PORT"), ("pause_file", "pause", "absolute path"), ("multi_pass", "yes", "true or false")])
def test_the_dcgm_section_rejects_bad_values_naming_the_key(key, value, reason):
    with pytest.raises(ConfigError, match=rf"'dcgm\.{key}': .*{reason}"):
        parse_config({"dcgm": {key: value}})


def test_dcgm_flags_override_the_dcgm_section():
    from gpueff.commands.cli import daemon_parser

    base = parse_config({"dcgm": {"host": "localhost:5555", "pause_file": "/run/pause"}}).dcgm
    args = daemon_parser().parse_args(["--dcgm.host", "10.0.0.2:5555", "--dcgm.multi-pass"])
    assert dcgm_settings(args, base) == DcgmConfig(bindings_path=None, host="10.0.0.2:5555", multi_pass=True, pause_file="/run/pause")
    assert dcgm_settings(daemon_parser().parse_args([]), base) == base


APP = "apps:\n  - name: llm\n    url: '{url}'\n    counter: tokens_total\n    unit: tokens\n"


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("kubernetes:\n  max_message_bytes: 4294967296\n", "kubernetes.max_message_bytes", "must be at most 2,147,483,647 (gRPC takes a 32-bit signed limit)"),
        (APP.format(url="http://127.0.0.1:8000/metrics") + "    max_response_bytes: " + "1" + "0" * 100 + "\n", "apps[0].max_response_bytes", "must be at most 1,073,741,824"),
        ("bottleneck:\n  hold_polls: 100000000000\n", "bottleneck.hold_polls", "must be at most 1,000"),
        (APP.format(url="http://127.0.0.1:8000/métriques"), "apps[0].url", "a URL is ASCII: percent-encode"),
        (APP.format(url="http://" + "a" * 64 + ".example:8000/metrics"), "apps[0].url", "one over 63 characters"),
        (APP.format(url="http://a..b:8000/metrics"), "apps[0].url", "an empty part"),
        # Credentials were accepted, never sent, and logged in clear with the URL.
        (APP.format(url="http://user:pw@127.0.0.1:1/metrics"), "apps[0].url", "'http://<credentials>@127.0.0.1:1/metrics': credentials in an app's URL (user:password@) are refused"),
        (APP.format(url="https://token@127.0.0.1:8443/metrics"), "apps[0].url", "credentials in an app's URL"),
    ],
    ids=["grpc-overflow", "response-bytes", "hold-polls", "non-ascii-path", "long-host-label", "empty-host-label", "user-and-password", "user-only"],
)
def test_values_accepted_before_but_unusable_later_are_refused_at_load(tmp_path, text, key, reason):
    """Each of these loaded, then failed every kubelet call (grpc OverflowError) or every scrape
    (the request line cannot be encoded, the host name cannot be resolved), or made a setting
    that can never act."""
    path, message = load_error(tmp_path, text)
    assert message.startswith(f"config file {path}: '{key}': ")
    assert reason in message and ":pw@" not in message and "token@" not in message


def test_the_largest_accepted_message_limit_works_with_grpc():
    import grpc

    limit = parse_config({"kubernetes": {"max_message_bytes": 2**31 - 1}}).kubernetes.max_message_bytes
    grpc.insecure_channel("unix:///nonexistent.sock", options=[("grpc.max_receive_message_length", limit)]).close()


def test_every_problem_of_a_file_is_reported_at_once(tmp_path):
    """A file with three mistakes names all three in one error, not the first alone, each by its key."""
    path = write(tmp_path, "colect_interval: 1s\nmismatch:\n  high_utilization: 1.5\napps:\n  - {name: a, url: 'http://h/m', counter: c, unit: u, scrape_timeout: 2h}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    problems = raised.value.problems
    assert len(problems) == 3 and all(problem.startswith(f"config file {path}: '") for problem in problems)
    assert [problem.split(": ")[1] for problem in problems] == ["'colect_interval'", "'mismatch.high_utilization'", "'apps[0].scrape_timeout'"]
    assert str(raised.value).startswith(f"config file {path}: 3 problems: ")


@pytest.mark.parametrize(
    ("text", "guess"),
    [
        ("colect_interval: 1s\n", "collect_interval"),
        ("mismatch:\n  high_util: 0.5\n", "high_utilization"),
        ("bottleneck:\n  compute: 0.5\n", "compute_pipe"),
    ],
)
def test_an_unknown_key_suggests_the_nearest_known_one(tmp_path, text, guess):
    _, message = load_error(tmp_path, text)
    assert f"did you mean '{guess}'?" in message


def test_an_unknown_key_far_from_every_known_one_gets_no_guess(tmp_path):
    _, message = load_error(tmp_path, "zzzzzz: 1\n")
    assert "did you mean" not in message and "known keys here:" in message
