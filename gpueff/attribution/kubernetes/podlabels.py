"""Pod labels copied onto GPU series (dcgm-exporter's enablePodLabels), allow-listed and bounded.

Only the label keys named in ``kubernetes.pod_label_keys`` are copied (at most MAX_KEYS), each under
its key made a Prometheus label name (``app.kubernetes.io/name`` -> ``app_kubernetes_io_name``, as
dcgm-exporter names them); a name that would clash with a label the exporter or Prometheus sets is
refused when the config is loaded. Values are cut to MAX_VALUE_CHARS. The labels come from one
``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`` per refresh, on the refresher's thread.
"""

from __future__ import annotations

import re
from typing import Any

from gpueff.config.values import cut, shown
from gpueff.metrics import METRICS, SCOPE_LABELS
from gpueff.untrusted import decode

MAX_KEYS = 10
MAX_VALUE_CHARS = 128  # Kubernetes allows 63; anything longer is not a real label value
PODS_PATH = "/api/v1/pods"
# Labels a pod label must not become: every label name the catalogue gives the exporter's own series
# (derived from it, so a new metric's label is reserved the day it is added), and those Prometheus
# and its usual relabelling set on a target or a query's result.
RESERVED = frozenset(
    {name for labels in SCOPE_LABELS.values() for name in labels}
    | {name for metric in METRICS for name in metric.labels}
    | {"job", "instance", "cluster", "node", "le", "quantile", "namespace", "pod", "container"}
)
_KEY = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")

LabelPairs = tuple[tuple[str, str], ...]


def label_name(key: str) -> str:
    """A Kubernetes label key as a Prometheus label name."""
    name = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    return "_" + name if name[0].isdigit() else name


def pod_label_keys(value: Any) -> tuple[str, ...]:
    """The config's allow-list: Kubernetes label keys whose Prometheus names are distinct and free."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"expected a list of pod label keys, got {shown(value)}")
    if len(value) > MAX_KEYS:
        raise ValueError(f"at most {MAX_KEYS} pod label keys (each is a label on every series of the GPUs a pod holds), got {len(value)}")
    names: dict[str, str] = {}
    for key in value:
        if len(key) > 316 or not _KEY.fullmatch(key):
            raise ValueError(f"{cut(key)!r} is not a Kubernetes label key")
        name = label_name(key)
        if name in RESERVED or name.startswith("__"):
            raise ValueError(f"{key!r} would be the label {name!r}, which the exporter or Prometheus already sets")
        if name in names:
            raise ValueError(f"{names[name]!r} and {key!r} would both be the label {name!r}")
        names[name] = key
    return tuple(value)


def pod_labels(answer: dict[str, Any], keys: tuple[str, ...]) -> dict[tuple[str, str], LabelPairs]:
    """(namespace, pod) -> the allow-listed labels it has, as (label name, value) sorted by name, from
    a PodList; pods without any are left out, malformed entries skipped."""
    found: dict[tuple[str, str], LabelPairs] = {}
    items = answer.get("items")
    for item in items if isinstance(items, list) else ():
        metadata = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(metadata, dict) or not isinstance(metadata.get("namespace"), str) or not isinstance(metadata.get("name"), str):
            continue
        labels = metadata.get("labels")
        if not isinstance(labels, dict):
            continue
        # surrogatepass: JSON may carry a lone UTF-16 surrogate ("\ud800"), which no page can encode; its
        # bytes are kept as \xNN escapes like any other bytes that are not UTF-8.
        pairs = tuple(sorted((label_name(key), decode(labels[key].encode("utf-8", "surrogatepass"), MAX_VALUE_CHARS)) for key in keys if isinstance(labels.get(key), str)))
        if pairs:
            found[metadata["namespace"], metadata["name"]] = pairs
    return found
