"""Writes deploy/kubernetes/prometheus-rule.yaml: gpu-efficiency-rules.yml as a PrometheusRule.

    python deploy/prometheus/build_prometheus_rule.py          # rewrite the manifest
    python deploy/prometheus/build_prometheus_rule.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
RULES = HERE / "gpu-efficiency-rules.yml"
MANIFEST = HERE.parent / "kubernetes" / "prometheus-rule.yaml"
HEADER = (
    "# Generated from deploy/prometheus/gpu-efficiency-rules.yml by deploy/prometheus/build_prometheus_rule.py.\n"
    "# Do not edit: change the rules file and run the script. For prometheus-operator / kube-prometheus-stack:\n"
    "# the Prometheus's ruleSelector must match these labels (kube-prometheus-stack's default selects\n"
    "# release: <its release name>: add that label, or set ruleSelectorNilUsesHelmValues=false).\n"
)


class _Dumper(yaml.SafeDumper):
    pass


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def manifest() -> dict[str, Any]:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpu-efficiency-exporter",
            "namespace": "gpu-efficiency-exporter",
            "labels": {
                "app.kubernetes.io/name": "gpu-efficiency-exporter",
                "app.kubernetes.io/instance": "gpu-efficiency-exporter",
                "app.kubernetes.io/component": "alerting",
                "app.kubernetes.io/part-of": "gpu-efficiency-exporter",
            },
        },
        "spec": {"groups": rules["groups"]},
    }


def render() -> str:
    return HEADER + yaml.dump(manifest(), Dumper=_Dumper, sort_keys=False, width=10_000, allow_unicode=True)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not MANIFEST.exists() or MANIFEST.read_text(encoding="utf-8") != text:
            print(f"{MANIFEST} is out of date: run python deploy/prometheus/build_prometheus_rule.py", file=sys.stderr)
            return 1
        return 0
    MANIFEST.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
