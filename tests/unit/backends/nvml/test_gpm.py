"""GPM's GRAPHICS_UTIL on the NVML backend: 1.48 ms of CPU a read on an H100 where every other
metric costs 11-16 µs (docs/gpu-facts.md), so it is read per poll only where it is the window's
busy figure (MIG devices, no driver samples) and elsewhere over the slow window, at the slow cadence."""

from __future__ import annotations

import dataclasses

import pynvml
import pytest
from fakes.nvml import FakeGpu
from fakes.nvml import started_backend as started

from gpueff.exposition.render import render
from gpueff.poller import Poller
from gpueff.settings import load_config
from gpueff.trace import load_trace

ENGINE = "GRAPHICS_UTIL"


@pytest.fixture(scope="module")
def traces(trace_paths):
    return {name: load_trace(path) for name, path in trace_paths.items()}


def requests_of(fake, gpu):
    """(metric names, start, end) of each nvmlGpmMetricsGet for GPU ``gpu``, in order."""
    return [(names, start, end) for index, names, start, end in fake.gpm_requests if index == gpu]


def test_a_full_gpu_leaves_the_engine_out_of_every_polls_request_and_reads_it_over_the_slow_window(traces):
    backend, fake, clock = started([traces["matmul_8192_duty50"]])
    polls = [clock.now]
    backend.collect()
    samples = []
    for _ in range(25):
        clock.advance(1.0)
        polls.append(clock.now)
        samples.append(backend.collect()[0])
    backend.close()
    requests = requests_of(fake, 0)
    windows = [(start, end) for names, start, end in requests if ENGINE not in names]
    slow = [(start, end) for names, start, end in requests if ENGINE in names]
    assert windows == list(zip(polls, polls[1:], strict=False))  # one request a poll, over the poll's window, never with the engine
    assert all(len(names) == 15 for names, _, _ in requests if ENGINE not in names)
    assert all(names == (ENGINE,) for names, _, _ in requests if ENGINE in names)  # the slow window's: the engine alone
    # The first window, then every 10 s, each from the previous slow round's sample to the poll's.
    assert slow == [(polls[0], polls[1]), (polls[1], polls[11]), (polls[11], polls[21])]
    assert all(sample.profiling.graphics_active is None and sample.profiling_available for sample in samples)
    # Each slow round's value is the trace's mean over the slow window, held until the next.
    means = [fake.window_mean(0, ENGINE, start, end) / 100 for start, end in slow]
    assert len(set(means)) == 3  # a duty-cycled job: the rounds differ, so holding is seen
    expected = [means[0]] * 10 + [means[1]] * 10 + [means[2]] * 5
    assert [sample.graphics_active_slow_window for sample in samples] == pytest.approx(expected, rel=1e-12)


def test_the_slow_windows_engine_is_exported_as_the_graphics_engine_metric(traces):
    backend, fake, clock = started([traces["matmul_8192_duty50"]])
    poller = Poller(backend, dataclasses.replace(load_config(None), slow_collect_interval=10.0), clock=clock)  # the poller configures the backend
    try:
        for _ in range(13):
            snapshot = poller.poll_once()
            clock.advance(1.0)
    finally:
        backend.close()
    (state,) = snapshot.gpus
    assert state.sample.profiling.graphics_active is None
    engine = state.sample.graphics_active_slow_window
    (_, start, end) = [request for request in requests_of(fake, 0) if ENGINE in request[0]][-1]
    assert engine == pytest.approx(fake.window_mean(0, ENGINE, start, end) / 100, rel=1e-12) and end - start == pytest.approx(10.0)
    exposition = render(snapshot).decode().splitlines()
    lines = [line for line in exposition if line.startswith("gpueff_graphics_engine_active_slow_window_ratio{")]
    assert len(lines) == 1 and float(lines[0].rsplit(" ", 1)[1]) == pytest.approx(engine, rel=1e-12)
    # the poll-window name is not lent to the slow window's figure: one scrape, one window
    assert not [line for line in exposition if line.startswith("gpueff_graphics_engine_active_ratio{")]


def test_a_mig_device_and_a_gpu_without_driver_samples_keep_the_engine_in_every_window(traces):
    gpus = [
        FakeGpu(traces["matmul_8192"], uuid="GPU-parent"),
        FakeGpu(traces["copy_2GB"], uuid="GPU-nosamples"),
        FakeGpu(traces["matmul_8192"], uuid="MIG-busy", mig_of=0, gpu_instance_id=2),  # the fake lists MIG devices last
    ]
    backend, fake, clock = started(gpus)
    fake.fail("nvmlDeviceGetSamples", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=1)
    backend.collect()
    for _ in range(12):
        clock.advance(1.0)
        by_uuid = {sample.device.uuid: sample for sample in backend.collect()}
    backend.close()
    parent, bare, mig = by_uuid["GPU-parent"], by_uuid["GPU-nosamples"], by_uuid["MIG-busy"]
    for gpu, sample in ((0, parent), (2, mig), (1, bare)):  # a GPU in MIG mode has no utilization of its own either
        requests = requests_of(fake, gpu)
        assert len(requests) == 12 and all(ENGINE in names and len(names) == 16 for names, _, _ in requests), gpu
        assert sample.graphics_active_slow_window is None
        assert sample.profiling.graphics_active == pytest.approx(fake.window_mean(gpu, ENGINE, clock.now - 1.0, clock.now) / 100, rel=1e-12)
    assert fake.calls["nvmlGpmSampleAlloc"] == 3 + 3 + 2  # a MIG device never needs the slow window's buffer


