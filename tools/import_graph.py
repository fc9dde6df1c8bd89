"""The package's import graph, as docs/architecture.md counts it: rooms (modules with code), arrows
(imports between them, type-only ones included), floors (the longest chain of arrows) and cycles.

    python tools/import_graph.py [TREE]    # TREE: a checkout (default: this one)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

GENERATED = {"podresources_pb2.py"}


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted((root / "exporter").rglob("*.py")):
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
    print(f"rooms {len(rooms)}, arrows {sum(len(each) for each in arrows.values())}, floors {height}, cycles {len(cycles)}")
    for cycle in cycles:
        print("cycle:", " -> ".join(cycle))
    largest = sorted(((len(known[name].read_text().splitlines()), name) for name in rooms), reverse=True)[:3]
    print("largest:", ", ".join(f"{name} ({lines} lines)" for lines, name in largest))
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
