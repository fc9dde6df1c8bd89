"""NVLink link state from DCGM (docs/dcgm.md, "Health readings").

DCGM gives it through ``dcgmGetNvLinkLinkStatus``, not through a field: one call answers for every
GPU of the host engine, each GPU's states refreshed from NVML's ``nvmlDeviceGetNvLinkState`` first
(DcgmCacheManager.cpp PopulateNvLinkLinkStatusImpl, DcgmTopology.cpp UpdateNvLinkLinkStateFromNvml,
DCGM 4.6). A link the GPU does not have, or that NVML answers with an error, reads NotSupported;
a link NVML calls inactive reads Down, or Disabled while any GPU of the host is in MIG mode; an
active one reads Up. The exporter keeps NVML's meaning: Up is active, Down and Disabled are not.
"""

from __future__ import annotations

from typing import Any

Links = tuple[tuple[int, bool], ...]


def link_states(status: Any, structs: Any) -> dict[int, Links]:
    """GPU ID -> (link, active) for each link the GPU has; a GPU without NVLink is left out."""
    not_supported, up = int(structs.DcgmNvLinkLinkStateNotSupported), int(structs.DcgmNvLinkLinkStateUp)
    found: dict[int, Links] = {}
    for gpu in status.gpus[: int(status.numGpus)]:
        links = tuple((link, int(state) == up) for link, state in enumerate(gpu.linkState) if int(state) != not_supported)
        if links:
            found[int(gpu.entityId)] = links
    return found
