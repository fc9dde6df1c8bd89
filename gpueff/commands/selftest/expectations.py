"""The planted workloads and what the daemon must report for each.

Names match the ``workload`` field of the recorded traces in gpueff/traces/h200/, so a trace
recorded while a planted workload ran can be checked like a live run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Expectation:
    workload: str
    description: str
    bottleneck: str  # the class most samples must show
    mismatch: tuple[str, ...] = ()  # the mismatch rules that must fire on most samples; () = none
    throughput: str | None = None  # truth key whose estimate is checked: "tflops" or "tbps"
    one_sm: bool = False  # SM activity must read ~1/SM-count


EXPECTATIONS: dict[str, Expectation] = {
    item.workload: item
    for item in (
        Expectation("idle", "no work on the GPU", "idle"),
        Expectation("spin_1sm", "1 thread spinning on 1 SM", "underfilled", ("high_util_low_sm", "low_efficiency", "high_util_low_work"), one_sm=True),
        Expectation("warp_every_sm", "1 warp spinning on every SM: SM activity fooled, nothing near any roof", "latency", ("high_util_low_work",)),
        Expectation("matmul_8192", "bf16 8192x8192 matmuls back to back", "compute", throughput="tflops"),
        Expectation("matmul_8192_duty50", "the same matmuls for 50 ms, then 50 ms of host sleep", "host", throughput="tflops"),
        Expectation("copy_2GB", "device-to-device copy of a 2 GiB buffer", "memory", throughput="tbps"),
        Expectation("tiny_kernels", "1000 tiny kernels per synchronize", "host"),
        Expectation("matmul_duty_1s", "the matmuls for 500 ms, then 500 ms of host sleep: a period that aliases with the 500 ms sampling, so windows alternate busy and idle", "host", throughput="tflops"),
        Expectation("train_step", "a transformer training step (PyTorch, bf16, AdamW, 8 x 1024 tokens): large-batch training, judged by MFU", "compute", throughput="tflops"),
    )
}
# The reported class must be the expected one on at least this share of the samples after the first
# HOLD_SETTLE ones (the class needs bottleneck.hold_polls polls to leave the first window's verdict).
CLASS_STABILITY = 0.9
HOLD_SETTLE = 2

# Each figure over the workload's own count must lie in this band. DRAM bandwidth is an estimate (±10 %);
# tensor-busy FLOP/s is an upper bound of the work: on large GEMMs and training steps it reads 1.0-1.17x
# the job's count in the recorded corpus (docs/peaks.md), so it may not read low by more than noise.
THROUGHPUT_BANDS = {"tflops": (0.95, 1.20), "tbps": (0.90, 1.10)}
# The spin's SM activity must be within this share of 1/SM-count (2 SMs busy would read +100 %).
ONE_SM_TOLERANCE = 0.5
