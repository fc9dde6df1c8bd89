"""The DCGM backend against the fake DCGM bindings (tests/support/fakes/dcgm), driven by the recorded traces.

The fake is loaded exactly as the real bindings are: from a folder given as the bindings path.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from pathlib import Path

import pytest
from conftest import DCGM_FAKE, ROOT, running_daemon
from fakes.nvml import FakeClock, FakeGpu, FakeNvml
from frozen import frozen_trace_file
from waiting import PATIENCE, wait_until

from gpueff.backends.auto import AutoBackend
from gpueff.backends.base import BackendUnavailable
from gpueff.backends.dcgm.backend import DcgmBackend
from gpueff.backends.dcgm.bindings import load_bindings
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.trace import load_trace

FAKE = DCGM_FAKE
MIB = 1024 * 1024


def backend(clock=time.monotonic, host=None, interval=0.1, slow=1.0) -> DcgmBackend:
    return DcgmBackend(FAKE, host=host, collect_interval=interval, slow_interval=slow, clock=clock)


def trace_values(path: Path, key: str, scale: float) -> set[float]:
    return {round(record[key] * scale, 6) for record in load_trace(path).samples if record.get(key) is not None}


def test_watches_fields_and_reads_latest_values_in_the_gpm_shape(dcgm_engine, trace_paths):
    dcgm = backend()
    devices = dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        assert [d.uuid for d in devices] == ["GPU-fakedcgm-0-matmul_8192", "GPU-fakedcgm-1-idle"]
        assert devices[0].name == "NVIDIA H200" and devices[0].power_limit_watts == 700 and devices[0].max_sm_clock_mhz == 1980
        # Device and profiling fields at the collect interval, costly ones at the slow interval.
        watched = engine.watched(0)
        assert watched[203] == watched[1002] == 100_000
        assert watched[156] == watched[310] == 1_000_000
        assert set(range(1001, 1017)) <= set(watched)  # a Hopper GPU: every supported field, no pass limit
        assert dcgm.profiling_answers(PATIENCE)
        sample = dcgm.collect()[0]
    finally:
        dcgm.close()
    matmul = trace_paths["matmul_8192"]
    assert sample.up and sample.profiling_available
    assert round(sample.profiling.sm_active, 6) in trace_values(matmul, "SM_UTIL", 0.01)
    assert round(sample.profiling.tensor_active, 6) in trace_values(matmul, "ANY_TENSOR_UTIL", 0.01)
    assert round(sample.profiling.dram_active, 6) in trace_values(matmul, "DRAM_BW_UTIL", 0.01)
    # Bytes per second: DCGM's unit already; the trace holds MiB/s (integer bytes in DCGM).
    assert any(abs(sample.profiling.pcie_tx_bytes_per_second - v) <= 1 for v in trace_values(matmul, "PCIE_TX_PER_SEC", MIB))
    assert round(sample.gpu_utilization, 6) in trace_values(matmul, "util_gpu", 0.01)
    assert round(sample.power_watts, 6) in trace_values(matmul, "power_mw", 0.001)
    assert sample.memory_total_bytes == load_trace(matmul).samples[0]["mem_total"] // MIB * MIB
    assert sample.energy_joules is not None and sample.energy_joules >= 0
    assert sample.window_seconds == pytest.approx(0.1)  # DCGM updates at our watch interval here
    assert set(sample.profiling.readings()) == {
        "graphics_active", "sm_active", "sm_occupancy", "tensor_active", "tensor_hmma_active", "tensor_imma_active", "tensor_dfma_active",
        "dram_active", "fp64_active", "fp32_active", "fp16_active", "integer_active",
        "pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second", "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second",
    }


def test_blank_values_are_missing_never_zero(dcgm_engine):
    dcgm = backend(interval=1.0)
    dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        first = dcgm.collect()[0]
        # Profiling ratios are blank until DCGM's second update: no profiling values, not zeros.
        assert first.profiling.readings() == {} and not first.profiling_available
        engine.blank.update({(0, 155), (0, 1004)})
        engine.values[(0, 1002)] = 0.5
        engine.frozen_us = engine.now_us() + 2_000_000  # two updates done
        sample = dcgm.collect()[0]
        readings = dcgm.readings()["GPU-fakedcgm-0-matmul_8192"]
    finally:
        dcgm.close()
    assert sample.power_watts is None and readings[155].status == "blank"  # DCGM_FP64_NOT_SUPPORTED
    assert sample.profiling.tensor_active is None and readings[1004].status == "blank"
    assert sample.memory_temperature_celsius is None and readings[140].status == "blank"  # DCGM_INT64_NOT_SUPPORTED: not in the trace
    assert sample.profiling.sm_active == 0.5 and sample.profiling_available
    assert sample.gpu_utilization is not None


@pytest.mark.parametrize(("naming", "sm_name", "util_name"), [("4.6", "DCGM_FI_PROF_SM_UTIL_RATIO", "DCGM_FI_DEV_GPU_UTIL_RATIO"), ("3", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL")])
def test_fields_resolve_by_id_under_old_and_new_names(dcgm_engine, naming, sm_name, util_name):
    dcgm_engine.CONTROL.naming = naming
    dcgm = backend()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # legacy names are only a fallback
        dcgm.start()
    try:
        names = {resolved.field_id: resolved.name for resolved in dcgm.fields}
        assert names[1002] == sm_name and names[203] == util_name
        assert dcgm.profiling_answers(PATIENCE)
    finally:
        dcgm.close()


def test_without_a_metadata_lookup_the_bindings_names_decide(dcgm_engine, monkeypatch):
    import dcgm_fields

    dcgm_engine.CONTROL.naming = "3"
    monkeypatch.delattr(dcgm_fields, "DcgmFieldGetById")
    monkeypatch.setattr(dcgm_fields, "_LEGACY", {k: v for k, v in dcgm_fields._LEGACY.items() if v != 1016})  # a DCGM without field 1016
    dcgm = backend()
    dcgm.start()
    try:
        assert {resolved.field_id: resolved.name for resolved in dcgm.fields}[1004] == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
        assert sorted(spec.field_id for spec in dcgm.unknown_fields) == [1016, *range(1084, 1097)]  # DCGM 3 has no cycle counters either
        assert dcgm.profiling_answers(PATIENCE)
    finally:
        dcgm.close()


def test_a_field_unknown_to_this_dcgm_is_left_out_and_the_rest_works(dcgm_engine):
    import dcgm_fields

    dcgm_engine.CONTROL.known_field_ids = set(dcgm_fields.FIELD_NAMES) - {1016, 1015}
    dcgm = backend()
    dcgm.start()
    try:
        assert {spec.field_id for spec in dcgm.unknown_fields} == {1015, 1016}
        assert dcgm.profiling_answers(PATIENCE)
        sample = dcgm.collect()[0]
    finally:
        dcgm.close()
    assert sample.profiling.integer_active is None and sample.profiling.tensor_dfma_active is None
    assert sample.profiling.sm_active is not None


def test_profiling_refused_leaves_device_fields_working(dcgm_engine, caplog):
    dcgm_engine.CONTROL.profiling_refusal = "DCGM_ST_IN_USE"
    dcgm = backend()
    with caplog.at_level(logging.WARNING):
        dcgm.start()
    try:
        assert not dcgm.profiling_answers(0.3)
        sample = dcgm.collect()[0]
    finally:
        dcgm.close()
    assert "DCGM_ST_IN_USE" in dcgm.profiling_refused and "Nsight" in caplog.text
    assert dcgm.profiling["GPU-fakedcgm-0-matmul_8192"].watched == frozenset()
    assert sample.up and sample.gpu_utilization is not None and sample.profiling.readings() == {} and not sample.profiling_available


def test_host_engine_restart_turns_gpus_down_then_reconnects_with_backoff_and_no_stale_values(dcgm_engine, caplog):
    engine = dcgm_engine.serve("127.0.0.1:5555")
    clock = FakeClock()
    dcgm = backend(clock=clock, host="127.0.0.1:5555")
    dcgm.start()
    try:
        time.sleep(0.25)  # two watch updates: profiling answers
        assert all(s.up for s in dcgm.collect()) and dcgm.collect()[0].profiling_available
        engine.stop()
        with caplog.at_level(logging.WARNING):
            lost = dcgm.collect()
        assert [s.up for s in lost] == [False, False] and dcgm.errors_total == 1
        assert "lost DCGM" in caplog.text and "reconnecting in 1s" in caplog.text
        clock.now += 0.5
        assert not any(s.up for s in dcgm.collect())  # back-off not over: no attempt
        clock.now += 0.6
        assert not any(s.up for s in dcgm.collect())  # attempt fails: the engine is still down
        assert "next try in 2s" in caplog.text
        engine.restart()  # a new nv-hostengine: nothing watched, old connection invalid
        clock.now += 1.0
        assert not any(s.up for s in dcgm.collect())  # back-off (2s) not over yet
        clock.now += 1.1
        engine.freeze()  # DCGM's clock stands still across the reconnect, however slow this machine is
        back = dcgm.collect()
        assert [s.up for s in back] == [True, True]
        # The new engine's profiling watch has not updated twice yet: nothing from before the restart is served.
        assert back[0].profiling.readings() == {} and 1002 in engine.watched(0)
        engine.frozen_us = None
        wait_until(lambda: dcgm.collect()[0].profiling_available, "profiling from the new host engine")
    finally:
        dcgm.close()


def test_standalone_without_a_host_engine_is_unavailable(dcgm_engine):
    with pytest.raises(BackendUnavailable, match="nv-hostengine at 127.0.0.1:5599.*DCGM_ST_CONNECTION_NOT_VALID"):
        backend(host="127.0.0.1:5599").start()


def test_values_that_stop_updating_are_not_served(dcgm_engine):
    clock = FakeClock()
    dcgm = backend(clock=clock)
    dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        assert dcgm.collect()[0].up
        engine.freeze()  # DCGM's cache stops updating: every timestamp stays where it is
        assert dcgm.collect()[0].power_watts is not None
        clock.now += 3 * 0.1 + 2.5
        stale = dcgm.collect()
    finally:
        dcgm.close()
    assert [s.up for s in stale] == [False, False]


def test_xid_events_are_counted_once_each(dcgm_engine):
    dcgm = backend()
    dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        assert dcgm.collect()[0].xid_errors == {}
        engine.inject_xid(0, 79)
        time.sleep(0.001)
        assert dcgm.collect()[0].xid_errors == {79: 1}
        assert dcgm.collect()[0].xid_errors == {79: 1}
        time.sleep(0.001)
        engine.inject_xid(0, 79)
        assert dcgm.collect()[0].xid_errors == {79: 2} and dcgm.collect()[1].xid_errors == {}
    finally:
        dcgm.close()


def test_missing_bindings_or_library_say_where_and_what(dcgm_engine, tmp_path):
    with pytest.raises(BackendUnavailable, match=f"DCGM Python bindings not found: looked in {tmp_path}"):
        load_bindings(str(tmp_path))
    dcgm_engine.CONTROL.no_library = True
    with pytest.raises(BackendUnavailable, match="DCGM_ST_LIBRARY_NOT_FOUND"):
        backend().start()


# ---- --backend auto ---------------------------------------------------------------------------


def fake_nvml(trace_paths, gpm: bool) -> NvmlBackend:
    return NvmlBackend(nvml=FakeNvml([FakeGpu(load_trace(trace_paths["idle"]), gpm=gpm)]))


def test_auto_picks_dcgm_when_its_profiling_fields_answer(dcgm_engine, trace_paths, caplog):
    auto = AutoBackend(backend, lambda: fake_nvml(trace_paths, gpm=True), probe_timeout=PATIENCE)
    with caplog.at_level(logging.INFO):
        devices = auto.start()
    try:
        assert auto.name == "dcgm" and len(devices) == 2
        assert "using DCGM (embedded host engine" in caplog.text
        assert auto.collect()[0].profiling_available
    finally:
        auto.close()


def test_auto_falls_back_to_nvml_with_gpm_when_dcgm_gives_no_profiling(dcgm_engine, trace_paths, caplog):
    dcgm_engine.CONTROL.profiling_refusal = "DCGM_ST_PROFILING_NOT_SUPPORTED"
    auto = AutoBackend(backend, lambda: fake_nvml(trace_paths, gpm=True), probe_timeout=1.0)
    with caplog.at_level(logging.INFO):
        auto.start()
    try:
        assert auto.name == "nvml"
        assert "not using DCGM for profiling: DCGM runs but gives no profiling fields (DCGM_ST_PROFILING_NOT_SUPPORTED" in caplog.text
        assert "using NVML with GPM profiling metrics on all 1 GPU(s)" in caplog.text
        assert dcgm_engine.CONTROL.embedded[-1].running is False  # the DCGM engine was stopped again
    finally:
        auto.close()


def test_auto_says_when_nothing_gives_profiling(dcgm_engine, trace_paths, caplog):
    missing = str(ROOT / "no-such-bindings")
    auto = AutoBackend(lambda: DcgmBackend(missing), lambda: fake_nvml(trace_paths, gpm=False), probe_timeout=1.0)
    with caplog.at_level(logging.INFO):
        auto.start()
    try:
        assert auto.name == "nvml" and not any(s.profiling_available for s in auto.collect())
        assert "using NVML WITHOUT profiling metrics" in caplog.text and "DCGM Python bindings not found" in caplog.text
    finally:
        auto.close()


class NoNvml(NvmlBackend):
    def start(self):
        raise BackendUnavailable("cannot initialise NVML (no driver)")


def test_auto_keeps_dcgm_without_profiling_when_nvml_fails_too(dcgm_engine, caplog):
    dcgm_engine.CONTROL.profiling_refusal = "DCGM_ST_REQUIRES_ROOT"
    auto = AutoBackend(backend, NoNvml, probe_timeout=1.0)
    with caplog.at_level(logging.WARNING):
        devices = auto.start()
    try:
        assert auto.name == "dcgm" and len(devices) == 2 and auto.collect()[0].gpu_utilization is not None
        assert "using DCGM WITHOUT profiling metrics: NVML is not usable" in caplog.text
    finally:
        auto.close()


def test_auto_names_both_reasons_when_no_live_backend_works(dcgm_engine):
    auto = AutoBackend(lambda: DcgmBackend(str(ROOT / "nowhere")), NoNvml, probe_timeout=1.0)
    with pytest.raises(BackendUnavailable, match=r"no live backend works here\. DCGM: DCGM is not usable \(DCGM Python bindings not found.*NVML: cannot initialise NVML"):
        auto.start()


# ---- the daemon ---------------------------------------------------------------------------------


def wait_for(daemon, predicate, timeout: float = PATIENCE) -> str:
    deadline = time.monotonic() + timeout
    while True:
        body = daemon.metrics()
        if predicate(body):
            return body
        assert time.monotonic() < deadline, body[-3000:]
        time.sleep(0.1)


def test_daemon_serves_dcgm_readings_and_survives_a_host_engine_restart(trace_paths, tmp_path):
    stop_file = tmp_path / "hostengine-stopped"
    env = {"FAKE_DCGM_SERVE": "127.0.0.1:5555", "FAKE_DCGM_STOP_FILE": str(stop_file), "FAKE_DCGM_TRACES": str(trace_paths["matmul_8192"])}
    up = 'gpueff_gpu_up{gpu="0",uuid="GPU-fakedcgm-0-matmul_8192"} 1'
    with running_daemon("--backend", "dcgm", "--dcgm.bindings-path", FAKE, "--dcgm.host", "127.0.0.1:5555", "--collect-interval", "100ms", env=env) as daemon:
        body = wait_for(daemon, lambda b: "gpueff_sm_active_ratio{" in b)
        assert up in body and 'backend="dcgm"' in body
        assert 'gpueff_bottleneck{gpu="0",uuid="GPU-fakedcgm-0-matmul_8192",class="compute"} 1' in wait_for(daemon, lambda b: 'class="compute"} 1' in b)
        stop_file.touch()
        down = wait_for(daemon, lambda b: 'gpueff_gpu_up{gpu="0",uuid="GPU-fakedcgm-0-matmul_8192"} 0' in b)
        assert "gpueff_sm_active_ratio{" not in down and "gpueff_power_watts{" not in down
        os.unlink(stop_file)
        assert "gpueff_sm_active_ratio{" in wait_for(daemon, lambda b: up in b and "gpueff_sm_active_ratio{" in b)


# ---- the real DCGM's behaviours (each encoded in tests/support/fakes/dcgm with the DCGM source it follows) ----


def step(engine, seconds: float) -> None:
    """Move DCGM's clock (and so its cache updates) forward."""
    engine.frozen_us = engine.now_us() + int(seconds * 1_000_000)


