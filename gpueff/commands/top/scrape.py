"""``top --url``: a running exporter's /metrics, fetched over HTTP(S) and read back into the same
per-GPU overview the live page shows, through prometheus_client's text parser. The page is text
from outside: it is read bounded, and a page that does not parse is a clear error."""

from __future__ import annotations

import http.client
import math
import ssl
import urllib.parse
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from prometheus_client.parser import text_fd_to_metric_families

from gpueff.attribution.kubernetes.owners import PodOwner
from gpueff.attribution.reasons import PATHS, REASONS
from gpueff.attribution.slurm import SlurmJob
from gpueff.deadline import exchange_deadline
from gpueff.metrics import MAX_PROCESSES
from gpueff.overview import AppFigures, GpuOverview, JobOverview
from gpueff.pipeline.processes import GpuProcesses, ProcessRow
from gpueff.untrusted import whole_number

MAX_BYTES = 16 * 1024 * 1024  # the largest node's page is under 1 MiB (docs/benchmarks.md)
MAX_SAMPLES = 50_000  # gpueff_ samples: 84 a replayed GPU, about 200 a live one with its health readings
MAX_GPUS = MAX_JOBS = 4096  # a node has at most 16 GPUs of 7 MIG instances each
MAX_APPS = 1024  # the exporter's config takes at most 64
MAX_LINE_BYTES = 64 * 1024  # a gpueff_ line; the exporter's longest (a pod's, with copied pod labels) is a few KiB
MAX_VALUE_CHARS = 256  # of a label value kept (the exporter cuts its own at 128; top shows at most a line of one)
MAX_TEXT_CHARS = 1 << 21  # characters of names and labels kept from one page (a node's: ~10,000)
CHUNK_BYTES = 64 * 1024

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
    "gpueff_temperature_celsius": "temperature_celsius",
    "gpueff_busy_idle_sm_seconds_total": "busy_idle_sm_seconds",
    "gpueff_compute_processes": "process_count",  # not shown: how many processes the per_process rows leave out
}
_PROCESS_VALUES = {"gpueff_process_memory_bytes": "memory_bytes", "gpueff_process_busy_share_ratio": "busy_share"}
_JOB_VALUES = ("gpueff_job_efficiency_ratio", "gpueff_job_peer_wait_ratio")
_LINKS = ("nvlink", "pcie")


_K = TypeVar("_K")
_V = TypeVar("_V")


class ScrapeError(Exception):
    """The exporter could not be read; the message says what and where."""


@dataclass(slots=True)
class _Gpu:
    index: int = -1
    model: str = ""
    source: str = ""
    up: bool = False
    profiling: bool = False
    bottleneck: str | None = None
    mismatch: dict[str, None] = field(default_factory=dict)  # ordered, each once
    implausible: dict[str, None] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    pods: set[PodOwner] = field(default_factory=set)
    slurm_jobs: set[SlurmJob] = field(default_factory=set)
    attribution: tuple[str, str] | None = None
    processes: dict[str, _Process] = field(default_factory=dict)  # by pid label ("other": the rest, summed)


@dataclass(slots=True)
class _Process:
    user_id: str = ""
    name: str = ""
    holder_kind: str = ""
    holder: str = ""
    memory_bytes: float | None = None
    busy_share: float | None = None


@dataclass(slots=True)
class _App:
    unit: str = ""
    up: bool = False
    throughput: float | None = None
    units_per_joule: float | None = None
    uuids: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Job:
    gpus: set[int] = field(default_factory=set)
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


def read(url: str, timeout: float) -> Exporter:
    """The overview on the page at ``url``, parsed as it arrives (the page is never held whole):
    the fetch and the parse together within ``timeout`` seconds."""
    chunks = _fetch(url, timeout)
    try:
        return _overview_of(_parsed(_byte_lines(chunks, url), url), url)
    finally:
        chunks.close()  # a page given up on (too large, not Prometheus text) closes its connection now


