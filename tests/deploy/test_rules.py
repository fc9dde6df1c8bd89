"""The Prometheus rules, checked and unit-tested by the real promtool; the example configurations
checked by promtool and amtool; the generated rules file, PrometheusRule manifest and Helm values
kept equal to their one source (deploy/prometheus/rules-source.yml)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from waiting import PATIENCE

pytestmark = pytest.mark.e2e  # promtool's rule unit tests

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "gpu-efficiency-rules.yml"
SOURCE = PROMETHEUS_DIR / "rules-source.yml"
DOCS = ROOT / "docs" / "dashboards-and-alerts.md"
RULE_TESTS = PROMETHEUS_DIR / "gpu-efficiency-rules.test.yml"
ROLLUP_TESTS = PROMETHEUS_DIR / "gpu-efficiency-rollup.test.yml"
MANIFEST = ROOT / "deploy" / "kubernetes" / "prometheus-rule.yaml"
JOB_SELECTOR_TESTS = PROMETHEUS_DIR / "job-selector.test.yml"
EXPECTED_ALERTS = {
    "GpuHighUtilizationLowSmActivity", "GpuHighUtilizationLowWork", "GpuLowEfficiency", "GpuLatencyBound", "GpuJobStraggler", "GpuAllocatedButIdle",
    "GpuHeldIdle", "GpuHostStarved", "AppThroughputFlatUnderRisingLoad", "GpuEfficiencyExporterDown", "GpuEfficiencyExporterStale", "GpuLost",
    "GpuXidError", "GpuCriticalXidError", "GpuThermalThrottling", "GpuHardwareSlowdown", "GpuPowerCapped",
    "GpuProfilingUnavailable", "GpuEfficiencyExporterVanished", "GpuEfficiencyExporterCollectErrors", "GpuAppScrapeDown",
    "GpuEccUncorrectableErrors", "GpuEccCorrectableErrorsHigh", "GpuRowRemapPending", "GpuRowRemapFailure",
    "GpuTemperatureHigh", "GpuMemoryTemperatureHigh", "GpuReadingsImplausible", "GpuKubernetesAttributionDown",
    "GpuThermalViolationShareHigh", "GpuPowerViolationShareHigh", "GpuPcieReplays", "GpuPcieLinkDegraded", "GpuNvlinkErrors", "GpuNvlinkLinkDown",
}
# The waste alerts: one per owner of the GPU; their what_to_try annotation names the GPU's bottleneck
# class now and its advice, their owner annotation who holds it.
WASTE_ALERTS = {"GpuHighUtilizationLowSmActivity", "GpuHighUtilizationLowWork", "GpuLowEfficiency", "GpuAllocatedButIdle", "GpuHeldIdle", "GpuHostStarved"}
EXEMPTION_TESTS = PROMETHEUS_DIR / "waste-exemptions.test.yml"


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: tests/run.sh installs the Debian packages prometheus and prometheus-alertmanager"
    return path


def run(*command: str, cwd: Path = PROMETHEUS_DIR) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def alerts() -> dict[str, dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def test_promtool_check_rules():
    out = run(tool("promtool"), "check", "rules", str(RULES))
    assert "SUCCESS" in out


@pytest.mark.parametrize("tests", [RULE_TESTS, ROLLUP_TESTS], ids=lambda p: p.name)
def test_promtool_unit_tests_pass(tests):
    out = run(tool("promtool"), "test", "rules", tests.name)
    assert "SUCCESS" in out


def promtool_tests_with(tmp_path: Path, old: str, new: str) -> subprocess.CompletedProcess[str]:
    """promtool test rules against the rules file with ``old`` replaced by ``new``."""
    text = RULES.read_text()
    assert old in text
    (tmp_path / RULES.name).write_text(text.replace(old, new))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    return subprocess.run([tool("promtool"), "test", "rules", RULE_TESTS.name], cwd=tmp_path, capture_output=True, text=True, timeout=PATIENCE)


def test_promtool_unit_tests_fail_with_the_old_instant_mismatch_alert(tmp_path):
    """The unit tests bite: the instant flag held for 10m (one clean sample resets it) misses the
    GPU in mismatch 89 % of 45 minutes."""
    result = promtool_tests_with(tmp_path, 'avg_over_time(gpueff_mismatch{rule="high_util_low_sm"}[30m]) >= 0.7', 'gpueff_mismatch{rule="high_util_low_sm"} == 1')
    assert result.returncode != 0
    assert "GpuHighUtilizationLowSmActivity, time: 40m" in result.stdout + result.stderr


def test_promtool_unit_tests_fail_when_a_stalled_server_is_missed(tmp_path):
    """0 tokens/s is flat too: with the old `<` the stalled namespace does not alert."""
    result = promtool_tests_with(tmp_path, "namespace:app_generation_tokens:rate5m <= 1.05", "namespace:app_generation_tokens:rate5m < 1.05")
    assert result.returncode != 0
    assert "AppThroughputFlatUnderRisingLoad" in result.stdout + result.stderr


def test_promtool_unit_tests_fail_when_the_mixed_fleet_divides_by_every_gpu(tmp_path):
    result = promtool_tests_with(tmp_path, "gpueff_power_watts and on (job, instance, uuid) gpueff_busy_flops_per_second", "gpueff_power_watts")
    assert result.returncode != 0
    assert "job:gpueff_busy_flop_per_joule:ratio" in result.stdout + result.stderr


def test_promtool_unit_tests_fail_when_implausible_readings_count_as_waste(tmp_path: Path) -> None:
    """A GPU whose SM activity reads 0 under load (sm_zero_while_busy) is not inefficient: without
    the counter-health exclusion GpuLowEfficiency fires on it."""
    old = "1) unless on (job, instance, uuid) (max_over_time(gpueff_readings_implausible[5m]) == 1)\n"
    result = promtool_tests_with(tmp_path, old, "1)\n")
    assert result.returncode != 0
    assert 'uuid="GPU-d"' in result.stdout + result.stderr


def test_waste_alerts_say_what_to_try_for_the_class_now() -> None:
    """The annotation looks the class up when the alert is evaluated (a label would reset `for` at
    each class change); the promtool cases join it with the exporter's own advice."""
    from gpueff.taxonomy import WHAT_TO_TRY

    for name, rule in alerts().items():
        text = rule["annotations"].get("what_to_try", "")
        assert (name in WASTE_ALERTS) == ("gpueff_bottleneck_class_info" in text and "| query" in text), name
        assert "class" not in rule.get("labels", {}), name
    fixture = RULE_TESTS.read_text()
    joined = re.findall(r'gpueff_bottleneck_class_info\{[^}]*class="(\w+)",[^}]*what_to_try="([^"]*)"', fixture)
    assert ("underfilled", WHAT_TO_TRY["underfilled"]) in joined
    assert f"Bottleneck now: underfilled. {WHAT_TO_TRY['underfilled']}" in fixture


