"""A shared node's adversaries against the inputs the daemon reads (issue 39 point 4): a tenant that
names its cgroups after another pod or Slurm job, and a compromised API server that nests its JSON
thousands deep or trickles its answer. docs/security.md lists what was tried."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fakes.kube_api import FakeApiServer
from fakes.proc import status
from waiting import PATIENCE

from gpueff.attribution.cgroup import owner_of_cgroup_line, process_owner
from gpueff.attribution.holders import Holder, identify
from gpueff.attribution.jobs import JobResolver
from gpueff.attribution.kubernetes.apiserver import ApiError, ApiServer
from gpueff.attribution.kubernetes.owners import ProcessOwner
from gpueff.attribution.slurm import SlurmJob, job_of_cgroup_line
from gpueff.untrusted import read_lines

MINE, VICTIM = "0c3e2b1a-7f64-4d2b-9a51-3c2d1e0f9a8b", "11111111-2222-4333-8444-555555555555"
CID, FAKE_CID = "4f1a" * 16, "9b2c" * 16


def systemd(uid: str) -> str:
    return f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"


@pytest.mark.parametrize(("path", "owner"), [
    # A tenant with a writable cgroup (cgroup v2 delegation) nests a cgroup named after another pod below its own container.
    (f"/kubepods.slice/kubepods-burstable.slice/{systemd(MINE)}/cri-containerd-{CID}.scope/{systemd(VICTIM)}/x", ProcessOwner(MINE, CID)),
    (f"/kubepods/burstable/pod{MINE}/{CID}/pod{VICTIM}/{FAKE_CID}", ProcessOwner(MINE, CID)),
    # ... or after another container of its pod, deeper than its own.
    (f"/kubepods/burstable/pod{MINE}/{CID}/{FAKE_CID}", ProcessOwner(MINE, CID)),
    # A user outside Kubernetes names a cgroup of its delegated user slice like a pod's.
    (f"/user.slice/user-1000.slice/user@1000.service/app.slice/{systemd(VICTIM)}/cri-containerd-{FAKE_CID}.scope", None),
    (f"/user.slice/user-1000.slice/user@1000.service/kubepods/pod{VICTIM}/{FAKE_CID}", None),
    # What the kubelet makes still reads as before, from the host's view and from a cgroup namespace.
    (f"/../../kubepods-besteffort.slice/kubepods-besteffort-pod{MINE.replace('-', '_')}.slice/crio-{CID}.scope", ProcessOwner(MINE, CID)),
])
def test_a_cgroup_named_after_another_pod_is_not_that_pod(path: str, owner: ProcessOwner | None) -> None:
    assert owner_of_cgroup_line(f"0::{path}") == owner


@pytest.mark.parametrize(("path", "job"), [
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/slurmstepd.scope/job_7/step_0", None),
    ("/home/slurm/uid_0/job_7", None),
    ("/system.slice/slurmstepd.scope/job_5/step_0/user/task_0/slurmstepd.scope/job_7/step_0", SlurmJob("5", "0")),  # below its own task: still job 5
    ("/../../system.slice/slurmstepd.scope/job_5/step_0/user/task_0", SlurmJob("5", "0")),
])
def test_a_cgroup_named_after_another_slurm_job_is_not_that_job(path: str, job: SlurmJob | None) -> None:
    assert job_of_cgroup_line(f"0::{path}") == job


def api(server: FakeApiServer, timeout: float = PATIENCE) -> ApiServer:
    return ApiServer("127.0.0.1", server.port, server.service_account, timeout, 16 * 1024 * 1024)


def test_json_nested_thousands_deep_from_the_api_server_is_a_failed_call_not_a_crash(tmp_path: Path) -> None:
    # Before: json.loads raised RecursionError, which the refresher took for a bug: every GPU lost its pod.
    deep = b"[" * 100_000 + b"]" * 100_000
    with FakeApiServer(tmp_path, {"/api/v1/pods": deep}) as server, pytest.raises(ApiError, match="not JSON .*RecursionError"):
        api(server).get("/api/v1/pods")


def test_an_api_server_that_trickles_its_answer_is_cut_off_at_the_timeout(tmp_path: Path) -> None:
    def trickle(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        for _ in range(4000):  # a byte every 50 ms: each read well within the timeout, the answer never whole
            try:
                handler.wfile.write(b" ")
                handler.wfile.flush()
            except OSError:
                return  # the client hung up: what it should do
            time.sleep(0.05)

    # Before: the 1 s timeout bounded each read, so the call lasted as long as the server chose (200 s
    # here, forever for a server that keeps going) and then failed as an incomplete read.
    with FakeApiServer(tmp_path, {"/api/v1/pods": trickle}) as server, pytest.raises(ApiError, match=r"no whole answer within 1 s"):
        api(server, timeout=1.0).get("/api/v1/pods")


# Every separator str.splitlines knows besides "\n"; the kernel refuses "\n" in a cgroup name, not these.
SEPARATORS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("separator", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_a_cgroup_name_that_hides_a_forged_line_is_attributed_to_no_one(separator: str, tmp_path: Path) -> None:
    forged = {
        1: f"0::/user.slice/user-1000.slice/user@1000.service/x{separator}0::/kubepods/burstable/pod{VICTIM}/{FAKE_CID}",
        2: f"0::/kubepods/burstable/pod{MINE}/{CID}/x{separator}0::/kubepods/burstable/pod{VICTIM}/{FAKE_CID}",
        3: f"0::/user.slice/user-1000.slice/user@1000.service/x{separator}0::/system.slice/slurmstepd.scope/job_7/step_0",
    }
    for pid, line in forged.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_bytes(f"{line}\n".encode())
        (tmp_path / str(pid) / "comm").write_bytes(b"python\n")
        (tmp_path / str(pid) / "status").write_text(status("python", pid, 1, 1000))
        assert process_owner(pid, tmp_path) is None
        assert identify(pid, "python", tmp_path).holder == Holder("process", "python", "1000")  # its own user's
    assert JobResolver(tmp_path).resolve(forged) == {}  # no pod, no Slurm job; no /proc/<pid>/stat, no launcher


@pytest.mark.parametrize(("content", "lines"), [
    (b"0::/a\n1:cpu:/b\n", ["0::/a", "1:cpu:/b"]),
    (b"0::/a", ["0::/a"]),
    (b"", []),
    (b"0::/a\tb\n", None),  # any control character makes the file suspect
    ("0::/x\u2028y\n".encode(), None),
    (b"0::/\xff\xfe\x85\n", ["0::/\\xff\\xfe\\x85"]),  # bytes that are not UTF-8 are escaped text, not controls
])
def test_proc_files_split_at_newline_only(content: bytes, lines: list[str] | None, tmp_path: Path) -> None:
    (tmp_path / "cgroup").write_bytes(content)
    assert read_lines(tmp_path / "cgroup") == lines
