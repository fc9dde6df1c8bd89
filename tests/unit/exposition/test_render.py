"""The Prometheus text rendering, checked by the real promtool and by a real parser."""

from __future__ import annotations

import gzip
import math
import shutil
import subprocess
import zlib
from collections import Counter, defaultdict

import pytest
from conftest import payloads_following, payloads_of
from prometheus_client.parser import text_string_to_metric_families
from waiting import PATIENCE

from gpueff.backends.base import Backend
from gpueff.backends.replay import ReplayBackend
from gpueff.exposition.render import render
from gpueff.exposition.text import CONTENT_TYPE, number
from gpueff.metrics import METRICS
from gpueff.pipeline.derive import BOTTLENECK_CLASSES
from gpueff.poller import Poller, Snapshot
from gpueff.sample import DeviceInfo, GpuSample, Profiling, down_sample
from gpueff.settings import Config
from gpueff.trace import load_trace
from gpueff.web import payload as payload_module
from gpueff.web.payload import GzipBody, Payloads

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
SELF_METRICS = {
    "gpueff_exporter_build_info",
    "gpueff_bottleneck_class_info",
    "gpueff_collect_duration_seconds_sum",
    "gpueff_collect_duration_seconds_count",
    "gpueff_collect_errors_total",
    "gpueff_collect_stale",
    "gpueff_last_collect_success_timestamp_seconds",
    "gpueff_snapshot_age_seconds",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
}


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ReplayWithLostGpu(ReplayBackend):
    """The real replay backend, reporting some GPUs down as a lost GPU would be."""

    def __init__(self, *args, lost: set[int], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lost = lost

    def collect(self):
        return [down_sample(s.device, s.timestamp) if s.device.index in self.lost else s for s in super().collect()]


def snapshot_of(trace_paths, config: Config = Config(), lost: set[int] = frozenset(), polls: int = 3) -> tuple[Snapshot, FakeClock]:
    clock = FakeClock()
    backend = ReplayWithLostGpu([load_trace(path) for path in trace_paths.values()], clock=clock, lost=set(lost))
    poller = Poller(backend, config, clock=clock, wall_clock=lambda: 1_763_000_000.5)
    backend.start()
    for _ in range(polls):
        clock.now += 0.5
        snapshot = poller.poll_once()
    return snapshot, clock


def promtool_check(text: str) -> None:
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == "", result.stdout + result.stderr


def served(snapshot: Snapshot, clock: FakeClock) -> str:
    body = payloads_of(snapshot, clock).body()
    assert body is not None
    return body.decode()


def series(text: str) -> list:
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def by_gpu(text: str) -> dict[str, list]:
    out: dict[str, list] = defaultdict(list)
    for sample in series(text):
        if sample.name not in SELF_METRICS:
            out[sample.labels["gpu"]].append(sample)
    return out


def test_promtool_passes_on_all_six_traces(trace_paths):
    snapshot, clock = snapshot_of(trace_paths)
    promtool_check(served(snapshot, clock))


def test_promtool_passes_with_a_price(trace_paths):
    snapshot, clock = snapshot_of(trace_paths, Config(price_per_gpu_hour=2.5, currency="EUR"))
    text = served(snapshot, clock)
    promtool_check(text)
    costs = {s.labels["gpu"]: s for s in series(text) if s.name == "gpueff_busy_idle_sm_cost_total"}
    assert set(costs) == {"0", "1", "2", "3", "4", "5"}
    assert all(s.labels["currency"] == "EUR" for s in costs.values())
    busy_idle = {s.labels["gpu"]: s.value for s in series(text) if s.name == "gpueff_busy_idle_sm_seconds_total"}
    for gpu, sample in costs.items():
        assert sample.value == pytest.approx(busy_idle[gpu] * 2.5 / 3600)
    assert costs["4"].value > 0  # spin_1sm wastes money


def test_no_cost_series_without_a_price(trace_paths):
    snapshot, clock = snapshot_of(trace_paths)
    assert "gpueff_busy_idle_sm_cost_total" not in served(snapshot, clock)


def test_promtool_passes_with_a_down_gpu(trace_paths):
    snapshot, clock = snapshot_of(trace_paths, Config(price_per_gpu_hour=1.0), lost={2})
    text = served(snapshot, clock)
    promtool_check(text)
    down = by_gpu(text)["2"]
    assert {s.name for s in down} == {"gpueff_gpu_up", "gpueff_gpu_info"}
    assert next(s for s in down if s.name == "gpueff_gpu_up").value == 0
    for gpu, samples in by_gpu(text).items():
        if gpu != "2":
            assert next(s for s in samples if s.name == "gpueff_gpu_up").value == 1
            assert any(s.name == "gpueff_bottleneck" for s in samples)


def test_promtool_passes_on_a_stale_snapshot(trace_paths):
    snapshot, clock = snapshot_of(trace_paths, Config(price_per_gpu_hour=1.0))
    clock.now += snapshot.settings.stale_after + 0.1
    text = served(snapshot, clock)
    promtool_check(text)
    gpus = by_gpu(text)
    assert sorted(gpus) == ["0", "1", "2", "3", "4", "5"]
    for samples in gpus.values():
        assert {s.name for s in samples} == {"gpueff_gpu_up", "gpueff_gpu_info"}
        assert next(s for s in samples if s.name == "gpueff_gpu_up").value == 0
    assert "gpueff_collect_stale 1\n" in text
    assert "gpueff_busy_idle_sm_cost_total" not in text
    age = next(s for s in series(text) if s.name == "gpueff_snapshot_age_seconds")
    assert age.value == pytest.approx(snapshot.settings.stale_after + 0.1, abs=0.002)


def test_a_snapshot_just_inside_stale_after_is_served(trace_paths):
    snapshot, clock = snapshot_of(trace_paths)
    clock.now += snapshot.settings.stale_after - 0.1
    text = served(snapshot, clock)
    assert "gpueff_collect_stale 0\n" in text
    assert all(s.value == 1 for s in series(text) if s.name == "gpueff_gpu_up")


def test_every_gpu_series_carries_gpu_and_uuid_labels(trace_paths):
    snapshot, clock = snapshot_of(trace_paths, Config(price_per_gpu_hour=1.0))
    text = served(snapshot, clock)
    uuids = {str(state.sample.device.index): state.sample.device.uuid for state in snapshot.gpus}
    names = set()
    for sample in series(text):
        assert sample.name.startswith("gpueff_") or sample.name in SELF_METRICS
        if sample.name in SELF_METRICS:
            assert "gpu" not in sample.labels
            continue
        names.add(sample.name)
        assert uuids[sample.labels["gpu"]] == sample.labels["uuid"], sample
    assert len(names) > 40


def test_help_and_type_once_per_family(trace_paths):
    snapshot, clock = snapshot_of(trace_paths)
    text = served(snapshot, clock)
    helps = Counter(line.split()[2] for line in text.splitlines() if line.startswith("# HELP "))
    types = Counter(line.split()[2] for line in text.splitlines() if line.startswith("# TYPE "))
    assert helps == types and set(helps.values()) == {1}
    for sample in series(text):
        assert any(sample.name == name or sample.name.startswith(name + "_") for name in helps), sample.name


def test_bottleneck_is_a_state_set_with_exactly_one_1_per_gpu(trace_paths):
    snapshot, clock = snapshot_of(trace_paths)
    text = served(snapshot, clock)
    states: dict[str, dict[str, float]] = defaultdict(dict)
    for sample in series(text):
        if sample.name == "gpueff_bottleneck":
            states[sample.labels["gpu"]][sample.labels["class"]] = sample.value
    assert len(states) == 6
    for classes in states.values():
        assert set(classes) == set(BOTTLENECK_CLASSES)
        assert sorted(classes.values()) == [0.0] * (len(BOTTLENECK_CLASSES) - 1) + [1.0]
    current = {gpu: next(c for c, v in classes.items() if v == 1) for gpu, classes in states.items()}
    assert current == {"0": "memory", "1": "idle", "2": "compute", "3": "host", "4": "underfilled", "5": "host"}


def test_mismatch_and_efficiency_values(trace_paths):
    snapshot, clock = snapshot_of(trace_paths)
    text = served(snapshot, clock)
    mismatch = {(s.labels["gpu"], s.labels["rule"]): s.value for s in series(text) if s.name == "gpueff_mismatch"}
    assert {key: value for key, value in mismatch.items() if value} == {("4", "high_util_low_sm"): 1.0, ("4", "low_efficiency"): 1.0, ("4", "high_util_low_work"): 1.0}
    efficiency = {s.labels["gpu"]: s.value for s in series(text) if s.name == "gpueff_efficiency_ratio"}
    assert "1" not in efficiency  # idle: utilization 0, no efficiency rather than a fake one
    assert efficiency["4"] == pytest.approx(1 / 132, rel=0.02)
    build = next(s for s in series(text) if s.name == "gpueff_exporter_build_info")
    assert build.labels["replayed"] == "true" and build.labels["backend"] == "replay"
    info = {s.labels["gpu"]: s.labels for s in series(text) if s.name == "gpueff_gpu_info"}
    assert info["4"]["trace"] == "spin_1sm" and info["4"]["model"] == "NVIDIA H200"


class OneGpu(Backend):
    """A backend that reads back one fixed sample: for readings no recorded trace has."""

    name = "nvml"

    def __init__(self, sample: GpuSample) -> None:
        super().__init__()
        self.sample = sample

    def start(self) -> list[DeviceInfo]:
        return [self.sample.device]

    def collect(self) -> list[GpuSample]:
        return [self.sample]


def bare_snapshot(sample: GpuSample, config: Config = Config()) -> Snapshot:
    backend = OneGpu(sample)
    backend.start()
    return Poller(backend, config, clock=lambda: sample.timestamp).poll_once()


def test_no_series_for_readings_that_are_none():
    device = DeviceInfo(index=0, uuid="GPU-bare", name="NVIDIA Imaginary X1")
    snapshot = bare_snapshot(GpuSample(device=device, timestamp=0.0), Config(price_per_gpu_hour=5.0))
    text = render(snapshot).decode()
    promtool_check(text)
    names = {s.name for s in series(text) if s.name not in SELF_METRICS}
    # The state ledger is a fact from the first poll (no window observed yet, in any state), and so is whose GPU it is.
    assert names == {"gpueff_gpu_up", "gpueff_gpu_info", "gpueff_profiling_available", "gpueff_bottleneck", "gpueff_gpu_state_seconds_total", "gpueff_gpu_state_cost_total", "gpueff_gpu_attribution_info"}
    assert 'gpueff_gpu_attribution_info{gpu="0",uuid="GPU-bare",path="none",reason="processes_not_listed"} 1' in text
    assert "gpueff_profiling_available{gpu=\"0\",uuid=\"GPU-bare\"} 0" in text  # a real fact: profiling is not read
    assert 'class="unknown"} 1' in text


def test_a_gpu_without_profiling_gets_coarse_series_only():
    device = DeviceInfo(index=0, uuid="GPU-a100", name="NVIDIA A100-SXM4-80GB", power_limit_watts=400)
    sample = GpuSample(device=device, timestamp=0.0, gpu_utilization=0.97, power_watts=250.0, temperature_celsius=55)
    text = render(bare_snapshot(sample)).decode()
    promtool_check(text)
    names = {s.name for s in series(text)}
    assert {"gpueff_gpu_utilization_ratio", "gpueff_power_watts", "gpueff_power_limit_watts", "gpueff_temperature_celsius", "gpueff_gpu_busy_seconds_total"} <= names
    for absent in ("gpueff_sm_active_ratio", "gpueff_efficiency_ratio", "gpueff_mismatch", "gpueff_pipe_busy_flops_per_second",
                   "gpueff_busy_idle_sm_seconds_total", "gpueff_sm_active_seconds_total", "gpueff_pipe_active_seconds_total", "gpueff_dram_active_seconds_total",
                   "gpueff_energy_joules_total", "gpueff_memory_used_bytes"):
        assert absent not in names, absent
    assert 'class="unknown"} 1' in text


def test_label_values_are_escaped():
    device = DeviceInfo(index=0, uuid='GPU-"odd"\\x', name='NVIDIA "Quoted"\nName', driver="1\\2")
    text = render(bare_snapshot(GpuSample(device=device, timestamp=0.0))).decode()
    promtool_check(text)
    info = next(s for s in series(text) if s.name == "gpueff_gpu_info")
    assert info.labels["model"] == 'NVIDIA "Quoted"\nName' and info.labels["uuid"] == 'GPU-"odd"\\x' and info.labels["driver"] == "1\\2"


def test_unusual_values_render_as_prometheus_numbers():
    assert number(1.0) == "1" and number(0.0) == "0" and number(-3.0) == "-3"
    assert number(0.25) == "0.25"
    assert number(1e20) == "1e+20"
    assert number(math.nan) == "NaN"
    assert number(math.inf) == "+Inf" and number(-math.inf) == "-Inf"


def test_down_gpu_keeps_no_derived_or_cost_series(trace_paths):
    snapshot, clock = snapshot_of(trace_paths, Config(price_per_gpu_hour=1.0), lost={0, 1, 2, 3, 4, 5})
    text = served(snapshot, clock)
    promtool_check(text)
    assert {s.name for s in series(text) if s.name not in SELF_METRICS} == {"gpueff_gpu_up", "gpueff_gpu_info"}


def test_body_is_none_before_the_first_poll():
    assert Payloads().body() is None


def test_the_body_is_rendered_only_when_the_snapshot_changes(trace_paths, monkeypatch):
    calls = []

    def counting_render(snapshot, stale=False):
        calls.append((snapshot.sequence, stale))
        return render(snapshot, stale)

    monkeypatch.setattr(payload_module, "render", counting_render)
    clock = FakeClock()
    backend = ReplayBackend([load_trace(trace_paths["spin_1sm"])], clock=clock)
    poller = Poller(backend, Config(), clock=clock)
    backend.start()
    served_by = payloads_following(poller, clock)
    poller.poll_once()
    assert calls == [(1, False)]  # rendered on the poller's thread, right after its poll
    bodies = [served_by.body() for _ in range(5)]
    assert calls == [(1, False)]
    assert len({body.split(b"gpueff_snapshot_age_seconds ")[0] for body in bodies}) == 1
    clock.now += 0.7
    aged = served_by.body()
    assert calls == [(1, False)]
    assert aged.endswith(b"gpueff_snapshot_age_seconds 0.700\n")
    poller.poll_once()
    served_by.body()
    served_by.body()
    assert calls == [(1, False), (2, False)]
    clock.now += 60  # stale: rendered once more, as down
    stale = served_by.body()
    served_by.body()
    assert calls == [(1, False), (2, False), (2, True)]
    assert b"\ngpueff_collect_stale 1\n" in stale


def test_a_poll_no_scrape_will_read_is_not_rendered(trace_paths, monkeypatch):
    rendered = []

    def counting_render(snapshot, stale=False):
        rendered.append(snapshot.sequence)
        return render(snapshot, stale)

    monkeypatch.setattr(payload_module, "render", counting_render)
    clock = FakeClock()
    backend = ReplayBackend([load_trace(trace_paths["spin_1sm"])], clock=clock)
    poller = Poller(backend, Config(), clock=clock)  # collect_interval 1 s
    backend.start()
    served_by = payloads_following(poller, clock)

    def poll_for(seconds: int) -> None:
        for _ in range(seconds):
            clock.now += 1.0
            poller.poll_once()

    poller.poll_once()
    for _ in range(3):  # three scrapes 10 s apart: the cadence is known
        poll_for(10)
        served_by.body()
    rendered.clear()
    poll_for(10)  # the next scrape is due 10 s after the last: only the polls from 2 s before it are rendered
    assert rendered == [poller.snapshot.sequence - 2, poller.snapshot.sequence - 1, poller.snapshot.sequence]
    body = served_by.body()
    assert rendered[-1] == poller.snapshot.sequence and b"gpueff_snapshot_age_seconds 0.000" in body
    rendered.clear()
    poll_for(4)  # a scrape earlier than the cadence renders the latest snapshot itself, once
    assert rendered == []
    early = served_by.body()
    served_by.body()
    assert rendered == [poller.snapshot.sequence]
    assert early.split(b"# HELP gpueff_snapshot_age_seconds")[0] == render(poller.snapshot)


def test_every_declared_metric_has_help_and_a_known_type():
    for metric in METRICS:
        assert metric.name.startswith("gpueff_" if metric.scope != "process" else "process_") and metric.help and metric.type in {"gauge", "counter", "summary"}
        assert (metric.type == "counter") == metric.name.endswith("_total"), metric.name
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_every_nvml_reading_renders_in_base_units():
    device = DeviceInfo(index=3, uuid="GPU-full", name="NVIDIA H100 80GB HBM3", driver="580.159.04", pci_bus_id="00000000:18:00.0", sm_count=132,
                        max_sm_clock_mhz=1980, max_memory_clock_mhz=2619, power_limit_watts=700)
    sample = GpuSample(device=device, timestamp=0.0, window_seconds=1.0, gpu_utilization=0.5, memory_utilization=0.25, power_watts=350.5, energy_joules=1.5e6,
                       temperature_celsius=60, memory_temperature_celsius=70, sm_clock_mhz=1455, memory_clock_mhz=2619, memory_used_bytes=2**30,
                       memory_total_bytes=80 * 2**30, memory_reserved_bytes=2**28, clock_event_reasons=0x4 | 0x40, ecc_corrected_errors=3, ecc_uncorrected_errors=0,
                       remapped_rows_correctable=2, remapped_rows_uncorrectable=0, remapped_rows_pending=False, remapped_rows_failure=True, xid_errors={79: 1, 13: 4},
                       process_count=2, process_memory_bytes=2**29, profiling=Profiling(sm_active=0.4, tensor_active=0.3, tensor_hmma_active=0.3, nvlink_tx_bytes_per_second=1e9))
    text = render(bare_snapshot(sample)).decode()
    promtool_check(text)
    values = {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in {"gpu", "uuid"}))): s.value for s in series(text)}

    def value(name: str, **labels: str) -> float:
        return values[(name, tuple(sorted(labels.items())))]

    assert value("gpueff_sm_clock_hertz") == 1455e6 and value("gpueff_sm_clock_max_hertz") == 1980e6
    assert value("gpueff_memory_clock_hertz") == 2619e6 and value("gpueff_memory_clock_max_hertz") == 2619e6
    assert value("gpueff_power_watts") == 350.5 and value("gpueff_power_limit_watts") == 700
    assert value("gpueff_energy_joules_total") == 1.5e6
    assert value("gpueff_memory_temperature_celsius") == 70 and value("gpueff_memory_reserved_bytes") == 2**28
    assert value("gpueff_clock_event_active", reason="sw_power_cap") == 1 and value("gpueff_clock_event_active", reason="hw_thermal_slowdown") == 1
    assert value("gpueff_clock_event_active", reason="gpu_idle") == 0
    assert value("gpueff_ecc_errors_total", type="corrected") == 3 and value("gpueff_ecc_errors_total", type="uncorrected") == 0
    assert value("gpueff_remapped_rows", cause="correctable") == 2
    assert value("gpueff_remapped_rows_pending") == 0 and value("gpueff_remapped_rows_failure") == 1  # real readings: 0 is a fact here
    assert value("gpueff_xid_errors_total", xid="79") == 1 and value("gpueff_xid_errors_total", xid="13") == 4
    assert value("gpueff_compute_processes") == 2 and value("gpueff_compute_process_memory_bytes") == 2**29
    assert value("gpueff_nvlink_tx_bytes_per_second") == 1e9
    assert value("gpueff_pipe_busy_flops_per_second", pipe="hmma_bf16_equivalent") == pytest.approx(0.3 * 989.4e12 * 1455 / 1830, rel=1e-3)  # the tensor figure is quoted at 1830 MHz
    assert ("gpueff_nvlink_rx_bytes_per_second", ()) not in values and ("gpueff_dram_active_ratio", ()) not in values


