"""The Grafana dashboards: committed JSON equals the builder's output, and every panel is complete
(description, unit, queries through the shared variables). Their queries are run against a real
Prometheus in test_end_to_end_prometheus.py."""

from __future__ import annotations

import re
import subprocess
import sys

import grafana_queries
import pytest
from conftest import ROOT

from exporter.derivations import BOTTLENECK_CLASSES

DASHBOARD_DIR = ROOT / "dashboards"
PATHS = sorted(DASHBOARD_DIR.glob("*.json"))
GPU_VARIABLES = ("datasource", "instance", "gpu", "namespace", "pod")


def test_committed_dashboards_equal_the_build():
    result = subprocess.run([sys.executable, str(DASHBOARD_DIR / "build.py"), "--check"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert [path.name for path in PATHS] == sorted(["gpu-efficiency-fleet.json", "gpu-efficiency-gpu-detail.json", "gpu-efficiency-app-throughput.json"])


def test_uids_are_unique_and_stable():
    uids = [grafana_queries.load(path)["uid"] for path in PATHS]
    assert sorted(uids) == ["gpueff-app-throughput", "gpueff-fleet", "gpueff-gpu-detail"]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_variables(path):
    dashboard = grafana_queries.load(path)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert tuple(variables)[: len(GPU_VARIABLES)] == GPU_VARIABLES
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in GPU_VARIABLES[1:]:
        variable = variables[name]
        # "All" must also match series without the label (no Kubernetes attribution): allValue .*
        assert variable["includeAll"] and variable["multi"] and variable["allValue"] == ".*", name
        assert grafana_queries.LABEL_VALUES.match(variable["definition"]), name


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_every_panel_is_complete(path):
    dashboard = grafana_queries.load(path)
    defined = {v["name"] for v in dashboard["templating"]["list"]} | set(grafana_queries.BUILTINS)
    ids, boxes = set(), []
    for panel in dashboard["panels"]:
        assert panel["id"] not in ids
        ids.add(panel["id"])
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24
        boxes.append((pos["x"], pos["y"], pos["w"], pos["h"]))
    for a, b in ((a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]):
        overlap = a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]
        assert not overlap, f"panels overlap: {a} {b}"
    for panel in grafana_queries.panels(dashboard):
        title = panel["title"]
        assert len(panel["description"]) > 40, f"{title}: the description must say how to read it"
        assert panel["fieldConfig"]["defaults"]["unit"], f"{title}: no unit"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], title
        for target in panel["targets"]:
            expr = target["expr"]
            used = {m.group(1) or m.group(2) for m in grafana_queries.VARIABLE.finditer(expr)}
            assert used <= defined, f"{title}: undefined variables {used - defined}"
            if "gpueff_" in expr:
                # GPU series are selected through the dashboard's variables, everywhere.
                for selector in re.findall(r"gpueff_\w+\{([^}]*)\}", expr):
                    assert 'instance=~"$instance"' in selector and 'pod=~"$pod"' in selector, f"{title}: {expr}"


def test_application_dashboard_takes_throughput_from_a_variable():
    dashboard = grafana_queries.load(DASHBOARD_DIR / "gpu-efficiency-app-throughput.json")
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["throughput"]["current"]["value"] == "sum(rate(vllm:generation_tokens_total[$__rate_interval]))"
    assert variables["requests"]["current"]["value"] == "sum(rate(vllm:request_success_total[$__rate_interval]))"
    # Grafana parses a custom variable's options from its query: "text : value" pairs, commas separate.
    for name in ("throughput", "requests"):
        pairs = re.split(r"(?<!\\),", variables[name]["query"])
        assert [p.split(" : ", 1)[1] for p in pairs] == [o["value"] for o in variables[name]["options"]]
    by_title = {p["title"]: [t["expr"] for t in p["targets"]] for p in grafana_queries.panels(dashboard)}
    throughput_vs_sm = by_title["Throughput vs SM activity"]
    assert throughput_vs_sm[0] == "$throughput" and "gpueff_sm_active_ratio" in throughput_vs_sm[1]
    assert by_title["Request rate vs throughput"] == ["$requests", "$throughput"]
    (per_watt,) = by_title["Throughput per watt"]
    assert "$throughput" in per_watt and "gpueff_power_watts" in per_watt


def test_bottleneck_state_timeline_maps_every_class():
    dashboard = grafana_queries.load(DASHBOARD_DIR / "gpu-efficiency-gpu-detail.json")
    (panel,) = [p for p in grafana_queries.panels(dashboard) if p["title"] == "Bottleneck class"]
    mapping = panel["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert [mapping[str(i)]["text"] for i in range(len(BOTTLENECK_CLASSES))] == list(BOTTLENECK_CLASSES)
    for name in BOTTLENECK_CLASSES:
        assert f'class="{name}"' in panel["targets"][0]["expr"]


def test_interpolation_matches_grafana():
    values = {"gpu": grafana_queries.format_multi(["0", "4"]), "instance": grafana_queries.format_multi(["10.0.0.1:9947"]),
              "throughput": "sum(rate(x[$__rate_interval]))", **grafana_queries.builtins(3600, 15)}
    expr = grafana_queries.interpolate('$throughput / sum(y{gpu=~"$gpu", instance=~"${instance}"}[$__range])', values)
    # 1h over 1000 points: $__interval 4s -> 15s (the scrape interval); $__rate_interval = max(15+15, 60) = 60s.
    assert expr == 'sum(rate(x[60s])) / sum(y{gpu=~"(0|4)", instance=~"10\\\\.0\\\\.0\\\\.1:9947"}[3600s])'
    with pytest.raises(KeyError):
        grafana_queries.interpolate("$nope", values)
