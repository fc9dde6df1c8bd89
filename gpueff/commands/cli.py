"""Command line: the daemon (default), and the ``record``, ``check``, ``top``, ``report`` and ``selftest`` subcommands."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from gpueff import __version__, logs
from gpueff.commands.environment import arguments_from_environment
from gpueff.commands.flags import (
    Parser,
    add_collector_flags,
    add_common_flags,
    add_dcgm_flags,
    add_otlp_flags,
    duration_flag,
)
from gpueff.config.values import MIN_COLLECT_INTERVAL, parse_duration
from gpueff.untrusted import whole_number

DEFAULT_LISTEN_ADDRESS = ":9947"
REVISION_VARIABLE = "GPU_EFFICIENCY_EXPORTER_REVISION"  # the container image's build sets it
USAGE = "%(prog)s [flags]\n       %(prog)s {record,check,top,report,selftest} [flags]  (each with its own --help)"


def revision() -> str:
    """The source revision: the image's (set at its build), else git's where the package runs from
    a checkout, else unknown."""
    if os.environ.get(REVISION_VARIABLE, "").strip():
        return os.environ[REVISION_VARIABLE].strip()[:64]
    try:
        found = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    text = found.stdout.strip()
    return text if found.returncode == 0 and text.isalnum() else "unknown"


def version_text() -> str:
    """node_exporter's --version: the version and revision, then the runtime."""
    import platform  # only --version needs it (0.1 MB)

    return (f"gpu-efficiency-exporter, version {__version__} (revision: {revision()})\n"
            f"  python: {platform.python_implementation()} {platform.python_version()}\n"
            f"  platform: {sys.platform}/{platform.machine()}")


