"""The gpu-trace/1 loader: the shipped traces load, broken ones fail naming the file and the place."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from repo import ROOT

from gpueff.backends.replay import ReplayBackend
from gpueff.gpm_metrics import GPM_METRICS
from gpueff.pipeline.derive import derive
from gpueff.sample import DeviceInfo
from gpueff.trace import (
    FORMAT,
    HEALTH_KEYS,
    NVML_KEYS,
    TraceError,
    load_trace,
    record_from_sample,
    sample_from_record,
)

WORKLOADS = ["copy_2GB", "idle", "matmul_8192", "matmul_8192_duty50", "spin_1sm", "tiny_kernels"]


def good_trace() -> dict:
    return {
        "format": FORMAT,
        "gpu": {"name": "NVIDIA H200", "driver": "580.159.04", "max_sm_clock_mhz": 1980, "power_limit_mw": 700000, "sm_count": 132},
        "workload": "unit",
        "description": "made up for a test",
        "truth": {"tflops": 1.5},
        "interval_s": 0.5,
        "samples": [
            {"t": 0.5 * (i + 1), "util_gpu": 100, "power_mw": 300000, "sm_clock_mhz": 1980, "throttle": 4, "SM_UTIL": 50.0, "DRAM_BW_UTIL": None}
            for i in range(5)
        ],
    }


def write(tmp_path: Path, data: object, name: str = "trace.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def trace_error(tmp_path: Path, data: object) -> tuple[Path, str]:
    path = write(tmp_path, data)
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    message = str(caught.value)
    assert message.startswith(f"trace {path}: "), message
    return path, message


def test_all_six_shipped_traces_load(trace_paths):
    assert sorted(trace_paths) == WORKLOADS
    for workload, path in trace_paths.items():
        trace = load_trace(path)
        assert trace.workload == workload
        assert trace.gpu["name"] == "NVIDIA H200" and trace.gpu["sm_count"] == 132
        assert trace.interval_s == 0.5
        assert len(trace.samples) >= 10
        assert trace.duration == pytest.approx(trace.samples[-1]["t"] + 0.5)
        device = trace.device(3)
        assert device.index == 3 and device.source == workload
        assert device.uuid == f"GPU-replay-3-{workload}"
        assert device.power_limit_watts == 700.0 and device.max_sm_clock_mhz == 1980


def test_truth_of_the_throughput_traces(trace_paths):
    assert load_trace(trace_paths["matmul_8192"]).truth["tflops"] == pytest.approx(645, abs=1)
    assert load_trace(trace_paths["matmul_8192_duty50"]).truth["tflops"] == pytest.approx(388, abs=1)
    assert load_trace(trace_paths["copy_2GB"]).truth["tbps"] == pytest.approx(4.27, abs=0.01)
    assert load_trace(trace_paths["idle"]).truth == {}


def test_a_good_trace_loads(tmp_path):
    trace = load_trace(write(tmp_path, good_trace()))
    assert trace.workload == "unit" and len(trace.samples) == 5 and trace.duration == 3.0


def test_optional_gpu_identity_is_used(tmp_path):
    data = good_trace()
    data["gpu"].update(uuid="GPU-1234", pci_bus_id="00000000:18:00.0")
    device = load_trace(write(tmp_path, data)).device(0)
    assert device.uuid == "GPU-1234" and device.pci_bus_id == "00000000:18:00.0"


def mutate(change) -> dict:
    data = good_trace()
    change(data)
    return data


@pytest.mark.parametrize(
    ("data", "place", "reason"),
    [
        ("{not json", "", "not valid JSON"),
        ("", "", "not valid JSON"),
        ([1, 2, 3], "", "JSON object at the top level, got list"),
        ("null", "", "JSON object at the top level"),
        (mutate(lambda d: d.update(format="gpu-trace/2")), "'format'", "'gpu-trace/1'"),
        (mutate(lambda d: d.pop("format")), "'format'", "'gpu-trace/1'"),
        (mutate(lambda d: d.update(extra=1)), "unknown top-level key", "extra"),
        (mutate(lambda d: d.pop("samples")), "'samples'", "missing key"),
        (mutate(lambda d: d.pop("gpu")), "'gpu'", "missing key"),
        (mutate(lambda d: d.pop("interval_s")), "'interval_s'", "missing key"),
        (mutate(lambda d: d.pop("workload")), "'workload'", "missing key"),
        (mutate(lambda d: d["gpu"].pop("sm_count")), "'gpu.sm_count'", "missing key"),
        (mutate(lambda d: d["gpu"].update(sm_count="many")), "'gpu.sm_count'", "non-negative integer"),
        (mutate(lambda d: d["gpu"].update(sm_count=13.5)), "'gpu.sm_count'", "non-negative integer"),
        (mutate(lambda d: d["gpu"].update(max_sm_clock_mhz=0)), "'gpu.max_sm_clock_mhz'", "above 0"),
        (mutate(lambda d: d["gpu"].update(name="")), "'gpu.name'", "non-empty string"),
        (mutate(lambda d: d["gpu"].update(colour="green")), "'gpu.colour'", "not a known key"),
        (mutate(lambda d: d.update(gpu=[])), "'gpu'", "must be an object"),
        (mutate(lambda d: d.update(interval_s=0)), "'interval_s'", "must be from 0.001 to 3600 seconds"),
        (mutate(lambda d: d.update(interval_s="0.5")), "'interval_s'", "non-negative number"),
        (mutate(lambda d: d.update(truth={"tflops": "fast"})), "'truth.tflops'", "non-negative number"),
        (mutate(lambda d: d.update(truth=[])), "'truth'", "must be an object"),
        (mutate(lambda d: d.update(samples=[])), "'samples'", "non-empty list"),
        (mutate(lambda d: d.update(samples={})), "'samples'", "non-empty list"),
        (mutate(lambda d: d["samples"].__setitem__(2, 5)), "samples[2]", "expected an object, got int"),
        (mutate(lambda d: d["samples"][3].pop("t")), "samples[3]", "missing key 't'"),
        (mutate(lambda d: d["samples"][3].update(t=1.0)), "samples[3].t", "times must increase"),
        (mutate(lambda d: d["samples"][3].update(t=1.5)), "samples[3].t", "times must increase"),
        (mutate(lambda d: d["samples"][3].update(SM_UTIL="high")), "samples[3].SM_UTIL", "a percentage from 0 to 100 or null, got 'high'"),
        (mutate(lambda d: d["samples"][3].update(SM_UTIL=1e308)), "samples[3].SM_UTIL", "a percentage from 0 to 100 or null, got 1e+308"),
        (mutate(lambda d: d["samples"][3].update(DRAM_BW_UTIL=100.5)), "samples[3].DRAM_BW_UTIL", "a percentage from 0 to 100"),
        (mutate(lambda d: d["samples"][3].update(util_mem=-1)), "samples[3].util_mem", "a percentage from 0 to 100"),
        (mutate(lambda d: d["samples"][1].update(util_gpu=True)), "samples[1].util_gpu", "a percentage from 0 to 100"),
        (mutate(lambda d: d["samples"][4].update(power_mw=-5)), "samples[4].power_mw", "non-negative number"),
        (mutate(lambda d: d["samples"][0].update(throttle=4.5)), "samples[0].throttle", "non-negative integer"),
        (mutate(lambda d: d["samples"][2].update(SM_ACTIVE=5)), "samples[2]", "unknown key 'SM_ACTIVE'"),
        (mutate(lambda d: d["samples"][1].update(health=[])), "samples[1].health", "expected an object of health readings, got list"),
        (mutate(lambda d: d["samples"][1].update(health={"pcie_replays": 1})), "samples[1].health", "unknown key 'pcie_replays'"),
        (mutate(lambda d: d["samples"][1].update(health={"performance_state": 16})), "samples[1].health.performance_state", "a whole number from 0 to 15"),
        (mutate(lambda d: d["samples"][1].update(health={"performance_state": 2.5})), "samples[1].health.performance_state", "a whole number from 0 to 15"),
        (mutate(lambda d: d["samples"][1].update(health={"encoder_utilization": 1.5})), "samples[1].health.encoder_utilization", "a number from 0 to 1"),
        (mutate(lambda d: d["samples"][1].update(health={"violation_power_seconds": -1})), "samples[1].health.violation_power_seconds", "non-negative number"),
        (mutate(lambda d: d["samples"][1].update(health={"pcie_link_width": "x16"})), "samples[1].health.pcie_link_width", "non-negative integer"),
        (mutate(lambda d: d["samples"][1].update(health={"retired_pages_pending": 1})), "samples[1].health.retired_pages_pending", "expected true or false, got 1"),
        (mutate(lambda d: d["samples"][1].update(health={"nvlink_links_active": {"0": True}})), "samples[1].health.nvlink_links_active", "a list of at most 64 [link, active] pairs"),
        (mutate(lambda d: d["samples"][1].update(health={"nvlink_links_active": [[0, 1]]})), "samples[1].health.nvlink_links_active[0]", "expected [link, active]"),
        (mutate(lambda d: d["samples"][1].update(health={"nvlink_links_active": [[64, True]]})), "samples[1].health.nvlink_links_active[0][0]", "a link number from 0 to 63"),
        (mutate(lambda d: d["samples"][1].update(health={"nvlink_links_active": [[3, True], [3, False]]})), "samples[1].health.nvlink_links_active[1]", "link 3 is listed twice"),
        (mutate(lambda d: (d["samples"][1].update(health={"pcie_replay_errors": 7}), d["samples"][3].update(health={"pcie_replay_errors": 2}))), "samples[3].health.pcie_replay_errors",
         "a counter since driver load cannot fall, got 2 after 7"),
        ('{"format": "gpu-trace/1", "samples": [{"t": NaN}]}', "", "missing key"),
        (json.dumps(good_trace()).replace('"util_gpu": 100', '"util_gpu": NaN', 1), "samples[0].util_gpu", "got nan"),
        (json.dumps(good_trace()).replace('"util_gpu": 100', '"util_gpu": Infinity', 1), "samples[0].util_gpu", "got inf"),
        (json.dumps(good_trace()).replace('"power_mw": 300000', '"power_mw": 1' + "0" * 400, 1), "samples[0].power_mw", "non-negative number"),
    ],
)
def test_malformed_traces_name_the_file_and_the_place(tmp_path, data, place, reason):
    _, message = trace_error(tmp_path, data)
    assert place in message
    assert reason in message


def test_missing_file(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(TraceError, match=rf"trace {path}: cannot read it: No such file or directory"):
        load_trace(path)


def test_not_utf8(tmp_path):
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(TraceError, match=rf"trace {path}: not UTF-8"):
        load_trace(path)


def test_round_trip_of_every_recorded_sample(trace_paths):
    device = DeviceInfo(index=0, uuid="GPU-x", name="NVIDIA H200")
    for path in trace_paths.values():
        trace = load_trace(path)
        for record in trace.samples:
            sample = sample_from_record(device, record, 12.0, trace.interval_s)
            again = record_from_sample(sample, record["t"])
            assert set(again) == {"t", *NVML_KEYS, *(metric.name for metric in GPM_METRICS)} | {key for key in ("util_gpu_window", "health") if key in record}
            for key, value in again.items():
                original = record.get(key)
                if key == "health":
                    assert value == original
                elif original is None:
                    assert value is None, key
                else:
                    # GPM ratios are clamped to 0..100 % on the way in (a hair over 100 can happen).
                    expected = min(original, 100) if key in {m.name for m in GPM_METRICS if m.scale < 1} else original
                    assert value == pytest.approx(expected, rel=1e-9, abs=1e-9), key
            assert sample_from_record(device, again, 12.0, trace.interval_s) == sample


def test_health_readings_round_trip_and_old_traces_have_none():
    device = DeviceInfo(index=0, uuid="GPU-x", name="NVIDIA H100")
    health = {"pcie_replay_errors": 3.0, "pcie_link_generation": 5, "pcie_link_generation_max": 5, "pcie_link_width": 16, "nvlink_crc_flit_errors": 0.0,
              "nvlink_links_active": [[0, True], [1, False]], "violation_power_seconds": 134.49919, "performance_state": 0, "encoder_utilization": 0.0,
              "retired_pages_pending": False, "temperature_slowdown_celsius": 89.0, "ecc_corrected_errors": 0.0, "remapped_rows_failure": False}
    sample = sample_from_record(device, {"t": 1.0, "util_gpu": 0, "health": health}, 7.0, 0.5)
    assert sample.health.nvlink_links_active == ((0, True), (1, False)) and sample.health.performance_state == 0
    assert sample.ecc_corrected_errors == 0.0 and sample.remapped_rows_failure is False and sample.health.fan_speed is None
    assert record_from_sample(sample, 1.0)["health"] == health
    old = sample_from_record(device, {"t": 1.0, "util_gpu": 0}, 7.0, 0.5)
    assert old.health.readings() == {} and "health" not in record_from_sample(old, 1.0)


def test_every_health_reading_has_a_trace_key():
    """The trace format's health keys are the catalogue's health readings that a replay can give (the
    per-link NVLink counters are live only)."""
    from gpueff.metrics import READINGS, REPLAY

    health = {reading.field for metric, reading in READINGS if reading.path.startswith("sample.health.") and REPLAY in metric.backends}
    assert health <= set(HEALTH_KEYS)
    for metric, reading in READINGS:
        if reading.field in HEALTH_KEYS:
            assert REPLAY in metric.backends, metric.name


def test_sample_from_record_converts_units():
    device = DeviceInfo(index=0, uuid="GPU-x", name="NVIDIA H200")
    record = {"t": 1.0, "util_gpu": 100, "util_mem": 50, "power_mw": 250000, "temp_c": 40, "sm_clock_mhz": 1455, "mem_total": 1024, "throttle": 5,
              "SM_UTIL": 0.76, "SM_OCCUPANCY": 101.0, "PCIE_TX_PER_SEC": 2.0, "DRAM_BW_UTIL": None}
    sample = sample_from_record(device, record, 7.0, 0.5)
    assert sample.timestamp == 7.0 and sample.window_seconds == 0.5 and sample.up
    assert sample.gpu_utilization == 1.0 and sample.memory_utilization == 0.5
    assert sample.power_watts == pytest.approx(250.0)
    assert sample.temperature_celsius == 40 and sample.sm_clock_mhz == 1455 and sample.memory_total_bytes == 1024
    assert sample.clock_event_reasons == 5 and isinstance(sample.clock_event_reasons, int)
    assert sample.memory_used_bytes is None  # absent stays absent, never 0
    assert sample.profiling.sm_active == pytest.approx(0.0076)
    assert sample.profiling.sm_occupancy == 1.0  # clamped
    assert sample.profiling.pcie_tx_bytes_per_second == 2 * 1024 * 1024
    assert sample.profiling.dram_active is None  # null = not supported
    assert sample.profiling_available


def test_no_sm_activity_means_no_profiling():
    device = DeviceInfo(index=0, uuid="GPU-x", name="NVIDIA H200")
    sample = sample_from_record(device, {"t": 1.0, "util_gpu": 30, "SM_UTIL": None, "DRAM_BW_UTIL": 3.0}, 0.0, 0.5)
    assert not sample.profiling_available


def test_loading_does_not_modify_the_input(tmp_path):
    data = good_trace()
    before = copy.deepcopy(data)
    load_trace(write(tmp_path, data))
    assert data == before


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)


def places(data: object, path: tuple = ()) -> list[tuple]:
    """Every path to a value inside ``data``."""
    found = [path]
    if isinstance(data, dict):
        for key, value in data.items():
            found += places(value, path + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += places(value, path + (index,))
    return found


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(choice=st.integers(min_value=0), value=json_values, delete=st.booleans())
def test_any_corruption_of_a_trace_is_a_trace_error_or_a_usable_trace(tmp_path, choice, value, delete):
    """Bad input never escapes as anything but TraceError, and what loads can be replayed."""
    data = good_trace()
    paths = places(data)
    path = paths[choice % len(paths)]
    if not path:
        data = value
    else:
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        if delete and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
    target = tmp_path / "fuzzed.json"
    target.write_text(json.dumps(data))
    try:
        trace = load_trace(target)
    except TraceError as error:
        assert str(error).startswith(f"trace {target}: ")
        return
    now = [0.0]
    backend = ReplayBackend([trace], clock=lambda: now[0])
    device = backend.start()[0]
    for record in trace.samples:
        sample = sample_from_record(device, record, 0.0, trace.interval_s)
        derive(sample)
    for now[0] in (0.0, 1.0, 2.5, 1000.3):  # polls over several loops of the recording
        for sample in backend.collect():
            derive(sample)


def test_warm_up_samples_are_kept_but_not_looped(tmp_path):
    data = good_trace()
    data["warmup_samples"] = 2
    trace = load_trace(write(tmp_path, data))
    assert trace.samples == data["samples"] and trace.steady_samples == data["samples"][2:]
    assert trace.loop_start == pytest.approx(data["samples"][2]["t"] - data["interval_s"])
    assert trace.loop_seconds == pytest.approx(data["samples"][-1]["t"] - trace.loop_start)


@pytest.mark.parametrize("value", [-1, 5, 1.5, True, "1"])
def test_bad_warmup_samples_is_a_clear_error(tmp_path, value):
    data = good_trace()
    data["warmup_samples"] = value
    with pytest.raises(TraceError, match=r"'warmup_samples' must be a whole number from 0 to 4 \(fewer than the samples\)"):
        load_trace(write(tmp_path, data))


@pytest.mark.parametrize(
    ("change", "place", "reason"),
    [
        ({"interval_s": 5e-324}, "'interval_s'", "must be from 0.001 to 3600 seconds"),
        ({"interval_s": 1e300}, "'interval_s'", "must be from 0.001 to 3600 seconds"),
        ({"samples": [{"t": 1e308, "util_gpu": 50}]}, "samples[0].t", "expected a time in seconds from 0 to 1e+07"),
        ({"samples": [{"t": 1.0, "util_gpu": 50}, {"t": 1e308, "util_gpu": 50}]}, "samples[1].t", "expected a time in seconds from 0 to 1e+07"),
    ],
    ids=["tiny-interval", "huge-interval", "far-time", "far-last-time"],
)
def test_traces_that_validated_but_could_not_replay_are_refused_at_load(tmp_path, change, place, reason):
    """Before, these loaded and then every poll raised OverflowError, or ZeroDivisionError in
    ReplayBackend.record_at (a loop of 0 s: 1e308 minus an interval is 1e308 again)."""
    data = good_trace() | change
    _, message = trace_error(tmp_path, data)
    assert place in message and reason in message


def test_the_trace_format_documents_every_health_key():
    readme = (ROOT / "gpueff" / "traces" / "README.md").read_text(encoding="utf-8")
    assert sorted(set(HEALTH_KEYS) - set(re.findall(r"`([a-z_0-9]+)`", readme))) == []
