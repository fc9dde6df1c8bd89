"""apps[].process and apps[].pod patterns against names a tenant picks: a pattern that backtracks
without bound against some name costs a bounded time once, never the poll thread."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

from gpueff.apps import patterns
from gpueff.config.engine import ConfigError
from gpueff.settings import parse_config

SELECT = textwrap.dedent("""
    import logging, sys
    from gpueff.apps.derive import select_gpus
    from gpueff.attribution.owner import Owner
    from gpueff.settings import parse_config
    from gpueff.sample import DeviceInfo, GpuProcess, GpuSample
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(levelname)s %(message)s")
    app = parse_config({"apps": [{"name": "a", "url": "http://127.0.0.1:1/metrics", "counter": "c_total", "unit": "u", "process": sys.argv[1], "user": 0}]}).apps[0]
    evil = GpuSample(device=DeviceInfo(index=0, uuid="GPU-0", name="H200"), timestamp=0.0, processes=(GpuProcess(1, sys.argv[2]),))
    plain = GpuSample(device=DeviceInfo(index=1, uuid="GPU-1", name="H200"), timestamp=0.0, processes=(GpuProcess(2, sys.argv[3]),))
    for poll in range(3):
        print("selected", [sample.device.index for sample in select_gpus(app, [evil, plain], process_owners={1: Owner("user", "0"), 2: Owner("user", "0")})])
""")


@pytest.mark.parametrize(("pattern", "evil", "plain"), [
    (r"(a+)+$", "a" * 5000 + "!", "aaa"),  # nested quantifiers: exponential in re
    (r"(x|x)*y", "x" * 5000, "xy"),  # an alternation of the same thing under a repeat
    (r"[a-z]*[a-z]*[a-z]*[a-z]*!", "b" * 1024, "ab!"),  # no nesting at all, polynomial of degree 5 in re
])
def test_a_pattern_that_backtracks_without_bound_costs_a_bounded_match_once(pattern: str, evil: str, plain: str) -> None:
    # The timeout is a bound on a hang (before: hours to forever), not a speed figure.
    done = subprocess.run([sys.executable, "-c", SELECT, pattern, evil, plain], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("selected")] == ["selected [1]"] * 3  # the evil name never matches; the plain one does
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert len(warnings) <= 1 and all("is taken as not matching it" in line for line in warnings)


def test_a_name_is_matched_once_however_many_polls_see_it(monkeypatch) -> None:
    pattern = patterns.NamePattern(r"train\.py", "process name")
    calls = []
    compiled = pattern._compiled

    class Counting:
        def search(self, name, timeout):
            calls.append(name)
            return compiled.search(name, timeout=timeout)

    monkeypatch.setattr(pattern, "_compiled", Counting())
    for _ in range(5):
        assert pattern.search("/usr/bin/python3 train.py") and not pattern.search("/usr/bin/bash")
    assert calls == ["/usr/bin/python3 train.py", "/usr/bin/bash"]


def test_a_pattern_that_is_not_a_regular_expression_is_refused_at_load() -> None:
    for bad in ("vllm(", "(?P<x>a)(?P<x>b)", "a{2,1}"):
        with pytest.raises(ConfigError, match=r"'apps\[0\]\.process': not a valid regular expression"):
            parse_config({"apps": [{"name": "a", "url": "http://127.0.0.1:1/metrics", "counter": "c_total", "unit": "u", "process": bad}]})


def test_the_number_of_apps_is_bounded_before_any_is_read() -> None:
    # Each app is a scraper thread started before the port opens: 1,000 of them kept a daemon from serving.
    app = {"name": "a", "url": "http://127.0.0.1:1/metrics", "counter": "c_total", "unit": "u"}
    assert len(parse_config({"apps": [{**app, "name": f"a{n}"} for n in range(64)]}).apps) == 64
    with pytest.raises(ConfigError, match=r"'apps': at most 64 entries, got 1000"):
        parse_config({"apps": [{**app, "name": f"a{n}"} for n in range(1000)]})
