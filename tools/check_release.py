"""Checks a release tag against the tree before anything is published (.github/workflows/release.yml):
the tag is v + gpueff.__version__ (the one version source), and the copies that their formats
force to be literal name the same version: the chart's version and appVersion, the Dockerfile's
VERSION default, a CHANGELOG.md section. With --notes, prints that CHANGELOG section instead (the
GitHub release's text). Standard library only: the release job runs it on a bare Python.

    python tools/check_release.py v0.1.0
    python tools/check_release.py --notes v0.1.0
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_version(root: Path = ROOT) -> str:
    match = re.search(r'^__version__ = "([^"]+)"$', (root / "gpueff" / "__init__.py").read_text(), re.M)
    if match is None:
        raise SystemExit("check_release: no __version__ = \"...\" line in gpueff/__init__.py")
    return match.group(1)


def copies(root: Path = ROOT) -> dict[str, str | None]:
    """Where the version is written out, and what each place says (None: not found)."""
    chart = (root / "helm" / "gpu-efficiency-exporter" / "Chart.yaml").read_text()
    dockerfile = (root / "Dockerfile").read_text()
    found: dict[str, str | None] = {}
    for place, pattern, text in (
        ("helm/gpu-efficiency-exporter/Chart.yaml version", r"^version: *\"?([^\"\s]+)\"?$", chart),
        ("helm/gpu-efficiency-exporter/Chart.yaml appVersion", r"^appVersion: *\"?([^\"\s]+)\"?$", chart),
        ("Dockerfile ARG VERSION", r"^ARG VERSION=(\S+)$", dockerfile),
    ):
        match = re.search(pattern, text, re.M)
        found[place] = match.group(1) if match else None
    return found


def changelog_section(version: str, root: Path = ROOT) -> str | None:
    """The text of CHANGELOG.md's "## [version] - date" section, or None."""
    text = (root / "CHANGELOG.md").read_text()
    match = re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d{{2}}-\d{{2}}\n(.*?)(?=^## |^\[|\Z)", text, re.M | re.S)
    return match.group(1).strip() if match else None


def problems(tag: str, root: Path = ROOT) -> list[str]:
    version = package_version(root)
    found = []
    if tag != f"v{version}":
        found.append(f"the tag {tag!r} is not v{version} (gpueff/__init__.py's __version__)")
    found += [f"{place} says {said!r}, not {version!r}" for place, said in copies(root).items() if said != version]
    if changelog_section(version, root) is None:
        found.append(f"CHANGELOG.md has no '## [{version}] - YYYY-MM-DD' section (move Unreleased there)")
    return found


def main(argv: list[str]) -> int:
    notes = argv[:1] == ["--notes"]
    if notes:
        argv = argv[1:]
    if len(argv) != 1:
        print("usage: python tools/check_release.py [--notes] vX.Y.Z", file=sys.stderr)
        return 2
    found = problems(argv[0])
    if found:
        for problem in found:
            print(f"check_release: {problem}", file=sys.stderr)
        return 1
    if notes:
        print(changelog_section(package_version()))
    else:
        print(f"check_release: {argv[0]} matches the package, the chart, the Dockerfile and CHANGELOG.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
