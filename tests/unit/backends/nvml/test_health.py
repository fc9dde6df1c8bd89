"""The NVML health readings (gpueff/backends/nvml/health.py) against the fake pynvml: units,
cadence, absence where unsupported, errors that must not take a GPU down, and their exposition."""

from __future__ import annotations

import dataclasses

import pynvml
import pytest
from fakes.nvml import FakeGpu
from fakes.nvml import started_backend as started
from prometheus_client.parser import text_string_to_metric_families

from gpueff.backends.nvml.health import FAST, HEALTH_CALLS, ONCE, SLOW
from gpueff.exposition.render import render
from gpueff.pipeline.derive import derive
from gpueff.pipeline.totals import Totals
from gpueff.poller import poll_settings
from gpueff.sample import Health
from gpueff.settings import Config
from gpueff.snapshot import GpuState, Snapshot
from gpueff.trace import load_trace


@pytest.fixture(scope="module")
def trace(trace_paths):
    return load_trace(trace_paths["matmul_8192"])


def nvlink_board(trace, **changes):
    """A pre-Ampere NVLink board with a fan: a GPU that gives every health reading."""
    settings = {"nvlink_links": (True, True, False), "nvlink_errors": (5, 1, 7, 2), "retired_pages": (2, 1, True), "fan_percent": 45,
                "violation_ns": {pynvml.NVML_PERF_POLICY_POWER: 1_500_000_000, pynvml.NVML_PERF_POLICY_THERMAL: 250_000_000}, "pcie_replays": 12,
                "pcie_link": (3, 4, 8, 16), "performance_state": 2, "codec_utilization": (30, 5)}
    return FakeGpu(trace, **(settings | changes))


def test_readings_in_base_units(trace):
    backend, _, _ = started([nvlink_board(trace)])
    health = backend.collect()[0].health
    backend.close()
    assert health.pcie_replay_errors == 12 and (health.pcie_link_generation, health.pcie_link_generation_max, health.pcie_link_width, health.pcie_link_width_max) == (3, 4, 8, 16)
    assert (health.nvlink_crc_flit_errors, health.nvlink_crc_data_errors, health.nvlink_replay_errors, health.nvlink_recovery_errors) == (5, 1, 7, 2)
    assert health.nvlink_links_active == ((0, True), (1, True), (2, False))
    assert health.violation_power_seconds == 1.5 and health.violation_thermal_seconds == 0.25 and health.violation_reliability_seconds == 0
    assert (health.retired_pages_single_bit, health.retired_pages_double_bit, health.retired_pages_pending) == (2, 1, True)
    assert health.performance_state == 2 and health.encoder_utilization == 0.3 and health.decoder_utilization == 0.05 and health.fan_speed == 0.45
    assert (health.temperature_slowdown_celsius, health.temperature_shutdown_celsius, health.temperature_gpu_max_celsius, health.temperature_memory_max_celsius) == (89, 92, 87, 95)


def test_a_one_gpu_hopper_has_no_nvlink_retired_pages_or_fan_readings_not_zeros(trace):
    backend, fake, clock = started([FakeGpu(trace)], slow_interval=1.0)
    for _ in range(3):
        health = backend.collect()[0].health
        clock.advance(1)
    backend.close()
    absent = {"nvlink_crc_flit_errors", "nvlink_crc_data_errors", "nvlink_replay_errors", "nvlink_recovery_errors", "nvlink_links_active", "nvlink_link_errors",
              "retired_pages_single_bit", "retired_pages_double_bit", "retired_pages_pending", "fan_speed"}
    assert set(health.readings()) == {field.name for field in dataclasses.fields(Health)} - absent
    assert fake.calls["nvmlDeviceGetRetiredPages"] == 2 and fake.calls["nvmlDeviceGetFanSpeed"] == 1  # NOT_SUPPORTED: asked once
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 0  # a link count of 0 ends it


