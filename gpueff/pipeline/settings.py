"""The ``sharing:`` config section: the fair split of shared GPUs (pipeline/split.py). Kept apart
from the split itself so the config file's schema imports no pipeline code."""

from __future__ import annotations

from dataclasses import dataclass

from gpueff.config.engine import setting
from gpueff.config.values import boolean


@dataclass(frozen=True)
class SharingConfig:
    """The fair split of shared GPUs among pods, Slurm jobs and processes (see docs/sharing.md)."""

    enabled: bool = setting(False, boolean, "export per-holder shares of each GPU's busy time, SM activity, busy-but-idle time and energy, and gpueff_gpu_job_info for Slurm jobs (needs the host's PIDs: hostPID)")
