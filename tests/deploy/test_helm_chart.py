"""The Helm chart, linted and rendered by real Helm (Helm v4's Go library through helm-python-sdk),
rendered objects validated against the Kubernetes schemas, every switch in values exercised."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import helm_python as helm
import pytest
import yaml
from conftest import ROOT, running_daemon
from helm_render import CHART, exporter_config, pod_spec, render
from kube_schemas import validate_all
from repo import DASHBOARDS
from waiting import PATIENCE

from gpueff.commands.cli import daemon_parser

pytestmark = pytest.mark.e2e  # real Helm

ALL_ON = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}, "dashboards": {"enabled": True}}


@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "everything-on"])
def test_helm_lint_strict_is_clean(values: dict[str, Any]) -> None:
    report = helm.lint(str(CHART), values, strict=True, kube_version="v1.30.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("values", [{}, ALL_ON, {"podResources": {"enabled": False}, "service": {"enabled": False}, "serviceAccount": {"create": False}}, {"hostPID": True, "profilingAdmin": True, "runtimeClassName": "nvidia", "priorityClassName": "system-node-critical"}], ids=["defaults", "everything-on", "minimal", "privileged-options"])
def test_rendered_objects_validate_against_kubernetes_schemas(values: dict[str, Any]) -> None:
    objects = render(values)
    checked = validate_all(obj for key, obj in objects.items() if key != "NOTES")
    assert "DaemonSet/gpueff-gpu-efficiency-exporter" in checked and "ConfigMap/gpueff-gpu-efficiency-exporter" in checked


def test_defaults_conventional_labels_security_and_attribution() -> None:
    objects = render()
    assert set(objects) == {"NOTES", "ConfigMap/gpueff-gpu-efficiency-exporter", "DaemonSet/gpueff-gpu-efficiency-exporter", "Service/gpueff-gpu-efficiency-exporter", "ServiceAccount/gpueff-gpu-efficiency-exporter", "Pod/gpueff-gpu-efficiency-exporter-test"}
    for key, obj in objects.items():
        if key != "NOTES":
            labels = obj["metadata"]["labels"]
            assert labels["helm.sh/chart"] == "gpu-efficiency-exporter-0.1.0" and labels["app.kubernetes.io/managed-by"] == "Helm"
            assert labels["app.kubernetes.io/name"] == "gpu-efficiency-exporter" and labels["app.kubernetes.io/instance"] == "gpueff"
    pod = pod_spec(objects)
    (container,) = pod["containers"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsUser"] == 0  # root-only socket; no capabilities
    assert "nodeSelector" not in pod and pod["affinity"]["nodeAffinity"] and pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert pod["priorityClassName"] == "system-node-critical"
    assert "runtimeClassName" not in pod and pod["hostPID"] is False
    assert container["image"] == "ghcr.io/gpu-efficiency-exporter/gpu-efficiency-exporter:0.1.0"
    assert {v["name"] for v in pod["volumes"]} == {"config", "tmp", "pod-resources"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/-/healthy" and container["readinessProbe"]["httpGet"]["path"] == "/-/ready"
    args = daemon_parser().parse_args(container["args"])
    assert args.config == "/etc/gpu-efficiency-exporter/config.yml" and args.wait_for_driver and args.web_config_file is None
    config = exporter_config(objects)
    assert config.kubernetes.enabled and not config.kubernetes.process_attribution and config.kubernetes.refresh_interval == 10.0
    assert "Pod attribution is on" in objects["NOTES"]


def test_switches() -> None:
    objects = render({"hostPID": True, "profilingAdmin": True, "runtimeClassName": "nvidia", "image": {"registry": "", "repository": "registry.example/gpueff", "tag": "1.2.3", "pullPolicy": "Always"}, "config": {"collect_interval": "500ms", "kubernetes": {"refresh_interval": "30s"}}})
    pod = pod_spec(objects)
    (container,) = pod["containers"]
    assert pod["hostPID"] is True and pod["runtimeClassName"] == "nvidia"
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert container["image"] == "registry.example/gpueff:1.2.3"
    config = exporter_config(objects)
    assert config.collect_interval == 0.5 and config.kubernetes.process_attribution and config.kubernetes.refresh_interval == 30.0

    off = render({"podResources": {"enabled": False}, "service": {"enabled": False}, "serviceAccount": {"create": False}})
    pod = pod_spec(off)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    assert "pod-resources" not in {v["name"] for v in pod["volumes"]}
    assert pod["serviceAccountName"] == "default"
    assert not any(key.startswith(("Service/", "ServiceAccount/")) for key in off)
    assert not exporter_config(off).kubernetes.enabled


def test_sharing_and_pod_label_mode() -> None:
    config = exporter_config(render({"hostPID": True, "sharing": {"enabled": True}, "podResources": {"podLabels": "info_only"}}))
    assert config.sharing.enabled and config.kubernetes.pod_labels == "info_only"
    defaults = exporter_config(render())
    assert not defaults.sharing.enabled and defaults.kubernetes.pod_labels == "every_series"
    with pytest.raises(helm.HelmError, match="sharing.enabled needs hostPID"):
        render({"sharing": {"enabled": True}})


def test_config_change_rolls_the_pods() -> None:
    annotation = lambda objects: objects["DaemonSet/gpueff-gpu-efficiency-exporter"]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]  # noqa: E731
    assert annotation(render()) != annotation(render({"config": {"collect_interval": "2s"}}))


def test_servicemonitor_needs_the_service() -> None:
    with pytest.raises(helm.HelmError, match="serviceMonitor.enabled needs service.enabled"):
        render({"serviceMonitor": {"enabled": True}, "service": {"enabled": False}})


@pytest.mark.parametrize("values", [{"serviceMonitr": {"enabled": True}}, {"hostPID": "yes"}, {"image": {"pullPolicy": "Sometimes"}}, {"podResources": {"refreshInterval": "ten seconds"}}, {"podResources": {"podLabels": "sometimes"}}, {"sharing": {"enabled": "yes"}}])
def test_schema_rejects_bad_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmError):
        render(values)


INJECTED = "x\n      hostIPC: true"  # a value that, pasted unquoted into the pod spec, adds a key to it
HOSTILE_VALUES = {
    "runtimeClassName": {"runtimeClassName": "nvidia" + INJECTED},
    "priorityClassName": {"priorityClassName": "high" + INJECTED},
    "namespaceOverride": {"namespaceOverride": "gpu\n  labels: {a: b}"},
    "fullnameOverride": {"fullnameOverride": "gpu\n  labels: {a: b}"},
    "nameOverride": {"nameOverride": "gpu\nx"},
    "serviceAccount.name": {"serviceAccount": {"name": "gpu" + INJECTED}},
    "podResources.hostPath": {"podResources": {"hostPath": "/var/lib/kubelet/pod-resources" + INJECTED}},
    "podResources.hostPath, relative": {"podResources": {"hostPath": "var/lib/kubelet"}},
    "hostDriver.path": {"hostDriver": {"enabled": True, "path": "/home/kubernetes/bin/nvidia\n        type: Directory"}},
    "extraVolumeMounts.mountPath": {"extraVolumeMounts": [{"name": "x", "mountPath": "/x\ty"}]},
    "webConfig.tlsSecret": {"webConfig": {"tlsSecret": "certs" + INJECTED}},
    "webConfig.existingSecret": {"webConfig": {"existingSecret": "web\nx"}},
    "serviceMonitor.jobLabel": {"serviceMonitor": {"enabled": True, "jobLabel": "app\n  sampleLimit: 0"}},
    "serviceMonitor.namespace": {"serviceMonitor": {"enabled": True, "namespace": "monitoring\nx: y"}},
    "podMonitor.namespace": {"podMonitor": {"enabled": True, "namespace": "Monitoring"}, "service": {"enabled": False}},
    "dashboards.label": {"dashboards": {"enabled": True, "label": "grafana_dashboard: \"1\"\n    evil"}},
    "dashboards.namespace": {"dashboards": {"enabled": True, "namespace": "grafana\nx: y"}},
    # jobSelector is pasted into every exporter-health alert's PromQL: a whole matcher list, nothing after it.
    "prometheusRule.jobSelector, PromQL after it": {"prometheusRule": {"enabled": True, "jobSelector": 'job="x"} or vector(1) or up{job="y"'}},
    "prometheusRule.jobSelector, a newline": {"prometheusRule": {"enabled": True, "jobSelector": 'job="x"\n'}},
    "prometheusRule.wasteExemptPods, a newline": {"prometheusRule": {"enabled": True, "wasteExemptPods": "vllm-.*\nx"}},
}


@pytest.mark.parametrize("values", HOSTILE_VALUES.values(), ids=HOSTILE_VALUES.keys())
def test_values_that_would_add_keys_or_promql_are_refused(values: dict[str, Any]) -> None:
    # Before: runtimeClassName "nvidia\n      hostIPC: true" rendered a pod with hostIPC: true, and
    # a jobSelector needed only to begin like a matcher. Names are DNS-1123, paths absolute without
    # control characters, a jobSelector a whole list of matchers; the templates quote them too.
    with pytest.raises(helm.HelmError, match="values don't meet the specifications of the schema"):
        render(values)


def test_names_paths_and_selectors_of_the_right_form_are_taken() -> None:
    values = {
        "runtimeClassName": "nvidia", "priorityClassName": "system-node-critical", "namespaceOverride": "gpu-monitoring", "fullnameOverride": "gpu",
        "podResources": {"hostPath": "/var/lib/kubelet/pod resources"}, "hostDriver": {"enabled": True, "path": "/opt/nvidia #1"},
        "serviceMonitor": {"enabled": True, "jobLabel": "app.kubernetes.io/name", "namespace": "monitoring"},
        "dashboards": {"enabled": True, "label": "grafana_dashboard", "namespace": "grafana"},
        "prometheusRule": {"enabled": True, "jobSelector": 'job=~"gpu|gpu-eff", cluster!="lab\\"1\\""'},
    }
    objects = render(values)
    spec = pod_spec(objects | {"DaemonSet/gpueff-gpu-efficiency-exporter": objects["DaemonSet/gpu"]})
    assert spec["runtimeClassName"] == "nvidia" and spec["priorityClassName"] == "system-node-critical" and "hostIPC" not in spec
    paths = {volume["name"]: volume["hostPath"]["path"] for volume in spec["volumes"] if "hostPath" in volume}
    assert "/var/lib/kubelet/pod resources" in paths.values() and "/opt/nvidia #1" in paths.values()
    assert objects["ServiceMonitor/gpu"]["spec"]["jobLabel"] == "app.kubernetes.io/name"
    rules = [rule for group in objects["PrometheusRule/gpu"]["spec"]["groups"] for rule in group["rules"] if "alert" in rule]
    assert any('up{job=~"gpu|gpu-eff", cluster!="lab\\"1\\""}' in rule["expr"] for rule in rules)


def test_notes_say_what_the_exporters_uid_can_do_to_the_node_with_hostpid() -> None:
    # Before, nothing said it, and docs/security.md said uid 0 without capabilities could open
    # root-owned files "and nothing more": in the node's PID namespace it can also signal every
    # uid-0 process (tests/unit/attribution/test_privileges.py shows both).
    root = render({"hostPID": True})
    assert pod_spec(root)["securityContext"]["runAsUser"] == 0
    assert "can still stop or kill\nevery uid-0 process of the node" in root["NOTES"] and "podResources.enabled=false runs the exporter as uid 65532" in root["NOTES"]
    unprivileged = render({"hostPID": True, "podResources": {"enabled": False}})
    assert pod_spec(unprivileged)["securityContext"]["runAsUser"] == 65532 and pod_spec(unprivileged)["hostPID"] is True
    assert "as uid 65532, can signal and read the processes of uid 65532" in unprivileged["NOTES"] and "uid 0" not in unprivileged["NOTES"]
    chosen = render({"hostPID": True, "podResources": {"enabled": False}, "podSecurityContext": {"runAsUser": 40123}})
    assert "as uid 40123, can signal" in chosen["NOTES"]
    assert "hostPID is on" not in render()["NOTES"]


def test_servicemonitor_prometheusrule_and_dashboards() -> None:
    objects = render({**ALL_ON, "serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"}}})
    monitor = objects["ServiceMonitor/gpueff-gpu-efficiency-exporter"]
    service = objects["Service/gpueff-gpu-efficiency-exporter"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] and endpoint["honorLabels"] is True

    # The plain rules with the exporter-health alerts on this ServiceMonitor's job: the Service's name.
    rules = [ROOT / "deploy" / "prometheus" / "gpu-efficiency-rules.yml"]  # what the chart renders (not the dcgm-exporter compatibility rules)
    plain = "".join(path.read_text() for path in rules)
    assert 'job="gpu-efficiency-exporter"' in plain
    expected_groups = [group for path in rules for group in yaml.safe_load(path.read_text().replace('job="gpu-efficiency-exporter"', f'job="{service["metadata"]["name"]}"').replace('job=\\"gpu-efficiency-exporter\\"', f'job=\\"{service["metadata"]["name"]}\\"'))["groups"]]
    assert objects["PrometheusRule/gpueff-gpu-efficiency-exporter"]["spec"]["groups"] == expected_groups

    dashboards = sorted(DASHBOARDS.glob("*.json"))
    maps = {key: obj for key, obj in objects.items() if key.startswith("ConfigMap/") and obj["metadata"]["labels"].get("grafana_dashboard") == "1"}
    assert len(maps) == len(dashboards)
    served = {name: json.loads(text) for obj in maps.values() for name, text in obj["data"].items()}
    assert served == {path.name: json.loads(path.read_text()) for path in dashboards}
    assert all(len(name.split("/", 1)[1]) <= 63 for name in maps)


def test_the_chart_reads_the_one_committed_copy_of_the_dashboards_and_rules() -> None:
    """Helm reads only files inside the chart, so its files/ are symbolic links to the one committed
    copy (deploy/mixin/dashboards/, deploy/prometheus/); Helm follows them when it loads or packages
    the chart (the rendered objects above, the package in test_release.py), so no copy can drift."""
    files = CHART / "files"
    assert (files / "dashboards").is_symlink() and (files / "dashboards").resolve() == DASHBOARDS.resolve()
    rules = sorted((files / "rules").iterdir())
    assert rules and all(path.is_symlink() and path.resolve() == (ROOT / "deploy" / "prometheus" / path.name).resolve() for path in rules), rules


def alert_rules(objects: dict[str, Any]) -> dict[str, Any]:
    groups = objects["PrometheusRule/gpueff-gpu-efficiency-exporter"]["spec"]["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def test_every_alert_is_tunable_through_values() -> None:
    defaults = alert_rules(render({"prometheusRule": {"enabled": True}}))
    tuned = alert_rules(render({"prometheusRule": {"enabled": True, "runbookBaseUrl": "https://wiki.example/gpu", "alerts": {
        "GpuTemperatureHigh": {"threshold": 80, "for": "1m", "severity": "critical"},
        "GpuHighUtilizationLowSmActivity": {"threshold": 0.9},
        "GpuLatencyBound": {"enabled": False},
    }}}))
    assert set(defaults) - set(tuned) == {"GpuLatencyBound"}
    temperature = tuned["GpuTemperatureHigh"]
    assert temperature["expr"] == "gpueff_temperature_celsius > 80" and defaults["GpuTemperatureHigh"]["expr"] == "gpueff_temperature_celsius > 85"
    assert temperature["for"] == "1m" and temperature["labels"] == {"severity": "critical"}
    assert "above 80 °C" in temperature["annotations"]["description"] and "For 1m" in temperature["annotations"]["description"]
    assert temperature["annotations"]["runbook_url"] == "https://wiki.example/gpu#gputemperaturehigh"
    assert ">= 0.9" in tuned["GpuHighUtilizationLowSmActivity"]["expr"] and ">= 0.7" in defaults["GpuHighUtilizationLowSmActivity"]["expr"]
    # Untouched alerts keep their defaults (apart from the runbook base).
    assert tuned["GpuLost"]["expr"] == defaults["GpuLost"]["expr"] and tuned["GpuLost"]["labels"] == defaults["GpuLost"]["labels"]


def test_the_alerts_follow_the_job_name() -> None:
    """A fullnameOverride renames the Service, so the ServiceMonitor's job: the exporter-health
    alerts follow it; prometheusRule.jobSelector overrides it for another scrape config."""
    groups = render({"fullnameOverride": "gpu", "prometheusRule": {"enabled": True}})["PrometheusRule/gpu"]["spec"]["groups"]
    renamed = {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}
    assert renamed["GpuEfficiencyExporterDown"]["expr"] == 'up{job="gpu"} == 0\nor\nabsent(up{job="gpu"})\n'
    chosen = alert_rules(render({"prometheusRule": {"enabled": True, "jobSelector": 'job=~"gpu|gpu-eff"'}}))
    assert 'max_over_time(up{job=~"gpu|gpu-eff"}[1h])' in chosen["GpuEfficiencyExporterVanished"]["expr"]
    with pytest.raises(helm.HelmError):
        render({"prometheusRule": {"enabled": True, "jobSelector": "gpu"}})


def test_a_waste_exemption_that_is_no_regular_expression_fails_the_install() -> None:
    """Go's regexp (Prometheus's own) reads it first: a pattern Prometheus would refuse at load never
    reaches the PrometheusRule. Its quotes stay inside the PromQL string (tests/deploy/test_mixin.py)."""
    with pytest.raises(helm.HelmError, match="error parsing regexp"):
        render({"prometheusRule": {"enabled": True, "wasteExemptNamespaces": "serving("}})


def test_values_list_every_alert_with_its_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    source = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules-source.yml").read_text())
    names = [rule["alert"] for group in source["alert_groups"] for rule in group["rules"]]
    assert list(values["prometheusRule"]["alerts"]) == names
    assert values["prometheusRule"]["runbookBaseUrl"] == source["runbook_base_url"]


@pytest.mark.parametrize("alerts", [{"GpuTemperatureHgh": {"threshold": 80}}, {"GpuTemperatureHigh": {"threshold": "hot"}}, {"GpuTemperatureHigh": {"for": "five minutes"}}, {"GpuTemperatureHigh": {"treshold": 80}}])
def test_a_wrong_alert_setting_fails_the_install(alerts: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmError):
        render({"prometheusRule": {"enabled": True, "alerts": alerts}})


def test_servicemonitor_limits_and_node_as_instance() -> None:
    (endpoint,) = render(ALL_ON)["ServiceMonitor/gpueff-gpu-efficiency-exporter"]["spec"]["endpoints"]
    monitor = render({**ALL_ON, "serviceMonitor": {"enabled": True, "sampleLimit": 5000, "labelLimit": 25}})["ServiceMonitor/gpueff-gpu-efficiency-exporter"]
    assert monitor["spec"]["sampleLimit"] == 5000 and monitor["spec"]["labelLimit"] == 25
    assert render(ALL_ON)["ServiceMonitor/gpueff-gpu-efficiency-exporter"]["spec"]["sampleLimit"] == 20000
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"} in endpoint["relabelings"]
    plain = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "servicemonitor.yaml").read_text())
    assert plain["spec"]["sampleLimit"] == 20000 and plain["spec"]["labelLimit"] == 30
    assert plain["spec"]["endpoints"][0]["relabelings"] == endpoint["relabelings"]


def test_dra_and_pod_labels_get_api_access_on_their_node_only() -> None:
    values = {"podResources": {"draDrivers": ["gpu.nvidia.com"], "podLabelKeys": ["team", "app.kubernetes.io/name"]}}
    objects = render(values)
    validate_all(obj for key, obj in objects.items() if key != "NOTES")
    config = exporter_config(objects)
    assert config.kubernetes.dra_drivers == ("gpu.nvidia.com",) and config.kubernetes.pod_label_keys == ("team", "app.kubernetes.io/name")
    role = objects["ClusterRole/gpueff-gpu-efficiency-exporter"]
    assert role["rules"] == [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]}, {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    (subject,) = objects["ClusterRoleBinding/gpueff-gpu-efficiency-exporter"]["subjects"]
    assert subject["name"] == "gpueff-gpu-efficiency-exporter" and objects["ClusterRoleBinding/gpueff-gpu-efficiency-exporter"]["roleRef"]["name"] == role["metadata"]["name"]
    spec = pod_spec(objects)
    assert spec["automountServiceAccountToken"] is True
    env = {item["name"]: item for item in spec["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    only_dra = render({"podResources": {"draDrivers": ["gpu.nvidia.com"]}})
    assert [rule["resources"] for rule in only_dra["ClusterRole/gpueff-gpu-efficiency-exporter"]["rules"]] == [["resourceslices"]]
    defaults = render()
    assert not any(key.startswith("ClusterRole") for key in defaults) and pod_spec(defaults)["automountServiceAccountToken"] is False
    assert "NODE_NAME" not in {item["name"] for item in pod_spec(defaults)["containers"][0]["env"]}
    with pytest.raises(helm.HelmError):
        render({"podResources": {"podLabelKeys": [f"k{n}" for n in range(11)]}})


def test_the_dcgm_exporter_compat_rules_come_with_the_prometheusrule_when_asked() -> None:
    compat = yaml.safe_load((ROOT / "deploy" / "prometheus" / "dcgm-exporter-compat.yml").read_text())["groups"]
    groups = render({"prometheusRule": {"enabled": True, "dcgmExporterCompat": True}})["PrometheusRule/gpueff-gpu-efficiency-exporter"]["spec"]["groups"]
    assert groups[-len(compat):] == compat
    without = render({"prometheusRule": {"enabled": True}})["PrometheusRule/gpueff-gpu-efficiency-exporter"]["spec"]["groups"]
    assert without == groups[: -len(compat)]


def test_the_compat_rules_take_the_host_label_and_the_per_pod_copy_of_the_users_dcgm_exporter() -> None:
    text = (ROOT / "deploy" / "prometheus" / "dcgm-exporter-compat-per-pod.yml").read_text()
    wanted = yaml.safe_load(text.replace("Hostname", "hostname"))["groups"]
    values = {"prometheusRule": {"enabled": True, "dcgmExporterCompat": True, "dcgmExporterHostLabel": "hostname", "dcgmExporterCopyPerPod": True}}
    groups = render(values)["PrometheusRule/gpueff-gpu-efficiency-exporter"]["spec"]["groups"]
    assert groups[-len(wanted):] == wanted and "hostname" in str(wanted) and "Hostname" not in str(wanted)
    with pytest.raises(helm.HelmError):
        render({"prometheusRule": {"enabled": True, "dcgmExporterCompat": True, "dcgmExporterHostLabel": "node"}})


def test_the_compat_rules_come_in_the_generation_of_the_users_dcgm_exporter_or_both() -> None:
    """legacy (the default) the old names, dcgm47 the DCGM 4.7 names, both the two groups side by
    side; the host label and the per-pod copy apply to either; any other generation is refused."""
    prometheus = ROOT / "deploy" / "prometheus"
    legacy = yaml.safe_load((prometheus / "dcgm-exporter-compat.yml").read_text())["groups"]
    dcgm47 = yaml.safe_load((prometheus / "dcgm-exporter-compat-dcgm47.yml").read_text())["groups"]

    def compat_groups(**values: Any) -> list[dict[str, Any]]:
        groups = render({"prometheusRule": {"enabled": True, "dcgmExporterCompat": True, **values}})["PrometheusRule/gpueff-gpu-efficiency-exporter"]["spec"]["groups"]
        return [group for group in groups if group["name"].startswith("dcgm-exporter-compat")]

    assert compat_groups() == compat_groups(dcgmExporterGeneration="legacy") == legacy
    assert compat_groups(dcgmExporterGeneration="dcgm47") == dcgm47
    assert compat_groups(dcgmExporterGeneration="both") == legacy + dcgm47
    per_pod = yaml.safe_load((prometheus / "dcgm-exporter-compat-dcgm47-per-pod.yml").read_text().replace("Hostname", "hostname"))["groups"]
    assert compat_groups(dcgmExporterGeneration="dcgm47", dcgmExporterHostLabel="hostname", dcgmExporterCopyPerPod=True) == per_pod
    with pytest.raises(helm.HelmError, match="dcgmExporterGeneration"):
        compat_groups(dcgmExporterGeneration="4.9")


def helm_test_pod(values: dict[str, Any]) -> dict[str, Any]:
    return render(values)["Pod/gpueff-gpu-efficiency-exporter-test"]


def run_helm_test_container(pod: dict[str, Any], url: str) -> subprocess.CompletedProcess[str]:
    """The test pod's command, run here against a daemon on loopback in place of the Service."""
    (container,) = pod["spec"]["containers"]
    script, service_url, connect_only = container["args"]
    assert container["command"] == ["python3", "-c"]
    local_url = url + "/" + service_url.split("/", 3)[3]
    return subprocess.run([sys.executable, "-c", script, local_url, connect_only], capture_output=True, text=True, timeout=PATIENCE)