def test_a_gzip_scrape_gets_the_same_text_and_each_poll_is_compressed_from_then_on(trace_paths, monkeypatch):
    compressed = []

    def counting_gzip(body):
        compressed.append(len(body))
        return real_gzip(body)

    real_gzip = GzipBody.of
    monkeypatch.setattr(GzipBody, "of", staticmethod(counting_gzip))
    clock = FakeClock()
    backend = ReplayBackend([load_trace(path) for path in trace_paths.values()], clock=clock)
    poller = Poller(backend, Config(), clock=clock)
    backend.start()
    served_by = payloads_following(poller, clock)
    poller.poll_once()
    assert compressed == []  # nobody asked for gzip yet: nothing compressed
    clock.now += 0.25
    zipped = served_by.payload(gzip=True)
    assert zipped.encoding == "gzip" and gzip.decompress(b"".join(zipped.parts)).decode() == served_by.body().decode()
    assert len(compressed) == 1
    clock.now += 0.5
    second = poller.poll_once()
    assert len(compressed) == 2  # a scrape asked: each poll's body is compressed as it is published
    clock.now += 0.125
    payload = served_by.payload(gzip=True)
    assert len(compressed) == 2
    text = zlib.decompress(b"".join(payload.parts), wbits=31).decode()
    body = render(second).decode()
    assert text == body + "# HELP gpueff_snapshot_age_seconds Age of the served data: seconds since the last poll finished.\n# TYPE gpueff_snapshot_age_seconds gauge\ngpueff_snapshot_age_seconds 0.125\n"
    assert payload.length < len(body) / 4
    clock.now += 60  # stale: rendered again as down, and compressed once
    stale = served_by.payload(gzip=True)
    served_by.payload(gzip=True)
    assert len(compressed) == 3
    assert b"\ngpueff_collect_stale 1\n" in gzip.decompress(b"".join(stale.parts))
