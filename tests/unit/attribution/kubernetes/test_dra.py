"""GPUs allocated through Dynamic Resource Allocation: the kubelet's pod-resources List (real gRPC on
a unix socket) names them by driver, pool and device; this node's ResourceSlices, read from an API
server stand-in over real HTTPS, give their UUIDs; they are attributed like device-plugin GPUs."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import pytest
from fakes.kube_api import FakeApiServer, resource_slice
from fakes.kubelet import FakeKubelet, dra_pod, first_owners, pod

from gpueff.attribution.kubernetes.attribution import Attributor
from gpueff.attribution.kubernetes.dra import device_uuids
from gpueff.attribution.kubernetes.owners import PodOwner
from gpueff.config.engine import ConfigError
from gpueff.sample import DeviceInfo, GpuSample
from gpueff.settings import parse_config

DRIVER = "gpu.nvidia.com"
NODE = "gpu-node-1"
GPU_PLUGIN = "GPU-11111111-2222-3333-4444-555555555555"
GPU_DRA = "GPU-66666666-7777-8888-9999-000000000000"
MIG_DRA = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
SLICES = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList", "items": [
    resource_slice(DRIVER, NODE, NODE, {"gpu-1": GPU_DRA, "gpu-0-mig-1g10gb-0": MIG_DRA}),
    resource_slice("fpga.example.com", NODE, NODE, {"fpga-0": "not-a-gpu"}),
]}
PODS = [
    pod("ml", "plugin-pod", {"main": {"nvidia.com/gpu": [GPU_PLUGIN]}}),
    dra_pod("ml", "dra-trainer", {"main": [(DRIVER, NODE, "gpu-1")], "sidecar": []}),
    dra_pod("web", "dra-mig", {"server": [(DRIVER, NODE, "gpu-0-mig-1g10gb-0"), ("fpga.example.com", NODE, "fpga-0")]}),
    dra_pod("web", "unknown-device", {"server": [(DRIVER, NODE, "gpu-7")]}),
]


@pytest.fixture
def socket_dir():
    path = Path(tempfile.mkdtemp(prefix="kl", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def samples() -> list[GpuSample]:
    return [GpuSample(device=DeviceInfo(index=i, uuid=uuid, name="NVIDIA H100 80GB HBM3"), timestamp=0.0) for i, uuid in enumerate((GPU_PLUGIN, GPU_DRA, MIG_DRA))]


def settings(socket_path: Path, api: FakeApiServer, **changes: object):
    """Each call (the kubelet's, the API server's over TLS) may take the whole 10 s refresh interval."""
    return parse_config({"kubernetes": {"enabled": True, "pod_resources_socket": str(socket_path), "dra_drivers": [DRIVER], "node_name": NODE,
                                        "service_account_dir": str(api.service_account), "timeout": "10s", **changes}}).kubernetes


def test_resource_slices_map_driver_pool_and_device_to_uuids_in_every_api_version():
    v1 = device_uuids(SLICES, [DRIVER])
    assert v1 == {(DRIVER, NODE, "gpu-1"): GPU_DRA, (DRIVER, NODE, "gpu-0-mig-1g10gb-0"): MIG_DRA}
    v1beta1 = {"items": [resource_slice(DRIVER, NODE, NODE, {"gpu-1": GPU_DRA}, version="v1beta1")]}
    assert device_uuids(v1beta1, [DRIVER]) == {(DRIVER, NODE, "gpu-1"): GPU_DRA}
    hostile = {"items": [None, {"spec": "x"}, {"spec": {"driver": DRIVER, "pool": {"name": 3}, "devices": []}},
                         {"spec": {"driver": DRIVER, "pool": {"name": "p"}, "devices": [{"name": "d", "attributes": {"uuid": {"int": 5}}}, "junk"]}}]}
    assert device_uuids(hostile, [DRIVER]) == {} and device_uuids({"items": "nope"}, [DRIVER]) == {}


def test_dra_gpus_are_attributed_like_device_plugin_ones(socket_dir, tmp_path, monkeypatch):
    with FakeApiServer(tmp_path, {"/apis/resource.k8s.io/v1/resourceslices": SLICES}) as api, FakeKubelet(socket_dir / "kubelet.sock", PODS):
        for name, value in api.environment().items():
            monkeypatch.setenv(name, value)
        attributor = Attributor()
        try:
            owners = first_owners(attributor, settings(socket_dir / "kubelet.sock", api), samples())
        finally:
            attributor.close()
    assert owners[GPU_PLUGIN].single_pod == PodOwner("ml", "plugin-pod", "main")
    assert owners[GPU_DRA].single_pod == PodOwner("ml", "dra-trainer", "main")
    assert owners[MIG_DRA].single_pod == PodOwner("web", "dra-mig", "server")
    path, query = api.requests[0]
    assert path == "/apis/resource.k8s.io/v1/resourceslices" and query == {"fieldSelector": [f"spec.nodeName={NODE}"]}


def test_an_older_api_server_is_asked_for_the_beta_version(socket_dir, tmp_path, monkeypatch):
    beta = {"items": [resource_slice(DRIVER, NODE, NODE, {"gpu-1": GPU_DRA}, version="v1beta1")]}
    with FakeApiServer(tmp_path, {"/apis/resource.k8s.io/v1beta1/resourceslices": beta}) as api, FakeKubelet(socket_dir / "kubelet.sock", PODS):
        for name, value in api.environment().items():
            monkeypatch.setenv(name, value)
        attributor = Attributor()
        try:
            owners = first_owners(attributor, settings(socket_dir / "kubelet.sock", api), samples())
            attributor._refresher.refresh()  # the next round asks the version that answered only
        finally:
            attributor.close()
    assert owners[GPU_DRA].single_pod == PodOwner("ml", "dra-trainer", "main")
    asked = [path.split("/")[3] for path, _ in api.requests]
    assert asked == ["v1", "v1beta2", "v1beta1", "v1beta1"]


def test_without_the_api_server_dra_gpus_are_unattributed_and_the_rest_works(socket_dir, tmp_path, monkeypatch, caplog):
    with FakeApiServer(tmp_path, {"/apis/resource.k8s.io/v1/resourceslices": SLICES}) as api, FakeKubelet(socket_dir / "kubelet.sock", PODS):
        (api.service_account / "token").write_text("wrong-token")
        for name, value in api.environment().items():
            monkeypatch.setenv(name, value)
        attributor = Attributor()
        with caplog.at_level(logging.WARNING):
            try:
                owners = first_owners(attributor, settings(socket_dir / "kubelet.sock", api), samples())
                attributor._refresher.refresh()
            finally:
                attributor.close()
    assert set(owners) == {GPU_PLUGIN}
    warnings = [record.getMessage() for record in caplog.records if "DRA" in record.getMessage()]
    assert len(warnings) == 1 and "HTTP 401" in warnings[0] and "wrong-token" not in warnings[0]


def test_the_config_checks_dra_driver_and_node_names():
    with pytest.raises(ConfigError, match=r"kubernetes\.dra_drivers.*DRA driver names"):
        parse_config({"kubernetes": {"dra_drivers": ["GPU NVIDIA"]}})
    with pytest.raises(ConfigError, match=r"kubernetes\.node_name.*node name"):
        parse_config({"kubernetes": {"node_name": "node/../x"}})
