"""The package index shows README.md away from the repository, where its relative links and its
picture lead nowhere: the long description is the README with each relative link made absolute,
to the repository at this version's tag (pyproject.toml holds everything else)."""

import re
from pathlib import Path

from setuptools import setup

REPOSITORY = "https://github.com/gpu-efficiency-exporter/gpu-efficiency-exporter"
HERE = Path(__file__).resolve().parent
VERSION = re.search(r'^__version__ = "([^"]+)"', (HERE / "gpueff" / "__init__.py").read_text(encoding="utf-8"), re.M).group(1)
RELATIVE = re.compile(r"(!?)\[([^\]]*)\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)\)")


def absolute(match: re.Match) -> str:
    picture, text, target = match.groups()
    base = f"https://raw.githubusercontent.com/gpu-efficiency-exporter/gpu-efficiency-exporter/v{VERSION}" if picture else f"{REPOSITORY}/blob/v{VERSION}"
    return f"{picture}[{text}]({base}/{target})"


setup(
    long_description=RELATIVE.sub(absolute, (HERE / "README.md").read_text(encoding="utf-8")),
    long_description_content_type="text/markdown",
)
