"""``record``: NVML readings (from the trace-driven fake pynvml) to a gpu-trace/1 file that replays the same."""

from __future__ import annotations

import json
import sys

import pytest
from fakes.nvml import FakeClock, FakeGpu, FakeNvml, recorded_gpm

from gpueff.backends.base import BackendUnavailable
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.backends.replay import ReplayBackend
from gpueff.commands import cli
from gpueff.commands.record import record_trace
from gpueff.gpm_metrics import GPM_METRICS
from gpueff.trace import NVML_KEYS, load_trace

COMPARED = [attribute for attribute, _ in NVML_KEYS.values()]


@pytest.fixture(scope="module")
def traces(trace_paths):
    return {name: load_trace(path) for name, path in trace_paths.items()}


def recorded(gpus, gpu=0, duration=3.0, interval=0.5, oversleep=lambda tick: 0.0):
    """Record from a fake NVML on a fake clock; returns (trace object, the readings record_trace took, fake)."""
    clock = FakeClock()
    fake = FakeNvml(gpus, clock=clock)
    backend = NvmlBackend(nvml=fake, clock=clock, engine_every_poll=True)  # as commands/record.py makes it
    readings = []
    collect = backend.collect

    def collect_and_keep():
        samples = collect()
        readings.append(samples[gpu])
        return samples

    backend.collect = collect_and_keep
    ticks = iter(range(10_000))
    trace = record_trace(backend, gpu, duration, interval, sleep=lambda seconds: clock.advance(seconds + oversleep(next(ticks))), clock=clock)
    return trace, readings[1:], fake


def write(tmp_path, trace, workload="recorded"):
    path = tmp_path / "recorded.json"
    path.write_text(json.dumps({**trace, "workload": workload}), encoding="utf-8")
    return load_trace(path)


def test_a_recording_loads_and_replays_the_same_values(tmp_path, traces):
    data, readings, fake = recorded([traces["matmul_8192"], traces["copy_2GB"]], gpu=1, duration=3.0, interval=0.5)
    trace = write(tmp_path, data)
    assert len(trace.samples) == len(readings) == 6 and trace.interval_s == 0.5
    assert trace.gpu["uuid"] == "GPU-fake-1-copy_2GB" and trace.gpu["sm_count"] == 132 and trace.gpu["power_limit_mw"] == 700000
    clock = FakeClock(0.0)
    replay = ReplayBackend([trace], clock=clock)
    replay.start()
    for reading, record in zip(readings, trace.samples):
        clock.now = record["t"]
        replayed = replay.collect()[0]
        for attribute in COMPARED:
            assert getattr(replayed, attribute) == pytest.approx(getattr(reading, attribute), rel=1e-9), attribute
        assert replayed.profiling.readings().keys() == reading.profiling.readings().keys() == {metric.key for metric in recorded_gpm(traces["copy_2GB"])}
        for key, value in reading.profiling.readings().items():
            assert replayed.profiling.readings()[key] == pytest.approx(value, rel=1e-9), key
        assert replayed.profiling_available and replayed.device.name == reading.device.name
    # ... and what was recorded is what the GPU played: the source trace's own numbers.
    gpm = {metric.name for metric in recorded_gpm(traces["copy_2GB"])}
    for reading, record in zip(readings, trace.samples):
        window = {key: fake.window_mean(1, key, reading.timestamp - reading.window_seconds, reading.timestamp) for key in gpm}  # GPM reads the window's mean
        source = fake.record(1, at=reading.timestamp) | window
        assert {key: record[key] for key in source if key != "t"} == pytest.approx({key: value for key, value in source.items() if key != "t"}, rel=1e-9)


