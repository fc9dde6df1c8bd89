"""The Grafana dashboards: committed JSON equals the builder's output, and every panel is complete
(description, unit, queries through the shared variables). Their queries are run against a real
Prometheus in tests/system/test_end_to_end_prometheus.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import grafana_queries
import pytest
import yaml
from conftest import ROOT
from fakes.app_servers.server_metrics import exposed_name, servers
from repo import DASHBOARDS
from waiting import PATIENCE

from gpueff.backends.base import SLOW_INTERVAL
from gpueff.metrics import COUNTER, READINGS, SLOW
from gpueff.pipeline.derive import BOTTLENECK_CLASSES

PATHS = sorted(DASHBOARDS.glob("*.json"))
GPU_VARIABLES = ("datasource", "cluster", "job", "instance", "gpu", "namespace", "pod")
# Per-exporter series (no gpu or pod label): selected by node only.
EXPORTER_METRICS = ("gpueff_collect_errors_total", "gpueff_collect_stale", "gpueff_snapshot_age_seconds", "gpueff_bottleneck_class_info",
                    "gpueff_kubernetes_attribution_up", "gpueff_kubernetes_attribution_errors_total", "gpueff_exporter_build_info",
                    # a multi-GPU job's series: the node's, with no gpu, namespace or pod label (docs/jobs.md)
                    "gpueff_job_gpus", "gpueff_job_efficiency_ratio", "gpueff_job_peer_wait_ratio", "gpueff_job_bottleneck_gpus")


def test_committed_dashboards_equal_the_build():
    result = subprocess.run([sys.executable, str(ROOT / "dashboards" / "build.py"), "--check"], capture_output=True, text=True, timeout=PATIENCE)
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
                # GPU series are selected through the dashboard's variables, everywhere: every
                # selector by cluster, job and node, and the query by pod somewhere.
                for selector in re.findall(r"gpueff_\w+\{([^}]*)\}", expr):
                    assert 'cluster=~"$cluster"' in selector and 'instance=~"$instance"' in selector, f"{title}: {expr}"
                if set(re.findall(r"(gpueff_\w+)\{", expr)) - set(EXPORTER_METRICS):
                    assert 'pod=~"$pod"' in expr, f"{title}: {expr}"


def test_detail_dashboard_opens_on_one_gpu_and_fleet_on_all():
    detail = {v["name"]: v for v in grafana_queries.load(DASHBOARDS / "gpu-efficiency-gpu-detail.json")["templating"]["list"]}
    fleet = {v["name"]: v for v in grafana_queries.load(DASHBOARDS / "gpu-efficiency-fleet.json")["templating"]["list"]}
    # An empty current makes Grafana select the first value.
    assert detail["gpu"]["current"] == {} and detail["instance"]["current"] == {}
    assert fleet["gpu"]["current"]["value"] == ["$__all"]


def test_fleet_scales_past_one_line_per_gpu():
    panels = {p["title"]: p for p in grafana_queries.panels(grafana_queries.load(DASHBOARDS / "gpu-efficiency-fleet.json"))}
    assert panels["Efficiency across GPUs"]["type"] == "heatmap"
    spread = [t["expr"] for t in panels["Efficiency: fleet spread and the 5 worst GPUs"]["targets"]]
    assert any(e.startswith("bottomk(5,") for e in spread) and any(e.startswith("quantile(0.5,") for e in spread)
    # No panel draws a raw per-GPU series over time on the fleet dashboard.
    for title, panel in panels.items():
        if panel["type"] == "timeseries":
            for target in panel["targets"]:
                assert re.match(r"^(sum|avg|quantile|bottomk|topk|count|job:)", target["expr"]), f"{title}: {target['expr']}"
    assert "job:gpueff_efficiency:ratio_rate5m" in panels["Efficiency per cluster (recording rule)"]["targets"][0]["expr"]
    # Click-through from the wasteful GPUs to the detail dashboard, with that GPU selected.
    (link,) = panels["Top wasteful GPUs"]["fieldConfig"]["defaults"]["links"]
    assert link["url"].startswith("/d/gpueff-gpu-detail/") and "var-gpu=${__field.labels.gpu}" in link["url"] and "var-instance=${__field.labels.instance}" in link["url"]
    # The waste panels name owners: pods, Slurm jobs and bare-host users, a shared GPU split among them.
    for title in ("Top wasteful GPUs", "Top wasteful owners", "Waste by owner: held idle, host-starved, busy not working"):
        for target in panels[title]["targets"]:
            assert all(name in target["expr"] for name in ("gpueff_gpu_pod_info", "gpueff_gpu_job_info", "gpueff_holder_state_seconds_total", "(no owner)")), title
    assert panels["Top wasteful GPUs"]["targets"][0]["legendFormat"] == "{{instance}} GPU {{gpu}}: {{owner}}"
    assert panels["GPUs down"]["fieldConfig"]["defaults"]["thresholds"]["steps"][-1] == {"color": "red", "value": 1}
    for title in ("Namespaces: efficiency, waste and cost", "Busy-but-idle cost per hour", "Xid errors", "Uncorrectable ECC errors", "Row remaps pending / failed", "Energy", "GPUs without profiling", "GPUs with implausible readings", "Exporter health"):
        assert title in panels, title
    assert "gpueff_kubernetes_attribution_up" in " ".join(t["expr"] for t in panels["Exporter health"]["targets"])


def test_detail_dashboard_health_and_only_active_throttle_reasons():
    panels = {p["title"]: p for p in grafana_queries.panels(grafana_queries.load(DASHBOARDS / "gpu-efficiency-gpu-detail.json"))}
    assert panels["Throttle reasons"]["targets"][0]["expr"].endswith("> 0")
    temperature = panels["Temperature"]["fieldConfig"]["defaults"]
    assert temperature["custom"]["thresholdsStyle"]["mode"] != "off" and [s["value"] for s in temperature["thresholds"]["steps"]] == [None, 80, 85]
    (precision,) = panels["Tensor pipes by precision"]["targets"]
    assert "rate(gpueff_pipe_active_seconds_total{" in precision["expr"] and 'pipe=~"tensor_hmma|tensor_imma|tensor_dfma"' in precision["expr"]
    for title in ("Xid errors", "ECC errors and remapped rows", "Profiling, row remaps and GPU state", "Energy in the time range", "Exporter health"):
        assert title in panels, title
    assert "gpueff_readings_implausible" in panels["Counter health"]["targets"][0]["expr"]
    assert "gpueff_kubernetes_attribution_up" in panels["Kubernetes attribution"]["targets"][0]["expr"]


def test_activity_over_time_is_the_rate_of_its_seconds_counter() -> None:
    """A gauge sampled once per step shows one poll window per step; the rate of the activity's
    seconds counter is the step's mean, exact at any range (issue 43). Every activity time series
    reads the counters; the window-against-instant panel keeps the two gauges it compares."""
    gauges = ("gpueff_sm_active_ratio", "gpueff_tensor_active_ratio", "gpueff_dram_active_ratio", "gpueff_tensor_hmma_active_ratio", "gpueff_fp32_active_ratio", "gpueff_integer_active_ratio")
    for path in PATHS:
        for panel in grafana_queries.panels(grafana_queries.load(path)):
            if panel.get("type") != "timeseries":
                continue
            for target in panel.get("targets", []):
                assert not any(gauge in target["expr"] for gauge in gauges), (path.stem, panel["title"], target["expr"])


def test_detail_dashboard_shows_window_and_instant_utilization() -> None:
    panels = {p["title"]: p for p in grafana_queries.panels(grafana_queries.load(DASHBOARDS / "gpu-efficiency-gpu-detail.json"))}
    (panel,) = [p for title, p in panels.items() if title.startswith("Utilization: window mean")]
    assert [re.findall(r"gpueff_\w+", t["expr"])[0] for t in panel["targets"]] == ["gpueff_gpu_utilization_ratio", "gpueff_gpu_utilization_instant_ratio"]
    assert "nvidia-smi" in panel["description"] and "window" in panel["description"]


def test_detail_dashboard_joins_the_class_now_with_what_to_try() -> None:
    panels = {p["title"]: p for p in grafana_queries.panels(grafana_queries.load(DASHBOARDS / "gpu-efficiency-gpu-detail.json"))}
    (target,) = panels["Bottleneck now: what to try"]["targets"]
    assert target["instant"] and target["format"] == "table"
    assert "gpueff_bottleneck{" in target["expr"] and "== 1" in target["expr"] and "group_left (meaning, what_to_try)" in target["expr"]
    assert "gpueff_bottleneck_class_info{" in target["expr"]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_firing_alerts_annotate_the_timelines(path):
    annotations = grafana_queries.load(path)["annotations"]["list"]
    (alerts,) = [a for a in annotations if a.get("expr", "").startswith("ALERTS{")]
    assert 'alertstate="firing"' in alerts["expr"] and 'instance=~"$instance"' in alerts["expr"] and alerts["enable"]


def test_application_dashboard_takes_counters_from_variables_and_filters_them():
    dashboard = grafana_queries.load(DASHBOARDS / "gpu-efficiency-app-throughput.json")
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for name in ("throughput", "requests"):
        variable = variables[name]
        # The names Prometheus stores, one at a time, vLLM's first (descending order).
        assert variable["type"] == "query" and not variable["multi"] and not variable["includeAll"] and variable["sort"] == 2, name
        assert grafana_queries.LABEL_VALUES.match(variable["definition"]).group("label") == "__name__", name
        assert 'cluster=~"$cluster", namespace=~"$namespace"' in variable["definition"], name
    by_title = {p["title"]: [t["expr"] for t in p["targets"]] for p in grafana_queries.panels(dashboard)}
    throughput = 'sum(rate({__name__="$throughput", cluster=~"$cluster", namespace=~"$namespace", pod=~"$pod"}[$__rate_interval]))'
    assert by_title["Throughput vs SM activity"][0] == throughput and "gpueff_sm_occupancy_ratio" in " ".join(by_title["Throughput vs SM activity"])
    arrivals, completions, _ = by_title["Request arrivals vs completions vs throughput"]
    assert "namespace:app_requests_arrived:rate5m" in arrivals and "$requests" in completions
    (per_request,) = by_title["Throughput per request"]
    assert per_request.endswith("> 0)"), "no data instead of NaN when nothing completes"
    (per_watt,) = by_title["Throughput per watt (server counter)"]
    assert per_watt.startswith(throughput) and 'pod=~"$pod"' in per_watt.split("/", 1)[1]
    for title, metric in (("Units per joule", "gpueff_app_throughput_per_second"), ("Model FLOPs utilization", "gpueff_app_model_flops_utilization_ratio"),
                          ("Cost per million units", "gpueff_app_cost_per_million_units"), ("Units per SM-active second", "gpueff_app_units_per_sm_active_second")):
        assert metric in by_title[title][0] and "gpueff_app_gpu_info" in by_title[title][0], title
    # No regex over __name__ inside rate(): both spellings of one series in its window would fail it.
    assert not any(re.search(r"rate\(\{__name__=~", expr) for exprs in by_title.values() for expr in exprs)


# The serving panels and the role of the recorded series each one reads.
SERVING_PANELS = {"ttft": "Time to first token", "itl": "Inter-token latency", "waiting": "Queue", "running": "Queue", "kv_cache": "KV-cache use"}


@pytest.mark.parametrize("server", sorted(servers()))
def test_the_app_dashboard_reads_each_recorded_server_in_either_spelling(server):
    """Driven by tests/support/fakes/app_servers/server_metrics.yml: each server's work and requests counters are among
    the variables' names in both spellings (what the server writes, what Prometheus 2.x stores);
    the serving panels read vLLM's (current and older names) and SGLang's in both spellings."""
    dashboard = grafana_queries.load(DASHBOARDS / "gpu-efficiency-app-throughput.json")
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    patterns = {name: re.search(r'__name__=~"([^"]+)"', variables[name]["definition"]).group(1) for name in ("throughput", "requests")}
    by_title = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in grafana_queries.panels(dashboard)}
    description = servers()[server]
    for metric in description["metrics"]:
        name, role = exposed_name(metric), metric["role"]
        spelled = {name, name.replace(":", "_")}
        if role == "units":
            assert all(re.fullmatch(patterns["throughput"], each) for each in spelled), (server, name)
        if role == "completions":
            assert all(re.fullmatch(patterns["requests"], each) for each in spelled), (server, name)
        if role in SERVING_PANELS and ":" in metric["name"]:  # the prometheus_client servers with prefixed names
            series = metric["name"] + ("_bucket" if metric["type"] == "histogram" else "")
            for each in {series, series.replace(":", "_")}:
                assert re.search(rf"\b{re.escape(each)}\{{", by_title[SERVING_PANELS[role]]), (server, each)


def test_bottleneck_state_timeline_maps_every_class():
    dashboard = grafana_queries.load(DASHBOARDS / "gpu-efficiency-gpu-detail.json")
    (panel,) = [p for p in grafana_queries.panels(dashboard) if p["title"] == "Bottleneck class"]
    mapping = panel["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert [mapping[str(i)]["text"] for i in range(len(BOTTLENECK_CLASSES))] == list(BOTTLENECK_CLASSES)
    for name in BOTTLENECK_CLASSES:
        assert f'class="{name}"' in panel["targets"][0]["expr"]


def test_rates_of_slow_counters_span_at_least_four_slow_steps():
    """A counter read at the slow cadence (its DCGM field is watched SLOW) steps once a
    slow_collect_interval: its rate over $__rate_interval takes that interval as the query's Min
    step, or Grafana's 1 m window of 15 s scrapes reads 0.67x then 1.33x of the truth."""
    slow = {metric.name for metric, reading in READINGS if reading.dcgm is not None and reading.dcgm.cadence == SLOW and metric.type == COUNTER}
    checked = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in grafana_queries.panels(grafana_queries.load(path)):
            for target in panel["targets"]:
                for name in re.findall(r"(?:rate|increase)\((\w+)\{[^}]*\}\[\$__rate_interval\]", target["expr"]):
                    if name in slow:
                        checked.append(name)
                        assert target.get("interval") == f"{SLOW_INTERVAL:.0f}s", (path.name, panel["title"], name)
    assert sorted(checked) == ["gpueff_clock_violation_seconds_total", "gpueff_nvlink_errors_total", "gpueff_pcie_replay_errors_total"]
    values = grafana_queries.builtins(3600, 15)
    assert grafana_queries.with_min_step(values, "30s")["__rate_interval"] == "120s"  # max(15 + 30, 4 x 30)


