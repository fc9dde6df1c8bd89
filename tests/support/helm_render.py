"""The Helm chart rendered by real Helm (Helm v4's Go library through helm-python-sdk), as objects."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import yaml
from conftest import ROOT
from kube_schemas import documents

from gpueff.settings import parse_config

CHART = ROOT / "helm" / "gpu-efficiency-exporter"
DAEMONSET = "DaemonSet/gpueff-gpu-efficiency-exporter"


def render(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rendered objects by "Kind/name", plus NOTES under "NOTES"."""
    rendered = helm.Chart.load(CHART).render(values or {}, name="gpueff", namespace="monitoring", is_install=True)
    objects: dict[str, Any] = {}
    for path, text in rendered.items():
        if path.endswith("NOTES.txt"):
            objects["NOTES"] = text
            continue
        for obj in documents(text):
            objects[f"{obj['kind']}/{obj['metadata']['name']}"] = obj
    return objects


def pod_spec(objects: dict[str, Any]) -> dict[str, Any]:
    return objects[DAEMONSET]["spec"]["template"]["spec"]


def exporter_config(objects: dict[str, Any]):
    return parse_config(yaml.safe_load(objects["ConfigMap/gpueff-gpu-efficiency-exporter"]["data"]["config.yml"]))