def test_each_device_holds_only_the_metric_requests_it_reads(traces):
    """A c_nvmlGpmMetricsGet_t is 19 KB: every device held all three requests (57 KB; 2.1 MB on a
    node of 8 x 7 MIG devices) where a full GPU with the driver's samples reads two and the others one."""
    gpus = [
        FakeGpu(traces["matmul_8192"], uuid="GPU-full"),
        FakeGpu(traces["matmul_8192"], uuid="GPU-parent"),
        FakeGpu(traces["copy_2GB"], uuid="GPU-nosamples"),
        FakeGpu(traces["matmul_8192"], uuid="MIG-busy", mig_of=1, gpu_instance_id=2),
    ]
    backend, fake, clock = started(gpus)
    fake.fail("nvmlDeviceGetSamples", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=2)
    for _ in range(12):
        backend.collect()
        clock.advance(1.0)
    held = {gpu.info.uuid: sorted(gpu.gpm.requests) for gpu in backend._gpus if gpu.gpm is not None}
    backend.close()
    assert held == {"GPU-full": ["engine", "without_engine"], "GPU-parent": ["every"], "GPU-nosamples": ["every"], "MIG-busy": ["every"]}


def test_no_window_ever_loses_a_sample_it_needs_across_many_polls_and_slow_rounds(traces):
    """Three buffers, rotated: each poll's window runs from the previous poll's sample and each slow
    window from the previous slow round's, at jittered intervals and a slow interval that is not a
    multiple of them; polls too soon after the last sample take none."""
    backend, fake, clock = started([traces["tiny_kernels"], traces["spin_1sm"]], slow_interval=2.5)
    sampled = [clock.now]
    backend.collect()
    for number in range(200):
        clock.advance((0.05, 0.3, 0.7, 1.1, 0.15)[number % 5])
        samples = backend.collect()
        assert all(sample.up for sample in samples)
        if clock.now - sampled[-1] > 0.1:
            sampled.append(clock.now)
    backend.close()
    for gpu in (0, 1):
        requests = requests_of(fake, gpu)
        windows = [(start, end) for names, start, end in requests if ENGINE not in names]
        slow = [(start, end) for names, start, end in requests if ENGINE in names]
        assert windows == list(zip(sampled, sampled[1:], strict=False))
        assert [start for start, _ in slow] == [sampled[0], *(end for _, end in slow[:-1])]  # each slow window starts where the last ended
        assert all(end - start >= 2.5 for start, end in slow[2:]) and len(slow) > 20
        assert slow[1][1] - slow[1][0] >= 2.5 * (1 - gpu / 2)  # the second GPU's second round comes half an interval early: the two read on different polls
    assert fake.gpm_samples == {}  # close freed every buffer


def test_reinitialisation_and_a_refusal_free_every_buffer(traces):
    backend, fake, clock = started([traces["matmul_8192"], traces["idle"]], slow_interval=2.0)
    for _ in range(4):
        backend.collect()
        clock.advance(1.0)
    assert len(fake.gpm_samples) == 6  # three a full GPU: the newest sample, the slow window's start, the next
    fake.unload_driver()
    backend.collect()
    fake.load_driver()
    clock.advance(5.0)
    backend.collect()  # re-initialised: the old buffers freed, new ones allocated
    assert fake.calls["nvmlInit"] == 2 and len(fake.gpm_samples) == 6 and fake.calls["nvmlGpmSampleFree"] == 6
    for _ in range(3):
        clock.advance(1.0)
        backend.collect()
    fake.fail("nvmlGpmSampleGet", pynvml.NVML_ERROR_NO_PERMISSION, gpu=0)
    clock.advance(1.0)
    refused = backend.collect()[0]
    assert not refused.profiling_available and refused.graphics_active_slow_window is None
    assert len(fake.gpm_samples) == 3  # GPU 0's three freed on the refusal
    backend.close()
    assert fake.gpm_samples == {}


def test_at_100_ms_polls_every_poll_has_the_profiling_readings_and_sm_active_time_is_whole(traces):
    """NVML closes no GPM window under 100 ms and polls at 100 ms are often a hair shorter: such a
    poll keeps the last window's readings, so SM activity does not vanish from every other scrape
    and the SM-active counter integrates the whole time (it read about half before)."""
    backend, _, clock = started([traces["matmul_8192"]])
    poller = Poller(backend, load_config(None), clock=clock)
    jitter = [0.0995, 0.1004, 0.0999, 0.1001, 0.0998]
    try:
        snapshots = []
        for step in range(60):
            snapshots.append(poller.poll_once())
            clock.advance(jitter[step % len(jitter)])
    finally:
        backend.close()
    states = [snapshot.gpus[0] for snapshot in snapshots[3:]]
    assert all(state.sample.profiling.sm_active is not None for state in states)
    assert any(state.sample.window_seconds is None for state in states)  # some polls were too soon for a window of their own
    first, last = states[0], states[-1]
    elapsed = last.sample.timestamp - first.sample.timestamp
    active = last.totals.sm_active_seconds - first.totals.sm_active_seconds
    assert active == pytest.approx(last.sample.profiling.sm_active * elapsed, rel=0.05)