def test_interpolation_matches_grafana():
    # A built-in inside a custom variable's value is filled too (Grafana's backend replaces it last).
    values = {"gpu": grafana_queries.format_multi(["0", "4"]), "instance": grafana_queries.format_multi(["10.0.0.1:9947"]),
              "throughput": "sum(rate(x[$__rate_interval]))", **grafana_queries.builtins(3600, 15)}
    expr = grafana_queries.interpolate('$throughput / sum(y{gpu=~"$gpu", instance=~"${instance}"}[$__range])', values)
    # 1h over 1000 points: $__interval 4s -> 15s (the scrape interval); $__rate_interval = max(15+15, 60) = 60s.
    assert expr == 'sum(rate(x[60s])) / sum(y{gpu=~"(0|4)", instance=~"10\\\\.0\\\\.0\\\\.1:9947"}[3600s])'
    with pytest.raises(KeyError):
        grafana_queries.interpolate("$nope", values)


HOLDER_SERIES = {
    # Two Slurm jobs time-share GPU 0 (per minute): job 101 holds it 40 s, SMs active 30 s, 10 s
    # wasted, 400 W; job 202 holds it 20 s, 2 s active, 18 s wasted, 200 W. The GPU's waste costs
    # 0.0186667 USD a minute (28 wasted seconds at 2.4 USD per GPU-hour).
    'gpueff_holder_{}_total{{job="gpu-efficiency-exporter",instance="node1:9947",gpu="0",uuid="GPU-a",holder_kind="slurm_job",holder="101"}}':
        {"busy_seconds": 40, "sm_active_seconds": 30, "busy_idle_sm_seconds": 10, "energy_joules": 24000},
    'gpueff_holder_{}_total{{job="gpu-efficiency-exporter",instance="node1:9947",gpu="0",uuid="GPU-a",holder_kind="slurm_job",holder="202"}}':
        {"busy_seconds": 20, "sm_active_seconds": 2, "busy_idle_sm_seconds": 18, "energy_joules": 12000},
    'gpueff_{}{{job="gpu-efficiency-exporter",instance="node1:9947",gpu="0",uuid="GPU-a"}}': {"busy_idle_sm_seconds_total": 28},
    'gpueff_{}{{job="gpu-efficiency-exporter",instance="node1:9947",gpu="0",uuid="GPU-a",currency="USD"}}': {"busy_idle_sm_cost_total": 0.0186666666666667},
}


