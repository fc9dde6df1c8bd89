"""``report``: whose GPU time went where over a range, from a Prometheus that scraped the
exporters: the owners ranked by the GPU-hours they held idle, starved or busy but not working,
with the money and energy, each owner's dominant class and what to try (docs/report.md).

Exit status: 0 with a report; 1 where Prometheus holds no GPU state series in the range; 2 where
the command line is wrong or Prometheus cannot be asked (the message says where and why)."""

from __future__ import annotations

import argparse
import calendar
import sys
import time
from collections.abc import Callable
from typing import TextIO

from gpueff import logs
from gpueff.commands.flags import Parser, add_common_flags, duration_flag
from gpueff.commands.report.formats import FORMATS, WRITERS, Heading, unit_minutes
from gpueff.commands.report.ledger import account
from gpueff.commands.report.prometheus import Prometheus, PrometheusError
from gpueff.commands.report.queries import ask
from gpueff.config.values import parse_duration

MAX_SINCE = 400 * 86400.0  # a year and some: Prometheus's usual retention is far less


def until_time(text: str) -> float:
    """--until: now, a Unix time, or an RFC 3339 UTC time (2026-12-01T00:00:00Z)."""
    if text == "now":
        return time.time()
    try:
        return float(text) if text.replace(".", "", 1).isdigit() else float(calendar.timegm(time.strptime(text.removesuffix("Z"), "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected now, a Unix time or 2026-12-01T00:00:00Z, got {text!r}") from None


def parser() -> argparse.ArgumentParser:
    result = Parser(
        prog="gpu-efficiency-exporter report",
        description="Whose GPU time went where: the owners (pods, Slurm jobs, users) ranked by the GPU-hours they held idle, starved or busy but not working over a range, "
        "with money (price_per_gpu_hour) and energy, each one's dominant class and what to try; from a Prometheus that scrapes the exporters (docs/report.md).",
        epilog="Exit status: 0 = a report; 1 = Prometheus holds no gpueff_gpu_state_seconds_total in the range; 2 = a usage error, or Prometheus cannot be asked.",
    )
    result.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus's address, e.g. http://prometheus:9090 (a path prefix behind a proxy is kept)")
    result.add_argument("--since", type=duration_flag(60.0, MAX_SINCE), default=parse_duration("7d"), help="how far back the range goes from --until, e.g. 24h or 30d (default 7d)")
    result.add_argument("--until", type=until_time, default="now", help="the range's end: now (default), a Unix time or 2026-12-01T00:00:00Z")
    result.add_argument("--by", choices=("owner", "team"), default="owner", help="owner: each pod, Slurm job and user program (default); team: summed by namespace or user")
    result.add_argument("--format", choices=FORMATS, default="text", help="text (default), markdown, csv or json")
    result.add_argument("--top", type=int, default=20, help="owners listed before the rest are summed in one line (text and markdown; default 20)")
    result.add_argument("--timeout", type=duration_flag(0.5, 600.0), default=30.0, help="how long each of the ten queries may take (default 30s)")
    add_common_flags(result)
    return result


def report(args: argparse.Namespace, out: TextIO, make: Callable[[str, float], Prometheus] = Prometheus) -> int:
    prometheus = make(args.prometheus, args.timeout)
    until = args.until if isinstance(args.until, float) else until_time(args.until)
    ledger = account(ask(prometheus, args.since, until), args.by)
    if not ledger.gpus:
        sys.stderr.write(f"gpu-efficiency-exporter report: {prometheus.url} holds no gpueff_gpu_state_seconds_total in the {args.since / 3600:g} h before {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(until))}: "
                         "does it scrape exporters of this version, and for that long?\n")
        return 1
    heading = Heading(prometheus.url, until - args.since, until, args.by, max(1, args.top), tuple(prometheus.warnings), unit_minutes(ledger))
    out.write(WRITERS[args.format](ledger, heading))
    return 0


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    if not 1 <= args.top <= 10_000:
        parser().error(f"--top: expected 1 to 10000, got {args.top}")
    try:
        return report(args, sys.stdout)
    except PrometheusError as error:
        sys.stderr.write(f"gpu-efficiency-exporter report: {error}\n")
        return 2
