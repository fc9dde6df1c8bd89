"""The gpu-trace/1 format: recorded readings of one GPU, replayed by the replay backend.

See gpueff/traces/README.md for the format. Loading validates everything and raises
``TraceError`` naming the file, the place and the reason.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpueff.config.values import cut, shown
from gpueff.gpm_metrics import GPM_METRICS, to_sample_unit
from gpueff.metrics import COUNTER, READINGS
from gpueff.sample import DeviceInfo, GpuSample, Health, Profiling
from gpueff.untrusted import read_file

FORMAT = "gpu-trace/1"
MAX_TRACE_BYTES = 64 * 1024 * 1024
# A replay divides by the interval and takes times modulo the loop's length: an interval of 5e-324 s
# overflowed every poll, and at t = 1e308 a window shorter than the float's spacing there made the
# loop 0 s long (ZeroDivisionError). Recordings take a sample every 100 ms or more, for hours at most.
MIN_INTERVAL_S = 0.001
MAX_INTERVAL_S = 3600.0
MAX_TRACE_SECONDS = 1e7  # 115 days: a window of 1 ms is still 500,000 float steps long there

# NVML sample keys, from the catalogue: trace key -> (GpuSample field, scale from the trace's unit).
NVML_KEYS: dict[str, tuple[str, float]] = {reading.trace[0]: (reading.field, reading.trace[1]) for _, reading in READINGS if reading.trace is not None}
GPM_KEYS = {metric.name: metric for metric in GPM_METRICS}
# Window means beside GPM's, averaged over a replayed poll like them: the mean of the driver's own
# utilization samples inside each window (nvmlDeviceGetSamples), percent. Optional: traces recorded
# before it existed replay with the graphics engine's activity as the window's utilization.
WINDOW_KEYS: dict[str, tuple[str, float]] = {"util_gpu_window": ("gpu_utilization_window", 0.01)}
# Keys in percent: 0..100 (GPM can read a hair over 100 %, but the recorder writes clamped ratios).
PERCENT_KEYS = frozenset({"util_gpu", "util_mem", *WINDOW_KEYS} | {metric.name for metric in GPM_METRICS if metric.scale == 0.01})
# The health readings (docs/health.md) a sample may hold under its optional "health" key, by field
# name: every field of the sample's Health, and the ECC and row-remap readings of the sample itself.
# Optional: traces recorded before it existed replay without them. Kinds: float, int, bool, links.
_SAMPLE_HEALTH_FIELDS = ("ecc_corrected_errors", "ecc_uncorrected_errors", "remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending", "remapped_rows_failure")
_SAMPLE_FIELD_TYPES = {item.name: str(item.type) for item in dataclasses.fields(GpuSample)}
_NOT_RECORDED = frozenset({"nvlink_link_errors"})  # per-link counters: live only (NVML), never in a trace
HEALTH_KEYS: dict[str, str] = {
    **{item.name: "links" if str(item.type).startswith("tuple") else str(item.type).split("|")[0].strip() for item in dataclasses.fields(Health) if item.name not in _NOT_RECORDED},
    **{name: _SAMPLE_FIELD_TYPES[name].split("|")[0].strip() for name in _SAMPLE_HEALTH_FIELDS},
}
# The health readings that are counters since driver load: a replay keeps them rising across loops.
HEALTH_COUNTERS = frozenset(reading.field for metric, reading in READINGS if metric.type == COUNTER and reading.field in HEALTH_KEYS)
_HEALTH_MAXIMUM = {"performance_state": 15.0, "encoder_utilization": 1.0, "decoder_utilization": 1.0}
MAX_NVLINK_LINKS = 64  # NVML_NVLINK_MAX_LINKS is 18 on Hopper, 36 on Blackwell
_GPU_REQUIRED = {"name": str, "driver": str, "max_sm_clock_mhz": float, "power_limit_mw": float, "sm_count": int}
_GPU_OPTIONAL = {"uuid": str, "pci_bus_id": str}
_TOP_KEYS = {"format", "gpu", "workload", "job", "description", "truth", "interval_s", "samples", "warmup_samples"}
# Every string a trace holds is bounded: a name becomes a label value on every series of the GPU
# (workload in a UUID-less GPU's uuid, gpu.name in model, the job in gpueff_job_*).
MAX_NAME_CHARS = 128  # workload, job, gpu.name, gpu.driver, gpu.uuid, gpu.pci_bus_id (NVML's are under 96)
MAX_DESCRIPTION_CHARS = 4096
MAX_TRUTH_KEY_CHARS = 64


class TraceError(Exception):
    """A trace file that cannot be used, with the reason phrased for the user."""


@dataclass(frozen=True)
class Trace:
    path: str
    gpu: dict[str, Any]
    workload: str
    description: str
    truth: dict[str, float]
    interval_s: float
    samples: list[dict[str, Any]]
    warmup_samples: int = 0  # the first samples, taken while the workload was still starting
    job: str = ""  # the multi-GPU job this GPU was recorded in: the traces of one job replay as its GPUs

    @property
    def duration(self) -> float:
        """The recording's length: the last sample's time plus one interval."""
        return float(self.samples[-1]["t"]) + self.interval_s

    @functools.cached_property
    def steady_samples(self) -> list[dict[str, Any]]:
        """The samples a replay loops over: all but the warm-up ones (a copy made once: a replay's
        start-up and each poll read it, and a slice per read made start-up grow with the square of
        the samples)."""
        return self.samples[self.warmup_samples :]

    @functools.cached_property
    def loop_start(self) -> float:
        """Where the replayed loop starts in the trace's time: the first steady sample's window start."""
        return max(0.0, float(self.steady_samples[0]["t"]) - self.interval_s)

    @functools.cached_property
    def loop_seconds(self) -> float:
        """One replayed loop: from ``loop_start`` to the last sample's time."""
        return float(self.samples[-1]["t"]) - self.loop_start

    def device(self, index: int) -> DeviceInfo:
        gpu = self.gpu
        return DeviceInfo(
            index=index,
            uuid=gpu.get("uuid") or f"GPU-replay-{index}-{self.workload}",
            name=gpu["name"],
            driver=gpu["driver"],
            pci_bus_id=gpu.get("pci_bus_id") or f"replay:{index}",
            sm_count=gpu["sm_count"],
            max_sm_clock_mhz=gpu["max_sm_clock_mhz"],
            power_limit_watts=gpu["power_limit_mw"] / 1000,
            source=self.workload,
            job=self.job,
        )


