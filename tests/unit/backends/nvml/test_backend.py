"""The NVML/GPM backend against a fake pynvml that plays the recorded H200 traces."""

from __future__ import annotations

import copy
import logging
import re
import time

import pynvml
import pytest
from conftest import http_get, payloads_following
from fakes.nvml import FakeClock, FakeGpu, FakeNvml, recorded_gpm
from fakes.nvml import started_backend as started
from frozen import frozen_trace
from waiting import PATIENCE

from gpueff.backends.base import BackendUnavailable
from gpueff.backends.nvml.backend import REINIT_BACKOFF, NvmlBackend, cores_per_sm
from gpueff.logs import record_fields
from gpueff.metrics import MIB
from gpueff.poller import Poller
from gpueff.settings import Config, load_config
from gpueff.trace import load_trace, parse_trace
from gpueff.web.server import WebServer

SLOW_CALLS = ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetFieldValues")


@pytest.fixture(scope="module")
def traces(trace_paths):
    return {name: load_trace(path) for name, path in trace_paths.items()}


def with_nulls(trace, *keys):
    """A copy of ``trace`` where every sample has ``keys`` set to null (NVML said not supported)."""
    data = {"format": "gpu-trace/1", "gpu": trace.gpu, "workload": trace.workload, "interval_s": trace.interval_s, "samples": copy.deepcopy(trace.samples)}
    for record in data["samples"]:
        record.update(dict.fromkeys(keys))
    return parse_trace(data, f"{trace.workload}-with-nulls")


def test_readings_map_to_sample_units(traces):
    backend, fake, clock = started([traces["matmul_8192"]])
    clock.advance(3.2)
    sample = backend.collect()[0]
    record = fake.record(0)
    assert sample.up
    assert sample.gpu_utilization == record["util_gpu"] / 100 and sample.memory_utilization == record["util_mem"] / 100
    assert sample.power_watts == record["power_mw"] / 1000
    assert sample.temperature_celsius == record["temp_c"]
    assert (sample.sm_clock_mhz, sample.memory_clock_mhz) == (record["sm_clock_mhz"], record["mem_clock_mhz"])
    assert (sample.memory_used_bytes, sample.memory_total_bytes) == (record["mem_used"], record["mem_total"])
    assert sample.clock_event_reasons == record["throttle"] == 4  # sw_power_cap: the H200 capped its clock
    assert sample.energy_joules == pytest.approx(fake.energy_mj(0) / 1000, abs=0.001)
    device = sample.device
    assert (device.name, device.driver, device.sm_count) == ("NVIDIA H200", "580.159.04", 132)
    assert (device.max_sm_clock_mhz, device.power_limit_watts) == (1980, 700.0)
    assert device.uuid == "GPU-fake-0-matmul_8192" and device.pci_bus_id == "00000000:18:00.0"
    backend.close()


@pytest.mark.parametrize("workload", ["idle", "spin_1sm", "matmul_8192", "matmul_8192_duty50", "copy_2GB", "tiny_kernels"])
def test_gpm_values_equal_the_trace(traces, workload):
    """Each GPM reading is the trace's mean over the window, in the sample's unit; on a full GPU the
    graphics engine is read over the slow window instead (test_gpm_engine_*)."""
    backend, fake, clock = started([traces[workload]])
    backend.collect()
    for _ in range(4):
        clock.advance(0.5)
        sample = backend.collect()[0]
        assert sample.profiling_available and sample.window_seconds == pytest.approx(0.5)
        assert set(sample.profiling.readings()) == {metric.key for metric in recorded_gpm(traces[workload])} - {"graphics_active"}
        for metric in recorded_gpm(traces[workload]):
            if metric.key == "graphics_active":
                continue
            mean = fake.window_mean(0, metric.name, clock.now - 0.5, clock.now)
            expected = mean / 100 if metric.scale == 0.01 else mean * MIB
            assert sample.profiling.readings()[metric.key] == pytest.approx(min(expected, 1.0) if metric.scale == 0.01 else expected, rel=1e-12), metric.name
    backend.close()


