"""``top --url``: a running exporter's /metrics, fetched over HTTP(S) and read back into the same
per-GPU overview the live page shows, through prometheus_client's text parser. The page is text
from outside: it is read bounded, and a page that does not parse is a clear error."""

from __future__ import annotations

import http.client
import math
import ssl
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from exporter.attribution.kubernetes.owners import PodOwner
from exporter.attribution.slurm import SlurmJob
from exporter.deadline import exchange_deadline
from exporter.overview import AppFigures, GpuOverview, JobOverview
from exporter.untrusted import whole_number

MAX_BYTES = 16 * 1024 * 1024  # the largest node's page is under 1 MiB (docs/benchmarks.md)
MAX_SAMPLES = 50_000  # gpueff_ samples: 84 a replayed GPU, about 200 a live one with its health readings

# Sample name -> the GpuOverview field it fills.
_VALUES = {
    "gpueff_gpu_utilization_ratio": "utilization",
    "gpueff_sm_active_ratio": "sm_active",
    "gpueff_efficiency_ratio": "efficiency",
    "gpueff_peak_tensor_flops_per_second": "peak_tensor_flops",
    "gpueff_estimated_dram_bytes_per_second": "dram_bytes_per_second",
    "gpueff_peak_dram_bytes_per_second": "peak_dram_bytes_per_second",
    "gpueff_power_watts": "power_watts",
    "gpueff_busy_flop_per_joule": "busy_flop_per_joule",
    "gpueff_estimated_flops_per_second": "estimated_flops",
    "gpueff_memory_used_bytes": "memory_used_bytes",
    "gpueff_memory_total_bytes": "memory_total_bytes",
    "gpueff_busy_idle_sm_seconds_total": "busy_idle_sm_seconds",
}


class ScrapeError(Exception):
    """The exporter could not be read; the message says what and where."""


@dataclass
class _Gpu:
    index: int = -1
    model: str = ""
    source: str = ""
    up: bool = False
    profiling: bool = False
    bottleneck: str | None = None
    mismatch: list[str] = field(default_factory=list)
    implausible: list[str] = field(default_factory=list)
    values: dict[str, float] = field(default_factory=dict)
    pods: set[PodOwner] = field(default_factory=set)
    slurm_jobs: set[SlurmJob] = field(default_factory=set)


@dataclass
class _App:
    unit: str = ""
    up: bool = False
    throughput: float | None = None
    units_per_joule: float | None = None
    uuids: list[str] = field(default_factory=list)


@dataclass
class _Job:
    gpus: list[int] = field(default_factory=list)
    classes: dict[str, int] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    straggler: int | None = None


@dataclass(frozen=True, slots=True)
class Exporter:
    """What one /metrics page says."""

    backend: str
    replayed: bool
    stale: bool
    gpus: list[GpuOverview]
    jobs: list[JobOverview] = field(default_factory=list)