def sample_from_record(device: DeviceInfo, record: dict[str, Any], timestamp: float, window: float) -> GpuSample:
    """Turn one trace sample (NVML units) into a GpuSample (ratios, bytes, watts; clocks stay in MHz)."""
    sample = GpuSample(device=device, timestamp=timestamp, window_seconds=window)
    for key, (attribute, scale) in NVML_KEYS.items():
        value = record.get(key)
        if value is not None:
            setattr(sample, attribute, int(value) if attribute == "clock_event_reasons" else value * scale)
    for key, (attribute, scale) in WINDOW_KEYS.items():
        value = record.get(key)
        if value is not None:
            setattr(sample, attribute, min(1.0, value * scale))
    profiling = {}
    for name, metric in GPM_KEYS.items():
        value = record.get(name)
        if value is not None:
            profiling[metric.key] = to_sample_unit(metric, value)
    sample.profiling = Profiling(**profiling)
    health = record.get("health")
    if health:
        readings: dict[str, Any] = {key: tuple((int(link), bool(active)) for link, active in value) if HEALTH_KEYS[key] == "links" else value for key, value in health.items()}
        sample.health = Health(**{key: value for key, value in readings.items() if key not in _SAMPLE_HEALTH_FIELDS})
        for key in _SAMPLE_HEALTH_FIELDS:
            if key in readings:
                setattr(sample, key, readings[key])
    return sample


