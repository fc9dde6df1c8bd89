"""The ``kubernetes:`` config section (pod attribution); plain data, importable without grpc."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from gpueff.attribution.kubernetes.podlabels import pod_label_keys
from gpueff.config.engine import SettingError, setting
from gpueff.config.values import (
    absolute_path,
    boolean,
    format_duration,
    min_duration,
    one_of,
    resource_patterns,
    shown,
    whole_number,
)

POD_LABEL_MODES = ("every_series", "info_only")
MAX_MESSAGE_BYTES = (1 << 31) - 1  # grpc.max_receive_message_length is a C int: larger overflows on every call
# Kubernetes' own name rules (RFC 1123): a label (namespaces, containers) at most 63 characters, a
# subdomain (pods, nodes, DRA drivers) at most 253. Check the length first: the patterns backtrack.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def dra_drivers(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and len(item) <= 253 and DNS_SUBDOMAIN.fullmatch(item) for item in value):
        raise ValueError(f"expected a list of DRA driver names (DNS subdomains such as gpu.nvidia.com), got {shown(value)}")
    return tuple(value)


def node_name(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 253 or (value and not DNS_SUBDOMAIN.fullmatch(value)):
        raise ValueError(f"expected a Kubernetes node name, got {shown(value)}")
    return value


@dataclass(frozen=True)
class KubernetesConfig:
    """Pod attribution on Kubernetes (see docs/kubernetes.md)."""

    enabled: bool = setting(False, boolean, "label each GPU's series with the pod, namespace and container the kubelet assigned it to")
    pod_resources_socket: str = setting("/var/lib/kubelet/pod-resources/kubelet.sock", absolute_path, "the kubelet pod-resources API socket")
    refresh_interval: float = setting(10.0, min_duration(1.0), "how often the kubelet is asked, off the poll thread (1s to 1h; never per scrape)")
    timeout: float = setting(1.0, min_duration(0.01), "a List call that takes longer fails (at most refresh_interval)")
    max_message_bytes: int = setting(16 * 1024 * 1024, whole_number(MAX_MESSAGE_BYTES, "gRPC takes a 32-bit signed limit"), "a larger List response fails the call (at most 2 GiB - 1)")
    resource_names: tuple[str, ...] = setting(("nvidia.com/gpu", "nvidia.com/mig-*"), resource_patterns, "extended resources whose device ids are GPU or MIG UUIDs")
    process_attribution: bool = setting(False, boolean, "also attribute GPU processes to pods through /proc/<pid>/cgroup (needs hostPID)")
    dra_drivers: tuple[str, ...] = setting((), dra_drivers, "DRA drivers whose devices are GPUs (gpu.nvidia.com): GPUs allocated through ResourceClaims are attributed like device-plugin ones, their UUIDs read from this node's ResourceSlices on the API server (needs list on resourceslices); empty: off")
    node_name: str = setting("", node_name, "this node's name, to read only its ResourceSlices (default: the NODE_NAME environment variable, which the chart sets)")
    service_account_dir: str = setting("/var/run/secrets/kubernetes.io/serviceaccount", absolute_path, "where the pod's service-account token and the cluster CA are, for the API server calls")
    pod_label_keys: tuple[str, ...] = setting((), pod_label_keys, "pod labels copied onto the series of the GPUs a pod holds (dcgm-exporter's enablePodLabels): at most 10 keys, each under its Prometheus form (app.kubernetes.io/name -> app_kubernetes_io_name), values cut to 128 characters; read from the API server (needs list on pods)")
    pod_labels: str = setting("every_series", one_of(POD_LABEL_MODES), "every_series: a GPU held by one container carries namespace, pod and container on all its series; info_only: only on gpueff_gpu_pod_info, so a GPU's series keep their identity when its pod changes (docs/sharing.md)")

    @property
    def effective_node_name(self) -> str:
        return self.node_name or os.environ.get("NODE_NAME", "")

    def check(self) -> None:
        if self.timeout > self.refresh_interval:
            raise SettingError("timeout", f"must not exceed refresh_interval ({format_duration(self.refresh_interval)}), got {format_duration(self.timeout)}")
