"""The monitoring mixin (deploy/mixin/), rendered by the real jsonnet: with its default _config it is
exactly the shipped rules file and dashboards, each _config setting reaches what it renders (the
alert settings as the Helm chart's values do), every jsonnet file is as jsonnetfmt writes it, and
its README's commands work as written."""

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
from helm_render import render as render_chart
from repo import DASHBOARDS
from waiting import PATIENCE

MIXIN = ROOT / "deploy" / "mixin"
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "gpu-efficiency-rules.yml"
RULE_TESTS = PROMETHEUS_DIR / "gpu-efficiency-rules.test.yml"
SOURCE = yaml.safe_load((PROMETHEUS_DIR / "rules-source.yml").read_text(encoding="utf-8"))
SHIPPED_DASHBOARDS = sorted(DASHBOARDS.glob("*.json"))
JSONNET_FILES = sorted([*MIXIN.glob("*.jsonnet"), *MIXIN.glob("*.libsonnet"), *MIXIN.glob("lib/*.libsonnet")])
README = (MIXIN / "README.md").read_text(encoding="utf-8")
# The variables whose queries select the exporter's series (the app dashboard's server counters are other jobs').
GPU_VARIABLES = {"cluster", "job", "instance", "gpu", "namespace", "pod", "app"}
# The dashboards' fields that hold PromQL, legends and data links.
QUERY_FIELDS = {"expr", "query", "definition", "legendFormat", "url"}


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: tests/run.sh installs the Debian packages jsonnet (jsonnet, jsonnetfmt) and prometheus (promtool)"
    return path