def health_record(sample: GpuSample) -> dict[str, Any]:
    """A sample's health readings as a trace sample's "health" object (only those that exist)."""
    readings: dict[str, Any] = {**sample.health.readings(), **{key: value for key in _SAMPLE_HEALTH_FIELDS if (value := getattr(sample, key)) is not None}}
    out: dict[str, Any] = {}
    for key in _NOT_RECORDED:
        readings.pop(key, None)
    for key, value in readings.items():
        kind = HEALTH_KEYS[key]
        if kind == "links":
            out[key] = [[link, active] for link, active in value]
        elif kind == "float":
            out[key] = round(float(value), 6)
        else:
            out[key] = value
    return out


def record_from_sample(sample: GpuSample, t: float) -> dict[str, Any]:
    """The inverse of ``sample_from_record``: a GpuSample as one trace sample."""
    record: dict[str, Any] = {"t": round(t, 3)}
    for key, (attribute, scale) in NVML_KEYS.items():
        value = getattr(sample, attribute)
        record[key] = None if value is None else (value if scale == 1 else round(value / scale, 6))
    for name, metric in GPM_KEYS.items():
        value = getattr(sample.profiling, metric.key)
        record[name] = None if value is None else value / metric.scale
    for key, (attribute, scale) in WINDOW_KEYS.items():
        value = getattr(sample, attribute)
        if value is not None:  # left out where the driver does not answer, as traces before it
            record[key] = round(value / scale, 4)
    health = health_record(sample)
    if health:  # left out where the backend reads none (a MIG device, replayed traces without them)
        record["health"] = health
    return record


def _check_number(value: Any, where: str, *, integer: bool = False, allow_null: bool = False, maximum: float = sys.float_info.max, kind: str = "") -> None:
    if value is None and allow_null:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= maximum  # no NaN, inf, or int too big for a float
    if ok and integer:
        ok = float(value).is_integer()
    if not ok:
        if not kind and maximum < sys.float_info.max:
            kind = f"a percentage from 0 to {maximum:g}"
        elif not kind:
            kind = "a non-negative integer" if integer else "a non-negative number"
        raise TraceError(f"{where}: expected {kind}{' or null' if allow_null else ''}, got {shown(value)}")


def _check_health(health: Any, where: str) -> None:
    """A sample's "health" object: known readings of the right kind (HEALTH_KEYS)."""
    if not isinstance(health, dict):
        raise TraceError(f"{where}: expected an object of health readings, got {type(health).__name__}")
    for key, value in health.items():
        kind = HEALTH_KEYS.get(key)
        if kind is None:
            raise TraceError(f"{where}: unknown key {shown(key)} (known: {', '.join(sorted(HEALTH_KEYS))})")
        if kind == "bool":
            if not isinstance(value, bool):
                raise TraceError(f"{where}.{key}: expected true or false, got {shown(value)}")
        elif kind == "links":
            _check_links(value, f"{where}.{key}")
        elif key in _HEALTH_MAXIMUM:
            maximum = _HEALTH_MAXIMUM[key]
            _check_number(value, f"{where}.{key}", integer=kind == "int", maximum=maximum, kind=f"{'a whole number' if kind == 'int' else 'a number'} from 0 to {maximum:g}")
        else:
            _check_number(value, f"{where}.{key}", integer=kind == "int")


def _check_links(value: Any, where: str) -> None:
    """NVLink states: a list of [link, active] pairs, each link once."""
    if not isinstance(value, list) or len(value) > MAX_NVLINK_LINKS:
        raise TraceError(f"{where}: expected a list of at most {MAX_NVLINK_LINKS} [link, active] pairs, got {shown(value)}")
    seen = set()
    for number, pair in enumerate(value):
        if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], bool):
            raise TraceError(f"{where}[{number}]: expected [link, active] (a link number and true or false), got {shown(pair)}")
        _check_number(pair[0], f"{where}[{number}][0]", integer=True, maximum=MAX_NVLINK_LINKS - 1, kind=f"a link number from 0 to {MAX_NVLINK_LINKS - 1}")
        if pair[0] in seen:
            raise TraceError(f"{where}[{number}]: link {pair[0]} is listed twice")
        seen.add(pair[0])


