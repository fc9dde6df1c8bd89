"""The pod-resources client and the poller's attribution against a real gRPC server on a unix socket."""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from conftest import running_daemon
from fakes.kubelet import FakeKubelet, first_owners, pod
from waiting import PATIENCE, wait_until

from gpueff.attribution.kubernetes.attribution import Attributor
from gpueff.attribution.kubernetes.owners import AttributionHealth, PodOwner
from gpueff.attribution.kubernetes.podresources import PodResourcesClient, PodResourcesError, gpu_owners
from gpueff.attribution.kubernetes.settings import KubernetesConfig
from gpueff.sample import DeviceInfo, GpuSample
from gpueff.settings import parse_config
from gpueff.trace import planted_trace_paths

GPU_A = "GPU-11111111-2222-3333-4444-555555555555"
GPU_B = "GPU-66666666-7777-8888-9999-000000000000"
MIG_A = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
PODS = [
    pod("ml", "trainer-0", {"main": {"nvidia.com/gpu": [GPU_A]}, "sidecar": {}}),
    pod("ml", "notebook", {"jupyter": {"nvidia.com/mig-1g.10gb": [MIG_A], "example.com/fpga": ["fpga-0"]}}),
    # Time-slicing: the device plugin hands out replicas <uuid>::<n> of one GPU to several pods.
    pod("web", "infer-a", {"server": {"nvidia.com/gpu": [f"{GPU_B}::0"]}}),
    pod("web", "infer-b", {"server": {"nvidia.com/gpu": [f"{GPU_B}::3"]}}),
]
PATTERNS = ("nvidia.com/gpu", "nvidia.com/mig-*")


