"""The health readings from DCGM's device fields (docs/dcgm.md, "Health readings") against the fake
host engine: the same catalogue readings as the NVML backend, in base units, absent where DCGM
answers a field NOT_SUPPORTED, watched at the slow cadence like the NVML side's costly calls."""

from __future__ import annotations

import dataclasses
import time

import pytest
from fakes.nvml import FakeClock

from gpueff.backends.dcgm.backend import DcgmBackend
from gpueff.metrics import DCGM
from gpueff.sample import GpuSample, Health
from unit.backends.dcgm.test_backend import FAKE
from unit.test_metrics import claimed, given

HEALTH_PATHS = {f"sample.health.{each.name}" for each in dataclasses.fields(Health)}


@pytest.fixture
def engine_control(dcgm_engine):
    """Two GPUs: 0 a Hopper SXM board (NVLink, no page retirement), 1 a PCIe Pascal board (page
    retirement, no NVLink, no GPU or memory maximum temperature)."""
    dcgm_engine.CONTROL.gpu_kinds = ["hopper", "pascal"]
    return dcgm_engine


def collect(engine_control, polls: int = 3, set_values: dict[tuple[int, int], float] | None = None) -> list[GpuSample]:
    dcgm = DcgmBackend(FAKE, collect_interval=0.1, slow_interval=0.2)
    dcgm.start()
    try:
        engine = engine_control.CONTROL.embedded[-1]
        engine.values.update(set_values or {})
        samples: list[GpuSample] = []
        for _ in range(polls):
            time.sleep(0.25)
            samples += dcgm.collect()
    finally:
        dcgm.close()
    return samples


def test_the_dcgm_backend_gives_every_health_reading_the_catalogue_says_it_gives(engine_control):
    samples = collect(engine_control, set_values={(1, 191): 40.0})  # the Pascal board given a fan
    assert claimed(DCGM) & HEALTH_PATHS == HEALTH_PATHS
    assert given(samples) & HEALTH_PATHS == claimed(DCGM) & HEALTH_PATHS


def test_health_fields_arrive_in_base_units_and_absent_where_the_board_lacks_them(engine_control):
    samples = collect(engine_control)
    hopper = next(s.health for s in reversed(samples) if s.device.index == 0)
    pascal = next(s.health for s in reversed(samples) if s.device.index == 1)
    assert (hopper.pcie_link_generation, hopper.pcie_link_width, hopper.pcie_link_generation_max, hopper.pcie_link_width_max) == (5, 16, 5, 16)
    assert (hopper.nvlink_crc_flit_errors, hopper.nvlink_crc_data_errors, hopper.nvlink_replay_errors, hopper.nvlink_recovery_errors) == (3, 0, 0, 0)
    assert hopper.retired_pages_single_bit is None and hopper.retired_pages_pending is None  # Hopper remaps rows
    assert (hopper.temperature_slowdown_celsius, hopper.temperature_shutdown_celsius, hopper.temperature_gpu_max_celsius, hopper.temperature_memory_max_celsius) == (89, 95, 87, 95)
    assert hopper.performance_state == 0 and hopper.encoder_utilization == hopper.decoder_utilization == 0.0
    assert hopper.fan_speed is None  # passively cooled: NOT_SUPPORTED, never a fake 0
    assert type(hopper.pcie_link_width) is int and type(hopper.performance_state) is int
    # The Pascal PCIe board: pages retired, no NVLink, a limit read as 0 is a limit it does not have.
    assert (pascal.retired_pages_single_bit, pascal.retired_pages_double_bit, pascal.retired_pages_pending) == (2, 0, False)
    assert pascal.nvlink_crc_flit_errors is None and pascal.nvlink_replay_errors is None
    assert pascal.temperature_gpu_max_celsius is None and pascal.temperature_memory_max_celsius is None
    assert pascal.pcie_link_generation == 3
    assert all(s.up for s in samples)


def test_violation_time_is_read_as_nanoseconds(engine_control):
    """DCGM stores NVML_FI_DEV_PERF_POLICY_POWER unchanged; on an H100 NVML answered 134499190336 for
    the power policy where nvidia-smi showed 134499190 us (docs/health.md): 134.5 s."""
    samples = collect(engine_control, set_values={(0, 240): 134499190336.0, (0, 241): 2_500_000_000.0})
    hopper = [s.health for s in samples if s.device.index == 0]
    assert hopper[-1].violation_power_seconds == pytest.approx(134.499190336)
    assert hopper[-1].violation_thermal_seconds == pytest.approx(2.5)
    assert hopper[-1].violation_sync_boost_seconds == 0.0