def _fetch(url: str, timeout: float) -> Generator[bytes, None, None]:
    """The page's bytes as they come, all within ``timeout`` seconds: a server that trickles its
    answer (a byte now and then, each read under any per-read timeout) is cut off at the deadline,
    its socket shut down. Redirects are not followed; at most MAX_BYTES are read."""
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
                received = 0
                while chunk := response.read(CHUNK_BYTES):
                    if expired.is_set():
                        raise TimeoutError
                    received += len(chunk)
                    if received > MAX_BYTES:
                        raise ScrapeError(f"{url} sent more than {MAX_BYTES // (1024 * 1024)} MiB: not an exporter's page")
                    yield chunk
                if expired.is_set():
                    raise TimeoutError
            except (OSError, http.client.HTTPException) as error:
                if expired.is_set():
                    raise ScrapeError(f"{url} did not send its page within {timeout:g} s") from None
                raise ScrapeError(f"cannot reach {url}: {error}") from None
    finally:
        connection.close()


def _byte_lines(chunks: Iterable[bytes], where: str) -> Iterator[str]:
    """The gpueff_ sample lines in a page's bytes, decoded, as they come; every other line (comments,
    other metrics) is dropped as it passes, however long, and none is held whole but ours."""
    pending, skipping = b"", False
    for chunk in chunks:
        *lines, pending = (pending + chunk).split(b"\n")
        if lines and skipping:
            lines[0], skipping = b"", False  # the end of a long line of another metric
        for line in lines:
            if line.startswith(b"gpueff_"):
                yield _line(line.decode("utf-8", errors="replace"), len(line), where)
        if len(pending) > MAX_LINE_BYTES:
            if pending.startswith(b"gpueff_") and not skipping:
                _line("", len(pending), where)
            pending, skipping = b"", True
    if pending.startswith(b"gpueff_") and not skipping:
        yield _line(pending.decode("utf-8", errors="replace"), len(pending), where)


def _line(line: str, size: int, where: str) -> str:
    if size > MAX_LINE_BYTES:
        raise ScrapeError(f"{where} has a gpueff_ line longer than {MAX_LINE_BYTES // 1024} KiB: not an exporter's page")
    return line


