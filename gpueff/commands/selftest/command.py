"""``gpu-efficiency-exporter selftest``: flags, and the run from workloads (or traces) to table.

Exit codes: 0 every check passed, 1 a check failed, 2 the selftest could not run.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from gpueff import logs
from gpueff.backends.base import BackendUnavailable
from gpueff.commands.flags import Parser, add_common_flags, duration_flag
from gpueff.commands.selftest.checks import Reading, check_readings, exit_code
from gpueff.commands.selftest.expectations import EXPECTATIONS
from gpueff.commands.selftest.table import render
from gpueff.config.engine import ConfigError
from gpueff.sample import DeviceInfo
from gpueff.settings import Config, load_config
from gpueff.trace import Trace, TraceError, load_trace, sample_from_record

log = logging.getLogger("gpueff.commands.selftest")


def selftest_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="gpu-efficiency-exporter selftest",
        description="Run planted workloads on a GPU and check that the exporter's readings and derivations tell the truth about them "
        "(needs PyTorch or CuPy with CUDA). Exit code 0: every check passed; 1: a check failed; 2: the selftest could not run.",
    )
    parser.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU to test (default 0); it should be otherwise idle")
    parser.add_argument("--duration", type=duration_flag(2.0), default=5.0, help="measured run of each workload (default 5s, minimum 2s)")
    parser.add_argument("--warmup", type=duration_flag(0.0), default=1.0, help="unmeasured run of each workload before it (default 1s)")
    parser.add_argument("--interval", type=duration_flag(0.2), default=0.5, help="time between two samples (default 500ms, minimum 200ms)")
    parser.add_argument("--workload", action="append", choices=list(EXPECTATIONS), help="run only this workload (repeatable; default all)")
    parser.add_argument("--engine", choices=("auto", "pytorch", "cupy"), default="auto", help="what runs the workloads (default auto: PyTorch, else CuPy)")
    parser.add_argument("--config", help="the daemon's YAML config, for its thresholds and peak figures")
    parser.add_argument("--replay", nargs="+", metavar="FILE", help="check recorded gpu-trace/1 files (their 'workload' and 'truth') instead of running workloads; needs no GPU")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    add_common_flags(parser)
    return parser


def readings_from_trace(trace: Trace) -> Reading:
    device = trace.device(0)
    samples = [sample_from_record(device, record, record["t"], trace.interval_s) for record in trace.steady_samples]
    return Reading(trace.workload, samples, dict(trace.truth))


def header(device: DeviceInfo, source: str) -> list[str]:
    return [
        f"GPU: {device.name} ({device.sm_count or '?'} SMs), driver {device.driver or '?'}",
        f"Source: {source}",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
    ]


def from_traces(paths: list[str]) -> tuple[list[str], list[Reading]]:
    traces = [load_trace(Path(path)) for path in paths]
    lines = header(traces[0].device(0), "recorded traces " + ", ".join(Path(path).name for path in paths))
    return lines, [readings_from_trace(trace) for trace in traces]


def from_gpu(args: argparse.Namespace, names: list[str]) -> tuple[list[str], list[Reading]]:
    from gpueff.backends.nvml.backend import NvmlBackend
    from gpueff.commands.selftest.runner import Sampler, run_workloads
    from gpueff.commands.selftest.workloads import load_engine

    engine = load_engine(args.gpu, args.engine)
    backend = NvmlBackend(slow_interval=3600.0)
    devices = backend.start()
    try:
        if not 0 <= args.gpu < len(devices):
            raise BackendUnavailable(f"--gpu {args.gpu}: NVML sees GPUs 0..{len(devices) - 1}")
        device = devices[args.gpu]
        sampler = Sampler(backend, args.gpu, args.interval)
        sampler.start()
        try:
            readings = run_workloads(engine, sampler, device, names, args.duration, args.warmup)
        finally:
            sampler.stop()
    finally:
        backend.close()
    return header(device, f"live run, workloads on {engine.name} ({engine.tensor_dtype} matmul), sampled by the NVML backend every {args.interval:g}s"), readings


def main(argv: list[str]) -> int:
    from gpueff.commands.selftest.workloads import SelftestUnavailable

    args = selftest_parser().parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    names = args.workload or list(EXPECTATIONS)
    try:
        config: Config = load_config(args.config)
        lines, readings = from_traces(args.replay) if args.replay else from_gpu(args, names)
        if args.replay and args.workload:
            readings = [reading for reading in readings if reading.workload in names]
    except (ConfigError, TraceError) as error:
        log.error("selftest cannot run: %s", error)
        return 2
    except (SelftestUnavailable, BackendUnavailable) as error:
        log.error("selftest cannot run: %s. Without a GPU, `selftest --replay FILE...` checks recorded traces (such as gpueff/traces/h200/*.json)", error)
        return 2
    results = check_readings(readings, config.derive_settings)
    sys.stdout.write(render(results, lines, markdown=args.markdown))
    return exit_code(results)
