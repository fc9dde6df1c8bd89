"""Writes docs/config-reference.md: every config key with its default, what a reload (SIGHUP) does
with it, and its meaning, generated from the schema so it cannot drift.

    python tools/config_reference.py          # rewrite docs/config-reference.md
    python tools/config_reference.py --check  # exit 1 if the committed file differs
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpueff.config.engine import APPLIED, RESTART  # noqa: E402
from gpueff.settings import config_reference  # noqa: E402

TARGET = ROOT / "docs" / "config-reference.md"
ON_RELOAD = {APPLIED: "applied", RESTART: "**restart**"}


def markdown() -> str:
    lines = [
        "# Configuration keys (generated)",
        "",
        "Generated from the schema by `python tools/config_reference.py`; [configuration.md](configuration.md)",
        "explains the keys at more length. On SIGHUP the daemon reloads the file: a key marked",
        "*applied* takes effect at the next poll; a key marked **restart** is read only at start, and a",
        "reload that changes it logs `reload: <key> changed, but it is read only at start`.",
        "",
        "| key | default | on reload | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for key, default, doc, reload in config_reference():
        cell = doc.replace("|", "\\|")
        lines.append(f"| `{key}` | `{default}` | {ON_RELOAD.get(reload, reload)} | {cell} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = markdown()
    if argv == ["--check"]:
        if TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET.relative_to(ROOT)} is out of date: run python tools/config_reference.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