def sm_active_over_polls(dcgm: DcgmBackend, engine, polls: int) -> list[float | None]:
    """GPU 0's SM activity over ``polls`` collects, DCGM's clock moved 0.1 s before each."""
    readings = []
    for _ in range(polls):
        step(engine, 0.1)
        readings.append(dcgm.collect()[0].profiling.sm_active)
    return readings


def test_bindings_folder_never_goes_on_sys_path_so_its_common_package_shadows_nothing(dcgm_engine, tmp_path, monkeypatch):
    import shutil
    import sys

    folder = tmp_path / "bindings"
    shutil.copytree(FAKE, folder, ignore=shutil.ignore_patterns("__pycache__", "fake_hostengine.py"))
    (folder / "common").mkdir()
    (folder / "common" / "__init__.py").write_text("SHADOWED = True\n")  # DCGM ships a top-level `common` package
    for name in ("dcgmvalue", "dcgm_structs", "dcgm_fields", "dcgm_agent"):
        monkeypatch.delitem(sys.modules, name)
    before = list(sys.path)
    bindings = load_bindings(str(folder))
    assert sys.path == before
    assert bindings.agent.__file__ == str(folder.resolve() / "dcgm_agent.py")
    assert "common" not in sys.modules or not getattr(sys.modules["common"], "SHADOWED", False)
    with pytest.raises(BackendUnavailable, match="dcgmvalue from .* is already imported"):
        load_bindings(FAKE)