def test_jittery_sleeps_never_make_a_gpm_window_too_short(tmp_path, traces):
    # At the 100 ms minimum interval a late tick followed by an on-time one would give a window under
    # 100 ms, and a sample recorded with no GPM values (null: "not supported") that the GPU did have.
    data, readings, _ = recorded([traces["spin_1sm"]], duration=2.0, interval=0.1, oversleep=lambda tick: 0.03 if tick % 2 else 0.0)
    trace = write(tmp_path, data)
    assert len(trace.samples) >= 15
    assert all(record["SM_UTIL"] is not None for record in trace.samples)
    assert all(reading.window_seconds > 0.1 for reading in readings)


def test_a_gpu_without_gpm_records_null_profiling_that_replays_as_unavailable(tmp_path, traces):
    data, _, _ = recorded([FakeGpu(traces["matmul_8192"], name="NVIDIA A100-SXM4-80GB", gpm=False)], duration=1.0)
    trace = write(tmp_path, data)
    assert all(record[metric.name] is None for record in trace.samples for metric in GPM_METRICS)
    assert all(record["util_gpu"] is not None for record in trace.samples)
    replay = ReplayBackend([trace])
    replay.start()
    sample = replay.collect()[0]
    assert sample.device.name == "NVIDIA A100-SXM4-80GB" and not sample.profiling_available and sample.profiling.readings() == {}


def test_a_recording_keeps_the_health_readings_and_replays_them(tmp_path, traces):
    """Every health reading NVML gives (a pre-Ampere NVLink board with a fan and a throttled clock)
    goes into the trace's "health" object and comes back out of the replay unchanged."""
    gpu = FakeGpu(traces["matmul_8192"], nvlink_links=(True, False), nvlink_errors=(1, 2, 3, 4), retired_pages=(1, 0, False), fan_percent=40,
                  violation_ns={0: 1_500_000_000}, ecc_errors=(5, 0), remapped_rows=(0, 0, 0, 0), pcie_replays=7)
    data, readings, _ = recorded([gpu], duration=2.0)
    trace = write(tmp_path, data)
    assert all(record["health"] for record in trace.samples)
    clock = FakeClock(0.0)
    replay = ReplayBackend([trace], clock=clock)
    replay.start()
    for reading, record in zip(readings, trace.samples):
        clock.now = record["t"]
        replayed = replay.collect()[0]
        assert replayed.health == reading.health  # whole numbers here: no rounding
        assert replayed.health.nvlink_links_active == ((0, True), (1, False)) and replayed.health.violation_power_seconds == pytest.approx(1.5)
        for name in ("ecc_corrected_errors", "ecc_uncorrected_errors", "remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure"):
            assert getattr(replayed, name) == getattr(reading, name) is not None, name


def test_cli_record_writes_a_trace(tmp_path, traces, monkeypatch, restore_logging):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([traces["tiny_kernels"]]))  # real time, fake GPU
    output = tmp_path / "tiny.json"
    code = cli.main(["record", "-o", str(output), "--duration", "400ms", "--interval", "100ms", "--workload", "tiny", "--description", "1000 tiny kernels", "--truth-tflops", "0.5"])
    assert code == 0
    trace = load_trace(output)
    assert (trace.workload, trace.description, trace.truth, trace.interval_s) == ("tiny", "1000 tiny kernels", {"tflops": 0.5}, 0.1)
    stamps = [record["t"] for record in trace.samples]  # seconds since the first window began, to the ms
    assert stamps[-1] >= 0.4 and all(t <= 0.4 for t in stamps[:-1])  # it recorded until the duration was reached, then stopped
    assert all(later - earlier >= 0.1 - 0.001 for earlier, later in zip(stamps, stamps[1:]))  # never sooner than the interval
    assert all(record["util_gpu"] is not None and record["SM_UTIL"] is not None for record in trace.samples)


def test_cli_record_bad_gpu_index_says_which_gpus_exist(tmp_path, traces, monkeypatch, capsys, restore_logging):
    fake = FakeNvml([traces["idle"], traces["spin_1sm"]])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    output = tmp_path / "never.json"
    assert cli.main(["record", "-o", str(output), "--gpu", "5", "--duration", "1s"]) == 2
    assert "--gpu 5: this machine has GPUs 0..1" in capsys.readouterr().err
    assert not output.exists() and fake.init_count == 0  # NVML was shut down again


