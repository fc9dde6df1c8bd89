"""``check``'s attribution section: for every GPU, the path that found its owner and the reason
none did (gpueff/attribution/doctor.py), from one reading of its processes and, with
``kubernetes.enabled`` in the config, one kubelet List call (at most its first-call wait)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gpueff.attribution.doctor import Doctor
from gpueff.attribution.kubernetes.attribution import Attributor
from gpueff.attribution.reasons import PATHS, REASONS
from gpueff.sample import GpuSample
from gpueff.settings import Config

DOCS = "docs/troubleshooting.md#whose-gpu-gpueff_gpu_attribution_info"


def attribution_lines(samples: list[GpuSample], config: Config, clock: Callable[[], float] = time.monotonic) -> list[str]:
    """The section's lines, one block per GPU."""
    proc_root = Path(config.proc_root)
    attributor = Attributor(clock)
    try:
        owners = attributor.owners(config.kubernetes, samples, clock(), proc_root)
        kubelet = attributor.kubelet()
    finally:
        attributor.close()
    found = Doctor(proc_root).diagnose(samples, owners, kubelet, config.attribution_switches)
    lines = ["", f"Whose GPU (gpueff_gpu_attribution_info; each reason in {DOCS}):"]
    for sample in samples:
        device = sample.device
        attribution = found[device.uuid]
        pods = ", ".join(f"{owner.namespace}/{owner.pod}/{owner.container}" for owner in owners[device.uuid].pods) if device.uuid in owners else ""
        lines.append(f"  GPU {device.index}  path={attribution.path}  reason={attribution.reason}" + (f"  ({pods})" if pods else ""))
        lines.append(f"    {PATHS[attribution.path]}; {REASONS[attribution.reason]}")
    return lines
