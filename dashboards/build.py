"""Builds the Grafana dashboards (Grafana 10/11 JSON) from code.

    python dashboards/build.py          # rewrite deploy/mixin/dashboards/*.json
    python dashboards/build.py --check  # exit 1 if a committed file differs from the build

The JSON is committed once, in the monitoring mixin's folder (deploy/mixin/dashboards/): a mixin is
imported on its own (jsonnet-bundler vendors its folder), so its files must be real ones there. The
Helm chart reads them through a symbolic link (helm/gpu-efficiency-exporter/files/dashboards: Helm
packages the files behind it), and the compose stack mounts that folder.

Every panel carries a description and a unit; every query selects GPUs through the same variables
(cluster, job, instance, gpu, namespace, pod) whose "All" value is ``.*``, so the dashboards work
with and without a ``cluster`` external label and the Kubernetes attribution labels. The panels read
raw exporter metrics; only the "per cluster" panel and the request arrivals read recording rules.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "deploy" / "mixin" / "dashboards"
sys.path.insert(0, str(HERE.parent))

from gpueff.backends.base import SLOW_INTERVAL  # noqa: E402
from gpueff.pipeline.derive import BOTTLENECK_CLASSES  # noqa: E402

DS = {"type": "prometheus", "uid": "${datasource}"}
NODE_SEL = 'cluster=~"$cluster", job=~"$job", instance=~"$instance"'
SEL = NODE_SEL + ', gpu=~"$gpu", namespace=~"$namespace", pod=~"$pod"'
APP_SEL = 'cluster=~"$cluster", namespace=~"$namespace", pod=~"$pod"'
GPU_LEGEND = "{{instance}} GPU {{gpu}}"
TAGS = ["gpu", "gpu-efficiency"]
# A counter read at the slow cadence steps every slow_collect_interval: a rate over fewer than ~4 of
# its steps swings (over a 1 m window of 15 s scrapes, a 30 s counter's rate reads 0.67x or 1.33x of
# the truth in turn). As a query's Min step, the slow interval makes Grafana's $__rate_interval at
# least 4 of them (max($__interval + min step, 4 x min step)).
SLOW_STEP = f"{SLOW_INTERVAL:.0f}s"

# The application-throughput dashboard's server counters, as regular expressions over metric names.
# The variables list the names Prometheus really stores that match (vLLM and SGLang in either
# spelling: Prometheus 2.x stores vllm:x as vllm_x, docs/apps.md), so a panel puts one exact name
# into rate(...[$__rate_interval]) with the Namespace/Pod matchers (docs: "Variables").
# Names from each server's source (docs/apps.md, "Servers and their metric names").
THROUGHPUT_COUNTERS = (
    "vllm[:_]generation_tokens_total",  # vLLM generated tokens
    "sglang[:_]generation_tokens_total",  # SGLang generated tokens (counted when a request finishes)
    "tgi_request_generated_tokens_sum",  # TGI generated tokens (per finished request)
    "generation_tokens_total",  # NVIDIA NIM for LLMs generated tokens
    "nv_inference_count",  # Triton inferences
    "gpueff_app_units_total",  # apps joined by this exporter (docs/apps.md)
)
REQUEST_COUNTERS = (
    "vllm[:_]request_success_total",  # vLLM finished requests
    "sglang[:_]num_requests_total",  # SGLang finished requests
    "tgi_request_success",  # TGI finished requests (tgi_request_count counts the ones received)
    "nv_inference_request_success",  # Triton successful requests
)
# The serving panels, per server: (legend, [metric names, first found wins]); each name is read in
# both spellings. vLLM V1 renamed time_per_output_token_seconds to inter_token_latency_seconds and
# gpu_cache_usage_perc to kv_cache_usage_perc: the current names first, the old ones as fallback.
QUANTILES = ((0.5, "p50"), (0.95, "p95"))
SERVING: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "ttft": (("vLLM", ("vllm:time_to_first_token_seconds_bucket",)), ("SGLang", ("sglang:time_to_first_token_seconds_bucket",))),
    "itl": (("vLLM", ("vllm:inter_token_latency_seconds_bucket", "vllm:time_per_output_token_seconds_bucket")),
            ("SGLang", ("sglang:inter_token_latency_seconds_bucket", "sglang:time_per_output_token_seconds_bucket"))),
    "waiting": (("vLLM", ("vllm:num_requests_waiting",)), ("SGLang", ("sglang:num_queue_reqs",))),
    "running": (("vLLM", ("vllm:num_requests_running",)), ("SGLang", ("sglang:num_running_reqs",))),
    "kv_cache": (("vLLM", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")), ("SGLang", ("sglang:token_usage",))),
}


# The pipes of gpueff_pipe_active_seconds_total a panel reads (a range's mean activity is the rate of its counter).
TENSOR_PIPE, TENSOR_SUB_PIPES, OTHER_PIPES = 'pipe="tensor"', 'pipe=~"tensor_hmma|tensor_imma|tensor_dfma"', 'pipe=~"fp64|fp32|fp16|integer"'


def sel(*extra: str) -> str:
    return "{" + ", ".join((*extra, SEL)) + "}"


def target(expr: str, legend: str = "__auto", instant: bool = False, table: bool = False, min_step: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"datasource": DS, "expr": expr, "legendFormat": legend, "range": not instant, "instant": instant}
    if table:
        out["format"] = "table"
    if min_step:
        out["interval"] = min_step
    return out


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": color, "value": value} for value, color in steps]}


GOOD_HIGH = thresholds((None, "red"), (0.3, "orange"), (0.6, "green"))
BAD_HIGH = thresholds((None, "green"), (1, "red"))
# A figure to read, neither good nor bad (power, energy): without thresholds of its own a stat takes
# Grafana's default ones, red from 80, and would paint any fleet's power red.
NEUTRAL = thresholds((None, "blue"))
# Busy-but-idle GPU-hours over the time range, per GPU or pod and for the fleet: orange from half an hour, red from two.
WASTE = thresholds((None, "green"), (0.5, "orange"), (2, "red"))


def panel(kind: str, title: str, description: str, targets: list[dict[str, Any]], unit: str, *, w: int, h: int,
          min_: float | None = None, max_: float | None = None, options: dict[str, Any] | None = None,
          custom: dict[str, Any] | None = None, overrides: list[dict[str, Any]] | None = None,
          thresholds_: dict[str, Any] | None = None, mappings: list[dict[str, Any]] | None = None,
          transformations: list[dict[str, Any]] | None = None, decimals: int | None = None,
          links: list[dict[str, Any]] | None = None, color_by_thresholds: bool = True) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": unit}
    if min_ is not None:
        defaults["min"] = min_
    if max_ is not None:
        defaults["max"] = max_
    if decimals is not None:
        defaults["decimals"] = decimals
    if custom:
        defaults["custom"] = custom
    if thresholds_:
        defaults["thresholds"] = thresholds_
        if color_by_thresholds:
            defaults["color"] = {"mode": "thresholds"}
    if mappings:
        defaults["mappings"] = mappings
    if links:
        defaults["links"] = links
    for index, item in enumerate(targets):
        item["refId"] = chr(ord("A") + index)
    out: dict[str, Any] = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": options or {},
        "gridPos": {"w": w, "h": h},
    }
    if transformations:
        out["transformations"] = transformations
    return out


def timeseries(title: str, description: str, targets: list[dict[str, Any]], unit: str, *, w: int = 12, h: int = 8,
               stack: bool = False, bars: bool = False, threshold_lines: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    custom: dict[str, Any] = {"drawStyle": "bars" if bars else "line", "lineWidth": 1, "fillOpacity": 60 if stack else 10, "showPoints": "never", "spanNulls": False}
    if stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    if threshold_lines:
        custom["thresholdsStyle"] = {"mode": "line+area"}
        kwargs.update(thresholds_=threshold_lines, color_by_thresholds=False)
    options = {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max", "lastNotNull"]}, "tooltip": {"mode": "multi", "sort": "desc"}}
    return panel("timeseries", title, description, targets, unit, w=w, h=h, custom=custom, options=options, **kwargs)


def stat(title: str, description: str, targets: list[dict[str, Any]], unit: str, *, w: int = 4, h: int = 4, **kwargs: Any) -> dict[str, Any]:
    options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "colorMode": "value", "graphMode": "none", "justifyMode": "auto", "textMode": "auto", "orientation": "auto"}
    return panel("stat", title, description, targets, unit, w=w, h=h, options=options, **kwargs)


def bargauge(title: str, description: str, targets: list[dict[str, Any]], unit: str, *, w: int = 12, h: int = 8, **kwargs: Any) -> dict[str, Any]:
    options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True, "valueMode": "color"}
    return panel("bargauge", title, description, targets, unit, w=w, h=h, options=options, **kwargs)


def state_timeline(title: str, description: str, targets: list[dict[str, Any]], *, mappings: list[dict[str, Any]], w: int = 12, h: int = 8) -> dict[str, Any]:
    options = {"showValue": "never", "mergeValues": True, "rowHeight": 0.9, "alignValue": "left", "legend": {"displayMode": "list", "placement": "bottom"}}
    return panel("state-timeline", title, description, targets, "none", w=w, h=h, options=options, mappings=mappings, custom={"fillOpacity": 80, "lineWidth": 0})


def table(title: str, description: str, targets: list[dict[str, Any]], unit: str, *, w: int = 24, h: int = 8, **kwargs: Any) -> dict[str, Any]:
    options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"], "countRows": False}}
    return panel("table", title, description, targets, unit, w=w, h=h, options=options, **kwargs)


def heatmap(title: str, description: str, targets: list[dict[str, Any]], unit: str, *, w: int = 12, h: int = 8) -> dict[str, Any]:
    """How many series sit in each value bucket over time (Grafana computes the buckets)."""
    options = {"calculate": True, "calculation": {"yBuckets": {"mode": "count", "value": "10"}}, "cellGap": 1,
               "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64, "exponent": 0.5, "fill": "dark-orange", "reverse": False},
               "yAxis": {"axisPlacement": "left", "unit": unit, "min": 0, "max": 1}, "tooltip": {"mode": "single", "yHistogram": True},
               "legend": {"show": True}, "rowsFrame": {"layout": "auto"}, "showValue": "never"}
    return panel("heatmap", title, description, targets, unit, w=w, h=h, options=options)


# The columns of the per-namespace and per-holder tables: efficiency, busy and busy-but-idle GPU-hours, waste cost, energy.
WASTE_TABLE_FORMAT: dict[str, Any] = {
    "overrides": [{"matcher": {"id": "byName", "options": "efficiency"}, "properties": [{"id": "unit", "value": "percentunit"}]},
                  {"matcher": {"id": "byRegexp", "options": ".*GPU-hours"}, "properties": [{"id": "unit", "value": "h"}]},
                  {"matcher": {"id": "byName", "options": "energy"}, "properties": [{"id": "unit", "value": "kwatth"}]}],
    "transformations": [{"id": "merge", "options": {}},
                        {"id": "organize", "options": {"excludeByName": {"Time": True},
                                                       "renameByName": {"Value #A": "efficiency", "Value #B": "busy GPU-hours", "Value #C": "busy-but-idle GPU-hours", "Value #D": "busy-but-idle cost", "Value #E": "energy"}}}],
}


def detail_link(title: str = "GPU detail") -> list[dict[str, Any]]:
    """A data link from a per-GPU value to the GPU detail dashboard, keeping time range and data source."""
    url = ("/d/gpueff-gpu-detail/gpu-efficiency-gpu-detail?${__url_time_range}&${datasource:queryparam}"
           "&var-cluster=${__field.labels.cluster}&var-instance=${__field.labels.instance}&var-gpu=${__field.labels.gpu}")
    return [{"title": f"{title}: ${{__field.labels.instance}} GPU ${{__field.labels.gpu}}", "url": url}]


def row(title: str) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "gridPos": {"w": 24, "h": 1}}


def right_axis(*names: str, unit: str) -> list[dict[str, Any]]:
    """Overrides that move the series with these display names to a right-hand axis with ``unit``."""
    return [
        {"matcher": {"id": "byName", "options": name}, "properties": [{"id": "custom.axisPlacement", "value": "right"}, {"id": "unit", "value": unit}, {"id": "min", "value": 0}, {"id": "max", "value": 1}]}
        for name in names
    ]


def dashed(regex: str) -> dict[str, Any]:
    return {"matcher": {"id": "byRegexp", "options": regex}, "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}, {"id": "custom.fillOpacity", "value": 0}]}


def index_mappings(names: tuple[str, ...]) -> list[dict[str, Any]]:
    palette = ("transparent", "purple", "green", "blue", "orange", "yellow", "red", "super-light-blue", "text")
    return [{"type": "value", "options": {str(i): {"text": name, "color": palette[i % len(palette)], "index": i} for i, name in enumerate(names)}}]


def bottleneck_index(selector: str) -> str:
    """One series per GPU whose value is the index of its current bottleneck class."""
    parts = [f'(gpueff_bottleneck{{class="{name}", {selector}}} == 1) * {i}' for i, name in enumerate(BOTTLENECK_CLASSES)]
    return "max by (instance, gpu, uuid) (\n  " + "\n  or ".join(parts) + "\n)"


# Variables -------------------------------------------------------------------------------------

def datasource_variable() -> dict[str, Any]:
    return {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": []}


def query_variable(name: str, label: str, query: str, description: str, *, all_by_default: bool = True) -> dict[str, Any]:
    """A multi-value variable whose All is ``.*``; without ``all_by_default`` Grafana starts on the
    first value (an empty ``current``), so a detail dashboard opens on one GPU, not on the fleet."""
    return {
        "name": name,
        "label": label,
        "description": description,
        "type": "query",
        "datasource": DS,
        "query": query,
        "definition": query,
        "refresh": 2,
        "sort": 3,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]} if all_by_default else {},
        "options": [],
        "hide": 0,
        "regex": "",
    }


def gpu_variables(*, one_gpu: bool = False) -> list[dict[str, Any]]:
    """The variables every dashboard shares; ``one_gpu`` opens on the first node and GPU instead of All."""
    return [
        datasource_variable(),
        query_variable("cluster", "Cluster", "label_values(gpueff_gpu_up, cluster)", "The Prometheus external label cluster (empty where there is none: keep All)."),
        query_variable("job", "Job", 'label_values(gpueff_gpu_up{cluster=~"$cluster"}, job)', "The scrape job of the exporters."),
        query_variable("instance", "Node / instance", 'label_values(gpueff_gpu_up{cluster=~"$cluster", job=~"$job"}, instance)', "The exporter instance (one per node).", all_by_default=not one_gpu),
        query_variable("gpu", "GPU", 'label_values(gpueff_gpu_up{cluster=~"$cluster", job=~"$job", instance=~"$instance"}, gpu)', "GPU index on the node.", all_by_default=not one_gpu),
        query_variable("namespace", "Namespace", 'label_values(gpueff_gpu_up{cluster=~"$cluster", job=~"$job", instance=~"$instance"}, namespace)', "Kubernetes namespace of the pod using the GPU (empty without Kubernetes attribution: keep All)."),
        query_variable("pod", "Pod", 'label_values(gpueff_gpu_up{cluster=~"$cluster", job=~"$job", instance=~"$instance", namespace=~"$namespace"}, pod)', "Kubernetes pod using the GPU (empty without Kubernetes attribution: keep All)."),
    ]


def metric_name_variable(name: str, label: str, patterns: tuple[str, ...], description: str) -> dict[str, Any]:
    """A single-value variable listing the metric names Prometheus stores that match ``patterns``
    in the selected cluster and namespaces. Sorted descending, so vLLM comes first and the
    exporter's own gpueff_app_units_total last; Grafana opens on the first."""
    query = f'label_values({{__name__=~"{"|".join(patterns)}", cluster=~"$cluster", namespace=~"$namespace"}}, __name__)'
    return {
        "name": name,
        "label": label,
        "description": description,
        "type": "query",
        "datasource": DS,
        "query": query,
        "definition": query,
        "refresh": 2,
        "sort": 2,
        "multi": False,
        "includeAll": False,
        "current": {},
        "options": [],
        "hide": 0,
        "regex": "",
    }


