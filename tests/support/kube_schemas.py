"""Validation of Kubernetes objects against their schemas, offline.

Built-in kinds are checked strictly (unknown fields fail) with kubernetes-validate, against the
oldest and newest Kubernetes versions the chart supports. The Prometheus Operator's ServiceMonitor,
PodMonitor and PrometheusRule against the operator's own CRD schemas (prometheus_operator/), as
strictly: an unknown field fails unless the CRD keeps unknown fields there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

VERSIONS = ("1.25.0", "1.37.0")
OPERATOR_API = "monitoring.coreos.com/v1"
OPERATOR_SCHEMAS = Path(__file__).with_name("prometheus_operator") / "schemas.json"


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _closed(schema: Any) -> Any:
    """The schema with additionalProperties: false on every object that lists its properties and does
    not keep unknown fields (x-kubernetes-preserve-unknown-fields): kubectl's strict field validation."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) for key, value in schema.items()}
    if "properties" in closed and "additionalProperties" not in closed and not closed.get("x-kubernetes-preserve-unknown-fields"):
        closed["additionalProperties"] = False
    return closed


@cache
def operator_validator(kind: str) -> jsonschema.protocols.Validator:
    schema = json.loads(OPERATOR_SCHEMAS.read_text())[kind]
    closed = _closed(schema)
    closed["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: validated by the API server, not the CRD
    return jsonschema.Draft7Validator(closed)


def validate_all(objects: Iterable[dict[str, Any]]) -> list[str]:
    """Validate each object (built-in kinds for every version); return "Kind/name" of each one checked."""
    checked = []
    for obj in objects:
        if obj["apiVersion"] == OPERATOR_API:
            errors = sorted(operator_validator(obj["kind"]).iter_errors(obj), key=lambda error: list(error.path))
            assert not errors, f"{obj['kind']}/{obj['metadata']['name']}: " + "; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors[:5])
        else:
            for version in VERSIONS:
                kubernetes_validate.validate(obj, version, strict=True)
        checked.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return checked