def test_only_the_profiling_fields_a_gpu_supports_are_watched(dcgm_engine):
    """An L4 has no NVLink: watching 1011 there is refused, and a watch is all or nothing (DCGM asks first)."""
    dcgm_engine.CONTROL.gpu_kinds = ["l4", "l4"]
    dcgm = backend()
    dcgm.start()
    try:
        support = dcgm.profiling["GPU-fakedcgm-0-matmul_8192"]
        assert support.supported == frozenset({1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010})
        assert support.watched == frozenset({1001, 1002, 1003, 1004, 1005, 1007, 1009, 1010}) and support.refused == {}
        assert dcgm.profiling_answers(PATIENCE)
        sample = dcgm.collect()[0]
    finally:
        dcgm.close()
    assert sample.profiling.nvlink_tx_bytes_per_second is None and sample.profiling.sm_active > 0


def test_before_hopper_one_pass_is_watched_by_default_so_no_zero_comes_from_multiplexing(dcgm_engine):
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]
    dcgm = backend()
    dcgm.start()
    try:
        support = dcgm.profiling["GPU-fakedcgm-0-matmul_8192"]
        # One metric group per major ID: SM activity's group of major 1, not FP64's, FP16's or the tensor types'.
        assert support.watched == frozenset({1001, 1002, 1003, 1004, 1005, 1007, 1009, 1010, 1011, 1012})
        readings = sm_active_over_polls(dcgm, dcgm_engine.CONTROL.embedded[-1], 6)
    finally:
        dcgm.close()
    assert all(value is not None and value > 0.5 for value in readings[1:]), readings


