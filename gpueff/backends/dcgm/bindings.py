"""Loading DCGM's Python bindings at run time: they ship only inside DCGM, never on PyPI.

The bindings folder also holds generic top-level packages (``common``, ``utils``, ``logger``, ...) that
would shadow others of those names if the folder went on ``sys.path``. So it never does: the four
modules the exporter uses are loaded from their files, in the order they import each other, under
their own names (``dcgm_structs`` imports ``dcgmvalue``, ``dcgm_fields`` imports ``dcgm_structs``, ...;
those imports find them in ``sys.modules``). Nothing else of the folder becomes importable.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from gpueff.backends.base import BackendUnavailable

# Where DCGM 4 and DCGM 3 packages install the bindings, tried in this order.
DEFAULT_BINDINGS_PATHS = (
    "/usr/share/datacenter-gpu-manager-4/bindings/python3",
    "/usr/local/dcgm/bindings/python3",
)
MODULES = ("dcgmvalue", "dcgm_structs", "dcgm_fields", "dcgm_agent")  # each imports only the ones before it


@dataclass(frozen=True)
class Bindings:
    path: str
    value: ModuleType
    structs: ModuleType
    fields: ModuleType
    agent: ModuleType


def _candidates(path: str | None) -> list[Path]:
    return [Path(path)] if path else [Path(each) for each in DEFAULT_BINDINGS_PATHS]


def _load(folder: Path, name: str) -> ModuleType:
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = Path(getattr(loaded, "__file__", "") or "").parent
        if where != folder:
            raise BackendUnavailable(f"DCGM's {name} from {where} is already imported in this process; cannot also load the one in {folder}")
        return loaded
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    if spec is None or spec.loader is None:
        raise BackendUnavailable(f"cannot load {folder / f'{name}.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dcgm_fields replaces its own class through sys.modules[__name__]
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return sys.modules[name]


def load_bindings(path: str | None = None) -> Bindings:
    """Load dcgmvalue, dcgm_structs, dcgm_fields and dcgm_agent from ``path`` or DCGM's install paths.

    Raises BackendUnavailable naming the places looked at.
    """
    folder = bindings_folder(path)
    try:
        modules = [_load(folder, name) for name in MODULES]
    except BackendUnavailable:
        raise
    except Exception as error:  # a broken install can raise anything at import time
        raise BackendUnavailable(f"cannot import the DCGM Python bindings from {folder}: {type(error).__name__}: {error}") from None
    return Bindings(str(folder), *modules)


def bindings_folder(path: str | None = None) -> Path:
    """The first of ``path`` or DCGM's install paths that holds all the bindings' files, resolved.

    Raises BackendUnavailable naming the places looked at.
    """
    tried = []
    for folder in _candidates(path):
        missing = [name for name in MODULES if not (folder / f"{name}.py").is_file()]
        if not missing:
            return folder.resolve()
        tried.append(f"{folder} (no {', '.join(f'{name}.py' for name in missing)} there)")
    hint = "pass --dcgm.bindings-path" if path is None else "check --dcgm.bindings-path"
    raise BackendUnavailable(f"DCGM Python bindings not found: looked in {'; '.join(tried)}. Install DCGM 4 or 3 (its packages put the bindings there) or {hint}")