class VersionAction(argparse.Action):
    """--version, worked out only when asked for (git is not run at every start)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object, option_string: str | None = None) -> None:
        sys.stdout.write(version_text() + "\n")
        parser.exit(0)


def daemon_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="gpu-efficiency-exporter",
        usage=USAGE,
        epilog="Every flag can also be set in the environment: --web.listen-address as GPUEFF_WEB_LISTEN_ADDRESS, "
        "--no-web.ui as GPUEFF_WEB_UI=false (true/false, 1/0), repeated flags comma-separated. "
        "The command line wins over the environment, the environment over the config file.",
        description="Prometheus exporter that tells how much real work each NVIDIA GPU does. "
        "Subcommands: 'record' writes gpu-trace/1 files from real GPUs (see 'record --help'); "
        "'check' tells which backends and fields work on this machine (see 'check --help'); "
        "'report' ranks the owners of GPU time over a range by what they wasted, from Prometheus (see 'report --help'); "
        "'selftest' runs planted workloads on a GPU and checks the readings against them (see 'selftest --help'); "
        "'top' shows each GPU's real work in a live table, from the local GPUs or a running exporter (see 'top --help').",
    )
    parser.add_argument("--version", action=VersionAction, help="print the version, revision and runtime, and exit")
    parser.add_argument("--web.listen-address", dest="listen_address", action="append", metavar="ADDRESS", help=f"address to serve on; repeat it to serve on several (default {DEFAULT_LISTEN_ADDRESS})")
    parser.add_argument("--web.systemd-socket", dest="systemd_socket", action="store_true", help="serve on the sockets systemd passes (socket activation: LISTEN_FDS) instead of --web.listen-address")
    parser.add_argument("--web.disable-exporter-metrics", dest="disable_exporter_metrics", action="store_true", help="leave out the daemon's own process_* series (CPU, memory, file descriptors)")
    parser.add_argument("--web.telemetry-path", dest="telemetry_path", default="/metrics", help="path of the metrics (default /metrics)")
    parser.add_argument("--web.config.file", dest="web_config_file", help="exporter-toolkit web config (TLS, basic auth, headers; reloaded on SIGHUP): see docs/security.md")
    parser.add_argument("--web.ui", dest="web_ui", action=argparse.BooleanOptionalAction, default=True, help="serve the live page on / (charts of utilization against SM activity per GPU, from a 10-minute in-memory history); --no-web.ui leaves a bare exporter with a page of links")
    parser.add_argument("--config", help="YAML configuration file (reloaded on SIGHUP)")
    parser.add_argument("--collect-interval", type=duration_flag(MIN_COLLECT_INTERVAL), help="how often to sample the GPUs, e.g. 500ms or 1s (default 1s, 100ms to 1h; overrides the config file)")
    parser.add_argument("--wait-for-driver", dest="wait_for_driver", action="store_true", help="if no NVIDIA driver answers at start, serve anyway (no GPU) and retry with backoff instead of exiting: see docs/security.md")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--replay", nargs="+", metavar="FILE", help="replay gpu-trace/1 files instead of reading GPUs (one file = one virtual GPU)")
    source.add_argument("--demo", action="store_true", help="replay the traces recorded on real H200 and H100 GPUs that ship with the package (no GPU needed)")
    parser.add_argument("--backend", choices=("auto", "nvml", "dcgm", "replay"), default="auto", help="where readings come from (default auto: DCGM where it answers with profiling fields, else NVML with GPM where the GPU has it; --replay and --demo imply replay): see docs/dcgm.md")
    add_dcgm_flags(parser)
    add_collector_flags(parser)
    add_otlp_flags(parser)
    add_common_flags(parser)
    return parser


def gpu_choice(text: str) -> str:
    """--gpu: a GPU index or ``all``."""
    if text != "all" and whole_number(text, 4) is None:
        raise argparse.ArgumentTypeError(f"expected a GPU index or all, got {text!r}")
    return text


def record_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="gpu-efficiency-exporter record", description="Record a GPU's readings into a gpu-trace/1 file that --replay plays back.")
    parser.add_argument("--output", "-o", required=True, help="trace file to write; with --gpu all, one per GPU, named by {gpu} in it (job_gpu{gpu}.json)")
    parser.add_argument("--gpu", type=gpu_choice, default="0", help="GPU index (default 0), or all: every GPU from the same polls (a multi-GPU job)")
    parser.add_argument("--job", default="", help="the multi-GPU job the recorded GPUs run: their traces replay as one job's GPUs, judged together")
    parser.add_argument("--duration", type=duration_flag(0.2, 24 * 3600.0), default=parse_duration("10s"), help="how long to record (default 10s, at most 24h)")
    parser.add_argument("--interval", type=duration_flag(0.1), default=0.5, help="time between samples (default 500ms, minimum 100ms)")
    parser.add_argument("--workload", default="unnamed", help="name of what runs on the GPU")
    parser.add_argument("--description", default="", help="free text about the workload")
    parser.add_argument("--truth-tflops", type=float, help="the workload's own measured bf16 TFLOP/s, if known")
    parser.add_argument("--truth-tbps", type=float, help="the workload's own measured bytes read+written per second in TB/s, if known")
    add_common_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "record":
        args = record_parser().parse_args(argv[1:])
        logs.setup(args.log_level, args.log_format)
        from gpueff.commands.record import record

        return record(args)
    if argv and argv[0] == "check":
        from gpueff.commands.check import main as check

        return check(argv[1:])
    if argv and argv[0] == "top":
        from gpueff.commands.top.command import main as top

        return top(argv[1:])
    if argv and argv[0] == "report":
        from gpueff.commands.report.command import main as report

        return report(argv[1:])
    if argv and argv[0] == "selftest":
        from gpueff.commands.selftest.command import main as selftest

        return selftest(argv[1:])
    parser = daemon_parser()
    args = parser.parse_args(arguments_from_environment(parser, argv, os.environ) + argv)
    args.listen_address = args.listen_address or [DEFAULT_LISTEN_ADDRESS]
    logs.setup(args.log_level, args.log_format)
    from gpueff.commands.daemon import run

    return run(args)