def render(config: dict[str, Any] | str | None = None) -> dict[str, Any]:
    """The mixin's four parts, with ``config`` (a dict, or jsonnet text) merged into its _config as
    a kube-prometheus user does."""
    override = config if isinstance(config, str) else json.dumps(config or {})
    code = (f"local mixin = (import 'mixin.libsonnet') + {{ _config+:: {override} }};\n"
            "{ config: mixin._config, rules: mixin.prometheusRules, alerts: mixin.prometheusAlerts, dashboards: mixin.grafanaDashboards }")
    result = subprocess.run([tool("jsonnet"), "-J", str(MIXIN), "-e", code], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stderr
    rendered: dict[str, Any] = json.loads(result.stdout)
    return rendered


def refused(config: str) -> str:
    """jsonnet's error for a mixin with ``config`` merged into its _config (its alerts rendered)."""
    code = f"((import 'mixin.libsonnet') + {{ _config+:: {config} }}).prometheusAlerts"
    result = subprocess.run([tool("jsonnet"), "-J", str(MIXIN), "-e", code], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode != 0, f"{config} was taken"
    return result.stderr


def groups(rendered: dict[str, Any]) -> list[dict[str, Any]]:
    return [*rendered["rules"]["groups"], *rendered["alerts"]["groups"]]


def promtool_check(tmp_path: Path, rule_groups: list[dict[str, Any]], name: str = "mixin-rules.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"groups": rule_groups}), encoding="utf-8")
    result = subprocess.run([tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stdout + result.stderr
    return path


@pytest.fixture(scope="module")
def default() -> dict[str, Any]:
    return render()


def test_the_generated_mixin_files_are_current() -> None:
    for command in ([sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--check"], [sys.executable, str(ROOT / "dashboards" / "build.py"), "--check"]):
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
        assert result.returncode == 0, result.stderr


def test_every_jsonnet_file_is_as_jsonnetfmt_writes_it(tmp_path: Path) -> None:
    """The lint step node-mixin's `make lint` runs; the generated source is written in jsonnetfmt's
    layout (the JSON it was written as before was 1,040 lines of jsonnetfmt's diff)."""
    assert {path.name for path in JSONNET_FILES} >= {"mixin.libsonnet", "rules-source.libsonnet", "alerts.jsonnet", "rules.jsonnet", "dashboards.jsonnet"}
    result = subprocess.run([tool("jsonnetfmt"), "--test", *map(str, JSONNET_FILES)], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stderr
    as_json = tmp_path / "as-json.libsonnet"
    as_json.write_text(json.dumps(SOURCE, indent=2), encoding="utf-8")
    assert subprocess.run([tool("jsonnetfmt"), "--test", str(as_json)], capture_output=True, timeout=PATIENCE).returncode != 0


def test_the_generated_source_reads_as_the_source(default: dict[str, Any]) -> None:
    code = "import 'rules-source.libsonnet'"
    mirrored = json.loads(subprocess.run([tool("jsonnet"), "-J", str(MIXIN), "-e", code], capture_output=True, text=True, check=True, timeout=PATIENCE).stdout)
    assert mirrored["job_selector"] == SOURCE["job_selector"] and mirrored["runbook_base_url"] == SOURCE["runbook_base_url"]
    # Every gpueff_ selector carries the placeholder; without it, the source's own expressions.
    unplaced = lambda text: text.replace("{$gpu_selector}", "").replace("{$gpu_selector, ", "{")  # noqa: E731
    for kind in ("recording_groups", "alert_groups"):
        for theirs, ours in zip(mirrored[kind], SOURCE[kind], strict=True):
            assert [{**rule, "expr": unplaced(rule["expr"])} for rule in theirs["rules"]] == ours["rules"]


def test_by_default_the_mixin_is_the_shipped_rules_and_dashboards(default: dict[str, Any]) -> None:
    assert groups(default) == yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    assert all("record" in rule for group in default["rules"]["groups"] for rule in group["rules"])
    assert all("alert" in rule for group in default["alerts"]["groups"] for rule in group["rules"])
    assert sorted(default["dashboards"]) == [path.name for path in SHIPPED_DASHBOARDS]
    for path in SHIPPED_DASHBOARDS:
        assert default["dashboards"][path.name] == json.loads(path.read_text(encoding="utf-8")), path.name
    config = default["config"]
    assert config["gpuEfficiencyExporterSelector"] == SOURCE["job_selector"] and config["runbookURLBase"] == SOURCE["runbook_base_url"]
    assert list(config["alerts"]) == sorted(rule["alert"] for group in SOURCE["alert_groups"] for rule in group["rules"])
    assert config["alerts"]["GpuTemperatureHigh"] == {"enabled": True, "threshold": 85, "for": "5m", "severity": "warning"}


def test_the_readme_lists_every_setting(default: dict[str, Any]) -> None:
    table = [key for keys in re.findall(r"^\| ((?:`\w+`(?:, )?)+) \|", README, flags=re.M) for key in re.findall(r"`(\w+)`", keys)]
    assert sorted(table) == sorted(default["config"])


def readme_commands() -> list[str]:
    """Every command of the README's sh blocks."""
    blocks = re.findall(r"^```sh\n(.*?)^```", README, flags=re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_readme_commands_work_as_written(tmp_path: Path, default: dict[str, Any]) -> None:
    """Each command, run as written in a copy of the mixin's folder (where jsonnet-bundler puts it),
    writes what the mixin renders; jb install needs the network and is the one not run."""
    copy = tmp_path / "mixin"
    shutil.copytree(MIXIN, copy)
    ran = []
    for command in readme_commands():
        if command.startswith("jb install "):
            continue
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=copy, capture_output=True, text=True, timeout=PATIENCE)
        assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
        ran.append(command)
    assert len(ran) == len(readme_commands()) - 1 and "make lint" in ran
    assert yaml.safe_load((copy / "alerts.yaml").read_text(encoding="utf-8")) == default["alerts"]
    assert yaml.safe_load((copy / "rules.yaml").read_text(encoding="utf-8")) == default["rules"]
    written = {path.name: json.loads(path.read_text(encoding="utf-8")) for path in (copy / "dashboards_out").iterdir()}
    assert written == default["dashboards"]


def test_the_readme_kube_prometheus_snippet_gives_a_prometheus_rule_and_dashboards(tmp_path: Path, default: dict[str, Any]) -> None:
    """Evaluated as written, with the mixin vendored where jb puts it and kube-prometheus's
    lib/mixin.libsonnet stood in for by what it does (a PrometheusRule of the mixin's alert and rule
    groups, and its dashboards)."""
    (snippet,) = [block for block in re.findall(r"^```jsonnet\n(.*?)^```", README, flags=re.S | re.M) if "addMixin" in block]
    vendor = tmp_path / "vendor"
    (vendor / "github.com" / "gpu-efficiency-exporter" / "gpu-efficiency-exporter" / "deploy").mkdir(parents=True)
    (vendor / "github.com" / "gpu-efficiency-exporter" / "gpu-efficiency-exporter" / "deploy" / "mixin").symlink_to(MIXIN)
    (vendor / "kube-prometheus" / "lib").mkdir(parents=True)
    (vendor / "kube-prometheus" / "lib" / "mixin.libsonnet").write_text(
        "function(params) {\n"
        "  prometheusRules: { apiVersion: 'monitoring.coreos.com/v1', kind: 'PrometheusRule', metadata: { name: params.name },\n"
        "    spec: { groups: params.mixin.prometheusAlerts.groups + params.mixin.prometheusRules.groups } },\n"
        "  grafanaDashboards: params.mixin.grafanaDashboards,\n"
        "}\n", encoding="utf-8")
    (tmp_path / "example.jsonnet").write_text(snippet, encoding="utf-8")
    result = subprocess.run([tool("jsonnet"), "-J", str(vendor), str(tmp_path / "example.jsonnet")], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stderr
    rule = json.loads(result.stdout)["gpu-efficiency-exporter-prometheus-rules"]
    assert rule["spec"]["groups"] == default["alerts"]["groups"] + default["rules"]["groups"]


def test_the_exporter_selector_is_the_rule_builders(tmp_path: Path) -> None:
    """The alerts with another job selector are what build_prometheus_rule.py --job-selector writes,
    and pass promtool."""
    selector = 'job="gpu", cluster="prod"'
    rendered = render({"gpuEfficiencyExporterSelector": selector})
    built = tmp_path / "built.yml"
    subprocess.run([sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--job-selector", selector, "--output", str(built)], check=True, timeout=PATIENCE)
    assert groups(rendered) == yaml.safe_load(built.read_text(encoding="utf-8"))["groups"]
    exprs = [rule["expr"] for group in rendered["alerts"]["groups"] for rule in group["rules"]]
    assert any(f"up{{{selector}}}" in expr for expr in exprs)
    assert not any("gpu-efficiency-exporter" in expr or "$job_selector" in expr for expr in exprs)
    promtool_check(tmp_path, groups(rendered))


def test_the_series_selector_reaches_every_gpueff_series_of_the_rules_and_the_dashboards(tmp_path: Path) -> None:
    """The rules with a series selector are what build_prometheus_rule.py --gpu-selector writes;
    the dashboards take it too unless their own selector is set."""
    selector = 'cluster="prod"'
    rendered = render({"gpuEfficiencySeriesSelector": selector})
    built = tmp_path / "built.yml"
    subprocess.run([sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--gpu-selector", selector, "--output", str(built)], check=True, timeout=PATIENCE)
    assert groups(rendered) == yaml.safe_load(built.read_text(encoding="utf-8"))["groups"]
    names = 0
    for group in groups(rendered):
        for rule in group["rules"]:
            for match in re.finditer(r"(?<![\w:])gpueff_\w+(?![\w:])(\{[^}]*\})?", rule["expr"]):
                assert match[1] and match[1].startswith("{" + selector), (rule.get("record") or rule["alert"], match[0])
                names += 1
    assert names > 80 and "$gpu_selector" not in json.dumps(rendered)
    promtool_check(tmp_path, groups(rendered))
    assert rendered["config"]["gpuEfficiencyDashboardSelector"] == selector
    assert all(selector in variable["query"] for variable in rendered["dashboards"]["gpu-efficiency-fleet.json"]["templating"]["list"] if variable["name"] in GPU_VARIABLES)


def test_the_cluster_label_is_renamed_in_every_rule_and_query(tmp_path: Path) -> None:
    """With clusterLabel k8s_cluster, the rules' unit tests pass with their series' cluster label
    renamed the same way (two clusters of one job name stay apart), no query names the label
    cluster any more, and the dashboards' variable keeps its name."""
    rendered = render({"clusterLabel": "k8s_cluster"})
    label = re.compile(r"(?<![\w:$-])cluster(?![\w:])")
    for group in groups(rendered):
        for rule in group["rules"]:
            assert not label.search(rule["expr"]) and not label.search(rule.get("annotations", {}).get("what_to_try", "")), rule.get("record") or rule["alert"]
    assert "k8s_cluster" in json.dumps(groups(rendered))
    promtool_check(tmp_path, groups(rendered), RULES.name)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text(encoding="utf-8").replace("cluster=", "k8s_cluster="), encoding="utf-8")
    result = subprocess.run([tool("promtool"), "test", "rules", RULE_TESTS.name], cwd=tmp_path, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stdout + result.stderr
    for name, dashboard in rendered["dashboards"].items():
        for key, text in query_strings(dashboard):
            assert not label.search(text), (name, key, text)
        variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
        assert variables["cluster"]["query"] == "label_values(gpueff_gpu_up, k8s_cluster)", name
    fleet = json.dumps(rendered["dashboards"]["gpu-efficiency-fleet.json"])
    assert "var-cluster=${__field.labels.k8s_cluster}" in fleet and 'k8s_cluster=~\\"$cluster\\"' in fleet


def query_strings(value: Any, key: str = "") -> list[tuple[str, str]]:
    """(field, text) of every string under a query field of a dashboard."""
    if isinstance(value, dict):
        return [found for name, item in value.items() for found in query_strings(item, name if name in QUERY_FIELDS else key)]
    if isinstance(value, list):
        return [found for item in value for found in query_strings(item, key)]
    return [(key, value)] if isinstance(value, str) and key else []


def test_every_cluster_of_the_shipped_queries_names_the_label_or_the_variable() -> None:
    """What lets the mixin rename the label with a plain replacement (lib/render.libsonnet): in the
    rules' expressions and what_to_try and the dashboards' query fields, "cluster" is always the
    label's whole name, the variable $cluster or the URL parameter var-cluster."""
    texts = [rule[key] for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"] for rule in group["rules"] for key in ("expr",) if key in rule]
    texts += [rule["annotations"]["what_to_try"] for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"] for rule in group["rules"] if "what_to_try" in rule.get("annotations", {})]
    texts += [text for path in SHIPPED_DASHBOARDS for _, text in query_strings(json.loads(path.read_text(encoding="utf-8")))]
    for text in texts:
        for match in re.finditer("cluster", text):
            before, after = text[max(0, match.start() - 4):match.start()], text[match.end():match.end() + 1]
            assert before.endswith(("$", "var-")) or (not re.search(r"[\w:$-]$", before) and not re.match(r"[\w:]", after)), text


def test_the_runbook_base_is_applied() -> None:
    rendered = render({"runbookURLBase": "https://wiki.example.com/gpu"})
    for group in rendered["alerts"]["groups"]:
        for rule in group["rules"]:
            assert rule["annotations"]["runbook_url"] == f"https://wiki.example.com/gpu#{rule['alert'].lower()}"


def test_the_alert_settings_are_the_helm_charts() -> None:
    """The same settings in _config.alerts and in the chart's prometheusRule.alerts render the same
    rules: threshold, for and severity applied to the expression, labels and texts, a disabled alert
    left out."""
    settings = {
        "GpuTemperatureHigh": {"threshold": 80, "for": "1m", "severity": "critical"},
        "GpuHighUtilizationLowSmActivity": {"threshold": 0.9},
        "GpuPowerCapped": {"threshold": 0.75, "for": "1h30m"},
        "GpuLatencyBound": {"enabled": False},
        "GpuXidError": {"for": "2m"},
    }
    override = "{ alerts+: { " + ", ".join(f"{name}+: {json.dumps(value)}" for name, value in settings.items()) + " } }"
    rendered = render(override)
    chart = render_chart({"prometheusRule": {"enabled": True, "jobSelector": SOURCE["job_selector"], "alerts": settings}})
    assert groups(rendered) == chart["PrometheusRule/gpueff-gpu-efficiency-exporter"]["spec"]["groups"]
    alerts = {rule["alert"]: rule for group in rendered["alerts"]["groups"] for rule in group["rules"]}
    assert alerts["GpuTemperatureHigh"]["expr"] == "gpueff_temperature_celsius > 80" and alerts["GpuTemperatureHigh"]["labels"] == {"severity": "critical"}
    assert "For 1m the GPU core ran above 80 °C" in alerts["GpuTemperatureHigh"]["annotations"]["description"]
    assert "< 0.75" in alerts["GpuPowerCapped"]["expr"] and alerts["GpuPowerCapped"]["for"] == "1h30m" and alerts["GpuXidError"]["for"] == "2m"
    assert "GpuLatencyBound" not in alerts


def test_the_waste_exemptions_are_the_rule_builders_and_the_charts(tmp_path: Path) -> None:
    """The same regular expressions in _config, in build_prometheus_rule.py's flags and in the
    chart's values render the same rules, quotes and backslashes escaped into PromQL strings."""
    namespaces, pods = 'serving|infer"ence', "vllm-\\d+"
    rendered = render({"wasteExemptNamespaces": namespaces, "wasteExemptPods": pods})
    built = tmp_path / "built.yml"
    subprocess.run([sys.executable, str(PROMETHEUS_DIR / "build_prometheus_rule.py"), "--exempt-namespaces", namespaces, "--exempt-pods", pods, "--output", str(built)], check=True, timeout=PATIENCE)
    assert groups(rendered) == yaml.safe_load(built.read_text(encoding="utf-8"))["groups"]
    chart = render_chart({"prometheusRule": {"enabled": True, "jobSelector": SOURCE["job_selector"], "wasteExemptNamespaces": namespaces, "wasteExemptPods": pods}})
    assert groups(rendered) == chart["PrometheusRule/gpueff-gpu-efficiency-exporter"]["spec"]["groups"]
    held = next(rule for group in rendered["alerts"]["groups"] for rule in group["rules"] if rule["alert"] == "GpuHeldIdle")
    assert 'namespace=~"serving|infer\\"ence"' in held["expr"] and 'pod=~"vllm-\\\\d+"' in held["expr"]
    promtool_check(tmp_path, groups(rendered))


@pytest.mark.parametrize(("config", "message"), [
    ("{ alerts+: { GpuTemperatureHgh: { threshold: 80 } } }", "_config.alerts.GpuTemperatureHgh: no such alert (the alerts are: AppThroughputFlatUnderRisingLoad, "),
    ("{ alerts+: { GpuTemperatureHigh+: { treshold: 80 } } }", "_config.alerts.GpuTemperatureHigh.treshold: not a setting of this alert (it takes enabled, for, severity, threshold)"),
    ("{ alerts+: { GpuLatencyBound+: { threshold: 1 } } }", "_config.alerts.GpuLatencyBound.threshold: not a setting of this alert (it takes enabled, for, severity)"),
    ("{ alerts+: { GpuTemperatureHigh+: { threshold: '80 or vector(1)' } } }", 'a threshold must be a number, got "80 or vector(1)"'),
    ("{ alerts+: { GpuTemperatureHigh+: { 'for': 'five minutes' } } }", '_config.alerts.GpuTemperatureHigh.for: "five minutes" is not a duration such as 10m'),
    ("{ alerts+: { GpuTemperatureHigh+: { 'for': '5m} or vector(1)' } } }", "is not a duration"),
    ("{ alerts+: { GpuTemperatureHigh+: { enabled: 'no' } } }", "_config.alerts.GpuTemperatureHigh.enabled: true or false"),
    ("{ wasteExemptPods: 'vllm\\n.*' }", '_config.wasteExemptPods: a regular expression on one line, got "vllm\\n.*"'),
])
def test_a_wrong_alert_setting_stops_the_build_saying_what_is_wrong(config: str, message: str) -> None:
    assert message in refused(config)


def test_the_dashboard_settings_reach_every_dashboard() -> None:
    rendered = render({
        "dashboardNamePrefix": "GPUs / ", "dashboardTags": ["team-ml-gpu"], "dashboardRefresh": "1m", "dashboardTimezone": "utc",
        "dashboardUIDs": {"gpu-efficiency-fleet.json": "gpu-fleet", "gpu-efficiency-gpu-detail.json": "gpu-detail", "gpu-efficiency-app-throughput.json": "gpu-apps"},
    })
    dashboards = rendered["dashboards"]
    assert {name: d["title"] for name, d in dashboards.items()} == {
        "gpu-efficiency-fleet.json": "GPUs / Fleet overview", "gpu-efficiency-gpu-detail.json": "GPUs / GPU detail", "gpu-efficiency-app-throughput.json": "GPUs / Application throughput"}
    assert {d["uid"] for d in dashboards.values()} == {"gpu-fleet", "gpu-detail", "gpu-apps"}
    for dashboard in dashboards.values():
        assert dashboard["tags"] == ["team-ml-gpu"] and dashboard["refresh"] == "1m" and dashboard["timezone"] == "utc"
        assert [link["tags"] for link in dashboard["links"]] == [["team-ml-gpu"]]
    urls = [url for _, url in query_strings(dashboards["gpu-efficiency-fleet.json"]) if url.startswith("/d/")]
    assert urls and all(url.startswith("/d/gpu-detail/") for url in urls)
    assert "gpueff-gpu-detail" not in json.dumps(dashboards)
    # The shipped dashboards' own links list the dashboards that carry every one of their tags.
    for path in SHIPPED_DASHBOARDS:
        shipped = json.loads(path.read_text(encoding="utf-8"))
        assert [link["tags"] for link in shipped["links"]] == [shipped["tags"]]


def selectors(expr: str) -> list[str]:
    """The label matchers of each selector of the exporter's series (gpueff_*, their recorded
    job:* series and up) in a query."""
    return re.findall(r"(?:\bgpueff_\w+|\bjob:\w+:\w+|\bup|\bALERTS)\{([^}]*)\}", expr)


def test_the_dashboard_selector_reaches_every_query_of_the_exporters_series() -> None:
    selector = 'job="gpu"'
    rendered = render({"gpuEfficiencyDashboardSelector": selector})
    assert rendered["config"]["gpuEfficiencySeriesSelector"] == "" and groups(rendered) == groups(render())
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