def _text_lines(text: str, where: str) -> Iterator[str]:
    """The gpueff_ sample lines of a page held as text, one by one (a list of a large page's lines
    would cost more than the page)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if text.startswith("gpueff_", start):
            yield _line(text[start:end], end - start, where)
        start = end + 1


def _parsed(lines: Iterable[str], where: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """Each sample's name, labels and value, through prometheus_client's parser, at most MAX_SAMPLES.
    HELP and TYPE lines are not handed to it, so it yields each sample as its line passes (with them
    it holds a family's samples until the next family begins: 50,000 of one family cost ~50 MB)."""
    samples = 0
    try:
        for family in text_fd_to_metric_families(lines):  # type: ignore[arg-type]  # any iterable of lines
            for sample in family.samples:
                samples += 1
                if samples > MAX_SAMPLES:
                    raise ScrapeError(f"{where} has more than {MAX_SAMPLES} gpueff_ samples: not one node's exporter")
                yield sample.name, sample.labels, sample.value
    except ValueError as error:
        raise ScrapeError(f"{where} is not Prometheus text: {error}") from None


def parse(text: str, where: str) -> Exporter:
    """The overview of every GPU on a /metrics page held as text (the gpueff_ series it shows; the rest is ignored)."""
    return _overview_of(_parsed(_text_lines(text, where), where), where)


class _Page:
    """What a page's samples say, gathered in one pass: each sample is looked at once and every
    lookup is by key, so the work grows with the page (never GPUs x jobs). What is kept is bounded
    however the page spreads its samples: at most MAX_GPUS GPUs, MAX_JOBS jobs and MAX_APPS apps,
    and MAX_TEXT_CHARS characters of the names and labels kept (a label value cut at MAX_VALUE_CHARS)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.gpus: dict[str, _Gpu] = {}
        self.apps: dict[str, _App] = {}
        self.jobs: dict[tuple[str, str], _Job] = {}
        self.backend, self.replayed, self.stale = "", False, False
        self.text = 0  # characters kept

    def kept(self, value: str) -> str:
        """A label value as kept: cut at MAX_VALUE_CHARS (a longer one is no exporter's, and shown cut anyway), counted."""
        value = value[:MAX_VALUE_CHARS]
        self._count(len(value))
        return value

    def _count(self, characters: int) -> None:
        self.text += characters
        if self.text > MAX_TEXT_CHARS:
            raise ScrapeError(f"{self.where} has more than {MAX_TEXT_CHARS} characters of names and labels: not one node's exporter")

    def _entry(self, entries: dict[_K, _V], key: _K, make: Callable[[], _V], limit: int, what: str, size: int) -> _V:
        """The entry for ``key`` (``size`` characters), made where new: at most ``limit`` of them."""
        found = entries.get(key)
        if found is None:
            if len(entries) >= limit:
                raise ScrapeError(f"{self.where} has more than {limit} {what}: not one node's exporter")
            self._count(size)  # a key is counted once, when its entry is made
            found = entries[key] = make()
        return found

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        if name == "gpueff_exporter_build_info":
            self.backend, self.replayed = self.kept(labels.get("backend", "")), labels.get("replayed") == "true"
        elif name == "gpueff_collect_stale":
            self.stale = value == 1
        elif name.startswith("gpueff_app_") and "app" in labels:
            key = labels["app"][:MAX_VALUE_CHARS]
            self._app(self._entry(self.apps, key, _App, MAX_APPS, "apps", len(key)), name, labels, value)
        elif name.startswith("gpueff_job_") and "job_id" in labels:
            job = (labels.get("job_kind", "")[:MAX_VALUE_CHARS], labels["job_id"][:MAX_VALUE_CHARS])
            self._job(self._entry(self.jobs, job, _Job, MAX_JOBS, "jobs", len(job[0]) + len(job[1])), name, labels, value)
        elif "uuid" in labels:
            key = labels["uuid"][:MAX_VALUE_CHARS]
            self._gpu(self._entry(self.gpus, key, _Gpu, MAX_GPUS, "GPUs", len(key)), name, labels, value)

    def _app(self, app: _App, name: str, labels: dict[str, str], value: float) -> None:
        if name == "gpueff_app_gpu_info" and "uuid" in labels:
            app.uuids.add(self.kept(labels["uuid"]))
        elif name == "gpueff_app_up":
            app.up = value == 1
        elif name == "gpueff_app_throughput_per_second":
            app.unit, app.throughput = self.kept(labels.get("unit", "")), _number(value)
        elif name == "gpueff_app_units_per_joule":
            app.units_per_joule = _number(value)

    def _job(self, job: _Job, name: str, labels: dict[str, str], value: float) -> None:
        if name == "gpueff_job_gpu_info" and (index := _index(labels.get("gpu", ""))) is not None:
            job.gpus.add(index)
        elif name == "gpueff_job_straggler" and value == 1:
            job.straggler = _index(labels.get("gpu", ""))
        elif name == "gpueff_job_bottleneck_gpus" and "class" in labels:
            job.classes[self.kept(labels["class"])] = int(value) if math.isfinite(value) else 0
        elif name == "gpueff_job_link_bytes_per_second" and labels.get("direction") == "tx" and labels.get("link") in _LINKS:
            job.values[labels["link"]] = value
        elif name in _JOB_VALUES:
            job.values[name] = value

    def _gpu(self, gpu: _Gpu, name: str, labels: dict[str, str], value: float) -> None:
        if name == "gpueff_gpu_info":
            gpu.model, gpu.source = self.kept(labels.get("model", "")), self.kept(labels.get("trace", ""))
            index = _index(labels.get("gpu", ""))
            gpu.index = gpu.index if index is None else index
        elif name == "gpueff_gpu_up":
            gpu.up = value == 1
        elif name == "gpueff_profiling_available":
            gpu.profiling = value == 1
        elif value == 1 and name == "gpueff_bottleneck":
            gpu.bottleneck = self.kept(labels.get("class", ""))
        elif value == 1 and name == "gpueff_mismatch":
            gpu.mismatch[self.kept(labels.get("rule", ""))] = None
        elif name == "gpueff_gpu_pod_info":
            gpu.pods.add(PodOwner(self.kept(labels.get("namespace", "")), self.kept(labels.get("pod", "")), self.kept(labels.get("container", ""))))
        elif name == "gpueff_gpu_job_info":
            gpu.slurm_jobs.add(SlurmJob(self.kept(labels.get("job_id", "")), user_id=self.kept(labels.get("user_id", ""))))
        elif name == "gpueff_gpu_attribution_info" and labels.get("path") in PATHS and labels.get("reason") in REASONS:
            gpu.attribution = (labels["path"], labels["reason"])
        elif name in _PROCESS_VALUES and ((pid := labels.get("pid", "")) == "other" or whole_number(pid, 10) is not None):
            self._process(gpu, pid, labels, _PROCESS_VALUES[name], value)
        elif value == 1 and name == "gpueff_readings_implausible":
            gpu.implausible[self.kept(labels.get("check", ""))] = None
        elif name == "gpueff_pipe_busy_flops_per_second" and labels.get("pipe") == "hmma_bf16_equivalent":
            gpu.values["tensor_flops"] = value
        elif name in _VALUES:
            gpu.values[_VALUES[name]] = value

    def _process(self, gpu: _Gpu, pid: str, labels: dict[str, str], figure: str, value: float) -> None:
        """A per_process series: at most MAX_PROCESSES processes a GPU and its "other" are kept (the exporter sends no more)."""
        process = gpu.processes.get(pid)
        if process is None:
            if len(gpu.processes) > MAX_PROCESSES:
                return
            self._count(len(pid))
            process = gpu.processes[pid] = _Process(self.kept(labels.get("user_id", "")), self.kept(labels.get("command", "")), self.kept(labels.get("holder_kind", "")), self.kept(labels.get("holder", "")))
        setattr(process, figure, _number(value))

    def exporter(self) -> Exporter:
        joined: dict[str, list[AppFigures]] = {}
        for app_name, app in sorted(self.apps.items()):
            for uuid in app.uuids:
                joined.setdefault(uuid, []).append(AppFigures(app_name, app.unit, app.up, app.throughput, app.units_per_joule))
        views = [_overview(uuid, gpu, tuple(joined.get(uuid, ()))) for uuid, gpu in self.gpus.items() if gpu.index >= 0]
        views.sort(key=lambda view: (view.index, view.uuid))
        waiting: dict[int, int] = {}  # GPU index -> its GPUs (one, but for a page that repeats an index) that wait on a peer
        for view in views:
            if view.bottleneck == "peer_wait":
                waiting[view.index] = waiting.get(view.index, 0) + 1
        return Exporter(self.backend, self.replayed, self.stale, views, [_job_overview(key, job, waiting) for key, job in sorted(self.jobs.items())])


def _overview_of(samples: Iterable[tuple[str, dict[str, str], float]], where: str) -> Exporter:
    page = _Page(where)
    for name, labels, value in samples:
        page.add(name, labels, value)
    return page.exporter()


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _index(text: str) -> int | None:
    return whole_number(text, 9)


def _job_overview(key: tuple[str, str], job: _Job, waiting: dict[int, int]) -> JobOverview:
    """A job's overview; ``waiting`` counts the GPUs of each index that wait on a peer (looked up
    per GPU of the job: linear in the page, where scanning every GPU for every job was not)."""
    value = lambda name: _number(job.values[name]) if name in job.values else None  # noqa: E731
    held = sorted(job.gpus)
    peers = tuple(index for index in held for _ in range(waiting.get(index, 0)))
    return JobOverview(key[0], key[1], tuple(held), value("gpueff_job_efficiency_ratio"), job.classes, value("nvlink"), value("pcie"), job.straggler, peers, value("gpueff_job_peer_wait_ratio"))


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
        temperature_celsius=value("temperature_celsius"),
        busy_idle_sm_seconds=value("busy_idle_sm_seconds"),
        apps=apps,
        pods=tuple(sorted(gpu.pods)),
        slurm_jobs=tuple(sorted(gpu.slurm_jobs)),
        attribution=gpu.attribution if gpu.up else None,
        processes=_processes(gpu.processes, gpu.values.get("process_count")) if gpu.up and gpu.processes else None,
    )


def _processes(found: dict[str, _Process], count: float | None) -> GpuProcesses:
    """The per_process series of one GPU back into its process rows, in the exporter's order."""
    rows = [ProcessRow(int(pid), p.user_id, p.name, p.memory_bytes, p.busy_share, p.holder_kind, p.holder) for pid, p in found.items() if pid != "other"]
    rows.sort(key=lambda row: (-(row.memory_bytes or 0.0), -(row.busy_share or 0.0), row.pid))
    rest = found.get("other")
    if rest is None:
        return GpuProcesses(tuple(rows))
    others = max(0, int(count) - len(rows)) if count is not None and math.isfinite(count) else 0  # 0: how many is not known (no gpueff_compute_processes)
    return GpuProcesses(tuple(rows), others, rest.memory_bytes, rest.busy_share)
