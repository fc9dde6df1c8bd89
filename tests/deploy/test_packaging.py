"""Bare-metal packaging: the wheel and sdist that `python -m build` makes pass `twine check`, carry
what an install needs (the daemon's entry point, the traces of --demo, Python >= 3.10), and the
hardened systemd unit passes `systemd-analyze verify` with a low exposure score. Offline: the build
runs without isolation on the test environment's setuptools. tests/packaging.sh installs the
wheel with pipx (that needs the dependencies from PyPI)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from conftest import ROOT
from waiting import PATIENCE

pytestmark = pytest.mark.e2e  # python -m build, twine and systemd-analyze

UNIT = ROOT / "deploy" / "systemd" / "gpu-efficiency-exporter.service"


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("source") / "tree"
    # A copy of the tree, so the build's own build/ and *.egg-info stay out of the checkout.
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv*", ".python-*", ".image*", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"))
    # As docs/install.md says, run in the checkout after the quick start's `pip install .` left build/
    # there (which `python3 -m build` would import in place of the build package).
    (source / "build" / "lib").mkdir(parents=True)
    pyproject_build = Path(sys.executable).parent / "pyproject-build"
    result = subprocess.run([str(pyproject_build), "--no-isolation", "--sdist", "--wheel", "--outdir", str(out), "."], cwd=source, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_twine_check_passes_strict(dists: dict[str, Path]) -> None:
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(dists["wheel"]), str(dists["sdist"])], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.count("PASSED") == 2, result.stdout + result.stderr


def test_wheel_metadata_entry_point_and_data(dists: dict[str, Path]) -> None:
    from gpueff import __version__

    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = set(wheel.namelist())
        info = f"gpu_efficiency_exporter-{__version__}.dist-info"
        metadata = Parser().parsestr(wheel.read(f"{info}/METADATA").decode())
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert metadata["Requires-Python"] == ">=3.10" and metadata["Version"] == __version__
    assert "Programming Language :: Python :: 3.10" in metadata.get_all("Classifier")
    assert re.search(r"^gpu-efficiency-exporter = gpueff\.commands\.cli:main$", entry_points, re.M), entry_points
    assert {"gpueff/__init__.py", "gpueff/traces/README.md"} <= names
    shipped = {str(path.relative_to(ROOT)) for folder in ("traces", "web/ui") for path in (ROOT / "gpueff" / folder).rglob("*") if path.is_file()}
    assert shipped - names == set(), "files under gpueff/traces and gpueff/web/ui (--demo's traces, the live page) missing from the wheel"
    assert not any(name.startswith("tests/") for name in names)


def test_the_index_page_has_the_project_urls_and_no_relative_link(dists: dict[str, Path]) -> None:
    """On the package index the README stands away from the repository: every link and the picture
    point at the repository at this version's tag."""
    from gpueff import __version__

    with zipfile.ZipFile(dists["wheel"]) as wheel:
        metadata = Parser().parsestr(wheel.read(f"gpu_efficiency_exporter-{__version__}.dist-info/METADATA").decode())
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL"))
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(urls)
    description = metadata.get_payload()
    targets = re.findall(r"\]\(([^)\s]+)\)", description)
    assert len(targets) >= 30 and metadata["Description-Content-Type"].startswith("text/markdown")
    assert [target for target in targets if not target.startswith(("https://", "#"))] == []
    assert f"https://raw.githubusercontent.com/gpu-efficiency-exporter/gpu-efficiency-exporter/v{__version__}/docs/images/live-page.png" in targets
    assert f"https://github.com/gpu-efficiency-exporter/gpu-efficiency-exporter/blob/v{__version__}/docs/metrics.md" in targets