def test_first_poll_primes_and_polls_under_100ms_apart_give_no_profiling(traces):
    backend, fake, clock = started([traces["matmul_8192"]])
    first = backend.collect()[0]
    assert first.up and first.profiling.readings() == {} and not first.profiling_available
    for gap in (0.05, 0.099):  # after the primed sample: neither is more than 100 ms
        clock.now = 1000.0 + gap
        sample = backend.collect()[0]
        assert sample.up and sample.profiling.readings() == {} and not sample.profiling_available
    assert fake.calls["nvmlGpmSampleGet"] == 1 and fake.calls["nvmlGpmMetricsGet"] == 0
    clock.now = 1000.15
    sample = backend.collect()[0]
    assert sample.profiling_available and sample.window_seconds == pytest.approx(0.15)
    assert fake.calls["nvmlGpmSampleGet"] == 2 and fake.calls["nvmlGpmMetricsGet"] == 2  # the window's, and the first slow window's engine
    backend.close()


def test_a_sample_the_drivers_clock_finds_too_soon_is_dropped_not_a_lost_gpu(traces):
    """On a busy host the thread can be held up between a poll's clock and its nvmlGpmSampleGet:
    the poll's times say more than 100 ms, the driver's say less and nvmlGpmMetricsGet answers
    INVALID_ARGUMENT. That sample is dropped (the last window's readings stand for the poll), the
    GPU stays up, and the next window starts at the older sample. Before, the poll failed and
    `record` stopped with "GPU 0 stopped answering"."""
    ours, drivers = FakeClock(), FakeClock()
    fake = FakeNvml([traces["matmul_8192"]], clock=drivers)
    backend = NvmlBackend(nvml=fake, clock=ours, wall_clock=ours)
    backend.start()
    backend.collect()  # primes at 1000.0 on both clocks
    ours.advance(1.0), drivers.advance(1.0)
    window = backend.collect()[0].profiling
    ours.advance(0.5), drivers.advance(0.05)  # the poll read its clock, then waited 0.45 s for the CPU
    held = backend.collect()[0]
    ours.advance(1.0), drivers.advance(1.45)
    after = backend.collect()[0]
    backend.close()
    assert held.up and held.profiling == window and held.window_seconds is None
    assert after.up and after.profiling_available and after.window_seconds == pytest.approx(1.5)


def test_a_failed_metric_is_absent_not_zero(traces):
    trace = with_nulls(traces["copy_2GB"], "DRAM_BW_UTIL", "NVLINK_TOTAL_TX_PER_SEC")
    backend, _, clock = started([trace])
    backend.collect()
    clock.advance(1)
    sample = backend.collect()[0]
    assert sample.profiling.dram_active is None and sample.profiling.nvlink_tx_bytes_per_second is None
    assert sample.profiling.sm_occupancy == pytest.approx(0.80, abs=0.01) and sample.profiling_available
    assert len(sample.profiling.readings()) == len(recorded_gpm(traces["copy_2GB"])) - 3  # the two, and the engine (read over the slow window)
    backend.close()


def test_without_sm_activity_profiling_is_not_available(traces):
    backend, _, clock = started([with_nulls(traces["copy_2GB"], "SM_UTIL")])
    backend.collect()
    clock.advance(1)
    sample = backend.collect()[0]
    assert not sample.profiling_available and sample.profiling.sm_active is None and sample.profiling.dram_active is not None
    backend.close()


def test_pre_hopper_gpu_has_no_profiling_and_says_why(traces, caplog):
    a100 = FakeGpu(traces["matmul_8192"], name="NVIDIA A100-SXM4-80GB", gpm=False)
    with caplog.at_level(logging.WARNING, logger="gpueff.backends.nvml.backend"):
        backend, fake, clock = started([a100, traces["spin_1sm"]])
        for _ in range(3):
            samples = backend.collect()
            clock.advance(1)
    assert samples[0].up and samples[0].gpu_utilization == 0.99  # the recording's util_gpu
    assert not samples[0].profiling_available and samples[0].profiling.readings() == {}
    assert samples[1].profiling_available  # the Hopper beside it is unaffected
    assert fake.device_calls["nvmlGpmSampleGet", 0] == 0 and fake.calls["nvmlGpmSampleAlloc"] == 3  # the Hopper's window and slow window
    assert any("GPU 0 (NVIDIA A100-SXM4-80GB) has no GPM" in message and "DCGM" in message for message in caplog.messages)
    (record,) = [record for record in caplog.records if "has no GPM" in record.getMessage()]
    assert record_fields(record) == {"gpu": 0, "uuid": fake.gpus[0].uuid} and fake.gpus[0].uuid.startswith("GPU-"), "the line's gpu= and uuid= keys"
    backend.close()


