"""The report's PromQL: ten instant queries at the range's end, each over the whole range, each
grouped by what the accounting needs (gpueff/commands/report/ledger.py) and nothing finer."""

from __future__ import annotations

from gpueff.commands.report.ledger import Answers
from gpueff.commands.report.prometheus import Prometheus, Sample

CLASS_POINTS = 2000  # gpueff_bottleneck is read at most this many times per series over the range


def gpu_query(metric: str, range_text: str, extra: str = "") -> str:
    return f"sum by (instance, uuid, gpu, namespace, pod, state{extra}) (increase({metric}[{range_text}]))"


def holder_query(metric: str, range_text: str, extra: str = "") -> str:
    return f"sum by (instance, uuid, holder_kind, holder, state{extra}) (increase({metric}[{range_text}]))"


def range_of(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def class_query(seconds: float) -> str:
    """How many times each GPU (and pod, where its series carry one) read each class: a subquery
    with a step of range / CLASS_POINTS, so a week costs 2,000 lookups per series, not every sample."""
    step = max(1, round(seconds / CLASS_POINTS))
    return f"sum by (instance, uuid, namespace, pod, class) (sum_over_time(gpueff_bottleneck[{range_of(seconds)}:{step}s]))"


def ask(prometheus: Prometheus, seconds: float, until: float) -> Answers:
    """Every answer the ledger needs for the ``seconds`` before ``until`` (Unix time)."""
    window = range_of(seconds)

    def query(expr: str) -> list[Sample]:
        return prometheus.query(expr, until)

    return Answers(
        gpu={
            "seconds": query(gpu_query("gpueff_gpu_state_seconds_total", window)),
            "joules": query(gpu_query("gpueff_gpu_state_joules_total", window)),
            "cost": query(gpu_query("gpueff_gpu_state_cost_total", window, ", currency")),
        },
        holder={
            "seconds": query(holder_query("gpueff_holder_state_seconds_total", window)),
            "joules": query(holder_query("gpueff_holder_state_joules_total", window)),
            "cost": query(holder_query("gpueff_holder_state_cost_total", window, ", currency")),
        },
        classes=query(class_query(seconds)),
        attribution=query(f"max by (instance, uuid, gpu, path, reason) (last_over_time(gpueff_gpu_attribution_info[{window}]))"),
        jobs=query(f"max by (job_id, user_id) (last_over_time(gpueff_gpu_job_info[{window}]))"),
        pod_names=query(f"max by (uid, namespace, pod) (last_over_time(kube_pod_info[{window}]))"),
    )
