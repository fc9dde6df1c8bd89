"""What Grafana sends to Prometheus for a dashboard: its panel queries with the variables filled in.

Implements the parts of Grafana's interpolation the dashboards in dashboards/ use: ``$var`` and
``${var}``; multi-value query variables formatted as a Prometheus regex (values escaped, several
values as ``(a|b)``, "All" as the variable's allValue; a single-value one on its first option in
the variable's sort order); custom variables; and the built-ins
``$__interval``, ``$__rate_interval`` and ``$__range`` (Grafana's rule:
``$__rate_interval = max($__interval + scrape interval, 4 x scrape interval)``, where a query's Min
step, its target's ``interval``, stands for the scrape interval and bounds ``$__interval`` from below:
grafana/grafana#77234).

The order follows Grafana's source: the Prometheus data source's ``applyTemplateVariables``
(public/app/plugins/datasource/prometheus/datasource.ts) fills the dashboard's variables in the
browser (one regex pass; recent versions run a second pass after adding ad-hoc filters), leaving
``$__interval`` and ``$__rate_interval`` as text; the backend (pkg/promlib/models/query.go,
``InterpolateVariables``) then replaces those built-ins with ``strings.ReplaceAll`` over the whole
expression. So a built-in inside a custom variable's value is filled (it reaches the backend as
text); a dashboard variable inside another variable's value is filled only where the second pass
exists, so the dashboards never nest one (their custom variables hold a metric name). A
single-value custom variable's value is escaped for backslashes and single quotes only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")
LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$", re.S)
BUILTINS = ("__interval", "__rate_interval", "__range")


@dataclass(frozen=True)
class Query:
    dashboard: str
    panel: str
    ref: str
    expr: str
    instant: bool


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for item in dashboard["panels"]:
        if item["type"] == "row":
            yield from item.get("panels", [])
        else:
            yield item


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def regex_escape(value: str) -> str:
    """Grafana's (10/11, classic) Prometheus regex escaping: doubled backslashes, the value sits in a PromQL string."""
    return re.sub(r"[$^*{}\[\]+?.()|]", lambda m: "\\\\" + m.group(0), value.replace("\\", "\\\\\\\\"))


def format_multi(values: list[str]) -> str:
    escaped = [regex_escape(value) for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def interpolate(expr: str, values: dict[str, str]) -> str:
    """Fill user variables first, then the built-ins (Grafana's backend fills those last)."""

    def fill(text: str, names: set[str]) -> str:
        def replace(match: re.Match) -> str:
            name = match.group(1) or match.group(2)
            if name not in names:
                return match.group(0)
            return values[name]

        return VARIABLE.sub(replace, text)

    user = {name for name in values if name not in BUILTINS}
    text = fill(fill(expr, user), set(BUILTINS))
    leftover = VARIABLE.search(text)
    if leftover:
        raise KeyError(f"variable {leftover.group(0)} has no value in {expr!r}")
    return text


def duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def builtins(range_seconds: float, scrape_interval: float, max_data_points: int = 1000) -> dict[str, str]:
    interval = max(scrape_interval, range_seconds / max_data_points)
    rate_interval = max(interval + scrape_interval, 4 * scrape_interval)
    return {"__interval": duration(interval), "__rate_interval": duration(rate_interval), "__range": duration(range_seconds)}


def with_min_step(values: dict[str, str], min_step: str) -> dict[str, str]:
    """``values`` with the built-ins of a query whose Min step is ``min_step`` (``30s``)."""
    if "__interval" not in values:
        return values
    step = float(min_step.removesuffix("s"))
    interval = max(float(values["__interval"].removesuffix("s")), step)
    return values | {"__interval": duration(interval), "__rate_interval": duration(max(interval + step, 4 * step))}


def resolve_variables(dashboard: dict[str, Any], label_values: Callable[[str | None, str], list[str]], pick: Callable[[dict[str, Any], list[str]], str]) -> dict[str, str]:
    """Give every templating variable a value, in order (later variables may use earlier ones).

    ``label_values(selector, label)`` answers a query variable's ``label_values(...)``; ``pick``
    chooses the value of a query variable from its options (return ``allValue`` for "All").
    """
    values: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        kind, name = variable["type"], variable["name"]
        if kind == "datasource":
            continue
        if kind == "custom":
            values[name] = variable["current"]["value"]
        elif kind == "query":
            match = LABEL_VALUES.match(variable["definition"])
            if not match:
                raise ValueError(f"{dashboard['uid']}: variable {name}: only label_values(...) queries are supported, got {variable['definition']!r}")
            selector = match.group("selector")
            options = label_values(interpolate(selector, values) if selector else None, match.group("label"))
            values[name] = pick(variable, options) if variable["multi"] else first_option(variable, options)
        else:
            raise ValueError(f"{dashboard['uid']}: variable {name}: unsupported type {kind!r}")
    return values


def first_option(variable: dict[str, Any], options: list[str]) -> str:
    """A single-value query variable with no saved value: Grafana takes the first option in the
    variable's order (sort 0: as the data source answers, 1: alphabetical, 2: alphabetical
    descending), "" where there is none."""
    order = {0: options, 1: sorted(options), 2: sorted(options, reverse=True)}.get(variable["sort"])
    if order is None:
        raise ValueError(f"variable {variable['name']}: sort {variable['sort']} is not implemented here")
    return order[0] if order else ""


def queries(dashboard: dict[str, Any], values: dict[str, str]) -> Iterator[Query]:
    """Every panel query, then every Prometheus annotation query (as range queries)."""
    for item in panels(dashboard):
        for target in item["targets"]:
            filled = with_min_step(values, target["interval"]) if target.get("interval") else values
            yield Query(dashboard["uid"], item["title"], target["refId"], interpolate(target["expr"], filled), bool(target.get("instant")))
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            yield Query(dashboard["uid"], f"annotation {annotation['name']}", "-", interpolate(annotation["expr"], values), False)
