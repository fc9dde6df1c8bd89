"""The container image's root file system, built without a container engine by
deploy/image/build-rootfs.sh from the Dockerfile's inputs, run as the Dockerfile says: its entry
point and user, its ENV, a read-only root with a writable /tmp (the chart's settings), the demo on
loopback. tests/run.sh builds it first and sets GPUEFF_IMAGE_ROOTFS; elsewhere, build it with
`deploy/image/build-rootfs.sh DIR` (as root) and point GPUEFF_IMAGE_ROOTFS at DIR."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, free_port, http_get
from test_dockerfile import instructions

ROOTFS = Path(os.environ.get("GPUEFF_IMAGE_ROOTFS", ROOT / ".image" / "rootfs"))

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not (ROOTFS / "opt" / "exporter").is_dir(), reason=f"no image root file system at {ROOTFS}: run deploy/image/build-rootfs.sh (tests/run.sh does)")]  # e2e: the image's root file system


def runtime_stage() -> list[tuple[str, str]]:
    """The Dockerfile's instructions of the stage named runtime."""
    steps = instructions()
    start = next(i for i, (keyword, args) in enumerate(steps) if keyword == "FROM" and args.endswith(" AS runtime"))
    end = next((i for i in range(start + 1, len(steps)) if steps[i][0] == "FROM"), len(steps))
    return steps[start:end]


def image_env() -> dict[str, str]:
    """ENV of the runtime stage, as the container gets it."""
    env: dict[str, str] = {}
    for keyword, args in runtime_stage():
        if keyword == "ENV":
            for pair in args.split():
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def user() -> tuple[int, int]:
    (spec,) = [args for keyword, args in runtime_stage() if keyword == "USER"]
    uid, gid = spec.split(":")
    return int(uid), int(gid)


def in_image(*command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run a command in the root file system as the image's user with the image's environment."""
    uid, gid = user()
    return subprocess.run(["chroot", f"--userspec={uid}:{gid}", str(ROOTFS), *command], env=image_env(), capture_output=True, text=True, timeout=timeout)


def test_python_is_debians_cpython_313_and_pip_is_gone() -> None:
    result = in_image("python3", "-c", "import sys, json; print(json.dumps([sys.implementation.name, sys.version_info[:2], sys.executable]))")
    assert result.returncode == 0, result.stderr
    name, version, _ = json.loads(result.stdout)
    assert name == "cpython" and version == [3, 13]
    for python in ("python3", "/opt/exporter/bin/python"):
        result = in_image(python, "-c", "import pip")
        assert result.returncode != 0 and "No module named 'pip'" in result.stderr
        assert in_image(python, "-c", "import ensurepip").returncode != 0
    site_packages = ROOTFS / "opt" / "exporter" / "lib" / "python3.13" / "site-packages"
    assert site_packages.is_dir() and not list(site_packages.glob("pip")) + list(site_packages.glob("pip-*.dist-info"))
    for folder in image_env()["PATH"].split(":"):
        assert not list((ROOTFS / folder.lstrip("/")).glob("pip*")), folder
    assert not (ROOTFS / "usr" / "share" / "python-wheels").exists()


def test_installed_exactly_the_pinned_dependencies() -> None:
    pins = dict(line.split("==") for line in (ROOT / "deploy" / "image" / "constraints.txt").read_text().splitlines() if line and not line.startswith("#"))
    result = in_image("/opt/exporter/bin/python", "-c", "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version for d in m.distributions()}))")
    installed = json.loads(result.stdout)
    assert installed.pop("gpu-efficiency-exporter") == __import__("exporter").__version__
    assert installed == {name: version for name, version in pins.items() if name != "pip"}


def test_entrypoint_serves_the_demo_as_the_images_user_on_a_read_only_root(tmp_path: Path) -> None:
    """ENTRYPOINT with the demo flags (docker run IMAGE --demo ... replaces CMD), the root file system
    mounted read-only and an empty /tmp, as the Helm chart runs it (readOnlyRootFilesystem)."""
    steps = dict(runtime_stage())
    entrypoint = json.loads(steps["ENTRYPOINT"])
    port = free_port()
    uid, gid = user()
    script = (
        f'mount --bind "{ROOTFS}" "{ROOTFS}" && mount -o remount,bind,ro "{ROOTFS}" && mount -t tmpfs -o size=16m tmpfs "{ROOTFS}/tmp" '
        f'&& exec chroot --userspec={uid}:{gid} "{ROOTFS}" "$@"'
    )
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *entrypoint, "--demo", f"--web.listen-address=127.0.0.1:{port}"]
    process = subprocess.Popen(command, env=image_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            try:
                if http_get(f"http://127.0.0.1:{port}/-/ready", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the demo in the image did not become ready in 30 s"
            time.sleep(0.2)
        status, body = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and "gpueff_sm_active_ratio{" in body and "gpueff_exporter_build_info{" in body
        # The daemon itself (unshare and chroot exec into it) runs as the image's user.
        status_lines = Path(f"/proc/{process.pid}/status").read_text().splitlines()
        uids = next(line for line in status_lines if line.startswith("Uid:")).split()[1:]
        assert uids == [str(uid)] * 4
        assert Path(f"/proc/{process.pid}/exe").resolve().name.startswith("python3")
    finally:
        process.terminate()
        output = process.communicate(timeout=15)[0]
    assert process.returncode == 0, output
    assert "REPLAYED DATA" in output or "replayed" in output
    assert "Read-only file system" not in output
