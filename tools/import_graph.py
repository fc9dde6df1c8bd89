"""The package's import graph, as docs/architecture.md counts it: rooms (modules with code), arrows
(imports between them, type-only ones included), floors (the longest chain of arrows), cycles, and
the arrows that run back up: from a room of one layer (LAYERS) to a room of a layer above it.

    python tools/import_graph.py [TREE]    # TREE: a checkout (default: this one)

It prints the layers, bottom first, with their rooms, then every cycle and every arrow back up, and
exits 1 where there is one of either (or a room in no layer).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

GENERATED = {"podresources_pb2.py"}

# docs/architecture.md's layers, bottom first: a room may import rooms of its own layer and of the
# layers below, never one above. A name stands for that module or package and everything in it; the
# longest name that covers a room gives its layer.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("engine", ("gpueff", "gpueff.config", "gpueff.untrusted", "gpueff.logs", "gpueff.deadline")),
    ("toolkit", ("gpueff.httpserver",)),
    ("ground", ("gpueff.metrics", "gpueff.sample", "gpueff.gpm_metrics", "gpueff.peaks", "gpueff.taxonomy", "gpueff.collectors", "gpueff.trace", "gpueff.trace_owners", "gpueff.selfstats")),
    ("sources", ("gpueff.backends", "gpueff.attribution")),
    ("pipeline", ("gpueff.pipeline", "gpueff.apps")),
    ("published", ("gpueff.snapshot", "gpueff.overview", "gpueff.exposition")),
    ("web", ("gpueff.web", "gpueff.otlp")),  # the outlets: served (web) and pushed (otlp)
    ("settings", ("gpueff.settings",)),
    ("poller", ("gpueff.poller",)),
    ("commands", ("gpueff.commands", "gpueff.__main__")),
)


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted((root / "gpueff").rglob("*.py")):
        if path.name in GENERATED:
            continue
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def has_code(path: Path) -> bool:
    """False for a module that is only a docstring (a package's __init__)."""
    return not all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in ast.parse(path.read_text()).body)


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [node.module])
            targets += [base] + [f"{base}.{alias.name}" for alias in node.names]
    found = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name and not name.startswith(target + "."):
            found.add(target)
    return found


def layer_of(name: str) -> int | None:
    """The index in LAYERS of the room ``name`` (None: in none). The package itself ("gpueff",
    its version) covers only itself."""
    covering = [(len(entry), index) for index, (_, entries) in enumerate(LAYERS) for entry in entries if name == entry or "." in entry and name.startswith(entry + ".")]
    return max(covering)[1] if covering else None


def upward(arrows: dict[str, set[str]]) -> list[str]:
    """Every arrow from a room to a room of a higher layer, as "room -> room"."""
    return sorted(f"{name} -> {target}" for name, targets in arrows.items() for target in targets if (layer_of(target) or 0) > (layer_of(name) or 0))


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    known = modules(root)
    rooms = {name for name, path in known.items() if has_code(path)}
    arrows = {name: imported(name, known[name], known) & rooms for name in rooms}
    floors: dict[str, int] = {}
    cycles: list[list[str]] = []

    def floor(name: str, chain: tuple[str, ...]) -> int:
        if name in chain:
            cycles.append([*chain[chain.index(name) :], name])
            return 0
        if name not in floors:
            floors[name] = 1 + max((floor(other, (*chain, name)) for other in sorted(arrows[name])), default=0)
        return floors[name]

    height = max(floor(name, ()) for name in sorted(rooms))
    back_up = upward(arrows)
    homeless = sorted(name for name in rooms if layer_of(name) is None)
    print(f"rooms {len(rooms)}, arrows {sum(len(each) for each in arrows.values())}, floors {height}, cycles {len(cycles)}, upward {len(back_up)}")
    for index, (layer, _) in enumerate(LAYERS):
        units = Counter(".".join(name.split(".")[:2]).removeprefix("exporter.") for name in rooms if layer_of(name) == index)
        print(f"  layer {index} {layer}: " + ", ".join(f"{unit} ({count})" if count > 1 else unit for unit, count in sorted(units.items())))
    for cycle in cycles:
        print("cycle:", " -> ".join(cycle))
    for arrow in back_up:
        print("upward:", arrow)
    for name in homeless:
        print("in no layer:", name)
    largest = sorted(((len(known[name].read_text().splitlines()), name) for name in rooms), reverse=True)[:3]
    print("largest:", ", ".join(f"{name} ({lines} lines)" for lines, name in largest))
    return 1 if cycles or back_up or homeless else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