def spellings(name: str) -> tuple[str, ...]:
    """A metric name as the server writes it and as Prometheus 2.x stores it (colons as underscores)."""
    escaped = name.replace(":", "_")
    return (name, escaped) if escaped != name else (name,)


def first_found(names: tuple[str, ...], expression: str) -> str:
    """``expression`` (with ``{name}``) for each name in each spelling, joined with ``or``: the first
    name found wins, and one spelling of a series never meets the other inside rate() (a regex over
    __name__ would fail with "vector cannot contain metrics with the same labelset" while both are
    in the window, as after an upgrade from Prometheus 2.x to 3.x)."""
    return "\n  or ".join(expression.format(name=spelled) for name in names for spelled in spellings(name))


def per_server(role: str, expression: str, by: str = "") -> str:
    """One series per server (label ``server``) of a serving role: ``expression`` over that
    server's first name found, servers side by side."""
    keep = f"sum by ({by}, server)" if by else "sum by (server)"
    parts = [f'label_replace(\n  {first_found(names, expression)},\n  "server", "{legend}", "", "")' for legend, names in SERVING[role]]
    return f"{keep} (\n" + "\nor ".join(parts) + "\n)"


# Layout ----------------------------------------------------------------------------------------

def lay_out(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Place panels left to right in rows of 24 columns, and number them."""
    x = y = line_height = 0
    for number, item in enumerate(panels, start=1):
        pos = item["gridPos"]
        if item["type"] == "row" or x + pos["w"] > 24:
            x, y, line_height = 0, y + line_height, 0
        pos["x"], pos["y"] = x, y
        x += pos["w"]
        line_height = max(line_height, pos["h"])
        if item["type"] == "row":
            x, y, line_height = 0, y + pos["h"], 0
        item["id"] = number
    return panels


def alert_annotation() -> dict[str, Any]:
    """The rules' firing alerts on every timeline (Prometheus's ALERTS series), per node."""
    return {
        "name": "GPU alerts", "datasource": DS, "enable": True, "hide": False, "iconColor": "red",
        "expr": f'ALERTS{{alertstate="firing", {NODE_SEL}}}', "step": "60s",
        "titleFormat": "{{alertname}}", "textFormat": "{{instance}} GPU {{gpu}} {{severity}}", "tagKeys": "severity", "useValueForTime": False,
    }


def dashboard(uid: str, title: str, description: str, panels: list[dict[str, Any]], variables: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": TAGS,
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "browser",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "annotations": {"list": [
            {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"},
            alert_annotation(),
        ]},
        "links": [{"title": "GPU efficiency", "type": "dashboards", "tags": TAGS, "asDropdown": True, "includeVars": True, "keepTime": True}],
        "templating": {"list": variables},
        "panels": lay_out(panels),
    }


# Dashboards ------------------------------------------------------------------------------------

def owners(window: str) -> str:
    """One series per GPU and owner that held it at any time in ``window``, with an ``owner`` label
    saying who: a pod's namespace/pod (gpueff_gpu_pod_info), "Slurm job <id>" (gpueff_gpu_job_info),
    "user <uid>:<program>" or "user <uid>" for a bare host's processes (the fair split's holders)."""
    s, holders = sel(), sel('holder_kind=~"process|user"')
    pods = f'label_join(max_over_time(gpueff_gpu_pod_info{s}[{window}]), "owner", "/", "namespace", "pod")'
    jobs = f'label_join(label_replace(max_over_time(gpueff_gpu_job_info{s}[{window}]), "kind", "Slurm job", "", ""), "owner", " ", "kind", "job_id")'
    users = (f'label_join(label_replace(group by (cluster, instance, gpu, uuid, holder) (count_over_time(gpueff_holder_state_seconds_total{holders}[{window}])), '
             '"kind", "user", "", ""), "owner", " ", "kind", "holder")')
    return f"max by (cluster, instance, gpu, uuid, owner) (\n  {pods}\n  or {jobs}\n  or {users}\n)"


def per_owner_share(metric: str, window: str, by: str = "owner", matchers: str = "") -> str:
    """``increase(metric[window])`` per ``by`` (labels of owners(): owner, and the GPU's), a GPU
    held by several owners in the window (time-slicing, one after another) split evenly among
    them; the GPUs no owner held as owner "(no owner)"."""
    matched = f"{matchers}, " if matchers else ""
    held_by = owners(window)
    gpus = f'sum by (cluster, instance, gpu, uuid) (increase({metric}{{{matched}{NODE_SEL}, gpu=~"$gpu"}}[{window}]))'
    held = (f"sum by ({by}) (\n  {gpus}\n  * on (cluster, instance, uuid) group_right ()\n"
            f"  ({held_by} / on (cluster, instance, uuid) group_left () count by (cluster, instance, uuid) ({held_by}))\n)")
    free = (f"label_replace(sum by ({by}) (\n  increase({metric}{sel(matchers) if matchers else sel()}[{window}])\n"
            f"  unless on (cluster, instance, uuid) {held_by}\n), \"owner\", \"(no owner)\", \"\", \"\")")
    return f"(\n{held}\nor\n{free}\n)"


# The ledger's states of GPU time held but not doing the GPU's work (docs/metrics.md, GPU time by state).
WASTE_STATES = (("held_idle", "held idle"), ("host_starved", "host-starved"), ("busy_not_working", "busy not working"))


def fleet() -> dict[str, Any]:
    s = sel()
    j = "{" + NODE_SEL + "}"  # a job's series carry no gpu, namespace or pod label: the node's selection only
    panels = [
        row("Fleet now"),
        stat("Fleet efficiency", "SM-active GPU-seconds over busy GPU-seconds across the selected GPUs, over the whole time range. 1 = every second the GPUs counted as busy, their SMs worked; 0.2 = four fifths of the 'busy' time did nothing useful. nvidia-smi's utilization cannot show this.",
             [target(f"clamp_max(sum(increase(gpueff_sm_active_seconds_total{s}[$__range])) / sum(increase(gpueff_gpu_busy_seconds_total{s}[$__range])), 1)", "efficiency", instant=True)],
             "percentunit", min_=0, max_=1, decimals=1, thresholds_=GOOD_HIGH),
        stat("GPUs in mismatch now", "GPUs that look busy (utilization >= 0.8) while under 30 % of their SMs are active (gpueff_mismatch{rule=\"high_util_low_sm\"}) or while every math pipe, DRAM and link is below a tenth of its peak (rule=\"high_util_low_work\": busy, nothing near any roof), each GPU counted once. Anything above 0 is GPU time paid for and not used: open the GPU detail dashboard for those GPUs.",
             [target("count(max by (cluster, instance, uuid) (gpueff_mismatch" + sel('rule=~"high_util_low_sm|high_util_low_work"') + ") == 1) or vector(0)", "GPUs", instant=True)], "none", thresholds_=BAD_HIGH, decimals=0),
        stat("GPUs up", "GPUs (and MIG devices) the exporter reads now; compare with the GPUs you expect on the selected nodes. Red at 0.", [target(f"sum(gpueff_gpu_up{s})", "up", instant=True)], "none", decimals=0, w=2,
             thresholds_=thresholds((None, "red"), (1, "green"))),
        stat("GPUs down", "GPUs the exporter cannot read now (lost, unreadable or stale data): red from 1. A GPU down is usually a driver or hardware fault: see the GpuLost alert.",
             [target(f"sum(1 - gpueff_gpu_up{s})", "down", instant=True)], "none", decimals=0, w=2, thresholds_=BAD_HIGH),
        stat("Busy-but-idle GPU-hours", "GPU-hours in the time range during which the GPUs counted as busy while their SMs were not (integral of max(0, utilization - SM activity)). This is the waste that utilization-based dashboards hide.",
             [target(f"sum(increase(gpueff_busy_idle_sm_seconds_total{s}[$__range])) / 3600", "GPU-hours", instant=True)], "h", decimals=2, thresholds_=WASTE),
        stat("Busy-but-idle cost", "What the busy-but-idle GPU time of the time range cost at the exporter's price_per_gpu_hour, in the labelled currency. No data means no price is configured on the exporter.",
             [target(f"sum by (currency) (increase(gpueff_busy_idle_sm_cost_total{s}[$__range]))", "{{currency}}", instant=True)], "short", decimals=2,
             thresholds_=thresholds((None, "green"), (0.01, "orange"))),
        stat("Power now", "Power drawn by the selected GPUs now, in watts (blue: a figure to read, neither good nor bad; Power per node below sets it against the limits).",
             [target(f"sum(gpueff_power_watts{s})", "power", instant=True)], "watt", decimals=0, thresholds_=NEUTRAL),
        row("Over time (scales to thousands of GPUs: distributions and the worst GPUs, not a line per GPU)"),
        timeseries("Coarse utilization vs SM activity", "Fleet average of utilization (share of time any kernel ran: nvidia-smi's quantity) against SM activity (share of SMs with work), each over the whole step: the rate of its seconds counter (gpueff_gpu_busy_seconds_total, gpueff_sm_active_seconds_total), exact at any range and scrape interval, where a gauge would show one poll window per step. The gap between the two lines is GPU time that looks busy but is not: one thread on one SM reads 100 % utilization and 0.8 % SM activity.",
                   [target(f"avg(rate(gpueff_gpu_busy_seconds_total{s}[$__rate_interval]))", "utilization"), target(f"avg(rate(gpueff_sm_active_seconds_total{s}[$__rate_interval]))", "SM activity")], "percentunit", min_=0, max_=1),
        heatmap("Efficiency across GPUs", "How many GPUs sit at each efficiency (SM activity / utilization, gpueff_efficiency_ratio) over time: a band near the top is a fleet doing real work; a band near the bottom is busy-looking GPUs doing little. Readable at 1,000 GPUs, unlike one line per GPU.",
                [target(f"gpueff_efficiency_ratio{s}", GPU_LEGEND)], "percentunit"),
        timeseries("Efficiency: fleet spread and the 5 worst GPUs", "The 10th, 50th and 90th percentile of per-GPU efficiency across the selected GPUs, and the five least efficient busy GPUs at each moment (bottomk). Click a GPU's line for its detail dashboard.",
                   [target(f"quantile(0.1, gpueff_efficiency_ratio{s})", "p10"), target(f"quantile(0.5, gpueff_efficiency_ratio{s})", "median"), target(f"quantile(0.9, gpueff_efficiency_ratio{s})", "p90"),
                    target(f"bottomk(5, gpueff_efficiency_ratio{s})", GPU_LEGEND)], "percentunit", min_=0, max_=1, links=detail_link()),
        timeseries("Efficiency per cluster (recording rule)", "job:gpueff_efficiency:ratio_rate5m from the project's recording rules: SM-active over busy GPU-seconds per cluster and job, the cheap query for a fleet of thousands of GPUs or a global view (Thanos, Mimir). No data without the rules.",
                   [target('job:gpueff_efficiency:ratio_rate5m{cluster=~"$cluster", job=~"$job"}', "{{cluster}} {{job}}")], "percentunit", min_=0, max_=1),
        timeseries("Bottleneck classes", "How many GPUs are in each bottleneck class over time (gpueff_bottleneck). compute/memory: a pipe or DRAM is at its roof (good); memory_latency: the SMs wait on memory below the DRAM roof (too few bytes in flight); host: idle gaps between kernels (input pipeline, launch overhead); underfilled: few SMs have work; latency: too few warps per SM; communication: PCIe/NVLink bound.",
                   [target(f"sum by (class) (gpueff_bottleneck{s})", "{{class}}")], "none", stack=True, decimals=0),
        timeseries("GPUs in mismatch", "GPUs flagged by each mismatch rule over time: high_util_low_sm (utilization >= 0.8 and SM activity < 0.3), low_efficiency (utilization >= 0.5 and efficiency < 0.3) and high_util_low_work (utilization >= 0.8 while every math pipe, DRAM and link is below 0.1 of its peak: what SM activity misses when warps sit resident and issue nothing). A GPU in high_util_low_sm for 70 % of 30 minutes pages through the GpuHighUtilizationLowSmActivity alert (red marks on the timelines are firing alerts).",
                   [target(f"sum by (rule) (gpueff_mismatch{s})", "{{rule}}")], "none", decimals=0),
        timeseries("Busy-but-idle GPUs", "GPU-equivalents that count as busy while their SMs idle: the rate of gpueff_busy_idle_sm_seconds_total. 2 means the fleet wastes the equivalent of two whole GPUs at that moment.",
                   [target(f"sum(rate(gpueff_busy_idle_sm_seconds_total{s}[$__rate_interval]))", "busy but idle")], "none"),
        timeseries("Busy-but-idle cost per hour", "What the busy-but-idle GPU time costs per hour at the exporter's price_per_gpu_hour, over time, in the labelled currency (rate of gpueff_busy_idle_sm_cost_total x 3600). No data means no price is configured.",
                   [target(f"sum by (currency) (rate(gpueff_busy_idle_sm_cost_total{s}[$__rate_interval])) * 3600", "{{currency}} per hour")], "short", min_=0),
        timeseries("Power per node", "Power drawn per node (sum over its selected GPUs) against the sum of their power limits (dashed). At 1,000 nodes, narrow Cluster/Job/Node first.",
                   [target(f"sum by (instance) (gpueff_power_watts{s})", "{{instance}}"), target(f"sum by (instance) (gpueff_power_limit_watts{s})", "{{instance}} limit")], "watt", min_=0, overrides=[dashed(".* limit")]),
        row("Who wastes GPU time"),
        bargauge("Top wasteful GPUs", "The ten GPUs with the most busy-but-idle GPU-hours in the time range, each with its owner (a pod's namespace/pod, a Slurm job, a bare host's user and program; a GPU held by several in the range once per owner, its hours split evenly; '(no owner)' where none is known: gpueff_gpu_attribution_info says why). Start optimising at the top: these GPUs are held and reported busy while their SMs sit idle. Click a bar for the GPU's detail dashboard.",
                 [target(f"topk(10, {per_owner_share('gpueff_busy_idle_sm_seconds_total', '$__range', 'cluster, instance, gpu, uuid, owner')}) / 3600", GPU_LEGEND + ": {{owner}}", instant=True)], "h", decimals=2, thresholds_=WASTE, links=detail_link()),
        bargauge("Top wasteful owners", "The ten owners with the most busy-but-idle GPU-hours in the time range: pods (namespace/pod), Slurm jobs and a bare host's users (uid and program, from the exporter's fair split: sharing.enabled). A GPU held by several owners in the range (time-slicing, or one after another) counts an equal share to each; GPUs no owner held show as '(no owner)'. The fair split's holder counters (gpueff_holder_*, docs/sharing.md) are exact where enabled.",
                 [target(f"topk(10, {per_owner_share('gpueff_busy_idle_sm_seconds_total', '$__range')}) / 3600", "{{owner}}", instant=True)], "h", decimals=2, thresholds_=WASTE),
        table("Waste by owner: held idle, host-starved, busy not working", "GPU-hours each owner's GPUs spent in the state ledger's waste states over the time range (gpueff_gpu_state_seconds_total): held idle (a process held memory, no kernel ran), host-starved (the GPU waited on its host) and busy not working (a mismatch rule held). Owners as in Top wasteful owners, a shared GPU's hours split evenly; '(no owner)' for GPUs nobody held. The waste alerts (GpuHeldIdle, GpuHostStarved, the mismatch alerts) name the same owners.",
              [target(per_owner_share("gpueff_gpu_state_seconds_total", "$__range", matchers=f'state="{state}"') + " / 3600", instant=True, table=True) for state, _ in WASTE_STATES],
              "h", decimals=2,
              transformations=[{"id": "merge", "options": {}},
                               {"id": "organize", "options": {"excludeByName": {"Time": True},
                                                              "renameByName": {f"Value #{chr(ord('A') + i)}": f"{name} GPU-hours" for i, (_, name) in enumerate(WASTE_STATES)}}}]),
        table("Namespaces: efficiency, waste and cost", "Per namespace over the time range: efficiency (SM-active over busy GPU-seconds), busy GPU-hours, busy-but-idle GPU-hours, what that waste cost (with a price on the exporter) and energy. namespace is empty for GPUs without Kubernetes attribution. Sort by waste to find where to start.",
              [target(f"clamp_max(sum by (namespace) (increase(gpueff_sm_active_seconds_total{s}[$__range])) / sum by (namespace) (increase(gpueff_gpu_busy_seconds_total{s}[$__range])), 1)", instant=True, table=True),
               target(f"sum by (namespace) (increase(gpueff_gpu_busy_seconds_total{s}[$__range])) / 3600", instant=True, table=True),
               target(f"sum by (namespace) (increase(gpueff_busy_idle_sm_seconds_total{s}[$__range])) / 3600", instant=True, table=True),
               target(f"sum by (namespace) (increase(gpueff_busy_idle_sm_cost_total{s}[$__range]))", instant=True, table=True),
               target(f"sum by (namespace) (increase(gpueff_energy_joules_total{s}[$__range])) / 3.6e6", instant=True, table=True)],
              "none", decimals=2,
              **WASTE_TABLE_FORMAT),
        table("GPUs now", "Every selected GPU with its model, utilization, SM activity and efficiency now. Sort by efficiency to find GPUs that look busy but do little. At fleet scale, narrow Cluster/Job/Node first.",
              [target(f"gpueff_gpu_info{s}", instant=True, table=True), target(f"gpueff_gpu_utilization_ratio{s}", instant=True, table=True),
               target(f"gpueff_sm_active_ratio{s}", instant=True, table=True), target(f"gpueff_efficiency_ratio{s}", instant=True, table=True)],
              "percentunit", decimals=2, links=detail_link(),
              transformations=[{"id": "merge", "options": {}},
                               {"id": "organize", "options": {"excludeByName": {"Time": True, "Value #A": True, "__name__": True, "job": True, "driver": True},
                                                              "renameByName": {"Value #B": "utilization", "Value #C": "SM activity", "Value #D": "efficiency"}}}]),
        row("Multi-GPU jobs: the GPUs of one job judged together, and the GPU the others wait on (docs/jobs.md)"),
        table("Jobs now", "Every job of two or more GPUs on the selected nodes (job_kind pod: the pod UID; slurm_job: the Slurm job id; process_group: the launcher and its GPUs on a bare host): its GPUs, efficiency (summed SM activity over summed utilization) and the share of its GPU time lost waiting on its straggler.",
              [target(f"gpueff_job_gpus{j}", instant=True, table=True), target(f"gpueff_job_efficiency_ratio{j}", instant=True, table=True),
               target(f"gpueff_job_peer_wait_ratio{j}", instant=True, table=True)],
              "none", w=12, decimals=2,
              transformations=[{"id": "merge", "options": {}},
                               {"id": "organize", "options": {"excludeByName": {"Time": True, "__name__": True, "job": True},
                                                              "renameByName": {"Value #A": "GPUs", "Value #B": "efficiency", "Value #C": "time lost waiting"}}}]),
        table("Stragglers now", "The GPU each job's other GPUs wait on (gpueff_job_straggler), while one waits: open it to see why it is slow (its class, clocks, power, links).",
              [target(f"gpueff_job_straggler{s} == 1", instant=True, table=True)], "none", w=12, links=detail_link("Straggler"),
              transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True}}}]),
        timeseries("GPU time lost to stragglers, per job", "Share of each job's GPU time lost waiting on its slowest GPU (gpueff_job_peer_wait_ratio): the waiting GPUs' busy-but-idle share beyond the straggler's.",
                   [target(f"topk(10, gpueff_job_peer_wait_ratio{j})", "{{instance}} {{job_kind}} {{job_id}}")], "percentunit", min_=0, max_=1),
        timeseries("Job class mix", "The selected jobs' GPUs per bottleneck class (peer_wait: waiting in collectives for a slower GPU of the job).",
                   [target(f"sum by (class) (gpueff_job_bottleneck_gpus{j})", "{{class}}")], "none", min_=0),
        row("Slurm jobs and other holders of shared GPUs (sharing.enabled: docs/sharing.md)"),
        table("Holders: efficiency, waste, energy and cost", "Per holder of a GPU share (holder_kind slurm_job: the Slurm job id; pod: the pod UID; process: uid:program name; user: the rest of one uid's programs) over the time range, from the exporter's fair split: efficiency (SM-active over busy GPU-seconds), busy GPU-hours, busy-but-idle GPU-hours, what that waste cost at its GPUs' price, and energy. Set the time range to a job's life for its totals. Empty without sharing.enabled.",
              holder_targets(), "none", decimals=2,
              **WASTE_TABLE_FORMAT),
        timeseries("Least efficient holders", "The ten holders (jobs, pods, programs) with the lowest efficiency at each moment among those busy on the selected GPUs: SM-active over busy seconds of their share.",
                   [target(f"bottomk(10, sum by (holder_kind, holder) (rate(gpueff_holder_sm_active_seconds_total{s}[$__rate_interval])) / (sum by (holder_kind, holder) (rate(gpueff_holder_busy_seconds_total{s}[$__rate_interval])) > 0))", "{{holder_kind}} {{holder}}")],
                   "percentunit", min_=0, max_=1),
        table("Slurm jobs on the selected GPUs", "Which Slurm job runs on which GPU now, with its user id (cgroup v1 only), from gpueff_gpu_job_info.",
              [target(f"gpueff_gpu_job_info{s}", instant=True, table=True)], "none", w=12,
              transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}}}]),
        row("Health"),
        *health_stats(),
    ]
    return dashboard("gpueff-fleet", "GPU efficiency / Fleet overview", "How much real work the GPU fleet does: efficiency, mismatch, bottlenecks, busy-but-idle GPU time and its cost, per namespace, and the GPUs' and exporters' health.", panels, gpu_variables())


def holder_targets() -> list[dict[str, Any]]:
    """Per holder over the range: efficiency, busy and busy-but-idle GPU-hours, waste cost, energy."""
    s = sel()
    by = "sum by (holder_kind, holder)"
    price = (f"(\n  sum by (cluster, job, instance, uuid, currency) (increase(gpueff_busy_idle_sm_cost_total{s}[$__range]))\n"
             f"  / on (cluster, job, instance, uuid) group_left ()\n  (sum by (cluster, job, instance, uuid) (increase(gpueff_busy_idle_sm_seconds_total{s}[$__range])) > 0)\n)")
    return [
        target(f"clamp_max({by} (increase(gpueff_holder_sm_active_seconds_total{s}[$__range])) / {by} (increase(gpueff_holder_busy_seconds_total{s}[$__range])), 1)", instant=True, table=True),
        target(f"{by} (increase(gpueff_holder_busy_seconds_total{s}[$__range])) / 3600", instant=True, table=True),
        target(f"{by} (increase(gpueff_holder_busy_idle_sm_seconds_total{s}[$__range])) / 3600", instant=True, table=True),
        target(f"sum by (holder_kind, holder, currency) (\n  increase(gpueff_holder_busy_idle_sm_seconds_total{s}[$__range])\n  * on (cluster, job, instance, uuid) group_left (currency)\n  {price}\n)", instant=True, table=True),
        target(f"{by} (increase(gpueff_holder_energy_joules_total{s}[$__range])) / 3.6e6", instant=True, table=True),
    ]


def exporters_down() -> str:
    """This exporter's scrape targets that Prometheus cannot scrape now: ``up == 0`` only in the jobs
    where an exporter served its build info in the time range, so another job's down target
    (kube-scheduler on kube-prometheus-stack, whatever the Job variable) never counts as this one's."""
    node = "{" + NODE_SEL + "}"
    return f"count(\n  up{node} == 0\n  and on (cluster, job) max_over_time(gpueff_exporter_build_info{node}[$__range])\n) or vector(0)"


def health_stats() -> list[dict[str, Any]]:
    """Stat panels: hardware errors, energy, profiling and the exporter's own health over the range."""
    s = sel()
    node = "{" + NODE_SEL + "}"
    errors = thresholds((None, "green"), (1, "red"))
    uncorrected = sel('type="uncorrected"')
    return [
        stat("Xid errors", "Critical Xid events the driver reported on the selected GPUs in the time range (gpueff_xid_errors_total). Hardware codes (48, 63, 64, 74, 79, 92, 94, 95, 119, 120) page through GpuCriticalXidError.",
             [target(f"sum(increase(gpueff_xid_errors_total{s}[$__range])) or vector(0)", "Xid", instant=True)], "none", decimals=0, thresholds_=errors),
        stat("Uncorrectable ECC errors", "Uncorrectable ECC errors on the selected GPUs in the time range: any is a job that read bad data.",
             [target(f"sum(increase(gpueff_ecc_errors_total{uncorrected}[$__range])) or vector(0)", "ECC", instant=True)], "none", decimals=0, thresholds_=errors),
        stat("Row remaps pending / failed", "GPUs with a memory row remap pending (needs a GPU reset) or failed (no spare rows left: take the GPU out).",
             [target(f"sum(gpueff_remapped_rows_pending{s}) or vector(0)", "pending", instant=True), target(f"sum(gpueff_remapped_rows_failure{s}) or vector(0)", "failed", instant=True)], "none", decimals=0, thresholds_=errors),
        stat("Energy", "Energy the selected GPUs used in the time range, in kWh (gpueff_energy_joules_total; blue: a figure to read, neither good nor bad).",
             [target(f"sum(increase(gpueff_energy_joules_total{s}[$__range])) / 3.6e6", "energy", instant=True)], "kwatth", decimals=1, thresholds_=NEUTRAL),
        stat("GPUs without profiling", "GPUs whose SM activity the exporter cannot read (gpueff_profiling_available == 0): efficiency, mismatch and the bottleneck class are blind there (GpuProfilingUnavailable).",
             [target(f"count(gpueff_profiling_available{s} == 0) or vector(0)", "GPUs", instant=True)], "none", decimals=0, thresholds_=errors),
        stat("GPUs with implausible readings", "GPUs whose profiling readings fail a counter-health check now (gpueff_readings_implausible == 1: SM activity 0 under load, a pipe above SM activity, ...). Their class reads unknown and they count no waste; GpuReadingsImplausible fires after 15 minutes. The GPU detail dashboard's Counter health panel names the check.",
             [target(f"count(max by (cluster, instance, uuid) (gpueff_readings_implausible{s}) == 1) or vector(0)", "GPUs", instant=True)], "none", decimals=0, thresholds_=errors),
        stat("Exporter health", "Exporters Prometheus cannot scrape now (up == 0 in the scrape jobs where this exporter served gpueff_exporter_build_info in the time range: other jobs' down targets are not counted; an exporter job silent for the whole range is GpuEfficiencyExporterVanished's), exporters serving stale data, failed collections in the time range, and exporters whose Kubernetes attribution fails now (the kubelet pod-resources call: GPU series lose their pod labels; GpuKubernetesAttributionDown).",
             [target(exporters_down(), "down", instant=True),
              target(f"sum(gpueff_collect_stale{node}) or vector(0)", "stale", instant=True),
              target(f"sum(increase(gpueff_collect_errors_total{node}[$__range])) or vector(0)", "collect errors", instant=True),
              target(f"count(gpueff_kubernetes_attribution_up{node} == 0) or vector(0)", "attribution down", instant=True)], "none", decimals=0, thresholds_=errors, w=8),
    ]


def gpu_detail() -> dict[str, Any]:
    s = sel()
    panels = [
        row("Activity"),
        timeseries("Utilization vs SM activity", "Per GPU: utilization (dashed; share of time any kernel ran) against SM activity (share of SMs with work), each the mean over the whole step from its seconds counter (the rate of gpueff_gpu_busy_seconds_total, gpueff_sm_active_seconds_total: exact at any range). A dashed line at 100 % over a solid line near 0 is a GPU that looks busy and does almost nothing.",
                   [target(f"rate(gpueff_gpu_busy_seconds_total{s}[$__rate_interval])", GPU_LEGEND + " utilization"), target(f"rate(gpueff_sm_active_seconds_total{s}[$__rate_interval])", GPU_LEGEND + " SM activity")], "percentunit", min_=0, max_=1, overrides=[dashed(".* utilization")]),
        timeseries("Utilization: window mean vs nvidia-smi's instant figure", "Two readings of the same quantity (share of time a kernel ran). Window mean (solid, gpueff_gpu_utilization_ratio): the engine's activity over the whole poll window (GPM GRAPHICS_UTIL or DCGM GR_ENGINE_ACTIVE), the figure every derived metric, class and alert uses. Instant (dashed, gpueff_gpu_utilization_instant_ratio): what nvidia-smi shows, the driver's latest ~200 ms sample at each poll. They agree on steady work; under bursty or duty-cycled work the instant figure swings or aliases (0 / 0.99 on a 1 s duty cycle) while the window mean holds. Without profiling both are NVML's figure.",
                   [target(f"gpueff_gpu_utilization_ratio{s}", GPU_LEGEND + " window mean"), target(f"gpueff_gpu_utilization_instant_ratio{s}", GPU_LEGEND + " instant (nvidia-smi)")],
                   "percentunit", min_=0, max_=1, overrides=[dashed(".* instant \\(nvidia-smi\\)")]),
        timeseries("SM occupancy", "Resident warps over the theoretical maximum, per GPU. Low occupancy with high SM activity means every SM has a little work: latency-bound kernels (one warp per SM fools SM activity, not occupancy).",
                   [target(f"gpueff_sm_occupancy_ratio{s}", GPU_LEGEND)], "percentunit", min_=0, max_=1),
        timeseries("Tensor and DRAM activity", "Share of cycles the tensor pipes were active, and DRAM bandwidth used over its peak, each the mean over the whole step (the rate of gpueff_pipe_active_seconds_total{pipe=\"tensor\"} and gpueff_dram_active_seconds_total: exact at any range). Tensor high: compute bound (good for matmuls). DRAM near 0.8: memory-bandwidth bound (0.8 is the practical peak).",
                   [target(f"rate(gpueff_pipe_active_seconds_total{sel(TENSOR_PIPE)}[$__rate_interval])", GPU_LEGEND + " tensor"), target(f"rate(gpueff_dram_active_seconds_total{s}[$__rate_interval])", GPU_LEGEND + " DRAM")], "percentunit", min_=0, max_=1),
        timeseries("Tensor pipes by precision", "The tensor-pipe activity split by instruction: HMMA (FP16/BF16/TF32/FP8 matrix math), IMMA (integer matrix math) and DFMA (FP64 tensor), each the mean over the whole step (the rate of gpueff_pipe_active_seconds_total). Work expected in BF16 that shows in DFMA or not at all is a precision or kernel-choice problem.",
                   [target(f"rate(gpueff_pipe_active_seconds_total{sel(TENSOR_SUB_PIPES)}[$__rate_interval])", GPU_LEGEND + " {{pipe}}")], "percentunit", min_=0, max_=1),
        timeseries("Other pipes", "Activity of the non-tensor FP64, FP32, FP16 and integer pipes, each the mean over the whole step (the rate of gpueff_pipe_active_seconds_total). Work that should run on tensor cores but shows here instead (FP32 high, tensor low) is a precision or kernel-choice problem.",
                   [target(f"rate(gpueff_pipe_active_seconds_total{sel(OTHER_PIPES)}[$__rate_interval])", GPU_LEGEND + " {{pipe}}")], "percentunit", min_=0, max_=1),
        state_timeline("Bottleneck class", "The bottleneck class of each GPU over time (the one gpueff_bottleneck class at 1). idle (no kernel ran), host (gaps between kernels), compute, memory (at the DRAM roof), memory_latency (waiting on memory below the DRAM roof), communication, underfilled (few SMs busy), latency (too few warps), mixed, unknown (no profiling).",
                       [target(bottleneck_index(SEL), GPU_LEGEND)], mappings=index_mappings(BOTTLENECK_CLASSES), w=24),
        table("Bottleneck now: what to try", "Each selected GPU's bottleneck class now (gpueff_bottleneck == 1), what it means and the one thing to try first, from the exporter's gpueff_bottleneck_class_info (the same text the waste alerts carry in their what_to_try annotation). unknown: no profiling, or the counters read something impossible (Counter health below).",
              [target(f"(gpueff_bottleneck{sel()} == 1)\n* on (cluster, job, instance, class) group_left (meaning, what_to_try)\ngpueff_bottleneck_class_info{{{NODE_SEL}}}", instant=True, table=True)],
              "none", h=6,
              transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True},
                                                              "indexByName": {"instance": 0, "gpu": 1, "uuid": 2, "class": 3, "what_to_try": 4, "meaning": 5},
                                                              "renameByName": {"what_to_try": "what to try"}}}]),
        timeseries("Counter health", "Counter-health checks failing on the selected GPUs (gpueff_readings_implausible, 1 = the window's profiling readings are physically impossible), per check: sm_above_engine, pipe_above_sm, occupancy_above_sm, sm_zero_while_busy, profiling_zero_under_load (docs/dashboards-and-alerts.md#gpureadingsimplausible says what each means). While any is 1 the GPU reads unknown and counts no mismatch or waste. 0 is healthy.",
                   [target(f"sum by (check) (gpueff_readings_implausible{s})", "{{check}}")], "none", min_=0, decimals=0, bars=True, w=24, h=6),
        row("Power and clocks"),
        timeseries("Power", "Power draw per GPU against its enforced limit (dashed). Power at the limit with clocks below maximum means the power cap sets the speed.",
                   [target(f"gpueff_power_watts{s}", GPU_LEGEND), target(f"gpueff_power_limit_watts{s}", GPU_LEGEND + " limit")], "watt", min_=0, overrides=[dashed(".* limit")]),
        timeseries("SM clock", "Current SM clock against its maximum (dashed). A clock well below the maximum under load is throttling: see the reasons beside.",
                   [target(f"gpueff_sm_clock_hertz{s}", GPU_LEGEND), target(f"gpueff_sm_clock_max_hertz{s}", GPU_LEGEND + " max")], "hertz", min_=0, overrides=[dashed(".* max")]),
        state_timeline("Throttle reasons", "The clock-event reasons that held each GPU's clocks down at some point in the time range (a reason never active has no row). gpu_idle is normal when idle; sw_power_cap under heavy load is the power limit at work; thermal and hw_* reasons are node problems (cooling, power supply).",
                       [target(f"max by (instance, gpu, reason) (gpueff_clock_event_active{s}) > 0", GPU_LEGEND + " {{reason}}")],
                       mappings=[{"type": "value", "options": {"0": {"text": "-", "color": "transparent", "index": 0}, "1": {"text": "active", "color": "orange", "index": 1}}}]),
        timeseries("Temperature", "GPU core temperature per GPU, and its memory (HBM) temperature where the GPU reports one (dashed). Orange from 80 C, red from 85 C, where GpuTemperatureHigh fires and thermal slowdown starts on data-centre GPUs (about 85-90 C).",
                   [target(f"gpueff_temperature_celsius{s}", GPU_LEGEND), target(f"gpueff_memory_temperature_celsius{s}", GPU_LEGEND + " memory")], "celsius",
                   overrides=[dashed(".* memory")], threshold_lines=thresholds((None, "green"), (80, "orange"), (85, "red"))),
        row("Achieved work"),
        timeseries("Busy FLOP/s per pipe (upper bound) and the work estimate", "Tensor-busy and pipe-busy FLOP/s: each math pipe's active cycles at its full rate and SM clock (activity x the data sheet's figure x SM clock / the clock that figure is quoted at). An upper bound of the work, not a count: padded tiles and slower instruction paths count as work (large GEMMs and attention read 1.0-1.1x their own count, cuDNN convolutions ~1.3x, INT8 1.5-1.65x, batch-1 decode 5-9x; docs/peaks.md). hmma_bf16_equivalent is the tensor pipe at its BF16 rate (TF32 work reads twice its FLOP, FP8 half), dmma_fp64 the FP64 tensor pipe, fp64/fp32/fp16 the non-tensor pipes; dashed: the data sheet's BF16 tensor figure. 'estimate': the point estimate of the FLOP/s done (gpueff_estimated_flops_per_second), drawn only where the pipe carrying the work is busy for at least a quarter of the SMs' active cycles and no power or thermal limit held the clocks in the last few seconds (0.9-1.1x the jobs' own counts; none where busy cycles overstate the work or the clock read is not the SMs' rate). The work done: the app's own count (gpueff_app_model_flops_utilization_ratio). Absent for models without a known figure.",
                   [target(f"gpueff_pipe_busy_flops_per_second{s}", GPU_LEGEND + " {{pipe}}"), target(f"gpueff_estimated_flops_per_second{s}", GPU_LEGEND + " estimate"),
                    target(f"gpueff_peak_tensor_flops_per_second{s}", GPU_LEGEND + " peak")], "flops", min_=0, overrides=[dashed(".* peak")]),
        timeseries("Estimated DRAM bandwidth", "Estimated achieved DRAM bandwidth (DRAM activity x peak) against the model's peak (dashed). About 80 % of the peak is the practical ceiling.",
                   [target(f"gpueff_estimated_dram_bytes_per_second{s}", GPU_LEGEND), target(f"gpueff_peak_dram_bytes_per_second{s}", GPU_LEGEND + " peak")], "Bps", min_=0, overrides=[dashed(".* peak")]),
        timeseries("Busy share of each pipe's rate", "Each math pipe's active cycles as a share of its rate at the maximum SM clock (activity x SM clock / max SM clock), at its own precision (hmma_bf16_equivalent, dmma_fp64, imma_int8, fp64, fp32, fp16). Busy, not useful work: padded tiles count. Needs no peaks table.",
                   [target(f"gpueff_pipe_peak_ratio{s}", GPU_LEGEND + " {{pipe}}")], "percentunit", min_=0, max_=1),
        timeseries("Busy FLOP per joule (upper bound)", "Busy FLOP per joule of GPU energy (all floating-point pipes' busy FLOP/s per watt): an upper bound of the energy efficiency of the compute work.",
                   [target(f"gpueff_busy_flop_per_joule{s}", GPU_LEGEND)], "si:FLOP/J", min_=0),
        timeseries("PCIe and NVLink traffic", "Bytes per second over PCIe (host <-> GPU) and NVLink (GPU <-> GPU), each direction. High traffic with low SM activity points at a communication bottleneck: overlap transfers with compute.",
                   [target(f"gpueff_pcie_tx_bytes_per_second{s} + gpueff_pcie_rx_bytes_per_second{s}", GPU_LEGEND + " PCIe"),
                    target(f"gpueff_nvlink_tx_bytes_per_second{s} + gpueff_nvlink_rx_bytes_per_second{s}", GPU_LEGEND + " NVLink")], "Bps", min_=0),
        row("Memory and owners"),
        timeseries("Device memory", "Device memory in use per GPU against the total (dashed). Memory nearly full with low SM activity often means a big model served with a small batch.",
                   [target(f"gpueff_memory_used_bytes{s}", GPU_LEGEND), target(f"gpueff_memory_total_bytes{s}", GPU_LEGEND + " total")], "bytes", min_=0, overrides=[dashed(".* total")]),
        table("GPUs, processes and pods", "Each GPU with its model, driver and, with Kubernetes attribution, the namespace/pod/container using it; beside it the compute processes and the device memory they hold (empty where the backend does not read processes, e.g. replayed traces).",
              [target(f"gpueff_gpu_info{s}", instant=True, table=True), target(f"gpueff_compute_processes{s}", instant=True, table=True),
               target(f"gpueff_compute_process_memory_bytes{s}", instant=True, table=True)],
              "none", w=12,
              overrides=[{"matcher": {"id": "byName", "options": "process memory"}, "properties": [{"id": "unit", "value": "bytes"}]}],
              transformations=[{"id": "merge", "options": {}},
                               {"id": "organize", "options": {"excludeByName": {"Time": True, "Value #A": True, "__name__": True, "job": True},
                                                              "renameByName": {"Value #B": "processes", "Value #C": "process memory"}}}]),
        table("Pods holding the GPUs", "Every container the kubelet assigned each GPU (or MIG device) to, from the exporter's Kubernetes attribution; several rows per GPU under time-slicing. Empty outside Kubernetes.",
              [target(f"gpueff_gpu_pod_info{s}", instant=True, table=True)], "none",
              transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True}}}]),
        row("Health"),
        timeseries("Xid errors", "Critical Xid events per GPU and code (increase of gpueff_xid_errors_total): each bar is an event. Hardware codes page through GpuCriticalXidError; application codes (13, 31, 43, 45) point at the job.",
                   [target(f"increase(gpueff_xid_errors_total{s}[$__rate_interval]) > 0", GPU_LEGEND + " Xid {{xid}}")], "none", bars=True, min_=0, decimals=0),
        timeseries("ECC errors and remapped rows", "ECC errors per GPU by type (since driver load) and memory rows remapped by cause. Rising corrected errors often come before uncorrectable ones and remaps.",
                   [target(f"gpueff_ecc_errors_total{s}", GPU_LEGEND + " ECC {{type}}"), target(f"gpueff_remapped_rows{s}", GPU_LEGEND + " remapped {{cause}}")], "none", min_=0, decimals=0),
        state_timeline("Profiling, row remaps and GPU state", "Per GPU over time: whether the exporter reads SM activity (profiling), whether a row remap is pending (needs a reset) or failed, and whether the GPU answers (up).",
                       [target(f"gpueff_profiling_available{s}", GPU_LEGEND + " profiling"), target(f"gpueff_remapped_rows_pending{s}", GPU_LEGEND + " remap pending"),
                        target(f"gpueff_remapped_rows_failure{s}", GPU_LEGEND + " remap failed"), target(f"gpueff_gpu_up{s}", GPU_LEGEND + " up")],
                       mappings=[{"type": "value", "options": {"0": {"text": "no", "color": "transparent", "index": 0}, "1": {"text": "yes", "color": "blue", "index": 1}}}]),
        timeseries("Clock violation share", "Share of time the driver held each GPU's clocks down, by policy (rate of gpueff_clock_violation_seconds_total; docs/health.md): power at 1.0 is normal under dense work at the power limit; thermal above 0.1 fires GpuThermalViolationShareHigh; board_limit and reliability are hardware limits. Counted by the driver, so nothing between polls is missed.",
                   [target(f"rate(gpueff_clock_violation_seconds_total{s}[$__rate_interval]) > 0", GPU_LEGEND + " {{reason}}", min_step=SLOW_STEP)], "percentunit", min_=0, max_=1),
        timeseries("PCIe replays and link", "PCIe replays per second (retransmissions: a steady rate means a marginal link; GpuPcieReplays) and the link's current width and generation against the most GPU and slot support (dashed). A narrower link fires GpuPcieLinkDegraded; a lower generation at idle is power saving.",
                   [target(f"rate(gpueff_pcie_replay_errors_total{s}[$__rate_interval])", GPU_LEGEND + " replays/s", min_step=SLOW_STEP),
                    target(f"gpueff_pcie_link_width{s}", GPU_LEGEND + " width"), target(f"gpueff_pcie_link_max_width{s}", GPU_LEGEND + " max width"),
                    target(f"gpueff_pcie_link_generation{s}", GPU_LEGEND + " gen"), target(f"gpueff_pcie_link_max_generation{s}", GPU_LEGEND + " max gen")],
                   "none", min_=0, overrides=[dashed(".* max .*")]),
        timeseries("NVLink errors and links", "NVLink errors per second over all links by type (crc_flit, crc_data: corrected by replays; replay, recovery: GpuNvlinkErrors) and the number of links up. No data on GPUs without NVLink.",
                   [target(f"rate(gpueff_nvlink_errors_total{s}[$__rate_interval])", GPU_LEGEND + " {{type}}/s", min_step=SLOW_STEP),
                    target(f"sum by (instance, gpu, uuid) (gpueff_nvlink_link_active{s})", GPU_LEGEND + " links up")], "none", min_=0),
        timeseries("P-state, video engines and fan", "Performance state (0 = P0, fastest; right axis), video encoder and decoder utilization, and fan speed where the GPU has a fan.",
                   [target(f"gpueff_encoder_utilization_ratio{s}", GPU_LEGEND + " encoder"), target(f"gpueff_decoder_utilization_ratio{s}", GPU_LEGEND + " decoder"),
                    target(f"gpueff_fan_speed_ratio{s}", GPU_LEGEND + " fan"), target(f"gpueff_performance_state{s}", GPU_LEGEND + " P-state")],
                   "percentunit", min_=0, overrides=[{"matcher": {"id": "byRegexp", "options": ".* P-state"}, "properties": [{"id": "custom.axisPlacement", "value": "right"}, {"id": "unit", "value": "none"},
                                                                                          {"id": "min", "value": 0}, {"id": "max", "value": 15}, {"id": "decimals", "value": 0}]}]),
        timeseries("Temperature against its limits", "GPU core temperature against the driver's slowdown and shutdown limits and the GPU's and memory's maximum operating temperatures (dashed; gpueff_temperature_limit_celsius). Headroom to slowdown is what cooling buys.",
                   [target(f"gpueff_temperature_celsius{s}", GPU_LEGEND), target(f"gpueff_temperature_limit_celsius{s}", GPU_LEGEND + " {{threshold}}")], "celsius",
                   overrides=[dashed(".* (slowdown|shutdown|gpu_max|memory_max)")]),
        timeseries("Retired pages", "Memory pages retired per GPU by cause and a pending retirement (pre-Ampere GPUs; Ampere and newer remap rows instead, see ECC errors and remapped rows).",
                   [target(f"gpueff_retired_pages{s}", GPU_LEGEND + " {{cause}}"), target(f"gpueff_retired_pages_pending{s}", GPU_LEGEND + " pending")], "none", min_=0, decimals=0),
        bargauge("Energy in the time range", "Energy each GPU used in the time range, in kWh (gpueff_energy_joules_total).",
                 [target(f"sum by (instance, gpu, uuid) (increase(gpueff_energy_joules_total{s}[$__range])) / 3.6e6", GPU_LEGEND, instant=True)], "kwatth", decimals=2),
        timeseries("Exporter health", "The exporter on the selected nodes: age of the snapshot it serves (a growing age means the poller is stuck; stale_after makes it serve GPUs as down) and failed collections per second.",
                   [target(f"gpueff_snapshot_age_seconds{{{NODE_SEL}}}", "{{instance}} snapshot age"), target(f"rate(gpueff_collect_errors_total{{{NODE_SEL}}}[$__rate_interval])", "{{instance}} collect errors/s")], "s", min_=0),
        timeseries("Kubernetes attribution", "Whether the exporter's last kubelet pod-resources List call answered (1) or failed (0), and failed calls per second. After 3 refresh intervals without an answer the GPU series lose their namespace/pod labels; GpuKubernetesAttributionDown fires after 10 minutes at 0. No data outside Kubernetes (kubernetes.enabled off).",
                   [target(f"gpueff_kubernetes_attribution_up{{{NODE_SEL}}}", "{{instance}} attribution up"), target(f"rate(gpueff_kubernetes_attribution_errors_total{{{NODE_SEL}}}[$__rate_interval])", "{{instance}} errors/s")], "none", min_=0),
    ]
    return dashboard("gpueff-gpu-detail", "GPU efficiency / GPU detail", "One or a few GPUs in depth: activity, bottleneck, power, clocks and throttling, achieved FLOP/s and bandwidth, memory and owners.", panels, gpu_variables(one_gpu=True))