@pytest.fixture
def socket_dir():
    """A short directory: unix socket paths are limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="kl", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_list_maps_gpu_and_mig_uuids_to_containers(socket_dir: Path) -> None:
    with FakeKubelet(socket_dir / "kubelet.sock", PODS) as kubelet:
        client = PodResourcesClient(str(kubelet.socket_path), timeout=PATIENCE, max_message_bytes=1 << 20)
        try:
            owners, refused = gpu_owners(client.list(), PATTERNS)
        finally:
            client.close()
    assert owners == {
        GPU_A: (PodOwner("ml", "trainer-0", "main"),),
        MIG_A: (PodOwner("ml", "notebook", "jupyter"),),
        GPU_B: (PodOwner("web", "infer-a", "server"), PodOwner("web", "infer-b", "server")),
    }
    assert refused.total == 0
    assert kubelet.calls == 1


def test_a_response_over_the_size_bound_fails_cleanly(socket_dir: Path) -> None:
    many = [pod("ns", f"pod-{i:05d}", {"c": {"nvidia.com/gpu": [f"GPU-{i:032d}"]}}) for i in range(3000)]
    with FakeKubelet(socket_dir / "kubelet.sock", many) as kubelet:
        client = PodResourcesClient(str(kubelet.socket_path), timeout=PATIENCE, max_message_bytes=64 * 1024)
        try:
            with pytest.raises(PodResourcesError) as raised:
                client.list()
        finally:
            client.close()
    assert raised.value.code == "RESOURCE_EXHAUSTED"
    assert str(kubelet.socket_path) in str(raised.value)


def test_a_slow_kubelet_hits_the_deadline(socket_dir: Path) -> None:
    """The kubelet answers only when the test ends: the call ends at its deadline, without the answer."""
    with FakeKubelet(socket_dir / "kubelet.sock", PODS, held=True) as kubelet:
        client = PodResourcesClient(str(kubelet.socket_path), timeout=0.1, max_message_bytes=1 << 20)
        try:
            with pytest.raises(PodResourcesError) as raised:
                client.list()
            answered_first = kubelet.release.is_set()
        finally:
            client.close()
    assert raised.value.code == "DEADLINE_EXCEEDED"
    assert not answered_first


def _samples(*uuids: str) -> list[GpuSample]:
    return [GpuSample(device=DeviceInfo(index=i, uuid=uuid, name="NVIDIA H100 80GB HBM3"), timestamp=0.0) for i, uuid in enumerate(uuids)]


def _settings(socket_path: Path, **changes: str) -> KubernetesConfig:
    """Attribution from the fake kubelet; its List may take the whole refresh interval (the default
    1 s is a guess on a busy machine)."""
    interval = changes.get("refresh_interval", "10s")
    return parse_config({"kubernetes": {"enabled": True, "pod_resources_socket": str(socket_path), "refresh_interval": interval, "timeout": interval, **changes}}).kubernetes


def _wait_until(condition, timeout: float = PATIENCE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_attributor_reads_the_refresher_and_never_calls_from_the_poll(socket_dir: Path) -> None:
    socket_path = socket_dir / "kubelet.sock"
    attributor = Attributor()
    samples = _samples(GPU_A, GPU_B, "GPU-unassigned")
    with FakeKubelet(socket_path, PODS) as kubelet:
        try:
            first = first_owners(attributor, _settings(socket_path), samples)
            for _ in range(20):
                assert attributor.owners(_settings(socket_path), samples, time.monotonic()) == first
            assert kubelet.calls == 1  # polls read the kept answer; the thread asks every refresh_interval
            kubelet.pods = PODS[:1]
            attributor._refresher.refresh()  # what the thread does at the next interval
            second = attributor.owners(_settings(socket_path), samples, time.monotonic())
        finally:
            attributor.close()
    assert first[GPU_A].single_pod == PodOwner("ml", "trainer-0", "main")
    assert first[GPU_B].single_pod is None and len(first[GPU_B].pods) == 2
    assert "GPU-unassigned" not in first
    assert set(second) == {GPU_A}


def test_a_failed_call_keeps_the_last_assignment_for_three_intervals(socket_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 14: one failed List call emptied the pod map and every pod-assigned GPU's series lost
    its pod labels (a new identity, rate() broken) for a whole refresh interval."""
    socket_path = socket_dir / "kubelet.sock"
    now = [1000.0]
    attributor = Attributor(clock=lambda: now[0], wall_clock=lambda: 1.7e9 + now[0])
    samples = _samples(GPU_A)
    caplog.set_level(logging.INFO, logger="gpueff.attribution.kubernetes")
    with FakeKubelet(socket_path, PODS) as kubelet:
        try:
            assert first_owners(attributor, _settings(socket_path), samples, now[0])[GPU_A].single_pod.pod == "trainer-0"
            assert attributor.health() == AttributionHealth(up=True, errors_total=0, last_success_wall=1.7e9 + 1000.0)
            kubelet.failing = True
            for _ in range(3):  # three failed refreshes, 10 s apart: the assignment stays
                now[0] += 10.0
                attributor._refresher.refresh()
                assert attributor.owners(_settings(socket_path), samples, now[0])[GPU_A].single_pod.pod == "trainer-0"
            assert attributor.health() == AttributionHealth(up=False, errors_total=3, last_success_wall=1.7e9 + 1000.0)
            now[0] += 0.5  # past 3 x refresh_interval since the last answer: dropped
            assert attributor.owners(_settings(socket_path), samples, now[0]) == {}
            kubelet.failing = False
            attributor._refresher.refresh()
            assert attributor.owners(_settings(socket_path), samples, now[0])[GPU_A].single_pod.pod == "trainer-0"
            assert attributor.health().up
        finally:
            attributor.close()
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # the failure (once, not per call) and the expiry
    assert "UNAVAILABLE" in warnings[0] and "kept for 3 refresh intervals" in warnings[0]
    assert any("works again" in record.getMessage() for record in caplog.records)


