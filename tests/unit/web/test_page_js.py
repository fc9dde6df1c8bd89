"""The live page's mergeHistory (exporter/web/ui/page.js) under node: /api/live answers a page far
behind with the whole window, and the page must take only the points it lacks (no duplicates)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import ROOT
from waiting import PATIENCE

NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_a_whole_window_answer_adds_only_the_points_the_page_lacks() -> None:
    assert NODE is not None
    done = subprocess.run([NODE, str(ROOT / "tests" / "unit" / "web" / "merge_history.js"), str(ROOT / "exporter" / "web" / "ui" / "page.js")], capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15] 15 [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]", "[1,2,3] 3"]