def test_fast_readings_every_poll_slow_ones_at_the_slow_interval(trace):
    backend, fake, clock = started([nvlink_board(trace)], slow_interval=10.0)
    replays = []
    for second in range(25):
        fake.gpus[0].pcie_replays = second  # a rising counter, seen only when the slow round reads it
        replays.append(backend.collect()[0].health.pcie_replay_errors)
        clock.advance(1)
    backend.close()
    assert fake.calls["nvmlDeviceGetPerformanceState"] == 25 and fake.calls["nvmlDeviceGetEncoderUtilization"] == 25
    assert fake.calls["nvmlDeviceGetPcieReplayCounter"] == 3 and fake.calls["nvmlDeviceGetNvLinkState"] == 9  # 3 links at 0, 10 and 20 s
    assert replays == [0] * 10 + [10] * 10 + [20] * 5  # carried on between slow rounds
    assert {call.cadence for call in HEALTH_CALLS} == {FAST, SLOW, ONCE}


def test_fixed_limits_are_read_once_per_device_open_and_again_after_a_reinit(trace):
    """The temperature limits and the most PCIe link can do cannot change while the driver runs
    (docs/health.md): one call each per device open, not one per slow round."""
    backend, fake, clock = started([nvlink_board(trace)], slow_interval=1.0)
    fixed = ("nvmlDeviceGetTemperatureThreshold", "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth")
    for _ in range(5):
        health = backend.collect()[0].health
        clock.advance(1)
    assert [fake.calls[name] for name in fixed] == [4, 1, 1] and fake.calls["nvmlDeviceGetPcieReplayCounter"] == 5
    assert (health.temperature_slowdown_celsius, health.temperature_memory_max_celsius, health.pcie_link_width_max) == (89, 95, 16)  # kept
    fake.lose_gpu(0)
    assert not backend.collect()[0].up
    fake.recover_gpu(0)
    clock.advance(2)  # past the first re-initialisation back-off
    health = backend.collect()[0].health
    backend.close()
    assert [fake.calls[name] for name in fixed] == [8, 2, 2] and health.temperature_shutdown_celsius == 92


def test_a_fixed_limit_that_failed_is_tried_again_at_the_next_slow_round_then_kept(trace):
    backend, fake, clock = started([nvlink_board(trace)], slow_interval=1.0)
    fake.fail("nvmlDeviceGetMaxPcieLinkWidth", pynvml.NVML_ERROR_UNKNOWN, times=1)
    first = backend.collect()[0].health
    clock.advance(1)
    second = backend.collect()[0].health
    clock.advance(1)
    third = backend.collect()[0].health
    backend.close()
    assert first.pcie_link_width_max is None and second.pcie_link_width_max == third.pcie_link_width_max == 16
    assert fake.calls["nvmlDeviceGetMaxPcieLinkWidth"] == 2


def test_a_fixed_limit_of_a_collector_disabled_at_start_is_read_once_it_is_enabled(trace):
    backend, fake, clock = started([nvlink_board(trace)], slow_interval=1.0)
    backend.disabled_collectors = frozenset({"thermal"})
    assert backend.collect()[0].health.temperature_slowdown_celsius is None
    backend.disabled_collectors = frozenset()
    clock.advance(1)
    health = backend.collect()[0].health
    backend.disabled_collectors = frozenset({"thermal"})
    clock.advance(0.5)  # no slow round: what was read stays out while its collector is off
    hidden = backend.collect()[0].health
    backend.disabled_collectors = frozenset()
    clock.advance(1)  # a slow round: back from what was kept, not asked again
    shown = backend.collect()[0].health
    backend.close()
    assert health.temperature_slowdown_celsius == shown.temperature_slowdown_celsius == 89 and hidden.temperature_slowdown_celsius is None
    assert fake.calls["nvmlDeviceGetTemperatureThreshold"] == 4


@pytest.mark.parametrize("function", ["nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetViolationStatus", "nvmlDeviceGetPerformanceState", "nvmlDeviceGetNvLinkState"])
@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT])
def test_unsupported_is_asked_once_and_the_gpu_stays_up(trace, function, code):
    backend, fake, clock = started([nvlink_board(trace)], slow_interval=1.0)
    fake.fail(function, code)
    for _ in range(4):
        sample = backend.collect()[0]
        clock.advance(1)
    backend.close()
    assert sample.up and backend.errors_total == 0
    per_round = {"nvmlDeviceGetViolationStatus": 6, "nvmlDeviceGetNvLinkState": 3}.get(function, 1)  # one per policy / per link in the first round
    assert fake.calls[function] == per_round