def test_the_multi_pass_option_watches_every_supported_field_and_then_zeros_can_be_multiplexing(dcgm_engine):
    """DCGM issue 169: a field whose pass did not run reads 0. The option is there; its cost is documented."""
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]
    dcgm = DcgmBackend(FAKE, collect_interval=0.1, slow_interval=1.0, multi_pass=True)
    dcgm.start()
    try:
        assert dcgm.profiling["GPU-fakedcgm-0-matmul_8192"].watched == frozenset(range(1001, 1017))
        readings = sm_active_over_polls(dcgm, dcgm_engine.CONTROL.embedded[-1], 8)
    finally:
        dcgm.close()
    assert 0.0 in readings and any(value and value > 0.5 for value in readings), readings  # a busy GPU "idle" every other pass


@pytest.mark.parametrize(("kind", "refused", "kept"), [("hopper", 1003, {1001, 1002, 1004, 1016}), ("ampere", 1007, {1002, 1003, 1004, 1005})])
def test_a_refused_profiling_watch_retries_smaller_and_never_loses_sm_activity(dcgm_engine, caplog, kind, refused, kept):
    dcgm_engine.CONTROL.gpu_kinds = [kind, kind]
    dcgm_engine.CONTROL.refuse_fields = {refused}  # DCGM lists it, yet refuses a watch that holds it
    dcgm = backend()
    with caplog.at_level(logging.INFO):
        dcgm.start()
    try:
        support = dcgm.profiling["GPU-fakedcgm-0-matmul_8192"]
        assert kept <= support.watched and refused not in support.watched
        assert support.refused[refused].startswith("DCGM_ST_NOT_SUPPORTED")
        assert dcgm.profiling_refused is None and dcgm.profiling_answers(PATIENCE)
    finally:
        dcgm.close()
    assert "watching them group by group" in caplog.text


