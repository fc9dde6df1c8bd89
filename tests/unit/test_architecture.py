"""docs/architecture.md's rules about the import graph, checked: no cycle, and nothing imports back up
the layers (config's engine -> the ground floor -> backends -> pipeline -> exposition -> web ->
settings -> poller -> commands)."""

from __future__ import annotations

import sys

import pytest
from repo import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import import_graph  # noqa: E402

KNOWN = import_graph.modules(ROOT)
# The product above the engine: config/ (the schema engine, value parsers, the safe YAML loader)
# knows none of it; each feature's section lives beside the feature, the root Config in settings.py.
PRODUCT = (
    "exporter.metrics", "exporter.sample", "exporter.gpm_metrics", "exporter.peaks", "exporter.taxonomy", "exporter.collectors", "exporter.trace", "exporter.trace_owners", "exporter.selfstats",
    "exporter.backends", "exporter.attribution", "exporter.pipeline", "exporter.apps", "exporter.snapshot", "exporter.overview", "exporter.exposition", "exporter.web",
    "exporter.otlp", "exporter.settings", "exporter.poller", "exporter.commands",
)  # fmt: skip
# A package never imports these (nor anything in them). The root Config (exporter.settings) sits
# above the features: each is handed its own section, never the whole file.
NEVER = {
    "exporter.backends": ("exporter.pipeline", "exporter.attribution", "exporter.apps", "exporter.exposition", "exporter.web", "exporter.settings", "exporter.poller", "exporter.commands"),
    "exporter.attribution": ("exporter.backends", "exporter.pipeline", "exporter.exposition", "exporter.web", "exporter.settings", "exporter.poller", "exporter.commands"),
    "exporter.pipeline": ("exporter.backends", "exporter.exposition", "exporter.web", "exporter.settings", "exporter.poller", "exporter.commands"),
    "exporter.apps": ("exporter.backends", "exporter.pipeline", "exporter.exposition", "exporter.web", "exporter.settings", "exporter.poller", "exporter.commands"),
    "exporter.exposition": ("exporter.backends", "exporter.web", "exporter.settings", "exporter.poller", "exporter.commands"),
    "exporter.web": ("exporter.backends", "exporter.settings", "exporter.poller", "exporter.commands"),
    "exporter.otlp": ("exporter.backends", "exporter.web", "exporter.settings", "exporter.poller", "exporter.commands"),
    "exporter.config": PRODUCT,
    "exporter.httpserver": PRODUCT,  # the generic HTTP server: the product's web sits on it
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


def test_the_import_graph_has_no_cycle_and_no_import_back_up_its_layers(capsys: pytest.CaptureFixture[str]) -> None:
    assert import_graph.main([str(ROOT)]) == 0, capsys.readouterr().out


def test_an_import_from_a_layer_above_is_counted_as_running_back_up() -> None:
    assert import_graph.upward({"exporter.config.values": {"exporter.apps.patterns"}, "exporter.poller": {"exporter.settings"}}) == ["exporter.config.values -> exporter.apps.patterns"]