def test_helm_test_hook_asks_the_service_for_readiness() -> None:
    pod = helm_test_pod({})
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test" and pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "ghcr.io/gpu-efficiency-exporter/gpu-efficiency-exporter:0.1.0"
    assert container["args"][1:] == ["http://gpueff-gpu-efficiency-exporter.monitoring.svc:9947/-/ready", "false"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True and pod["spec"]["securityContext"]["runAsNonRoot"] is True
    with running_daemon("--demo") as daemon:
        done = run_helm_test_container(pod, daemon.url)
        daemon.stop()
        failed = run_helm_test_container(pod, daemon.url)
    assert done.returncode == 0 and " 200 " in done.stdout, done.stdout + done.stderr
    assert failed.returncode != 0, "a daemon that is gone fails the test"


def test_helm_test_hook_follows_tls_auth_and_the_service_switch() -> None:
    tls = helm_test_pod({"webConfig": {"existingSecret": "mine", "tls": True}})["spec"]["containers"][0]["args"]
    assert tls[1].startswith("https://") and tls[2] == "false"
    auth = helm_test_pod({"webConfig": {"existingSecret": "mine", "basicAuth": True}})["spec"]["containers"][0]["args"]
    assert auth[2] == "true"
    assert "Pod/gpueff-gpu-efficiency-exporter-test" not in render({"service": {"enabled": False}})
    assert "Pod/gpueff-gpu-efficiency-exporter-test" not in render({"helmTest": {"enabled": False}})


AUTO_TLS = {"webConfig": {"autoGenerated": {"enabled": True, "days": 30}}, "serviceMonitor": {"enabled": True}}


def test_auto_generated_tls_mounts_a_certificate_for_the_service_and_the_monitor_trusts_its_ca(tmp_path) -> None:
    """webConfig.autoGenerated: a CA and a server certificate for the Service's DNS names in a
    kubernetes.io/tls Secret, TLS on in the web config, HTTPS probes, and a ServiceMonitor that
    verifies the exporter with that CA. The daemon then serves the generated pair and a client
    holding only ca.crt connects to it under the Service's name."""
    import base64
    import ssl

    objects = render(AUTO_TLS)
    validate_all(obj for key, obj in objects.items() if key != "NOTES")
    secret = objects["Secret/gpueff-gpu-efficiency-exporter-tls"]
    assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    web = yaml.safe_load(objects["Secret/gpueff-gpu-efficiency-exporter-web-config"]["stringData"]["web-config.yml"])
    assert web["tls_server_config"] == {"cert_file": "/etc/gpu-efficiency-exporter-tls/tls.crt", "key_file": "/etc/gpu-efficiency-exporter-tls/tls.key"}
    pod = pod_spec(objects)
    assert {"name": "tls", "secret": {"secretName": "gpueff-gpu-efficiency-exporter-tls"}} in pod["volumes"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    (endpoint,) = objects["ServiceMonitor/gpueff-gpu-efficiency-exporter"]["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {"ca": {"secret": {"name": "gpueff-gpu-efficiency-exporter-tls", "key": "ca.crt"}}, "serverName": "gpueff-gpu-efficiency-exporter.monitoring.svc"}
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / name).write_bytes(base64.b64decode(secret["data"][name]))
    (tmp_path / "web.yml").write_text(yaml.safe_dump({"tls_server_config": {"cert_file": str(tmp_path / "tls.crt"), "key_file": str(tmp_path / "tls.key")}}))
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    client.check_hostname = False  # the name is checked below, against the certificate's SANs
    with running_daemon("--demo", "--web.config.file", str(tmp_path / "web.yml"), is_ready=lambda port: _https_ready(port, client)) as daemon:
        assert _https_ready(daemon.port, client)
    from cryptography import x509

    certificate = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "gpueff-gpu-efficiency-exporter.monitoring.svc" in names and "gpueff-gpu-efficiency-exporter.monitoring.svc.cluster.local" in names


def _https_ready(port: int, context) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/-/ready", context=context, timeout=PATIENCE) as answer:
            return answer.status == 200
    except OSError:
        return False


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"webConfig": {"autoGenerated": {"enabled": True}, "tlsSecret": "mine"}}, "set tlsSecret (a certificate of yours) or autoGenerated, not both"),
        ({"webConfig": {"autoGenerated": {"enabled": True}, "existingSecret": "mine"}}, "cannot go with existingSecret"),
        ({"webConfig": {"autoGenerated": {"enabled": True}, "config": {"tls_server_config": {"cert_file": "/x"}}}}, "leave cert_file and key_file out"),
    ],
)
def test_auto_generated_tls_refuses_a_second_certificate(values: dict[str, Any], message: str) -> None:
    import re

    with pytest.raises(Exception, match=re.escape(message)):
        render(values)


