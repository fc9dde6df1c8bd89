"""The health readings from DCGM fields (docs/dcgm.md, "Health readings"): the catalogue's
``sample.health.*`` readings whose DCGM source is one of the device fields the backend watches.

DCGM hands over what NVML answered, with NVML's own conventions kept (DcgmCacheManager.cpp, DCGM
4.6): NVML_PSTATE_UNKNOWN (32) is stored as a P-state, and a temperature limit the board lacks can
read 0. Those are left absent here as the NVML backend leaves them (backends/nvml/health.py); a
field DCGM answers blank (NOT_SUPPORTED and the other sentinels) never reaches this module.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpueff.backends.dcgm.nvlink import Links
from gpueff.sample import NO_HEALTH, Health

PREFIX = "health."  # a DCGM field's target (backends/dcgm/fields.py) for a sample.health reading
_KINDS = {each.name: each.type for each in dataclasses.fields(Health)}  # "int | None", "bool | None", ...
_TEMPERATURE_LIMITS = frozenset(name for name in _KINDS if name.startswith("temperature_"))


def health(values: dict[str, float], links: Links | None = None, link_errors: list[tuple[int, str, float]] | None = None) -> Health:
    """Health from DCGM numbers (already scaled to the sample's units) by Health field name, the
    GPU's NVLink link states where it has NVLink, and the error counters (link, type, count) of
    the links among them that are active (as the NVML backend gives them)."""
    readings: dict[str, Any] = {"nvlink_links_active": links} if links else {}
    active = {link for link, up in links or () if up}
    if active and link_errors:
        readings["nvlink_link_errors"] = tuple(sorted(each for each in link_errors if each[0] in active))
    for name, number in values.items():
        kind = str(_KINDS[name])
        if name == "performance_state" and not 0 <= number <= 15:
            continue
        if name in _TEMPERATURE_LIMITS and number <= 0:
            continue
        readings[name] = bool(number) if kind.startswith("bool") else int(number) if kind.startswith("int") else number
    return Health(**readings) if readings else NO_HEALTH
