"""docs/architecture.md's rules about the import graph, checked: no cycle, and nothing imports back up
the data flow (backends -> pipeline -> exposition -> web; commands on top)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import import_graph  # noqa: E402

KNOWN = import_graph.modules(ROOT)
# A package never imports these (nor anything in them).
NEVER = {
    "exporter.backends": ("exporter.pipeline", "exporter.attribution", "exporter.apps", "exporter.exposition", "exporter.web", "exporter.poller", "exporter.commands"),
    "exporter.attribution": ("exporter.backends", "exporter.pipeline", "exporter.exposition", "exporter.web", "exporter.poller", "exporter.commands"),
    "exporter.pipeline": ("exporter.backends", "exporter.exposition", "exporter.web", "exporter.poller", "exporter.commands"),
    "exporter.exposition": ("exporter.backends", "exporter.web", "exporter.poller", "exporter.commands"),
    "exporter.web": ("exporter.backends", "exporter.poller", "exporter.commands"),
    "exporter.config": ("exporter.exposition", "exporter.web", "exporter.poller", "exporter.commands"),
}


def inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize("package", sorted(NEVER))
def test_nothing_imports_back_up_the_flow(package: str) -> None:
    upward = sorted(
        f"{name} -> {target}"
        for name, path in KNOWN.items()
        if inside(name, package)
        for target in import_graph.imported(name, path, KNOWN)
        if any(inside(target, banned) for banned in NEVER[package])
    )
    assert upward == []


def test_the_import_graph_has_no_cycle(capsys: pytest.CaptureFixture[str]) -> None:
    assert import_graph.main([str(ROOT)]) == 0, capsys.readouterr().out