def server_rate(variable: str) -> str:
    """The per-second rate of the server counter named by a custom variable, filtered like the GPUs."""
    return f'sum(rate({{__name__="${variable}", {APP_SEL}}}[$__rate_interval]))'


def app_gpus() -> str:
    """The exporter's app-to-GPU join rows of the apps picked, restricted to the selected GPUs."""
    return f'(gpueff_app_gpu_info{{{NODE_SEL}, app=~"$app"}} and on (cluster, instance, uuid) gpueff_gpu_up{sel()})'


def app_metric(name: str) -> str:
    """A per-app gauge of the exporter for the apps picked that run on at least one selected GPU."""
    return f'{name}{{{NODE_SEL}, app=~"$app"}} and on (cluster, job, instance, app) {app_gpus()}'


def app_units_per_joule() -> str:
    """Per app: its throughput over the power of ALL its GPUs, for every app on a selected GPU. The
    figure of an app does not change with the selection (All, or any subset holding one of its GPUs)."""
    power = (f'sum by (cluster, job, instance, app) (\n  gpueff_power_watts{{{NODE_SEL}}}\n  * on (cluster, instance, uuid) group_right ()\n'
             f'  (gpueff_app_gpu_info{{{NODE_SEL}, app=~"$app"}} and on (cluster, job, instance, app) {app_gpus()})\n)')
    work = f'sum by (cluster, job, instance, app, unit) ({app_metric("gpueff_app_throughput_per_second")})'
    return f"{work}\n/ on (cluster, job, instance, app) group_left ()\n({power} > 0)"