def metrics_url(url: str) -> str:
    """The metrics URL for what the user typed: a bare http(s)://host:port gets /metrics."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ScrapeError(f"--url {url!r}: expected http://host:port[/metrics] or https://...")
    if parts.username or parts.password:
        raise ScrapeError(f"--url {url!r}: credentials in the URL are not sent; top reads exporters without basic auth")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path if parts.path not in ("", "/") else "/metrics", parts.query, ""))


def fetch(url: str, timeout: float) -> str:
    """The page at ``url``, all of it within ``timeout`` seconds: a server that trickles its answer
    (a byte now and then, each read under any per-read timeout) is cut off at the deadline, its
    socket shut down. Redirects are not followed; at most MAX_BYTES are read."""
    parts = urllib.parse.urlsplit(url)
    connection = (
        http.client.HTTPSConnection(parts.netloc, timeout=timeout, context=ssl.create_default_context())
        if parts.scheme == "https"
        else http.client.HTTPConnection(parts.netloc, timeout=timeout)
    )
    try:
        with exchange_deadline(connection, timeout) as expired:
            try:
                connection.connect()
                if expired.is_set():
                    raise TimeoutError
                connection.request("GET", urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, "")), headers={"Accept": "text/plain"})
                response = connection.getresponse()
                if response.status != 200:
                    hint = ": it asks for a password (basic auth), which top does not send" if response.status == 401 else ""
                    hint = ": top does not follow redirects, give it the final URL" if 300 <= response.status < 400 else hint
                    raise ScrapeError(f"{url} answered HTTP {response.status} {response.reason}{hint}")
                body = response.read(MAX_BYTES + 1)
                if expired.is_set():
                    raise TimeoutError
            except (OSError, http.client.HTTPException) as error:
                if expired.is_set():
                    raise ScrapeError(f"{url} did not send its page within {timeout:g} s") from None
                raise ScrapeError(f"cannot reach {url}: {error}") from None
    finally:
        connection.close()
    if len(body) > MAX_BYTES:
        raise ScrapeError(f"{url} sent more than {MAX_BYTES // (1024 * 1024)} MiB: not an exporter's page")
    return body.decode("utf-8", errors="replace")


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _lines(text: str) -> Iterator[str]:
    """The lines one by one (a list of a large page's lines would cost more than the page)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        yield text[start:end]
        start = end + 1


def _lines_read(text: str, where: str) -> str:
    """Only the exporter's own lines (gpueff_ samples, their HELP and TYPE), at most MAX_SAMPLES
    samples: the parser's cost per sample is about a kilobyte, and the rest of a page is not parsed."""
    kept: list[str] = []
    samples = 0
    for line in _lines(text):
        if line.startswith("#"):
            words = line.split(None, 3)
            if len(words) > 2 and words[1] in ("HELP", "TYPE") and words[2].startswith("gpueff_"):
                kept.append(line)
        elif line.startswith("gpueff_"):
            samples += 1
            if samples > MAX_SAMPLES:
                raise ScrapeError(f"{where} has more than {MAX_SAMPLES} gpueff_ samples: not one node's exporter")
            kept.append(line)
    return "\n".join(kept) + "\n"


def parse(text: str, where: str) -> Exporter:
    """The overview of every GPU on a /metrics page (the gpueff_ series it shows; the rest is ignored)."""
    gpus: dict[str, _Gpu] = {}
    apps: dict[str, _App] = {}
    jobs: dict[tuple[str, str], _Job] = {}
    backend, replayed, stale = "", False, False
    try:
        samples = [sample for family in text_string_to_metric_families(_lines_read(text, where)) for sample in family.samples]
    except ValueError as error:
        raise ScrapeError(f"{where} is not Prometheus text: {error}") from None
    for sample in samples:
        name, labels, value = sample.name, sample.labels, sample.value
        if not name.startswith("gpueff_"):
            continue
        if name == "gpueff_exporter_build_info":
            backend, replayed = labels.get("backend", ""), labels.get("replayed") == "true"
        elif name == "gpueff_collect_stale":
            stale = value == 1
        elif name.startswith("gpueff_app_") and "app" in labels:
            app = apps.setdefault(labels["app"], _App())
            if name == "gpueff_app_gpu_info" and "uuid" in labels:
                app.uuids.append(labels["uuid"])
            elif name == "gpueff_app_up":
                app.up = value == 1
            elif name == "gpueff_app_throughput_per_second":
                app.unit, app.throughput = labels.get("unit", ""), _number(value)
            elif name == "gpueff_app_units_per_joule":
                app.units_per_joule = _number(value)
        elif name.startswith("gpueff_job_") and "job_id" in labels:
            _job_sample(jobs.setdefault((labels.get("job_kind", ""), labels["job_id"]), _Job()), name, labels, value)
        elif "uuid" in labels:
            _gpu_sample(gpus.setdefault(labels["uuid"], _Gpu()), name, labels, value)
    joined: dict[str, list[AppFigures]] = {}
    for app_name, app in sorted(apps.items()):
        for uuid in app.uuids:
            joined.setdefault(uuid, []).append(AppFigures(app_name, app.unit, app.up, app.throughput, app.units_per_joule))
    views = [_overview(uuid, gpu, tuple(joined.get(uuid, ()))) for uuid, gpu in gpus.items() if gpu.index >= 0]
    views.sort(key=lambda view: (view.index, view.uuid))
    return Exporter(backend, replayed, stale, views, [_job_overview(key, job, views) for key, job in sorted(jobs.items())])


def _index(text: str) -> int | None:
    return whole_number(text, 9)


def _job_sample(job: _Job, name: str, labels: dict[str, str], value: float) -> None:
    if name == "gpueff_job_gpu_info" and (index := _index(labels.get("gpu", ""))) is not None:
        job.gpus.append(index)
    elif name == "gpueff_job_straggler" and value == 1:
        job.straggler = _index(labels.get("gpu", ""))
    elif name == "gpueff_job_bottleneck_gpus" and "class" in labels:
        job.classes[labels["class"]] = int(value) if math.isfinite(value) else 0
    elif name == "gpueff_job_link_bytes_per_second" and labels.get("direction") == "tx":
        job.values[labels.get("link", "")] = value
    elif name in ("gpueff_job_efficiency_ratio", "gpueff_job_peer_wait_ratio"):
        job.values[name] = value


def _job_overview(key: tuple[str, str], job: _Job, gpus: list[GpuOverview]) -> JobOverview:
    value = lambda name: _number(job.values[name]) if name in job.values else None  # noqa: E731
    held = sorted(set(job.gpus))
    waiting = tuple(gpu.index for gpu in gpus if gpu.index in held and gpu.bottleneck == "peer_wait")
    return JobOverview(key[0], key[1], tuple(held), value("gpueff_job_efficiency_ratio"), job.classes, value("nvlink"), value("pcie"), job.straggler, waiting, value("gpueff_job_peer_wait_ratio"))


def _gpu_sample(gpu: _Gpu, name: str, labels: dict[str, str], value: float) -> None:
    if name == "gpueff_gpu_info":
        gpu.model, gpu.source = labels.get("model", ""), labels.get("trace", "")
        index = _index(labels.get("gpu", ""))
        gpu.index = gpu.index if index is None else index
    elif name == "gpueff_gpu_up":
        gpu.up = value == 1
    elif name == "gpueff_profiling_available":
        gpu.profiling = value == 1
    elif value == 1 and name == "gpueff_bottleneck":
        gpu.bottleneck = labels.get("class")
    elif value == 1 and name == "gpueff_mismatch":
        gpu.mismatch.append(labels.get("rule", ""))
    elif name == "gpueff_gpu_pod_info":
        gpu.pods.add(PodOwner(labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", "")))
    elif name == "gpueff_gpu_job_info":
        gpu.slurm_jobs.add(SlurmJob(labels.get("job_id", ""), user_id=labels.get("user_id", "")))
    elif value == 1 and name == "gpueff_readings_implausible":
        gpu.implausible.append(labels.get("check", ""))
    elif name == "gpueff_pipe_busy_flops_per_second" and labels.get("pipe") == "hmma_bf16_equivalent":
        gpu.values["tensor_flops"] = value
    elif name in _VALUES:
        gpu.values[_VALUES[name]] = value


def _overview(uuid: str, gpu: _Gpu, apps: tuple[AppFigures, ...]) -> GpuOverview:
    value = lambda key: _number(gpu.values[key]) if key in gpu.values else None  # noqa: E731
    return GpuOverview(
        index=gpu.index,
        uuid=uuid,
        model=gpu.model,
        source=gpu.source,
        up=gpu.up,
        utilization=value("utilization"),
        sm_active=value("sm_active"),
        efficiency=value("efficiency"),
        bottleneck=gpu.bottleneck if gpu.up else None,
        mismatch=tuple(gpu.mismatch),
        implausible=tuple(gpu.implausible),
        profiling=gpu.up and gpu.profiling,
        tensor_flops=value("tensor_flops"),
        peak_tensor_flops=value("peak_tensor_flops"),
        dram_bytes_per_second=value("dram_bytes_per_second"),
        peak_dram_bytes_per_second=value("peak_dram_bytes_per_second"),
        power_watts=value("power_watts"),
        busy_flop_per_joule=value("busy_flop_per_joule"),
        estimated_flops=value("estimated_flops"),
        memory_used_bytes=value("memory_used_bytes"),
        memory_total_bytes=value("memory_total_bytes"),
        busy_idle_sm_seconds=value("busy_idle_sm_seconds"),
        apps=apps,
        pods=tuple(sorted(gpu.pods)),
        slurm_jobs=tuple(sorted(gpu.slurm_jobs)),
    )