def test_gpm_refused_names_the_fix(traces, caplog):
    backend, fake, clock = started([traces["matmul_8192"], traces["spin_1sm"]])
    fake.fail("nvmlGpmSampleGet", pynvml.NVML_ERROR_NO_PERMISSION, gpu=0)
    with caplog.at_level(logging.WARNING, logger="gpueff.backends.nvml.backend"):
        for _ in range(4):
            samples = backend.collect()
            clock.advance(1)
    assert samples[0].up and not samples[0].profiling_available and samples[0].profiling.readings() == {}
    assert samples[1].profiling_available
    assert fake.device_calls["nvmlGpmSampleGet", 0] == 1  # refused once, not asked again
    refusals = [message for message in caplog.messages if "GPM sampling was refused" in message]
    assert len(refusals) == 1
    assert "RmProfilingAdminOnly" in refusals[0] and "CAP_SYS_ADMIN" in refusals[0] and "NVreg_RestrictProfilingToAdminUsers=0" in refusals[0]
    assert backend.errors_total == 0
    backend.close()


def test_slow_calls_only_at_the_slow_interval_and_carried_on(traces):
    gpu = FakeGpu(traces["matmul_8192"], fields={pynvml.NVML_FI_DEV_MEMORY_TEMP: 52.0}, ecc_errors=(3, 0), remapped_rows=(1, 0, 0, 0))
    backend, fake, clock = started([gpu], slow_interval=10.0)
    energies = []
    for _ in range(25):
        sample = backend.collect()[0]
        energies.append(sample.energy_joules)
        assert sample.memory_temperature_celsius == 52.0 and sample.ecc_corrected_errors == 3 and sample.ecc_uncorrected_errors == 0
        assert sample.remapped_rows_correctable == 1 and sample.remapped_rows_pending is False
        clock.advance(1)
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 25
    assert [fake.calls[name] for name in SLOW_CALLS] == [3, 6, 3, 6]  # at 0 s, 10 s, 20 s (ECC: two calls each; field values: + the NVLink count three times at 0 s, none here)
    assert energies[0] == energies[9] != energies[10] == energies[19] != energies[20] == energies[24]
    assert energies[10] == pytest.approx(fake.energy_mj(0, at=1010.0) / 1000, abs=0.001)
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0  # PCIe rates come from GPM
    backend.close()


def test_the_gpus_slow_rounds_fall_on_different_polls(traces):
    """Each GPU's slow round (energy, ECC, health, the graphics engine: a few ms of NVML calls) is
    spread over the slow interval: after the first poll, no poll carries two GPUs' rounds."""
    backend, fake, clock = started([traces["matmul_8192"]] * 4, slow_interval=10.0)
    slow = ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetViolationStatus", "nvmlGpmMetricsGet")
    rounds: list[dict[str, set[int]]] = []
    for _ in range(40):
        before = {(name, gpu): fake.device_calls[name, gpu] for name in slow[:2] for gpu in range(4)}
        metrics_before = fake.calls["nvmlGpmMetricsGet"]
        backend.collect()
        rounds.append({name: {gpu for gpu in range(4) if fake.device_calls[name, gpu] > before[name, gpu]} for name in slow[:2]})
        rounds[-1]["engine_reads"] = set(range(fake.calls["nvmlGpmMetricsGet"] - metrics_before - 4))  # beyond each GPU's window
        clock.advance(1)
    assert all(len(gpus) == 4 for gpus in (rounds[0][slow[0]], rounds[0][slow[1]]))  # every reading exists from the start
    for name in (*slow[:2], "engine_reads"):
        per_poll = [len(found[name]) for found in rounds[2:]]
        assert max(per_poll) == 1 and sum(per_poll) >= 4 * 3, (name, per_poll)  # one GPU at a time, each every 10 s
    backend.close()


def test_a_reload_tells_the_backend_its_new_slow_interval(traces):
    """SIGHUP with a new slow_collect_interval reaches the NVML backend (it was copied once, at start)."""
    backend, fake, clock = started([traces["matmul_8192"]], slow_interval=10.0)
    poller = Poller(backend, Config(slow_collect_interval=10.0))
    poller.set_config(Config(slow_collect_interval=2.0))
    for _ in range(5):
        backend.collect()
        clock.advance(1)
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 3  # at 0 s, 2 s and 4 s
    backend.close()


