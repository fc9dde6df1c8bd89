"""Loading DCGM's Python bindings at run time: they ship only inside DCGM, never on PyPI."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from exporter.backends.base import BackendUnavailable

# Where DCGM 4 and DCGM 3 packages install the bindings, tried in this order.
DEFAULT_BINDINGS_PATHS = (
    "/usr/share/datacenter-gpu-manager-4/bindings/python3",
    "/usr/local/dcgm/bindings/python3",
)
MODULES = ("dcgm_structs", "dcgm_fields", "dcgm_agent", "dcgmvalue")


@dataclass(frozen=True)
class Bindings:
    path: str
    structs: ModuleType
    fields: ModuleType
    agent: ModuleType
    value: ModuleType


def _candidates(path: str | None) -> list[Path]:
    return [Path(path)] if path else [Path(each) for each in DEFAULT_BINDINGS_PATHS]


def load_bindings(path: str | None = None) -> Bindings:
    """Import dcgm_structs, dcgm_fields, dcgm_agent and dcgmvalue from ``path`` or DCGM's install paths.

    Raises BackendUnavailable naming the places looked at.
    """
    tried = []
    for folder in _candidates(path):
        if not (folder / "dcgm_agent.py").is_file():
            tried.append(f"{folder} (no dcgm_agent.py there)")
            continue
        loaded = sys.modules.get("dcgm_agent")
        loaded_from = Path(getattr(loaded, "__file__", "") or "").parent
        if loaded is not None and loaded_from != folder:
            raise BackendUnavailable(f"DCGM bindings from {loaded_from} are already imported in this process; cannot also load those in {folder}")
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        try:
            modules = [importlib.import_module(name) for name in MODULES]
        except Exception as error:  # a broken install can raise anything at import time
            raise BackendUnavailable(f"cannot import the DCGM Python bindings from {folder}: {type(error).__name__}: {error}") from None
        return Bindings(str(folder), *modules)
    hint = "pass --dcgm.bindings-path" if path is None else "check --dcgm.bindings-path"
    raise BackendUnavailable(f"DCGM Python bindings not found: looked in {'; '.join(tried)}. Install DCGM 4 or 3 (its packages put the bindings there) or {hint}")
