"""Pod labels copied onto GPU series (kubernetes.pod_label_keys): the allow-list's checks, the label
names and bounds, and the daemon's series with a real gRPC kubelet stand-in and an HTTPS API server
stand-in."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import running_daemon
from fakes.kube_api import FakeApiServer
from fakes.kubelet import FakeKubelet, pod
from waiting import wait_until

from gpueff.attribution.kubernetes.podlabels import label_name, pod_labels
from gpueff.config.engine import ConfigError
from gpueff.metrics import METRICS, SCOPE_LABELS
from gpueff.settings import parse_config

NODE = "gpu-node-1"


def pods_list(*pods: tuple[str, str, dict[str, object]]) -> dict[str, object]:
    return {"kind": "PodList", "items": [{"metadata": {"namespace": namespace, "name": name, "labels": labels}} for namespace, name, labels in pods]}


@pytest.fixture
def socket_dir():
    path = Path(tempfile.mkdtemp(prefix="kl", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_allow_list_is_checked_when_the_config_is_loaded():
    keys = parse_config({"kubernetes": {"pod_label_keys": ["app.kubernetes.io/name", "team", "7days"]}}).kubernetes.pod_label_keys
    assert [label_name(key) for key in keys] == ["app_kubernetes_io_name", "team", "_7days"]
    for keys, reason in (([f"k{n}" for n in range(11)], "at most 10"), (["pod"], "already sets"), (["uuid"], "already sets"),
                         (["a.b", "a_b"], "would both be the label 'a_b'"), (["bad key!"], "not a Kubernetes label key"), ("team", "list of pod label keys")):
        with pytest.raises(ConfigError, match=rf"kubernetes\.pod_label_keys.*{reason}"):
            parse_config({"kubernetes": {"pod_label_keys": keys}})


def test_every_label_name_the_exporter_uses_is_refused_as_a_pod_label():
    """A pod label under a name one of the exporter's series has already makes that label appear
    twice (promtool fails, Prometheus marks the whole target down): every name the catalogue gives
    any series is refused, found from the catalogue itself, not from a list kept beside it."""
    used = {name for metric in METRICS for name in (*SCOPE_LABELS[metric.scope], *metric.labels)}
    assert {"pipe", "job_id", "user_id", "backend", "version", "replayed", "meaning", "what_to_try"} <= used
    for name in sorted(used | {"job", "instance", "le", "quantile"}):
        with pytest.raises(ConfigError, match=rf"kubernetes\.pod_label_keys.*would be the label '{name}', which the exporter or Prometheus already sets"):
            parse_config({"kubernetes": {"pod_label_keys": [name]}})
    with pytest.raises(ConfigError, match="would be the label 'what_to_try'"):
        parse_config({"kubernetes": {"pod_label_keys": ["what-to-try"]}})  # its Prometheus form clashes


def test_a_value_no_page_can_encode_costs_only_that_value():
    # JSON's "\ud800" is a lone surrogate: before, encoding it raised and every pod of the node lost its labels.
    answer = pods_list(("ml", "bad", {"team": "s\ud800x"}), ("ml", "good", {"team": "vision"}))
    found = pod_labels(answer, ("team",))
    assert found[("ml", "good")] == (("team", "vision"),)
    assert found[("ml", "bad")] == (("team", "s\\xed\\xa0\\x80x"),)
    assert all(value.encode() for pairs in found.values() for _, value in pairs)


def test_only_allow_listed_labels_are_taken_and_values_are_bounded():
    answer = pods_list(("ml", "trainer-0", {"team": "vision", "secret-ish": "x", "app.kubernetes.io/name": "trainer"}),
                       ("ml", "no-labels", {}), ("ml", "long", {"team": "v" * 500}), ("ml", "odd", {"team": 5}))
    answer["items"] += [None, {"metadata": "x"}, {"metadata": {"namespace": "ml", "name": 3}}]  # type: ignore[operator]
    found = pod_labels(answer, ("team", "app.kubernetes.io/name"))
    assert found[("ml", "trainer-0")] == (("app_kubernetes_io_name", "trainer"), ("team", "vision"))
    assert found[("ml", "long")] == (("team", "v" * 128),)
    assert set(found) == {("ml", "trainer-0"), ("ml", "long")}


def test_the_daemon_copies_allow_listed_pod_labels_onto_the_gpu_series(socket_dir, tmp_path):
    pods = [pod("ml", "trainer-0", {"main": {"nvidia.com/gpu": ["GPU-replay-2-matmul_8192"]}}),
            pod("web", "infer-a", {"server": {"nvidia.com/gpu": ["GPU-replay-0-copy_2GB::0"]}}),
            pod("web", "infer-b", {"server": {"nvidia.com/gpu": ["GPU-replay-0-copy_2GB::1"]}})]
    answer = pods_list(("ml", "trainer-0", {"team": "vision", "app.kubernetes.io/name": "trainer", "pod-template-hash": "abc"}),
                       ("web", "infer-a", {"team": "search"}), ("web", "infer-b", {"team": "search"}))
    config = tmp_path / "config.yml"
    with FakeApiServer(tmp_path, {"/api/v1/pods": answer}) as api, FakeKubelet(socket_dir / "kubelet.sock", pods):
        config.write_text(f"kubernetes:\n  enabled: true\n  pod_resources_socket: {socket_dir / 'kubelet.sock'}\n  node_name: {NODE}\n"
                          f"  service_account_dir: {api.service_account}\n  pod_label_keys: [team, app.kubernetes.io/name]\n  timeout: 10s\n")
        with running_daemon("--demo", "--config", str(config), "--collect-interval", "200ms", env=api.environment()) as daemon:
            # The first poll waits 1 s at most for the kubelet's and the API server's answers: the
            # labels come with a later one on a busy machine.
            body = wait_until(lambda: next((page for page in [daemon.metrics()] if 'team="vision"' in page), None), "the pod labels on the GPU series")
    sm = [line for line in body.splitlines() if line.startswith("gpueff_sm_active_ratio{") and 'gpu="2"' in line]
    assert sm and sm[0].startswith('gpueff_sm_active_ratio{gpu="2",uuid="GPU-replay-2-matmul_8192",namespace="ml",pod="trainer-0",container="main",'
                                   'app_kubernetes_io_name="trainer",team="vision"} ')
    assert "pod_template_hash" not in body
    shared = [line for line in body.splitlines() if line.startswith("gpueff_gpu_up{") and 'gpu="0"' in line]
    assert shared == ['gpueff_gpu_up{gpu="0",uuid="GPU-replay-0-copy_2GB"} 1']  # shared: no pod labels, copied ones neither
    assert api.requests and all(request == ("/api/v1/pods", {"fieldSelector": [f"spec.nodeName={NODE}"]}) for request in api.requests)