def test_every_waste_alert_is_one_per_owner_less_the_exempt() -> None:
    """Each waste alert joins its per-GPU finding with instance_gpu:gpueff_owner:info (the pods, Slurm
    jobs and users of the GPU, or the GPU alone), the exempt owners left out; the promtool cases
    show each kind of owner on its alert."""
    for name in WASTE_ALERTS:
        expr = alerts()[name]["expr"]
        assert expr.startswith("(\n  instance_gpu:gpueff_owner:info\n  unless instance_gpu:gpueff_owner:info{namespace!=\"\", namespace=~\"\"}\n"), name
        assert "* on (cluster, job, instance, uuid) group_left ()\nmax by (cluster, job, instance, uuid) (" in expr, name
    fixture = RULE_TESTS.read_text()
    for owner in ('owner: "pod research/sweep-0 (container trainer)"', 'owner: "Slurm job 48213 of user 2001"', 'owner: "user 1003"', "owner: 'not known: gpueff_gpu_attribution_info{"):
        assert owner in fixture, owner


def test_the_exemptions_leave_out_the_namespaces_and_pods_named(tmp_path: Path) -> None:
    """Rules built with --exempt-namespaces and --exempt-pods raise no waste alert for those pods'
    GPUs, and still do for a pod sharing one and for a Slurm job (waste-exemptions.test.yml); the
    shipped rules, which exempt nothing, fail the same cases."""
    shutil.copy(EXEMPTION_TESTS, tmp_path / EXEMPTION_TESTS.name)
    rules = tmp_path / "gpu-efficiency-rules.exempt.yml"
    run(sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--exempt-namespaces", "serving|inference", "--exempt-pods", "vllm-.*", "--output", str(rules))
    assert "SUCCESS" in run(tool("promtool"), "test", "rules", EXEMPTION_TESTS.name, cwd=tmp_path)
    shutil.copy(RULES, rules)
    result = subprocess.run([tool("promtool"), "test", "rules", EXEMPTION_TESTS.name], cwd=tmp_path, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode != 0 and 'pod="llama-0"' in result.stdout + result.stderr


def test_an_exemption_is_only_ever_a_regular_expression(tmp_path: Path) -> None:
    """Quotes and backslashes are escaped into the PromQL string (promtool takes the rules, the
    expression still a regex); a pattern that does not compile, or spans lines, is refused."""
    rules = tmp_path / "rules.yml"
    run(sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--exempt-namespaces", 'x"} or vector(1) or up{a="\\d', "--output", str(rules))
    assert 'namespace=~"x\\"} or vector(1) or up{a=\\"\\\\d"}' in rules.read_text()
    run(tool("promtool"), "check", "rules", str(rules))
    for pattern, message in (("serving(", "not a regular expression"), ("a\nb", "a regular expression on one line")):
        result = subprocess.run([sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--exempt-pods", pattern, "--output", str(tmp_path / "x.yml")], capture_output=True, text=True, timeout=PATIENCE)
        assert result.returncode == 2 and message in result.stderr and not (tmp_path / "x.yml").exists(), result.stderr


def test_every_alert_has_a_firing_and_a_silent_case():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fires, silent = set(), set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (fires if check["exp_alerts"] else silent).add(check["alertname"])
    assert set(alerts()) == EXPECTED_ALERTS
    assert fires == EXPECTED_ALERTS, f"no firing case for {EXPECTED_ALERTS - fires}"
    assert silent == EXPECTED_ALERTS, f"no must-not-fire case for {EXPECTED_ALERTS - silent}"


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in re.findall(r"^#+ (.+)$", markdown, flags=re.M)}


def test_every_alert_says_what_it_means_and_links_what_to_try():
    anchors = github_anchors(DOCS.read_text())
    base = yaml.safe_load(SOURCE.read_text())["runbook_base_url"]
    for name, rule in alerts().items():
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"} | ({"owner", "what_to_try"} if name in WASTE_ALERTS else set()), name
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        url, anchor = annotations["runbook_url"].split("#")
        assert url == base and anchor == name.lower(), name
        assert anchor in anchors, f"{name}: docs/dashboards-and-alerts.md has no heading #{anchor}"
        assert "$threshold" not in rule["expr"] + annotations["description"] and "$for" not in annotations["description"], name


def test_mismatch_alert_fires_on_its_share_of_time_and_names_the_classes_it_comes_from():
    rule = alerts()["GpuHighUtilizationLowSmActivity"]
    assert 'avg_over_time(gpueff_mismatch{rule="high_util_low_sm"}[30m]) >= 0.7' in rule["expr"]
    # Busy with few SMs active is the underfilled (or host, latency) class, not "a communication
    # or memory bottleneck": those classes need the SMs busy or the links/DRAM near their roof.
    description = rule["annotations"]["description"]
    assert "underfilled" in description and "communication" not in description and "memory bottleneck" not in description
    # Wasted GPU time is not a page at 3 am by default; the shipped Alertmanager pages on critical only.
    assert rule["labels"]["severity"] == "warning"
    config = yaml.safe_load((PROMETHEUS_DIR / "alertmanager.yml").read_text())
    (page,) = [route for route in config["route"]["routes"] if route.get("receiver") == "gpu-oncall"]
    assert page["matchers"] == ['severity="critical"']


def test_every_summary_is_a_static_line_and_the_description_carries_the_labels():
    """kubernetes-mixin's convention: the summary groups well in a notification list, the
    description names the instance and the values."""
    for name, rule in alerts().items():
        annotations = rule["annotations"]
        assert "{{" not in annotations["summary"] and "\n" not in annotations["summary"], name
        assert "$labels.instance" in annotations["description"] or "$labels.namespace" in annotations["description"], name


def test_exporter_health_alerts_follow_another_job_name(tmp_path: Path) -> None:
    """Scraped as job "gpu": rules built with --job-selector raise nothing for a healthy exporter
    and still see a down one (job-selector.test.yml); the default rules page falsely on it."""
    shutil.copy(JOB_SELECTOR_TESTS, tmp_path / JOB_SELECTOR_TESTS.name)
    rules = tmp_path / "gpu-efficiency-rules.job-gpu.yml"
    run(sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--job-selector", 'job="gpu"', "--output", str(rules))
    assert "SUCCESS" in run(tool("promtool"), "test", "rules", JOB_SELECTOR_TESTS.name, cwd=tmp_path)
    shutil.copy(RULES, rules)
    result = subprocess.run([tool("promtool"), "test", "rules", JOB_SELECTOR_TESTS.name], cwd=tmp_path, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode != 0 and "GpuEfficiencyExporterDown, time: 20m" in result.stdout + result.stderr


@pytest.mark.parametrize("selector", ["job=gpu", 'job="gpu"} or vector(1', ""])
def test_a_bad_job_selector_is_refused(selector: str, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--job-selector", selector, "--output", str(tmp_path / "x.yml")], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 2 and "expected PromQL label matchers" in result.stderr and not (tmp_path / "x.yml").exists()


def test_every_aggregating_recording_rule_keeps_cluster():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for rule in (rule for group in groups for rule in group["rules"] if "record" in rule):
        for grouping in re.findall(r"\b(?:by|on) \(([^)]*)\)", rule["expr"]):
            labels = {label.strip() for label in grouping.split(",")}
            assert "cluster" in labels or "uuid" in labels, f"{rule['record']}: {grouping}"


def test_generated_files_equal_the_source():
    run(sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--check", cwd=ROOT)


def test_source_rejects_a_threshold_without_its_placeholder(tmp_path, monkeypatch):
    sys.path.insert(0, str(PROMETHEUS_DIR))
    try:
        import build_prometheus_rule as build
    finally:
        sys.path.remove(str(PROMETHEUS_DIR))
    source = yaml.safe_load(SOURCE.read_text())
    source["alert_groups"][0]["rules"][0]["expr"] = "gpueff_mismatch == 1"
    (tmp_path / "rules-source.yml").write_text(yaml.safe_dump(source))
    monkeypatch.setattr(build, "SOURCE", tmp_path / "rules-source.yml")
    with pytest.raises(ValueError, match="GpuHighUtilizationLowSmActivity: expr uses \\$threshold but has no threshold"):
        build.load_source()


def test_prometheus_rule_manifest_matches_the_rules_file():
    manifest = yaml.safe_load(MANIFEST.read_text())
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1" and manifest["kind"] == "PrometheusRule"
    assert manifest["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


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
    named = {name for rule in config["inhibit_rules"] for matcher in rule["source_matchers"] + rule["target_matchers"] for name in re.findall(r"\w+", matcher.split("=", 1)[1])}
    assert named <= EXPECTED_ALERTS and "GpuLowEfficiency" in named
    # Per device: MIG devices of one GPU share `gpu` and must not inhibit each other.
    assert all("uuid" in rule["equal"] and "gpu" not in rule["equal"] for rule in config["inhibit_rules"] if "GpuLowEfficiency" in str(rule))


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


def test_remote_write_allow_list_is_valid_and_names_real_series(tmp_path):
    remote = yaml.safe_load((PROMETHEUS_DIR / "remote-write.yml").read_text())
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({**config, **remote, "rule_files": [str(RULES)]}))
    run(tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml"))
    (write,) = remote["remote_write"]
    (keep,) = write["write_relabel_configs"]
    allow = re.compile(f"^(?:{keep['regex']})$")
    exporter = "\n".join(path.read_text() for path in (ROOT / "gpueff").rglob("*.py"))
    # Every counter and info series it names is one the exporter writes.
    counters = re.search(r"gpueff_\(([^)]*)\)_total", keep["regex"]).group(1).split("|")
    infos = re.search(r"gpueff_\(([^)]*)\)_info", keep["regex"]).group(1).split("|")
    for name in [f"gpueff_{c}_total" for c in counters] + [f"gpueff_{i}_info" for i in infos]:
        assert f'"{name}"' in exporter, name
    groups = yaml.safe_load(RULES.read_text())["groups"]
    records = {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}
    kept = {name for name in records if allow.match(name)}
    assert {name for name in records if name.startswith(("job:", "namespace:", "holder:"))} == kept
    assert all(allow.match(name) for name in ("gpueff_energy_joules_total", "gpueff_gpu_pod_info", "up"))
    assert not any(allow.match(name) for name in ("gpueff_gpu_utilization_ratio", "gpueff_power_watts", "instance_gpu:gpueff_efficiency:ratio_rate5m"))


@pytest.mark.parametrize(("labels", "receiver"), [
    ({"alertname": "GpuHeldIdle", "namespace": "ml", "pod": "notebook-0"}, "team-ml"),
    ({"alertname": "GpuHighUtilizationLowSmActivity", "namespace": "research", "pod": "sweep-0"}, "team-ml"),
    ({"alertname": "GpuLowEfficiency", "namespace": "serving", "pod": "llama-b1"}, "team-serving"),
    ({"alertname": "GpuHostStarved", "job_id": "48377", "user_id": "2002"}, "hpc-users"),
    ({"alertname": "GpuAllocatedButIdle", "user_id": "1003"}, "gpu-team"),
    ({"alertname": "GpuHighUtilizationLowWork"}, "gpu-team"),
    # Not waste: a hot GPU of a team's pod is the platform's; a lost one pages.
    ({"alertname": "GpuTemperatureHigh", "namespace": "ml"}, "gpu-team"),
    ({"alertname": "GpuLost", "namespace": "ml", "severity": "critical"}, "gpu-oncall"),
])
def test_each_team_gets_its_own_waste(labels: dict[str, str], receiver: str) -> None:
    """amtool's routing test of the shipped alertmanager.yml: a waste alert goes to the team of its
    namespace (a Slurm job's to the users' list), one without a known owner to gpu-team."""
    given = {"severity": "warning", **labels}
    routed = run(tool("amtool"), "config", "routes", "test", "--config.file=alertmanager.yml", *(f"{key}={value}" for key, value in given.items())).strip()
    assert routed == receiver, f"{given} goes to {routed}"
    config = yaml.safe_load((PROMETHEUS_DIR / "alertmanager.yml").read_text())
    (waste,) = [route for route in config["route"]["routes"] if "routes" in route]
    assert set(re.search(r'alertname=~"([^"]+)"', waste["matchers"][0]).group(1).split("|")) == WASTE_ALERTS


def test_every_alert_routes_by_its_severity():
    """amtool's routing test: every critical alert reaches on-call, the others the team."""
    for name, rule in alerts().items():
        severity = rule["labels"]["severity"]
        receiver = run(tool("amtool"), "config", "routes", "test", "--config.file=alertmanager.yml", f"alertname={name}", f"severity={severity}").strip()
        assert receiver == ("gpu-oncall" if severity == "critical" else "gpu-team"), f"{name} ({severity}) goes to {receiver}"
    assert alerts()["GpuHighUtilizationLowSmActivity"]["labels"]["severity"] == "warning"
    assert alerts()["GpuEfficiencyExporterDown"]["labels"]["severity"] == "warning"
