"""The replay backend, driven by a fake clock over the recorded traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpueff.backends.replay import ReplayBackend
from gpueff.poller import Poller
from gpueff.settings import Config
from gpueff.trace import load_trace


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock()


def backend_for(trace_paths, workloads: list[str], clock: FakeClock) -> ReplayBackend:
    return ReplayBackend([load_trace(trace_paths[name]) for name in workloads], clock=clock)


def test_gpus_are_numbered_in_the_order_given(trace_paths, clock):
    order = ["spin_1sm", "idle", "copy_2GB"]
    backend = backend_for(trace_paths, order, clock)
    devices = backend.start()
    assert [device.index for device in devices] == [0, 1, 2]
    assert [device.source for device in devices] == order
    assert [device.uuid for device in devices] == ["GPU-replay-0-spin_1sm", "GPU-replay-1-idle", "GPU-replay-2-copy_2GB"]
    assert len({device.pci_bus_id for device in devices}) == 3
    assert backend.replayed and backend.name == "replay"
    samples = backend.collect()
    assert [sample.device for sample in samples] == devices
    assert samples[0].gpu_utilization == 1.0 and samples[0].profiling.sm_active < 0.01
    assert samples[1].gpu_utilization == 0.0
    assert samples[2].profiling.dram_active > 0.8


def test_the_sample_is_chosen_by_time(trace_paths, clock):
    trace = load_trace(trace_paths["tiny_kernels"])
    clock.now = 0.0  # so that elapsed time is exactly the trace's t at the window's end
    backend = ReplayBackend([trace], clock=clock)
    backend.start()
    assert trace.warmup_samples == 1 and trace.steady_samples == trace.samples[1:]
    for number, record in enumerate(trace.steady_samples):
        # Anywhere inside a steady sample's window (t - interval, t] replays that sample; the loop
        # starts where the warm-up sample ends.
        for offset in (-0.45, -0.01, 0.0):
            clock.now = record["t"] - trace.loop_start + offset
            [sample] = backend.collect()
            assert sample.power_watts == pytest.approx(record["power_mw"] / 1000), (number, offset)
            assert sample.sm_clock_mhz == record["sm_clock_mhz"]
            assert sample.timestamp == clock.now


def test_the_first_sample_is_served_right_after_start(trace_paths, clock):
    trace = load_trace(trace_paths["matmul_8192"])
    backend = ReplayBackend([trace], clock=clock)
    backend.start()
    [sample] = backend.collect()
    assert sample.profiling.sm_active == pytest.approx(trace.steady_samples[0]["SM_UTIL"] / 100)  # the warm-up sample is skipped


def test_replay_loops_after_the_trace_duration(trace_paths, clock):
    trace = load_trace(trace_paths["tiny_kernels"])
    backend = ReplayBackend([trace], clock=clock)
    backend.start()
    first_loop = []
    for record in trace.samples:
        clock.now = 1000.0 + record["t"] - 0.1
        first_loop.append(backend.collect()[0].power_watts)
    for loop in (1, 2, 7):
        for record, power in zip(trace.samples, first_loop):
            clock.now = 1000.0 + loop * trace.loop_seconds + record["t"] - 0.1
            assert backend.collect()[0].power_watts == power
    assert first_loop[0] != first_loop[1]  # the trace really changes over time


def test_traces_of_different_lengths_loop_independently(trace_paths, clock, tmp_path):
    short = json.loads(trace_paths["idle"].read_text())
    short["samples"] = short["samples"][:3]
    short["workload"] = "idle_short"
    path = tmp_path / "short.json"
    path.write_text(json.dumps(short))
    long_trace, short_trace = load_trace(trace_paths["spin_1sm"]), load_trace(path)
    backend = ReplayBackend([long_trace, short_trace], clock=clock)
    backend.start()
    clock.now = 1000.0 + short_trace.loop_seconds + 0.2  # the short trace has wrapped, the long one has not
    spin, idle = backend.collect()
    assert idle.power_watts == pytest.approx(short["samples"][0]["power_mw"] / 1000)
    index = next(i for i, r in enumerate(long_trace.samples) if r["t"] >= short_trace.loop_seconds + 0.2)
    assert spin.power_watts == pytest.approx(long_trace.samples[index]["power_mw"] / 1000)


def test_energy_is_recorded_power_integrated_over_time(trace_paths, clock):
    trace = load_trace(trace_paths["matmul_8192"])
    backend = ReplayBackend([trace], clock=clock)
    backend.start()
    [first] = backend.collect()
    assert first.energy_joules == 0.0
    expected, previous = 0.0, clock.now
    for step in range(1, 60):  # 3 loops of the trace at irregular steps
        clock.now += 0.1 + (step % 4) * 0.1
        [sample] = backend.collect()
        expected += sample.power_watts * (clock.now - previous)
        previous = clock.now
        assert sample.energy_joules == pytest.approx(expected)
    # Roughly the mean recorded power times the elapsed time.
    mean_power = sum(r["power_mw"] for r in trace.samples) / len(trace.samples) / 1000
    assert sample.energy_joules == pytest.approx(mean_power * (clock.now - 1000.0), rel=0.1)


def test_energy_is_counted_per_gpu(trace_paths, clock):
    backend = backend_for(trace_paths, ["idle", "copy_2GB"], clock)
    backend.start()
    backend.collect()
    clock.now += 1.0
    idle, copy = backend.collect()
    assert idle.energy_joules == pytest.approx(idle.power_watts * 1.0)
    assert copy.energy_joules == pytest.approx(copy.power_watts * 1.0)
    assert copy.energy_joules > 3 * idle.energy_joules


def test_replayed_samples_carry_the_recorded_readings(trace_paths, clock):
    trace = load_trace(trace_paths["copy_2GB"])
    backend = ReplayBackend([trace], clock=clock)
    device = backend.start()[0]
    assert device.name == "NVIDIA H200" and device.driver == trace.gpu["driver"] and device.sm_count == 132
    [sample] = backend.collect()
    record = trace.samples[0]
    assert sample.up and sample.profiling_available
    assert sample.memory_total_bytes == record["mem_total"]
    assert sample.temperature_celsius == record["temp_c"]
    assert sample.clock_event_reasons == record["throttle"]
    assert backend.errors_total == 0


def test_recordings_of_the_same_gpu_replay_as_distinct_gpus(trace_paths, clock, tmp_path):
    """Two recordings of one physical GPU carry the same UUID; replayed side by side they must not share totals."""
    paths = []
    for name in ("spin_1sm", "idle"):
        data = json.loads(trace_paths[name].read_text())
        data["gpu"]["uuid"] = "GPU-8f3c0d2e-0000-4000-8000-000000000001"
        data["gpu"]["pci_bus_id"] = "00000000:00:06.0"
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(data))
    backend = ReplayBackend([load_trace(path) for path in paths], clock=clock)
    devices = backend.start()
    assert len({device.uuid for device in devices}) == 2
    assert all(device.uuid.startswith("GPU-8f3c0d2e-0000-4000-8000-000000000001") for device in devices)
    # ... and their bus ids tell them apart, the same at every start.
    assert [device.pci_bus_id for device in devices] == ["00000000:00:06.0-replay-0", "00000000:00:06.0-replay-1"]
    assert [device.pci_bus_id for device in ReplayBackend([load_trace(path) for path in paths], clock=clock).start()] == [device.pci_bus_id for device in devices]
    poller = Poller(backend, Config(), clock=clock)
    for _ in range(3):
        clock.now += 0.5
        snapshot = poller.poll_once()
    spin, idle = snapshot.gpus
    assert spin.totals.busy_seconds == pytest.approx(1.0, abs=0.001)  # the engine active 99.95 % of the time
    assert idle.totals.busy_seconds == 0.0


def test_a_recorded_uuid_is_kept_where_it_is_unique(trace_paths, clock, tmp_path):
    data = json.loads(trace_paths["idle"].read_text())
    data["gpu"]["uuid"] = "GPU-recorded"
    path = tmp_path / "idle.json"
    path.write_text(json.dumps(data))
    data["gpu"]["pci_bus_id"] = "00000000:00:06.0"
    path.write_text(json.dumps(data))
    devices = ReplayBackend([load_trace(path), load_trace(trace_paths["spin_1sm"])], clock=clock).start()
    assert [device.uuid for device in devices] == ["GPU-recorded", "GPU-replay-1-spin_1sm"]
    assert [device.pci_bus_id for device in devices] == ["00000000:00:06.0", "replay:1"]


def test_the_demo_gpus_have_distinct_bus_ids() -> None:
    from gpueff.trace import demo_trace_paths

    devices = ReplayBackend([load_trace(path) for path in demo_trace_paths()]).start()
    assert len({device.pci_bus_id for device in devices}) == len(devices) == len({device.uuid for device in devices})


def health_trace(tmp_path, source: Path, samples: int = 4) -> Path:
    """A made-up recording whose health counters rise by 1 (PCIe replays) and 0.5 s (power
    violation) a sample, beside fixed link, P-state and limit readings."""
    data = json.loads(source.read_text())
    data["samples"] = data["samples"][:samples]
    data.pop("warmup_samples", None)
    for number, record in enumerate(data["samples"]):
        record["health"] = {"pcie_replay_errors": 10 + number, "violation_power_seconds": 100 + 0.5 * number, "pcie_link_generation": 5, "pcie_link_width": 16,
                            "performance_state": 0, "temperature_slowdown_celsius": 89.0, "nvlink_links_active": [[0, True], [1, False]],
                            "ecc_corrected_errors": 2.0, "remapped_rows_pending": False}
    path = tmp_path / "health.json"
    path.write_text(json.dumps(data))
    return path


def test_health_readings_replay_and_their_counters_keep_rising_across_loops(trace_paths, tmp_path, clock) -> None:
    trace = load_trace(health_trace(tmp_path, trace_paths["idle"]))
    backend = ReplayBackend([trace], clock=clock)
    backend.start()
    replays, violations = [], []
    for _ in range(int(3 * trace.loop_seconds / 0.5)):  # three loops
        clock.now += 0.5
        sample = backend.collect()[0]
        replays.append(sample.health.pcie_replay_errors)
        violations.append(sample.health.violation_power_seconds)
        assert sample.health.pcie_link_generation == 5 and sample.health.performance_state == 0 and sample.health.temperature_slowdown_celsius == 89.0
        assert sample.health.nvlink_links_active == ((0, True), (1, False))
        assert sample.ecc_corrected_errors == 2.0 and sample.remapped_rows_pending is False
    assert replays == sorted(replays) and violations == sorted(violations), "a counter since driver load never falls"
    assert replays[-1] - replays[0] >= 2 * 3  # three per loop, never reset
    assert violations[-1] > 100 + 0.5 * 3


def test_a_trace_without_health_replays_none(trace_paths, clock) -> None:
    backend = backend_for(trace_paths, ["spin_1sm"], clock)
    backend.start()
    clock.now += 0.5
    sample = backend.collect()[0]
    assert sample.health.readings() == {} and sample.ecc_corrected_errors is None