def test_cli_record_unwritable_output_is_a_clear_error(tmp_path, traces, monkeypatch, capsys, restore_logging):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([traces["idle"]]))
    output = tmp_path / "missing-folder" / "idle.json"
    assert cli.main(["record", "-o", str(output), "--duration", "200ms", "--interval", "100ms"]) == 2
    assert f"{output.parent}: No such file or directory" in capsys.readouterr().err  # found before recording, naming the folder


def test_a_gpu_lost_while_recording_stops_the_recording_with_a_clear_error(traces):
    clock = FakeClock()
    fake = FakeNvml([traces["idle"]], clock=clock)
    sleeps = []

    def sleep(seconds):
        clock.advance(seconds)
        sleeps.append(seconds)
        if len(sleeps) == 3:
            fake.lose_gpu(0)

    with pytest.raises(BackendUnavailable, match="GPU 0 stopped answering while recording"):
        record_trace(NvmlBackend(nvml=fake, clock=clock), 0, 5.0, 0.5, sleep=sleep, clock=clock)
    assert fake.init_count == 0


def test_a_recording_keeps_the_driver_samples_mean_of_each_window_as_evidence(tmp_path, traces):
    # The fake driver samples util_gpu every 200 ms; a 1 s window holds five of them.
    data, readings, fake = recorded([traces["matmul_8192_duty50"]], duration=4.0, interval=1.0)
    trace = write(tmp_path, data)
    assert all("util_gpu_window" in record for record in trace.samples)
    for reading, record in zip(readings, trace.samples):
        period = fake.DRIVER_SAMPLE_PERIOD
        stamps = [fake.started + number * period for number in range(int((reading.timestamp - fake.started) / period) + 1)]
        inside = [fake.record(0, at=at)["util_gpu"] for at in stamps if reading.timestamp - 1.0 < at <= reading.timestamp]
        assert record["util_gpu_window"] == pytest.approx(sum(inside) / len(inside))
    replay = ReplayBackend([trace])  # evidence only: replay loads it and does not use it
    replay.start()
    assert replay.collect()[0].gpu_utilization == trace.samples[0]["util_gpu"] / 100


def test_cli_record_all_gpus_writes_one_trace_each_of_one_job_that_replays_as_its_gpus(tmp_path, traces, monkeypatch, restore_logging):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([traces["spin_1sm"], traces["matmul_8192"]]))  # real time, fake GPUs
    output = tmp_path / "straggler_gpu{gpu}.json"
    code = cli.main(["record", "-o", str(output), "--gpu", "all", "--job", "straggler", "--duration", "300ms", "--interval", "100ms", "--workload", "straggler_gpu{gpu}"])
    assert code == 0
    recorded_traces = [load_trace(tmp_path / f"straggler_gpu{gpu}.json") for gpu in (0, 1)]
    assert [(trace.workload, trace.job) for trace in recorded_traces] == [("straggler_gpu0", "straggler"), ("straggler_gpu1", "straggler")]
    assert [len(trace.samples) for trace in recorded_traces][0] == len(recorded_traces[1].samples)
    assert [trace.device(index).job for index, trace in enumerate(recorded_traces)] == ["straggler", "straggler"]


def test_cli_record_all_gpus_needs_a_place_for_each(tmp_path, traces, monkeypatch, capsys, restore_logging):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([traces["idle"]]))
    assert cli.main(["record", "-o", str(tmp_path / "one.json"), "--gpu", "all"]) == 2
    assert "--output must name them with {gpu}" in capsys.readouterr().err
    for choice in ("first", "\u00b2", "\u0661"):  # '\u00b2' passed isdigit and then int() raised; '\u0661' int() read as 1
        with pytest.raises(SystemExit):
            cli.main(["record", "-o", str(tmp_path / "one.json"), "--gpu", choice])