def test_an_unknown_pstate_is_absent(engine_control):
    """DCGM stores NVML_PSTATE_UNKNOWN (32) as it comes (DcgmCacheManager.cpp)."""
    samples = collect(engine_control, polls=2, set_values={(0, 190): 32.0})
    assert all(s.health.performance_state is None for s in samples if s.device.index == 0)
    assert all(s.health.performance_state == 0 for s in samples if s.device.index == 1)


def test_costly_health_fields_are_watched_at_the_slow_interval_and_cheap_ones_every_poll(engine_control):
    dcgm = DcgmBackend(FAKE, collect_interval=0.1, slow_interval=2.0)
    dcgm.start()
    try:
        watched = engine_control.CONTROL.embedded[-1].watched(0)
    finally:
        dcgm.close()
    slow = {202, 235, 236, 237, 238, *range(240, 246), 390, 391, 392, 409, 419, 429, 439, 151, 152, 158, 159}
    assert {watched[field_id] for field_id in slow} == {2_000_000}
    assert {watched[field_id] for field_id in (190, 191, 206, 207)} == {100_000}


def test_nvlink_link_states_come_from_dcgms_link_status_at_the_slow_cadence(engine_control):
    engine_control.CONTROL.gpu_kinds = ["ampere", "pascal"]
    clock = FakeClock()  # the backend's cadence; a busy machine could stretch real sleeps past the slow interval
    dcgm = DcgmBackend(FAKE, collect_interval=0.1, slow_interval=0.5, clock=clock)
    dcgm.start()
    try:
        engine = engine_control.CONTROL.embedded[-1]
        before = dcgm.collect()
        engine.links_down.add((0, 7))
        clock.advance(0.2)
        soon = dcgm.collect()  # within the slow interval: the last states stand
        clock.advance(0.5)
        later = dcgm.collect()
    finally:
        dcgm.close()
    assert before[0].health.nvlink_links_active == tuple((link, True) for link in range(12))
    assert soon[0].health.nvlink_links_active == before[0].health.nvlink_links_active
    assert dict(later[0].health.nvlink_links_active or ())[7] is False
    assert sum(active for _, active in later[0].health.nvlink_links_active or ()) == 11
    assert before[1].health.nvlink_links_active is None  # a PCIe board: every link NotSupported
    # Each active link's error counters (DCGM's per-link fields), none for a link down or a board without NVLink.
    assert len(before[0].health.nvlink_link_errors or ()) == 12 * 4 and (7, "crc_data", 5.0) in (before[0].health.nvlink_link_errors or ())
    assert {link for link, _, _ in later[0].health.nvlink_link_errors or ()} == set(range(12)) - {7}
    assert before[1].health.nvlink_link_errors is None


def test_a_refused_link_status_leaves_the_link_states_out_and_the_gpu_up(engine_control, caplog, monkeypatch):
    import dcgm_agent
    import dcgm_structs

    def refuse(handle):
        raise dcgm_structs.DCGMError(dcgm_structs.DCGM_ST_NOT_SUPPORTED)

    monkeypatch.setattr(dcgm_agent, "dcgmGetNvLinkLinkStatus", refuse)
    samples = collect(engine_control, polls=2)
    assert all(s.up and s.health.nvlink_links_active is None for s in samples)
    assert all(s.health.nvlink_replay_errors == 0 for s in samples if s.device.index == 0)
    assert "NVLink link states" in caplog.text


def test_a_dcgm_without_a_health_field_leaves_that_reading_out_and_reads_the_rest(engine_control):
    import dcgm_fields

    engine_control.CONTROL.known_field_ids = set(dcgm_fields.FIELD_NAMES) - {245}
    samples = collect(engine_control, polls=2)
    hopper = [s for s in samples if s.device.index == 0][-1]
    assert hopper.up and hopper.health.violation_reliability_seconds is None
    assert hopper.health.violation_power_seconds is not None


def test_a_power_limit_changed_at_run_time_shows_at_the_slow_cadence(engine_control):
    samples = collect(engine_control, set_values={(0, 164): 450.0})  # nvidia-smi -pl 450 after the start
    first = [s.device for s in samples if s.device.index == 0]
    assert first[-1].power_limit_watts == 450 and first[-1].uuid == "GPU-fakedcgm-0-matmul_8192"
    assert [s.device.power_limit_watts for s in samples if s.device.index == 1][-1] == 700  # the device attributes' at connect
