"""The checkout's folders, for tests that read the repository's own files wherever they sit in tests/,
and the benchmarks' modules for the tests of bench/ (bench/ is not on the tests' import path)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "tests" / "support"
BENCH = ROOT / "bench"
DASHBOARDS = ROOT / "deploy" / "mixin" / "dashboards"  # the one committed copy (dashboards/build.py writes it)


def bench_module(name: str) -> ModuleType:
    """bench/<name>.py, imported as the module ``name`` (dataclasses look their module up in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