def test_a_transient_error_leaves_the_reading_absent_once_then_it_is_read_again(trace, caplog):
    backend, fake, clock = started([nvlink_board(trace)], slow_interval=1.0)
    fake.fail("nvmlDeviceGetPcieReplayCounter", pynvml.NVML_ERROR_UNKNOWN, times=1)
    first = backend.collect()[0]
    clock.advance(1)
    second = backend.collect()[0]
    backend.close()
    assert first.up and first.health.pcie_replay_errors is None and first.health.pcie_link_width == 8
    assert second.health.pcie_replay_errors == 12
    assert "reading pcie_replays failed" in caplog.text


def test_a_gpu_lost_during_a_health_read_goes_down(trace):
    backend, fake, _ = started([nvlink_board(trace)])
    fake.fail("nvmlDeviceGetPerformanceState", pynvml.NVML_ERROR_GPU_IS_LOST)
    sample = backend.collect()[0]
    backend.close()
    assert not sample.up


def test_mig_devices_carry_no_health_readings_their_gpu_does(trace):
    backend, fake, _ = started([nvlink_board(trace), FakeGpu(trace, uuid="MIG-a", mig_of=0, gpu_instance_id=1)])
    gpu, mig = backend.collect()
    backend.close()
    assert gpu.health.performance_state == 2 and mig.health == Health()
    assert fake.device_calls["nvmlDeviceGetPerformanceState", 1] == 0


def test_a_power_limit_changed_at_run_time_shows_at_the_next_slow_round(trace):
    backend, fake, clock = started([FakeGpu(trace)], slow_interval=10.0)
    assert backend.collect()[0].device.power_limit_watts == 700
    fake.gpus[0].trace.gpu["power_limit_mw"] = 500_000
    clock.advance(5)
    assert backend.collect()[0].device.power_limit_watts == 700
    clock.advance(5)
    assert backend.collect()[0].device.power_limit_watts == 500
    backend.close()


def test_a_hopper_board_gives_its_error_counters_per_active_link_in_one_call_and_their_sums(trace):
    """Hopper answers NotSupported for the *_TOTAL fields and the data-link fields per link (scopeId):
    each active link's counters come in one field-values call, the totals from the fields' sums."""
    def slow_round_calls(links: int) -> int:
        backend, fake, clock = started([FakeGpu(trace, nvlink_links=(True,) * links, nvlink_link_errors=((0, 0, 0),) * links)], slow_interval=1.0)
        backend.collect()
        clock.advance(1)
        before = fake.calls["nvmlDeviceGetFieldValues"]
        backend.collect()
        backend.close()
        return fake.calls["nvmlDeviceGetFieldValues"] - before

    board = FakeGpu(trace, nvlink_links=(True, False, True), nvlink_link_errors=((1, 0, 0), (9, 9, 9), (0, 4, 2)), nvlink_totals=False)
    backend, _, _ = started([board])
    health = backend.collect()[0].health
    backend.close()
    assert health.nvlink_link_errors == ((0, "crc_flit", 1), (0, "replay", 0), (0, "recovery", 0), (2, "crc_flit", 0), (2, "replay", 4), (2, "recovery", 2))
    assert (health.nvlink_crc_flit_errors, health.nvlink_replay_errors, health.nvlink_recovery_errors, health.nvlink_crc_data_errors) == (10, 13, 11, None)
    assert slow_round_calls(2) == slow_round_calls(18)  # the field-values calls of a slow round, whatever the link count


def test_the_per_link_errors_are_read_again_only_when_a_total_or_a_link_state_moves(trace):
    board = FakeGpu(trace, nvlink_links=(True, True), nvlink_link_errors=((0, 0, 0), (0, 0, 0)), nvlink_totals=False)
    backend, fake, clock = started([board], slow_interval=1.0)

    def slow_round() -> tuple[int, object]:
        clock.advance(1)
        before = fake.calls["nvmlDeviceGetFieldValues"]
        health = backend.collect()[0].health
        return fake.calls["nvmlDeviceGetFieldValues"] - before, health.nvlink_link_errors

    backend.collect()
    quiet, _ = slow_round()
    board.nvlink_link_errors = ((0, 0, 0), (0, 3, 0))  # link 1 replays
    moved, after_replays = slow_round()
    board.nvlink_links = (True, False)  # link 1 goes down, no counter moves
    down, after_down = slow_round()
    backend.close()
    assert moved == down == quiet + 2  # the link count and the links: two calls, made only when something moved
    assert (1, "replay", 3) in after_replays and after_down == ((0, "crc_flit", 0), (0, "replay", 0), (0, "recovery", 0))


