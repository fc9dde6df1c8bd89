"""The README documents every metric the daemon can emit and every config key, and CI runs the
README's test command."""

import re
from pathlib import Path

from exporter.config.file import config_reference

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def emitted_metric_names() -> set[str]:
    names = set()
    for path in (ROOT / "exporter").rglob("*.py"):
        names.update(re.findall(r"[\"'](gpueff_[a-z_]+)", path.read_text(encoding="utf-8")))
    return names


def test_every_metric_is_in_the_readme():
    names = emitted_metric_names()
    assert len(names) > 50
    assert sorted(name for name in names if name not in README) == []


def test_every_config_key_is_in_the_readme():
    missing = []
    for key, *_ in config_reference():
        top = key.split(".")[0].split("[")[0]
        leaf = re.split(r"[.\]]", key)[-1]
        if f"`{key}" not in README and not (f"`{top}" in README and f"`{leaf}`" in README):
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
