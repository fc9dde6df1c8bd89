"""``gpu-efficiency-exporter top``: a live table of each GPU's real work, where nvidia-smi and nvitop
show only utilization. It reads the local GPUs through the exporter's own backend and pipeline (one
poll per frame, the poller's snapshot rendered), or a running exporter's /metrics (``--url``).

In a terminal it redraws every interval on the alternate screen, and at once on a key (help, sort,
scroll: view.py) or a resize, until ``q`` or Ctrl-C; in a pipe,
or with ``--once``, it prints one plain frame and exits (exit status 1 if the exporter could not
be read, 2 if nothing could be started).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import pwd
import select
import shutil
import signal
import sys
import termios
import threading
import time
import tty
from collections.abc import Callable, Iterator
from typing import TextIO

from gpueff import logs
from gpueff.backends.base import Backend, BackendUnavailable
from gpueff.commands.daemon import StartupError, choose_backend, effective_config
from gpueff.commands.flags import Parser, add_common_flags, add_dcgm_flags, duration_flag
from gpueff.commands.top.scrape import ScrapeError, metrics_url, read
from gpueff.commands.top.table import Frame, Screen, render
from gpueff.commands.top.text import printable
from gpueff.commands.top.view import View, WasteWindow
from gpueff.commands.top.view import keys as view_keys
from gpueff.config.engine import ConfigError
from gpueff.config.values import MIN_COLLECT_INTERVAL
from gpueff.overview import GpuOverview, job_overviews, snapshot_overview
from gpueff.poller import Poller

DEFAULT_INTERVAL = 1.0
MAX_USERS = 4096  # user names remembered
ENTER_SCREEN, LEAVE_SCREEN = "\x1b[?1049h\x1b[?25l", "\x1b[?25h\x1b[?1049l"
HOME, CLEAR_LINE, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"


def parser() -> argparse.ArgumentParser:
    result = Parser(
        prog="gpu-efficiency-exporter top",
        description="A live table of each GPU's utilization against its SM activity, efficiency, bottleneck class, estimated FLOP/s and bandwidth and flags, "
        "read from the local GPUs (through the exporter's own backend) or from a running exporter (--url), the GPUs that waste the most time first. "
        "Keys (htop's and nvitop's): h, ? or F1 help, arrows select a GPU and Enter opens its detail and processes, / (F3, F4) filters by name, pod, namespace, job, user or class, "
        "F6 the sort menu, w u s e p m t i order by waste, utilization, SM activity, efficiency, power, memory, temperature, index, r reverse, q, F10 or Ctrl-C quit.",
    )
    source = result.add_mutually_exclusive_group()
    source.add_argument("--url", help="read a running exporter's metrics instead of the local GPUs, e.g. http://gpu-node-1:9947 (/metrics is added)")
    source.add_argument("--replay", nargs="+", metavar="FILE", help="replay gpu-trace/1 files instead of reading GPUs")
    source.add_argument("--demo", action="store_true", help="replay the recorded traces shipped with the package (no GPU needed)")
    result.add_argument("--backend", choices=("auto", "nvml", "dcgm", "replay"), default="auto", help="where local readings come from (default auto, as the daemon)")
    result.add_argument("--config", help="YAML configuration file (thresholds, peaks), as the daemon's")
    result.add_argument("--interval", dest="collect_interval", type=duration_flag(MIN_COLLECT_INTERVAL), default=None, help="time between frames, e.g. 500ms or 2s (default 1s)")
    result.add_argument("--timeout", type=duration_flag(0.1, 60.0), default=5.0, help="--url: how long one fetch may take (default 5s)")
    result.add_argument("--once", action="store_true", help="print one frame and exit (what a pipe gets anyway)")
    result.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="colours: auto (a terminal, unless NO_COLOR is set), always or never")
    add_dcgm_flags(result)
    add_common_flags(result)
    result.set_defaults(log_level="error")  # a log line would tear the live table
    return result


class LocalSource:
    """The local GPUs: the backend the daemon would pick, polled by a Poller once per frame."""

    def __init__(self, args: argparse.Namespace) -> None:
        config = effective_config(args)
        # The process panel's busy shares need NVML's per-process samples, which the per_process collector reads.
        config = dataclasses.replace(config, collectors=dataclasses.replace(config.collectors, enabled=tuple(sorted({*config.collectors.enabled, "per_process"} - set(config.collectors.disabled)))))
        self.backend: Backend = choose_backend(args, config)
        self.backend.start()
        self.poller = Poller(self.backend, config)
        self.source = ("replayed traces, not live GPUs" if self.backend.replayed else f"{self.backend.name} backend",)
        self.users = UserNames()

    def frame(self) -> Frame:
        snapshot = self.poller.poll_once()
        gpus = snapshot_overview(snapshot, stale=False)
        return Frame(self.source, gpus, time.time(), jobs=job_overviews(snapshot, stale=False), users=self.users.of(gpus))

    def close(self) -> None:
        self.backend.close()


class UserNames:
    """uid -> user name from this host's user database, each uid looked up once (top reads its own
    host's GPUs, so their processes' uids are this host's; a page from --url keeps its uids)."""

    def __init__(self) -> None:
        self._known: dict[str, str] = {}

    def of(self, gpus: list[GpuOverview]) -> dict[str, str]:
        for gpu in gpus:
            for row in gpu.processes.rows if gpu.processes is not None else ():
                if row.user_id and row.user_id not in self._known:
                    if len(self._known) >= MAX_USERS:
                        self._known.clear()  # a node that saw this many users looks them up afresh
                    try:
                        self._known[row.user_id] = pwd.getpwuid(int(row.user_id)).pw_name
                    except (KeyError, ValueError, OverflowError):
                        self._known[row.user_id] = ""  # not in the user database: the uid is shown
        return self._known