def test_wheel_and_sdist_carry_the_licence_and_the_third_party_notices(dists: dict[str, Path]) -> None:
    """LICENSE and NOTICE (PEP 639's License-File), and the vendored uPlot's own licence beside it."""
    from gpueff import __version__

    info = f"gpu_efficiency_exporter-{__version__}.dist-info"
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = set(wheel.namelist())
        metadata = Parser().parsestr(wheel.read(f"{info}/METADATA").decode())
        for name in ("LICENSE", "NOTICE"):
            assert wheel.read(f"{info}/licenses/{name}").decode() == (ROOT / name).read_text(), name
    print("wheel licence files:", sorted(name for name in names if "licenses/" in name or name.endswith("LICENSE")))
    assert metadata["License-Expression"] == "Apache-2.0" and sorted(metadata.get_all("License-File")) == ["LICENSE", "NOTICE"]
    assert "gpueff/web/ui/vendor/uplot/LICENSE" in names
    with tarfile.open(dists["sdist"]) as sdist:
        members = {Path(name).relative_to(Path(name).parts[0]).as_posix() for name in sdist.getnames() if len(Path(name).parts) > 1}
    assert {"LICENSE", "NOTICE", "gpueff/web/ui/vendor/uplot/LICENSE"} <= members


def test_the_notices_name_every_vendored_file() -> None:
    """Each file that came from elsewhere (gpueff/web/ui/vendor/, the kubelet's proto and the code
    generated from it) is named in NOTICE, with its licence."""
    notice = (ROOT / "NOTICE").read_text()
    vendored = [path for path in (ROOT / "gpueff" / "web" / "ui" / "vendor").rglob("*") if path.is_file() and path.suffix in (".js", ".css")]
    vendored += [ROOT / "gpueff" / "attribution" / "kubernetes" / name for name in ("podresources.proto", "podresources_pb2.py")]
    for path in vendored:
        assert path.relative_to(ROOT).as_posix() in notice or f" {path.name} " in notice, path
    assert (ROOT / "gpueff" / "web" / "ui" / "vendor" / "uplot" / "LICENSE").read_text().strip() in notice
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0, January 2004" in (ROOT / "LICENSE").read_text()


def test_sdist_rebuilds_the_same_package(dists: dict[str, Path], tmp_path: Path) -> None:
    with tarfile.open(dists["sdist"]) as sdist:
        sdist.extractall(tmp_path, filter="data")
    (tree,) = tmp_path.iterdir()
    assert (tree / "pyproject.toml").is_file() and (tree / "README.md").is_file() and (tree / "gpueff" / "traces" / "README.md").is_file()
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(tmp_path / "out"), str(tree)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (rebuilt,) = (tmp_path / "out").glob("*.whl")
    assert sorted(zipfile.ZipFile(rebuilt).namelist()) == sorted(zipfile.ZipFile(dists["wheel"]).namelist())


@pytest.fixture
def unit_with_this_daemon(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this environment's daemon: verify checks that it exists."""
    daemon = Path(sys.executable).parent / "gpu-efficiency-exporter"
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/gpu-efficiency-exporter " in text
    path = tmp_path / UNIT.name
    path.write_text(text.replace("/usr/local/bin/gpu-efficiency-exporter", str(daemon)))
    return path


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed (Debian package systemd)")
def test_systemd_unit_verifies_and_is_hardened(unit_with_this_daemon: Path) -> None:
    verify = subprocess.run(["systemd-analyze", "verify", str(unit_with_this_daemon)], capture_output=True, text=True, timeout=PATIENCE)
    assert verify.returncode == 0 and verify.stderr.strip() == "", verify.stderr
    security = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit_with_this_daemon)], capture_output=True, text=True, timeout=PATIENCE)
    exposure = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", security.stdout).group(1))
    print(f"systemd-analyze security: exposure {exposure} (0 = most locked down, 10 = none)")
    assert exposure <= 2.5, security.stdout[-3000:]


def test_systemd_unit_settings_the_daemon_relies_on() -> None:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    assert settings["DynamicUser"] == ["yes"] and settings["CapabilityBoundingSet"] == [""] and settings["ProtectSystem"] == ["strict"]
    # Each would hide /dev/nvidia* (NVML's only way to the driver) or other users' processes.
    for key in ("PrivateDevices", "ProtectClock", "DevicePolicy", "DeviceAllow", "ProtectProc", "PrivateUsers"):
        assert key not in settings, key
    assert settings["ExecReload"] == ["/bin/kill -HUP $MAINPID"], "SIGHUP reloads config and web config"
    from gpueff.commands.cli import daemon_parser

    args = daemon_parser().parse_args(settings["ExecStart"][0].split()[1:-1])
    assert args.wait_for_driver and args.listen_address == [":9947"]
