"""``check``: which backends load on this machine and, per GPU, which readings each one gives and
which path finds its owner (with ``--config``, as the daemon's configuration has it).

Exit status: 0 when the backend ``--backend auto`` would pick reads profiling metrics (SM activity)
on every GPU, 1 when GPUs are read but without profiling metrics on some or all of them, 2 when no
live backend works. Bounded in time: DCGM's connect and profiling probe, then two NVML polls.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from gpueff import logs
from gpueff.backends.base import BackendUnavailable
from gpueff.backends.dcgm.backend import DcgmBackend, FieldReading
from gpueff.backends.dcgm.fields import FIELDS, PROFILING, STATIC
from gpueff.backends.dcgm.profiling import GpuProfiling
from gpueff.backends.nvml.backend import GPM_MIN_SAMPLE_GAP, NvmlBackend
from gpueff.commands.flags import Parser, add_common_flags, add_dcgm_flags, dcgm_settings
from gpueff.commands.whose import attribution_lines
from gpueff.config.engine import ConfigError
from gpueff.metrics import PROFILING_FIELDS
from gpueff.sample import GpuSample, Health
from gpueff.settings import Config, load_config

DEFAULT_CONFIG = Config()
PROBE_TIMEOUT = 6.0  # seconds to wait for DCGM's first profiling values
CHECK_INTERVAL = 0.5  # DCGM watch interval during the check
SKIPPED = {"device", "timestamp", "up", "window_seconds", "profiling", "processes", "health"}
ROWS = [f.name for f in dataclasses.fields(GpuSample) if f.name not in SKIPPED] + list(PROFILING_FIELDS) + [f"health.{f.name}" for f in dataclasses.fields(Health)]
DCGM_FIELD_OF_ROW = {spec.target.removeprefix("profiling:"): spec for spec in FIELDS if spec.cadence != STATIC}


@dataclass
class BackendResult:
    name: str
    samples: dict[str, GpuSample]  # by GPU UUID
    summary: str  # one line: works (how) or why not
    works: bool
    profiling: bool  # SM activity read on every GPU
    readings: dict[str, dict[int, FieldReading]] = dataclasses.field(default_factory=dict)
    field_names: dict[int, str] = dataclasses.field(default_factory=dict)
    profiling_refused: str | None = None
    profiling_support: dict[str, GpuProfiling] = dataclasses.field(default_factory=dict)  # by GPU UUID


def parser() -> argparse.ArgumentParser:
    result = Parser(
        prog="gpu-efficiency-exporter check",
        description="Tell which backends (DCGM, NVML) work on this machine and which readings each gives per GPU. Takes well under a minute.",
        epilog="Exit status: 0 = the backend auto picks reads profiling metrics (SM activity) on every GPU; 1 = GPUs are read, but without profiling metrics on some or all; 2 = no live backend works (or the --config file is not valid).",
    )
    result.add_argument("--config", help="the daemon's YAML configuration file: its kubernetes:, sharing: and proc_root settings say how each GPU's owner is found (default: none)")
    add_dcgm_flags(result)
    add_common_flags(result)
    return result


def check_dcgm(make: Callable[[], DcgmBackend], sleep: Callable[[float], None] = time.sleep) -> BackendResult:
    backend = make()
    try:
        devices = backend.start()
    except BackendUnavailable as error:
        return BackendResult("dcgm", {}, f"not usable: {error}", False, False)
    try:
        answered = backend.profiling_answers(PROBE_TIMEOUT)
        sleep(CHECK_INTERVAL)
        samples = {sample.device.uuid: sample for sample in backend.collect()}
        readings = backend.readings()
        names = {resolved.field_id: f"{resolved.name} ({resolved.field_id})" for resolved in backend.fields}
        profiling = answered and all(sample.profiling_available for sample in samples.values())
        if backend.profiling_refused:
            how = f"profiling fields refused: {backend.profiling_refused}"
        elif answered:
            how = "profiling fields answer"
        else:
            how = f"no SM activity within {PROBE_TIMEOUT:.0f}s"
        assert backend.bindings is not None  # start() loaded them
        summary = f"works: {backend.mode}, bindings from {backend.bindings.path}, {len(devices)} GPU(s); {how}"
        return BackendResult("dcgm", samples, summary, True, profiling, readings, names, backend.profiling_refused, backend.profiling)
    finally:
        backend.close()


def check_nvml(make: Callable[[], NvmlBackend], sleep: Callable[[float], None] = time.sleep) -> BackendResult:
    backend = make()
    try:
        devices = backend.start()
    except BackendUnavailable as error:
        return BackendResult("nvml", {}, f"not usable: {error}", False, False)
    try:
        backend.collect()  # primes the GPM sample pair
        sleep(GPM_MIN_SAMPLE_GAP * 3)
        samples = {sample.device.uuid: sample for sample in backend.collect()}
        gpm = backend.gpm_gpus
        how = "GPM on every GPU" if len(gpm) == len(devices) else (f"GPM on GPU(s) {gpm} only" if gpm else "no GPM on any GPU (older than Hopper, or driver too old)")
        profiling = bool(samples) and all(sample.profiling_available for sample in samples.values())
        return BackendResult("nvml", samples, f"works: {len(devices)} GPU(s); {how}", True, profiling)
    finally:
        backend.close()


def _value(sample: GpuSample | None, row: str) -> str:
    if sample is None or not sample.up:
        return "-"
    if row.startswith("health."):
        value = getattr(sample.health, row.removeprefix("health."))
    else:
        value = getattr(sample.profiling, row) if row in PROFILING_FIELDS else getattr(sample, row)
    if value is None or value == {}:
        return "-"
    if isinstance(value, dict):
        return ",".join(f"{code}x{count}" for code, count in sorted(value.items()))
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return f"{value:.4g}"
    return f"{len(value)} item(s)" if isinstance(value, (list, tuple)) else str(value)


def _dcgm_field(result: BackendResult, uuid: str, row: str) -> str:
    spec = DCGM_FIELD_OF_ROW.get(row)
    if spec is None:
        return "(no DCGM field)"
    name = result.field_names.get(spec.field_id)
    if name is None:
        return f"{spec.names[0]} ({spec.field_id}): unknown to this DCGM"
    reading = result.readings.get(uuid, {}).get(spec.field_id)
    if reading is None and spec.cadence == PROFILING:
        return f"{name}: {_why_not_watched(result.profiling_support.get(uuid), spec.field_id)}"
    status = "not watched" if reading is None else reading.status
    return name if status == "ok" else f"{name}: {status}"


def _why_not_watched(support: GpuProfiling | None, field_id: int) -> str:
    if support is None or support.not_supported:
        return f"not watched, no profiling on this GPU ({support.not_supported if support else 'unknown'})"
    if field_id in support.refused:
        return f"not watched, refused ({support.refused[field_id]})"
    if field_id not in support.supported:
        return "not supported on this GPU"
    if field_id not in support.chosen:
        return "not watched: not in the single pass (--dcgm.multi-pass watches it)"
    return "not watched"


def _ids(field_ids: frozenset[int]) -> str:
    return ",".join(str(each) for each in sorted(field_ids)) or "none"


def _profiling_line(support: GpuProfiling | None) -> str:
    """Which profiling fields DCGM supports on one GPU and which the exporter watches."""
    if support is None:
        return "  dcgm profiling fields: unknown"
    if support.not_supported:
        return f"  dcgm profiling fields: none ({support.not_supported})"
    line = f"  dcgm profiling fields: supported {_ids(support.supported)}; watched {_ids(support.watched)}"
    skipped = support.supported - support.watched
    return line + (f"; not watched {_ids(skipped)}" if skipped else "")


def report(dcgm: BackendResult, nvml: BackendResult, out: TextIO, config: Config = DEFAULT_CONFIG) -> int:
    # The same order as --backend auto: DCGM with profiling, else NVML, else DCGM without profiling.
    auto = next((each for each, usable in ((dcgm, dcgm.works and dcgm.profiling), (nvml, nvml.works), (dcgm, dcgm.works)) if usable), None)
    out.write("gpu-efficiency-exporter check: which backends and readings work on this machine\n\n")
    out.write(f"  dcgm  {dcgm.summary}\n")
    out.write(f"  nvml  {nvml.summary}\n")
    out.write(f"  auto  would use: {auto.name if auto else 'nothing (no live backend works)'}\n")
    uuids = list(dict.fromkeys([*dcgm.samples, *nvml.samples]))
    for uuid in uuids:
        sample = dcgm.samples.get(uuid) or nvml.samples[uuid]
        device = sample.device
        out.write(f"\nGPU {device.index}  {device.name}  {uuid}  driver {device.driver or '?'}\n")
        if dcgm.works:
            out.write(_profiling_line(dcgm.profiling_support.get(uuid)) + "\n")
        out.write(f"  {'reading':<30} {'nvml':>12} {'dcgm':>12}  dcgm field\n")
        for row in ROWS:
            field_text = _dcgm_field(dcgm, uuid, row) if dcgm.works else ""
            out.write(f"  {row:<30} {_value(nvml.samples.get(uuid), row):>12} {_value(dcgm.samples.get(uuid), row):>12}  {field_text}\n".rstrip() + "\n")
    samples = [nvml.samples.get(uuid) or dcgm.samples[uuid] for uuid in uuids]  # NVML lists the processes
    if samples:
        out.write("\n".join(attribution_lines(samples, config)) + "\n")
    if auto is None:
        out.write("\nNo live backend works: install the NVIDIA driver (NVML) or DCGM, or run the exporter with --demo.\n")
        return 2
    if not auto.profiling:
        out.write(f"\n{auto.name} reads these GPUs, but not SM activity on every one: profiling metrics are missing (see docs/dcgm.md).\n")
        return 1
    out.write(f"\n{auto.name} reads SM activity and the other profiling metrics on every GPU.\n")
    return 0


def run(make_dcgm: Callable[[], DcgmBackend], make_nvml: Callable[[], NvmlBackend], out: TextIO = sys.stdout, sleep: Callable[[float], None] = time.sleep, config: Config = DEFAULT_CONFIG) -> int:
    return report(check_dcgm(make_dcgm, sleep), check_nvml(make_nvml, sleep), out, config)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        sys.stderr.write(f"gpu-efficiency-exporter check: {error}\n")
        return 2
    dcgm = dcgm_settings(args, config.dcgm)
    return run(
        lambda: DcgmBackend(dcgm.bindings_path, dcgm.host, collect_interval=CHECK_INTERVAL, slow_interval=1.0, multi_pass=dcgm.multi_pass, discover=dcgm.discover),
        lambda: NvmlBackend(slow_interval=1.0),
        config=config,
    )
