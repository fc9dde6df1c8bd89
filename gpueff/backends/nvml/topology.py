"""Which GPUs of the node are NVLink peers and how far apart they sit on PCIe, read once per device
open (the wiring does not change while the driver runs).

- ``pcie_path``: ``nvmlDeviceGetTopologyCommonAncestor``, the nearest PCIe element both GPUs hang
  from: the same board, one PCIe switch, several switches, the same host bridge, the same NUMA node,
  or across the inter-socket link (``system``): the path collectives take without NVLink.
- direct NVLink links: each active link's far end (``nvmlDeviceGetNvLinkRemotePciInfo``) that is
  the peer's PCI bus id. On NVSwitch systems the far end is the switch, never the peer.
- ``nvlink``: ``direct`` where links join the two, ``switch`` where NVML says peer-to-peer over NVLink
  works without a direct link (``nvmlDeviceGetP2PStatus`` with the NVLink capability: an NVSwitch
  fabric), else ``none``.

Any call the driver refuses leaves that part out (a GPU without NVLink has no links to ask about);
only a lost GPU or driver propagates, as everywhere in the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from gpueff.backends.base import text
from gpueff.backends.nvml.health import field_number
from gpueff.sample import DeviceInfo, PeerLink

MAX_NVLINKS = 18  # NVML_NVLINK_MAX_LINKS on Hopper (Blackwell has 18 too)
PCIE_PATHS = {
    "NVML_TOPOLOGY_INTERNAL": "same_board",
    "NVML_TOPOLOGY_SINGLE": "pcie_switch",
    "NVML_TOPOLOGY_MULTIPLE": "pcie_switches",
    "NVML_TOPOLOGY_HOSTBRIDGE": "host_bridge",
    "NVML_TOPOLOGY_NODE": "numa_node",
    "NVML_TOPOLOGY_SYSTEM": "system",
}

Optional = Callable[..., Any]  # NvmlBackend._optional without its GPU: None where the call is refused


def read_peers(nvml: ModuleType, gpus: Sequence[tuple[DeviceInfo, Any]], optional: Optional) -> dict[str, tuple[PeerLink, ...]]:
    """uuid -> the GPU's peers (every other whole GPU), for GPUs on a node of two or more."""
    if len(gpus) < 2:
        return {}
    paths = {getattr(nvml, name): label for name, label in PCIE_PATHS.items() if hasattr(nvml, name)}
    far_ends = {info.uuid: _far_ends(nvml, handle, optional) for info, handle in gpus}
    found: dict[str, tuple[PeerLink, ...]] = {}
    for info, handle in gpus:
        peers = []
        for peer, peer_handle in gpus:
            if peer.uuid == info.uuid:
                continue
            level = optional("topology", nvml.nvmlDeviceGetTopologyCommonAncestor, handle, peer_handle)
            direct = sum(1 for bus in far_ends[info.uuid] if peer.pci_bus_id and _same_bus(bus, peer.pci_bus_id))
            if direct:
                nvlink = "direct"
            else:
                status = optional("p2p", nvml.nvmlDeviceGetP2PStatus, handle, peer_handle, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
                nvlink = "switch" if status == nvml.NVML_P2P_STATUS_OK else "none"
            peers.append(PeerLink(peer.index, peer.uuid, paths.get(level, "unknown") if level is not None else "unknown", nvlink, direct))
        found[info.uuid] = tuple(peers)
    return found


def _far_ends(nvml: ModuleType, handle: Any, optional: Optional) -> list[str]:
    """The PCI bus id at the far end of each active NVLink link (none on a GPU without NVLink)."""
    values = optional("nvlink_count", nvml.nvmlDeviceGetFieldValues, handle, [nvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
    count = int(field_number(nvml, values[0])) if values and values[0].nvmlReturn == nvml.NVML_SUCCESS else 0
    ends = []
    for link in range(min(count, MAX_NVLINKS)):
        if optional("nvlink_state", nvml.nvmlDeviceGetNvLinkState, handle, link):
            remote = optional("nvlink_remote", nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            if remote is not None:
                ends.append(text(remote.busId))
    return ends


def _same_bus(one: str, other: str) -> bool:
    """PCI bus ids compare without case and with the domain's width NVML gives either (8 or 4 hex digits)."""
    return one.lower().split(":", 1)[-1] == other.lower().split(":", 1)[-1]