@pytest.mark.parametrize(
    "function, attribute, calls",
    [
        ("nvmlDeviceGetPowerUsage", "power_watts", 1),
        ("nvmlDeviceGetUtilizationRates", "gpu_utilization", 1),
        ("nvmlDeviceGetTemperature", "temperature_celsius", 1),
        ("nvmlDeviceGetClockInfo", "sm_clock_mhz", 2),  # SM and memory clocks: one call each
        ("nvmlDeviceGetMemoryInfo", "memory_used_bytes", 2),  # the v2 call, then the v1 fallback
        ("nvmlDeviceGetCurrentClocksEventReasons", "clock_event_reasons", 1),
        ("nvmlDeviceGetComputeRunningProcesses", "process_count", 1),
        ("nvmlDeviceGetTotalEnergyConsumption", "energy_joules", 1),
        ("nvmlDeviceGetTotalEccErrors", "ecc_corrected_errors", 2),
        ("nvmlDeviceGetRemappedRows", "remapped_rows_correctable", 1),
        ("nvmlDeviceGetSamples", "gpu_utilization_window", 1),  # MIG devices answer so
    ],
)
def test_a_call_that_answered_not_supported_is_not_made_again(traces, function, attribute, calls):
    backend, fake, clock = started([traces["matmul_8192"]], slow_interval=1.0)
    fake.fail(function, pynvml.NVML_ERROR_NOT_SUPPORTED)
    for _ in range(5):
        sample = backend.collect()[0]
        clock.advance(1)
    assert sample.up and getattr(sample, attribute) is None and sample.profiling_available
    assert fake.calls[function] == calls
    assert backend.errors_total == 0
    backend.close()


def test_memory_temperature_field_not_supported_is_not_asked_again(traces):
    backend, fake, clock = started([traces["idle"]], slow_interval=1.0)  # no field values set: NOT_SUPPORTED per field
    for _ in range(4):
        sample = backend.collect()[0]
        clock.advance(1)
    assert sample.memory_temperature_celsius is None and fake.calls["nvmlDeviceGetFieldValues"] == 4  # and the NVLink count three times: no NVLink, not asked again
    backend.close()


def test_lost_gpu_goes_down_alone_and_comes_back_after_reinit(traces):
    backend, fake, clock = started([traces["matmul_8192"], traces["spin_1sm"], traces["idle"]])
    backend.collect()
    clock.advance(1)
    fake.lose_gpu(1)
    samples = backend.collect()
    assert [sample.up for sample in samples] == [True, False, True]
    assert samples[0].profiling_available and samples[2].profiling_available
    assert backend.errors_total == 1
    clock.advance(0.5)  # before the back-off: no re-initialisation, the lost GPU is not asked again
    samples = backend.collect()
    assert [sample.up for sample in samples] == [True, False, True] and fake.calls["nvmlInit"] == 1
    clock.advance(1)  # back-off over, GPU 1 still lost: the others must stay up through the re-initialisation
    samples = backend.collect()
    assert fake.calls["nvmlInit"] == 2
    assert [(sample.device.index, sample.up) for sample in samples] == [(0, True), (1, False), (2, True)]
    with_profiling = 0
    for _ in range(20):  # still lost: re-initialisations get rarer, so the healthy GPUs keep their GPM pairs
        clock.advance(1)
        samples = backend.collect()
        assert [sample.up for sample in samples] == [True, False, True]
        with_profiling += samples[0].profiling_available and samples[2].profiling_available
    assert fake.calls["nvmlInit"] == 5 and with_profiling == 17  # tries 2, 4 and 8 s apart; one poll primes after each
    fake.recover_gpu(1)
    for _ in range(20):  # a later re-initialisation finds it
        clock.advance(1)
        samples = backend.collect()
    assert [(sample.device.index, sample.up) for sample in samples] == [(0, True), (1, True), (2, True)]
    assert samples[1].device.uuid == "GPU-fake-1-spin_1sm" and samples[1].profiling_available
    assert samples[1].profiling.sm_active == pytest.approx(fake.window_mean(1, "SM_UTIL", clock.now - 1, clock.now) / 100)
    assert backend.errors_total == 1
    assert len(fake.gpm_samples) == 9  # GPM samples of the old handles were freed: three a GPU are left
    backend.close()


