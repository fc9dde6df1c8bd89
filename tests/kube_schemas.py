"""Validation of Kubernetes objects against the official schemas (kubernetes-validate, offline).

Built-in kinds are checked strictly (unknown fields fail) against the oldest and newest Kubernetes
versions the chart supports. The Prometheus Operator's kinds have no schema there; the tests check
those field by field.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import kubernetes_validate
import yaml

VERSIONS = ("1.25.0", "1.37.0")
OPERATOR_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PodMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def validate_all(objects: Iterable[dict[str, Any]]) -> list[str]:
    """Validate each built-in object for every version; return "Kind/name" of each one checked."""
    checked = []
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in OPERATOR_KINDS:
            continue
        for version in VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
        checked.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return checked
