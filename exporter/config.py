"""The YAML configuration: schema, defaults, validation with file/key/reason errors.

Each section is a frozen dataclass; a field's ``metadata["parse"]`` turns the raw YAML value into
the field's value or raises ``ValueError`` with the reason. Unknown keys are rejected.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import reprlib
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar


class ConfigError(Exception):
    """A configuration problem, already phrased for the user (names the file and the key)."""


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_duration(text: Any) -> float:
    """Parse a Prometheus-style duration (``500ms``, ``1s``, ``1m30s``) into seconds."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"expected a duration such as 500ms, 1s or 1m30s, got {shown(text)}")
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(text):
        raise ValueError(f"expected a duration such as 500ms, 1s or 1m30s, got {shown(text)}")
    return total


def format_duration(seconds: float) -> str:
    if seconds < 1 or seconds != int(seconds):
        return f"{round(seconds * 1000)}ms"
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{int(seconds) // size}{unit}"
    return f"{int(seconds)}s"


SHOWN_CHARS = 200  # at most this much of a rejected value is quoted in an error message
_SHORT = reprlib.Repr()
_SHORT.maxlevel = 3  # with at most 10 items per level: a nested value is never expanded past 1,000 items
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 10
_SHORT.maxstring = _SHORT.maxother = SHOWN_CHARS


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, at most SHOWN_CHARS characters (cut with an ellipsis)."""
    return _cut(_SHORT.repr(value))


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"expected a number, got {shown(value)}")
    return float(value)


def ratio(value: Any) -> float:
    number = _number(value)
    if not 0 <= number <= 1:
        raise ValueError(f"expected a ratio between 0 and 1, got {shown(value)}")
    return number


def positive(value: Any) -> float:
    number = _number(value)
    if number <= 0:
        raise ValueError(f"expected a number above 0, got {shown(value)}")
    return number


def non_negative(value: Any) -> float:
    number = _number(value)
    if number < 0:
        raise ValueError(f"expected a number of 0 or more, got {shown(value)}")
    return number


def optional(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else parse(value)


MAX_DURATION = 3600.0  # every interval and timeout: longer ones are typos, and overflow waits


def min_duration(minimum: float, maximum: float = MAX_DURATION) -> Callable[[Any], float]:
    """A duration parser bounded to [minimum, maximum]."""

    def parse(value: Any) -> float:
        seconds = parse_duration(value)
        if seconds < minimum:
            raise ValueError(f"must be at least {format_duration(minimum)}, got {shown(value)}")
        if not seconds <= maximum:
            raise ValueError(f"must be at most {format_duration(maximum)}, got {shown(value)}")
        return seconds

    return parse


def positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"expected a whole number above 0, got {shown(value)}")
    return value


def label_value(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 64:
        raise ValueError(f"expected a non-empty string of at most 64 characters, got {shown(value)}")
    return value


def setting(default: Any, parse: Callable[[Any], Any], doc: str) -> Any:
    """A config field: its default, how to parse it, and one line for the config reference."""
    metadata = {"parse": parse, "doc": doc}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def section(cls: type, doc: str) -> Any:
    return field(default_factory=cls, metadata={"section": cls, "doc": doc})


def section_list(cls: type, doc: str, unique: str | None = None) -> Any:
    """A YAML list of sections (``apps:``); ``unique`` names a key whose values must all differ."""
    return field(default_factory=tuple, metadata={"section_list": cls, "unique": unique, "doc": doc})


class SettingError(ValueError):
    """Raised by a section's ``check()``: a problem across its keys, naming the key it is about."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key


MIN_COLLECT_INTERVAL = 0.1
MAX_STALE_AFTER = 4 * 3600.0  # room for the default 3 x collect_interval + 2s at the longest interval


@dataclass(frozen=True)
class MismatchThresholds:
    high_utilization: float = setting(0.8, ratio, "high_util_low_sm fires at coarse utilization >= this")
    low_sm_active: float = setting(0.3, ratio, "... together with SM activity below this")
    low_efficiency_utilization: float = setting(0.5, ratio, "low_efficiency fires at utilization >= this")
    low_efficiency_ratio: float = setting(0.3, ratio, "... together with efficiency below this")


@dataclass(frozen=True)
class BottleneckThresholds:
    idle_utilization: float = setting(0.05, ratio, "idle below this utilization (the window's engine activity)")
    host_utilization: float = setting(0.85, ratio, "host: busy but utilization below this (the GPU waits on the host)")
    memory_dram: float = setting(0.6, ratio, "memory: DRAM at least this active (its practical roof is about 0.8) and busier than any math pipe")
    compute_pipe: float = setting(0.2, ratio, "compute: a tensor/FP/integer pipe at least this active, with SM activity at least underfilled_sm_active")
    memory_dram_without_math: float = setting(0.4, ratio, "memory also: DRAM at least this active while every math pipe is below compute_pipe (the job streams bytes)")
    communication_link: float = setting(0.3, ratio, "communication: PCIe or NVLink at least this share of its peak ...")
    underfilled_sm_active: float = setting(0.5, ratio, "underfilled: SM activity below this while the GPU is busy")
    latency_occupancy: float = setting(0.1, ratio, "latency: SM occupancy below this ...")
    latency_work: float = setting(0.2, ratio, "... and every pipe and DRAM below this")
    window: float = setting(5.0, min_duration(0.0), "the class is judged from the readings' time-weighted mean over this much recent time (at least the last poll's window)")
    hold_polls: int = setting(2, positive_int, "a new class is reported only once it has won this many polls in a row (2: no single poll flips it)")


@dataclass(frozen=True)
class PeakOverride:
    tensor_tflops: float | None = setting(None, optional(positive), "dense BF16/FP16 tensor TFLOP/s")
    dram_tbps: float | None = setting(None, optional(positive), "DRAM bandwidth in TB/s")
    pcie_gbps: float | None = setting(None, optional(positive), "PCIe bandwidth per direction in GB/s")
    nvlink_gbps: float | None = setting(None, optional(positive), "NVLink bandwidth per direction in GB/s")


def _peak_overrides(value: Any) -> dict[str, PeakOverride]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of GPU model name to peak figures, got {shown(value)}")
    return {str(name): _load_section(PeakOverride, spec, f"peaks.{_cut(str(name))}") for name, spec in value.items()}


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_UNIT = re.compile(r"[a-z][a-z0-9_]{0,31}")


def http_url(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"https?://[^/\s]+(/\S*)?", value):
        raise ValueError(f"expected an http:// or https:// URL such as http://127.0.0.1:8000/metrics, got {shown(value)}")
    parts = urllib.parse.urlsplit(value)
    if not parts.hostname:
        raise ValueError(f"{shown(value)} names no host: expected a URL such as http://127.0.0.1:8000/metrics")
    try:
        port = parts.port
    except ValueError as error:  # not a number, or out of range
        raise ValueError(f"{shown(value)}: {error}") from None
    if port == 0:
        raise ValueError(f"{shown(value)}: port 0 cannot be scraped")
    return value


def metric_name(value: Any) -> str:
    if not isinstance(value, str) or not _METRIC_NAME.fullmatch(value):
        raise ValueError(f"expected a Prometheus metric name such as vllm:generation_tokens_total, got {shown(value)}")
    return value


def unit_name(value: Any) -> str:
    if not isinstance(value, str) or not _UNIT.fullmatch(value):
        raise ValueError(f"expected a lowercase word such as tokens, images, samples or requests, got {shown(value)}")
    return value


def label_matchers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of label name to exact value, got {shown(value)}")
    for name, label in value.items():
        if not isinstance(name, str) or not _LABEL_NAME.fullmatch(name) or not isinstance(label, str):
            raise ValueError(f"expected label name: \"value\" pairs, got {shown(name)}: {shown(label)}")
    return dict(value)


def gpu_selectors(value: Any) -> tuple[int | str, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"expected a non-empty list of GPU indices and/or UUIDs, got {shown(value)}")
    for item in value:
        if isinstance(item, bool) or not (isinstance(item, int) and item >= 0 or isinstance(item, str) and item):
            raise ValueError(f"expected GPU indices (0, 1, ...) or UUIDs (GPU-...), got {shown(item)}")
    return tuple(value)


def regex(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a regular expression, got {shown(value)}")
    try:
        re.compile(value)
    except re.error as error:
        raise ValueError(f"not a valid regular expression ({error}): {shown(value)}") from None
    return value


def positive_scientific(value: Any) -> float:
    """A number above 0; also ``1.6e10``, which YAML 1.1 (PyYAML) reads as a string."""
    if isinstance(value, str) and re.fullmatch(r"\d+(\.\d*)?[eE][-+]?\d+", value.strip()):
        value = float(value)
    return positive(value)


DEFAULT_SCRAPE_TIMEOUT = 2.0


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
    process: str | None = setting(None, optional(regex), "or: the GPUs where a process whose NVML name matches this regular expression runs")
    pod: str | None = setting(None, optional(regex), "or: the GPUs whose Kubernetes pod, as namespace/pod, matches this regular expression (needs kubernetes.enabled)")
    flops_per_unit: float | None = setting(None, optional(positive_scientific), "FLOP per unit of work, for gpueff_app_model_flops_utilization_ratio")
    price_per_gpu_hour: float | None = setting(None, optional(non_negative), "what one of its GPU-hours costs (default: the top-level price_per_gpu_hour)")
    scrape_interval: float = setting(5.0, min_duration(MIN_COLLECT_INTERVAL), "how often its endpoint is scraped (100ms to 1h)")
    scrape_timeout: float = setting(None, optional(min_duration(0.01)), "the whole scrape (connect, headers, body) must finish within this (default: 2s, or scrape_interval if shorter; at most scrape_interval)")
    max_response_bytes: int = setting(16 * 1024 * 1024, positive_int, "a larger response fails the scrape")

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
        if self.scrape_timeout > self.scrape_interval:
            raise SettingError("scrape_timeout", f"must not exceed scrape_interval ({format_duration(self.scrape_interval)}), got {format_duration(self.scrape_timeout)}")


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {shown(value)}")
    return value


def absolute_path(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"expected an absolute path, got {shown(value)}")
    return value


def resource_patterns(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(item, str) and item for item in value):
        raise ValueError(f"expected a non-empty list of resource names (shell-style * allowed), got {shown(value)}")
    return tuple(value)


POD_LABEL_MODES = ("every_series", "info_only")


def one_of(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {shown(value)}")
        return str(value)

    return parse


@dataclass(frozen=True)
class SharingConfig:
    """The fair split of shared GPUs among pods, Slurm jobs and processes (see docs/sharing.md)."""

    enabled: bool = setting(False, boolean, "export per-holder shares of each GPU's busy time, SM activity, busy-but-idle time and energy, and gpueff_gpu_job_info for Slurm jobs (needs the host's PIDs: hostPID)")
    proc_root: str = setting("/proc", absolute_path, "where the host's /proc is, to read each GPU process's cgroup and name")


@dataclass(frozen=True)
class KubernetesConfig:
    """Pod attribution on Kubernetes (see docs/kubernetes.md)."""

    enabled: bool = setting(False, boolean, "label each GPU's series with the pod, namespace and container the kubelet assigned it to")
    pod_resources_socket: str = setting("/var/lib/kubelet/pod-resources/kubelet.sock", absolute_path, "the kubelet pod-resources API socket")
    refresh_interval: float = setting(10.0, min_duration(1.0), "how often the kubelet is asked, off the poll thread (1s to 1h; never per scrape)")
    timeout: float = setting(1.0, min_duration(0.01), "a List call that takes longer fails (at most refresh_interval)")
    max_message_bytes: int = setting(16 * 1024 * 1024, positive_int, "a larger List response fails the call")
    resource_names: tuple[str, ...] = setting(("nvidia.com/gpu", "nvidia.com/mig-*"), resource_patterns, "extended resources whose device ids are GPU or MIG UUIDs")
    process_attribution: bool = setting(False, boolean, "also attribute GPU processes to pods through /proc/<pid>/cgroup (needs hostPID)")
    proc_root: str = setting("/proc", absolute_path, "where the host's /proc is (process_attribution)")
    pod_labels: str = setting("every_series", one_of(POD_LABEL_MODES), "every_series: a GPU held by one container carries namespace, pod and container on all its series; info_only: only on gpueff_gpu_pod_info, so a GPU's series keep their identity when its pod changes (docs/sharing.md)")

    def check(self) -> None:
        if self.timeout > self.refresh_interval:
            raise SettingError("timeout", f"must not exceed refresh_interval ({format_duration(self.refresh_interval)}), got {format_duration(self.timeout)}")


@dataclass(frozen=True)
class Config:
    collect_interval: float = setting(1.0, min_duration(MIN_COLLECT_INTERVAL), "how often GPUs are sampled (100ms to 1h)")
    slow_collect_interval: float = setting(10.0, min_duration(1.0), "how often slow NVML calls (energy, ECC, remapped rows, memory temperature) are made (1s to 1h)")
    stale_after: float | None = setting(None, optional(min_duration(MIN_COLLECT_INTERVAL, MAX_STALE_AFTER)), "a snapshot older than this is served as down (default: 3 x collect_interval + 2s; at most 4h)")
    price_per_gpu_hour: float | None = setting(None, optional(non_negative), "what one GPU-hour costs, for gpueff_busy_idle_sm_cost_total")
    currency: str = setting("USD", label_value, "the currency label of the cost metrics")
    mismatch: MismatchThresholds = section(MismatchThresholds, "thresholds of gpueff_mismatch")
    bottleneck: BottleneckThresholds = section(BottleneckThresholds, "thresholds of gpueff_bottleneck")
    peaks: dict[str, PeakOverride] = setting({}, _peak_overrides, "peak figures per GPU model name, over the built-in table")
    apps: tuple[AppConfig, ...] = section_list(AppConfig, "applications whose throughput is joined with their GPUs (docs/apps.md)", unique="name")
    kubernetes: KubernetesConfig = section(KubernetesConfig, "pod attribution on Kubernetes (docs/kubernetes.md)")
    sharing: SharingConfig = section(SharingConfig, "per-holder fair split of shared GPUs, Slurm jobs (docs/sharing.md)")

    @property
    def effective_stale_after(self) -> float:
        return self.stale_after if self.stale_after is not None else 3 * self.collect_interval + 2.0


if TYPE_CHECKING:
    import yaml
    from _typeshed import DataclassInstance

_Section = TypeVar("_Section", bound="DataclassInstance")


def _load_section(cls: type[_Section], data: Any, path: str) -> _Section:
    where = f"'{path}'" if path else "the top level"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, raw in data.items():
        key_path = f"{path}.{_cut(str(key))}" if path else _cut(str(key))
        spec = fields.get(key)
        if spec is None:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"'{key_path}': unknown key (known keys here: {known})")
        if "section" in spec.metadata:
            values[key] = _load_section(spec.metadata["section"], raw, key_path)
            continue
        if "section_list" in spec.metadata:
            values[key] = _load_section_list(spec.metadata["section_list"], raw, key_path, spec.metadata["unique"])
            continue
        try:
            values[key] = spec.metadata["parse"](raw)
        except ConfigError:
            raise
        except ValueError as error:
            raise ConfigError(f"'{key_path}': {error}") from None
    loaded = cls(**values)
    check = getattr(loaded, "check", None)
    if check is not None:
        try:
            check()
        except SettingError as error:
            raise ConfigError(f"'{path}.{error.key}': {error}" if path else f"'{error.key}': {error}") from None
    return loaded


def _load_section_list(cls: type, data: Any, path: str, unique: str | None) -> tuple[Any, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ConfigError(f"'{path}': expected a list, got {type(data).__name__}")
    items: tuple[Any, ...] = tuple(_load_section(cls, item, f"{path}[{index}]") for index, item in enumerate(data))
    if unique is not None:
        first: dict[Any, int] = {}
        for index, item in enumerate(items):
            value = getattr(item, unique)
            if value in first:
                raise ConfigError(f"'{path}[{index}].{unique}': {shown(value)} is already used by {path}[{first[value]}]")
            first[value] = index
    return items


def parse_config(data: Any) -> Config:
    return _load_section(Config, data, "")


MAX_ALIAS_NODES = 10_000  # nodes that aliases may add to a YAML document once expanded


@functools.cache
def _strict_loader() -> type[Any]:
    """PyYAML's safe loader, refusing duplicate keys and alias bombs ("billion laughs") before they
    are built: a document whose aliases would add more than MAX_ALIAS_NODES nodes, or that holds
    itself, fails while it is still a small graph of shared nodes. Made on the first YAML file
    read, so a daemon without one never loads yaml."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def get_single_data(self) -> Any:
            node = self.get_single_node()
            if node is None:
                return None
            sizes: dict[int, int] = {}
            expanded = _expanded_nodes(node, sizes, set())
            if expanded - len(sizes) > MAX_ALIAS_NODES:
                raise yaml.constructor.ConstructorError(None, None, f"its aliases expand {len(sizes)} nodes into {expanded} (at most {MAX_ALIAS_NODES} more are allowed): refused as an alias bomb", node.start_mark)
            return self.construct_document(node)

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            first: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # merged keys may be overridden, that is their use
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.get(key)
                except TypeError:  # unhashable: the base class says so
                    continue
                if seen is not None:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {shown(key)} (first at line {seen.line + 1}); a YAML mapping takes each key once", key_node.start_mark)
                first[key] = key_node.start_mark
            return super().construct_mapping(node, deep)

    return StrictLoader


def _expanded_nodes(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many nodes ``node`` becomes with every alias copied out; ``sizes`` memoizes by node."""
    import yaml

    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise yaml.constructor.ConstructorError(None, None, "an alias refers to a node that contains it (a recursive structure)", node.start_mark)
    open_nodes.add(key)
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    else:
        children = []
    size = 1 + sum(_expanded_nodes(child, sizes, open_nodes) for child in children)
    open_nodes.discard(key)
    sizes[key] = size
    return size


def read_yaml(path: str | Path, what: str, error: type[Exception], max_bytes: int | None = None) -> Any:
    """Read and decode a YAML file; every problem is raised as ``error`` naming ``what`` and the file.

    Duplicate keys, alias bombs and recursive aliases are refused (``_strict_loader``)."""
    where = f"{what} {path}"
    try:
        raw = Path(path).read_bytes() if max_bytes is None else Path(path).read_bytes()[: max_bytes + 1]
    except OSError as problem:
        raise error(f"{where}: cannot read it: {problem.strerror or problem}") from None
    if max_bytes is not None and len(raw) > max_bytes:
        raise error(f"{where}: over the {max_bytes} byte limit")
    import yaml

    try:
        return yaml.load(raw.decode("utf-8"), Loader=_strict_loader())  # noqa: S506 (a SafeLoader)
    except UnicodeDecodeError as problem:
        raise error(f"{where}: not UTF-8 text (byte {problem.start})") from None
    except yaml.YAMLError as problem:
        mark = getattr(problem, "problem_mark", None)
        place = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = str(getattr(problem, "problem", None) or problem)
        raise error(f"{where}: not valid YAML{place}: {_cut(reason)}") from None
    except RecursionError:
        raise error(f"{where}: nested too deeply") from None
    except MemoryError:
        raise error(f"{where}: too large to load") from None
    except ValueError as problem:  # from the YAML scanner, e.g. an integer of more than 4300 digits
        raise error(f"{where}: not valid YAML: {_cut(str(problem))}") from None


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def load_config(path: str | Path | None) -> Config:
    """Read and validate a config file; ``None`` gives the defaults. Errors name the file."""
    if path is None:
        return Config()
    data = read_yaml(path, "config file", ConfigError)
    try:
        return parse_config(data)
    except ConfigError as error:
        raise ConfigError(f"config file {path}: {error}") from None


def reference(cls: type = Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, doc) rows for the README's config reference."""
    rows = []
    for spec in dataclasses.fields(cls):
        key = prefix + spec.name
        if "section" in spec.metadata:
            rows.extend(reference(spec.metadata["section"], key + "."))
            continue
        if "section_list" in spec.metadata:
            rows.append((key, "[]", spec.metadata["doc"]))
            rows.extend(reference(spec.metadata["section_list"], key + "[]."))
            continue
        default = spec.default if spec.default_factory is dataclasses.MISSING else spec.default_factory()
        rows.append((key, repr(default), spec.metadata["doc"]))
    return rows
