"""MIG: each MIG device exported as a device of its own (GPM through nvmlGpmMigSampleGet),
attributed to the pod the kubelet gave it, with efficiency from graphics engine activity where
coarse utilization does not exist. NVML is the trace-driven fake pynvml; the kubelet is a real
gRPC server on a unix socket."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from fakes.kubelet import FakeKubelet, first_owners, pod
from fakes.nvml import FakeClock, FakeGpu, FakeNvml

from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.exposition.render import render
from gpueff.poller import Poller
from gpueff.settings import parse_config
from gpueff.trace import load_trace

PARENT = "GPU-0a0a0a0a-1111-2222-3333-444444444444"
MIG_BUSY = "MIG-b1b1b1b1-1111-2222-3333-444444444444"
MIG_IDLE = "MIG-c2c2c2c2-1111-2222-3333-444444444444"


@pytest.fixture
def fake(trace_paths):
    clock = FakeClock()
    gpus = [
        FakeGpu(load_trace(trace_paths["matmul_8192"]), uuid=PARENT, name="NVIDIA H200"),
        FakeGpu(load_trace(trace_paths["matmul_8192"]), uuid=MIG_BUSY, name="NVIDIA H200 MIG 3g.71gb", mig_of=0, gpu_instance_id=2, processes=[(4242, 10 << 30, "python")]),
        FakeGpu(load_trace(trace_paths["idle"]), uuid=MIG_IDLE, name="NVIDIA H200 MIG 1g.18gb", mig_of=0, gpu_instance_id=9),
    ]
    return FakeNvml(gpus, clock=clock), clock


def test_mig_devices_are_devices_of_their_own(fake) -> None:
    nvml, clock = fake
    backend = NvmlBackend(nvml=nvml, clock=clock)
    devices = backend.start()
    try:
        assert [(d.index, d.uuid, d.parent_uuid, d.gpu_instance_id) for d in devices] == [(0, PARENT, "", None), (0, MIG_BUSY, PARENT, 2), (0, MIG_IDLE, PARENT, 9)]
        assert devices[1].name == "NVIDIA H200 MIG 3g.71gb" and devices[1].power_limit_watts is None
        backend.collect()
        clock.advance(1.0)
        busy, idle = backend.collect()[1:]
    finally:
        backend.close()
    def window(gpu: int, key: str) -> float:
        mean = nvml.window_mean(gpu, key, clock.now - 1.0, clock.now)
        assert mean is not None
        return mean / 100

    assert busy.up and busy.gpu_utilization is None  # no coarse utilization on MIG
    assert busy.profiling.sm_active == pytest.approx(window(1, "SM_UTIL"))
    assert busy.profiling.graphics_active == pytest.approx(window(1, "GRAPHICS_UTIL"))  # every poll: it is the window's busy figure here
    assert busy.graphics_active_slow_window is None
    assert idle.profiling.sm_active == pytest.approx(window(2, "SM_UTIL"))
    assert [p.pid for p in busy.processes] == [4242]
    assert nvml.calls["nvmlGpmMigSampleGet"] == 4 and nvml.calls["nvmlDeviceRegisterEvents"] == 1


def test_mig_devices_exported_with_their_pods_and_graphics_based_efficiency(fake, tmp_path: Path) -> None:
    nvml, clock = fake
    socket_dir = Path(tempfile.mkdtemp(prefix="kl", dir="/tmp"))
    socket_path = socket_dir / "kubelet.sock"
    pods = [pod("research", "finetune-7", {"trainer": {"nvidia.com/mig-3g.71gb": [MIG_BUSY]}})]
    config = parse_config({"kubernetes": {"enabled": True, "pod_resources_socket": str(socket_path), "timeout": "10s"}})
    backend = NvmlBackend(nvml=nvml, clock=clock)
    poller = Poller(backend, config, clock=clock)
    try:
        with FakeKubelet(socket_path, pods):
            backend.start()
            first_owners(poller.attributor, config.kubernetes, [], clock.now)  # the kubelet's first answer, however late
            poller.poll_once()
            clock.advance(1.0)
            snapshot = poller.poll_once()
    finally:
        poller.attributor.close()
        backend.close()
        shutil.rmtree(socket_dir, ignore_errors=True)
    text = render(snapshot).decode()
    busy = f'gpu="0",uuid="{MIG_BUSY}",namespace="research",pod="finetune-7",container="trainer"'
    assert f'gpueff_mig_device_info{{{busy},parent_uuid="{PARENT}",gpu_instance="2"}} 1' in text
    assert f'gpueff_mig_device_info{{gpu="0",uuid="{MIG_IDLE}",parent_uuid="{PARENT}",gpu_instance="9"}} 1' in text
    assert f'gpueff_gpu_pod_info{{gpu="0",uuid="{MIG_BUSY}",namespace="research",pod="finetune-7",container="trainer"}} 1' in text
    # MIG has no NVML utilization; the window's engine activity stands in.
    assert not [line for line in text.splitlines() if line.startswith("gpueff_gpu_utilization_instant_ratio{") and "MIG-" in line]
    assert f"gpueff_gpu_utilization_ratio{{{busy}}}" in text
    (state,) = [s for s in snapshot.gpus if s.sample.device.uuid == MIG_BUSY]
    sm, engine = (nvml.window_mean(1, key, clock.now - 1.0, clock.now) for key in ("SM_UTIL", "GRAPHICS_UTIL"))
    assert sm is not None and engine
    expected = min(1.0, sm / engine)
    assert state.derived.efficiency == pytest.approx(expected)
    assert f"gpueff_efficiency_ratio{{{busy}}}" in text


def test_a_destroyed_mig_device_is_dropped_at_reinitialisation(fake) -> None:
    nvml, clock = fake
    backend = NvmlBackend(nvml=nvml, clock=clock)
    backend.start()
    try:
        nvml.unload_driver()
        assert not any(sample.up for sample in backend.collect())
        nvml.gpus[2].mig_of = -1  # MIG_IDLE destroyed while the driver was away
        nvml.load_driver()
        for _ in range(10):
            clock.advance(1.0)
            samples = backend.collect()
            if all(sample.up for sample in samples):
                break
    finally:
        backend.close()
    assert [(sample.device.uuid, sample.up) for sample in samples] == [(PARENT, True), (MIG_BUSY, True)]
