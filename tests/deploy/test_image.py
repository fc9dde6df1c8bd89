"""The container image, built from the Dockerfile by podman (deploy/image/build-image.sh) and run
as a hardened Kubernetes pod runs it: its own user, a read-only root, no capabilities,
no-new-privileges, the demo on a port published on loopback. tests/run.sh builds the image and sets
GPUEFF_IMAGE; elsewhere, run `deploy/image/build-image.sh TAG` (as root) and set GPUEFF_IMAGE=TAG
(and GPUEFF_PODMAN where podman's storage is not the script's default)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from conftest import ROOT, free_port, http_get
from waiting import PATIENCE

from gpueff import __version__
from gpueff.trace import demo_trace_paths

IMAGE = os.environ.get("GPUEFF_IMAGE", "")
DEFAULT_PODMAN = "podman --root /var/lib/containers/gpueff --runroot /run/containers/gpueff --storage-driver overlay --runtime runc"
PODMAN = shlex.split(os.environ.get("GPUEFF_PODMAN", DEFAULT_PODMAN))
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
IMAGE_USER = (65532, 65532)

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not IMAGE, reason="no image: set GPUEFF_IMAGE to a tag deploy/image/build-image.sh built (tests/run.sh does)")]


def podman(*args: str, timeout: float = PATIENCE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)


def in_image(*command: str) -> subprocess.CompletedProcess[str]:
    """A command in a throwaway container of the image, as its user, read-only."""
    entrypoint, *rest = command
    return podman("run", "--rm", "--read-only", "--cap-drop", "ALL", *LIMITS, "--entrypoint", entrypoint, IMAGE, *rest)


@dataclass
class Container:
    name: str
    url: str


@pytest.fixture(scope="module")
def demo() -> Iterator[Container]:
    """The image's entry point with the demo flags (docker run IMAGE --demo ... replaces CMD)."""
    name = f"gpueff-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    started = podman("run", "--detach", "--name", name, "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", *LIMITS,
                     "--publish", f"127.0.0.1:{port}:9947", IMAGE, "--demo", "--web.listen-address=:9947")
    assert started.returncode == 0, started.stderr
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                if http_get(f"{url}/-/ready")[0] == 200:
                    break
            except OSError:
                pass
            state = podman("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
            assert state == "running", f"the container is {state}: {podman('logs', name).stderr}"
            assert time.monotonic() < deadline, "the demo in the image did not become ready"
            time.sleep(0.3)
        yield Container(name, url)
    finally:
        podman("rm", "--force", "--time", "0", name)


def test_serves_metrics_page_and_readiness_through_the_published_loopback_port(demo: Container) -> None:
    status, body = http_get(f"{demo.url}/metrics")
    assert status == 200 and "gpueff_sm_active_ratio{" in body and "gpueff_exporter_build_info{" in body
    assert f'version="{__version__}"' in body
    status, page = http_get(f"{demo.url}/")
    assert status == 200 and "<html" in page.lower() and "uPlot" in page
    assert http_get(f"{demo.url}/-/ready")[0] == 200


def test_runs_as_the_images_user_without_capabilities_on_a_read_only_root(demo: Container) -> None:
    status = podman("exec", demo.name, "cat", "/proc/1/status").stdout
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["Uid"].split() == [str(IMAGE_USER[0])] * 4 and fields["Gid"].split() == [str(IMAGE_USER[1])] * 4
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[capabilities], 16) == 0, (capabilities, fields[capabilities])
    assert fields["NoNewPrivs"].strip() == "1"
    command = podman("exec", demo.name, "cat", "/proc/1/cmdline").stdout.split("\0")
    assert command[:2] == ["/opt/exporter/bin/python", "/opt/exporter/bin/gpu-efficiency-exporter"]
    written = podman("exec", demo.name, "touch", "/opt/exporter/written")
    assert written.returncode != 0 and "Read-only file system" in written.stderr
    logs = podman("logs", demo.name).stderr
    assert "Read-only file system" not in logs
    gpus = len(demo_trace_paths())
    assert f" version={__version__} backend=replay gpus={gpus} url=http://0.0.0.0:9947/metrics " in logs, "the startup line"


