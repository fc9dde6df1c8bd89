"""The release, as far as it can be checked offline (docs/releasing.md): the workflows against
SchemaStore's GitHub workflow schema and what the release workflow promises, the one version and
its checked copies (tools/check_release.py), the CHANGELOG's form, and the chart packaged by real
Helm as the release pushes it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT
from repo import DASHBOARDS

sys.path.insert(0, str(ROOT / "tools"))
import check_release  # noqa: E402

from gpueff import __version__  # noqa: E402

WORKFLOWS = ROOT / ".github" / "workflows"
CHART = ROOT / "helm" / "gpu-efficiency-exporter"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"


def workflow(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load((WORKFLOWS / name).read_text())
    loaded["on"] = loaded.pop(True, loaded.get("on"))  # YAML 1.1 reads the key `on` as true
    return loaded


def uses(job: dict[str, Any]) -> list[str]:
    return [step["uses"] for step in job["steps"] if "uses" in step]


def test_workflows_validate_against_the_github_workflow_schema() -> None:
    files = sorted(str(path) for path in WORKFLOWS.glob("*.yml"))
    assert [Path(name).name for name in files] == ["ci.yml", "release.yml"]
    result = subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.github-workflows", *files], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ci_runs_the_test_command() -> None:
    ci = workflow("ci.yml")
    assert set(ci["on"]) == {"push", "pull_request"} and ci["permissions"] == {"contents": "read"}
    (job,) = ci["jobs"].values()
    assert any(".ci/run" in step.get("run", "") for step in job["steps"])
    assert (ROOT / ".ci" / "run").is_file()


def test_release_publishes_pypi_by_trusted_publishing_image_with_attestations_and_chart_as_oci() -> None:
    release = workflow("release.yml")
    assert release["on"] == {"push": {"tags": ["v*.*.*"]}} and release["permissions"] == {"contents": "read"}
    jobs = release["jobs"]
    # Only the PyPI job may mint an OIDC token, and only it publishes to PyPI.
    assert [name for name, job in jobs.items() if job.get("permissions", {}).get("id-token") == "write"] == ["pypi"]
    assert jobs["pypi"]["environment"]["name"] == "pypi" and "pypa/gh-action-pypi-publish@release/v1" in uses(jobs["pypi"])
    assert not any("password" in str(step.get("with", {})) for step in jobs["pypi"]["steps"]), "trusted publishing needs no token"
    (build,) = [step for step in jobs["image"]["steps"] if step.get("uses", "").startswith("docker/build-push-action@")]
    assert build["with"]["sbom"] is True and build["with"]["provenance"] == "mode=max" and build["with"]["push"] is True
    assert build["with"]["target"] == "runtime" and "VERSION=${{ needs.check.outputs.version }}" in build["with"]["build-args"]
    assert jobs["image"]["permissions"]["packages"] == "write"
    assert release["env"]["IMAGE"] == "ghcr.io/${{ github.repository_owner }}/gpu-efficiency-exporter"
    assert release["env"]["CHART_REPOSITORY"] == "oci://ghcr.io/${{ github.repository_owner }}/charts"
    chart_runs = " ".join(step.get("run", "") for step in jobs["chart"]["steps"])
    assert "helm package helm/gpu-efficiency-exporter" in chart_runs and 'helm push "chart/gpu-efficiency-exporter-${{ needs.check.outputs.version }}.tgz" "$CHART_REPOSITORY"' in chart_runs
    # Nothing is published before the version check; the GitHub release comes last.
    for name in ("dist", "image"):
        assert jobs[name]["needs"] == "check"
    assert jobs["pypi"]["needs"] == "dist" and set(jobs["chart"]["needs"]) == {"check", "image"}
    assert set(jobs["github-release"]["needs"]) == {"check", "pypi", "chart"}
    # Every action is pinned to a version, every checkout leaves no credentials behind.
    for job in jobs.values():
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[\w./-]+", step["uses"]), step["uses"]
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_every_path_the_workflows_run_exists() -> None:
    text = "\n".join(path.read_text() for path in WORKFLOWS.glob("*.yml"))
    for path in ("tools/check_release.py", "helm/gpu-efficiency-exporter", ".ci/run"):
        assert path in text and (ROOT / path).exists(), path
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM \S+ AS runtime$", dockerfile, re.M)


def test_the_versions_copies_agree_and_the_tag_is_checked() -> None:
    assert check_release.package_version() == __version__
    assert check_release.copies() == dict.fromkeys(check_release.copies(), __version__)
    assert check_release.problems("v99.0.0")[0] == f"the tag 'v99.0.0' is not v{__version__} (gpueff/__init__.py's __version__)"


def test_a_release_needs_a_dated_changelog_section(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for name in ("gpueff/__init__.py", "helm/gpu-efficiency-exporter/Chart.yaml", "Dockerfile", "CHANGELOG.md"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tree / name)
    text = (ROOT / "CHANGELOG.md").read_text()
    if check_release.changelog_section(__version__) is None:
        assert check_release.problems(f"v{__version__}", tree) == [f"CHANGELOG.md has no '## [{__version__}] - YYYY-MM-DD' section (move Unreleased there)"]
        text = text.replace("## [Unreleased]\n", f"## [Unreleased]\n\n## [{__version__}] - 2026-12-01\n", 1)
        (tree / "CHANGELOG.md").write_text(text)
    assert check_release.problems(f"v{__version__}", tree) == []
    notes = check_release.changelog_section(__version__, tree)
    assert notes and notes.startswith(("Nothing is released yet", "### ")) and "## [" not in notes


def test_changelog_is_in_keep_a_changelog_form() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n") and "https://keepachangelog.com/en/1.1.0/" in text
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert headings and headings[0] == ("Unreleased", "")
    assert all(date for name, date in headings[1:]), "every released section is dated"
    for name, _ in headings:
        assert re.search(rf"^\[{re.escape(name)}\]: https://", text, re.M), f"no link reference for [{name}]"
    kinds = set(re.findall(r"^### (\w+)$", text, re.M))
    assert kinds and kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security", "Performance"}


@pytest.mark.e2e  # real Helm
def test_helm_packages_and_lints_the_chart_the_release_pushes(tmp_path: Path) -> None:
    import helm_python as helm

    archive = Path(helm.package(str(CHART), destination=str(tmp_path)))
    assert archive.name == f"gpu-efficiency-exporter-{__version__}.tgz"
    with tarfile.open(archive) as packed:
        chart = yaml.safe_load(packed.extractfile("gpu-efficiency-exporter/Chart.yaml").read())
        values = yaml.safe_load(packed.extractfile("gpu-efficiency-exporter/values.yaml").read())
        names = packed.getnames()
        # The chart's files/ are links to the one committed copy: the package carries them as files.
        carried = {member.name.split("/files/", 1)[1]: packed.extractfile(member).read() for member in packed.getmembers() if "/files/" in member.name and member.isfile()}
    assert carried == {f"dashboards/{path.name}": path.read_bytes() for path in DASHBOARDS.glob("*.json")} | {f"rules/{path.name}": path.read_bytes() for path in (CHART / "files" / "rules").iterdir()}
    assert chart["version"] == chart["appVersion"] == __version__
    assert "gpu-efficiency-exporter/values.schema.json" in names and "gpu-efficiency-exporter/templates/tests/test-ready.yaml" in names
    assert f"{values['image']['registry']}/{values['image']['repository']}" == "ghcr.io/gpu-efficiency-exporter/gpu-efficiency-exporter"
    extracted = tmp_path / "extracted"
    with tarfile.open(archive) as packed:
        packed.extractall(extracted, filter="data")
    report = helm.lint(str(extracted / "gpu-efficiency-exporter"), {}, strict=True, kube_version="v1.30.0")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []
