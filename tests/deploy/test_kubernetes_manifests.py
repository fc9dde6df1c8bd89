"""The plain manifests in deploy/kubernetes/: valid against the Kubernetes schemas and doing what
docs/kubernetes.md promises."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from helm_render import pod_spec, render
from kube_schemas import documents, validate_all

from gpueff.commands.cli import daemon_parser
from gpueff.settings import parse_config

pytestmark = pytest.mark.e2e  # the Kubernetes schemas

MANIFESTS = ROOT / "deploy" / "kubernetes"


def load(name: str) -> dict:
    (obj,) = documents((MANIFESTS / name).read_text())
    return obj


def test_every_builtin_object_validates_strictly() -> None:
    objects = [obj for path in sorted(MANIFESTS.glob("*.yaml")) if path.name != "kustomization.yaml" for obj in documents(path.read_text())]
    checked = validate_all(objects)
    assert {"Namespace/gpu-efficiency-exporter", "ServiceAccount/gpu-efficiency-exporter", "ConfigMap/gpu-efficiency-exporter", "DaemonSet/gpu-efficiency-exporter", "Service/gpu-efficiency-exporter"} <= set(checked)


def test_kustomization_lists_every_manifest() -> None:
    resources = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())["resources"]
    on_disk = sorted(path.name for path in MANIFESTS.glob("*.yaml") if path.name != "kustomization.yaml")
    assert sorted(resources) == on_disk, "kustomization.yaml and the files in deploy/kubernetes/ differ"
    assert resources[0] == "namespace.yaml"


def test_daemonset_security_scheduling_probes_and_socket() -> None:
    daemonset = load("daemonset.yaml")
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # The same GPU nodes, tolerations and priority as the Helm chart's defaults.
    chart = pod_spec(render())
    assert pod["affinity"] == chart["affinity"] and pod["tolerations"] == chart["tolerations"] and "nodeSelector" not in pod
    assert pod["priorityClassName"] == chart["priorityClassName"] == "system-node-critical"
    assert pod["automountServiceAccountToken"] is False and pod["hostPID"] is False
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}  # SYS_ADMIN is a commented opt-in only
    assert container["livenessProbe"]["httpGet"] == {"path": "/-/healthy", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "metrics"}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    assert mounts["pod-resources"]["readOnly"] is True
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env == {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}
    args = daemon_parser().parse_args(container["args"])
    assert args.wait_for_driver
    assert args.listen_address == [":9947"] and container["ports"][0]["containerPort"] == 9947
    # The config file the args name is the ConfigMap's key, mounted where the args say.
    config_map = load("configmap.yaml")
    assert Path(args.config).parent.as_posix() == mounts["config"]["mountPath"]
    assert Path(args.config).name in config_map["data"]
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]


def test_configmap_is_a_valid_exporter_config_with_attribution_on() -> None:
    config = parse_config(yaml.safe_load(load("configmap.yaml")["data"]["config.yml"]))
    assert config.kubernetes.enabled and config.kubernetes.pod_resources_socket.startswith("/var/lib/kubelet/pod-resources/")
    assert not config.kubernetes.process_attribution  # needs hostPID, off like hostPID


def test_service_and_servicemonitor_select_the_daemonset_pods() -> None:
    daemonset, service, monitor = load("daemonset.yaml"), load("service.yaml"), load("servicemonitor.yaml")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"


def test_rbac_is_minimal() -> None:
    kinds = {obj["kind"] for path in MANIFESTS.glob("*.yaml") for obj in documents(path.read_text())}
    assert not kinds & {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
    assert load("serviceaccount.yaml")["automountServiceAccountToken"] is False


def test_versions_agree_with_the_package() -> None:
    from gpueff import __version__

    chart = yaml.safe_load((ROOT / "helm" / "gpu-efficiency-exporter" / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert f"ARG VERSION={__version__}" in (ROOT / "Dockerfile").read_text()
    daemonset = load("daemonset.yaml")
    assert daemonset["spec"]["template"]["spec"]["containers"][0]["image"].endswith(f":{__version__}")
    assert daemonset["metadata"]["labels"]["app.kubernetes.io/version"] == __version__
