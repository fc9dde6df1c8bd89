"""Owners declared for replayed GPUs (gpueff/trace_owners.py): the demo's file loads and names
only demo traces, a hostile file is refused naming the entry and the key, and on --demo the owners
reach every series a cluster's do, marked as demo data, from the declaration alone (never /proc)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from fakes.kubelet import FakeKubelet, pod
from fakes.proc import process
from prometheus_client.parser import text_string_to_metric_families

from gpueff.backends.replay import DECLARED_PID_BASE, ReplayBackend
from gpueff.exposition.render import render
from gpueff.poller import Poller
from gpueff.settings import parse_config
from gpueff.trace import demo_trace_paths, load_trace
from gpueff.trace_owners import (
    DEMO_OWNERS,
    DeclaredOwner,
    OwnersError,
    demo_owners,
    load_owners,
    owners_of,
    parse_owners,
)

UID = "c5be6b20-b934-50f8-ae90-5c607280f0b7"
GOOD = {"trace": "h200/idle.json", "pod": {"namespace": "notebooks", "pod": "jupyter-alice-0", "container": "notebook", "uid": UID}}


def owners(*entries: object) -> dict[str, DeclaredOwner]:
    return parse_owners({"format": "gpu-owners/1", "gpus": list(entries)}, "owners.json")


def test_the_demo_declares_pods_slurm_jobs_and_users_and_leaves_one_gpu_free() -> None:
    paths = demo_trace_paths()
    declared = demo_owners(paths)
    assert len(declared) == len(paths) == 20
    free = [path.name for path, owner in zip(paths, declared, strict=True) if owner is None]
    assert free == ["idle.json"] and paths[7].parent.name == "h100"
    kinds = {owner.kind for owner in declared if owner is not None}
    assert kinds == {"pod", "slurm_job", "user"}
    description = json.loads(DEMO_OWNERS.read_text())["description"]
    assert description.startswith("MADE-UP OWNERS for --demo") and "Demo data, not real owners" in description


@pytest.mark.parametrize(("entry", "said"), [
    ({"trace": "h200/idle.json"}, "gpus[0]: exactly one owner of pod, slurm_job, user is needed, got 0"),
    ({**GOOD, "user": {"uid": 1}}, "exactly one owner of pod, slurm_job, user is needed, got 2"),
    ({**GOOD, "extra": 1}, "gpus[0]: unknown key 'extra'"),
    ({**GOOD, "pod": {**GOOD["pod"], "namespace": "Not_A_Label"}}, "gpus[0].pod: namespace must be a DNS-1123 label"),
    ({**GOOD, "pod": {**GOOD["pod"], "pod": "x" * 300}}, "gpus[0].pod: pod must be a DNS-1123 subdomain"),
    ({**GOOD, "pod": {k: v for k, v in GOOD["pod"].items() if k != "uid"}}, "gpus[0].pod: missing key 'uid'"),
    ({**GOOD, "process": "a\x1b[2J"}, "process must be a process name of 1 to 15"),
    ({**GOOD, "trace": "../../etc/passwd"}, "trace must be a trace's path under gpueff/traces/"),
    ({"trace": "h200/idle.json", "user": {"uid": True}}, "gpus[0].user: uid must be a whole number from 0 to 4294967295, got True"),
    ({"trace": "h200/idle.json", "user": {"uid": -1}}, "uid must be a whole number"),
    ({"trace": "h200/idle.json", "slurm_job": {"id": "48213"}}, "gpus[0].slurm_job: id must be a whole number"),
    ("h200/idle.json", "gpus[0]: expected an object, got 'h200/idle.json'"),
])
def test_a_hostile_entry_is_refused_naming_the_entry_and_the_key(entry: object, said: str) -> None:
    with pytest.raises(OwnersError, match="^owners.json: ") as error:
        owners(entry)
    assert said in str(error.value)


def test_a_hostile_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(OwnersError, match="format must be 'gpu-owners/1'"):
        parse_owners({"format": "gpu-trace/1", "gpus": []}, "x")
    with pytest.raises(OwnersError, match="named twice"):
        owners(GOOD, GOOD)
    with pytest.raises(OwnersError, match="gpus must be a list of at most 1024"):
        parse_owners({"format": "gpu-owners/1", "gpus": [GOOD] * 1025}, "x")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (300 * 1024))
    with pytest.raises(OwnersError, match=f"owners file {big}: 307200 bytes is over the 262144 byte limit"):
        load_owners(big)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(OwnersError, match=f"owners file {bad}: Expecting"):
        load_owners(bad)
    with pytest.raises(OwnersError, match="cannot read it"):
        load_owners(tmp_path / "none.json")
    root = DEMO_OWNERS.parent
    with pytest.raises(OwnersError, match="the owners name a trace that is not replayed: 'h200/idle.json'"):
        owners_of([root / "h200" / "copy_2GB.json"], owners(GOOD), root)


def test_owned_gpus_list_one_process_no_real_one_can_be_and_unowned_ones_none() -> None:
    paths = demo_trace_paths()
    backend = ReplayBackend([load_trace(path) for path in paths], owners=demo_owners(paths))
    backend.start()
    samples = backend.collect()
    assert samples[7].processes == () and all(len(sample.processes or ()) == 1 for index, sample in enumerate(samples) if index != 7)
    assert all(process.pid > 1 << 22 for sample in samples for process in sample.processes or ())
    assert set(backend.declared_owners()) == {sample.device.uuid for index, sample in enumerate(samples) if index != 7}
    plain = ReplayBackend([load_trace(path) for path in paths[:2]])
    plain.start()
    assert [sample.processes for sample in plain.collect()] == [None, None] and plain.declared_owners() == {}


def demo_series(config: dict[str, object], polls: int = 6) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    now = [100.0]
    paths = demo_trace_paths()
    backend = ReplayBackend([load_trace(path) for path in paths], clock=lambda: now[0], owners=demo_owners(paths))
    backend.start()
    poller = Poller(backend, parse_config(config), clock=lambda: now[0])
    for _ in range(polls):
        now[0] += 1.0
        snapshot = poller.poll_once()
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for family in text_string_to_metric_families(render(snapshot).decode()):
        for sample in family.samples:
            found[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return found


def labels_of(found: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str, gpu: str) -> list[dict[str, str]]:
    return [dict(key) for key in found[name] if dict(key)["gpu"] == gpu]


def test_on_the_demo_the_owners_reach_every_series_a_clusters_do_from_the_declaration_alone(tmp_path: Path) -> None:
    # A real process on this machine with the PID of GPU 1's declared process, in another tenant's pod: never read.
    victim = "0::/kubepods.slice/kubepods-pod0d0d0d0d_0d0d_0d0d_0d0d_0d0d0d0d0d0d.slice/cri-containerd-" + "b" * 64 + ".scope"
    process(tmp_path / "proc", DECLARED_PID_BASE + 1, "intruder", cgroup=victim)
    found = demo_series({"proc_root": str(tmp_path / "proc"), "price_per_gpu_hour": 4.0})
    notebook = labels_of(found, "gpueff_gpu_pod_info", "1")
    assert [(each["namespace"], each["pod"], each["container"]) for each in notebook] == [("notebooks", "jupyter-alice-0", "notebook")]
    assert all(each.get("pod") == "jupyter-alice-0" for each in labels_of(found, "gpueff_gpu_up", "1"))  # pod labels on every series
    holders = {(each["holder_kind"], each["holder"]) for each in labels_of(found, "gpueff_holder_busy_seconds_total", "1")}
    assert holders == {("pod", UID)}
    assert {(each["job_id"], each["user_id"]) for each in labels_of(found, "gpueff_gpu_job_info", "13")} == {("48213", "2001")}
    assert {each["holder"] for each in labels_of(found, "gpueff_holder_busy_seconds_total", "3")} == {"1003:python3"}
    attribution = {dict(key)["gpu"]: (dict(key)["path"], dict(key)["reason"]) for key in found["gpueff_gpu_attribution_info"]}
    assert attribution.pop("7") == ("none", "no_process") and set(attribution.values()) == {("demo", "ok")}
    held_idle = found["gpueff_holder_state_seconds_total"][(("gpu", "1"), ("holder", UID), ("holder_kind", "pod"), ("state", "held_idle"), ("uuid", "GPU-replay-1-idle"))]
    assert held_idle == pytest.approx(5.0)
    free = next(value for key, value in found["gpueff_gpu_state_seconds_total"].items() if dict(key)["gpu"] == "7" and dict(key)["state"] == "free")
    assert free == pytest.approx(5.0)
    cost = next(value for key, value in found["gpueff_holder_state_cost_total"].items() if dict(key)["gpu"] == "1" and dict(key)["state"] == "held_idle")
    assert cost == pytest.approx(5.0 * 4.0 / 3600)


def test_a_kubelets_answer_wins_on_the_gpus_it_names_and_the_declared_pods_stay_elsewhere(tmp_path: Path) -> None:
    socket_path = Path(tempfile.mkdtemp(prefix="kl", dir="/tmp")) / "kubelet.sock"
    try:
        with FakeKubelet(socket_path, [pod("ml", "trainer-0", {"main": {"nvidia.com/gpu": ["GPU-replay-1-idle"]}})]):
            found = demo_series({"kubernetes": {"enabled": True, "pod_resources_socket": str(socket_path)}}, polls=2)
    finally:
        shutil.rmtree(socket_path.parent, ignore_errors=True)
    assert [(each["namespace"], each["pod"]) for each in labels_of(found, "gpueff_gpu_pod_info", "1")] == [("ml", "trainer-0")]
    assert [(each["namespace"], each["pod"]) for each in labels_of(found, "gpueff_gpu_pod_info", "4")] == [("research", "sweep-lr-3e4-0")]
    attribution = {dict(key)["gpu"]: dict(key)["path"] for key in found["gpueff_gpu_attribution_info"]}
    assert attribution["1"] == "kubelet" and attribution["4"] == "demo"
