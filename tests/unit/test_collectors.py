"""Per-family collector switches (gpueff/collectors.py): the catalogue split into collectors, the
config key and the --collector.NAME / --no-collector.NAME flags, the exposition without a
disabled collector's series, and its NVML calls not made."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import running_daemon
from fakes.nvml import FakeClock, FakeGpu, FakeNvml
from prometheus_client.parser import text_string_to_metric_families

from gpueff.backends.base import CollectSettings
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.collectors import ALWAYS, COLLECTORS, OFF_BY_DEFAULT
from gpueff.commands.cli import daemon_parser
from gpueff.commands.daemon import effective_config
from gpueff.config.engine import ConfigError
from gpueff.exposition.render import render
from gpueff.metrics import BY_NAME, GPU
from gpueff.poller import collect_settings
from gpueff.settings import Config, parse_config
from gpueff.trace import load_trace
from unit.test_metrics import full_snapshot


def family_names(body: bytes) -> set[str]:
    return {family.name + ("_total" if family.type == "counter" else "") for family in text_string_to_metric_families(body.decode())}


def test_every_gpu_metric_is_in_exactly_one_collector_or_always_exported():
    listed = [metric for collector in COLLECTORS.values() for metric in collector.metrics]
    assert len(listed) == len(set(listed)), "a metric in two collectors"
    assert set(listed) <= set(BY_NAME)
    assert set(listed) | ALWAYS == {metric.name for metric in BY_NAME.values() if metric.scope == GPU}


def test_every_metric_row_names_a_known_collector_and_every_collector_has_metrics():
    assert {"gpueff_gpu_up", "gpueff_gpu_info", "gpueff_mig_device_info", "gpueff_gpu_attribution_info"} == ALWAYS, "a per-GPU row without its collector"
    assert {metric.name: metric.collector for metric in BY_NAME.values() if metric.collector not in COLLECTORS and metric.name not in ALWAYS and metric.scope == GPU} == {}
    assert {metric.name for metric in BY_NAME.values() if metric.scope != GPU and metric.collector} == set(), "only per-GPU rows have collectors"
    assert [name for name, collector in COLLECTORS.items() if not collector.metrics] == []


def test_the_config_names_collectors_and_rejects_unknown_ones():
    assert parse_config({"collectors": {"disabled": ["nvlink", "fan", "nvlink"]}}).collectors.disabled == ("fan", "nvlink")
    with pytest.raises(ConfigError, match=r"collectors\.disabled.*unknown collector 'nvlinks'; the collectors are utilization, power"):
        parse_config({"collectors": {"disabled": ["nvlinks"]}})
    with pytest.raises(ConfigError, match=r"collectors\.disabled.*list of collector names"):
        parse_config({"collectors": {"disabled": "nvlink"}})


def test_flags_switch_collectors_over_the_config_file(tmp_path):
    config = tmp_path / "config.yml"
    config.write_text("collectors:\n  disabled: [nvlink, video]\n")
    args = daemon_parser().parse_args(["--config", str(config), "--collector.nvlink", "--no-collector.profiling", "--no-collector.fan"])
    assert effective_config(args).collectors.disabled == ("fan", "profiling", "video")
    assert effective_config(daemon_parser().parse_args(["--config", str(config)])).collectors.disabled == ("nvlink", "video")


def test_the_per_process_collector_is_off_until_the_config_or_a_flag_turns_it_on(tmp_path):
    assert {"per_process"} == OFF_BY_DEFAULT and Config().collectors.off == ("per_process",)
    assert collect_settings(Config()).process_utilization is False  # no per-process samples read by default
    on = parse_config({"collectors": {"enabled": ["per_process"]}})
    assert on.collectors.off == () and collect_settings(on).process_utilization is True  # the busy shares need them
    with pytest.raises(ConfigError, match=r"collectors\.enabled.*'nvlink' is on by default \(only per_process need enabling\)"):
        parse_config({"collectors": {"enabled": ["nvlink"]}})
    with pytest.raises(ConfigError, match=r"collectors\.enabled.*'per_process' is also in disabled"):
        parse_config({"collectors": {"enabled": ["per_process"], "disabled": ["per_process"]}})
    config = tmp_path / "config.yml"
    config.write_text("collectors:\n  enabled: [per_process]\n")
    parsed = lambda *flags: effective_config(daemon_parser().parse_args(list(flags))).collectors  # noqa: E731
    assert parsed("--config", str(config)).off == () and parsed("--config", str(config), "--no-collector.per_process").off == ("per_process",)
    assert parsed("--collector.per_process").off == () and parsed().off == ("per_process",)
    assert parsed("--collector.disable-defaults", "--collector.power").off == tuple(sorted(set(COLLECTORS) - {"power"}))
    assert parsed("--collector.disable-defaults", "--collector.per_process").off == tuple(sorted(set(COLLECTORS) - {"per_process"}))
    helps = {action.dest: action.help for action in daemon_parser()._actions}
    assert "(off by default; --collector.per_process turns them on" in helps["collector_per_process"] and "(on by default" in helps["collector_nvlink"]


def test_a_disabled_collector_exports_nothing_and_the_rest_is_unchanged():
    snapshot = full_snapshot()
    everything = family_names(render(snapshot))
    disabled = ("efficiency", "nvlink", "profiling")
    reduced = dataclasses.replace(snapshot, settings=dataclasses.replace(snapshot.settings, disabled_collectors=disabled))
    dropped = {metric for name in disabled for metric in COLLECTORS[name].metrics}
    assert "gpueff_busy_idle_sm_cost_total" in dropped
    assert family_names(render(reduced)) == everything - dropped


def test_a_disabled_health_collector_makes_no_nvml_calls(trace_paths):
    clock = FakeClock()
    fake = FakeNvml([FakeGpu(load_trace(trace_paths["matmul_8192"]), nvlink_links=(True, True))], clock=clock)
    backend = NvmlBackend(nvml=fake, clock=clock)
    backend.configure(CollectSettings(slow_interval=1.0, disabled_collectors=("violations", "nvlink", "video")))
    backend.start()
    for _ in range(3):
        health = backend.collect()[0].health
        clock.advance(1)
    backend.close()
    assert fake.calls["nvmlDeviceGetViolationStatus"] == fake.calls["nvmlDeviceGetNvLinkState"] == fake.calls["nvmlDeviceGetEncoderUtilization"] == 0
    assert health.violation_power_seconds is None and health.nvlink_links_active is None and health.encoder_utilization is None
    assert health.pcie_link_width == 16 and fake.calls["nvmlDeviceGetPerformanceState"] == 3


def test_the_daemon_drops_a_collector_named_on_the_command_line():
    with running_daemon("--demo", "--collect-interval", "200ms", "--no-collector.profiling") as daemon:
        metrics = daemon.metrics()
    assert "gpueff_gpu_utilization_ratio{" in metrics and "gpueff_efficiency_ratio{" in metrics
    assert "gpueff_sm_active_ratio" not in metrics and "gpueff_profiling_available" not in metrics
