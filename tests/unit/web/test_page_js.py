"""The live page's scripts under node: mergeHistory (gpueff/web/ui/page.js), where /api/live answers a page far
behind with the whole window, and the page must take only the points it lacks (no duplicates); and
the search (gpueff/web/ui/search.js), with the same fields as top's filter."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import ROOT
from waiting import PATIENCE

NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_a_whole_window_answer_adds_only_the_points_the_page_lacks() -> None:
    assert NODE is not None
    done = subprocess.run([NODE, str(ROOT / "tests" / "unit" / "web" / "merge_history.js"), str(ROOT / "gpueff" / "web" / "ui" / "page.js")], capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15] 15 [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]", "[1,2,3] 3"]


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_search_finds_every_word_in_its_field_and_reads_no_prototype_key() -> None:
    assert NODE is not None
    done = subprocess.run([NODE, str(ROOT / "tests" / "unit" / "web" / "search.js"), str(ROOT / "gpueff" / "web" / "ui" / "search.js")], capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 0, done.stderr
    *found, parsed = [json.loads(line) for line in done.stdout.splitlines()]
    assert dict(found) == {
        "": [0, 1, 2, 3], "ns:research": [0], "NS:RESEARCH": [0], "pod:sweep": [0], "pod:5926e42f": [0], "job:48213": [1], "job:torchrun": [1], "user:2001": [1], "user:1003": [2],
        "class:host": [1, 2], "host 48213": [1], "name:训练": [1], "class:down": [3], "serving": [],
        "__proto__:x": [], "constructor:": [], "toString": [], "hasOwnProperty:1": [],  # a prototype's key is a plain word, never a field
        "ns:research class:host": [], "h100": [1, 2, 3],
    }
    assert parsed == [["namespace", "ml"], ["", "__proto__:x"], ["", "pod:"], ["name", "h200"]]


def test_the_page_and_top_search_the_same_fields() -> None:
    from gpueff.commands.top.search import ALIASES, FIELDS

    script = (ROOT / "gpueff" / "web" / "ui" / "search.js").read_text(encoding="utf-8")
    assert f"const FIELDS = {json.dumps(list(FIELDS))};" in script.replace(", ", ",").replace(",", ", ")
    assert "const ALIASES = { " + ", ".join(f'{alias}: "{field}"' for alias, field in ALIASES.items()) + " };" in script