def test_holder_table_computes_each_jobs_figures_over_the_range(tmp_path):
    """The fleet dashboard's per-holder queries (no holders under replay) evaluated by promtool on
    two jobs sharing a GPU, with everything at All and a 1h range."""
    promtool = shutil.which("promtool")
    assert promtool, "tests/run.sh installs the Debian package prometheus"
    dashboard = grafana_queries.load(DASHBOARDS / "gpu-efficiency-fleet.json")
    (panel,) = [p for p in grafana_queries.panels(dashboard) if p["title"] == "Holders: efficiency, waste, energy and cost"]
    values = {v["name"]: v.get("allValue", "") for v in dashboard["templating"]["list"]} | grafana_queries.builtins(3600, 60)
    series = [{"series": name.format(metric), "values": f"0+{per_minute!r}x70"} for name, metrics in HOLDER_SERIES.items() for metric, per_minute in metrics.items()]
    expected = [  # efficiency, busy GPU-hours, busy-but-idle GPU-hours, cost, kWh: per job 101, 202
        (0.75, 0.1), (40 / 60, 20 / 60), (10 / 60, 18 / 60), (0.4, 0.72), (0.4, 0.2),
    ]
    tests = []
    for target, (job_101, job_202) in zip(panel["targets"], expected, strict=True):
        labels = 'currency="USD",holder_kind="slurm_job",holder="{}"' if "currency" in target["expr"] else 'holder_kind="slurm_job",holder="{}"'
        # In millionths, rounded: promtool compares floats exactly.
        tests.append({"expr": f"round(({grafana_queries.interpolate(target['expr'], values)}) * 1e6)", "eval_time": "65m",
                      "exp_samples": [{"labels": "{" + labels.format(job) + "}", "value": round(value * 1e6)} for job, value in (("101", job_101), ("202", job_202))]})
    (tmp_path / "empty.yml").write_text("groups: []\n")
    (tmp_path / "holders.test.yml").write_text(yaml.safe_dump({"rule_files": ["empty.yml"], "evaluation_interval": "1m",
                                                                "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]}))
    result = subprocess.run([promtool, "test", "rules", "holders.test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_every_stat_has_thresholds_of_its_own(path):
    """Without its own thresholds a stat takes Grafana's default ones (red from 80): 5,000 W of
    fleet power or 120 GPUs up would read red."""
    for panel in grafana_queries.panels(grafana_queries.load(path)):
        if panel["type"] != "stat":
            continue
        defaults = panel["fieldConfig"]["defaults"]
        steps = defaults.get("thresholds", {}).get("steps", [])
        assert steps and steps[0]["value"] is None, f"{panel['title']}: no thresholds"
        values = [step["value"] for step in steps[1:]]
        assert values == sorted(values), panel["title"]
        assert defaults["color"] == {"mode": "thresholds"}, panel["title"]


def promtool_values(tmp_path, dashboard: dict, expr: str, series: list[dict], eval_time: str, expected: list[dict], range_seconds: int = 3600) -> subprocess.CompletedProcess[str]:
    """promtool's verdict on one of ``dashboard``'s queries, interpolated with every variable at All."""
    values = {v["name"]: v.get("allValue", "") for v in dashboard["templating"]["list"]} | grafana_queries.builtins(range_seconds, 60)
    test = {"expr": grafana_queries.interpolate(expr, values), "eval_time": eval_time, "exp_samples": expected}
    (tmp_path / "empty.yml").write_text("groups: []\n")
    (tmp_path / "query.test.yml").write_text(yaml.safe_dump({"rule_files": ["empty.yml"], "evaluation_interval": "1m",
                                                             "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [test]}]}))
    promtool = shutil.which("promtool")
    assert promtool, "tests/run.sh installs the Debian package prometheus"
    return subprocess.run([promtool, "test", "rules", "query.test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=PATIENCE)


def test_exporter_health_never_counts_other_jobs_down_targets(tmp_path):
    """kube-prometheus-stack: kube-scheduler's target is down all along (its metrics port is not
    exposed on most clusters). With the Job variable at All, the fleet's Exporter health counts the
    one exporter that stopped answering at 31m, not kube-scheduler."""
    dashboard = grafana_queries.load(DASHBOARDS / "gpu-efficiency-fleet.json")
    (panel,) = [p for p in grafana_queries.panels(dashboard) if p["title"] == "Exporter health"]
    down = next(t["expr"] for t in panel["targets"] if t["legendFormat"] == "down")
    info = 'gpueff_exporter_build_info{{job="gpu-efficiency-exporter",instance="{}",version="0.1.0",backend="nvml",replayed="false"}}'
    series = [{"series": 'up{job="kube-scheduler",instance="10.0.0.5:10259"}', "values": "0x90"},
              {"series": 'up{job="gpu-efficiency-exporter",instance="node1:9947"}', "values": "1x90"},
              {"series": 'up{job="gpu-efficiency-exporter",instance="node2:9947"}', "values": "1x30 0x60"},
              {"series": info.format("node1:9947"), "values": "1x90"},
              {"series": info.format("node2:9947"), "values": "1x30 _x60"}]
    for eval_time, count in (("20m", 0), ("40m", 1)):
        result = promtool_values(tmp_path, dashboard, down, series, eval_time, [{"labels": "{}", "value": count}])
        assert result.returncode == 0, result.stdout + result.stderr
    # The old query counted kube-scheduler as a down exporter.
    result = promtool_values(tmp_path, dashboard, 'count(up{cluster=~"$cluster", job=~"$job", instance=~"$instance"} == 0) or vector(0)', series, "20m", [{"labels": "{}", "value": 0}])
    assert result.returncode != 0


def test_waste_by_owner_splits_each_gpus_time_among_its_owners(tmp_path):
    """The fleet dashboard's ledger table evaluated by promtool over an hour at All: a pod's GPU
    held idle all hour is its hour; two pods time-slicing one GPU half an hour each; a Slurm job's
    and a bare-host user's (the fair split's holder) theirs; a GPU nobody held, "(no owner)"."""
    dashboard = grafana_queries.load(DASHBOARDS / "gpu-efficiency-fleet.json")
    (panel,) = [p for p in grafana_queries.panels(dashboard) if p["title"] == "Waste by owner: held idle, host-starved, busy not working"]
    held_idle = panel["targets"][0]["expr"]
    assert 'state="held_idle"' in held_idle
    gpu = 'job="gpu-efficiency-exporter",instance="node1:9947",gpu="{}",uuid="GPU-{}"'
    series = [{"series": f'gpueff_gpu_state_seconds_total{{{gpu.format(n, u)},state="held_idle"}}', "values": "0+60x70"} for n, u in enumerate("abcde")]
    series += [{"series": f"gpueff_gpu_pod_info{{{gpu.format(0, 'a')},namespace=\"notebooks\",pod=\"jupyter-alice-0\",container=\"notebook\"}}", "values": "1x70"},
               {"series": f"gpueff_gpu_pod_info{{{gpu.format(1, 'b')},namespace=\"ml\",pod=\"eval-0\",container=\"main\"}}", "values": "1x70"},
               {"series": f"gpueff_gpu_pod_info{{{gpu.format(1, 'b')},namespace=\"research\",pod=\"probe-0\",container=\"main\"}}", "values": "1x70"},
               {"series": f"gpueff_gpu_job_info{{{gpu.format(2, 'c')},job_id=\"48377\",user_id=\"2002\"}}", "values": "1x70"},
               {"series": f"gpueff_holder_state_seconds_total{{{gpu.format(3, 'd')},holder_kind=\"process\",holder=\"1003:python3\",state=\"held_idle\"}}", "values": "0+60x70"},
               {"series": f"gpueff_holder_state_seconds_total{{{gpu.format(3, 'd')},holder_kind=\"unattributed\",holder=\"\",state=\"held_idle\"}}", "values": "0x70"}]
    hours = {"notebooks/jupyter-alice-0": 1, "ml/eval-0": 0.5, "research/probe-0": 0.5, "Slurm job 48377": 1, "user 1003:python3": 1, "(no owner)": 1}
    expected = [{"labels": f'{{owner="{owner}"}}', "value": round(value * 1e6)} for owner, value in hours.items()]
    result = promtool_values(tmp_path, dashboard, f"round(({held_idle}) * 1e6)", series, "65m", expected)
    assert result.returncode == 0, result.stdout + result.stderr
