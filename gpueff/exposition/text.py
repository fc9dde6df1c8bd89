"""The Prometheus text exposition format (0.0.4): escaping, numbers, and a family's HELP and TYPE
lines from its catalogue row. Knows nothing of GPUs or snapshots."""

from __future__ import annotations

from collections.abc import Iterable

from gpueff.metrics import METRICS, Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

def escape(value: str) -> str:
    """A label value as the text format wants it: backslash, double quote and newline escaped."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def escape_help(text: str) -> str:
    """HELP text as the text format wants it: backslash and newline escaped."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def labels(names: tuple[str, ...], values: Iterable[object]) -> str:
    """``name="value",...`` with every value escaped."""
    return ",".join(f'{name}="{escape(str(value))}"' for name, value in zip(names, values))


_OWN_LABELS: dict[tuple[tuple[str, ...], tuple[object, ...]], str] = {}


def own_labels(names: tuple[str, ...], values: tuple[object, ...]) -> str:
    """``labels`` for a GPU row's own labels, remembered: their values repeat every poll (a reason,
    a rule, a class, a GPU's model), so each text is escaped and joined once, not per series."""
    key = (names, values)
    text = _OWN_LABELS.get(key)
    if text is None:
        if len(_OWN_LABELS) >= 16384:  # bounded however many GPUs come and go
            _OWN_LABELS.clear()
        text = _OWN_LABELS[key] = labels(names, values)
    return text


_INF = float("inf")


def number(value: float) -> str:
    """A sample value: integers without a fraction, floats by repr (shortest round-trip), Prometheus's NaN/+Inf/-Inf."""
    if type(value) is int:
        return str(value)
    value = float(value)
    if value.is_integer():
        return str(int(value)) if -1e15 < value < 1e15 else repr(value)
    if value != value:
        return "NaN"
    if value == _INF:
        return "+Inf"
    if value == -_INF:
        return "-Inf"
    return repr(value)


def header(metric: Metric) -> tuple[str, str]:
    return f"# HELP {metric.name} {escape_help(metric.help)}", f"# TYPE {metric.name} {metric.type}"


HEADERS: dict[str, tuple[str, str]] = {metric.name: header(metric) for metric in METRICS}


def family(name: str, body: list[str]) -> list[str]:
    """A metric family's HELP and TYPE lines and its samples; nothing where it has no sample."""
    return [*HEADERS[name], *body] if body else []
