"""The Dockerfile: hadolint-clean, and what it promises (multi-stage, non-root, NVIDIA runtime
settings, OCI labels, a build context that builds the package). No container engine runs here, so
the image itself is not built by these tests."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from conftest import ROOT

DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"
REQUIRED_LABELS = [f"org.opencontainers.image.{name}:text" for name in ("title", "description", "version", "licenses")]


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
    result = subprocess.run([*command, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and json.loads(result.stdout or "[]") == [], result.stdout + result.stderr


def test_multi_stage_non_root_nvidia_runtime_settings() -> None:
    steps = instructions()
    stages = [args for keyword, args in steps if keyword == "FROM"]
    assert len(stages) >= 2 and " AS build" in stages[0]
    final = steps[max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM"):]
    user = [args for keyword, args in final if keyword == "USER"]
    assert user and user[-1].split(":")[0].isdigit() and int(user[-1].split(":")[0]) != 0
    env = " ".join(args for keyword, args in final if keyword == "ENV")
    assert "NVIDIA_VISIBLE_DEVICES=all" in env and "NVIDIA_DRIVER_CAPABILITIES=utility" in env
    assert any(keyword == "COPY" and args.startswith("--from=build ") for keyword, args in final)
    assert ("EXPOSE", "9947") in final


def test_entrypoint_is_the_installed_daemon_with_valid_flags() -> None:
    from exporter.commands.cli import daemon_parser

    steps = dict(instructions())
    entrypoint = json.loads(steps["ENTRYPOINT"])
    assert entrypoint == ["gpu-efficiency-exporter"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'gpu-efficiency-exporter = "exporter.commands.cli:main"' in pyproject
    args = daemon_parser().parse_args(json.loads(steps["CMD"]))
    assert args.listen_address == ":9947"


def test_the_build_context_builds_the_package_with_the_kubernetes_code(tmp_path: Path) -> None:
    """Copy what .dockerignore lets through (exactly what the build stage COPYs) and build a wheel."""
    ignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    allowed = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    copied = [shlex.split(args)[:-1] for keyword, args in instructions() if keyword == "COPY" and not args.startswith("--from")]
    assert sorted(path.rstrip("/") for sources in copied for path in sources) == sorted(allowed)
    context = tmp_path / "context"
    context.mkdir()
    for name in allowed:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(source, context / name)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", str(tmp_path / "out"), str(context)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "out").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "exporter/attribution/kubernetes/podresources_pb2.py" in names
    assert any(name.startswith("exporter/traces/h200/") for name in names)


def test_the_image_runs_a_python_the_tests_run_on() -> None:
    """The image's Python minor is one tests/run.sh runs the whole suite on, and pyproject declares it."""
    image = next(args for keyword, args in instructions() if keyword == "ARG" and args.startswith("PYTHON_IMAGE="))
    minor = image.split(":", 1)[1].split("-", 1)[0]
    assert minor == "3.13", image  # tests/run.sh: the machine's python3 (3.11) and CPython 3.13
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {c.rsplit(" :: ", 1)[1] for c in pyproject["classifiers"] if c.startswith("Programming Language :: Python :: 3.")}
    assert {"3.11", "3.12", minor} <= declared
    assert pyproject["requires-python"] == ">=3.11"