def test_driver_gone_all_down_reinit_with_growing_backoff_then_recovery(traces):
    backend, fake, clock = started([traces["matmul_8192"], traces["copy_2GB"]])
    backend.collect()
    clock.advance(1)
    fake.unload_driver()
    samples = backend.collect()
    assert [sample.up for sample in samples] == [False, False] and backend.errors_total == 1
    tries = []
    for _ in range(60):  # 30 s of polls every 0.5 s
        clock.advance(0.5)
        before = fake.calls["nvmlInit"]
        samples = backend.collect()
        assert [sample.up for sample in samples] == [False, False]
        if fake.calls["nvmlInit"] > before:
            tries.append(clock.now)
    gaps = [round(later - earlier, 1) for earlier, later in zip(tries, tries[1:])]
    assert gaps == [2.0, 4.0, 8.0], tries  # the first try came REINIT_BACKOFF[0] after the loss, then doubling
    assert tries[0] - 1001.0 == pytest.approx(REINIT_BACKOFF[0], abs=0.5)
    fake.load_driver()
    for _ in range(40):
        clock.advance(0.5)
        samples = backend.collect()
        if all(sample.up for sample in samples):
            break
    assert all(sample.up for sample in samples)
    clock.advance(1)
    samples = backend.collect()
    assert all(sample.profiling_available for sample in samples) and backend.errors_total == 1
    assert fake.init_count == 1
    backend.close()
    assert fake.init_count == 0


