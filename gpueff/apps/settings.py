"""The ``apps:`` config section: one entry per application whose throughput is joined with its GPUs;
and AppsSettings, what the join takes of the config."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpueff.apps.patterns import pod_regex, regex
from gpueff.config.engine import SettingError, setting
from gpueff.config.values import (
    MIN_COLLECT_INTERVAL,
    format_duration,
    gpu_selectors,
    http_url,
    label_matchers,
    label_value,
    metric_name,
    min_duration,
    non_negative,
    one_of,
    optional,
    positive_scientific,
    unit_name,
    unix_user_id,
    whole_number,
)
from gpueff.peaks import PRECISION_PEAKS, PeakOverride

DEFAULT_SCRAPE_TIMEOUT = 2.0
MAX_RESPONSE_BYTES = 1 << 30  # the scrape streams in bounded memory; this only bounds its reading time


@dataclass(frozen=True)
class AppConfig:
    """One application whose throughput is joined with its GPUs (see docs/apps.md)."""

    name: str = setting("", label_value, "the app label value (required, unique)")
    url: str = setting("", http_url, "its Prometheus metrics endpoint (required)")
    counter: str = setting("", metric_name, "the counter of work done, as named in the endpoint or as Prometheus 2.x stores it (vllm:generation_tokens_total or vllm_generation_tokens_total) (required)")
    unit: str = setting("", unit_name, "what one count of it is: tokens, images, samples, requests... (required)")
    requests_counter: str | None = setting(None, optional(metric_name), "a counter of requests served, for gpueff_app_requests_per_second")
    labels: dict[str, str] = setting({}, label_matchers, "sum only the series with these exact label values")
    gpus: tuple[int | str, ...] | None = setting(None, optional(gpu_selectors), "the GPUs it runs on, by index or UUID (default: all, unless process is given)")
    process: str | None = setting(None, optional(regex), "or: the GPUs where a process of user (below) whose NVML name matches this regular expression runs")
    user: int | None = setting(None, optional(unix_user_id), "with process (and required with it): the Unix user id its process runs as (id -u NAME); another user's process of that name, or one in a pod or Slurm job, never joins the app")
    pod: str | None = setting(None, optional(pod_regex), "or: the GPUs whose Kubernetes pod, as namespace/pod, matches this regular expression, anchored to one namespace: ^serving/vllm- (needs kubernetes.enabled)")
    flops_per_unit: float | None = setting(None, optional(positive_scientific), "FLOP per unit of work, for gpueff_app_model_flops_utilization_ratio")
    precision: str = setting("bf16", one_of(tuple(PRECISION_PEAKS)), "the precision its math runs in: its model FLOPs utilization divides by the GPUs' dense peak at it (bf16, fp16, fp8, tf32, int8, fp64, fp32)")
    price_per_gpu_hour: float | None = setting(None, optional(non_negative), "what one of its GPU-hours costs (default: the top-level price_per_gpu_hour)")
    scrape_interval: float = setting(5.0, min_duration(MIN_COLLECT_INTERVAL), "how often its endpoint is scraped (100ms to 1h)")
    scrape_timeout: float = setting(None, optional(min_duration(0.01)), "the whole scrape (connect, headers, body) must finish within this (default: 2s, or scrape_interval if shorter; at most scrape_interval)")
    max_response_bytes: int = setting(16 * 1024 * 1024, whole_number(MAX_RESPONSE_BYTES, "no metrics page is that large; the limit bounds how long a scrape reads"), "a larger response fails the scrape (at most 1 GiB)")

    def __post_init__(self) -> None:
        if self.scrape_timeout is None:  # Prometheus' own default
            object.__setattr__(self, "scrape_timeout", min(DEFAULT_SCRAPE_TIMEOUT, self.scrape_interval))

    def check(self) -> None:
        for key in ("name", "url", "counter", "unit"):
            if not getattr(self, key):
                raise SettingError(key, "required")
        chosen = [key for key in ("gpus", "process", "pod") if getattr(self, key) is not None]
        if len(chosen) > 1:
            raise SettingError(chosen[1], f"give only one of gpus, process and pod, not {' and '.join(chosen)}")
        if self.process is not None and self.user is None:
            raise SettingError("user", "required with process: the Unix user id (id -u NAME) the process runs as, so that no other user's process of a matching name joins the app")
        if self.user is not None and self.process is None:
            raise SettingError("user", "goes with process only (it says whose process the pattern matches)")
        if self.scrape_timeout > self.scrape_interval:
            raise SettingError("scrape_timeout", f"must not exceed scrape_interval ({format_duration(self.scrape_interval)}), got {format_duration(self.scrape_timeout)}")


@dataclass(frozen=True)
class AppsSettings:
    """What the apps' join takes of the config: the ``apps:`` list, and what their figures take
    from the rest of it (the ``peaks:`` over the built-in table, the GPU-hour price where an app
    names none)."""

    apps: tuple[AppConfig, ...] = ()
    peaks: dict[str, PeakOverride] = field(default_factory=dict)
    price_per_gpu_hour: float | None = None
