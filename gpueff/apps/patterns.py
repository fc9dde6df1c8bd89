"""The apps' ``process`` and ``pod`` patterns, matched against names anyone on the node picks: a
process names itself (its executable's path, up to 1,024 bytes from NVML), a tenant names its pods.

Python's ``re`` backtracks without bound: ``(a+)+$`` against ``aaaa...!`` runs for longer than the
universe, and patterns with no nesting at all are not safe either (``.*a.*b.*c`` took 11 s against a
1,024-character name here). No check of the pattern at load can tell all of those apart from
ordinary ones, so every match runs in the ``regex`` module (the same syntax) under a time bound,
MATCH_TIMEOUT: a name that takes longer is taken as not matching, and the app's pattern is logged
once. Results are remembered per name (processes keep their names from poll to poll), so a name
costs its match once, not every poll.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

from gpueff.config.values import shown

log = logging.getLogger(__name__)

MATCH_TIMEOUT = 0.005  # seconds; an ordinary pattern takes microseconds against a path
MAX_REMEMBERED = 4096  # names remembered per pattern, then forgotten all at once


@functools.cache
def _regex() -> Any:
    import regex  # type: ignore[import-untyped]  # only where an app has a process or pod pattern

    return regex


def check(pattern: str) -> None:
    """Raise ValueError (saying why) where ``pattern`` is not a regular expression of Python's
    ``re`` (what the docs promise) and of ``regex`` (what matches it; it accepts a little more)."""
    try:
        re.compile(pattern)
        _regex().compile(pattern)
    except (re.error, _regex().error) as error:
        raise ValueError(f"not a valid regular expression ({error})") from None


def regex(value: Any) -> str:
    """A config value that is a pattern of this module (the regex module's syntax, which is re's)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a regular expression, got {shown(value)}")
    try:
        check(value)
    except ValueError as error:
        raise ValueError(f"{error}: {shown(value)}") from None
    return value


# A pod pattern's start, "^<namespace>/": the namespace written out (a DNS-1123 label), then the slash
# with no quantifier on it (``^serving/?x`` would match the namespace servingx).
_NAMESPACE_PREFIX = re.compile(r"(?:\^|\\A)([a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)/(?![?*+{])")


def _alternation_outside_groups(pattern: str) -> bool:
    """Whether ``pattern`` has a ``|`` outside every group and character class (an alternative that
    the anchored start does not cover)."""
    depth, position, in_class = 0, 0, False
    while position < len(pattern):
        character = pattern[position]
        if character == "\\":
            position += 2
            continue
        if in_class:
            in_class = character != "]"
        elif character == "[":
            in_class = True
            position += 1 + pattern.startswith("^", position + 1)  # a "]" first in the class is a literal
            if pattern.startswith("]", position):
                position += 1
            continue
        elif character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
        elif character == "|" and depth <= 0:
            return True
        position += 1
    return False


def pod_regex(value: Any) -> str:
    """An app's ``pod`` pattern: a pattern of this module that names the one namespace it matches in.
    Tenants name their own pods, so a pattern that can match in any namespace (``vllm-``, or
    ``serving/vllm-`` unanchored, which ``ml-serving/vllm-x`` matches) lets any tenant who can
    create a pod join its GPUs to another team's app."""
    pattern = regex(value)
    if _NAMESPACE_PREFIX.match(pattern) is None or _alternation_outside_groups(pattern):
        raise ValueError(
            f"must start with ^ and one namespace written out, then /, with no | outside a group (e.g. ^serving/vllm-): "
            f"a pattern that can match pods of any other namespace lets any tenant who can name a pod join the app: {shown(value)}"
        )
    return pattern


class NamePattern:
    def __init__(self, pattern: str, what: str) -> None:
        self.pattern = pattern
        self.what = what  # what the names are, for the log: "process name", "namespace/pod"
        self._compiled = _regex().compile(pattern)
        self._seen: dict[str, bool] = {}
        self._warned = False

    def search(self, name: str) -> bool:
        found = self._seen.get(name)
        if found is None:
            try:
                found = self._compiled.search(name, timeout=MATCH_TIMEOUT) is not None
            except TimeoutError:
                found = False
                if not self._warned:
                    log.warning("the pattern %r took over %g s against the %s %r and is taken as not matching it; simplify the pattern (nested or repeated quantifiers)", self.pattern, MATCH_TIMEOUT, self.what, name[:200])
                    self._warned = True
            if len(self._seen) >= MAX_REMEMBERED:
                self._seen.clear()
            self._seen[name] = found
        return found


@functools.lru_cache(maxsize=64)
def name_pattern(pattern: str, what: str) -> NamePattern:
    """One NamePattern per pattern, kept across polls (and reloads that keep the pattern)."""
    return NamePattern(pattern, what)