def test_each_links_data_crc_count_comes_from_its_own_call_and_its_active_links_are_exported(trace):
    """Hopper answers no field for data-CRC errors (the one NVLink counter live boards show above 0):
    each link is asked with nvmlDeviceGetNvLinkErrorCounter; the sum is the total, and only active
    links get a per-link series."""
    board = FakeGpu(trace, nvlink_links=(True, False, True), nvlink_link_errors=((0, 0, 0),) * 3, nvlink_totals=False, nvlink_crc_data=(5, 9, 172))
    backend, fake, _ = started([board])
    sample = backend.collect()[0]
    backend.close()
    assert sample.health.nvlink_crc_data_errors == 186
    config = Config()
    snapshot = Snapshot(sequence=1, gpus=(GpuState(sample, derive(sample, config.derive_settings), Totals()),), taken_monotonic=sample.timestamp, settings=poll_settings(config), backend_name="nvml",
                        replayed=False, polls_total=1, collect_duration_sum_seconds=0.01, errors_total=0, last_success_wall=1.7e9)
    (family,) = (each for each in text_string_to_metric_families(render(snapshot).decode()) if each.name == "gpueff_nvlink_link_errors")
    crc_data = {each.labels["link"]: each.value for each in family.samples if each.labels["type"] == "crc_data"}
    assert crc_data == {"0": 5, "2": 172}


def test_a_gpu_without_the_data_crc_counter_is_not_asked_again(trace):
    backend, fake, clock = started([FakeGpu(trace, nvlink_links=(True, True), nvlink_link_errors=((0, 0, 0),) * 2, nvlink_totals=False)], slow_interval=1.0)
    backend.collect()
    clock.advance(1)
    health = backend.collect()[0].health
    backend.close()
    assert health.nvlink_crc_data_errors is None and health.nvlink_link_errors == ((0, "crc_flit", 0), (0, "replay", 0), (0, "recovery", 0), (1, "crc_flit", 0), (1, "replay", 0), (1, "recovery", 0))
    assert fake.calls["nvmlDeviceGetNvLinkErrorCounter"] == 1  # link 0, once


def test_exposition_of_the_health_readings(trace):
    backend, _, _ = started([nvlink_board(trace)])
    sample = backend.collect()[0]
    backend.close()
    config = Config()
    snapshot = Snapshot(sequence=1, gpus=(GpuState(sample, derive(sample, config.derive_settings), Totals()),), taken_monotonic=sample.timestamp, settings=poll_settings(config), backend_name="nvml",
                        replayed=False, polls_total=1, collect_duration_sum_seconds=0.01, errors_total=0, last_success_wall=1.7e9)
    families = {family.name: family for family in text_string_to_metric_families(render(snapshot).decode())}
    values = {(sample.name, tuple(sorted((k, v) for k, v in sample.labels.items() if k not in {"gpu", "uuid"}))): sample.value for family in families.values() for sample in family.samples}
    assert values["gpueff_pcie_replay_errors_total", ()] == 12
    assert values["gpueff_nvlink_errors_total", (("type", "replay"),)] == 7
    assert values["gpueff_nvlink_link_active", (("link", "2"),)] == 0 and values["gpueff_nvlink_link_active", (("link", "0"),)] == 1
    assert values["gpueff_clock_violation_seconds_total", (("reason", "power"),)] == 1.5
    assert values["gpueff_retired_pages", (("cause", "double_bit"),)] == 1 and values["gpueff_retired_pages_pending", ()] == 1
    assert values["gpueff_temperature_limit_celsius", (("threshold", "slowdown"),)] == 89
    assert values["gpueff_pcie_link_max_width", ()] == 16 and values["gpueff_fan_speed_ratio", ()] == 0.45
