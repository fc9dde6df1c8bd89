"""The monitoring mixin (deploy/mixin/), rendered by the real jsonnet: with its default _config it is
exactly the shipped rules file and dashboards, and each _config setting reaches its output."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import grafana_queries
import pytest
import yaml
from conftest import ROOT
from repo import DASHBOARDS
from waiting import PATIENCE

MIXIN = ROOT / "deploy" / "mixin"
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "gpu-efficiency-rules.yml"
SHIPPED_DASHBOARDS = sorted(DASHBOARDS.glob("*.json"))
# The variables whose queries select the exporter's series (the app dashboard's server counters are other jobs').
GPU_VARIABLES = {"cluster", "job", "instance", "gpu", "namespace", "pod", "app"}


def jsonnet() -> str:
    path = shutil.which("jsonnet")
    assert path, "jsonnet is not installed: tests/run.sh installs the Debian package jsonnet"
    return path


def render(config: dict[str, str] | None = None) -> dict[str, Any]:
    """The mixin's four parts, with ``config`` merged into its _config as a kube-prometheus user does."""
    override = json.dumps(config or {})
    code = (f"local mixin = (import 'mixin.libsonnet') + {{ _config+:: {override} }};\n"
            "{ config: mixin._config, rules: mixin.prometheusRules, alerts: mixin.prometheusAlerts, dashboards: mixin.grafanaDashboards }")
    result = subprocess.run([jsonnet(), "-J", str(MIXIN), "-e", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rendered: dict[str, Any] = json.loads(result.stdout)
    return rendered


@pytest.fixture(scope="module")
def default() -> dict[str, Any]:
    return render()


def test_the_generated_mixin_files_are_current() -> None:
    for command in ([sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--check"], [sys.executable, str(ROOT / "dashboards" / "build.py"), "--check"]):
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
        assert result.returncode == 0, result.stderr


def test_by_default_the_mixin_is_the_shipped_rules_and_dashboards(default: dict[str, Any]) -> None:
    shipped = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    assert default["rules"]["groups"] + default["alerts"]["groups"] == shipped
    assert all("record" in rule for group in default["rules"]["groups"] for rule in group["rules"])
    assert all("alert" in rule for group in default["alerts"]["groups"] for rule in group["rules"])
    assert sorted(default["dashboards"]) == [path.name for path in SHIPPED_DASHBOARDS]
    for path in SHIPPED_DASHBOARDS:
        assert default["dashboards"][path.name] == json.loads(path.read_text(encoding="utf-8")), path.name
    source = yaml.safe_load((PROMETHEUS_DIR / "rules-source.yml").read_text(encoding="utf-8"))
    assert default["config"] == {"gpuEfficiencyExporterSelector": source["job_selector"], "gpuEfficiencyDashboardSelector": "",
                                 "runbookURLBase": source["runbook_base_url"]}


def test_the_exporter_selector_is_the_rule_builders(tmp_path: Path) -> None:
    """The alerts with another job selector are what build_prometheus_rule.py --job-selector writes,
    and pass promtool."""
    selector = 'job="gpu", cluster="prod"'
    rendered = render({"gpuEfficiencyExporterSelector": selector})
    built = tmp_path / "built.yml"
    subprocess.run([sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--job-selector", selector, "--output", str(built)], check=True, timeout=PATIENCE)
    assert rendered["rules"]["groups"] + rendered["alerts"]["groups"] == yaml.safe_load(built.read_text(encoding="utf-8"))["groups"]
    exprs = [rule["expr"] for group in rendered["alerts"]["groups"] for rule in group["rules"]]
    assert any(f"up{{{selector}}}" in expr for expr in exprs)
    assert not any("gpu-efficiency-exporter" in expr or "$job_selector" in expr for expr in exprs)
    (tmp_path / "mixin-rules.yml").write_text(yaml.safe_dump({"groups": rendered["rules"]["groups"] + rendered["alerts"]["groups"]}))
    promtool = shutil.which("promtool")
    assert promtool, "tests/run.sh installs the Debian package prometheus"
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "mixin-rules.yml")], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_runbook_base_is_applied() -> None:
    rendered = render({"runbookURLBase": "https://wiki.example.com/gpu"})
    for group in rendered["alerts"]["groups"]:
        for rule in group["rules"]:
            assert rule["annotations"]["runbook_url"] == f"https://wiki.example.com/gpu#{rule['alert'].lower()}"


def selectors(expr: str) -> list[str]:
    """The label matchers of each selector of the exporter's series (gpueff_*, their recorded
    job:* series and up) in a query."""
    return re.findall(r"(?:\bgpueff_\w+|\bjob:\w+:\w+|\bup|\bALERTS)\{([^}]*)\}", expr)


def test_the_dashboard_selector_reaches_every_query_of_the_exporters_series() -> None:
    selector = 'job="gpu"'
    rendered = render({"gpuEfficiencyDashboardSelector": selector})
    checked = 0
    for name, dashboard in rendered["dashboards"].items():
        for panel in grafana_queries.panels(dashboard):
            for target in panel["targets"]:
                for matchers in selectors(target["expr"]):
                    assert selector in matchers, (name, panel["title"], target["expr"])
                    checked += 1
        for variable in dashboard["templating"]["list"]:
            if variable["name"] in GPU_VARIABLES:
                assert selector in variable["query"] and selector in variable["definition"], (name, variable["name"])
        for annotation in dashboard["annotations"]["list"]:
            if "expr" in annotation:
                assert selector in annotation["expr"], name
    assert checked > 150
    # The panels that read other jobs' series (the app servers' own counters) are left alone.
    app = rendered["dashboards"]["gpu-efficiency-app-throughput.json"]
    throughput = next(v for v in app["templating"]["list"] if v["name"] == "throughput")
    assert selector not in throughput["query"]
