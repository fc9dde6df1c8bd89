"""The real daemon on its NVML backend, with tests/support/fakes/nvml.py standing in for pynvml.

    python tools/fake_nvml_daemon.py GPUS [daemon flags...]

GPUS fake GPUs play the shipped traces (repeated where GPUS > 6). Calls cost nothing, so what the
process spends is the daemon's own CPU (plus the fake's Python). nvmlEventSetWait blocks as long as
the backend asks, like the real one, so the Xid thread wakes as often as it would on a GPU machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))

from fakes.nvml import FakeNvml  # noqa: E402 (needs the paths above)

from gpueff.trace import load_trace, planted_trace_paths  # noqa: E402


def main() -> int:
    gpus, flags = int(sys.argv[1]), sys.argv[2:]
    traces = [load_trace(path) for path in planted_trace_paths()]
    sys.modules["pynvml"] = FakeNvml([traces[index % len(traces)] for index in range(gpus)], event_wait_cap=float("inf"))
    from gpueff.commands.cli import main as daemon_main

    return daemon_main(flags)


if __name__ == "__main__":
    raise SystemExit(main())
