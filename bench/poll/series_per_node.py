#!/usr/bin/env python3
"""Series, payload and memory per node, measured from the exposition (issue 18: fleet practice).

Runs the real daemon on its NVML backend over tests/support/fakes/nvml.py (so any node shape can be had
without the hardware) for these node shapes, each with two compute processes per device and the
fair split on (``sharing.enabled``), and prints per shape: the series in one /metrics answer, by
family group; the bytes, plain and gzip; and the daemon's RSS after a minute of 1 s polls; then the
series each collector (gpueff/collectors.py) adds, which is what ``--no-collector.NAME`` saves:

- 8 GPUs (an HGX H100 node: 18 NVLink links each);
- 8 GPUs each split into 7 MIG devices (56 devices: the most series a node can have).

The figures size the ServiceMonitor's ``sampleLimit`` and the chart's memory request and limit.

Run: .venv/bin/python bench/poll/series_per_node.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import ROOT, daemon

sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))

from gpueff.collectors import COLLECTOR_OF, COLLECTORS  # noqa: E402

MATMUL = ROOT / "gpueff" / "traces" / "h200" / "matmul_8192.json"
SHAPES = {"8 GPUs": (8, 0), "8 GPUs x 7 MIG devices": (8, 7)}


def serve(gpus: int, migs: int, flags: list[str]) -> int:
    """The daemon over a fake pynvml of ``gpus`` GPUs with ``migs`` MIG devices each."""
    from fakes.nvml import FakeGpu, FakeNvml

    from gpueff.trace import load_trace

    trace = load_trace(MATMUL)
    devices = []
    for gpu in range(gpus):
        devices.append(FakeGpu(trace, uuid=f"GPU-{gpu:08x}-0000-0000-0000-000000000000", name="NVIDIA H100 80GB HBM3", nvlink_links=(True,) * 18,
                               processes=[] if migs else [(10_000 + 10 * gpu + n, 8 << 30, f"trainer{n}") for n in range(2)],
                               process_duty={} if migs else {10_000 + 10 * gpu + n: 0.4 for n in range(2)}))
    for gpu in range(gpus):
        for mig in range(migs):
            pids = [20_000 + 100 * gpu + 10 * mig + n for n in range(2)]
            devices.append(FakeGpu(trace, uuid=f"MIG-{gpu:04x}{mig:04x}-0000-0000-0000-000000000000", name="NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                                   mig_of=gpu, gpu_instance_id=mig + 1, processes=[(pid, 4 << 30, f"server{pid % 2}") for pid in pids],
                                   process_duty=dict.fromkeys(pids, 0.4)))
    sys.modules["pynvml"] = FakeNvml(devices, event_wait_cap=0.5)
    from gpueff.commands.cli import main as daemon_main

    return daemon_main(flags)


def family_group(line: str) -> str:
    name = line.split("{", 1)[0].split(" ", 1)[0]
    for prefix in ("gpueff_holder_", "gpueff_app_", "gpueff_kubernetes_", "process_"):
        if name.startswith(prefix):
            return prefix + "*"
    if name.startswith("gpueff_") and ('gpu="' in line or 'uuid="' in line):
        return "per-GPU gpueff_*"
    return "exporter's own gpueff_*"


def measure(shape: str, gpus: int, migs: int, seconds: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "config.yml"
        config.write_text("sharing:\n  enabled: true\n")
        command = [sys.executable, __file__, "serve", str(gpus), str(migs), "--backend", "nvml", "--config", str(config), "--collect-interval", "1s"]
        with daemon(command, ready_timeout=60) as running:
            time.sleep(seconds)
            status, body = running.get()
            if status != 200:
                raise RuntimeError(f"{shape}: /metrics answered {status}")
            rss = running.rss_bytes()
    lines = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
    groups = Counter(family_group(line) for line in lines)
    collectors = Counter(COLLECTOR_OF.get(line.split("{", 1)[0].split(" ", 1)[0], "") for line in lines)
    return {"shape": shape, "devices": gpus * max(1, migs), "series": len(lines), "groups": dict(groups.most_common()), "collectors": collectors,
            "bytes": len(body), "gzip_bytes": len(gzip.compress(body, 1)), "rss_mib": rss / 2**20}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        return serve(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="polls at 1 s before the measured scrape (default 60)")
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; fake pynvml; two processes per device; sharing on\n")
    print("| node | devices | series | by group | bytes (gzip) | daemon RSS |")
    print("| --- | ---: | ---: | --- | ---: | ---: |")
    rows = []
    for shape, (gpus, migs) in SHAPES.items():
        row = measure(shape, gpus, migs, args.seconds)
        rows.append(row)
        groups = ", ".join(f"{name} {count}" for name, count in row["groups"].items())  # type: ignore[attr-defined]
        print(f"| {shape} | {row['devices']} | {row['series']} | {groups} | {row['bytes']:,} ({row['gzip_bytes']:,}) | {row['rss_mib']:.1f} MiB |", flush=True)
    print("\n| collector | " + " | ".join(f"series, {row['shape']}" for row in rows) + " |")
    print("| --- |" + " ---: |" * len(rows))
    for name in COLLECTORS:
        print(f"| `{name}` | " + " | ".join(str(row["collectors"][name]) for row in rows) + " |")  # type: ignore[index]
    print("| (always: identity, pods, holders, apps, the exporter) | " + " | ".join(str(row["collectors"][""]) for row in rows) + " |")  # type: ignore[index]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