def test_an_older_dcgm_that_refuses_multi_pass_still_gives_the_first_pass_and_keeps_it_fresh(dcgm_engine):
    """The refused later part (1006, a second metric group of SM activity's major) makes the host engine
    unwatch its whole DCGM group in the profiling module (DcgmHostEngineHandler.cpp WatchFieldGroup ->
    UnwatchFieldGroup; dcgmProfUnwatchFields_v1 names no fields): the part accepted before it must not
    be on that group, or SM activity stops updating while the exporter believes it watched."""
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]
    dcgm_engine.CONTROL.multi_pass = "refuse"  # DCGM_ST_PROFILING_MULTI_PASS instead of multiplexing
    clock = FakeClock()
    dcgm = DcgmBackend(FAKE, collect_interval=0.1, slow_interval=1.0, multi_pass=True, clock=clock)
    dcgm.start()
    try:
        support = dcgm.profiling["GPU-fakedcgm-0-matmul_8192"]
        assert {1001, 1002, 1003, 1004, 1005, 1007} <= support.watched
        assert support.refused[1006].startswith("DCGM_ST_PROFILING_MULTI_PASS")
        engine = dcgm_engine.CONTROL.embedded[-1]
        readings = []
        for _ in range(6):  # 6 s: far past the 2.3 s after which a value that stopped updating is stale
            step(engine, 1.0)
            clock.now += 1.0
            readings.append(dcgm.collect()[0].profiling.sm_active)
    finally:
        dcgm.close()
    assert all(value is not None for value in readings), readings


def test_different_gpus_get_their_own_profiling_watch(dcgm_engine):
    """DCGM watches profiling fields only on a group of identical GPUs (else DCGM_ST_GROUP_INCOMPATIBLE)."""
    dcgm_engine.CONTROL.gpu_kinds = ["hopper", "l4"]
    dcgm = backend()
    dcgm.start()
    try:
        assert dcgm.profiling["GPU-fakedcgm-0-matmul_8192"].watched == frozenset(range(1001, 1017))
        assert 1011 not in dcgm.profiling["GPU-fakedcgm-1-idle"].watched and 1002 in dcgm.profiling["GPU-fakedcgm-1-idle"].watched
        time.sleep(0.25)
        samples = dcgm.collect()
    finally:
        dcgm.close()
    assert all(s.profiling_available for s in samples)
    assert samples[0].profiling.nvlink_tx_bytes_per_second is not None and samples[1].profiling.nvlink_tx_bytes_per_second is None


def test_a_gpu_without_profiling_says_why_while_the_others_give_it(dcgm_engine, caplog):
    dcgm_engine.CONTROL.gpu_kinds = ["hopper", "pascal"]
    dcgm = backend()
    with caplog.at_level(logging.WARNING):
        dcgm.start()
    try:
        assert dcgm.profiling["GPU-fakedcgm-1-idle"].not_supported.startswith("DCGM_ST_NOT_SUPPORTED")
        assert dcgm.profiling_refused is None and dcgm.profiling_answers(PATIENCE)
        assert [s.up for s in dcgm.collect()] == [True, True]
    finally:
        dcgm.close()
    assert "GPU 1 (Tesla P100-PCIE-16GB): no SM activity from DCGM (DCGM_ST_NOT_SUPPORTED: this GPU does not support profiling metrics" in caplog.text


@pytest.mark.parametrize("gpu_status", [True, False], ids=["dcgm4", "dcgm3-no-dcgmGetGpuStatus"])
def test_a_lost_gpu_reads_blank_with_status_ok_and_is_reported_down_alone(dcgm_engine, monkeypatch, caplog, gpu_status):
    import dcgm_agent

    if not gpu_status:
        monkeypatch.delattr(dcgm_agent, "dcgmGetGpuStatus")
    dcgm = backend()
    dcgm.start()
    try:
        assert all(s.up for s in dcgm.collect())
        dcgm_engine.CONTROL.embedded[-1].lost.add(1)
        with caplog.at_level(logging.WARNING):
            samples = dcgm.collect()
        readings = dcgm.readings()["GPU-fakedcgm-1-idle"]
    finally:
        dcgm.close()
    assert [s.up for s in samples] == [True, False]
    assert readings[203].status == "blank" and readings[150].status == "blank"  # status OK, fresh timestamp, DCGM_INT64_BLANK
    assert ("DCGM reports it lost" if gpu_status else "none of its device fields has a value (blank)") in caplog.text


def test_two_exporters_share_one_host_engine_with_their_own_field_group_names(dcgm_engine):
    """Field-group names are unique per host engine (DUPLICATE_KEY); two containers may both be PID 1."""
    engine = dcgm_engine.serve("127.0.0.1:5555")
    first, second = backend(host="127.0.0.1:5555"), backend(host="127.0.0.1:5555")
    first.start()
    second.start()
    try:
        names = [name for name, _fields, _owner in engine.field_groups.values()]
        assert len(names) == len(set(names)) >= 6 and not any(str(os.getpid()) in name for name in names)
        time.sleep(0.25)
        assert first.collect()[0].profiling_available and second.collect()[0].profiling_available
    finally:
        first.close()
        second.close()
    assert engine.field_groups == {} and engine.watches == {}  # each one's groups and watches went with it


def test_a_taken_name_draws_a_new_one(dcgm_engine):
    dcgm_engine.serve("127.0.0.1:5555")
    tokens = iter(["same", "same", "fresh"])
    first = DcgmBackend(FAKE, "127.0.0.1:5555", 0.1, 1.0, name_token=lambda: next(tokens))
    second = DcgmBackend(FAKE, "127.0.0.1:5555", 0.1, 1.0, name_token=lambda: next(tokens))
    first.start()
    try:
        second.start()  # its first name clashes with the first exporter's: DCGM_ST_DUPLICATE_KEY, then a new token
        second.close()
    finally:
        first.close()