class UrlSource:
    """A running exporter's /metrics, fetched once per frame."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = metrics_url(url)
        self.timeout = timeout
        self.source = (self.url,)

    def frame(self) -> Frame:
        exporter = read(self.url, self.timeout)
        said = "replayed traces, not live GPUs" if exporter.replayed else f"{exporter.backend} backend"
        stale = ("STALE: its last poll is older than stale_after",) if exporter.stale else ()
        return Frame((self.url, said, *stale), exporter.gpus, time.time(), jobs=exporter.jobs)

    def close(self) -> None:
        pass


def _use_colour(choice: str, stream: TextIO) -> bool:
    return choice == "always" or (choice == "auto" and stream.isatty() and "NO_COLOR" not in os.environ)


def once(source: LocalSource | UrlSource, interval: float, colour: bool, out: TextIO) -> int:
    """One frame. Locally the GPUs are polled twice, ``interval`` apart: profiling readings are means
    over the window between two polls, and WASTE is the busy-while-SMs-idle time between them."""
    window = WasteWindow()
    try:
        if isinstance(source, LocalSource):
            window.add(source.frame().gpus, time.monotonic())
            time.sleep(interval)
        frame = source.frame()
    except ScrapeError as error:
        print(f"gpu-efficiency-exporter top: {printable(str(error))}", file=sys.stderr)
        return 1
    frame = dataclasses.replace(frame, waste=window.add(frame.gpus, time.monotonic()))
    width = shutil.get_terminal_size((80, 24)).columns
    out.write("\n".join(render(frame, width, None, colour).lines) + "\n")
    return 0


@contextlib.contextmanager
def _keys(stream: TextIO) -> Iterator[int | None]:
    """The terminal's input in cbreak mode (keys one by one, Ctrl-C still a signal), restored after;
    None where input is not a terminal."""
    if not stream.isatty():
        yield None
        return
    fd = stream.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _frame_unless_quit(source: LocalSource | UrlSource, last: Frame, interval: float, keys: int | None, press: Callable[[str], bool]) -> Frame | None:
    """The next frame, read on a worker thread while the keys are watched: each key is handed to
    ``press`` as it comes, and None returned where it says to quit (a slow exporter never keeps top
    from quitting)."""
    result: list[Frame] = []
    failed: list[Exception] = []

    def read() -> None:
        try:
            result.append(source.frame())
        except ScrapeError as error:
            result.append(dataclasses.replace(last, error=f"{time.strftime('%H:%M:%S')} {error}; retrying every {interval:g} s"))
        except Exception as error:  # noqa: BLE001 - raised again on the drawing thread, as before the worker
            failed.append(error)

    worker = threading.Thread(target=read, name="top-fetch", daemon=True)
    worker.start()
    while worker.is_alive():
        if keys is None:
            worker.join()
        elif select.select([keys], [], [], 0.05)[0] and any(press(key) for key in view_keys(os.read(keys, 64))):
            return None
    if failed:
        raise failed[0]
    return result[0]


@contextlib.contextmanager
def _resizes() -> Iterator[int]:
    """A pipe that gets a byte whenever the terminal is resized (SIGWINCH), so a wait wakes to redraw."""
    reader, writer = os.pipe()
    os.set_blocking(writer, False)

    def resized(_signum: int, _frame: object) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(writer, b"r")

    previous = signal.signal(signal.SIGWINCH, resized)
    try:
        yield reader
    finally:
        signal.signal(signal.SIGWINCH, previous)
        os.close(reader)
        os.close(writer)


def _size(out: TextIO) -> os.terminal_size:
    """The terminal's size now (the terminal's own answer: COLUMNS and LINES, read once at start, go stale on a resize)."""
    try:
        return os.get_terminal_size(out.fileno())
    except (OSError, ValueError):
        return shutil.get_terminal_size()


def live(source: LocalSource | UrlSource, interval: float, colour: bool, out: TextIO) -> int:
    """Poll every ``interval`` and redraw, and redraw at once on a key or a resize, until q, F10 or
    Ctrl-C. A failed fetch keeps the last figures, with the failure above them."""
    shown = Frame(source.source, [])
    window = WasteWindow()
    view = View()
    screen = Screen([], 0, 1)

    def press(key: str) -> bool:
        """Take one key (the last screen says which GPUs it lists and how many rows a page is); True: quit."""
        nonlocal view
        view = view.after(key, screen.order, screen.page)
        return view.done

    due = time.monotonic()
    out.write(ENTER_SCREEN)
    try:
        with _keys(sys.stdin) as keys, _resizes() as resizes:
            while True:
                if time.monotonic() >= due:
                    due = time.monotonic() + interval
                    frame = _frame_unless_quit(source, shown, interval, keys, press)
                    if frame is None:
                        return 0
                    shown = frame if frame.error else dataclasses.replace(frame, waste=window.add(frame.gpus, time.monotonic()))
                size = _size(out)
                screen = render(shown, size.columns, size.lines, colour, view, live=True)
                view = dataclasses.replace(view, scroll=screen.scroll)
                out.write(HOME + (CLEAR_LINE + "\n").join(screen.lines) + CLEAR_LINE + CLEAR_BELOW)
                out.flush()
                waiting = [resizes] if keys is None else [keys, resizes]
                ready = select.select(waiting, [], [], max(0.0, due - time.monotonic()))[0]  # a signal's handler wakes it through the pipe
                if resizes in ready:
                    os.read(resizes, 64)
                if keys is not None and keys in ready and any(press(key) for key in view_keys(os.read(keys, 64))):
                    return 0
    except KeyboardInterrupt:
        return 0
    finally:
        out.write(LEAVE_SCREEN)
        out.flush()


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    interval = args.collect_interval or DEFAULT_INTERVAL
    source: LocalSource | UrlSource
    try:
        source = UrlSource(args.url, args.timeout) if args.url else LocalSource(args)
    except BackendUnavailable as error:
        print(f"gpu-efficiency-exporter top: {error}; run with --demo to replay recorded traces, or --url to read a running exporter", file=sys.stderr)
        return 2
    except (ScrapeError, StartupError, ConfigError) as error:
        print(f"gpu-efficiency-exporter top: {error}", file=sys.stderr)
        return 2
    out = sys.stdout
    try:
        if args.once or not out.isatty():
            return once(source, interval, _use_colour(args.color, out), out)
        return live(source, interval, _use_colour(args.color, out), out)
    finally:
        source.close()
