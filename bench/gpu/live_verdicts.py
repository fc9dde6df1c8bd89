"""Run the daemon's poller on a live GPU for a while and write what it derived at every poll.

    python3 bench/gpu/live_verdicts.py --output FILE [--duration 20] [--interval 1] [--gpu 0]

The poller, backend and derivations are the daemon's own (NVML with GPM, default config but the
interval); each line of FILE is one poll of GPU ``--gpu`` as JSON: the reported class and the
window's own, utilization (window and instant), SM activity, tensor, DRAM, the estimates, mismatch
and counter-health flags. tools/record_corpus.py --live runs it beside each corpus workload.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpueff.backends.nvml.backend import NvmlBackend  # noqa: E402
from gpueff.poller import Poller  # noqa: E402
from gpueff.settings import Config  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--gpu", type=int, default=0)
    args = parser.parse_args()
    config = Config(collect_interval=args.interval)
    backend = NvmlBackend(slow_interval=10.0)
    poller = Poller(backend, config)
    poller._devices = backend.start()
    lines: list[dict[str, object]] = []
    try:
        started = next_tick = time.monotonic()
        while time.monotonic() - started < args.duration:
            next_tick += args.interval
            time.sleep(max(0.0, next_tick - time.monotonic()))
            state = poller.poll_once().gpus[args.gpu]
            derived, sample = state.derived, state.sample
            if derived is None:
                lines.append({"t": round(time.monotonic() - started, 3), "up": False})
                continue
            profiling = sample.profiling
            readings = profiling.readings() if hasattr(profiling, "readings") else dict(profiling)
            lines.append(
                {
                    "t": round(time.monotonic() - started, 3),
                    "class": derived.bottleneck,
                    "window_class": derived.window_bottleneck,
                    "util": derived.busy,
                    "util_instant": derived.utilization_instant,
                    "sm": readings.get("sm_active"),
                    "occupancy": readings.get("sm_occupancy"),
                    "tensor": readings.get("tensor_active"),
                    "dram": readings.get("dram_active"),
                    "sm_clock_window_mhz": derived.sm_clock_mhz,
                    "sm_clock_mhz": sample.sm_clock_mhz,
                    "engine": readings.get("graphics_active"),
                    "engine_slow_window": sample.graphics_active_slow_window,  # NVML on a full GPU: the engine at the slow cadence
                    "pcie_rx_gbps": None if readings.get("pcie_rx_bytes_per_second") is None else readings["pcie_rx_bytes_per_second"] / 1e9,
                    "pcie_tx_gbps": None if readings.get("pcie_tx_bytes_per_second") is None else readings["pcie_tx_bytes_per_second"] / 1e9,
                    "tflops": None if derived.busy_flops is None else derived.busy_flops / 1e12,
                    **{f"{pipe}_t": None if (value := getattr(derived.pipe_busy, pipe)) is None else value / 1e12 for pipe in ("hmma_bf16_equivalent", "dmma_fp64", "imma_int8", "fp64", "fp32", "fp16")},
                    "estimated_t": None if derived.estimated_flops is None else derived.estimated_flops / 1e12,
                    "estimated_int8_t": None if derived.estimated_int8_ops is None else derived.estimated_int8_ops / 1e12,
                    "tbps": None if derived.dram_bytes_per_second is None else derived.dram_bytes_per_second / 1e12,
                    "mismatch": [rule for rule, fired in derived.mismatch.items() if fired],
                    "implausible": [check for check, fired in derived.implausible.items() if fired],
                }
            )
    finally:
        backend.close()
    args.output.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