def test_a_compromised_kubelets_names_and_crowds_are_left_out_and_counted(socket_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Names are checked against Kubernetes' own rules and a GPU keeps at most 64 containers, so what
    an answer adds to every GPU series is bounded. Before, 1 MB names in a 6 MB answer made 551 MB
    of /metrics."""
    huge = "p" * (1 << 20)
    hostile = [
        pod("ml", huge, {"main": {"nvidia.com/gpu": [GPU_A]}}),  # a pod name past 253 characters
        pod("n" * 64, "trainer-1", {"main": {"nvidia.com/gpu": [GPU_A]}}),  # a namespace past 63
        pod("ml", "trainer-2", {"Main": {"nvidia.com/gpu": [GPU_A]}}),  # not a DNS-1123 label
        pod("ml", "trainer-3", {"c\r\nx": {"nvidia.com/gpu": [GPU_A]}}),
        pod("ml", "trainer-4", {"main": {"nvidia.com/gpu": ["GPU-" + "0" * 1000]}}),  # no UUID is that long
        pod("ml", "big", {huge: {"example.com/fpga": ["fpga-0"]}}),  # no GPU: not looked at
        *(pod("web", f"infer-{i:03d}", {"server": {"nvidia.com/gpu": [f"{GPU_B}::{i}"]}}) for i in range(100)),
    ]
    socket_path = socket_dir / "kubelet.sock"
    attributor = Attributor()
    caplog.set_level(logging.WARNING, logger="gpueff.attribution.kubernetes")
    with FakeKubelet(socket_path, [*PODS[:1], *hostile]):
        try:
            settings = _settings(socket_path, max_message_bytes=8 << 20, refresh_interval="1h", timeout=f"{PATIENCE:g}s")  # 8 MB: slow to read on a busy machine; no refresh but the two below
            owners = first_owners(attributor, settings, _samples(GPU_A, GPU_B))
            attributor._refresher.refresh()  # the same answer again: counted again, not logged again
            health = attributor.health()
        finally:
            attributor.close()
    assert owners[GPU_A].pods == (PodOwner("ml", "trainer-0", "main"),)
    assert [owner.pod for owner in owners[GPU_B].pods] == [f"infer-{i:03d}" for i in range(64)]
    assert health is not None and health.refused_total == 2 * (4 + 1 + 36)
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 3, warnings  # one per kind: a name, a device id, a crowded GPU
    assert all(len(warning) < 600 for warning in warnings)
    assert "pod name 'ppp" in warnings[0] and "(1048576 characters) is not a DNS-1123 subdomain of at most 253" in warnings[0]
    assert "100 containers on one GPU (at most 64)" in warnings[2]


@pytest.mark.slow
def test_a_slow_kubelet_never_delays_a_poll(socket_dir: Path) -> None:
    socket_path = socket_dir / "kubelet.sock"
    attributor = Attributor()
    """The kubelet holds its answer until the test releases it: ten polls return meanwhile (the
    first waits for the answer at most FIRST_CALL_WAIT), then the answer is taken up."""
    settings = _settings(socket_path, timeout="1h", refresh_interval="1h")
    with FakeKubelet(socket_path, PODS, held=True) as kubelet:
        try:
            for _ in range(10):
                assert attributor.owners(settings, _samples(GPU_A), time.monotonic()) == {}
            kubelet.release.set()
            _wait_until(lambda: attributor.owners(settings, _samples(GPU_A), time.monotonic()) != {})
        finally:
            attributor.close()
    assert kubelet.calls == 1


def test_disabled_attribution_never_calls(socket_dir: Path) -> None:
    socket_path = socket_dir / "kubelet.sock"
    settings = parse_config({"kubernetes": {"pod_resources_socket": str(socket_path)}}).kubernetes
    with FakeKubelet(socket_path, PODS) as kubelet:
        assert Attributor().owners(settings, _samples(GPU_A), now=0.0) == {}
    assert kubelet.calls == 0


def test_missing_socket_logs_one_line_and_recovers(socket_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    socket_path = socket_dir / "kubelet.sock"
    attributor = Attributor()
    caplog.set_level(logging.INFO, logger="gpueff.attribution.kubernetes")
    settings = _settings(socket_path, refresh_interval="1s")
    try:
        assert attributor.owners(settings, _samples(GPU_A), time.monotonic()) == {}
        for _ in range(3):
            attributor._refresher.refresh()
            assert attributor.owners(settings, _samples(GPU_A), time.monotonic()) == {}
        warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
        assert len(warnings) == 1 and str(socket_path) in warnings[0].getMessage()
        assert attributor.health().errors_total >= 4 and not attributor.health().up
        with FakeKubelet(socket_path, PODS):
            _wait_until(lambda: attributor.owners(settings, _samples(GPU_A), time.monotonic()) != {})  # the thread retries every second
            owners = attributor.owners(settings, _samples(GPU_A), time.monotonic())
    finally:
        attributor.close()
    assert owners[GPU_A].single_pod == PodOwner("ml", "trainer-0", "main")
    assert any("works again" in record.getMessage() for record in caplog.records)


def exported(body: str, series: str) -> float:
    return float(body.split(f"\n{series} ")[1].split()[0])


def _series(body: str, name: str) -> list[str]:
    return [line for line in body.splitlines() if line.startswith(name + "{")]


def test_daemon_labels_gpu_series_with_their_pod(socket_dir: Path, tmp_path: Path) -> None:
    socket_path = socket_dir / "kubelet.sock"
    pods = [
        pod("ml", "trainer-0", {"main": {"nvidia.com/gpu": ["GPU-replay-2-matmul_8192"]}}),
        pod("web", "infer-a", {"server": {"nvidia.com/gpu": ["GPU-replay-0-copy_2GB::0"]}}),
        pod("web", "infer-b", {"server": {"nvidia.com/gpu": ["GPU-replay-0-copy_2GB::1"]}}),
    ]
    config = tmp_path / "config.yml"
    config.write_text(f"kubernetes:\n  enabled: true\n  pod_resources_socket: {socket_path}\n  refresh_interval: 1h\n")
    with FakeKubelet(socket_path, pods) as kubelet, running_daemon("--demo", "--config", str(config), "--collect-interval", "200ms") as daemon:
        polls = exported(daemon.metrics(), "gpueff_collect_duration_seconds_count")
        body = wait_until(lambda: (page := daemon.metrics()) and exported(page, "gpueff_collect_duration_seconds_count") >= polls + 3 and 'pod="trainer-0"' in page and page, "three more polls, labelled")
        calls = kubelet.calls
    up = {line.split(" ")[0] for line in _series(body, "gpueff_gpu_up")}
    assert 'gpueff_gpu_up{gpu="2",uuid="GPU-replay-2-matmul_8192",namespace="ml",pod="trainer-0",container="main"}' in up
    assert 'gpueff_gpu_up{gpu="7",uuid="GPU-b2b8a1d8-e5c8-70fd-7d84-8283968b10d8-replay-7"}' in up  # no pod (the demo's free GPU): no pod labels
    assert 'gpueff_gpu_up{gpu="1",uuid="GPU-replay-1-idle",namespace="notebooks",pod="jupyter-alice-0",container="notebook"}' in up  # the demo's own, where the kubelet names none
    assert 'gpueff_gpu_up{gpu="0",uuid="GPU-replay-0-copy_2GB"}' in up  # shared by two pods: see gpueff_gpu_pod_info
    sm = [line for line in _series(body, "gpueff_sm_active_ratio") if 'gpu="2"' in line]
    assert len(sm) == 1 and 'pod="trainer-0"' in sm[0]
    info = sorted(line.split(" ")[0] for line in _series(body, "gpueff_gpu_pod_info") if 'gpu="0"' in line or 'gpu="2"' in line)
    assert info == [
        'gpueff_gpu_pod_info{gpu="0",uuid="GPU-replay-0-copy_2GB",namespace="web",pod="infer-a",container="server"}',
        'gpueff_gpu_pod_info{gpu="0",uuid="GPU-replay-0-copy_2GB",namespace="web",pod="infer-b",container="server"}',
        'gpueff_gpu_pod_info{gpu="2",uuid="GPU-replay-2-matmul_8192",namespace="ml",pod="trainer-0",container="main"}',
    ]
    assert calls == 1, "the kubelet is asked on the refresh cadence, never per scrape or per poll"
    assert "gpueff_kubernetes_attribution_up 1" in body and "gpueff_kubernetes_attribution_errors_total 0" in body
    assert "gpueff_kubernetes_attribution_last_success_timestamp_seconds " in body


@pytest.mark.slow
def test_daemon_without_the_socket_logs_once_and_serves(socket_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text(f"kubernetes:\n  enabled: true\n  pod_resources_socket: {socket_dir / 'absent.sock'}\n  refresh_interval: 1s\n")
    # The planted traces, not --demo: its made-up pods would label GPUs the kubelet does not name.
    with running_daemon("--replay", *map(str, planted_trace_paths()), "--config", str(config), "--collect-interval", "200ms") as daemon:
        body = wait_until(lambda: (page := daemon.metrics()) and exported(page, "gpueff_kubernetes_attribution_errors_total") >= 2 and page, "two refreshes")
        assert daemon.stop() == 0
        output = daemon.finished_output()
    assert 'gpueff_gpu_up{gpu="2",uuid="GPU-replay-2-matmul_8192"} 1' in body
    assert "pod=" not in body
    assert len(re.findall("pod-resources socket .* does not exist", output)) == 1, output


def test_daemon_without_grpcio_logs_once_and_serves(socket_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "blocked" / "grpc"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("No module named grpc (blocked by the test)")\n')
    socket_path = socket_dir / "kubelet.sock"
    config = tmp_path / "config.yml"
    config.write_text(f"kubernetes:\n  enabled: true\n  pod_resources_socket: {socket_path}\n  refresh_interval: 1s\n")
    with FakeKubelet(socket_path, PODS), running_daemon("--replay", *map(str, planted_trace_paths()), "--config", str(config), "--collect-interval", "200ms", env={"PYTHONPATH": str(blocker.parent)}) as daemon:
        body = wait_until(lambda: (page := daemon.metrics()) and exported(page, "gpueff_kubernetes_attribution_errors_total") >= 2 and page, "two refreshes")
        assert daemon.stop() == 0
        output = daemon.finished_output()
    assert "pod=" not in body and "gpueff_gpu_up{" in body
    assert len(re.findall(r"pod attribution needs grpcio", output)) == 1, output