def test_requires_root_says_who_must_be_root_in_embedded_and_standalone_mode(dcgm_engine):
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]  # the profiling module's GPUs: GPM needs no root
    dcgm_engine.CONTROL.root = False  # the exporter runs as a normal user
    embedded = backend()
    embedded.start()
    embedded.close()
    assert "the exporter itself must run as root" in embedded.profiling_refused
    dcgm_engine.serve("127.0.0.1:5555", root=False)
    standalone = backend(host="127.0.0.1:5555")
    standalone.start()
    standalone.close()
    assert "DCGM_ST_REQUIRES_ROOT: the nv-hostengine at 127.0.0.1:5555 must run as root" in standalone.profiling_refused


def test_a_pause_file_pauses_embedded_profiling_and_values_stay_missing_never_zero(dcgm_engine, tmp_path, caplog):
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]  # pausing is for the profiling module's GPUs
    pause = tmp_path / "pause-profiling"
    dcgm = DcgmBackend(FAKE, collect_interval=0.1, slow_interval=1.0, pause_file=str(pause))
    dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        step(engine, 0.2)
        assert dcgm.collect()[0].profiling_available
        pause.touch()
        with caplog.at_level(logging.WARNING):
            paused = dcgm.collect()[0]
        assert engine.paused and "DCGM profiling paused" in caplog.text
        assert paused.up and paused.profiling.readings() == {} and not paused.profiling_available and paused.gpu_utilization is not None
        assert dcgm.readings()["GPU-fakedcgm-0-matmul_8192"][1002].status == "paused"
        pause.unlink()
        engine.frozen_us = int(time.time() * 1_000_000)  # DCGM's clock (embedded: this machine's) at the resume
        resumed = dcgm.collect()[0]
        assert not engine.paused and resumed.profiling.readings() == {}  # the value at the resume may cover paused time
        engine.frozen_us = None  # DCGM's clock runs again: updates after the resume count
        time.sleep(0.45)
        assert dcgm.collect()[0].profiling_available
    finally:
        dcgm.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="makes files of another user (chown): needs root")
def test_another_users_pause_file_in_a_folder_anyone_can_write_pauses_nothing(dcgm_engine, tmp_path, caplog):
    """A tenant who could create the pause file could hide every GPU's SM activity: in a folder like
    /tmp only root's (or the exporter's user's) file counts, and a planted symbolic link is not followed."""
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # /tmp's mode
    pause = shared / "pause-profiling"
    dcgm = DcgmBackend(FAKE, collect_interval=0.1, slow_interval=1.0, pause_file=str(pause))
    dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        pause.touch()
        os.chown(pause, 4242, 4242)  # a tenant's file
        with caplog.at_level(logging.WARNING):
            dcgm.collect()
        assert not engine.paused
        assert f"DCGM profiling not paused: {pause} is there, but it is owned by uid 4242 in {shared}, which anyone can write to" in caplog.text
        pause.unlink()
        pause.symlink_to(tmp_path)  # root's folder, through the tenant's link
        os.lchown(pause, 4242, 4242)
        dcgm.collect()
        assert not engine.paused
        pause.unlink()
        pause.touch()  # root's own file
        dcgm.collect()
        assert engine.paused
    finally:
        dcgm.close()


def test_a_pause_file_in_a_folder_of_the_operators_counts_whoever_made_it(tmp_path):
    from gpueff.backends.dcgm.pause import pause_requested

    pause = tmp_path / "pause-profiling"
    assert pause_requested(str(pause)) == (False, None)
    pause.touch()
    assert pause_requested(str(pause)) == (True, None)
    if os.geteuid() == 0:
        os.chown(pause, 4242, 4242)  # a user the operator let write to its folder (not writable by others)
        tmp_path.chmod(0o775)
        assert pause_requested(str(pause)) == (True, None)


def test_standalone_pause_is_dcgmi_profile_pause_and_reads_missing(dcgm_engine):
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "ampere"]
    engine = dcgm_engine.serve("127.0.0.1:5555")
    with pytest.raises(BackendUnavailable, match="dcgmi profile --pause"):
        DcgmBackend(FAKE, "127.0.0.1:5555", pause_file="/tmp/whatever").start()
    dcgm = backend(host="127.0.0.1:5555")
    dcgm.start()
    try:
        time.sleep(0.25)
        assert dcgm.collect()[0].profiling_available
        engine.paused = True  # someone ran `dcgmi profile --pause`: DCGM stores blank values
        time.sleep(0.15)
        sample = dcgm.collect()[0]
    finally:
        dcgm.close()
    assert sample.up and sample.profiling.readings() == {}


def test_fields_dcgm_stops_watching_read_not_watched_and_the_watches_come_back(dcgm_engine):
    clock = FakeClock()
    dcgm = backend(clock=clock)
    dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        assert all(s.up for s in dcgm.collect())
        engine.watches.clear()
        assert not any(s.up for s in dcgm.collect())
        clock.now += 1.1
        assert all(s.up for s in dcgm.collect()) and 203 in dcgm_engine.CONTROL.embedded[-1].watched(0)  # a new embedded engine
    finally:
        dcgm.close()


