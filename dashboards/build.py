"""Builds the Grafana dashboards (Grafana 10/11 JSON) from code.

    python dashboards/build.py          # rewrite dashboards/*.json
    python dashboards/build.py --check  # exit 1 if a committed file differs from the build

Every panel carries a description and a unit; every query selects GPUs through the same variables
(instance, gpu, namespace, pod) whose "All" value is ``.*``, so the dashboards work with and
without the Kubernetes attribution labels. The dashboards read raw exporter metrics only: they
work without the recording rules.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from exporter.derivations import BOTTLENECK_CLASSES  # noqa: E402

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'instance=~"$instance", gpu=~"$gpu", namespace=~"$namespace", pod=~"$pod"'
GPU_LEGEND = "{{instance}} GPU {{gpu}}"
TAGS = ["gpu", "gpu-efficiency"]

# The application-throughput dashboard's expressions: (label, PromQL), first is the default.
THROUGHPUT_CHOICES = (
    ("vLLM generated tokens/s", "sum(rate(vllm:generation_tokens_total[$__rate_interval]))"),
    ("SGLang generated tokens/s", "sum(rate(sglang:generation_tokens_total[$__rate_interval]))"),
    ("TGI generated tokens/s", "sum(rate(tgi_request_generated_tokens_sum[$__rate_interval]))"),
    ("Triton inferences/s", "sum(rate(nv_inference_count[$__rate_interval]))"),
    ("Apps joined by this exporter (docs/apps.md)", "sum(gpueff_app_throughput_per_second)"),
)
REQUEST_CHOICES = (
    ("vLLM completed requests/s", "sum(rate(vllm:request_success_total[$__rate_interval]))"),
    ("TGI requests/s", "sum(rate(tgi_request_count[$__rate_interval]))"),
    ("Triton successful requests/s", "sum(rate(nv_inference_request_success[$__rate_interval]))"),
    ("Apps joined by this exporter (docs/apps.md)", "sum(gpueff_app_requests_per_second)"),
)


def sel(*extra: str) -> str:
    return "{" + ", ".join((*extra, SEL)) + "}"


def target(expr: str, legend: str = "__auto", instant: bool = False, table: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"datasource": DS, "expr": expr, "legendFormat": legend, "range": not instant, "instant": instant}
    if table:
        out["format"] = "table"
    return out


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": color, "value": value} for value, color in steps]}


GOOD_HIGH = thresholds((None, "red"), (0.3, "orange"), (0.6, "green"))
BAD_HIGH = thresholds((None, "green"), (1, "red"))


def panel(kind: str, title: str, description: str, targets: list[dict[str, Any]], unit: str, *, w: int, h: int,
          min_: float | None = None, max_: float | None = None, options: dict[str, Any] | None = None,
          custom: dict[str, Any] | None = None, overrides: list[dict[str, Any]] | None = None,
          thresholds_: dict[str, Any] | None = None, mappings: list[dict[str, Any]] | None = None,
          transformations: list[dict[str, Any]] | None = None, decimals: int | None = None) -> dict[str, Any]:
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
        defaults["color"] = {"mode": "thresholds"}
    if mappings:
        defaults["mappings"] = mappings
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
               stack: bool = False, bars: bool = False, **kwargs: Any) -> dict[str, Any]:
    custom = {"drawStyle": "bars" if bars else "line", "lineWidth": 1, "fillOpacity": 60 if stack else 10, "showPoints": "never", "spanNulls": False}
    if stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
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


def query_variable(name: str, label: str, query: str, description: str) -> dict[str, Any]:
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
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "hide": 0,
        "regex": "",
    }


def gpu_variables() -> list[dict[str, Any]]:
    return [
        datasource_variable(),
        query_variable("instance", "Node / instance", "label_values(gpueff_gpu_up, instance)", "The exporter instance (one per node)."),
        query_variable("gpu", "GPU", 'label_values(gpueff_gpu_up{instance=~"$instance"}, gpu)', "GPU index on the node."),
        query_variable("namespace", "Namespace", 'label_values(gpueff_gpu_up{instance=~"$instance"}, namespace)', "Kubernetes namespace of the pod using the GPU (empty without Kubernetes attribution: keep All)."),
        query_variable("pod", "Pod", 'label_values(gpueff_gpu_up{instance=~"$instance", namespace=~"$namespace"}, pod)', "Kubernetes pod using the GPU (empty without Kubernetes attribution: keep All)."),
    ]


def custom_variable(name: str, label: str, choices: tuple[tuple[str, str], ...], description: str) -> dict[str, Any]:
    def escape(text: str) -> str:
        return text.replace(",", "\\,")

    text, value = choices[0]
    return {
        "name": name,
        "label": label,
        "description": description,
        "type": "custom",
        "query": ",".join(f"{escape(t)} : {escape(v)}" for t, v in choices),
        "current": {"selected": True, "text": text, "value": value},
        "options": [{"selected": i == 0, "text": t, "value": v} for i, (t, v) in enumerate(choices)],
        "multi": False,
        "includeAll": False,
        "hide": 0,
    }


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
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"}]},
        "links": [{"title": "GPU efficiency", "type": "dashboards", "tags": ["gpu-efficiency"], "asDropdown": True, "includeVars": True, "keepTime": True}],
        "templating": {"list": variables},
        "panels": lay_out(panels),
    }


# Dashboards ------------------------------------------------------------------------------------

def fleet() -> dict[str, Any]:
    s = sel()
    panels = [
        row("Fleet now"),
        stat("Fleet efficiency", "SM-active GPU-seconds over busy GPU-seconds across the selected GPUs, over the whole time range. 1 = every second the GPUs counted as busy, their SMs worked; 0.2 = four fifths of the 'busy' time did nothing useful. nvidia-smi's utilization cannot show this.",
             [target(f"clamp_max(sum(increase(gpueff_sm_active_seconds_total{s}[$__range])) / sum(increase(gpueff_gpu_busy_seconds_total{s}[$__range])), 1)", "efficiency", instant=True)],
             "percentunit", min_=0, max_=1, decimals=1, thresholds_=GOOD_HIGH),
        stat("GPUs in mismatch now", "GPUs that look busy (utilization >= 0.8) while under 30 % of their SMs are active (gpueff_mismatch{rule=\"high_util_low_sm\"}). Anything above 0 is GPU time paid for and not used: open the GPU detail dashboard for those GPUs.",
             [target("sum(gpueff_mismatch" + sel('rule="high_util_low_sm"') + ")", "GPUs", instant=True)], "none", thresholds_=BAD_HIGH, decimals=0),
        stat("GPUs up / down", "GPUs the exporter reads now, and GPUs it cannot read (lost, unreadable or stale data). A GPU down is usually a driver or hardware fault: see the GpuLost alert.",
             [target(f"sum(gpueff_gpu_up{s})", "up", instant=True), target(f"sum(1 - gpueff_gpu_up{s})", "down", instant=True)], "none", decimals=0),
        stat("Busy-but-idle GPU-hours", "GPU-hours in the time range during which the GPUs counted as busy while their SMs were not (integral of max(0, utilization - SM activity)). This is the waste that utilization-based dashboards hide.",
             [target(f"sum(increase(gpueff_busy_idle_sm_seconds_total{s}[$__range])) / 3600", "GPU-hours", instant=True)], "h", decimals=2),
        stat("Busy-but-idle cost", "What the busy-but-idle GPU time of the time range cost at the exporter's price_per_gpu_hour, in the labelled currency. No data means no price is configured on the exporter.",
             [target(f"sum by (currency) (increase(gpueff_busy_idle_sm_cost_total{s}[$__range]))", "{{currency}}", instant=True)], "short", decimals=2),
        stat("Power now", "Power drawn by the selected GPUs now, in watts.", [target(f"sum(gpueff_power_watts{s})", "power", instant=True)], "watt", decimals=0),
        row("Over time"),
        timeseries("Coarse utilization vs SM activity", "Fleet average of nvidia-smi's utilization (share of time any kernel ran) against SM activity (share of SMs with work). The gap between the two lines is GPU time that looks busy but is not: one thread on one SM reads 100 % utilization and 0.8 % SM activity.",
                   [target(f"avg(gpueff_gpu_utilization_ratio{s})", "utilization (nvidia-smi)"), target(f"avg(gpueff_sm_active_ratio{s})", "SM activity")], "percentunit", min_=0, max_=1),
        timeseries("Efficiency per GPU", "SM activity / utilization per GPU (gpueff_efficiency_ratio). Near 1: the busy time is real work. Low while the GPU is busy: the kernels use few SMs (small grids, one stream, launch-bound loops). Absent while a GPU is idle.",
                   [target(f"gpueff_efficiency_ratio{s}", GPU_LEGEND)], "percentunit", min_=0, max_=1),
        timeseries("Bottleneck classes", "How many GPUs are in each bottleneck class over time (gpueff_bottleneck). compute/memory: a pipe or DRAM is the limit (good); host: idle gaps between kernels (input pipeline, launch overhead); underfilled: few SMs have work; latency: warps stall on dependencies; communication: PCIe/NVLink bound.",
                   [target(f"sum by (class) (gpueff_bottleneck{s})", "{{class}}")], "none", stack=True, decimals=0),
        timeseries("GPUs in mismatch", "GPUs flagged by each mismatch rule over time: high_util_low_sm (utilization >= 0.8 and SM activity < 0.3) and low_efficiency (utilization >= 0.5 and efficiency < 0.3). A rule that stays up for 10 minutes pages through the GpuHighUtilizationLowSmActivity alert.",
                   [target(f"sum by (rule) (gpueff_mismatch{s})", "{{rule}}")], "none", decimals=0),
        timeseries("Busy-but-idle GPUs", "GPU-equivalents that count as busy while their SMs idle: the rate of gpueff_busy_idle_sm_seconds_total. 2 means the fleet wastes the equivalent of two whole GPUs at that moment.",
                   [target(f"sum(rate(gpueff_busy_idle_sm_seconds_total{s}[$__rate_interval]))", "busy but idle")], "none"),
        timeseries("Power per node", "Power drawn per node (sum over its selected GPUs) against the sum of their power limits (dashed).",
                   [target(f"sum by (instance) (gpueff_power_watts{s})", "{{instance}}"), target(f"sum by (instance) (gpueff_power_limit_watts{s})", "{{instance}} limit")], "watt", min_=0, overrides=[dashed(".* limit")]),
        row("Who wastes GPU time"),
        bargauge("Top wasteful GPUs", "The ten GPUs with the most busy-but-idle GPU-hours in the time range. Start optimising at the top: these GPUs are held and reported busy while their SMs sit idle.",
                 [target(f"topk(10, sum by (instance, gpu, uuid) (increase(gpueff_busy_idle_sm_seconds_total{s}[$__range])) / 3600)", GPU_LEGEND, instant=True)], "h", decimals=2, thresholds_=thresholds((None, "green"), (0.5, "orange"), (2, "red"))),
        bargauge("Top wasteful pods", "The ten namespace/pod pairs with the most busy-but-idle GPU-hours in the time range (needs the exporter's Kubernetes attribution; without it, all GPUs show as one '/' bar).",
                 [target(f"topk(10, sum by (namespace, pod) (increase(gpueff_busy_idle_sm_seconds_total{s}[$__range])) / 3600)", "{{namespace}}/{{pod}}", instant=True)], "h", decimals=2, thresholds_=thresholds((None, "green"), (0.5, "orange"), (2, "red"))),
        table("GPUs now", "Every selected GPU with its model, utilization, SM activity and efficiency now. Sort by efficiency to find GPUs that look busy but do little.",
              [target(f"gpueff_gpu_info{s}", instant=True, table=True), target(f"gpueff_gpu_utilization_ratio{s}", instant=True, table=True),
               target(f"gpueff_sm_active_ratio{s}", instant=True, table=True), target(f"gpueff_efficiency_ratio{s}", instant=True, table=True)],
              "percentunit", decimals=2,
              transformations=[{"id": "merge", "options": {}},
                               {"id": "organize", "options": {"excludeByName": {"Time": True, "Value #A": True, "__name__": True, "job": True, "driver": True},
                                                              "renameByName": {"Value #B": "utilization", "Value #C": "SM activity", "Value #D": "efficiency"}}}]),
    ]
    return dashboard("gpueff-fleet", "GPU efficiency / Fleet overview", "How much real work the GPU fleet does: efficiency, mismatch, bottlenecks, busy-but-idle GPU time and its cost.", panels, gpu_variables())


def gpu_detail() -> dict[str, Any]:
    s = sel()
    panels = [
        row("Activity"),
        timeseries("Utilization vs SM activity", "Per GPU: nvidia-smi's utilization (dashed; share of time any kernel ran) against SM activity (share of SMs with work). A dashed line at 100 % over a solid line near 0 is a GPU that looks busy and does almost nothing.",
                   [target(f"gpueff_gpu_utilization_ratio{s}", GPU_LEGEND + " utilization"), target(f"gpueff_sm_active_ratio{s}", GPU_LEGEND + " SM activity")], "percentunit", min_=0, max_=1, overrides=[dashed(".* utilization")]),
        timeseries("SM occupancy", "Resident warps over the theoretical maximum, per GPU. Low occupancy with high SM activity means every SM has a little work: latency-bound kernels (one warp per SM fools SM activity, not occupancy).",
                   [target(f"gpueff_sm_occupancy_ratio{s}", GPU_LEGEND)], "percentunit", min_=0, max_=1),
        timeseries("Tensor and DRAM activity", "Share of cycles the tensor pipes were active, and DRAM bandwidth used over its peak. Tensor high: compute bound (good for matmuls). DRAM near 0.8: memory-bandwidth bound (0.8 is the practical peak).",
                   [target(f"gpueff_tensor_active_ratio{s}", GPU_LEGEND + " tensor"), target(f"gpueff_dram_active_ratio{s}", GPU_LEGEND + " DRAM")], "percentunit", min_=0, max_=1),
        timeseries("Other pipes", "Activity of the non-tensor FP64, FP32, FP16 and integer pipes. Work that should run on tensor cores but shows here instead (FP32 high, tensor low) is a precision or kernel-choice problem.",
                   [target(f"gpueff_fp64_active_ratio{s}", GPU_LEGEND + " FP64"), target(f"gpueff_fp32_active_ratio{s}", GPU_LEGEND + " FP32"),
                    target(f"gpueff_fp16_active_ratio{s}", GPU_LEGEND + " FP16"), target(f"gpueff_integer_active_ratio{s}", GPU_LEGEND + " integer")], "percentunit", min_=0, max_=1),
        state_timeline("Bottleneck class", "The bottleneck class of each GPU over time (the one gpueff_bottleneck class at 1). idle, host (gaps between kernels), compute, memory, communication, underfilled (few SMs busy), latency, mixed, unknown (no profiling).",
                       [target(bottleneck_index(SEL), GPU_LEGEND)], mappings=index_mappings(BOTTLENECK_CLASSES), w=24),
        row("Power and clocks"),
        timeseries("Power", "Power draw per GPU against its enforced limit (dashed). Power at the limit with clocks below maximum means the power cap sets the speed.",
                   [target(f"gpueff_power_watts{s}", GPU_LEGEND), target(f"gpueff_power_limit_watts{s}", GPU_LEGEND + " limit")], "watt", min_=0, overrides=[dashed(".* limit")]),
        timeseries("SM clock", "Current SM clock against its maximum (dashed). A clock well below the maximum under load is throttling: see the reasons beside.",
                   [target(f"gpueff_sm_clock_hertz{s}", GPU_LEGEND), target(f"gpueff_sm_clock_max_hertz{s}", GPU_LEGEND + " max")], "hertz", min_=0, overrides=[dashed(".* max")]),
        state_timeline("Throttle reasons", "Which clock-event reasons hold each GPU's clocks down. gpu_idle is normal when idle; sw_power_cap under heavy load is the power limit at work; thermal and hw_* reasons are node problems (cooling, power supply).",
                       [target(f"max by (instance, gpu, reason) (gpueff_clock_event_active{s})", GPU_LEGEND + " {{reason}}")],
                       mappings=[{"type": "value", "options": {"0": {"text": "-", "color": "transparent", "index": 0}, "1": {"text": "active", "color": "orange", "index": 1}}}]),
        timeseries("Temperature", "GPU core temperature per GPU. Thermal slowdown starts near the GPU's slowdown temperature (about 85-90 C on data-centre GPUs).",
                   [target(f"gpueff_temperature_celsius{s}", GPU_LEGEND)], "celsius"),
        row("Achieved work"),
        timeseries("Estimated tensor FLOP/s", "Estimated achieved tensor FLOP/s (BF16-equivalent; tensor activity x peak x SM clock / max SM clock) against the model's dense peak (dashed). Checked within 3 % of measured on H200 matmuls. Absent for models without a known peak.",
                   [target(f"gpueff_estimated_tensor_flops_per_second{s}", GPU_LEGEND), target(f"gpueff_peak_tensor_flops_per_second{s}", GPU_LEGEND + " peak")], "flops", min_=0, overrides=[dashed(".* peak")]),
        timeseries("Estimated DRAM bandwidth", "Estimated achieved DRAM bandwidth (DRAM activity x peak) against the model's peak (dashed). About 80 % of the peak is the practical ceiling.",
                   [target(f"gpueff_estimated_dram_bytes_per_second{s}", GPU_LEGEND), target(f"gpueff_peak_dram_bytes_per_second{s}", GPU_LEGEND + " peak")], "Bps", min_=0, overrides=[dashed(".* peak")]),
        timeseries("Tensor FLOP per joule", "Estimated tensor FLOP per joule of GPU energy (FLOP/s per watt): the energy efficiency of the compute work.",
                   [target(f"gpueff_estimated_tensor_flop_per_joule{s}", GPU_LEGEND)], "si:FLOP/J", min_=0),
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
    ]
    return dashboard("gpueff-gpu-detail", "GPU efficiency / GPU detail", "One or a few GPUs in depth: activity, bottleneck, power, clocks and throttling, achieved FLOP/s and bandwidth, memory and owners.", panels, gpu_variables())


def app_throughput() -> dict[str, Any]:
    s = sel()
    throughput_var = custom_variable("throughput", "Throughput", THROUGHPUT_CHOICES, "PromQL for the application's throughput (one series, e.g. sum(rate(...))). Edit the dashboard variable to add your own server.")
    requests_var = custom_variable("requests", "Request rate", REQUEST_CHOICES, "PromQL for the application's request rate (one series).")
    panels = [
        row("Throughput against the GPU"),
        timeseries("Throughput vs SM activity", "The application's throughput (left axis, from the Throughput variable) on the same time axis as average SM activity and nvidia-smi utilization of the selected GPUs (right axis). Utilization near 100 % with SM activity low and throughput flat under rising load is a batching or launch problem, not a full GPU.",
                   [target("$throughput", "throughput"), target(f"avg(gpueff_sm_active_ratio{s})", "SM activity"), target(f"avg(gpueff_gpu_utilization_ratio{s})", "utilization (nvidia-smi)")],
                   "short", min_=0, overrides=right_axis("SM activity", "utilization (nvidia-smi)", unit="percentunit"), w=24),
        timeseries("Request rate vs throughput", "Request rate (left) against throughput (right). Both should rise together; a request rate that keeps rising while throughput stays flat means the server is saturated: look at SM and DRAM activity to see why.",
                   [target("$requests", "requests/s"), target("$throughput", "throughput")], "reqps", min_=0,
                   overrides=[{"matcher": {"id": "byName", "options": "throughput"}, "properties": [{"id": "custom.axisPlacement", "value": "right"}, {"id": "unit", "value": "short"}]}]),
        timeseries("Throughput per request", "Throughput divided by request rate (e.g. tokens per request). A drop at constant request size means requests wait longer, not that they got smaller.",
                   [target("($throughput) / scalar($requests)", "per request")], "short", min_=0),
        timeseries("Throughput per watt", "Throughput divided by the power of the selected GPUs: work per joule (e.g. tokens per joule). Better batching raises it; a larger GPU than the work needs lowers it.",
                   [target(f"($throughput) / scalar(sum(gpueff_power_watts{s}))", "per joule")], "si:/J", min_=0),
        timeseries("GPU power", "Power drawn by the selected GPUs, on the same time axis.", [target(f"sum(gpueff_power_watts{s})", "power")], "watt", min_=0),
        row("Why throughput is flat"),
        timeseries("SM, tensor and DRAM activity", "Average SM, tensor-pipe and DRAM activity of the selected GPUs. Throughput flat with DRAM near 0.8: memory-bandwidth ceiling (quantise, fuse attention, add replicas). Flat with SM and DRAM both low: batching limit (raise the batch size / max concurrent sequences).",
                   [target(f"avg(gpueff_sm_active_ratio{s})", "SM activity"), target(f"avg(gpueff_tensor_active_ratio{s})", "tensor"), target(f"avg(gpueff_dram_active_ratio{s})", "DRAM")],
                   "percentunit", min_=0, max_=1, w=24),
    ]
    variables = gpu_variables() + [throughput_var, requests_var]
    return dashboard("gpueff-app-throughput", "GPU efficiency / Application throughput", "An application's own throughput (PromQL picked by a variable) on the same time axis as SM activity, request rate and power, with throughput per watt.", panels, variables)


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
        path = HERE / name
        text = render(build)
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date (run python dashboards/build.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
