"""The real daemon on its NVML backend, with tests/fake_pynvml.py standing in for pynvml.

    python bench/fake_nvml_daemon.py GPUS [daemon flags...]

GPUS fake GPUs play the shipped traces (repeated where GPUS > 6). Calls cost nothing, so what the
process spends is the daemon's own CPU (plus the fake's Python). nvmlEventSetWait blocks up to
500 ms like the real one, so the Xid thread wakes as often as it would on a GPU machine.
"""

from __future__ import annotations

import sys

from harness import ROOT, trace_files

sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from fake_pynvml import FakeNvml  # noqa: E402 (needs the paths above)

from exporter.trace import load_trace  # noqa: E402


def main() -> int:
    gpus, flags = int(sys.argv[1]), sys.argv[2:]
    sys.modules["pynvml"] = FakeNvml([load_trace(path) for path in trace_files(gpus)], event_wait_cap=0.5)
    from exporter.commands.cli import main as daemon_main

    return daemon_main(flags)


if __name__ == "__main__":
    raise SystemExit(main())