def app_throughput() -> dict[str, Any]:
    s = sel()
    throughput_var = metric_name_variable("throughput", "Throughput counter", THROUGHPUT_COUNTERS, "The application's counter of work done: the names stored in Prometheus among vLLM's, SGLang's (either spelling: Prometheus 2.x stores vllm:x as vllm_x), TGI's, NIM's, Triton's and the exporter's own app join. The panels take its rate over $__rate_interval, filtered by Namespace/Pod. Edit the variable's regex to add your own server.")
    requests_var = metric_name_variable("requests", "Requests counter", REQUEST_COUNTERS, "The application's counter of finished requests: the names stored in Prometheus among vLLM's, SGLang's, TGI's and Triton's.")
    app_var = query_variable("app", "App (exporter join)", 'label_values(gpueff_app_up{cluster=~"$cluster", job=~"$job", instance=~"$instance"}, app)', "Apps the exporter joins with their GPUs (docs/apps.md): the per-app panels.")
    tput, reqs = server_rate("throughput"), server_rate("requests")
    server_sel = "{{" + APP_SEL + "}}"  # inside str.format templates below
    rate_by_le = "sum by (le) (rate({name}" + server_sel + "[$__rate_interval]))"
    summed, averaged = "sum({name}" + server_sel + ")", "avg({name}" + server_sel + ")"
    per_app = "{{app}} ({{instance}})"
    panels = [
        row("Throughput against the GPU"),
        timeseries("Throughput vs SM activity", "The application's throughput (left axis, from the Throughput counter variable) on the same time axis as the selected GPUs' average SM activity, SM occupancy and utilization (right axis). Utilization near 100 % with SM activity low and throughput flat under rising load is a batching or launch problem, not a full GPU.",
                   [target(tput, "throughput"), target(f"avg(rate(gpueff_sm_active_seconds_total{s}[$__rate_interval]))", "SM activity"), target(f"avg(gpueff_sm_occupancy_ratio{s})", "SM occupancy"),
                    target(f"avg(rate(gpueff_gpu_busy_seconds_total{s}[$__rate_interval]))", "utilization")],
                   "short", min_=0, overrides=right_axis("SM activity", "SM occupancy", "utilization", unit="percentunit"), w=24),
        timeseries("Request arrivals vs completions vs throughput", "Requests arriving (the recording rule namespace:app_requests_arrived:rate5m = completions + growth of the requests waiting and running) and completing per second (left), throughput (right). Arrivals that keep rising while completions and throughput stay flat mean the server is saturated: look at SM and DRAM activity to see why.",
                   [target('sum(namespace:app_requests_arrived:rate5m{cluster=~"$cluster", namespace=~"$namespace"})', "arrivals/s"), target(reqs, "completions/s"), target(tput, "throughput")], "reqps", min_=0,
                   overrides=[{"matcher": {"id": "byName", "options": "throughput"}, "properties": [{"id": "custom.axisPlacement", "value": "right"}, {"id": "unit", "value": "short"}]}]),
        timeseries("Throughput per request", "Throughput divided by completed requests (e.g. tokens per request). No data while no request completes. A drop at constant request size means requests wait longer, not that they got smaller.",
                   [target(f"{tput} / ({reqs} > 0)", "per request")], "short", min_=0),
        timeseries("Throughput per watt (server counter)", "The server counter's throughput over the power of the GPUs that carry the same namespace/pod as its series (Kubernetes attribution; without it, every selected node's GPUs). The server's metrics name no GPU, so this panel follows Namespace and Pod, not GPU: for per-GPU accuracy read the exporter's per-app figures below.",
                   [target(f'{tput} / sum(gpueff_power_watts{{{NODE_SEL}, namespace=~"$namespace", pod=~"$pod"}} and on (namespace, pod) {{__name__="$throughput", {APP_SEL}}})', "per joule")], "si:/J", min_=0),
        timeseries("GPU power", "Power drawn by the selected GPUs, on the same time axis.", [target(f"sum(gpueff_power_watts{s})", "power")], "watt", min_=0),
        row("Per app, joined with its GPUs by the exporter (docs/apps.md)"),
        timeseries("Units per joule", "Per app: its throughput over the power of all its GPUs, for the apps running on the selected GPUs. An app's figure is the same with All selected and with any subset of GPUs that holds one of its GPUs (computed here from gpueff_app_throughput_per_second and gpueff_power_watts; the exporter's own gpueff_app_units_per_joule is dashed).",
                   [target(app_units_per_joule(), per_app + " {{unit}}/J"), target(app_metric("gpueff_app_units_per_joule"), per_app + " exporter")], "short", min_=0, overrides=[dashed(".* exporter")]),
        timeseries("Model FLOPs utilization", "Per app: the share of its GPUs' dense BF16 tensor peak that the model's own math uses (throughput x flops_per_unit / peak). Needs flops_per_unit in the app's configuration.",
                   [target(app_metric("gpueff_app_model_flops_utilization_ratio"), per_app)], "percentunit", min_=0, max_=1),
        timeseries("Cost per million units", "Per app: what a million units of its work cost at price_per_gpu_hour (its GPUs x price / throughput). Needs a price on the exporter.",
                   [target(app_metric("gpueff_app_cost_per_million_units"), per_app + " {{currency}}")], "short", min_=0),
        timeseries("Units per SM-active second", "Per app: units of work per GPU-second its GPUs' SMs were active. Falling while SM activity holds means the same GPU work yields less output (longer prompts, a slower kernel path).",
                   [target(app_metric("gpueff_app_units_per_sm_active_second"), per_app + " {{unit}}")], "short", min_=0),
        row("Serving (vLLM's metrics)"),
        timeseries("Time to first token", "Median and 95th percentile time from a request's arrival to its first generated token, per server (vllm:time_to_first_token_seconds, sglang:time_to_first_token_seconds; either spelling). Rising with the queue: too few generation slots or KV cache.",
                   [target(f"histogram_quantile({q}, {per_server('ttft', rate_by_le, by='le')})", "{{server}} " + legend) for q, legend in QUANTILES], "s", min_=0, w=6),
        timeseries("Inter-token latency", "Median and 95th percentile time between generated tokens, per server: the decode speed each user sees (vllm:inter_token_latency_seconds, or vllm:time_per_output_token_seconds before vLLM V1 renamed it; sglang:inter_token_latency_seconds). Rising with batch size is the batching trade-off; rising alone is a slower GPU path.",
                   [target(f"histogram_quantile({q}, {per_server('itl', rate_by_le, by='le')})", "{{server}} " + legend) for q, legend in QUANTILES], "s", min_=0, w=6),
        timeseries("Queue", "Requests waiting for a generation slot and requests being generated, per server (vllm:num_requests_waiting and vllm:num_requests_running; sglang:num_queue_reqs and sglang:num_running_reqs). A growing queue with flat throughput is saturation.",
                   [target(per_server("waiting", summed), "{{server}} waiting"), target(per_server("running", summed), "{{server}} running")], "none", min_=0, w=6),
        timeseries("KV-cache use", "Share of the KV cache in use, per server (vllm:kv_cache_usage_perc, or vllm:gpu_cache_usage_perc before vLLM V1 renamed it; sglang:token_usage). Near 1 with a queue: the cache, not the GPU's compute, limits the batch.",
                   [target(per_server("kv_cache", averaged), "{{server}} KV cache")], "percentunit", min_=0, max_=1, w=6),
        row("Why throughput is flat"),
        timeseries("SM, tensor and DRAM activity", "Average SM, tensor-pipe and DRAM activity of the selected GPUs, each the mean over the whole step (the rates of their seconds counters: exact at any range). Throughput flat with DRAM near 0.8: memory-bandwidth ceiling (quantise, fuse attention, add replicas). Flat with SM and DRAM both low: batching limit (raise the batch size / max concurrent sequences).",
                   [target(f"avg(rate(gpueff_sm_active_seconds_total{s}[$__rate_interval]))", "SM activity"), target(f"avg(rate(gpueff_pipe_active_seconds_total{sel(TENSOR_PIPE)}[$__rate_interval]))", "tensor"),
                    target(f"avg(rate(gpueff_dram_active_seconds_total{s}[$__rate_interval]))", "DRAM")],
                   "percentunit", min_=0, max_=1, w=24),
    ]
    variables = gpu_variables() + [app_var, throughput_var, requests_var]
    return dashboard("gpueff-app-throughput", "GPU efficiency / Application throughput", "An application's own throughput (its server counter, picked by a variable) on the same time axis as SM activity, arrivals and power; per app, units per joule, MFU, cost per million units and units per SM-active second; the serving view (time to first token, time per output token, queue, KV cache).", panels, variables)


DASHBOARDS = {
    "gpu-efficiency-fleet.json": fleet,
    "gpu-efficiency-gpu-detail.json": gpu_detail,
    "gpu-efficiency-app-throughput.json": app_throughput,
}


def render(build: Any) -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, build in DASHBOARDS.items():
        text = render(build)
        path = OUT / name
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path.relative_to(HERE.parent)))
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date (run python dashboards/build.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
