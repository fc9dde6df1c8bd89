"""The demo's /metrics, byte for byte, against tests/unit/exposition/golden/demo.metrics (as node_exporter keeps its
e2e output): every shipped trace replayed on a fake clock with the demo's declared owners, polled 12
times half a second apart, with the daemon's own timings and process figures fixed. A change to the exposition that is meant shows
up here as a diff to review; regenerate the file with ``python tests/unit/exposition/test_render_golden.py``."""

from __future__ import annotations

import sys
from pathlib import Path

from gpueff.backends.replay import ReplayBackend
from gpueff.poller import Poller
from gpueff.selfstats import ProcessStats
from gpueff.settings import Config
from gpueff.trace import demo_trace_paths, load_trace
from gpueff.trace_owners import demo_owners
from gpueff.web.payload import Payloads

GOLDEN = Path(__file__).resolve().parent / "golden" / "demo.metrics"
POLLS = 12
PROCESS = ProcessStats(cpu_seconds=1.25, resident_bytes=30_000_000, virtual_bytes=200_000_000, open_fds=12, max_fds=1024, start_time_seconds=1_763_000_000.0)


class Ticks:
    """A clock that moves only when told; as a timer, each reading advances it by ``step``."""

    def __init__(self, now: float, step: float = 0.0) -> None:
        self.now, self.step = now, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def demo_metrics() -> bytes:
    clock = Ticks(100.0)
    paths = demo_trace_paths()
    backend = ReplayBackend([load_trace(path) for path in paths], clock=clock, owners=demo_owners(paths))
    poller = Poller(backend, Config(), clock=clock, wall_clock=lambda: 1_763_000_000.5, timer=Ticks(0.0, 0.001), process_stats=lambda: PROCESS)
    served = Payloads(clock)
    poller.subscribe(served.publish)  # as the daemon: each poll rendered as it is published
    backend.start()
    for _ in range(POLLS):
        clock.now += 0.5
        poller.poll_once()
    clock.now += 0.25
    body = served.body()
    assert body is not None
    return body


def test_the_demo_exposition_is_byte_for_byte_the_golden_file():
    assert demo_metrics() == GOLDEN.read_bytes(), "the demo's /metrics changed: review `git diff` after `python tests/unit/exposition/test_render_golden.py`"


def test_the_demos_help_lines_are_short():
    helps = [line for line in demo_metrics().splitlines() if line.startswith(b"# HELP ")]
    assert helps and sum(len(line) + 1 for line in helps) / len(helps) <= 120  # bytes a family; 192 (18,976 a scrape) while HELP carried each metric's whole description


if __name__ == "__main__":
    GOLDEN.write_bytes(demo_metrics())
    sys.exit(0)