def _check_counters_rise(samples: list[dict[str, Any]], path: str) -> None:
    """A health counter counts since driver load: one that falls inside a recording (a driver
    reload while recording) would replay as a reset at every loop."""
    last: dict[str, float] = {}
    for number, record in enumerate(samples):
        for key, value in (record.get("health") or {}).items():
            if key in HEALTH_COUNTERS:
                if value < last.get(key, -math.inf):
                    raise TraceError(f"trace {path}: samples[{number}].health.{key}: a counter since driver load cannot fall, got {value!r} after {last[key]!r} (was the driver reloaded while recording?)")
                last[key] = value


def _check_text(value: str, where: str, limit: int = MAX_NAME_CHARS) -> None:
    """At most ``limit`` characters, and text: JSON's ``\\ud800`` decodes to a lone UTF-16 surrogate,
    which no page or log line can encode: refused here, at start, rather than failing every poll of the replay."""
    if len(value) > limit:
        raise TraceError(f"{where}: at most {limit} characters, got {len(value)} ({shown(value)})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise TraceError(f"{where}: contains a lone UTF-16 surrogate ({value[error.start]!r} at character {error.start}), which is not text") from None


def parse_trace(data: Any, path: str) -> Trace:
    """Validate a decoded trace; every error names ``path`` and the offending key."""
    if not isinstance(data, dict):
        raise TraceError(f"trace {path}: expected a JSON object at the top level, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise TraceError(f"trace {path}: 'format' must be {FORMAT!r}, got {shown(data.get('format'))}")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise TraceError(f"trace {path}: unknown top-level key(s) {shown(sorted(map(str, unknown)))} (known: {sorted(_TOP_KEYS)})")
    for key in ("gpu", "workload", "interval_s", "samples"):
        if key not in data:
            raise TraceError(f"trace {path}: missing key '{key}'")
    gpu = data["gpu"]
    if not isinstance(gpu, dict):
        raise TraceError(f"trace {path}: 'gpu' must be an object")
    for key, kind in _GPU_REQUIRED.items():
        if key not in gpu:
            raise TraceError(f"trace {path}: missing key 'gpu.{key}'")
        if kind is str:
            if not isinstance(gpu[key], str) or not gpu[key]:
                raise TraceError(f"trace {path}: 'gpu.{key}' must be a non-empty string, got {shown(gpu[key])}")
        else:
            _check_number(gpu[key], f"trace {path}: 'gpu.{key}'", integer=kind is int)
            if gpu[key] == 0:
                raise TraceError(f"trace {path}: 'gpu.{key}' must be above 0")
    for key in set(gpu) - set(_GPU_REQUIRED):
        if key not in _GPU_OPTIONAL or not isinstance(gpu[key], str):
            raise TraceError(f"trace {path}: 'gpu.{cut(str(key))}' is not a known key (known: {sorted({**_GPU_REQUIRED, **_GPU_OPTIONAL})}) or not a string")
    if not isinstance(data["workload"], str) or not data["workload"]:
        raise TraceError(f"trace {path}: 'workload' must be a non-empty string")
    job = data.get("job", "")
    if not isinstance(job, str) or len(job) > MAX_NAME_CHARS or not job.isprintable():
        raise TraceError(f"trace {path}: 'job' must be a printable string of at most {MAX_NAME_CHARS} characters, got {shown(job)}")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise TraceError(f"trace {path}: 'description' must be a string")
    for key, value in gpu.items():
        if isinstance(value, str):
            _check_text(value, f"trace {path}: 'gpu.{key}'")
    _check_text(data["workload"], f"trace {path}: 'workload'")
    _check_text(description, f"trace {path}: 'description'", MAX_DESCRIPTION_CHARS)
    truth = data.get("truth", {})
    if not isinstance(truth, dict):
        raise TraceError(f"trace {path}: 'truth' must be an object")
    for key, value in truth.items():
        _check_text(key, f"trace {path}: a key of 'truth'", MAX_TRUTH_KEY_CHARS)
        _check_number(value, f"trace {path}: 'truth.{key}'")
    interval = data["interval_s"]
    _check_number(interval, f"trace {path}: 'interval_s'")
    if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:
        raise TraceError(f"trace {path}: 'interval_s' must be from {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g} seconds, got {shown(interval)}")
    samples = data["samples"]
    if not isinstance(samples, list) or not samples:
        raise TraceError(f"trace {path}: 'samples' must be a non-empty list")
    previous_t = -1.0
    for number, record in enumerate(samples):
        where = f"trace {path}: samples[{number}]"
        if not isinstance(record, dict):
            raise TraceError(f"{where}: expected an object, got {type(record).__name__}")
        if "t" not in record:
            raise TraceError(f"{where}: missing key 't'")
        _check_number(record["t"], f"{where}.t", maximum=MAX_TRACE_SECONDS, kind=f"a time in seconds from 0 to {MAX_TRACE_SECONDS:g}")
        if record["t"] <= previous_t:
            raise TraceError(f"{where}.t: times must increase, got {record['t']!r} after {previous_t!r}")
        previous_t = record["t"]
        for key, value in record.items():
            if key == "t":
                continue
            if key == "health":
                _check_health(value, f"{where}.health")
                continue
            if key not in NVML_KEYS and key not in GPM_KEYS and key not in WINDOW_KEYS:
                raise TraceError(f"{where}: unknown key {shown(key)}")
            _check_number(value, f"{where}.{key}", integer=key == "throttle", allow_null=True, maximum=100.0 if key in PERCENT_KEYS else sys.float_info.max)
    _check_counters_rise(samples, path)
    warmup = data.get("warmup_samples", 0)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup < len(samples):
        raise TraceError(f"trace {path}: 'warmup_samples' must be a whole number from 0 to {len(samples) - 1} (fewer than the samples), got {shown(warmup)}")
    return Trace(path, gpu, data["workload"], description, truth, float(interval), samples, warmup, job)


def load_trace(path: str | Path) -> Trace:
    path = Path(path)
    try:
        text = read_file(path, MAX_TRACE_BYTES).decode("utf-8")
    except OSError as error:
        raise TraceError(f"trace {path}: cannot read it: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise TraceError(f"trace {path}: not UTF-8 text") from None
    except ValueError as error:  # not a regular file, or too large
        raise TraceError(f"trace {path}: {error}") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, or an integer of more than 4300 digits
        raise TraceError(f"trace {path}: not valid JSON: {error}") from None
    return parse_trace(data, str(path))


SHIPPED = Path(__file__).with_name("traces")  # package data, read as plain files: importlib.resources would import tempfile, bz2 and lzma (1.5 MB)


def _shipped(folder: str) -> list[Path]:
    return sorted(entry for entry in (SHIPPED / folder).iterdir() if entry.name.endswith(".json"))


def planted_trace_paths() -> list[Path]:
    """The six planted-workload H200 traces shipped with the package, in a stable order."""
    return _shipped("h200")


def demo_trace_paths() -> list[Path]:
    """The demo's traces: the planted H200 ones first (GPUs 0-5), then the H100 real-workload corpus,
    then one multi-GPU job with a straggler (2 x H200: GPU 18 waits in its all-reduces for GPU 19)."""
    return planted_trace_paths() + _shipped("h100") + [path for path in _shipped("h200-jobs") if path.name.startswith("2gpu_straggler_")]