# The reason only: the command that started the backend adds its own next step (the daemon's
# --demo hint; record and selftest have none): tests/system/test_first_contact.py.
def test_nvml_init_failing_is_backend_unavailable_with_the_reason(traces):
    fake = FakeNvml([traces["idle"]])
    fake.fail("nvmlInit", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(BackendUnavailable, match=r"cannot initialise NVML \(NVML Shared Library Not Found\): no usable NVIDIA driver"):
        NvmlBackend(nvml=fake).start()


def test_nvml_init_refused_names_the_device_files_not_a_missing_driver(traces):
    fake = FakeNvml([traces["idle"]])
    fake.fail("nvmlInit", pynvml.NVML_ERROR_NO_PERMISSION)
    with pytest.raises(BackendUnavailable, match=r"cannot initialise NVML \(Insufficient Permissions\): this user may not open the NVIDIA device files \(/dev/nvidia\*"):
        NvmlBackend(nvml=fake).start()


def test_no_gpu_is_backend_unavailable_with_the_reason():
    with pytest.raises(BackendUnavailable, match="NVML found no NVIDIA GPU on this machine"):
        NvmlBackend(nvml=FakeNvml([])).start()


def test_xid_events_counted_per_gpu_and_code(traces):
    backend, fake, clock = started([traces["matmul_8192"], traces["idle"]])
    assert fake.xid(0, 79) == 1 and fake.xid(0, 79) == 1 and fake.xid(1, 48) == 1 and fake.xid(0, 13) == 1
    deadline = time.monotonic() + PATIENCE
    while True:
        samples = backend.collect()
        if [sample.xid_errors for sample in samples] == [{79: 2, 13: 1}, {48: 1}] or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert [sample.xid_errors for sample in samples] == [{79: 2, 13: 1}, {48: 1}]
    assert all(sample.up for sample in samples)
    backend.close()
    assert fake.event_sets == []  # the event set was freed


def test_the_xid_thread_asks_for_two_second_waits(traces):
    """Each return of nvmlEventSetWait costs driver CPU whether or not an Xid came (docs/health.md):
    the thread waits 2 s a call, not the 500 ms it once did."""
    backend, fake, _ = started([traces["idle"]])
    deadline = time.monotonic() + PATIENCE
    while not fake.event_wait_timeouts and time.monotonic() < deadline:
        time.sleep(0.01)
    backend.close()
    assert set(fake.event_wait_timeouts) == {2000}


def test_derivations_and_exposition_over_nvml_reproduce_the_planted_mismatch(traces):
    workloads = ["idle", "spin_1sm", "matmul_8192", "copy_2GB", "tiny_kernels"]
    backend, fake, clock = started([traces[name] for name in workloads])
    poller = Poller(backend, load_config(None), clock=clock)
    exposition = payloads_following(poller, clock)
    server = WebServer("127.0.0.1:0", exposition.payload, poller.ready.is_set, "fake NVML")
    server.start()
    try:
        for _ in range(3):
            poller.poll_once()
            clock.advance(1)
        status, body = http_get(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        server.close()
        backend.close()
    assert status == 200

    def value(metric: str, gpu: int, extra: str = "") -> float:
        match = re.search(rf'^{metric}{{gpu="{gpu}",uuid="GPU-fake-{gpu}-{workloads[gpu]}"{extra}}} (\S+)$', body, re.M)
        assert match, (metric, gpu, extra)
        return float(match.group(1))

    assert 'backend="nvml",replayed="false"' in body
    spin = 1
    assert value("gpueff_gpu_utilization_instant_ratio", spin) == 1  # nvidia-smi's figure
    assert value("gpueff_gpu_utilization_ratio", spin) == pytest.approx(1, abs=0.001)  # the window's engine activity
    assert value("gpueff_sm_active_ratio", spin) == pytest.approx(0.0076, abs=0.0005)
    assert value("gpueff_mismatch", spin, ',rule="high_util_low_sm"') == 1
    assert value("gpueff_bottleneck", spin, ',class="underfilled"') == 1
    assert value("gpueff_mismatch", 2, ',rule="high_util_low_sm"') == 0
    assert value("gpueff_bottleneck", 2, ',class="compute"') == 1
    assert value("gpueff_bottleneck", 3, ',class="memory"') == 1
    assert value("gpueff_bottleneck", 0, ',class="idle"') == 1
    assert value("gpueff_profiling_available", 4) == 1
    # The matmul's estimated FLOP/s: HMMA activity x 989.4 TFLOP/s x SM clock / max clock (docs/gpu-facts.md),
    # the clock being the mean of its readings at both ends of the window.
    record, start = fake.record(2, at=clock.now - 1), fake.record(2, at=clock.now - 2)  # the last poll's reading, and the one before
    hmma = fake.window_mean(2, "HMMA_TENSOR_UTIL", clock.now - 2, clock.now - 1)  # over the last poll's window
    expected = hmma / 100 * 989.4e12 * (record["sm_clock_mhz"] + start["sm_clock_mhz"]) / 2 / 1830
    assert value("gpueff_pipe_busy_flops_per_second", 2, ',pipe="hmma_bf16_equivalent"') == pytest.approx(expected, rel=1e-3)  # the basis is 989.4e12 / (132 x 4096) = 1829.9 MHz
    assert value("gpueff_busy_idle_sm_seconds_total", spin) == pytest.approx(2 * (1 - 0.0076), abs=0.01)


@pytest.mark.parametrize(("gpu", "cores", "capability", "sms"), [
    ("H100 SXM", 16896, (9, 0), 132),
    ("H100 PCIe", 14592, (9, 0), 114),
    ("A100", 6912, (8, 0), 108),
    ("L40S", 18176, (8, 9), 142),
    ("L4", 7424, (8, 9), 58),
    ("V100", 5120, (7, 0), 80),
    ("T4", 2560, (7, 5), 40),
])
def test_sm_count_from_cuda_cores_matches_published_figures(gpu, cores, capability, sms):
    """The fake answers cores = SMs x 128, which only checks the division back; these are the data sheets' figures."""
    assert cores // cores_per_sm(*capability) == sms, gpu


def test_the_windows_utilization_is_the_mean_of_the_driver_samples_taken_inside_it(traces):
    """Not the driver's latest sample: every sample since the last poll (one every 200 ms here), so
    a half-duty job reads its duty, and copy-engine work (which these samples count) is in it."""
    backend, fake, clock = started([traces["matmul_8192_duty50"]])
    assert backend.collect()[0].gpu_utilization_window is None  # the first answer reaches back before any window
    for _ in range(4):
        clock.advance(1.0)
        sample = backend.collect()[0]
        period = fake.DRIVER_SAMPLE_PERIOD
        stamps = [fake.started + number * period for number in range(int((clock.now - fake.started) / period) + 1)]
        inside = [fake.record(0, at=at)["util_gpu"] for at in stamps if clock.now - 1.0 < at <= clock.now]
        assert sample.gpu_utilization_window == pytest.approx(sum(inside) / len(inside) / 100)
    assert fake.calls["nvmlDeviceGetSamples"] == 5  # one call a poll
    backend.close()


def newest_stamp(fake, at):
    """The timestamp (µs) of the fake driver's newest utilization sample at fake time ``at``."""
    return round((fake.started + int((at - fake.started) / fake.DRIVER_SAMPLE_PERIOD) * fake.DRIVER_SAMPLE_PERIOD) * 1e6)


def test_each_poll_asks_the_driver_only_for_the_samples_after_the_newest_seen(traces):
    """lastSeenTimeStamp is the newest sample of the last answer, so the driver filters out what
    the last poll took; the first call asks from 0."""
    backend, fake, clock = started([traces["matmul_8192_duty50"]])
    clock.advance(1.0)
    newest = []
    for _ in range(4):
        backend.collect()
        newest.append(newest_stamp(fake, clock.now))
        clock.advance(0.5)
    assert [seen for index, seen in fake.samples_last_seen if index == 0] == [0, *newest[:-1]]
    backend.close()


def test_a_poll_before_the_next_driver_sample_can_exist_does_not_ask_and_means_the_same(traces):
    """At 100 ms polls and a sample every 200 ms, a poll less than 0.9 sample gaps after the newest
    sample does not call nvmlDeviceGetSamples (1.5 ms on an H100): it would answer NOT_FOUND. Every
    window's mean is what a backend that asks every poll gets."""
    backends = []
    for wall_offset in (0.0, 3600.0):  # the driver's timestamps on the wall clock, or an hour off it
        clock = FakeClock()
        fake = FakeNvml([traces["matmul_8192_duty50"]], clock=clock)
        backend = NvmlBackend(nvml=fake, clock=clock, wall_clock=lambda clock=clock, offset=wall_offset: clock() + offset)
        backend.start()
        backends.append((backend, fake, clock))
    windows: list[list[float | None]] = [[], []]
    for _ in range(60):
        for (backend, _, clock), seen in zip(backends, windows, strict=True):
            clock.advance(0.1)
            seen.append(backend.collect()[0].gpu_utilization_window)
    assert windows[0] == windows[1]
    assert sum(value is not None for value in windows[0]) >= 25  # a new sample about every other poll
    skipping, asking = (fake.calls["nvmlDeviceGetSamples"] for _, fake, _ in backends)
    assert asking == 60 and skipping <= 35  # off the wall clock, every poll asks
    for backend, _, _ in backends:
        backend.close()


def test_a_window_without_a_new_driver_sample_holds_the_newest_samples_value(traces):
    """At 100 ms polls and a sample every 200 ms about every other window holds no new sample: it
    takes the newest sample's value (the driver's own series, held), not None and not NVML's latest
    reading, which is another sampler."""
    clock = FakeClock()
    fake = FakeNvml([traces["matmul_8192_duty50"]], clock=clock)
    backend = NvmlBackend(nvml=fake, clock=clock, wall_clock=clock)
    backend.start()
    windows = []
    for _ in range(40):
        clock.advance(0.1)
        sample = backend.collect()[0]
        windows.append((sample.gpu_utilization_window, fake.calls["nvmlDeviceGetSamples"]))
    values = [value for value, _ in windows[2:]]
    assert all(value is not None for value in values)
    held = [index for index in range(3, len(windows)) if windows[index][1] == windows[index - 1][1]]  # polls that did not ask
    assert len(held) >= 10
    assert all(windows[index][0] == windows[index - 1][0] for index in held)
    backend.close()


def test_profiling_frozen_at_0_under_load_is_flagged_and_wastes_nothing():
    """DCGM issue 303's failure, on GPM: every profiling reading 0 while NVML's utilization reads
    99. The window is implausible: class unknown, no mismatch, no point estimate, no busy-but-idle time."""
    clock = FakeClock()
    backend = NvmlBackend(nvml=FakeNvml([frozen_trace()], clock=clock), clock=clock, wall_clock=clock)
    poller = Poller(backend, Config(collect_interval=1.0), clock=clock)
    poller._devices = backend.start()
    states = []
    for _ in range(8):
        clock.advance(1.0)
        states.append(poller.poll_once().gpus[0])
    windows = [state for state in states if state.sample.profiling.sm_active is not None]
    assert windows and all(state.sample.profiling.sm_active == 0 and state.sample.gpu_utilization >= 0.9 for state in windows)
    for state in windows:
        derived = state.derived
        assert derived.implausible["profiling_zero_under_load"] and derived.bottleneck == "unknown"
        assert not any(derived.mismatch.values()) and derived.estimated_flops is None
    assert windows[-1].totals.busy_idle_sm_seconds == 0
