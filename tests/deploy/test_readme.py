"""The README is a front page: the two set-up commands, what the daemon reports, what is not yet
verified on real hardware, and links into docs/ for the rest, in well under 15 KB. The detail it
points to is complete: docs/metrics.md names every metric the daemon can emit and
docs/configuration.md every config key; CI runs the README's test command."""

import re

from repo import ROOT

from gpueff.settings import config_reference

README = (ROOT / "README.md").read_text(encoding="utf-8")
METRICS_PAGE = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
CONFIGURATION_PAGE = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


def emitted_metric_names() -> set[str]:
    names = set()
    for path in (ROOT / "gpueff").rglob("*.py"):
        names.update(re.findall(r"[\"'](gpueff_[a-z_]+)", path.read_text(encoding="utf-8")))
    return names


def test_every_metric_is_in_the_metrics_page():
    names = emitted_metric_names()
    assert len(names) > 50
    assert sorted(name for name in names if name not in METRICS_PAGE) == []


def test_every_config_key_is_in_the_configuration_page():
    missing = []
    for key, *_ in config_reference():
        top = key.split(".")[0].split("[")[0]
        leaf = re.split(r"[.\]]", key)[-1]
        if f"`{key}" not in CONFIGURATION_PAGE and not (f"`{top}" in CONFIGURATION_PAGE and f"`{leaf}`" in CONFIGURATION_PAGE):
            missing.append(key)
    assert missing == []


def test_the_two_setup_commands_and_ci():
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", quick_start, re.S)
    assert [block.strip() for block in blocks] == [
        "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/gpu-efficiency-exporter --demo",
        "bash tests/run.sh",
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "tests/run.sh" in ci


def test_the_readme_is_a_front_page_that_links_the_rest():
    assert len(README.encode("utf-8")) < 15_000
    assert "![" in README  # the picture
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", README))
    for page in ("install.md", "kubernetes.md", "dashboards-and-alerts.md", "classes.md", "dcgm.md", "security.md", "troubleshooting.md", "benchmarks.md", "architecture.md", "contributing.md", "metrics.md", "configuration.md", "verification.md"):
        assert page in linked, page
    assert sorted(page.name for page in (ROOT / "docs").glob("*.md") if page.name not in linked and page.name not in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")) == []


def test_the_readme_says_what_is_not_yet_verified_on_real_hardware():
    section = README.split("## Verified on real hardware, and not yet", 1)[1].split("\n## ", 1)[0]
    for gap in ("DCGM", "MIG", "GPUs in one host", "Kubernetes", "systemd"):
        assert gap in section, gap
    assert "docs/verification.md" in section
