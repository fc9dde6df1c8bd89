"""The fair split end to end: fake pynvml (per-process samples) -> NVML backend -> poller -> exposition,
with the processes' cgroups and names in a fake /proc."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pynvml
import pytest
from fakes.nvml import FakeClock, FakeGpu, FakeNvml
from fakes.proc import process
from prometheus_client.parser import text_string_to_metric_families

from gpueff.attribution.kubernetes.owners import GpuOwners, PodOwner
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.exposition.render import render
from gpueff.poller import Poller
from gpueff.settings import parse_config
from gpueff.trace import load_trace

SLURM_V2 = "0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"
SLURM_V1 = "11:devices:/slurm/uid_1000/job_{job}/step_batch/task_0\n10:memory:/slurm/uid_1000/job_{job}/step_batch/task_0\n"


def fake_proc(root: Path, processes: dict[int, tuple[str, str]], uid: int = 1000) -> Path:
    """pid -> (cgroup file text, comm); every process of user ``uid``."""
    for pid, (cgroup, comm) in processes.items():
        process(root, pid, comm, cgroup=cgroup.rstrip("\n"), uid=uid)
    return root


def run(trace_paths, proc: Path, gpus: list[FakeGpu], polls: int = 20, interval: float = 1.0, **settings) -> tuple[dict, FakeNvml, Poller]:
    clock = FakeClock()
    fake = FakeNvml(gpus, clock=clock)
    backend = NvmlBackend(slow_interval=5.0, nvml=fake, clock=clock)
    backend.start()
    config = parse_config({"sharing": {"enabled": True}, "proc_root": str(proc), "slow_collect_interval": "5s", **settings})  # the poller hands it to the backend: energy settles 4 times
    poller = Poller(backend, config, clock=clock)
    for _ in range(polls):
        poller.poll_once()
        clock.advance(interval)
    snapshot = poller.poll_once()
    values: dict = defaultdict(dict)
    for family in text_string_to_metric_families(render(snapshot).decode()):
        for s in family.samples:
            values[s.name][tuple(sorted(s.labels.items()))] = s.value
    return values, fake, poller


def holder_values(values: dict, name: str, gpu: str = "0") -> dict[tuple[str, str], float]:
    return {(dict(k)["holder_kind"], dict(k)["holder"]): v for k, v in values[name].items() if dict(k)["gpu"] == gpu}


def gpu_value(values: dict, name: str, gpu: str = "0") -> float:
    return next(v for k, v in values[name].items() if dict(k)["gpu"] == gpu)


def test_two_slurm_jobs_time_sliced_70_30_get_70_30_and_add_up(trace_paths, tmp_path):
    proc = fake_proc(tmp_path, {100: (SLURM_V2.format(job=501), "python3"), 200: (SLURM_V1.format(job=502), "python3"), 201: (SLURM_V1.format(job=502), "python3")})
    gpu = FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(100, 1 << 30, "/usr/bin/python3"), (200, 1 << 30, "/usr/bin/python3"), (201, 1 << 20, "/usr/bin/python3")], process_duty={100: 0.7, 200: 0.2, 201: 0.1})
    values, fake, _ = run(trace_paths, proc, [gpu])
    busy = holder_values(values, "gpueff_holder_busy_seconds_total")
    assert set(busy) == {("slurm_job", "501"), ("slurm_job", "502")}  # per job, not per PID
    assert busy[("slurm_job", "501")] / sum(busy.values()) == pytest.approx(0.7, abs=0.01)
    for holder_metric, gpu_metric in (("gpueff_holder_busy_seconds_total", "gpueff_gpu_busy_seconds_total"), ("gpueff_holder_sm_active_seconds_total", "gpueff_sm_active_seconds_total"), ("gpueff_holder_busy_idle_sm_seconds_total", "gpueff_busy_idle_sm_seconds_total")):
        assert sum(holder_values(values, holder_metric).values()) == pytest.approx(gpu_value(values, gpu_metric), rel=1e-9)
    energy = holder_values(values, "gpueff_holder_energy_joules_total")
    assert energy[("slurm_job", "501")] / sum(energy.values()) == pytest.approx(0.7, abs=0.01)
    jobs = {(dict(k)["job_id"], dict(k)["user_id"]) for k in values["gpueff_gpu_job_info"]}
    assert jobs == {("501", ""), ("502", "1000")}
    assert fake.device_calls["nvmlDeviceGetProcessUtilization", 0] == 21  # one call per GPU per poll


def test_plain_processes_are_held_by_name_and_an_idle_gpu_makes_no_call(trace_paths, tmp_path):
    proc = fake_proc(tmp_path, {10: ("0::/user.slice/user-1000.slice/session-2.scope\n", "duty70"), 11: ("0::/user.slice/user-1000.slice/session-2.scope\n", "duty30")})
    busy_gpu = FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(10, 1 << 30, "/usr/bin/python3"), (11, 1 << 30, "/usr/bin/python3")], process_duty={10: 0.7, 11: 0.3})
    idle_gpu = FakeGpu(load_trace(trace_paths["idle"]))
    values, fake, _ = run(trace_paths, proc, [busy_gpu, idle_gpu])
    busy = holder_values(values, "gpueff_holder_busy_seconds_total")
    assert busy[("process", "1000:duty70")] / sum(busy.values()) == pytest.approx(0.7, abs=0.02)  # duty30's first sample comes a poll later
    assert set(holder_values(values, "gpueff_holder_state_seconds_total")) == set(busy)  # one holder label for every holder series
    assert set(holder_values(values, "gpueff_holder_energy_joules_total", gpu="1")) == {("unattributed", "")}  # idle power: nobody's
    assert fake.device_calls["nvmlDeviceGetProcessUtilization", 1] == 0
    assert "gpueff_gpu_job_info" not in values


def test_no_samples_not_found_leaves_several_holders_unattributed(trace_paths, tmp_path):
    proc = fake_proc(tmp_path, {10: ("0::/\n", "a"), 11: ("0::/\n", "b")})
    gpu = FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(10, 1, "a"), (11, 1, "b")])  # no process_duty: NOT_FOUND
    values, _, _ = run(trace_paths, proc, [gpu], polls=5)
    busy = holder_values(values, "gpueff_holder_busy_seconds_total")
    assert set(busy) == {("unattributed", "")}
    assert busy[("unattributed", "")] == pytest.approx(gpu_value(values, "gpueff_gpu_busy_seconds_total"))


def test_sharing_off_reads_no_samples_and_exports_no_holders(trace_paths, tmp_path):
    gpu = FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(10, 1, "a")], process_duty={10: 0.5})
    clock = FakeClock()
    fake = FakeNvml([gpu], clock=clock)
    backend = NvmlBackend(nvml=fake, clock=clock)
    backend.start()
    poller = Poller(backend, parse_config({}), clock=clock)
    for _ in range(3):
        snapshot = poller.poll_once()
        clock.advance(1.0)
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 0
    assert b"gpueff_holder_" not in render(snapshot) and snapshot.gpus[0].sharing is None


def test_process_utilization_errors(trace_paths):
    clock = FakeClock()
    fake = FakeNvml([FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(10, 1, "a")], process_duty={10: 0.5})], clock=clock)
    backend = NvmlBackend(nvml=fake, clock=clock, process_utilization=True)
    backend.start()
    clock.advance(1.0)
    assert backend.collect()[0].process_utilization is None  # the first answer is the whole buffer: not this window
    clock.advance(1.0)
    samples = backend.collect()[0].process_utilization
    assert samples and [(s.pid, s.sm) for s in samples] == [(10, 0.5)]  # one entry per process
    fake.fail("nvmlDeviceGetProcessUtilization", pynvml.NVML_ERROR_NOT_FOUND, times=1)
    clock.advance(1.0)
    assert backend.collect()[0].process_utilization == ()
    fake.fail("nvmlDeviceGetProcessUtilization", pynvml.NVML_SUCCESS, times=1)  # pynvml's way of saying "none" on some drivers
    clock.advance(1.0)
    assert backend.collect()[0].process_utilization == ()
    fake.fail("nvmlDeviceGetProcessUtilization", pynvml.NVML_ERROR_NOT_SUPPORTED)
    clock.advance(1.0)
    sample = backend.collect()[0]
    assert sample.up and sample.process_utilization is None


def test_info_only_mode_keeps_pod_labels_off_gpu_series(trace_paths):
    from gpueff.backends.replay import ReplayBackend

    clock = FakeClock()
    backend = ReplayBackend([load_trace(trace_paths["matmul_8192"])], clock=clock)
    backend.start()
    owner = PodOwner("ml", "trainer-0", "main")
    texts = {}
    for mode in ("every_series", "info_only"):
        poller = Poller(backend, parse_config({"kubernetes": {"pod_labels": mode}}), clock=clock)
        poller.attributor.owners = lambda settings, samples, now, proc_root: {s.device.uuid: GpuOwners((owner,)) for s in samples}  # type: ignore[method-assign]
        poller.poll_once()
        clock.advance(1.0)
        texts[mode] = render(poller.poll_once()).decode()
    every = [line for line in texts["every_series"].splitlines() if line.startswith("gpueff_power_watts")]
    info = [line for line in texts["info_only"].splitlines() if line.startswith("gpueff_power_watts")]
    assert 'pod="trainer-0"' in every[0] and "pod=" not in info[0]
    assert 'gpueff_gpu_pod_info{' in texts["info_only"] and 'pod="trainer-0"' in texts["info_only"]


def test_backends_that_list_no_processes_get_no_holder_series(trace_paths, tmp_path):
    from gpueff.backends.replay import ReplayBackend

    clock = FakeClock()
    backend = ReplayBackend([load_trace(trace_paths["matmul_8192"])], clock=clock)
    backend.start()
    poller = Poller(backend, parse_config({"sharing": {"enabled": True}, "proc_root": str(tmp_path)}), clock=clock)
    for _ in range(3):
        snapshot = poller.poll_once()
        clock.advance(1.0)
    assert snapshot.gpus[0].sharing is None and b"gpueff_holder_" not in render(snapshot)
