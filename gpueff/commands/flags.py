"""Flags shared by the daemon, ``record``, ``check`` and ``selftest``, and the parser that prints
usage errors in one line. Its own module, so ``cli`` imports the subcommands and none of them
imports ``cli`` back."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from gpueff import logs
from gpueff.backends.dcgm.settings import DcgmConfig
from gpueff.collectors import COLLECTORS, OFF_BY_DEFAULT, CollectorsConfig
from gpueff.config.values import MAX_DURATION, min_duration
from gpueff.otlp import PROTOCOLS


class Parser(argparse.ArgumentParser):
    """Usage errors in one line that points to --help, not a screenful of usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def duration_flag(minimum: float, maximum: float = MAX_DURATION) -> Callable[[str], float]:
    """A duration flag bounded to [minimum, maximum] (at most 1h unless said otherwise)."""
    bounded = min_duration(minimum, maximum)

    def parse(text: str) -> float:
        try:
            return bounded(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """node_exporter's --log.level and --log.format."""
    parser.add_argument("--log.level", dest="log_level", choices=list(logs.LEVELS), default="info", help="only log lines at this level or above: debug, info, warn, error (default info)")
    parser.add_argument("--log.format", dest="log_format", choices=logs.FORMATS, default="logfmt", help="log lines as logfmt or json, one event per line on stderr (default logfmt)")


def add_dcgm_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dcgm.bindings-path", dest="dcgm_bindings_path", metavar="DIR", help="folder holding DCGM's Python bindings (default: DCGM 4's /usr/share/datacenter-gpu-manager-4/bindings/python3, then DCGM 3's /usr/local/dcgm/bindings/python3)")
    parser.add_argument("--dcgm.host", dest="dcgm_host", metavar="HOST:PORT", help="connect to this nv-hostengine (localhost:5555, or unix:/tmp/nv-hostengine for its unix socket). Default: the one the environment names (DCGM_REMOTE_HOSTENGINE_INFO, the GPU Operator's nvidia-dcgm Service), localhost:5555 or /tmp/nv-hostengine where one answers, else an embedded DCGM host engine")
    parser.add_argument("--dcgm.multi-pass", dest="dcgm_multi_pass", action="store_true", help="before Hopper, watch every profiling field DCGM supports even where that needs several passes; a field whose pass did not run then reads 0 (default: one pass): see docs/dcgm.md")
    parser.add_argument("--dcgm.pause-file", dest="dcgm_pause_file", metavar="FILE", help="embedded host engine only: while FILE exists, DCGM profiling is paused (for Nsight) and profiling metrics are missing: see docs/dcgm.md")
    parser.add_argument("--dcgm.no-discover", dest="dcgm_no_discover", action="store_true", help="without --dcgm.host, start an embedded DCGM host engine at once instead of first looking for a running nv-hostengine: see docs/dcgm.md")


def otlp_endpoint(text: str) -> str:
    """--otlp.endpoint: an http(s) URL without credentials (headers go in OTEL_EXPORTER_OTLP_HEADERS)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text[:200]!r} is not a URL: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL of the OTLP receiver, got {text[:200]!r}")
    if parts.username is not None or parts.password is not None:
        raise argparse.ArgumentTypeError("credentials in the URL are not accepted (they would be logged): give them as headers in OTEL_EXPORTER_OTLP_HEADERS")
    if any(ord(character) < 0x21 or ord(character) == 0x7F for character in text):
        raise argparse.ArgumentTypeError("the URL contains white space or a control character")
    return text


def add_otlp_flags(parser: argparse.ArgumentParser) -> None:
    """Pushing the series over OTLP as well (the otlp extra): docs/otlp.md."""
    parser.add_argument("--otlp.endpoint", dest="otlp_endpoint", type=otlp_endpoint, metavar="URL", help="also push every series to this OTLP receiver (grpc: http://collector:4317; http/protobuf: http://collector:4318/v1/metrics); needs the otlp extra: see docs/otlp.md")
    parser.add_argument("--otlp.protocol", dest="otlp_protocol", choices=PROTOCOLS, default="grpc", help="OTLP over grpc (default) or http/protobuf")
    parser.add_argument("--otlp.interval", dest="otlp_interval", type=duration_flag(1.0), default=60.0, help="time between two pushes (default 60s, 1s to 1h)")
    parser.add_argument("--otlp.timeout", dest="otlp_timeout", type=duration_flag(0.1, 60.0), default=10.0, help="how long one push may take (default 10s, at most 60s)")


def add_collector_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--collector.disable-defaults", dest="collector_disable_defaults", action="store_true",
                        help="start from no collector: only those named with --collector.NAME are exported (node_exporter's flag)")
    for name, collector in COLLECTORS.items():
        default = f"off by default; --collector.{name} turns them on, over the config file's collectors.enabled" if name in OFF_BY_DEFAULT else f"on by default; --no-collector.{name} drops them, over the config file's collectors.disabled"
        parser.add_argument(f"--collector.{name}", dest=f"collector_{name}", action=argparse.BooleanOptionalAction, default=None, help=f"export {collector.help} ({default})")


def collectors_settings(args: argparse.Namespace, base: CollectorsConfig) -> CollectorsConfig:
    """``base`` (the config file's ``collectors:`` section) with the ``--collector.*`` flags and
    ``--web.disable-exporter-metrics`` applied over it; with ``--collector.disable-defaults`` only the
    collectors named by ``--collector.NAME`` stay."""
    disabled = set(COLLECTORS) if getattr(args, "collector_disable_defaults", False) else set(base.disabled)
    enabled = set(base.enabled)
    for name in COLLECTORS:
        wanted = getattr(args, f"collector_{name}", None)
        if wanted is not None:
            (disabled.discard if wanted else disabled.add)(name)
            if name in OFF_BY_DEFAULT:
                (enabled.add if wanted else enabled.discard)(name)
    enabled -= disabled
    exporter_metrics = base.exporter_metrics and not getattr(args, "disable_exporter_metrics", False)
    return CollectorsConfig(disabled=tuple(sorted(disabled)), enabled=tuple(sorted(enabled)), exporter_metrics=exporter_metrics)


def dcgm_settings(args: argparse.Namespace, base: DcgmConfig) -> DcgmConfig:
    """``base`` (the config file's ``dcgm:`` section) with the ``--dcgm.*`` flags given applied over it."""
    return DcgmConfig(
        bindings_path=args.dcgm_bindings_path or base.bindings_path,
        host=args.dcgm_host or base.host,
        multi_pass=args.dcgm_multi_pass or base.multi_pass,
        pause_file=args.dcgm_pause_file or base.pause_file,
        discover=base.discover and not args.dcgm_no_discover,
    )
