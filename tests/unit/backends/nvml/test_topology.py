"""Which GPUs are NVLink peers and how far apart they sit on PCIe (backends/nvml/topology.py), read
from the fake NVML's wiring: direct links, an NVSwitch fabric, PCIe switches and sockets."""

from __future__ import annotations

import pynvml
from fakes.nvml import NVSWITCH, FakeGpu, FakeNvml, started_backend

from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.exposition.render import render
from gpueff.pipeline.derive import derive
from gpueff.pipeline.totals import Totals
from gpueff.poller import poll_settings
from gpueff.settings import Config
from gpueff.snapshot import GpuState, Snapshot
from gpueff.trace import load_trace


def peers_of(backend) -> dict[int, list[tuple[int, str, str, int]]]:
    return {sample.device.index: [(peer.index, peer.pcie_path, peer.nvlink, peer.nvlinks) for peer in sample.device.peers] for sample in backend.collect()}


def test_direct_links_a_switch_fabric_and_pcie_paths(trace_paths) -> None:
    idle = load_trace(trace_paths["idle"])
    gpus = [
        FakeGpu(idle, nvlink_links=(True, True, False), nvlink_remote=(1, 1, 1)),  # two active links to GPU 1, a third down
        FakeGpu(idle, nvlink_links=(True, True), nvlink_remote=(0, 0)),
        FakeGpu(idle, nvlink_links=(True,), nvlink_remote=(NVSWITCH,), pcie_switch=1),
        FakeGpu(idle, nvlink_links=(True,), nvlink_remote=(NVSWITCH,), pcie_switch=1, numa_node=1),
        FakeGpu(idle, pcie_switch=1),  # no NVLink
    ]
    backend, _, _ = started_backend(gpus)
    found = peers_of(backend)
    assert found[0] == [(1, "pcie_switch", "direct", 2), (2, "host_bridge", "none", 0), (3, "system", "none", 0), (4, "host_bridge", "none", 0)]
    assert found[2][2] == (3, "system", "switch", 0) and found[2][3] == (4, "pcie_switch", "none", 0)
    assert found[4][0] == (0, "host_bridge", "none", 0)
    samples = backend.collect()
    config = Config()
    snapshot = Snapshot(sequence=1, gpus=tuple(GpuState(s, derive(s, config.derive_settings), Totals()) for s in samples), taken_monotonic=0.0, settings=poll_settings(config),
                        backend_name="nvml", replayed=False, polls_total=1, collect_duration_sum_seconds=0.0, errors_total=0, last_success_wall=None)
    text = render(snapshot).decode()
    uuid0, uuid1 = samples[0].device.uuid, samples[1].device.uuid
    assert f'gpueff_gpu_peer_info{{gpu="0",uuid="{uuid0}",peer_gpu="1",peer_uuid="{uuid1}",pcie_path="pcie_switch",nvlink="direct"}} 1' in text
    assert f'gpueff_gpu_peer_nvlinks{{gpu="0",uuid="{uuid0}",peer_gpu="1",peer_uuid="{uuid1}"}} 2' in text
    assert 'gpueff_gpu_peer_nvlinks{gpu="2"' not in text  # an NVSwitch fabric joins no two GPUs directly


def test_one_gpu_has_no_peers_and_refused_calls_leave_parts_out(trace_paths) -> None:
    backend, _, _ = started_backend([load_trace(trace_paths["idle"])])
    assert peers_of(backend) == {0: []}
    idle = load_trace(trace_paths["idle"])
    fake = FakeNvml([FakeGpu(idle, nvlink_links=(True,), nvlink_remote=(1,)), FakeGpu(idle, nvlink_links=(True,), nvlink_remote=(0,))])
    fake.fail("nvmlDeviceGetTopologyCommonAncestor", pynvml.NVML_ERROR_NOT_SUPPORTED)
    fake.fail("nvmlDeviceGetNvLinkRemotePciInfo", pynvml.NVML_ERROR_NOT_SUPPORTED)
    backend = NvmlBackend(nvml=fake)
    backend.start()
    assert peers_of(backend)[0] == [(1, "unknown", "switch", 0)]  # P2P over NVLink works; which links join them is not known
