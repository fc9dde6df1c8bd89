"""The attribution doctor (gpueff/attribution/doctor.py): for every GPU, the path that found its
owner or the exact reason none did, from the GPU's processes (in a fake /proc), the kubelet's
answer (the real pod-resources messages) and the switches; end to end through the poller with a
real gRPC kubelet; every reason documented in docs/troubleshooting.md."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT
from fakes.kubelet import FakeKubelet, dra_pod, pod
from fakes.nvml import FakeClock, FakeGpu, FakeNvml
from fakes.proc import process

from gpueff.attribution.doctor import Attribution, Doctor, Switches
from gpueff.attribution.kubernetes import podresources_pb2 as pb
from gpueff.attribution.kubernetes.deviceids import DeviceIdFindings, KubeletView, findings
from gpueff.attribution.kubernetes.owners import GpuOwners, PodOwner, ProcessOwner
from gpueff.attribution.reasons import PATHS, REASONS
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.exposition.render import render
from gpueff.poller import Poller
from gpueff.sample import DeviceInfo, GpuProcess, GpuSample
from gpueff.settings import parse_config
from gpueff.trace import load_trace

UUID = "GPU-0b5e2c3a-1d4f-4e6a-9c7b-123456789abc"
POD_CGROUP = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f2e3d4c_5b6a_4789_8a9b_0c1d2e3f4a5b.slice/cri-containerd-" + "a" * 64 + ".scope\n"
SLURM_CGROUP = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n"
HOST_CGROUP = "0::/user.slice/user-1000.slice/session-3.scope\n"
ANSWERED = KubeletView()
SHARING = Switches(sharing=True)
OTHER = "GPU-ffffffff-1d4f-4e6a-9c7b-123456789abc"
HIDDEN = 4_000_001  # above every PID this fake /proc has: as NVML's host PIDs look without hostPID


def fake_proc(root: Path, processes: dict[int, tuple[str, str]]) -> Path:
    """pid -> (cgroup file text, comm), each process of user 1000."""
    for pid, (cgroup, comm) in processes.items():
        process(root, pid, comm, cgroup=cgroup.rstrip("\n"))
    return root


@pytest.fixture(scope="module")
def proc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake_proc(tmp_path_factory.mktemp("doctor") / "proc", {10: (POD_CGROUP, "python3"), 20: (SLURM_CGROUP, "train"), 30: (HOST_CGROUP, "jupyter")})


def gpu(processes: tuple[int, ...] | None, index: int = 0, uuid: str = UUID) -> GpuSample:
    listed = None if processes is None else tuple(GpuProcess(pid, "/usr/bin/python3") for pid in processes)
    return GpuSample(device=DeviceInfo(index=index, uuid=uuid, name="NVIDIA H200"), timestamp=1.0, processes=listed)


TRAINER = GpuOwners(pods=(PodOwner("ml", "trainer-0", "main"),))
COMPUTE_PROCESS = GpuOwners(processes=((ProcessOwner("1f2e3d4c-5b6a-4789-8a9b-0c1d2e3f4a5b", "a" * 64), 1),))
# (what, the GPU, kubelet view (None: Kubernetes off), switches, owners, declared, expected)
CASES = [
    ("the kubelet assigned it", gpu((10,)), ANSWERED, Switches(), TRAINER, (), ("kubelet", "ok")),
    ("through a DRA claim", gpu(()), KubeletView(findings=DeviceIdFindings(dra_uuids=frozenset({UUID}))), Switches(), TRAINER, (), ("dra", "ok")),
    ("a failed call keeps the last assignment a while", gpu(()), KubeletView("kubelet_unreachable"), Switches(), TRAINER, (), ("kubelet", "ok")),
    ("free", gpu(()), None, Switches(), None, (), ("none", "no_process")),
    ("a backend that lists no processes", gpu(None), None, Switches(), None, (), ("none", "processes_not_listed")),
    ("declared beside a replay", gpu(()), None, Switches(), None, (UUID,), ("demo", "ok")),
    ("no socket", gpu(()), KubeletView("socket_missing"), Switches(), None, (), ("none", "socket_missing")),
    ("the call fails", gpu(None), KubeletView("kubelet_unreachable"), Switches(), None, (), ("none", "kubelet_unreachable")),
    ("no socket, the cgroup names the pod", gpu((10,)), KubeletView("socket_missing"), SHARING, None, (), ("pod_cgroup", "socket_missing")),
    ("a pod given no GPU", gpu((10,)), ANSWERED, Switches(), None, (), ("pod_cgroup", "no_gpu_limit")),
    ("... seen by process attribution", gpu((10,)), ANSWERED, Switches(process_attribution=True), COMPUTE_PROCESS, (), ("pod_cgroup", "no_gpu_limit")),
    ("an unmapped DRA claim", gpu((10,)), KubeletView(findings=DeviceIdFindings(dra_unmapped=True)), Switches(), None, (), ("pod_cgroup", "dra_unmapped")),
    ("a replica id", gpu((10,)), KubeletView(findings=DeviceIdFindings(by_uuid={UUID: "replica_ids"})), Switches(), None, (), ("pod_cgroup", "replica_ids")),
    ("an index id", gpu((10,), index=3), KubeletView(findings=DeviceIdFindings(by_index={3: "index_ids"})), Switches(), None, (), ("pod_cgroup", "index_ids")),
    ("another resource name", gpu((10,)), KubeletView(findings=DeviceIdFindings(by_uuid={UUID: "resource_not_matched"})), Switches(), None, (), ("pod_cgroup", "resource_not_matched")),
    ("a pod, no kubelet, sharing on", gpu((10,)), None, SHARING, None, (), ("pod_cgroup", "ok")),
    ("a pod, no kubelet, nothing exports it", gpu((10,)), None, Switches(), None, (), ("pod_cgroup", "attribution_off")),
    ("a Slurm job, sharing on", gpu((20,)), None, SHARING, None, (), ("slurm_cgroup", "ok")),
    ("a Slurm job, sharing off", gpu((20,)), None, Switches(), None, (), ("slurm_cgroup", "attribution_off")),
    ("a bare-host process, sharing on", gpu((30,)), None, SHARING, None, (), ("process", "ok")),
    ("a bare-host process, sharing off", gpu((30,)), None, Switches(), None, (), ("process", "attribution_off")),
    ("a process outside every pod on a Kubernetes node", gpu((30,)), ANSWERED, SHARING, None, (), ("process", "outside_pods_and_jobs")),
    ("hostPID off", gpu((HIDDEN,)), ANSWERED, SHARING, None, (), ("none", "pids_not_visible")),
]


@pytest.mark.parametrize(("what", "sample", "kubelet", "switches", "owners", "declared", "expected"), CASES, ids=[case[0] for case in CASES])
def test_the_path_and_reason_of_each_gpu(proc: Path, what: str, sample: GpuSample, kubelet: KubeletView | None, switches: Switches, owners: GpuOwners | None, declared: tuple[str, ...], expected: tuple[str, str]) -> None:
    found = Doctor(proc).diagnose([sample], {sample.device.uuid: owners} if owners else {}, kubelet, switches, declared=declared)
    assert found == {sample.device.uuid: Attribution(*expected)}


def test_each_gpu_is_judged_from_its_own_processes(proc: Path) -> None:
    found = Doctor(proc).diagnose([gpu((30,)), gpu((10, 30), index=1, uuid=OTHER)], {}, ANSWERED, SHARING)
    assert found == {UUID: Attribution("process", "outside_pods_and_jobs"), OTHER: Attribution("pod_cgroup", "no_gpu_limit")}


def list_answer(*pods: pb.PodResources) -> pb.ListPodResourcesResponse:
    return pb.ListPodResourcesResponse(pod_resources=list(pods))


def test_device_ids_the_attribution_cannot_read_are_found_in_the_kubelets_answer() -> None:
    answer = list_answer(
        pod("ml", "a", {"main": {"nvidia.com/gpu": [f"{UUID}-replica-1", "3", "GPU-11111111-1d4f-4e6a-9c7b-123456789abc::2"]}}),
        pod("ml", "b", {"main": {"nvidia.com/gpu.shared": ["GPU-22222222-1d4f-4e6a-9c7b-123456789abc"], "example.com/nic": ["eth7"]}}),
        dra_pod("ml", "c", {"main": [("gpu.nvidia.com", "node-1", "gpu-0"), ("gpu.nvidia.com", "node-1", "gpu-1"), ("net.example.com", "pool", "nic-0")]}),
    )
    found = findings(answer, ("nvidia.com/gpu", "nvidia.com/mig-*"), {("gpu.nvidia.com", "node-1", "gpu-0"): "GPU-33333333-1d4f-4e6a-9c7b-123456789abc"}, ())
    assert found.by_uuid == {UUID: "replica_ids", "GPU-22222222-1d4f-4e6a-9c7b-123456789abc": "resource_not_matched"}
    assert found.by_index == {3: "index_ids"}
    assert found.dra_uuids == {"GPU-33333333-1d4f-4e6a-9c7b-123456789abc"} and found.dra_unmapped
    mapped_only = list_answer(dra_pod("ml", "c", {"main": [("gpu.nvidia.com", "node-1", "gpu-0"), ("net.example.com", "pool", "nic-0")]}))
    assert not findings(mapped_only, ("nvidia.com/gpu",), {("gpu.nvidia.com", "node-1", "gpu-0"): UUID}, ()).dra_unmapped


def test_findings_are_bounded_whatever_the_answer_holds() -> None:
    crowd = list_answer(pod("ml", "a", {"main": {"nvidia.com/gpu": [str(n) for n in range(5000)] + [f"GPU-{n:08x}-1d4f-4e6a-9c7b-123456789abc-x" for n in range(5000)]}}))
    found = findings(crowd, ("nvidia.com/gpu",), {}, ())
    assert len(found.by_index) == 256 and len(found.by_uuid) == 256


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="kl", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def attribution_lines(poller: Poller, clock: FakeClock) -> dict[str, str]:
    for _ in range(3):
        snapshot = poller.poll_once()
        clock.advance(1.0)
    found = {}
    for line in render(snapshot).decode().splitlines():
        if line.startswith("gpueff_gpu_attribution_info{"):
            found[re.search(r'gpu="(\d+)"', line).group(1)] = re.search(r'path="[^"]*",reason="[^"]*"', line).group(0)  # type: ignore[union-attr]
    return found


def test_the_daemon_exports_one_attribution_per_gpu_with_a_real_kubelet(trace_paths, socket_dir: Path, tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc", {10: (POD_CGROUP, "python3"), 30: (HOST_CGROUP, "jupyter")})
    matmul, idle = load_trace(trace_paths["matmul_8192"]), load_trace(trace_paths["idle"])
    gpus = [FakeGpu(matmul, uuid=UUID, processes=[(10, 1 << 30, "python3")]), FakeGpu(matmul, processes=[(10, 1 << 30, "python3")]),
            FakeGpu(idle, processes=[(30, 1 << 28, "jupyter")]), FakeGpu(idle)]
    clock = FakeClock()
    backend = NvmlBackend(slow_interval=5.0, nvml=FakeNvml(gpus, clock=clock), clock=clock)
    backend.start()
    socket = socket_dir / "kubelet.sock"
    settings = {"proc_root": str(proc), "kubernetes": {"enabled": True, "pod_resources_socket": str(socket)}}
    with FakeKubelet(socket, [pod("ml", "trainer-0", {"main": {"nvidia.com/gpu": [UUID]}})]):
        poller = Poller(backend, parse_config(settings), clock=clock)
        try:
            assert attribution_lines(poller, clock) == {"0": 'path="kubelet",reason="ok"', "1": 'path="pod_cgroup",reason="no_gpu_limit"',
                                                        "2": 'path="process",reason="outside_pods_and_jobs"', "3": 'path="none",reason="no_process"'}
        finally:
            poller.stop()
    poller = Poller(backend, parse_config(settings), clock=clock)  # the kubelet gone, its socket with it
    try:
        assert set(attribution_lines(poller, clock).values()) == {'path="pod_cgroup",reason="socket_missing"', 'path="process",reason="socket_missing"', 'path="none",reason="socket_missing"'}
    finally:
        poller.stop()


def test_every_path_and_reason_is_met_above_and_documented() -> None:
    assert {case[-1][1] for case in CASES} == set(REASONS)
    assert {case[-1][0] for case in CASES} == set(PATHS)
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    section = text.split("## Whose GPU: gpueff_gpu_attribution_info", 1)[1].split("\n## ", 1)[0]
    for name in PATHS:
        assert f"`{name}`" in section, name
    for reason in REASONS:
        assert f"### `{reason}`" in section, reason
