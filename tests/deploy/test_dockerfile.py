"""The Dockerfile: hadolint-clean, and what it promises (multi-stage, bases pinned by digest,
non-root, NVIDIA runtime settings, OCI labels, a build context that builds the package, the DCGM
target). tests/deploy/test_image.py builds nothing: it runs the image deploy/image/build-image.sh built
with podman from this Dockerfile."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT
from waiting import PATIENCE

pytestmark = pytest.mark.e2e  # hadolint and a package build from the image's build context

if sys.version_info >= (3, 11):
    import tomllib
else:  # the `build` package of the test extras brings tomli to 3.10
    import tomli as tomllib

DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"
REQUIRED_LABELS = [f"org.opencontainers.image.{name}:text" for name in ("title", "description", "version", "licenses", "source", "revision")]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\"):
            keyword, _, rest = pending.partition(" ")
            out.append((keyword.upper(), rest.strip()))
            pending = ""
    return out


def test_hadolint_finds_nothing() -> None:
    command = [str(HADOLINT), "--format", "json", "--failure-threshold", "style"]
    command += [arg for label in REQUIRED_LABELS for arg in ("--require-label", label)]
    result = subprocess.run([*command, str(DOCKERFILE)], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0 and json.loads(result.stdout or "[]") == [], result.stdout + result.stderr


def stage(name: str) -> list[tuple[str, str]]:
    """The instructions of the stage named `name`, its FROM first."""
    steps = instructions()
    start = next(i for i, (keyword, args) in enumerate(steps) if keyword == "FROM" and args.endswith(f" AS {name}"))
    end = next((i for i in range(start + 1, len(steps)) if steps[i][0] == "FROM"), len(steps))
    return steps[start:end]


def test_multi_stage_non_root_nvidia_runtime_settings() -> None:
    steps = instructions()
    stages = [args for keyword, args in steps if keyword == "FROM"]
    assert stages[-1] == "runtime", "the default target is the plain runtime"
    runtime = stage("runtime")
    user = [args for keyword, args in runtime if keyword == "USER"]
    assert user and user[-1].split(":")[0].isdigit() and int(user[-1].split(":")[0]) != 0
    env = " ".join(args for keyword, args in runtime if keyword == "ENV")
    assert "NVIDIA_VISIBLE_DEVICES=all" in env and "NVIDIA_DRIVER_CAPABILITIES=utility" in env
    # pip runs only in the wheels stage; the runtime gets the wheels through a bind mount, not a layer.
    apt, install = [args for keyword, args in runtime if keyword == "RUN"]
    assert "xargs --arg-file=/usr/local/share/gpu-efficiency-exporter/packages.txt apt-get install" in apt and "rm -rf /var/lib/apt/lists/*" in apt
    assert install == "--mount=type=bind,from=wheels,source=/wheels,target=/wheels /usr/local/share/gpu-efficiency-exporter/install-exporter.sh /wheels"
    assert ("EXPOSE", "9947") in runtime


def test_bases_are_pinned_by_digest_and_labels_name_source_and_revision() -> None:
    arguments = dict(args.split("=", 1) for keyword, args in instructions() if keyword == "ARG" and "=" in args)
    images = [arguments[name] for name in ("DEBIAN_IMAGE", "DCGM_SOURCE_IMAGE")]
    assert all("@sha256:" in image and len(image.split("@sha256:")[1]) == 64 for image in images), images
    assert arguments["DEBIAN_IMAGE"].startswith("debian:trixie-slim@"), "Debian 13, whose python3 is 3.13"
    external = {args.split()[0] for keyword, args in instructions() if keyword == "FROM"} - {"runtime"}
    assert external == {"${DEBIAN_IMAGE}", "${DCGM_SOURCE_IMAGE}"}
    labels = " ".join(args for keyword, args in stage("runtime") if keyword == "LABEL")
    assert 'org.opencontainers.image.revision="${REVISION}"' in labels and 'org.opencontainers.image.source="https://' in labels


def test_dcgm_target_adds_the_client_library_and_bindings_where_the_exporter_looks() -> None:
    from gpueff.backends.dcgm.bindings import DEFAULT_BINDINGS_PATHS

    dcgm = stage("dcgm")
    assert dcgm[0] == ("FROM", "runtime AS dcgm")
    copies = [args for keyword, args in dcgm if keyword == "COPY"]
    assert any(args.startswith("--from=dcgm-packages /dcgm/lib/ ") for args in copies)
    (bindings,) = [args.split()[-1] for args in copies if "bindings" in args]
    assert bindings == DEFAULT_BINDINGS_PATHS[0], "the exporter's default --dcgm.bindings-path"
    (run,) = [args for keyword, args in stage("dcgm-packages") if keyword == "RUN"]
    assert "datacenter-gpu-manager-4-core" in run and f"test -f {bindings}/dcgm_agent.py" in run


def test_entrypoint_is_the_installed_daemon_with_valid_flags() -> None:
    from gpueff.commands.cli import daemon_parser

    steps = dict(instructions())
    entrypoint = json.loads(steps["ENTRYPOINT"])
    assert entrypoint == ["gpu-efficiency-exporter"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'gpu-efficiency-exporter = "gpueff.commands.cli:main"' in pyproject
    args = daemon_parser().parse_args(json.loads(steps["CMD"]))
    assert args.listen_address == [":9947"]


def test_the_build_context_builds_the_package_with_the_kubernetes_code(tmp_path: Path) -> None:
    """Copy what .dockerignore lets through (exactly what the build stage COPYs) and build a wheel."""
    ignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    allowed = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    copied = [shlex.split(args)[:-1] for keyword, args in instructions() if keyword == "COPY" and not args.startswith("--from")]
    assert {path.rstrip("/") for sources in copied for path in sources} == set(allowed)
    context = tmp_path / "context"
    context.mkdir()
    for name in allowed:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, context / name)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", str(tmp_path / "out"), str(context)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "out").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "gpueff/attribution/kubernetes/podresources_pb2.py" in names
    assert any(name.startswith("gpueff/traces/h200/") for name in names)


def test_the_image_runs_a_python_the_tests_run_on() -> None:
    """The image's Python (Debian 13's python3: 3.13, checked in tests/deploy/test_image.py) is one
    tests/run.sh runs the whole suite on, and pyproject declares it and 3.10 (Ubuntu 22.04)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {c.rsplit(" :: ", 1)[1] for c in pyproject["classifiers"] if c.startswith("Programming Language :: Python :: 3.")}
    assert {"3.10", "3.11", "3.12", "3.13"} <= declared
    assert pyproject["requires-python"] == ">=3.10"
    assert "debian:trixie-slim@" in (ROOT / "Dockerfile").read_text()


def test_the_images_pins_satisfy_every_runtime_dependency() -> None:
    """deploy/image/constraints.txt pins a version of each dependency (and the kubernetes extra) that
    pyproject accepts: a new dependency without a pin would fail the image's offline install."""
    from packaging.requirements import Requirement

    pins = dict(line.split("==") for line in (ROOT / "deploy" / "image" / "constraints.txt").read_text().splitlines() if line and not line.startswith("#"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for text in project["dependencies"] + project["optional-dependencies"]["kubernetes"]:
        requirement = Requirement(text)
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} has no pin in deploy/image/constraints.txt"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} does not satisfy {requirement}"
