"""bench/run_all.py is the one runner: its catalogue names every benchmark in bench/, each entry's
script exists and its page names it, and no page names a bench/ script that is not there."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from repo import BENCH, ROOT, bench_module
from waiting import PATIENCE

run_all = bench_module("run_all")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def anchors(page: Path) -> set[str]:
    titles = re.findall(r"^#+ (.*)$", re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M), re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


def test_the_catalogue_is_every_script_in_bench():
    scripts = {str(path.relative_to(BENCH)) for path in BENCH.rglob("*") if path.suffix in (".py", ".sh") and "__pycache__" not in path.parts}
    listed = [bench.script for bench in run_all.BENCHMARKS]
    assert len(listed) == len(set(listed))
    assert sorted(scripts - set(run_all.NOT_BENCHMARKS)) == sorted(listed), "every script in bench/ has its line in bench/run_all.py's BENCHMARKS (or NOT_BENCHMARKS for a shared module)"
    assert set(run_all.NOT_BENCHMARKS) <= scripts


def test_each_benchmarks_page_exists_and_names_it():
    for bench in run_all.BENCHMARKS:
        path, _, anchor = bench.doc.partition("#")
        page = ROOT / path
        assert page.is_file(), bench
        assert f"bench/{bench.script}" in page.read_text(encoding="utf-8"), bench
        assert not anchor or anchor in anchors(page), bench
        assert bench.needs in ("no GPU", "valgrind", "a GPU", "several GPUs"), bench


def test_no_page_names_a_bench_script_that_is_gone():
    named = {(page.name, name) for page in PAGES for name in re.findall(r"(?<![\w/])bench/([\w./]+\.(?:py|sh))", page.read_text(encoding="utf-8"))}
    assert named and sorted((page, name) for page, name in named if not (BENCH / name).is_file()) == []


def test_the_runner_lists_them_and_refuses_an_unknown_name():
    listing = subprocess.run([sys.executable, str(BENCH / "run_all.py"), "--list"], capture_output=True, text=True, timeout=PATIENCE, check=True)
    assert [line.split()[0] for line in listing.stdout.splitlines()] == [bench.script for bench in run_all.BENCHMARKS]
    unknown = subprocess.run([sys.executable, str(BENCH / "run_all.py"), "no_such_bench"], capture_output=True, text=True, timeout=PATIENCE)
    assert unknown.returncode != 0 and "no benchmark named 'no_such_bench'" in unknown.stderr
