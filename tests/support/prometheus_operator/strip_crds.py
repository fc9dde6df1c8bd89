#!/usr/bin/env python3
"""Make schemas.json from the Prometheus Operator's CRD files: each kind's v1 openAPIV3Schema,
descriptions dropped (they are most of the bytes), keyed by kind.
    python tests/support/prometheus_operator/strip_crds.py VERSION monitoring.coreos.com_servicemonitors.yaml ...
The CRD files are the operator's example/prometheus-operator-crd/ (README.md says which release)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml


def strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: strip(value) for key, value in node.items() if key != "description"}
    if isinstance(node, list):
        return [strip(item) for item in node]
    return node


def main(version: str, paths: list[str]) -> None:
    schemas: dict[str, Any] = {"operator_version": version}
    for path in paths:
        crd = yaml.safe_load(Path(path).read_text())
        (v1,) = [each for each in crd["spec"]["versions"] if each["name"] == "v1"]
        schemas[crd["spec"]["names"]["kind"]] = strip(v1["schema"]["openAPIV3Schema"])
    out = Path(__file__).with_name("schemas.json")
    out.write_text(json.dumps(schemas, sort_keys=True, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
