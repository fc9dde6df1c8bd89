"""The chart on the clusters users run: scheduling on managed GPU nodes, security contexts, the
exporter's own TLS and basic auth, the values of prometheus-community and NVIDIA charts, the DCGM
variant. Rendered by real Helm; every rendered built-in object validated against the Kubernetes schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bcrypt
import helm_python as helm
import pytest
import yaml
from conftest import ROOT
from helm_render import CHART, DAEMONSET, pod_spec, render
from kube_schemas import documents, validate_all
from tls_certs import make_pki

from gpueff.commands.cli import daemon_parser
from gpueff.httpserver.tlsconfig import load_web_config

pytestmark = pytest.mark.e2e  # real Helm

SECRET = "Secret/gpueff-gpu-efficiency-exporter-web-config"
MONITOR = "ServiceMonitor/gpueff-gpu-efficiency-exporter"
POD_MONITOR = "PodMonitor/gpueff-gpu-efficiency-exporter"
SCRAPE_SECRET = {"username": {"name": "gpueff-scrape", "key": "username"}, "password": {"name": "gpueff-scrape", "key": "password"}}


# --- scheduling: the scheduler's own rules for node affinity, nodeSelector and taints ------------------------


def _expression_matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
    return {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values, "Exists": key in labels, "DoesNotExist": key not in labels}[operator]


def _tolerated(taint: dict[str, str], tolerations: list[dict[str, Any]]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", taint["effect"]):
            continue
        if toleration.get("operator", "Equal") == "Exists" and toleration.get("key") in (None, taint["key"]):
            return True
        if toleration.get("operator", "Equal") == "Equal" and toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def schedules_on(pod: dict[str, Any], labels: dict[str, str], taints: list[dict[str, str]]) -> bool:
    """Whether a DaemonSet pod with this spec lands on a node with these labels and taints: nodeSelector
    all match, required node affinity terms ORed (expressions within a term ANDed), and every
    NoSchedule/NoExecute taint tolerated (Kubernetes' scheduling rules)."""
    if any(labels.get(key) != value for key, value in pod.get("nodeSelector", {}).items()):
        return False
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required and not any(all(_expression_matches(e, labels) for e in term.get("matchExpressions", [])) for term in required["nodeSelectorTerms"]):
        return False
    return all(_tolerated(taint, pod.get("tolerations", [])) for taint in taints if taint["effect"] in ("NoSchedule", "NoExecute"))


# Labels and taints as each platform puts them on a GPU node, without GPU Feature Discovery.
MANAGED_GPU_NODES = {
    "gke": ({"cloud.google.com/gke-accelerator": "nvidia-l4", "cloud.google.com/gke-nodepool": "gpu-pool"}, [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
    "eks-karpenter": ({"karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia", "karpenter.k8s.aws/instance-gpu-name": "a10g"}, [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]),
    "eks-auto-mode": ({"eks.amazonaws.com/instance-gpu-manufacturer": "nvidia", "eks.amazonaws.com/compute-type": "auto"}, [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
    "eks-autoscaler-label": ({"k8s.amazonaws.com/accelerator": "nvidia-tesla-a100"}, []),
    "aks": ({"kubernetes.azure.com/accelerator": "nvidia", "agentpool": "gpu"}, [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]),
    "gpu-feature-discovery": ({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, []),
    "node-feature-discovery": ({"feature.node.kubernetes.io/pci-10de.present": "true"}, [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}]),
}
CPU_NODE = ({"kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "m5.large"}, [])


@pytest.mark.parametrize("platform", sorted(MANAGED_GPU_NODES))
def test_defaults_schedule_on_every_managed_gpu_node_and_no_cpu_node(platform: str) -> None:
    pod = pod_spec(render())
    assert schedules_on(pod, *MANAGED_GPU_NODES[platform])
    assert not schedules_on(pod, *CPU_NODE)


def test_host_driver_for_gke_without_the_nvidia_runtime() -> None:
    """GKE's driver installer leaves the driver in /home/kubernetes/bin/nvidia and no NVIDIA runtime:
    the folder is mounted where the library search looks, and the container is privileged (the API
    refuses privileged together with allowPrivilegeEscalation: false, so that key goes)."""
    objects = render({"hostDriver": {"enabled": True}})
    pod = pod_spec(objects)
    (container,) = pod["containers"]
    assert {"name": "nvidia-driver", "hostPath": {"path": "/home/kubernetes/bin/nvidia", "type": "Directory"}} in pod["volumes"]
    assert {"name": "nvidia-driver", "mountPath": "/usr/local/nvidia", "readOnly": True} in container["volumeMounts"]
    assert {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"} in container["env"]
    assert container["securityContext"]["privileged"] is True and "allowPrivilegeEscalation" not in container["securityContext"]
    assert schedules_on(pod, *MANAGED_GPU_NODES["gke"])
    validate_all([objects[DAEMONSET]])
    own = pod_spec(render({"securityContext": {"privileged": True}}))["containers"][0]["securityContext"]
    assert own["privileged"] is True and "allowPrivilegeEscalation" not in own
    plain = pod_spec(render())["containers"][0]
    assert "privileged" not in plain["securityContext"] and not any(env["name"] == "LD_LIBRARY_PATH" for env in plain["env"])


def test_no_gpu_terms_means_every_node_and_own_node_affinity_replaces_them() -> None:
    everywhere = pod_spec(render({"gpuNodeSelectorTerms": []}))
    assert "affinity" not in everywhere and schedules_on(everywhere, *CPU_NODE)
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}}
    pod = pod_spec(render({"affinity": own}))
    assert pod["affinity"] == own
    assert schedules_on(pod, {"pool": "gpu"}, []) and not schedules_on(pod, *MANAGED_GPU_NODES["gke"])
    # Other affinity kinds keep the GPU terms.
    spread = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    assert set(pod_spec(render({"affinity": spread}))["affinity"]) == {"podAntiAffinity", "nodeAffinity"}
    assert "GPU nodes" in render()["NOTES"] and "every node" in render({"gpuNodeSelectorTerms": []})["NOTES"]


# --- security contexts -----------------------------------------------------------------------------------------


def test_security_contexts_non_root_where_nothing_needs_root_and_values_win() -> None:
    attributed = pod_spec(render())
    assert attributed["securityContext"] == {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "seccompProfile": {"type": "RuntimeDefault"}}
    plain = pod_spec(render({"podResources": {"enabled": False}}))
    assert plain["securityContext"] == {"runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    own = pod_spec(render({"podSecurityContext": {"runAsUser": 1000, "fsGroup": 1000}, "securityContext": {"privileged": False}}))
    assert own["securityContext"]["runAsUser"] == 1000 and own["securityContext"]["fsGroup"] == 1000
    (container,) = own["containers"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}, "privileged": False}
    admin = pod_spec(render({"profilingAdmin": True, "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}}))
    assert admin["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE", "SYS_ADMIN"]}


# --- webConfig: the file the exporter reads, the probes and the ServiceMonitor ---------------------------------


def web_config_file(objects: dict[str, Any], folder: Path) -> Path:
    """The rendered Secret's web config, written where the exporter would read it."""
    (key, text), = objects[SECRET]["stringData"].items()
    path = folder / key
    path.write_text(text)
    return path


def test_inline_basic_auth_web_config_is_a_file_the_exporter_accepts(tmp_path: Path) -> None:
    digest = bcrypt.hashpw(b"scrape-secret", bcrypt.gensalt(4)).decode()
    values = {"webConfig": {"config": {"basic_auth_users": {"prometheus": digest}}}, "serviceMonitor": {"enabled": True, "basicAuth": SCRAPE_SECRET}}
    objects = render(values)
    loaded = load_web_config(str(web_config_file(objects, tmp_path)))
    assert loaded.auth is not None and loaded.ssl_context is None
    pod = pod_spec(objects)
    (container,) = pod["containers"]
    args = daemon_parser().parse_args(container["args"])
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    assert args.web_config_file == f"{mounts['web-config']['mountPath']}/web-config.yml"
    assert {"name": "web-config", "secret": {"secretName": SECRET.split("/")[1]}} in pod["volumes"]
    # The kubelet's probes carry no credentials: they fall back to a TCP check.
    assert container["livenessProbe"]["tcpSocket"] == {"port": "metrics"} and container["readinessProbe"]["tcpSocket"] == {"port": "metrics"}
    (endpoint,) = objects[MONITOR]["spec"]["endpoints"]
    assert endpoint["scheme"] == "http" and endpoint["basicAuth"] == SCRAPE_SECRET
    # A new web config rolls the pods.
    annotations = lambda objects: objects[DAEMONSET]["spec"]["template"]["metadata"]["annotations"]  # noqa: E731
    other = render({**values, "webConfig": {"config": {"basic_auth_users": {"prometheus": digest, "grafana": digest}}}})
    assert annotations(objects)["checksum/web-config"] != annotations(other)["checksum/web-config"]


def test_inline_tls_with_a_certificate_secret(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    objects = render({
        "webConfig": {"config": {"tls_server_config": {"cert_file": str(pki.server.cert), "key_file": str(pki.server.key)}}, "tlsSecret": "gpueff-tls"},
        "serviceMonitor": {"enabled": True, "tlsConfig": {"ca": {"secret": {"name": "gpueff-tls", "key": "ca.crt"}}, "serverName": "gpueff"}},
    })
    assert load_web_config(str(web_config_file(objects, tmp_path))).ssl_context is not None
    pod = pod_spec(objects)
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "metrics", "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert {"name": "tls", "secret": {"secretName": "gpueff-tls"}} in pod["volumes"]
    (endpoint,) = objects[MONITOR]["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"]["serverName"] == "gpueff"


def test_web_config_from_an_existing_secret() -> None:
    objects = render({"webConfig": {"existingSecret": "my-web-config", "key": "web.yml", "tls": True}, "serviceMonitor": {"enabled": True, "tlsConfig": {"insecureSkipVerify": True}}})
    assert SECRET not in objects
    pod = pod_spec(objects)
    (container,) = pod["containers"]
    assert daemon_parser().parse_args(container["args"]).web_config_file == "/etc/gpu-efficiency-exporter-web/web.yml"
    assert {"name": "web-config", "secret": {"secretName": "my-web-config"}} in pod["volumes"]
    assert objects[MONITOR]["spec"]["endpoints"][0]["scheme"] == "https"


@pytest.mark.parametrize(("values", "message"), [
    ({"webConfig": {"config": {"basic_auth_users": {"p": "$2y$04$x"}}}, "serviceMonitor": {"enabled": True}}, "webConfig turns basic auth on"),
    ({"webConfig": {"existingSecret": "s", "clientCertificates": True}, "podMonitor": {"enabled": True}}, "webConfig requires client certificates"),
    ({"webConfig": {"existingSecret": "s", "config": {"basic_auth_users": {}}}}, "not both"),
    ({"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}, "pick one"),
])
def test_settings_that_cannot_scrape_fail_the_install(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(values)


# --- the values users of prometheus-community and NVIDIA charts reach for --------------------------------------


@pytest.mark.parametrize(("image", "expected"), [
    ({}, "ghcr.io/gpu-efficiency-exporter/gpu-efficiency-exporter:0.1.0"),  # what the release workflow publishes
    ({"registry": "registry.acme", "repository": "gpueff"}, "registry.acme/gpueff:0.1.0"),
    ({"registry": "", "repository": "gpu-efficiency-exporter"}, "gpu-efficiency-exporter:0.1.0"),
    ({"global": "mirror.internal"}, "mirror.internal/gpu-efficiency-exporter/gpu-efficiency-exporter:0.1.0"),
    ({"digest": "sha256:" + "a" * 64, "tag": "ignored"}, "ghcr.io/gpu-efficiency-exporter/gpu-efficiency-exporter@sha256:" + "a" * 64),
    ({"tag": "0.2.0"}, "ghcr.io/gpu-efficiency-exporter/gpu-efficiency-exporter:0.2.0"),
])
def test_image_reference(image: dict[str, str], expected: str) -> None:
    registry = image.pop("global", None)
    values: dict[str, Any] = {"image": image}
    if registry:
        values["global"] = {"imageRegistry": registry}
    assert pod_spec(render(values))["containers"][0]["image"] == expected


def test_namespace_override_and_common_labels_reach_every_object() -> None:
    objects = render({"namespaceOverride": "gpu-monitoring", "commonLabels": {"team": "ml-platform"}, "serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}, "dashboards": {"enabled": True}, "networkPolicy": {"enabled": True}, "priorityClassQuota": {"enabled": True}, "webConfig": {"config": {"http_server_config": {"headers": {"X-Frame-Options": "deny"}}}}})
    objects.pop("NOTES")
    assert {obj["metadata"]["namespace"] for obj in objects.values()} == {"gpu-monitoring"}
    assert all(obj["metadata"]["labels"]["team"] == "ml-platform" for obj in objects.values())
    assert objects[MONITOR]["spec"]["namespaceSelector"] == {"matchNames": ["gpu-monitoring"]}
    assert len(objects) == 13  # the helm test pod among them


def test_rollout_and_extra_settings() -> None:
    objects = render({
        "revisionHistoryLimit": 3, "updateStrategy": {"type": "OnDelete"},
        "extraArgs": ["--dcgm.multi-pass"], "extraEnv": [{"name": "TZ", "value": "UTC"}],
        "extraVolumes": [{"name": "ca", "configMap": {"name": "corp-ca"}}], "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/corp-ca", "readOnly": True}],
        "waitForDriver": False,
    })
    daemonset = objects[DAEMONSET]
    assert daemonset["spec"]["revisionHistoryLimit"] == 3 and daemonset["spec"]["updateStrategy"] == {"type": "OnDelete"}
    pod = pod_spec(objects)
    (container,) = pod["containers"]
    args = daemon_parser().parse_args(container["args"])
    assert args.dcgm_multi_pass and not args.wait_for_driver
    assert {"name": "TZ", "value": "UTC"} in container["env"]
    assert {"name": "ca", "configMap": {"name": "corp-ca"}} in pod["volumes"]
    assert {"name": "ca", "mountPath": "/etc/corp-ca", "readOnly": True} in container["volumeMounts"]
    validate_all([daemonset])


def test_host_network_sidecars_and_service_labels() -> None:
    sidecar = {"name": "kube-rbac-proxy", "image": "quay.io/brancz/kube-rbac-proxy:v0.19.1", "args": ["--upstream=http://127.0.0.1:9947/"]}
    init = {"name": "wait", "image": "busybox:1.37", "command": ["true"]}
    objects = render({"hostNetwork": True, "terminationGracePeriodSeconds": 15, "extraContainers": [sidecar], "extraInitContainers": [init], "service": {"labels": {"team": "ml"}}, "serviceMonitor": {"enabled": True, "targetLabels": ["team"]}})
    pod = pod_spec(objects)
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet" and pod["terminationGracePeriodSeconds"] == 15
    assert [c["name"] for c in pod["containers"]] == ["exporter", "kube-rbac-proxy"] and pod["initContainers"] == [init]
    assert objects["Service/gpueff-gpu-efficiency-exporter"]["metadata"]["labels"]["team"] == "ml"
    validate_all([objects[DAEMONSET], objects["Service/gpueff-gpu-efficiency-exporter"], objects[MONITOR]])
    assert pod_security_level(pod) == "privileged"
    assert "hostNetwork" not in pod_spec(render())


def test_servicemonitor_options() -> None:
    monitor = render({"serviceMonitor": {"enabled": True, "namespace": "monitoring-system", "jobLabel": "app.kubernetes.io/name", "targetLabels": ["team"], "podTargetLabels": ["rack"], "honorLabels": False, "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"], "regex": "gpueff_xid_.*"}]}})[MONITOR]
    assert monitor["metadata"]["namespace"] == "monitoring-system"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["monitoring"]}  # the exporters stay where they are
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name" and monitor["spec"]["targetLabels"] == ["team"] and monitor["spec"]["podTargetLabels"] == ["rack"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["honorLabels"] is False and endpoint["metricRelabelings"][0]["regex"] == "gpueff_xid_.*"


def test_podmonitor_scrapes_the_pods_with_the_same_relabelling() -> None:
    objects = render({"podMonitor": {"enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"}}, "service": {"enabled": False}})
    assert MONITOR not in objects and "Service/gpueff-gpu-efficiency-exporter" not in objects
    monitor = objects[POD_MONITOR]
    labels = objects[DAEMONSET]["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    service_endpoint = render({"serviceMonitor": {"enabled": True}})[MONITOR]["spec"]["endpoints"][0]
    assert endpoint == service_endpoint  # same port, path, scheme, interval, relabelings
    assert endpoint["port"] == pod_spec(objects)["containers"][0]["ports"][0]["name"]
    assert "PodMonitor" in objects["NOTES"]


def test_network_policy_admits_only_the_metrics_port() -> None:
    anywhere = render({"networkPolicy": {"enabled": True}})["NetworkPolicy/gpueff-gpu-efficiency-exporter"]
    assert anywhere["spec"]["policyTypes"] == ["Ingress"] and anywhere["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    policy = render({"networkPolicy": {"enabled": True, "from": [peer]}})["NetworkPolicy/gpueff-gpu-efficiency-exporter"]
    assert policy["spec"]["ingress"][0]["from"] == [peer]
    assert policy["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "gpu-efficiency-exporter", "app.kubernetes.io/instance": "gpueff"}


def test_critical_priority_quota_for_gke() -> None:
    quota = render({"priorityClassQuota": {"enabled": True}})["ResourceQuota/gpueff-gpu-efficiency-exporter-critical-pods"]
    assert quota["spec"]["scopeSelector"]["matchExpressions"] == [{"scopeName": "PriorityClass", "operator": "In", "values": ["system-node-critical"]}]
    assert "priorityClassName" not in pod_spec(render({"priorityClassName": ""}))


def test_dcgm_variant_reads_through_the_gpu_operators_host_engine() -> None:
    objects = render({"dcgm": {"enabled": True}})
    (container,) = pod_spec(objects)["containers"]
    assert container["image"] == "ghcr.io/gpu-efficiency-exporter/gpu-efficiency-exporter:0.1.0-dcgm"
    args = daemon_parser().parse_args(container["args"])
    assert args.backend == "auto" and args.dcgm_host == "nvidia-dcgm.gpu-operator.svc:5555"
    assert pod_spec(render({"dcgm": {"enabled": True}, "image": {"tag": "custom"}}))["containers"][0]["image"] == "ghcr.io/gpu-efficiency-exporter/gpu-efficiency-exporter:custom"
    assert "nv-hostengine" in objects["NOTES"]


@pytest.mark.parametrize("values", [
    {"image": {"digest": "latest"}}, {"dcgm": {"backend": "nvml"}}, {"dcgm": {"host": "http://x:5555"}}, {"webConfig": {"tlsCert": "x"}},
    {"updateStrategy": {"type": "Recreate"}}, {"extraEnv": [{"value": "no name"}]}, {"serviceMonitor": {"scheme": "ftp"}},
    {"podMonitor": {"basicAuth": {"username": "plain"}}}, {"gpuNodeSelectorTerms": [{"key": "x"}]}, {"networkPolicy": {"ingress": []}},
])
def test_schema_rejects_wrong_new_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmError):
        render(values)


EVERYTHING = {
    "serviceMonitor": {"enabled": True, "basicAuth": SCRAPE_SECRET, "namespace": "monitoring-system"},
    "prometheusRule": {"enabled": True}, "dashboards": {"enabled": True}, "networkPolicy": {"enabled": True, "from": [{"podSelector": {}}]},
    "priorityClassQuota": {"enabled": True}, "dcgm": {"enabled": True}, "commonLabels": {"team": "ml"}, "namespaceOverride": "gpu",
    "webConfig": {"config": {"basic_auth_users": {"prometheus": "$2y$04$abcdefghijklmnopqrstuu5G5nNmw/Mz6ci2pXlvbkkeT2ZcjS.6"}}, "tlsSecret": "gpueff-tls"},
    "extraVolumes": [{"name": "ca", "configMap": {"name": "corp-ca"}}], "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/corp-ca"}],
    "extraEnv": [{"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}],
}


def test_everything_on_lints_and_every_object_validates() -> None:
    report = helm.lint(str(CHART), EVERYTHING, strict=True, kube_version="v1.30.0")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []
    objects = render(EVERYTHING)
    checked = validate_all(obj for key, obj in objects.items() if key != "NOTES")
    assert {"NetworkPolicy/gpueff-gpu-efficiency-exporter", SECRET, "ResourceQuota/gpueff-gpu-efficiency-exporter-critical-pods", DAEMONSET, MONITOR, "PrometheusRule/gpueff-gpu-efficiency-exporter"} <= set(checked)
    pod_monitored = render({**EVERYTHING, "serviceMonitor": {"enabled": False}, "podMonitor": {"enabled": True, "basicAuth": SCRAPE_SECRET, "tlsConfig": {"insecureSkipVerify": True}, "podTargetLabels": ["rack"]}})
    assert POD_MONITOR in validate_all([pod_monitored[POD_MONITOR]])


def test_operator_objects_are_checked_against_the_operators_schema() -> None:
    """A typo in a relabeling (sourcelabels) or a wrong type would pass Helm and fail at the API server."""
    with pytest.raises(AssertionError, match="sourcelabels"):
        validate_all([render({"serviceMonitor": {"enabled": True, "metricRelabelings": [{"sourcelabels": ["__name__"], "action": "drop"}]}})[MONITOR]])
    with pytest.raises(AssertionError, match="action"):
        validate_all([render({"podMonitor": {"enabled": True, "relabelings": [{"action": "delete"}]}})[POD_MONITOR]])


def test_values_yaml_documents_every_schema_key() -> None:
    """values.yaml carries every top-level key the schema accepts, so users find them there."""
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    assert set(schema["properties"]) == set(yaml.safe_load((CHART / "values.yaml").read_text()))


# --- Pod Security Standards: which namespace level each configuration needs ---------------------------------

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}


def pod_security_level(pod: dict[str, Any]) -> str:
    """The strictest Pod Security Standards level (restricted, baseline, privileged) the pod meets,
    by the standards' rules for the fields a pod spec of this chart can carry."""
    containers = pod["containers"] + pod.get("initContainers", [])
    contexts = [container.get("securityContext", {}) for container in containers]
    pod_context = pod.get("securityContext", {})
    volume_kinds = {key for volume in pod["volumes"] for key in volume if key != "name"}
    baseline = (
        not any(pod.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
        and not any(context.get("privileged") for context in contexts)
        and all(set(context.get("capabilities", {}).get("add", [])) <= BASELINE_CAPABILITIES for context in contexts)
        and "hostPath" not in volume_kinds
        and not any(port.get("hostPort") for container in containers for port in container.get("ports", []))
        and all(context.get("seccompProfile", {}).get("type") != "Unconfined" for context in [pod_context, *contexts])
    )
    if not baseline:
        return "privileged"

    def effective(key: str, context: dict[str, Any]) -> Any:
        return context.get(key, pod_context.get(key))

    restricted = (
        volume_kinds <= RESTRICTED_VOLUMES
        and all(context.get("allowPrivilegeEscalation") is False for context in contexts)
        and all(effective("runAsNonRoot", context) is True and effective("runAsUser", context) != 0 for context in contexts)
        and all((effective("seccompProfile", context) or {}).get("type") in ("RuntimeDefault", "Localhost") for context in contexts)
        and all("ALL" in context.get("capabilities", {}).get("drop", []) and set(context.get("capabilities", {}).get("add", [])) <= {"NET_BIND_SERVICE"} for context in contexts)
    )
    return "restricted" if restricted else "baseline"


@pytest.mark.parametrize(("values", "level"), [
    ({}, "privileged"),  # the kubelet's pod-resources socket is a hostPath
    ({"podResources": {"enabled": False}}, "restricted"),
    ({"podResources": {"enabled": False}, "webConfig": {"existingSecret": "web", "tls": True}, "dcgm": {"enabled": True}, "networkPolicy": {"enabled": True}}, "restricted"),
    ({"podResources": {"enabled": False}, "hostPID": True}, "privileged"),
    ({"podResources": {"enabled": False}, "profilingAdmin": True}, "privileged"),
    ({"podResources": {"enabled": False}, "hostDriver": {"enabled": True}}, "privileged"),
])
def test_pod_security_level_each_configuration_needs(values: dict[str, Any], level: str) -> None:
    assert pod_security_level(pod_spec(render(values))) == level


def test_the_plain_manifests_namespace_admits_the_daemonset() -> None:
    (namespace,) = documents((ROOT / "deploy" / "kubernetes" / "namespace.yaml").read_text())
    (daemonset,) = documents((ROOT / "deploy" / "kubernetes" / "daemonset.yaml").read_text())
    needed = pod_security_level(daemonset["spec"]["template"]["spec"])
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == needed == "privileged"


SERVICE = "Service/gpueff-gpu-efficiency-exporter"


def test_service_type_cluster_ip_and_traffic_policy() -> None:
    default = render()[SERVICE]["spec"]
    assert default["type"] == "ClusterIP" and "clusterIP" not in default and "internalTrafficPolicy" not in default, "headless only when asked"
    headless = render({"service": {"clusterIP": "None", "internalTrafficPolicy": "Local"}})[SERVICE]["spec"]
    assert headless["clusterIP"] == "None" and headless["internalTrafficPolicy"] == "Local"
    node_port = render({"service": {"type": "NodePort", "nodePort": 30947}})[SERVICE]["spec"]
    assert node_port["type"] == "NodePort" and node_port["ports"][0]["nodePort"] == 30947
    assert "nodePort" not in render({"service": {"type": "LoadBalancer", "nodePort": 30947}})[SERVICE]["spec"]["ports"][0]
    validate_all([render({"service": {"type": "NodePort", "nodePort": 30947}})[SERVICE]])
    with pytest.raises(helm.HelmError, match="headless"):
        render({"service": {"type": "NodePort", "clusterIP": "None"}})
    for wrong in ({"type": "ExternalName"}, {"internalTrafficPolicy": "Nearest"}, {"clusterIP": "any"}, {"nodePort": 40000}):
        with pytest.raises(helm.HelmError):
            render({"service": wrong})


def test_prometheus_io_annotations_on_the_service_or_the_pods() -> None:
    expected = {"prometheus.io/scrape": "true", "prometheus.io/port": "9947", "prometheus.io/path": "/metrics", "prometheus.io/scheme": "http"}
    objects = render({"prometheusAnnotations": {"enabled": True}, "service": {"annotations": {"prometheus.io/path": "/custom", "team": "ml"}}})
    assert objects[SERVICE]["metadata"]["annotations"] == {**expected, "prometheus.io/path": "/custom", "team": "ml"}, "the user's annotations win"
    assert not set(expected) & set(objects[DAEMONSET]["spec"]["template"]["metadata"]["annotations"])
    pods = render({"prometheusAnnotations": {"enabled": True, "target": "pod"}, "webConfig": {"existingSecret": "mine", "tls": True}})
    assert pods[DAEMONSET]["spec"]["template"]["metadata"]["annotations"].items() >= {**expected, "prometheus.io/scheme": "https"}.items()
    assert "annotations" not in pods[SERVICE]["metadata"]
    assert "annotations" not in render()[SERVICE]["metadata"]
    with pytest.raises(helm.HelmError, match="scraped twice"):
        render({"prometheusAnnotations": {"enabled": True}, "serviceMonitor": {"enabled": True}})
    with pytest.raises(helm.HelmError, match="needs service.enabled"):
        render({"prometheusAnnotations": {"enabled": True}, "service": {"enabled": False}})


def test_daemonset_annotations_and_dns_policy() -> None:
    objects = render({"daemonsetAnnotations": {"reloader.stakater.com/auto": "true"}})
    assert objects[DAEMONSET]["metadata"]["annotations"] == {"reloader.stakater.com/auto": "true"}
    assert "annotations" not in render()[DAEMONSET]["metadata"]
    assert "dnsPolicy" not in pod_spec(render())
    assert pod_spec(render({"hostNetwork": True}))["dnsPolicy"] == "ClusterFirstWithHostNet"
    custom = pod_spec(render({"hostNetwork": True, "dnsPolicy": "None", "dnsConfig": {"nameservers": ["10.0.0.10"]}}))
    assert custom["dnsPolicy"] == "None" and custom["dnsConfig"] == {"nameservers": ["10.0.0.10"]}
    with pytest.raises(helm.HelmError):
        render({"dnsPolicy": "Anything"})


def test_monitor_api_version_and_attach_metadata() -> None:
    objects = render({"serviceMonitor": {"enabled": True, "attachMetadata": {"node": True}}})
    assert objects[MONITOR]["apiVersion"] == "monitoring.coreos.com/v1" and objects[MONITOR]["spec"]["attachMetadata"] == {"node": True}
    validate_all([objects[MONITOR]])
    assert "attachMetadata" not in render({"serviceMonitor": {"enabled": True}})[MONITOR]["spec"]
    pods = render({"podMonitor": {"enabled": True, "attachMetadata": {"node": True}}})
    assert pods[POD_MONITOR]["spec"]["attachMetadata"] == {"node": True}
    validate_all([pods[POD_MONITOR]])
    later = render({"serviceMonitor": {"enabled": True, "apiVersion": "monitoring.coreos.com/v1beta1"}})
    assert later[MONITOR]["apiVersion"] == "monitoring.coreos.com/v1beta1"
    with pytest.raises(helm.HelmError):
        render({"serviceMonitor": {"enabled": True, "apiVersion": "example.com/v1"}})


def test_image_pull_secrets_and_global_registry_reach_the_exporter_and_the_test_pod() -> None:
    objects = render({"imagePullSecrets": [{"name": "mirror"}], "global": {"imageRegistry": "mirror.internal"}})
    for pod in (pod_spec(objects), objects["Pod/gpueff-gpu-efficiency-exporter-test"]["spec"]):
        assert pod["imagePullSecrets"] == [{"name": "mirror"}]
        assert pod["containers"][0]["image"] == "mirror.internal/gpu-efficiency-exporter/gpu-efficiency-exporter:0.1.0"


CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))


def test_chart_testing_values_files_exist() -> None:
    assert {path.name for path in CI_VALUES} >= {"default-values.yaml", "kube-prometheus-stack-values.yaml", "prometheus-annotations-values.yaml", "nonroot-hostnetwork-values.yaml", "podmonitor-tls-values.yaml", "dcgm-values.yaml"}
    assert not [path for path in (CHART / "ci").iterdir() if not path.name.endswith("-values.yaml")], "ct reads only *-values.yaml"


@pytest.mark.parametrize("path", CI_VALUES, ids=lambda path: path.name)
def test_chart_testing_values_lint_strict_and_render_valid_objects(path: Path) -> None:
    """What `ct lint` and `ct install` do per file in ci/: helm lint --strict, then install; here,
    the rendered objects validated against the Kubernetes and Prometheus Operator schemas."""
    values = yaml.safe_load(path.read_text()) or {}
    report = helm.lint(str(CHART), values, strict=True, kube_version="v1.30.0")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report
    objects = render(values)
    checked = validate_all(obj for key, obj in objects.items() if key != "NOTES")
    assert DAEMONSET in checked


def test_log_level_and_format_reach_the_daemon() -> None:
    args = daemon_parser().parse_args(pod_spec(render({"logLevel": "warn", "logFormat": "json"}))["containers"][0]["args"])
    assert (args.log_level, args.log_format) == ("warn", "json")
    assert daemon_parser().parse_args(pod_spec(render())["containers"][0]["args"]).log_format == "logfmt"
    with pytest.raises(helm.HelmError):
        render({"logFormat": "text"})