def test_a_faster_client_of_a_shared_engine_gives_the_poll_windows_mean_not_its_last_sample(dcgm_engine):
    """A shared host engine updates a field at its fastest client's interval (DcgmCacheManager.cpp): the
    exporter averages every sample of its poll window (dcgmGetValuesSince) instead of exporting the last."""
    dcgm = backend(interval=0.2)
    dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        engine.watch_as_another_client(0, [1002], 50_000)  # dcgmi dmon or dcgm-exporter at 50 ms
        engine.values[(0, 1002)] = lambda ts: 1.0 if (ts // 50_000) % 4 == 0 else 0.0  # busy one sample in four
        start = min(w.start_us for w in engine.watches[((1, 0), 1002)].values())
        engine.frozen_us = start + 230_000
        dcgm.collect()
        for poll in range(1, 4):
            engine.frozen_us = start + 230_000 + poll * 200_000
            sample = dcgm.collect()[0]
            assert sample.window_seconds == pytest.approx(0.2)  # four 50 ms samples: the whole poll window
            assert sample.profiling.sm_active == pytest.approx(0.25)  # their mean, not the last one's 0 or 1
    finally:
        dcgm.close()


def test_daemon_pauses_embedded_profiling_while_the_pause_file_exists(trace_paths, tmp_path):
    pause = tmp_path / "pause-profiling"
    env = {"FAKE_DCGM_TRACES": str(trace_paths["matmul_8192"]), "FAKE_DCGM_GPUS": "ampere"}
    profiling = 'gpueff_profiling_available{gpu="0",uuid="GPU-fakedcgm-0-matmul_8192"}'
    with running_daemon("--backend", "dcgm", "--dcgm.bindings-path", FAKE, "--dcgm.pause-file", str(pause), "--collect-interval", "100ms", env=env) as daemon:
        wait_for(daemon, lambda b: "gpueff_sm_active_ratio{" in b and f"{profiling} 1" in b)
        pause.touch()
        paused = wait_for(daemon, lambda b: f"{profiling} 0" in b)
        assert "gpueff_sm_active_ratio{" not in paused and "gpueff_tensor_active_ratio{" not in paused
        assert 'gpueff_gpu_up{gpu="0",uuid="GPU-fakedcgm-0-matmul_8192"} 1' in paused and "gpueff_power_watts{" in paused
        pause.unlink()
        wait_for(daemon, lambda b: "gpueff_sm_active_ratio{" in b and f"{profiling} 1" in b)


def test_daemon_as_a_normal_user_serves_device_metrics_without_profiling(trace_paths):
    env = {"FAKE_DCGM_TRACES": str(trace_paths["matmul_8192"]), "FAKE_DCGM_ROOT": "0", "FAKE_DCGM_GPUS": "ampere"}
    with running_daemon("--backend", "dcgm", "--dcgm.bindings-path", FAKE, "--collect-interval", "100ms", env=env) as daemon:
        body = wait_for(daemon, lambda b: "gpueff_power_watts{" in b)
        daemon.stop()
        assert 'gpueff_profiling_available{gpu="0",uuid="GPU-fakedcgm-0-matmul_8192"} 0' in body and "gpueff_sm_active_ratio{" not in body
    assert "the exporter itself must run as root" in daemon.output


def test_a_profiling_watch_refused_while_nsight_holds_the_counters_is_tried_again(dcgm_engine):
    dcgm_engine.CONTROL.profiling_refusal = "DCGM_ST_IN_USE"
    dcgm_engine.CONTROL.gpu_kinds = ["ampere", "l4"]  # two profiling groups of their own
    clock = FakeClock()
    dcgm = backend(clock=clock)
    dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        groups = len(engine.groups)
        assert dcgm.profiling_refused.startswith("DCGM_ST_IN_USE") and not dcgm.collect()[0].profiling_available
        clock.now += 61
        dcgm.collect()  # still in use: tried again, refused again, and no DCGM group left behind
        assert len(engine.groups) == groups and dcgm.profiling_refused.startswith("DCGM_ST_IN_USE")
        dcgm_engine.CONTROL.profiling_refusal = None  # the profiler is done
        clock.now += 61
        dcgm.collect()  # the wait doubled: not tried yet
        assert dcgm.profiling_refused is not None
        clock.now += 60
        dcgm.collect()
        assert dcgm.profiling_refused is None and 1002 in engine.watched(0) and 1002 in engine.watched(1)
        time.sleep(0.25)
        assert all(s.profiling_available for s in dcgm.collect())
    finally:
        dcgm.close()


@pytest.mark.parametrize("architecture_call", [True, False], ids=["dcgmGetGpuChipArchitecture", "compute-capability-field"])
@pytest.mark.parametrize(("kind", "watched"), [("hopper", 16), ("ampere", 10)])
def test_the_one_pass_rule_applies_before_hopper_told_by_architecture_or_compute_capability(dcgm_engine, monkeypatch, architecture_call, kind, watched):
    import dcgm_agent

    if not architecture_call:  # DCGM before 4.2.3
        monkeypatch.delattr(dcgm_agent, "dcgmGetGpuChipArchitecture")
    dcgm_engine.CONTROL.gpu_kinds = [kind, kind]
    dcgm = backend()
    dcgm.start()
    try:
        support = dcgm.profiling["GPU-fakedcgm-0-matmul_8192"]
    finally:
        dcgm.close()
    assert len(support.watched) == watched and support.one_pass_limited == (kind != "hopper")


def test_answers_in_any_order_land_on_their_gpu_and_field(dcgm_engine, trace_paths):
    dcgm = backend()
    dcgm.start()
    try:
        time.sleep(0.25)
        session = dcgm.session
        orders = [[(v.entityId, v.fieldId) for v in session.latest(session.entities([0, 1]), [203, 1002])] for _ in range(5)]
        assert all(sorted(order) == [(0, 203), (0, 1002), (1, 203), (1, 1002)] for order in orders)
        assert any(order != sorted(order) for order in orders)
        busy, idle = dcgm.collect()
    finally:
        dcgm.close()
    assert round(busy.profiling.sm_active, 6) in trace_values(trace_paths["matmul_8192"], "SM_UTIL", 0.01)
    assert round(idle.profiling.sm_active, 6) in trace_values(trace_paths["idle"], "SM_UTIL", 0.01)
    assert round(idle.gpu_utilization, 6) in trace_values(trace_paths["idle"], "util_gpu", 0.01)


def test_the_windows_utilization_is_the_mean_of_field_203s_samples_in_it(dcgm_engine, trace_paths):
    """Field 203 (NVML's utilization, copy engines included) is sampled at the driver's own period and
    every sample of the poll window is averaged: nvidia-smi's figure over the window, not its latest."""
    dcgm = backend(interval=1.0)
    dcgm.start()
    try:
        engine = dcgm_engine.CONTROL.embedded[-1]
        assert engine.watched(0)[203] == 200_000
        first = dcgm.collect()[0]
        time.sleep(0.9)
        sample = dcgm.collect()[0]
    finally:
        dcgm.close()
    assert first.gpu_utilization_window is None  # the cache from before the first window is not a window
    recorded = [record["util_gpu"] / 100 for record in load_trace(trace_paths["matmul_8192"]).samples]
    assert sample.gpu_utilization_window is not None and min(recorded) <= sample.gpu_utilization_window <= max(recorded)


def test_profiling_frozen_at_0_under_load_is_flagged_and_wastes_nothing(dcgm_engine, tmp_path):
    """DCGM issue 303: after an Xid the profiling module decodes no samples and every DCGM_FI_PROF_*
    field reads 0, while DCGM_FI_DEV_GPU_UTIL reads 100. The window is implausible: class unknown,
    no mismatch, no point estimate, no busy-but-idle time."""
    from gpueff.poller import Poller
    from gpueff.settings import Config

    dcgm_engine.CONTROL.traces = [str(frozen_trace_file(tmp_path))]
    dcgm = backend(interval=0.1)
    poller = Poller(dcgm, Config(collect_interval=0.1))
    poller._devices = dcgm.start()
    try:
        assert dcgm.profiling_answers(PATIENCE)
        states = []
        deadline = time.monotonic() + PATIENCE
        while len(states) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
            state = poller.poll_once().gpus[0]
            if state.sample.profiling.sm_active is not None:
                states.append(state)
    finally:
        dcgm.close()
    assert len(states) == 5 and all(state.sample.profiling.sm_active == 0 and state.sample.gpu_utilization >= 0.9 for state in states)
    for state in states:
        derived = state.derived
        assert derived.implausible["profiling_zero_under_load"] and derived.bottleneck == "unknown"
        assert not any(derived.mismatch.values()) and derived.estimated_flops is None
    assert states[-1].totals.busy_idle_sm_seconds == 0


def test_dcgm_46s_monotonic_counters_are_read_and_exported(dcgm_engine):
    """Fields 1084-1096 (DCGM 4.6, dcgm_fields.h): raw SM and pipe cycle counts and PCIe bytes since
    the driver loaded, read with the device fields and exported as counters, so increase(active) /
    increase(elapsed) over any range is that range's exact activity."""
    from gpueff.exposition.render import render
    from gpueff.poller import Poller
    from gpueff.settings import Config

    dcgm = backend(interval=0.1)
    poller = Poller(dcgm, Config(collect_interval=0.1))
    poller._devices = dcgm.start()
    engine = dcgm_engine.CONTROL.embedded[-1]
    clock_hz, active_share, hmma_share = 1.4e9, 0.95, 0.92  # a power-capped matmul: elapsed cycles grow at the clock
    engine.values[(0, 1084)] = lambda ts: float(int(ts / 1e6 * clock_hz))
    engine.values[(0, 1085)] = lambda ts: float(int(ts / 1e6 * clock_hz * active_share))
    engine.values[(0, 1088)] = lambda ts: float(int(ts / 1e6 * clock_hz * hmma_share))
    engine.values[(0, 1092)] = lambda ts: float(int(ts / 1e6 * 2e9))
    try:
        first = wait_until(lambda: (state := poller.poll_once().gpus[0]).sample.cycles.sm_elapsed is not None and state, PATIENCE)
        time.sleep(0.5)
        second = poller.poll_once()
    finally:
        dcgm.close()
    later = second.gpus[0].sample.cycles
    earlier = first.sample.cycles
    assert later.sm_elapsed > earlier.sm_elapsed and later.tensor_hmma > earlier.tensor_hmma
    assert (later.sm_active - earlier.sm_active) / (later.sm_elapsed - earlier.sm_elapsed) == pytest.approx(active_share, rel=1e-3)
    assert (later.tensor_hmma - earlier.tensor_hmma) / (later.sm_elapsed - earlier.sm_elapsed) == pytest.approx(hmma_share, rel=1e-3)
    assert later.fp32 is None and later.pcie_tx_bytes is None  # not given: absent, never 0
    text = render(second).decode()
    assert f'gpueff_sm_cycles_elapsed_total{{gpu="0",uuid="{first.sample.device.uuid}"}}' in text
    cycles = [line for line in text.splitlines() if line.startswith(("gpueff_pipe_cycles_active_total{", "gpueff_pcie_bytes_total{"))]
    assert [line.split("{", 1)[1].split("}")[0].rsplit(",", 1)[1] for line in cycles] == ['pipe="tensor_hmma"', 'direction="rx"']
