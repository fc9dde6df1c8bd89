"""Process attribution through /proc/<pid>/cgroup, on a fake /proc tree written by the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpueff.attribution.cgroup import owner_of_cgroup_line, process_owner
from gpueff.attribution.kubernetes.attribution import Attributor
from gpueff.attribution.kubernetes.owners import ProcessOwner
from gpueff.sample import DeviceInfo, GpuProcess, GpuSample
from gpueff.settings import parse_config

UID = "0c3e2b1a-7f64-4d2b-9a51-3c2d1e0f9a8b"
CID = "4f1a" * 16
CID2 = "9b2c" * 16

CGROUP_FILES = {
    # cgroup v2, systemd driver, containerd
    "v2-systemd-containerd": f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
    # cgroup v2 seen from inside the exporter's own cgroup namespace (relative path)
    "v2-namespaced-crio": f"0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope\n",
    # cgroup v1, cgroupfs driver, docker (every controller names the pod)
    "v1-cgroupfs-docker": "".join(f"{n}:{c}:/kubepods/burstable/pod{UID}/{CID}\n" for n, c in ((12, "memory"), (11, "cpu,cpuacct"), (1, "name=systemd"))),
    # guaranteed QoS class: no QoS level in the path
    "v1-systemd-guaranteed": f"4:pids:/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/docker-{CID}.scope\n",
}


@pytest.mark.parametrize("name", sorted(CGROUP_FILES))
def test_pod_and_container_read_from_each_layout(name: str, tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(CGROUP_FILES[name])
    assert process_owner(42, tmp_path) == ProcessOwner(UID, CID)


def test_processes_outside_pods_and_gone_ones_have_no_owner(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text("0::/system.slice/slurmd.service\n")
    assert process_owner(7, tmp_path) is None
    assert process_owner(8, tmp_path) is None  # exited between NVML's list and the read


def test_pod_level_cgroup_without_container_scope() -> None:
    assert owner_of_cgroup_line(f"0::/kubepods/besteffort/pod{UID}") == ProcessOwner(UID, "")


def _proc_tree(root: Path, pids: dict[int, str]) -> None:
    for pid, cgroup in pids.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "cgroup").write_text(cgroup)


def test_attributor_counts_gpu_processes_per_container(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    _proc_tree(proc, {
        100: f"0::/kubepods/pod{UID}/{CID}\n",
        101: f"0::/kubepods/pod{UID}/{CID}\n",
        102: f"0::/kubepods/pod{UID}/{CID2}\n",
        200: "0::/user.slice/user-1000.slice/session-3.scope\n",
    })
    settings = parse_config({"kubernetes": {"enabled": True, "pod_resources_socket": str(tmp_path / "absent.sock"), "process_attribution": True}}).kubernetes
    device = DeviceInfo(index=0, uuid="GPU-a", name="NVIDIA H100 80GB HBM3")
    idle = DeviceInfo(index=1, uuid="GPU-b", name="NVIDIA H100 80GB HBM3")
    samples = [
        GpuSample(device=device, timestamp=0.0, processes=tuple(GpuProcess(pid, "python") for pid in (100, 101, 102, 200, 999))),
        GpuSample(device=idle, timestamp=0.0, processes=()),
    ]
    attributor = Attributor()
    owners = attributor.owners(settings, samples, now=0.0, proc_root=proc)
    assert set(owners) == {"GPU-a"}
    assert owners["GPU-a"].processes == ((ProcessOwner(UID, CID), 2), (ProcessOwner(UID, CID2), 1))
    assert owners["GPU-a"].pods == ()
    # Off unless asked for: without hostPID the PIDs NVML reports are not the ones in /proc.
    plain = parse_config({"kubernetes": {"enabled": True, "pod_resources_socket": str(tmp_path / "absent.sock")}}).kubernetes
    assert Attributor().owners(plain, samples, now=0.0, proc_root=proc) == {}


def test_process_owners_are_exposed_per_gpu() -> None:
    from gpueff.attribution.kubernetes.owners import GpuOwners
    from gpueff.exposition.render import render_pods
    from gpueff.pipeline.totals import Totals
    from gpueff.snapshot import GpuState

    device = DeviceInfo(index=3, uuid="GPU-a", name="NVIDIA H100 80GB HBM3")
    state = GpuState(GpuSample(device=device, timestamp=0.0), None, Totals(), GpuOwners(processes=((ProcessOwner(UID, CID), 2),)))
    lines = render_pods([state])
    assert lines[0].startswith("# HELP gpueff_pod_compute_processes ")
    assert lines[2] == f'gpueff_pod_compute_processes{{gpu="3",uuid="GPU-a",pod_uid="{UID}",container_id="{CID}"}} 2'
    assert render_pods([state], stale=True) == []  # counts from a stale snapshot are not served as fresh
