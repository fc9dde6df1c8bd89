"""Reading YAML from outside safely: PyYAML's safe loader, with duplicate keys, alias bombs and
recursive aliases refused, size bounded, and every problem raised as one error naming the file."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpueff.config.values import cut, shown
from gpueff.untrusted import read_file, writable_by_others

if TYPE_CHECKING:
    import yaml

MAX_ALIAS_NODES = 10_000  # nodes that aliases may add to a YAML document once expanded
# A config or web config is a few KB; PyYAML holds ~50 times a document's size while loading it.
MAX_YAML_BYTES = 1024 * 1024


@functools.cache
def _strict_loader() -> type[Any]:
    """PyYAML's safe loader, refusing duplicate keys and alias bombs ("billion laughs") before they
    are built: a document whose aliases would add more than MAX_ALIAS_NODES nodes, or that holds
    itself, fails while it is still a small graph of shared nodes. Made on the first YAML file
    read, so a daemon without one never loads yaml."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def get_single_data(self) -> Any:
            node = self.get_single_node()
            if node is None:
                return None
            sizes: dict[int, int] = {}
            expanded = _expanded_nodes(node, sizes, set())
            if expanded - len(sizes) > MAX_ALIAS_NODES:
                raise yaml.constructor.ConstructorError(None, None, f"its aliases expand {len(sizes)} nodes into {expanded} (at most {MAX_ALIAS_NODES} more are allowed): refused as an alias bomb", node.start_mark)
            return self.construct_document(node)

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            first: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # merged keys may be overridden, that is their use
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.get(key)
                except TypeError:  # unhashable: the base class says so
                    continue
                if seen is not None:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {shown(key)} (first at line {seen.line + 1}); a YAML mapping takes each key once", key_node.start_mark)
                first[key] = key_node.start_mark
            return super().construct_mapping(node, deep)

    return StrictLoader


def _expanded_nodes(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many nodes ``node`` becomes with every alias copied out; ``sizes`` memoizes by node."""
    import yaml

    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise yaml.constructor.ConstructorError(None, None, "an alias refers to a node that contains it (a recursive structure)", node.start_mark)
    open_nodes.add(key)
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    else:
        children = []
    size = 1 + sum(_expanded_nodes(child, sizes, open_nodes) for child in children)
    open_nodes.discard(key)
    sizes[key] = size
    return size


def read_yaml(path: str | Path, what: str, error: type[Exception], max_bytes: int = MAX_YAML_BYTES) -> Any:
    """Read and decode a YAML file; every problem is raised as ``error`` naming ``what`` and the file.

    Only a regular file of at most ``max_bytes`` is read (``untrusted.read_file``), and only where no
    other user can change it (``untrusted.writable_by_others``: the daemon, often root, would follow
    it). Duplicate keys, alias bombs and recursive aliases are refused (``_strict_loader``)."""
    where = f"{what} {path}"
    try:
        raw = read_file(path, max_bytes)
        others = writable_by_others(path)
    except OSError as problem:
        raise error(f"{where}: cannot read it: {problem.strerror or problem}") from None
    except ValueError as problem:
        raise error(f"{where}: {problem}") from None
    if others is not None:
        raise error(f"{where}: refused, since another user could change what it says: {others}") from None
    import yaml

    try:
        return yaml.load(raw.decode("utf-8"), Loader=_strict_loader())  # noqa: S506 (a SafeLoader)
    except UnicodeDecodeError as problem:
        raise error(f"{where}: not UTF-8 text (byte {problem.start})") from None
    except yaml.YAMLError as problem:
        mark = getattr(problem, "problem_mark", None)
        place = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = str(getattr(problem, "problem", None) or problem)
        raise error(f"{where}: not valid YAML{place}: {cut(reason)}") from None
    except RecursionError:
        raise error(f"{where}: nested too deeply") from None
    except MemoryError:
        raise error(f"{where}: too large to load") from None
    except ValueError as problem:  # from the YAML scanner, e.g. an integer of more than 4300 digits
        raise error(f"{where}: not valid YAML: {cut(str(problem))}") from None
