"""The schema engine: a config section is a frozen dataclass whose fields say their default, their
parser, one line of documentation and what a reload does with them; loading walks the YAML against
it and every error names the key path (``apps[0].url``). Unknown keys are rejected."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any, TypeVar

from exporter.config.values import cut, shown

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

APPLIED = "applied"  # a reload takes the new value at the next poll
RESTART = "restart"  # read once at start: a reload that changes it logs that it needs a restart


class ConfigError(Exception):
    """A configuration problem, already phrased for the user (names the file and the key)."""


class SettingError(ValueError):
    """Raised by a section's ``check()``: a problem across its keys, naming the key it is about."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key


def setting(default: Any, parse: Callable[[Any], Any], doc: str, reload: str = APPLIED) -> Any:
    """A config field: its default, how to parse it, one line for the config reference, and what a
    reload does with it (APPLIED, RESTART, or a sentence where it depends)."""
    metadata = {"parse": parse, "doc": doc, "reload": reload}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def section(cls: type, doc: str) -> Any:
    """A nested mapping of keys (``bottleneck:``), loaded as ``cls``."""
    return field(default_factory=cls, metadata={"section": cls, "doc": doc})


def section_list(cls: type, doc: str, unique: str | None = None, most: int | None = None) -> Any:
    """A YAML list of sections (``apps:``); ``unique`` names a key whose values must all differ,
    ``most`` bounds the items (checked before any is read)."""
    return field(default_factory=tuple, metadata={"section_list": cls, "unique": unique, "most": most, "doc": doc})



_Section = TypeVar("_Section", bound="DataclassInstance")


def load_section(cls: type[_Section], data: Any, path: str) -> _Section:
    where = f"'{path}'" if path else "the top level"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, raw in data.items():
        key_path = f"{path}.{cut(str(key))}" if path else cut(str(key))
        spec = fields.get(key)
        if spec is None:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"'{key_path}': unknown key (known keys here: {known})")
        if "section" in spec.metadata:
            values[key] = load_section(spec.metadata["section"], raw, key_path)
            continue
        if "section_list" in spec.metadata:
            values[key] = load_section_list(spec.metadata["section_list"], raw, key_path, spec.metadata["unique"], spec.metadata["most"])
            continue
        try:
            values[key] = spec.metadata["parse"](raw)
        except ConfigError:
            raise
        except ValueError as error:
            raise ConfigError(f"'{key_path}': {error}") from None
    loaded = cls(**values)
    check = getattr(loaded, "check", None)
    if check is not None:
        try:
            check()
        except SettingError as error:
            raise ConfigError(f"'{path}.{error.key}': {error}" if path else f"'{error.key}': {error}") from None
    return loaded


def load_section_list(cls: type, data: Any, path: str, unique: str | None, most: int | None = None) -> tuple[Any, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ConfigError(f"'{path}': expected a list, got {type(data).__name__}")
    if most is not None and len(data) > most:
        raise ConfigError(f"'{path}': at most {most} entries, got {len(data)}")
    items: tuple[Any, ...] = tuple(load_section(cls, item, f"{path}[{index}]") for index, item in enumerate(data))
    if unique is not None:
        first: dict[Any, int] = {}
        for index, item in enumerate(items):
            value = getattr(item, unique)
            if value in first:
                raise ConfigError(f"'{path}[{index}].{unique}': {shown(value)} is already used by {path}[{first[value]}]")
            first[value] = index
    return items


def reference(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, default, doc, on reload) rows of the config reference, for every key of ``cls``."""
    rows = []
    for spec in dataclasses.fields(cls):
        key = prefix + spec.name
        if "section" in spec.metadata:
            rows.extend(reference(spec.metadata["section"], key + "."))
            continue
        if "section_list" in spec.metadata:
            rows.append((key, "[]", spec.metadata["doc"], APPLIED))
            rows.extend(reference(spec.metadata["section_list"], key + "[]."))
            continue
        default = spec.default if spec.default_factory is dataclasses.MISSING else spec.default_factory()
        rows.append((key, repr(default), spec.metadata["doc"], spec.metadata["reload"]))
    return rows


def restart_only_changes(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The keys marked RESTART whose value differs between two loads of the same section."""
    changed = []
    for spec in dataclasses.fields(old):
        key = prefix + spec.name
        if "section" in spec.metadata:
            changed.extend(restart_only_changes(getattr(old, spec.name), getattr(new, spec.name), key + "."))
        elif spec.metadata.get("reload") == RESTART and getattr(old, spec.name) != getattr(new, spec.name):
            changed.append(key)
    return changed
