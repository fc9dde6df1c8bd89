"""The Prometheus rules, checked and unit-tested by the real promtool; the example configurations
checked by promtool and amtool; the PrometheusRule manifest kept equal to the rules file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "gpu-efficiency-rules.yml"
RULE_TESTS = PROMETHEUS_DIR / "gpu-efficiency-rules.test.yml"
MANIFEST = ROOT / "deploy" / "kubernetes" / "prometheus-rule.yaml"
MISMATCH_DESCRIPTION = "Your GPU shows high utilization but low compute activity. This often indicates a communication or memory bottleneck."
EXPECTED_ALERTS = {
    "GpuHighUtilizationLowSmActivity", "GpuLowEfficiency", "GpuLatencyBound", "GpuAllocatedButIdle",
    "AppThroughputFlatUnderRisingLoad", "GpuEfficiencyExporterDown", "GpuEfficiencyExporterStale", "GpuLost",
    "GpuXidError", "GpuCriticalXidError", "GpuThermalThrottling", "GpuHardwareSlowdown", "GpuPowerCapped",
}


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: tests/run.sh installs the Debian packages prometheus and prometheus-alertmanager"
    return path


def run(*command: str, cwd: Path = PROMETHEUS_DIR) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def alerts() -> dict[str, dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def test_promtool_check_rules():
    out = run(tool("promtool"), "check", "rules", str(RULES))
    assert "SUCCESS" in out


def test_promtool_unit_tests_pass():
    out = run(tool("promtool"), "test", "rules", RULE_TESTS.name)
    assert "SUCCESS" in out


def test_promtool_unit_tests_fail_when_a_rule_is_wrong(tmp_path):
    """The unit tests bite: with the mismatch alert's 10m shortened to 1m, they fail."""
    broken = RULES.read_text().replace("for: 10m", "for: 1m", 1)
    (tmp_path / RULES.name).write_text(broken)
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    result = subprocess.run([tool("promtool"), "test", "rules", RULE_TESTS.name], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "GpuHighUtilizationLowSmActivity" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_silent_case():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fires, silent = set(), set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (fires if check["exp_alerts"] else silent).add(check["alertname"])
    assert set(alerts()) == EXPECTED_ALERTS
    assert fires == EXPECTED_ALERTS, f"no firing case for {EXPECTED_ALERTS - fires}"
    assert silent == EXPECTED_ALERTS, f"no must-not-fire case for {EXPECTED_ALERTS - silent}"


def test_every_alert_says_what_it_means_and_what_to_try():
    for name, rule in alerts().items():
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook"} <= set(annotations), name
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name


def test_mismatch_alert_text_and_duration():
    rule = alerts()["GpuHighUtilizationLowSmActivity"]
    assert rule["for"] == "10m"
    assert rule["annotations"]["description"] == MISMATCH_DESCRIPTION


def test_prometheus_rule_manifest_matches_the_rules_file():
    manifest = yaml.safe_load(MANIFEST.read_text())
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1" and manifest["kind"] == "PrometheusRule"
    assert manifest["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    run(sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--check", cwd=ROOT)


def test_prometheus_rule_manifest_groups_pass_promtool(tmp_path):
    groups = {"groups": yaml.safe_load(MANIFEST.read_text())["spec"]["groups"]}
    (tmp_path / "from-manifest.yml").write_text(yaml.safe_dump(groups))
    run(tool("promtool"), "check", "rules", str(tmp_path / "from-manifest.yml"))


def test_example_prometheus_config_is_valid():
    out = run(tool("promtool"), "check", "config", "prometheus.yml")
    assert "1 rule files found" in out


def test_example_alertmanager_config_is_valid():
    run(tool("amtool"), "check-config", "alertmanager.yml")
    config = yaml.safe_load((PROMETHEUS_DIR / "alertmanager.yml").read_text())
    named = {name for rule in config["inhibit_rules"] for matcher in rule["source_matchers"] + rule["target_matchers"] for name in EXPECTED_ALERTS if name in matcher}
    assert named <= EXPECTED_ALERTS and "GpuLowEfficiency" in named


@pytest.mark.parametrize("path", sorted((ROOT / "deploy" / "grafana" / "provisioning").rglob("*.yaml")), ids=lambda p: p.name)
def test_grafana_provisioning_files(path):
    config = yaml.safe_load(path.read_text())
    assert config["apiVersion"] == 1
    if "providers" in config:
        (provider,) = config["providers"]
        assert provider["type"] == "file" and provider["options"]["path"]
    else:
        (source,) = config["datasources"]
        assert source["type"] == "prometheus" and source["jsonData"]["timeInterval"]