def test_top_reads_the_container_from_outside(demo: Container) -> None:
    done = subprocess.run([sys.executable, "-m", "gpueff", "top", "--url", demo.url, "--once", "--color", "never"],
                          capture_output=True, text=True, timeout=PATIENCE, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("gpu-efficiency-exporter top ") and demo.url in lines[0]
    assert sum(1 for line in lines if "matmul_8192" in line or line.lstrip()[:2].strip().isdigit()) >= 8


def test_sigterm_stops_it_cleanly() -> None:
    """podman stop sends SIGTERM, then SIGKILL after the grace period: exit code 0 (SIGKILL would
    leave 137) and the daemon's own "stopping" line as its last mean it stopped on SIGTERM. The time
    it took is printed, not asserted."""
    name = f"gpueff-stop-{uuid.uuid4().hex[:8]}"
    port = free_port()
    assert podman("run", "--detach", "--name", name, "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", *LIMITS,
                  "--publish", f"127.0.0.1:{port}:9947", IMAGE, "--demo").returncode == 0
    try:
        deadline = time.monotonic() + PATIENCE
        while True:
            try:
                if http_get(f"http://127.0.0.1:{port}/-/ready")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, podman("logs", name).stderr
            time.sleep(0.3)
        grace = int(PATIENCE)
        started = time.monotonic()
        stopped = podman("stop", "--time", str(grace), name, timeout=grace + 30)
        took = time.monotonic() - started
        assert stopped.returncode == 0, stopped.stderr
        state = json.loads(podman("inspect", "--format", "{{json .State}}", name).stdout)
        assert state["ExitCode"] == 0 and not state["OOMKilled"], state
        logs = podman("logs", name).stderr.splitlines()
        assert logs[-1].endswith('msg="stopping"'), logs[-3:]
        print(f"SIGTERM to exit: {took:.2f} s (grace period {grace} s)")
    finally:
        podman("rm", "--force", "--time", "0", name)


def test_python_is_debians_cpython_313_and_pip_is_gone() -> None:
    result = in_image("python3", "-c", "import sys, json; print(json.dumps([sys.implementation.name, sys.version_info[:2]]))")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["cpython", [3, 13]]
    for python in ("python3", "/opt/exporter/bin/python"):
        result = in_image(python, "-c", "import pip")
        assert result.returncode != 0 and "No module named 'pip'" in result.stderr
    listing = in_image("sh", "-c", "ls /opt/exporter/lib/python3.13/site-packages /opt/exporter/bin /usr/local/bin /usr/bin; ls -d /usr/share/python-wheels 2>&1")
    assert not [name for name in listing.stdout.split() if name.startswith("pip")], listing.stdout
    assert "No such file" in listing.stdout


def test_installed_exactly_the_pinned_dependencies() -> None:
    pins = dict(line.split("==") for line in (ROOT / "deploy" / "image" / "constraints.txt").read_text().splitlines() if line and not line.startswith("#"))
    result = in_image("/opt/exporter/bin/python", "-c", "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version for d in m.distributions()}))")
    installed = json.loads(result.stdout)
    assert installed.pop("gpu-efficiency-exporter") == __version__
    assert installed == {name: version for name, version in pins.items() if name != "pip"}


def test_the_licence_and_notices_are_in_the_image() -> None:
    for name in ("LICENSE", "NOTICE"):
        shipped = in_image("cat", f"/usr/share/doc/gpu-efficiency-exporter/{name}")
        assert shipped.returncode == 0 and shipped.stdout == (ROOT / name).read_text(), name


def test_labels_carry_version_revision_and_licence() -> None:
    labels = json.loads(podman("image", "inspect", "--format", "{{json .Labels}}", IMAGE).stdout)
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.revision"] != ""


def test_the_tests_podman_is_the_build_scripts() -> None:
    assert DEFAULT_PODMAN in (ROOT / "deploy" / "image" / "build-image.sh").read_text()