def test_release_label_dual_stack_vpa_and_extra_manifests() -> None:
    values = {
        "releaseLabel": True,
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "service": {"ipDualStack": {"enabled": True}},
        "verticalPodAutoscaler": {"enabled": True, "updateMode": "Auto", "maxAllowed": {"memory": "512Mi"}},
        "extraManifests": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ .Release.Name }}-extra"}, "data": {"a": "b"}},
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: scrape-{{ .Release.Name }}\nstringData:\n  password: x\n",
        ],
    }
    objects = render(values)
    for key in ("ServiceMonitor/gpueff-gpu-efficiency-exporter", "PrometheusRule/gpueff-gpu-efficiency-exporter"):
        assert objects[key]["metadata"]["labels"]["release"] == "gpueff"
    assert "release" not in render({"serviceMonitor": {"enabled": True}})["ServiceMonitor/gpueff-gpu-efficiency-exporter"]["metadata"]["labels"]
    service = objects["Service/gpueff-gpu-efficiency-exporter"]["spec"]
    assert service["ipFamilies"] == ["IPv6", "IPv4"] and service["ipFamilyPolicy"] == "PreferDualStack"
    vpa = objects["VerticalPodAutoscaler/gpueff-gpu-efficiency-exporter"]
    assert vpa["apiVersion"] == "autoscaling.k8s.io/v1" and vpa["spec"]["targetRef"] == {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gpueff-gpu-efficiency-exporter"}
    (policy,) = vpa["spec"]["resourcePolicy"]["containerPolicies"]
    assert policy["containerName"] == "exporter" and policy["maxAllowed"] == {"memory": "512Mi"} and vpa["spec"]["updatePolicy"]["updateMode"] == "Auto"
    assert objects["ConfigMap/gpueff-extra"]["data"] == {"a": "b"} and "Secret/scrape-gpueff" in objects
    validate_all(obj for key, obj in objects.items() if key != "NOTES" and not key.startswith("VerticalPodAutoscaler/"))
    report = helm.lint(str(CHART), values, strict=True, kube_version="v1.30.0")
    assert report["errors"] == []


@pytest.mark.parametrize("values", [{"service": {"ipDualStack": {"enabled": True, "ipFamilyPolicy": "Both"}}}, {"verticalPodAutoscaler": {"enabled": True, "updateMode": "Sometimes"}}, {"extraManifests": [3]}, {"webConfig": {"autoGenerated": {"days": 0}}}])
def test_the_schema_refuses_bad_comfort_values(values: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="values don't meet the specifications of the schema|schema"):
        render(values)
