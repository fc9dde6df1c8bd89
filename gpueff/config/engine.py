"""The schema engine: a config section is a frozen dataclass whose fields say their default, their
parser, one line of documentation and what a reload does with them; loading walks the YAML against
it and every error names the key path (``apps[0].url``). Unknown keys are rejected; a section's
``REFUSED`` (key -> why) names keys of a format it knowingly does not take, and says why."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any, TypeVar

from gpueff.config.values import cut, shown

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

APPLIED = "applied"  # a reload takes the new value at the next poll
RESTART = "restart"  # read once at start: a reload that changes it logs that it needs a restart


class ConfigError(Exception):
    """A configuration problem, already phrased for the user (names the file and the key). Loading
    reports every problem of a file at once: ``problems`` holds each, the message all of them."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems if problems is not None else [message]


def problems_error(problems: list[str]) -> ConfigError:
    """One ConfigError for several problems, each named by its key path."""
    if len(problems) == 1:
        return ConfigError(problems[0], problems)
    return ConfigError(f"{len(problems)} problems: " + "; ".join(problems), problems)


def unknown_key(key_path: str, key: str, known: list[str]) -> str:
    """The message for an unknown key: the nearest known one where a typo is likely, and the rest."""
    import difflib  # only a config with an unknown key needs it (0.2 MB with heapq)

    guess = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"did you mean '{guess[0]}'? " if guess else ""
    return f"'{key_path}': unknown key ({hint}known keys here: {', '.join(sorted(known))})"


class SettingError(ValueError):
    """Raised by a section's ``check()``: a problem across its keys, naming the key it is about."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key


class PartError(ValueError):
    """Raised by a parser: a problem in one part of the value, named by its path under the key
    (``[2]`` for a list's item, ``.alice`` for a mapping's entry)."""

    def __init__(self, part: str, reason: str) -> None:
        super().__init__(reason)
        self.part = part


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
    """``data`` loaded as ``cls``; every problem in it (not only the first) in one ConfigError."""
    problems: list[str] = []
    loaded = _load_section(cls, data, path, problems)
    if problems:
        raise problems_error(problems)
    return loaded


def _load_section(cls: type[_Section], data: Any, path: str, problems: list[str]) -> _Section:
    """Loads what it can, appending each problem to ``problems``; a key in error keeps its default,
    and the section's cross-key ``check()`` runs only where its own keys all loaded."""
    where = f"'{path}'" if path else "the top level"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.append(f"{where}: expected a mapping, got {type(data).__name__}")
        return cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    before = len(problems)
    for key, raw in data.items():
        key_path = f"{path}.{cut(str(key))}" if path else cut(str(key))
        spec = fields.get(key)
        if spec is None:
            refused = getattr(cls, "REFUSED", {}).get(key)
            problems.append(f"'{key_path}': {refused}" if refused is not None else unknown_key(key_path, cut(str(key)), list(fields)))
            continue
        if "section" in spec.metadata:
            values[key] = _load_section(spec.metadata["section"], raw, key_path, problems)
            continue
        if "section_list" in spec.metadata:
            values[key] = _load_section_list(spec.metadata["section_list"], raw, key_path, spec.metadata["unique"], spec.metadata["most"], problems)
            continue
        try:
            values[key] = spec.metadata["parse"](raw)
        except ConfigError as error:
            problems.extend(error.problems)
        except PartError as error:
            problems.append(f"'{key_path}{error.part}': {error}")
        except ValueError as error:
            problems.append(f"'{key_path}': {error}")
    loaded = cls(**values)
    check = getattr(loaded, "check", None)
    if check is not None and len(problems) == before:
        try:
            check()
        except SettingError as error:
            problems.append(f"'{path}.{error.key}': {error}" if path else f"'{error.key}': {error}")
    return loaded


def load_section_list(cls: type, data: Any, path: str, unique: str | None, most: int | None = None) -> tuple[Any, ...]:
    problems: list[str] = []
    items = _load_section_list(cls, data, path, unique, most, problems)
    if problems:
        raise problems_error(problems)
    return items


def _load_section_list(cls: type, data: Any, path: str, unique: str | None, most: int | None, problems: list[str]) -> tuple[Any, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        problems.append(f"'{path}': expected a list, got {type(data).__name__}")
        return ()
    if most is not None and len(data) > most:
        problems.append(f"'{path}': at most {most} entries, got {len(data)}")
        return ()
    before = len(problems)
    items: tuple[Any, ...] = tuple(_load_section(cls, item, f"{path}[{index}]", problems) for index, item in enumerate(data))
    if unique is not None and len(problems) == before:
        first: dict[Any, int] = {}
        for index, item in enumerate(items):
            value = getattr(item, unique)
            if value in first:
                problems.append(f"'{path}[{index}].{unique}': {shown(value)} is already used by {path}[{first[value]}]")
            first.setdefault(value, index)
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
