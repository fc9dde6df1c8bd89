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
    "gpueff.metrics", "gpueff.sample", "gpueff.gpm_metrics", "gpueff.peaks", "gpueff.taxonomy", "gpueff.collectors", "gpueff.trace", "gpueff.trace_owners", "gpueff.selfstats",
    "gpueff.backends", "gpueff.attribution", "gpueff.pipeline", "gpueff.apps", "gpueff.snapshot", "gpueff.overview", "gpueff.exposition", "gpueff.web",
    "gpueff.otlp", "gpueff.settings", "gpueff.poller", "gpueff.commands",
)  # fmt: skip
# A package never imports these (nor anything in them). The root Config (gpueff.settings) sits
# above the features: each is handed its own section, never the whole file.
NEVER = {
    "gpueff.backends": ("gpueff.pipeline", "gpueff.attribution", "gpueff.apps", "gpueff.exposition", "gpueff.web", "gpueff.settings", "gpueff.poller", "gpueff.commands"),
    "gpueff.attribution": ("gpueff.backends", "gpueff.pipeline", "gpueff.exposition", "gpueff.web", "gpueff.settings", "gpueff.poller", "gpueff.commands"),
    "gpueff.pipeline": ("gpueff.backends", "gpueff.exposition", "gpueff.web", "gpueff.settings", "gpueff.poller", "gpueff.commands"),
    "gpueff.apps": ("gpueff.backends", "gpueff.pipeline", "gpueff.exposition", "gpueff.web", "gpueff.settings", "gpueff.poller", "gpueff.commands"),
    "gpueff.exposition": ("gpueff.backends", "gpueff.web", "gpueff.settings", "gpueff.poller", "gpueff.commands"),
    "gpueff.web": ("gpueff.backends", "gpueff.settings", "gpueff.poller", "gpueff.commands"),
    "gpueff.otlp": ("gpueff.backends", "gpueff.web", "gpueff.settings", "gpueff.poller", "gpueff.commands"),
    "gpueff.config": PRODUCT,
    "gpueff.httpserver": PRODUCT,  # the generic HTTP server: the product's web sits on it
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
    assert import_graph.upward({"gpueff.config.values": {"gpueff.apps.patterns"}, "gpueff.poller": {"gpueff.settings"}}) == ["gpueff.config.values -> gpueff.apps.patterns"]


# The tests of the whole package rather than of one module (docs/contributing.md, "Where is the test of X?").
WHOLE_PACKAGE = {"test_architecture.py", "test_fuzz.py"}


def test_every_unit_test_is_named_after_the_module_it_tests() -> None:
    """tests/unit/<a>/test_<b>.py (or test_<b>_<aspect>.py) tests gpueff/<a>/<b>.py (a module or a
    package), so the test of a module is found from its name."""
    unit = ROOT / "tests" / "unit"
    strays = []
    for test in sorted(unit.rglob("test_*.py")):
        where = test.relative_to(unit)
        package = ROOT / "gpueff" / where.parent
        modules = {path.stem for path in package.glob("*.py")} | {path.parent.name for path in package.glob("*/__init__.py")}
        name = test.stem.removeprefix("test_")
        if str(where) not in WHOLE_PACKAGE and not any(name == module or name.startswith(f"{module}_") for module in modules):
            strays.append(str(where))
    assert strays == [], "name each after its module (gpueff/a/b.py: tests/unit/a/test_b.py), or put a daemon trial in tests/system/, an artifact's test in tests/deploy/"
