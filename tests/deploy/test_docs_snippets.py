"""Every YAML and PromQL snippet in the README and docs/ parses: YAML with PyYAML, and through the
exporter's own config loader where it is a piece of the exporter's config file; PromQL through
Debian's promtool, as the expression of a recording rule. Every relative link in every Markdown page
of the project (README, docs/, evidence/ and the READMEs beside code) leads to a file (and heading)
that exists, every repository path a page names exists, and nothing in the project points outside it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from repo import ROOT
from waiting import PATIENCE

from gpueff.settings import Config, parse_config

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONFIG_KEYS = set(Config.__dataclass_fields__)


def snippets(language: str) -> list[tuple[str, str]]:
    """(where, text) of every fenced ``language`` block."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(rf"^```{language}\n(.*?)^```", text, re.S | re.M):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return found


YAML = snippets("yaml")
PROMQL = snippets("promql")


def test_the_docs_have_snippets_to_check():
    assert len(YAML) >= 10 and len(PROMQL) >= 5


@pytest.mark.parametrize("where, text", YAML, ids=[where for where, _ in YAML])
def test_yaml_snippet_parses_and_exporter_config_loads(where: str, text: str) -> None:
    data = yaml.safe_load(text)
    assert data is not None, where
    if isinstance(data, list) and all(isinstance(item, dict) and "url" in item and "counter" in item for item in data):
        parse_config({"apps": data})  # entries of the apps: list
    elif isinstance(data, dict) and set(data) <= CONFIG_KEYS:
        parse_config(data)  # a piece of the exporter's config file


def expressions(text: str) -> list[str]:
    """The expressions of a PromQL block: comment lines dropped, blank lines between expressions."""
    kept = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return [part.strip() for part in re.split(r"\n\s*\n", kept) if part.strip()]


def test_every_promql_snippet_parses(tmp_path: Path) -> None:
    rules = [{"record": f"docs:snippet_{number}", "expr": expression} for number, (_, text) in enumerate(PROMQL) for expression in expressions(text)]
    assert len(rules) >= len(PROMQL)
    path = tmp_path / "docs-snippets.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "docs", "rules": rules}]}), encoding="utf-8")
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stdout + result.stderr


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# Every Markdown page of the project: the README, the docs, the device evidence and the pages beside code.
LINKED_PAGES = sorted({ROOT / "README.md", ROOT / "CHANGELOG.md", *(page for folder in ("docs", "evidence", "gpueff", "deploy", "helm", "dashboards", "bench", "tools", "tests") for page in (ROOT / folder).rglob("*.md"))})
# A repository path named in a page's text (`evidence/2026-11-28-h200/verdicts/`, `tests/unit/test_trace.py`);
# one with a placeholder or a wildcard (<module>, *.json) names no one file.
NAMED_PATH = re.compile(r"(?<![\w/.-])((?:evidence|tests|bench|tools|docs|deploy|helm|dashboards|exporter)/[\w./*<>{}-]*[\w/*>}])")


def headings(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    titles = re.findall(r"^#+ (.*)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


def test_every_relative_link_in_the_readme_and_docs_leads_to_a_file_and_heading_that_exist():
    broken = []
    for page in LINKED_PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in headings(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert len(LINKED_PAGES) >= 60 and not broken, broken


def test_device_results_live_under_evidence_not_docs():
    """docs/ holds the pages and their pictures; what a device run produced goes to
    evidence/<date>-<machine>/<topic>/ (evidence/README.md)."""
    strays = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").rglob("*") if path.is_file() and not (path.suffix == ".md" and path.parent == ROOT / "docs") and path.parent != ROOT / "docs" / "images")
    assert not strays, f"move these to evidence/<date>-<machine>/<topic>/: {strays}"


def test_every_repository_path_a_page_names_exists():
    made_here = {line.lstrip("/") for line in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()}  # what a user makes (deploy/compose/.env)
    missing = []
    for page in LINKED_PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        for path in NAMED_PATH.findall(text):
            if not re.search(r"[*<{]", path) and path not in made_here and not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, missing


# The team's reference notes beside the checkout are not part of the project: nothing may cite them.
OUTSIDE = re.compile("|".join([r"\.\./shared", "shared/(design|traces|hooks|GPU_" + "FACTS)", r"(^|[^/A-Za-z_])GPU_" + "FACTS"]))
PROJECT_TEXT = ("*.md", "*.py", "*.sh", "*.yaml", "*.yml", "*.toml", "*.json", "*.txt", "Dockerfile")


def test_nothing_in_the_project_points_at_the_teams_shared_notes():
    pointing = []
    for folder in ("README.md", "docs", "gpueff", "tests", "bench", "tools", "deploy", "helm", "dashboards", "pyproject.toml", "Dockerfile"):
        base = ROOT / folder
        files = [base] if base.is_file() else [path for pattern in PROJECT_TEXT for path in base.rglob(pattern)]
        for path in files:
            for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if OUTSIDE.search(line):
                    pointing.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not pointing, pointing
