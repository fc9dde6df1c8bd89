"""The poller: snapshots of the replayed traces, backend failures, config reloads, its thread."""

from __future__ import annotations

import dataclasses
import logging
import sys
import time

import pytest
from conftest import payloads_following
from waiting import PATIENCE, wait_until

from gpueff.backends.replay import ReplayBackend
from gpueff.poller import GIL_SWITCH_INTERVAL, Poller
from gpueff.settings import Config
from gpueff.taxonomy import MismatchThresholds
from gpueff.trace import load_trace


class FakeClock:
    def __init__(self, now: float = 500.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FlakyReplay(ReplayBackend):
    """The real replay backend, whose collect() can be made to raise like a buggy backend."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.failure: Exception | None = None

    def collect(self):
        if self.failure is not None:
            raise self.failure
        return super().collect()


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock()


def make(trace_paths, clock: FakeClock, workloads=("copy_2GB", "idle", "matmul_8192", "matmul_8192_duty50", "spin_1sm", "tiny_kernels"), config: Config = Config()):
    backend = FlakyReplay([load_trace(trace_paths[name]) for name in workloads], clock=clock)
    devices = backend.start()
    poller = Poller(backend, config, clock=clock, wall_clock=lambda: 1_700_000_000.0 + clock.now)
    return backend, devices, poller


def test_no_snapshot_and_not_ready_before_the_first_poll(trace_paths, clock):
    _, _, poller = make(trace_paths, clock)
    assert poller.snapshot is None and not poller.ready.is_set()


def test_poll_once_snapshot_contents(trace_paths, clock):
    backend, devices, poller = make(trace_paths, clock)
    clock.now += 1.2
    started = time.perf_counter()
    snapshot = poller.poll_once()
    took = time.perf_counter() - started
    assert poller.snapshot is snapshot and poller.ready.is_set()
    assert snapshot.sequence == 1 and snapshot.polls_total == 1
    assert snapshot.backend_name == "replay" and snapshot.replayed
    assert snapshot.settings.stale_after == poller.config.effective_stale_after
    assert snapshot.taken_monotonic == clock.now
    assert snapshot.last_success_wall == 1_700_000_000.0 + clock.now
    assert snapshot.errors_total == 0
    assert 0 < snapshot.collect_duration_sum_seconds <= took  # seconds of the poll's own real time
    assert [state.sample.device for state in snapshot.gpus] == devices
    by_source = {state.sample.device.source: state for state in snapshot.gpus}
    assert {name: state.derived.bottleneck for name, state in by_source.items()} == {
        "copy_2GB": "memory", "idle": "idle", "matmul_8192": "compute", "matmul_8192_duty50": "host", "spin_1sm": "underfilled", "tiny_kernels": "host",
    }
    assert by_source["spin_1sm"].derived.mismatch == {"high_util_low_sm": True, "low_efficiency": True, "high_util_low_work": True}
    assert all(state.sample.up for state in snapshot.gpus)
    assert all(state.totals.busy_seconds == 0 for state in snapshot.gpus)  # nothing to integrate yet

    clock.now += 0.5
    second = poller.poll_once()
    assert second.sequence == 2 and second.polls_total == 2
    assert second.collect_duration_sum_seconds > snapshot.collect_duration_sum_seconds
    spin = next(state for state in second.gpus if state.sample.device.source == "spin_1sm")
    assert spin.totals.busy_seconds == pytest.approx(0.5, rel=0.001)  # the engine's activity over the window, 0.9995
    assert spin.totals.busy_idle_sm_seconds == pytest.approx(0.5 * (1 - 0.0076), rel=0.001)
    # Snapshots are immutable: the first one kept its own totals.
    assert next(s for s in snapshot.gpus if s.sample.device.source == "spin_1sm").totals.busy_seconds == 0


def test_snapshot_is_frozen(trace_paths, clock):
    _, _, poller = make(trace_paths, clock)
    snapshot = poller.poll_once()
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.sequence = 7  # type: ignore[misc]


def test_a_failing_backend_marks_every_gpu_down_and_recovers(trace_paths, clock, caplog):
    backend, devices, poller = make(trace_paths, clock, ["spin_1sm", "copy_2GB"])
    for _ in range(3):
        clock.now += 0.5
        poller.poll_once()
    before = poller.snapshot.gpus[0].totals.busy_seconds
    good_wall = poller.snapshot.last_success_wall

    backend.failure = RuntimeError("the driver went away")
    with caplog.at_level(logging.INFO, logger="gpueff.poller"):
        for expected_errors in (1, 2, 3):
            clock.now += 0.5
            snapshot = poller.poll_once()
            assert snapshot.errors_total == expected_errors
            assert [state.sample.device for state in snapshot.gpus] == devices
            assert all(not state.sample.up and state.derived is None for state in snapshot.gpus)
            assert snapshot.last_success_wall == good_wall  # the last good poll, not this one
        assert [r.levelno for r in caplog.records].count(logging.ERROR) == 1  # the same failure is logged once
        assert "the driver went away" in caplog.text and "reported down" in caplog.text

        backend.failure = None
        clock.now += 0.5
        snapshot = poller.poll_once()
        assert "works again" in caplog.text
    assert snapshot.errors_total == 3  # a counter: it does not go back down
    assert all(state.sample.up and state.derived is not None for state in snapshot.gpus)
    assert snapshot.gpus[0].derived.bottleneck == "underfilled"
    assert snapshot.last_success_wall == 1_700_000_000.0 + clock.now
    # The outage was not integrated, and the first good poll after it only restarts the integration.
    assert snapshot.gpus[0].totals.busy_seconds == pytest.approx(before)
    clock.now += 0.5
    assert poller.poll_once().gpus[0].totals.busy_seconds == pytest.approx(before + 0.5, rel=0.001)


def test_backend_errors_are_added_to_the_pollers_own(trace_paths, clock):
    backend, _, poller = make(trace_paths, clock, ["idle"])
    backend.errors_total = 4
    backend.failure = OSError("boom")
    snapshot = poller.poll_once()
    assert snapshot.errors_total == 5 and snapshot.gpus == ()  # no GPU known yet: nothing to mark down
    backend.failure = None
    backend.errors_total = 6
    snapshot = poller.poll_once()
    assert snapshot.errors_total == 7 and len(snapshot.gpus) == 1


def test_set_config_takes_effect_on_the_next_poll(trace_paths, clock):
    _, _, poller = make(trace_paths, clock, ["spin_1sm"])
    clock.now += 0.5
    assert poller.poll_once().gpus[0].derived.mismatch["high_util_low_sm"] is True
    relaxed = Config(mismatch=MismatchThresholds(low_sm_active=0.005, low_efficiency_ratio=0.005, low_work_activity=0.0), price_per_gpu_hour=36.0, currency="EUR")
    poller.set_config(relaxed)
    clock.now += 0.5
    snapshot = poller.poll_once()
    assert (snapshot.settings.price_per_gpu_hour, snapshot.settings.currency) == (36.0, "EUR")
    assert snapshot.gpus[0].derived.mismatch == {"high_util_low_sm": False, "low_efficiency": False, "high_util_low_work": False}
    assert snapshot.gpus[0].totals.busy_idle_sm_cost == pytest.approx(0.5 * (1 - 0.0076) * 36 / 3600, rel=0.001)


def test_set_config_changes_the_integration_gap(trace_paths, clock):
    _, _, poller = make(trace_paths, clock, ["spin_1sm"])
    poller.poll_once()
    clock.now += 4.0  # under the default 3 x 1s + 2s
    assert poller.poll_once().gpus[0].totals.busy_seconds == pytest.approx(4.0, rel=0.001)
    poller.set_config(Config(stale_after=2.0))
    clock.now += 4.0  # now over it: not integrated
    assert poller.poll_once().gpus[0].totals.busy_seconds == pytest.approx(4.0, rel=0.001)


def test_start_and_stop_the_thread(trace_paths):
    backend = ReplayBackend([load_trace(trace_paths["spin_1sm"])])
    poller = Poller(backend, Config(collect_interval=0.1))
    poller.start(backend.start())
    try:
        assert poller.ready.wait(PATIENCE)
        wait_until(lambda: poller.snapshot.polls_total >= 3, "three polls")
    finally:
        poller.stop(PATIENCE)
    assert not poller._thread.is_alive()  # so no poll comes after stop
    spin = poller.snapshot.gpus[0]
    assert spin.totals.busy_idle_sm_seconds > 0.1  # real time was integrated


def test_a_backend_failing_from_the_start_serves_its_gpus_as_down(trace_paths):
    backend = FlakyReplay([load_trace(trace_paths["idle"]), load_trace(trace_paths["copy_2GB"])])
    backend.failure = RuntimeError("no")
    poller = Poller(backend, Config(collect_interval=0.1))
    poller.start(backend.start())
    try:
        assert poller.ready.wait(PATIENCE)
        snapshot = poller.snapshot
    finally:
        poller.stop()
    assert [state.sample.device.index for state in snapshot.gpus] == [0, 1]
    assert not any(state.sample.up for state in snapshot.gpus)
    assert snapshot.errors_total >= 1 and snapshot.last_success_wall is None


class BuggyReplay(ReplayBackend):
    """The real replay backend with a bug switched on: a string left among the profiling readings."""

    buggy = False

    def collect(self):
        samples = super().collect()
        if self.buggy:
            samples[0].profiling = dataclasses.replace(samples[0].profiling, tensor_active="0.9")
        return samples


def test_a_poll_that_raises_does_not_end_polling(trace_paths, caplog):
    backend = BuggyReplay([load_trace(trace_paths["matmul_8192"])])
    backend.buggy = True
    poller = Poller(backend, Config(collect_interval=0.1))
    with caplog.at_level(logging.ERROR, logger="gpueff.poller"):
        poller.start(backend.start())
        try:
            wait_until(lambda: poller._own_errors >= 3, "three failing polls")
            assert poller._thread.is_alive()
            assert poller.snapshot is None  # nothing made up while every poll fails
            backend.buggy = False
            assert poller.ready.wait(PATIENCE)
            snapshot = poller.snapshot
        finally:
            poller.stop()
    assert caplog.text.count("a poll failed") == 1  # logged once, not at every poll
    assert "TypeError" in caplog.text
    assert snapshot.gpus[0].derived.bottleneck in {"compute", "mixed"}
    assert snapshot.errors_total >= 2  # every failing poll counted


def assert_a_reload_to_a_short_interval_polls_at_once(poller: Poller) -> None:
    """A reload to a 0.1 s interval: two more polls follow within seconds, not after the old interval."""
    poller.set_config(Config(collect_interval=0.1))
    wait_until(lambda: poller.snapshot.polls_total >= 3, "two more polls")


def test_an_interval_too_long_for_a_wait_does_not_end_polling_and_a_reload_recovers(trace_paths, caplog):
    """Config parsing bounds durations to 1h; were one to slip through (1e300 s overflows a wait),
    the thread still lives, and the next config takes effect at once, not after the old interval."""
    backend = ReplayBackend([load_trace(trace_paths["spin_1sm"])])
    poller = Poller(backend, dataclasses.replace(Config(), collect_interval=1e300))
    poller.start(backend.start())
    try:
        assert poller.ready.wait(PATIENCE)
        time.sleep(0.2)
        assert poller._thread.is_alive() and poller.snapshot.polls_total == 1
        assert_a_reload_to_a_short_interval_polls_at_once(poller)
    finally:
        poller.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_poller_serves_stale_data_as_down_and_is_not_ready(trace_paths):
    backend = ReplayBackend([load_trace(trace_paths["matmul_8192"])])
    poller = Poller(backend, Config(collect_interval=0.1, stale_after=0.3))
    poller.start(backend.start())
    try:
        assert poller.ready.wait(PATIENCE)
        assert poller.is_ready()

        def die() -> None:
            raise SystemExit  # what no `except Exception` catches: the thread ends

        poller.poll_once = die  # type: ignore[method-assign]
        poller._thread.join(PATIENCE)
        assert not poller._thread.is_alive()
        time.sleep(0.4)
        body = payloads_following(poller).body().decode()
    finally:
        poller.stop()
    assert "\ngpueff_collect_stale 1\n" in body
    assert [line for line in body.splitlines() if line.startswith("gpueff_gpu_up{")][0].endswith(" 0")
    assert not poller.is_ready()


def test_a_started_poller_hands_the_gil_over_often_enough_for_scrapes(trace_paths):
    backend = ReplayBackend([load_trace(trace_paths["idle"])])
    poller = Poller(backend, Config())
    poller.start(backend.start())
    try:
        assert sys.getswitchinterval() == pytest.approx(GIL_SWITCH_INTERVAL) and GIL_SWITCH_INTERVAL <= 0.001
    finally:
        poller.stop()


class RenamedMig(FlakyReplay):
    """A MIG device destroyed and re-created between polls: the same readings under a new UUID each time."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.generation = 0

    def collect(self):
        self.generation += 1
        return [sample.replace(device=dataclasses.replace(sample.device, uuid=f"MIG-{self.generation}")) for sample in super().collect()]


def test_a_gpu_that_is_gone_leaves_no_state_behind(trace_paths, clock):
    """Every piece of per-GPU state (smoothing, totals, split ledger) is forgotten together: 50 polls
    of a MIG device whose UUID changes each time keep the state of one GPU, not 50."""
    backend = RenamedMig([load_trace(trace_paths["matmul_8192"])], clock=clock)
    backend.start()
    poller = Poller(backend, Config(), clock=clock)
    for _ in range(50):
        clock.now += 0.5
        poller.poll_once()
    assert poller.tracked_gpus == 1


def test_an_unknown_model_is_logged_once_with_the_config_key_that_adds_it(trace_paths, clock, caplog):
    trace = load_trace(trace_paths["matmul_8192"])
    unknown = dataclasses.replace(trace, gpu={**trace.gpu, "name": "NVIDIA Future GPU"})
    poller = Poller(ReplayBackend([unknown, load_trace(trace_paths["idle"])], clock=clock), Config(), clock=clock)
    poller._devices = poller.backend.start()
    with caplog.at_level(logging.WARNING, logger="gpueff.poller"):
        for _ in range(3):
            clock.now += 1
            state = poller.poll_once().gpus[0]
    assert state.derived.busy_flops is None and state.derived.peak is None
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "'NVIDIA Future GPU'" in warnings[0] and "peaks:" in warnings[0] and "tensor_tflops" in warnings[0]


def test_the_daemons_own_process_figures_are_read_at_most_once_a_second(trace_paths, clock):
    backend = ReplayBackend([load_trace(trace_paths["idle"])], clock=clock)
    backend.start()
    reads = []
    poller = Poller(backend, Config(), clock=clock, process_stats=lambda: reads.append(clock.now) or None)
    for _ in range(25):  # 2.5 s of polls at 100 ms
        poller.poll_once()
        clock.now += 0.1
    assert len(reads) == 3 and reads[1] - reads[0] >= 1.0 and reads[2] - reads[1] >= 1.0


class RenamedReplay(FlakyReplay):
    """Replayed samples as a GPU whose name is in no peaks row would give them, with its NVML facts."""

    def __init__(self, *args, device_facts: dict, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.device_facts = device_facts

    def collect(self):
        return [sample.replace(device=dataclasses.replace(sample.device, **self.device_facts)) for sample in super().collect()]


@pytest.mark.parametrize(("facts", "origin", "logged"), [
    ({"name": "NVIDIA H100", "compute_capability": (9, 0), "memory_bus_width_bits": 5120, "max_memory_clock_mhz": 2619}, "device",
     "its peaks are derived from the device (NVML): 132 SMs x Hopper GH100"),
    ({"name": "NVIDIA Future GPU", "compute_capability": (13, 0), "memory_bus_width_bits": 8192, "max_memory_clock_mhz": 4000}, None,
     "is not in the built-in peaks table: no FLOP/s or bandwidth estimate"),
])
def test_a_model_in_no_row_is_derived_from_its_device_or_logged_once(trace_paths, clock, caplog, facts, origin, logged):
    backend = RenamedReplay([load_trace(trace_paths["matmul_8192"])], clock=clock, device_facts=facts)
    backend.start()
    poller = Poller(backend, Config(), clock=clock, wall_clock=lambda: 1_700_000_000.0 + clock.now)
    with caplog.at_level(logging.INFO, logger="gpueff.poller"):
        for _ in range(3):
            clock.now += 0.5
            snapshot = poller.poll_once()
    peak = snapshot.gpus[0].derived.peak
    assert (peak.origin if peak is not None else None) == origin
    assert caplog.text.count(logged) == 1  # once, at the first poll that sees the model
