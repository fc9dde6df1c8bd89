#!/usr/bin/env python3
"""Copy the project's Grafana dashboards and Prometheus rules into the Helm chart's files/.

Helm can only package files inside the chart, so the chart carries copies:
  dashboards/*.json                          -> gpu-efficiency-exporter/files/dashboards/
  deploy/prometheus/rules-source.yml         -> gpu-efficiency-exporter/files/rules/
  deploy/prometheus/dcgm-exporter-compat*.yml -> gpu-efficiency-exporter/files/rules/ (prometheusRule.dcgmExporterCompat:
                                                both generations of names, each with its -per-pod variant)
  (the chart's PrometheusRule template builds the rules from that source and the alert values)
Run it after changing a dashboard or a rule; tests/deploy/test_helm_chart.py fails while the copies differ.
With --check it changes nothing and exits 1 if a copy is missing, differs or is left over.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART_FILES = ROOT / "helm" / "gpu-efficiency-exporter" / "files"


def sources() -> dict[Path, Path]:
    """Chart copy -> project original."""
    pairs = {CHART_FILES / "dashboards" / path.name: path for path in sorted((ROOT / "dashboards").glob("*.json"))}
    for source in (ROOT / "deploy" / "prometheus" / name for name in ("rules-source.yml", "dcgm-exporter-compat.yml", "dcgm-exporter-compat-per-pod.yml",
                                                                         "dcgm-exporter-compat-dcgm47.yml", "dcgm-exporter-compat-dcgm47-per-pod.yml")):
        pairs[CHART_FILES / "rules" / source.name] = source
    return pairs


def differences() -> list[str]:
    """What --check reports: copies missing, out of date, or without an original."""
    wanted = sources()
    problems = [f"{copy.relative_to(ROOT)}: missing or differs from {original.relative_to(ROOT)}" for copy, original in wanted.items() if not copy.is_file() or copy.read_bytes() != original.read_bytes()]
    for folder in ("dashboards", "rules"):
        for copy in sorted((CHART_FILES / folder).glob("*")):
            if copy not in wanted:
                problems.append(f"{copy.relative_to(ROOT)}: left over, its original is gone")
    return problems


def sync() -> list[str]:
    wanted = sources()
    changed = []
    for copy, original in wanted.items():
        if not copy.is_file() or copy.read_bytes() != original.read_bytes():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(original, copy)
            changed.append(f"copied {original.relative_to(ROOT)}")
    for folder in ("dashboards", "rules"):
        for copy in sorted((CHART_FILES / folder).glob("*")):
            if copy not in wanted:
                copy.unlink()
                changed.append(f"removed {copy.relative_to(ROOT)}")
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report differences, change nothing")
    args = parser.parse_args()
    if args.check:
        problems = differences()
        print("\n".join(problems) or "chart files are in sync")
        return 1 if problems else 0
    print("\n".join(sync()) or "chart files are already in sync")
    return 0


if __name__ == "__main__":
    sys.exit(main())
