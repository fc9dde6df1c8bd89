"""The ServiceMonitor's label handling, run by a real Prometheus scraping a real daemon whose GPUs a
real gRPC pod-resources server attributes to pods.

The Prometheus Operator gives each target the labels namespace, pod and container of the exporter
pod; the scrape config here gives the target the same ones, then applies the ServiceMonitor's own
honorLabels and relabelings (read from deploy/kubernetes/servicemonitor.yaml). The result must be:
GPUs a pod holds carry that pod's labels; GPUs no pod holds carry none (not the exporter pod's).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, free_port, http_get, running_daemon
from fakes.kubelet import FakeKubelet, pod
from kube_schemas import documents
from waiting import PATIENCE

pytestmark = pytest.mark.e2e  # the prometheus-operator's relabelling in a real Prometheus

PROMETHEUS = shutil.which("prometheus")
DEMO_GPUS = 20  # 6 planted (H200) + 12 real workloads (H100) + a 2-GPU job (H200)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def relabel_configs(endpoint: dict) -> list[dict]:
    """The ServiceMonitor's relabelings in prometheus.yml spelling (sourceLabels -> source_labels)."""
    return [{snake(key): value for key, value in rule.items()} for rule in endpoint.get("relabelings", [])]


def query(port: int, expr: str) -> list[dict]:
    status, body = http_get(f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(expr)}")
    assert status == 200, body
    return json.loads(body)["data"]["result"]


@pytest.mark.skipif(PROMETHEUS is None, reason="tests/run.sh installs the Debian package prometheus")
def test_pod_labels_survive_the_servicemonitor_and_exporter_pod_labels_do_not(tmp_path: Path) -> None:
    (monitor,) = documents((ROOT / "deploy" / "kubernetes" / "servicemonitor.yaml").read_text())
    (endpoint,) = monitor["spec"]["endpoints"]
    socket_dir = Path(tempfile.mkdtemp(prefix="kl", dir="/tmp"))
    socket_path = socket_dir / "kubelet.sock"
    config = tmp_path / "config.yml"
    config.write_text(f"kubernetes:\n  enabled: true\n  pod_resources_socket: {socket_path}\n")
    pods = [
        pod("ml", "trainer-0", {"main": {"nvidia.com/gpu": ["GPU-replay-2-matmul_8192"]}}),
        pod("web", "infer-a", {"server": {"nvidia.com/gpu": ["GPU-replay-0-copy_2GB::0"]}}),
        pod("web", "infer-b", {"server": {"nvidia.com/gpu": ["GPU-replay-0-copy_2GB::1"]}}),
    ]
    prometheus_port = free_port()
    try:
        with FakeKubelet(socket_path, pods), running_daemon("--demo", "--config", str(config)) as daemon:
            scrape = {
                "job_name": "gpu-efficiency-exporter",
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "metrics_path": endpoint["path"],
                "honor_labels": endpoint["honorLabels"],
                "static_configs": [{
                    "targets": [f"127.0.0.1:{daemon.port}"],
                    # What the operator derives from the endpoint's pod.
                    "labels": {"namespace": "monitoring", "pod": "gpu-efficiency-exporter-x7k2p", "container": "exporter", "__meta_kubernetes_pod_node_name": "gpu-node-1"},
                }],
                "relabel_configs": relabel_configs(endpoint),
            }
            (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": [scrape]}))
            log = (tmp_path / "prometheus.log").open("w")
            prometheus = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prometheus_port}"], stdout=log, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + PATIENCE
                series: list[dict] = []
                joined: list[dict] = []
                while time.monotonic() < deadline and (len(series) < DEMO_GPUS or len(joined) < 3):
                    assert prometheus.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
                    with contextlib.suppress(OSError, KeyError, ValueError, AssertionError):
                        series = query(prometheus_port, "gpueff_gpu_up")
                        # docs/kubernetes.md: one series per (GPU, holder), shared GPUs included.
                        joined = query(prometheus_port, "gpueff_sm_active_ratio * on (uuid) group_right gpueff_gpu_pod_info")
                    time.sleep(0.3)
            finally:
                prometheus.terminate()
                prometheus.wait(PATIENCE)
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)
    labels = {item["metric"]["uuid"]: item["metric"] for item in series}
    assert len(labels) == DEMO_GPUS, series
    held = labels["GPU-replay-2-matmul_8192"]
    assert (held["namespace"], held["pod"], held["container"], held["node"]) == ("ml", "trainer-0", "main", "gpu-node-1")
    # The kubelet's answer wins on the GPUs it names; the demo's declared pods stay on the others.
    named = {"GPU-replay-0-copy_2GB", "GPU-replay-2-matmul_8192"}
    assert sorted((item["metric"]["uuid"], item["metric"]["pod"]) for item in joined if item["metric"]["uuid"] in named) == [
        ("GPU-replay-0-copy_2GB", "infer-a"), ("GPU-replay-0-copy_2GB", "infer-b"), ("GPU-replay-2-matmul_8192", "trainer-0"),
    ]
    shared = labels["GPU-replay-0-copy_2GB"]
    assert not {"namespace", "pod", "container"} & set(shared), shared  # two holders: see gpueff_gpu_pod_info
    free = next(metric for metric in labels.values() if metric["gpu"] == "7")  # the demo's free GPU (no declared owner)
    assert free["node"] == "gpu-node-1"
    # The node is the instance: a replaced exporter pod (new IP) keeps the node's series.
    assert {item["metric"]["instance"] for item in series} == {"gpu-node-1"}
    assert not {"namespace", "pod", "container"} & set(free), free
