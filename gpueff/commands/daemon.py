"""The long-running daemon: backend + poller + HTTP server, with SIGHUP reload and SIGTERM stop."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gpueff import __version__
from gpueff.backends.base import Backend, BackendUnavailable
from gpueff.backends.waiting import WaitingBackend
from gpueff.commands.flags import collectors_settings, dcgm_settings
from gpueff.config.engine import ConfigError, restart_only_changes
from gpueff.logs import fields, one_line
from gpueff.otlp import OtlpUnavailable
from gpueff.poller import Poller
from gpueff.selfstats import limit_malloc_arenas, release_freed_memory
from gpueff.settings import Config, load_config
from gpueff.web.history import History
from gpueff.web.live import LiveData
from gpueff.web.page import LivePage
from gpueff.web.payload import Payloads
from gpueff.web.server import ListenAddressError, WebServer, parse_listen_address, systemd_sockets

if TYPE_CHECKING:
    from gpueff.httpserver.tlsconfig import WebConfig
    from gpueff.otlp.push import OtlpPusher

log = logging.getLogger("gpueff")
STOP_TIMEOUT = 2.0  # seconds each for the poller and the backend to stop before the daemon exits anyway


class StartupError(Exception):
    """The daemon cannot start; the message is the one line the user sees."""


def effective_config(args: argparse.Namespace) -> Config:
    """The config file with command-line overrides applied."""
    config = load_config(args.config)
    if args.collect_interval is not None:
        config = dataclasses.replace(config, collect_interval=args.collect_interval)
    return dataclasses.replace(config, dcgm=dcgm_settings(args, config.dcgm), collectors=collectors_settings(args, config.collectors))


def choose_backend(args: argparse.Namespace, config: Config) -> Backend:
    kind = getattr(args, "backend", "auto")
    if (args.demo or args.replay) and kind not in ("auto", "replay"):
        raise StartupError(f"--backend {kind} cannot be combined with --demo or --replay (they replay recorded traces)")
    if kind == "replay" and not (args.demo or args.replay):
        raise StartupError("--backend replay needs trace files: add --replay FILE... or --demo")
    if kind in ("auto", "dcgm") and not (args.demo or args.replay):
        from gpueff.backends.auto import live_backend

        return live_backend(kind, config.dcgm, config.collect_interval, config.slow_collect_interval)
    if args.demo or args.replay:
        from gpueff.backends.replay import ReplayBackend
        from gpueff.trace import TraceError, demo_trace_paths, load_trace  # with json: only for --demo and --replay
        from gpueff.trace_owners import OwnersError, demo_owners

        paths = demo_trace_paths() if args.demo else [Path(path) for path in args.replay]
        try:
            traces = [load_trace(path) for path in paths]
            owners = demo_owners(paths) if args.demo else None  # the demo's made-up owners (gpueff/traces/demo-owners.json)
        except (TraceError, OwnersError) as error:
            raise StartupError(str(error)) from None
        return ReplayBackend(traces, owners=owners)
    from gpueff.backends.nvml.backend import NvmlBackend

    return NvmlBackend(slow_interval=config.slow_collect_interval)


def run(args: argparse.Namespace) -> int:
    limit_malloc_arenas()
    try:
        for address in args.listen_address:
            parse_listen_address(address)
        sockets = systemd_sockets(os.environ, os.getpid()) if getattr(args, "systemd_socket", False) else []
        config = effective_config(args)
        web_config = load_web_config_flag(args)
        if getattr(args, "wait_for_driver", False) and not (args.demo or args.replay):
            backend: Backend = WaitingBackend(lambda: choose_backend(args, config))
        else:
            backend = choose_backend(args, config)
        devices = backend.start()
        release_freed_memory()
    except BackendUnavailable as error:
        log.error("%s%s", error, "" if args.demo or args.replay else "; run with --demo to replay recorded traces instead")
        return 2
    except (ListenAddressError, ConfigError, StartupError) as error:
        log.error("%s", error)
        return 2
    traces = ""  # the live page lists them apart from its banner
    if backend.replayed:
        traces = names = ", ".join(f"gpu {device.index}={device.source}" for device in devices)
        note = f"REPLAYED DATA: these metrics replay recorded traces ({names}), not live GPUs."
        level, announcement = logging.WARNING, f"serving replayed traces, not live GPUs: {names}"
    elif isinstance(backend, WaitingBackend) and backend.waiting:
        note = "No GPU yet: waiting for the NVIDIA driver (--wait-for-driver); the GPUs appear in the metrics once it answers."
        level, announcement = logging.WARNING, "serving without GPUs until the NVIDIA driver answers"
    else:
        note = f"Live data from {len(devices)} GPU(s) through the {backend.name} backend."
        level, announcement = logging.INFO, f"reading {len(devices)} GPU(s) through the {backend.name} backend"
    poller = Poller(backend, config)
    payloads = Payloads()
    poller.subscribe(payloads.publish)
    try:
        pusher = otlp_pusher(args)
    except OtlpUnavailable as error:
        log.error("%s", error)
        backend.close()
        return 2
    if pusher is not None:
        poller.subscribe(pusher.take)
    page = live_page(poller, note, args.telemetry_path, traces) if getattr(args, "web_ui", True) else None
    try:
        server = WebServer(args.listen_address, payloads.payload, poller.is_ready, note, args.telemetry_path, web_config, page=page, sockets=sockets)
    except (ListenAddressError, OSError) as error:
        where = "the systemd sockets" if sockets else ", ".join(args.listen_address)
        log.error("cannot listen on %s: %s", where, error, extra=fields(address=where))
        backend.close()
        return 2
    log.log(level, "%s", announcement)  # only once the port is bound: a failed start says one line
    arriving = signals()  # before anything is served: a SIGTERM right after /-/ready must not kill by default action
    poller.start(devices)
    server.start()
    addresses = [f":{port}" for port in server.ports] if sockets else args.listen_address
    url = " ".join(served_url(address, port, args.telemetry_path, web_config) for address, port in zip(addresses, server.ports))
    log.info("gpu-efficiency-exporter %s serving %s, collecting every %ss", __version__, url, config.collect_interval,
             extra=fields(version=__version__, backend=backend.name, gpus=len(devices), url=url, interval=f"{config.collect_interval:g}s"))

    for number in arriving:
        if number != signal.SIGHUP:
            log.info("stopping")
            server.close()
            poller.stop(STOP_TIMEOUT)
            if pusher is not None:
                pusher.close(STOP_TIMEOUT)
            # A backend call that hangs (a wedged driver) must not hold the exit: close on the side.
            closer = threading.Thread(target=backend.close, name="backend-close", daemon=True)
            closer.start()
            closer.join(STOP_TIMEOUT)
            return 0
        try:
            web_config = reload(args, poller, server, web_config, config)
        except Exception as error:  # MemoryError, RecursionError, a bug: never the end of the daemon
            log.error("reload failed, keeping the running configuration and web config: %s", one_line(error))
    return 0


def otlp_pusher(args: argparse.Namespace) -> OtlpPusher | None:
    """The OTLP pusher --otlp.endpoint asks for, or None; OtlpUnavailable without the otlp extra."""
    if not getattr(args, "otlp_endpoint", None):
        return None
    from gpueff.otlp.push import OtlpPusher, OtlpSettings

    pusher = OtlpPusher(OtlpSettings(args.otlp_endpoint, args.otlp_protocol, args.otlp_interval, args.otlp_timeout))
    log.info("pushing over OTLP (%s) to %s every %gs", args.otlp_protocol, args.otlp_endpoint, args.otlp_interval, extra=fields(otlp=args.otlp_endpoint))
    return pusher


def served_url(listen_address: str, port: int, telemetry_path: str, web_config: WebConfig | None) -> str:
    """Where the metrics are served, as a URL (all interfaces: 0.0.0.0, as the socket binds)."""
    host, _ = parse_listen_address(listen_address)
    host = f"[{host}]" if ":" in host else host or "0.0.0.0"
    scheme = "https" if web_config is not None and web_config.tls is not None else "http"
    return f"{scheme}://{host}:{port}{telemetry_path}"


def live_page(poller: Poller, note: str, telemetry_path: str, traces: str = "") -> LivePage:
    """The live page on /, its history fed with each snapshot the poller publishes. With ``traces``
    (replayed data: which trace each GPU replays), the page's banner says only that the data is
    replayed, and lists the traces below it."""
    history = History()
    poller.subscribe(history.add)
    live = LiveData(lambda: poller.snapshot, history, note, ready=poller.is_ready)
    poller.subscribe(live.prepare)  # after the history took the snapshot
    banner = "REPLAYED DATA: recorded traces, not live GPUs." if traces else note
    return LivePage(live, banner, telemetry_path, traces)


RELOAD_GAP = 0.25  # seconds: SIGHUPs closer together than this are taken as one reload


def signals(reload_gap: float = RELOAD_GAP, clock: Callable[[], float] = time.monotonic) -> Iterator[int]:
    """SIGTERM and SIGINT as they arrive; SIGHUP at most once per ``reload_gap``, however many came
    meanwhile (a storm of 900 SIGHUPs in 5 s is at most 20 reloads, not 900). The main thread sleeps in
    ``select`` on the signal wake-up fd: the kernel may deliver a signal to any thread, and the
    wake-up byte reaches this one all the same, so nothing needs to poll. The handlers are installed
    by this call, not when the first signal is asked for: one that comes meanwhile waits in the pipe."""
    reader, writer = os.pipe()
    os.set_blocking(reader, False)
    os.set_blocking(writer, False)
    signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    for handled in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(handled, lambda _number, _frame: None)  # the wake-up fd carries the number
    return _arrivals(reader, writer, reload_gap, clock)


def _arrivals(reader: int, writer: int, reload_gap: float, clock: Callable[[], float]) -> Iterator[int]:
    pending_reload = False
    last_reload = float("-inf")
    try:
        while True:
            timeout = max(0.0, last_reload + reload_gap - clock()) if pending_reload else None
            select.select([reader], [], [], timeout)
            try:
                received = os.read(reader, 4096)
            except BlockingIOError:
                received = b""
            for number in received:
                if number != signal.SIGHUP:
                    yield number
            pending_reload = pending_reload or signal.SIGHUP in received
            if pending_reload and clock() >= last_reload + reload_gap:
                pending_reload = False
                yield signal.SIGHUP
                last_reload = clock()
    finally:
        signal.set_wakeup_fd(-1)
        os.close(reader)
        os.close(writer)


def load_web_config_flag(args: argparse.Namespace) -> WebConfig | None:
    """The --web.config.file, loaded and logged; a problem is a StartupError naming file and key."""
    if not args.web_config_file:
        return None
    from gpueff.httpserver.tlsconfig import WebConfigError, load_web_config

    try:
        web_config = load_web_config(args.web_config_file)
    except WebConfigError as error:
        raise StartupError(str(error)) from None
    log.info("web config %s: %s", args.web_config_file, web_config.describe())
    return web_config


def reload(args: argparse.Namespace, poller: Poller, server: WebServer, web_config: WebConfig | None, started: Config) -> WebConfig | None:
    """SIGHUP: take the new config and web config if valid; otherwise keep running on the old ones.
    A web config that would turn off TLS, client certificate verification or basic auth is refused:
    that takes a restart (docs/security.md). Keys read only at start are compared with ``started``,
    the config the daemon started with (what runs), not with the last reload's. Returns the web
    config now in force."""
    try:
        new_web_config = load_web_config_flag(args)
    except StartupError as error:
        log.error("web config reload failed, keeping the running TLS and auth settings: %s", error)
    else:
        weakened = web_config.weakened_by(new_web_config) if web_config is not None and new_web_config is not None else None
        if weakened:
            log.error("web config reload refused: %s would turn off %s; keeping the running TLS and auth settings (to turn them off on purpose, restart the exporter with the new file or without --web.config.file)", args.web_config_file, weakened)
        else:
            server.set_web_config(new_web_config)
            web_config = new_web_config
    try:
        config = effective_config(args)
    except ConfigError as error:
        log.error("reload failed, keeping the running configuration: %s", error)
        return web_config
    for key in restart_only_changes(started, config):
        log.warning("reload: %s changed, but it is read only at start: restart the exporter to apply it", key)
    poller.set_config(config)
    log.info("configuration reloaded from %s", args.config or "defaults")
    return web_config
