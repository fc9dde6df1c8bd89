"""The bottleneck taxonomy: each class, the rule that picks it from one window's activity, and what
to try; and the counter-health checks that say when a window's readings cannot be physically true.

The rules come from what the counters mean on the hardware, not from fitting traces (docs/classes.md
gives each class's physical argument and the recorded jobs that show it):
- a link (PCIe, NVLink) moving data at ``communication_link`` of its peak or more while most SMs
  have nothing to run is the limit, whatever the other readings say: checked first, so a transfer
  the graphics engine does not see is never called idle.
- busy (nvidia-smi's utilization over the window: any engine, copy engines included) says whether
  the GPU had work at all; below ``host_utilization`` it sat with nothing queued for a large share
  of the time, and what it waits on is the host. Busy with the compute engine idle means only the
  copy engines worked: transfers the link's rate does not explain are paced by the host. Where the
  engine is not read over the window (NVML reads it at the slow cadence on full GPUs), SM count x
  SM activity bounds it from above, and a bound below the idle threshold proves the same.
- DRAM activity is the share of peak bandwidth; about 0.8 is its practical roof (DCGM's guide),
  so at ``memory_dram`` or more, with DRAM busier than any math pipe, bandwidth is the limit; and
  at ``memory_dram_without_math`` with no math pipe doing meaningful work the job streams bytes
  (gathers, elementwise, normalisation, optimizer kernels): far below the roofline's ridge.
- a math pipe (tensor, FP64, FP32, FP16) at ``compute_pipe`` of its own peak, with SMs busy, means
  the GPU's own arithmetic is the limit, judged by MFU. The integer pipe is not among them: it
  issues address and index arithmetic for every load (a random gather reads 0.57 with no math).
- SM activity below ``underfilled_sm_active`` while busy means most SMs have no block to run.
- low occupancy with nothing near a roof means the resident warps cannot hide latency.
A change of class is reported only once it holds when any one reading moves by ``margin`` (so a
job sitting on a threshold keeps one verdict) and has won ``hold_polls`` polls in a row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from operator import attrgetter

from exporter.config.engine import setting
from exporter.config.values import min_duration, ratio, whole_number

MAX_HOLD_POLLS = 1000


@dataclass(frozen=True)
class MismatchThresholds:
    high_utilization: float = setting(0.8, ratio, "high_util_low_sm fires at coarse utilization >= this")
    low_sm_active: float = setting(0.3, ratio, "... together with SM activity below this")
    low_efficiency_utilization: float = setting(0.5, ratio, "low_efficiency fires at utilization >= this")
    low_efficiency_ratio: float = setting(0.3, ratio, "... together with efficiency below this")


@dataclass(frozen=True)
class BottleneckThresholds:
    idle_utilization: float = setting(0.05, ratio, "idle below this utilization (over the window, copy engines included)")
    host_utilization: float = setting(0.85, ratio, "host: busy but utilization below this (the GPU waits on the host)")
    memory_dram: float = setting(0.6, ratio, "memory: DRAM at least this active (its practical roof is about 0.8) and busier than any math pipe")
    compute_pipe: float = setting(0.2, ratio, "compute: a math pipe (tensor, FP64, FP32, FP16; not the integer pipe) at least this active, with SM activity at least underfilled_sm_active")
    memory_dram_without_math: float = setting(0.4, ratio, "memory also: DRAM at least this active while every math pipe is below compute_pipe (the job streams bytes)")
    communication_link: float = setting(0.3, ratio, "communication: PCIe or NVLink at least this share of its peak while SM activity is below underfilled_sm_active (checked before every other rule)")
    underfilled_sm_active: float = setting(0.5, ratio, "underfilled: SM activity below this while the GPU is busy")
    latency_occupancy: float = setting(0.1, ratio, "latency: SM occupancy below this ...")
    latency_work: float = setting(0.2, ratio, "... and every pipe and DRAM below this")
    window: float = setting(5.0, min_duration(0.0), "the class is judged from the readings' time-weighted mean over this much recent time (at least the last poll's window)")
    hold_polls: int = setting(2, whole_number(MAX_HOLD_POLLS, "a class that must win longer than that would never change"), "a new class is reported only once it has won this many polls in a row (2: no single poll flips it; at most 1000)")
    margin: float = setting(0.02, ratio, "a new class is reported only where the one in place would not be chosen with any one reading moved up or down by this much (a job sitting on a threshold keeps its verdict)")


@dataclass(frozen=True, slots=True)
class BottleneckClass:
    name: str
    meaning: str
    what_to_try: str


CLASSES: tuple[BottleneckClass, ...] = (
    BottleneckClass("idle", "nothing runs on the GPU", "Nothing runs: release the GPU or give it work (look for jobs that hold a GPU they do not use)."),
    BottleneckClass(
        "host",
        "the GPU has no work queued for a large share of the time, or only its copy engines work, well below the link's roof: it waits on the host",
        "Feed the GPU faster: more DataLoader workers, pinned memory and prefetch (pageable copies are staged by the CPU), fewer host syncs (.item(), .cpu()), CUDA graphs or torch.compile against launch overhead, larger batches.",
    ),
    BottleneckClass(
        "compute",
        "the SMs are busy and a meaningful share of their cycles go to a math pipe (tensor, FP64, FP32 or FP16): the GPU's own arithmetic is the limit",
        "Raise MFU: move FP32 math to tensor cores (TF32, bf16, FP8), fused kernels, flash attention, larger matmul tiles; then scale out.",
    ),
    BottleneckClass(
        "memory",
        "DRAM bandwidth is near its practical roof and busier than any math pipe, or the job streams bytes (gathers, elementwise, normalisation) with no math pipe doing meaningful work",
        "Move fewer bytes: more work per byte read (larger batches per weight read), kernel fusion (torch.compile), quantized weights, KV cache or embedding tables, cached hot rows.",
    ),
    BottleneckClass(
        "communication",
        "PCIe or NVLink moves data near its peak while most SMs have nothing to run: the link is the limit",
        "Overlap communication with compute, batch or compress transfers, keep data resident on the GPU, use a faster path (NVLink, GPUDirect).",
    ),
    BottleneckClass(
        "peer_wait",
        "the GPU is busy with few SMs active while another GPU of its job works: it waits inside collectives (NCCL) for that slower peer (judged across the job's GPUs, exporter/pipeline/peers.py)",
        "Speed up the GPU this one waits for (gpueff_job_straggler names it), not this one: even out the work per rank (uneven batches, pipeline stages or experts), feed that rank's host faster, check its clocks, power and links.",
    ),
    BottleneckClass(
        "underfilled",
        "the GPU is busy but most SMs have no block to run",
        "Give each kernel more parallel work (larger batches, more blocks), or share the GPU (MIG, MPS).",
    ),
    BottleneckClass(
        "latency",
        "SMs are active but hold too few warps to hide latency, and no unit is near its roof",
        "Raise occupancy (more threads and blocks, fewer registers per thread) or batch dependent work.",
    ),
    BottleneckClass(
        "mixed",
        "the GPU is fed and its SMs active, yet no unit the counters see is near its roof (on-chip memory, instruction issue or synchronisation)",
        "No single unit is the limit: profile a step with Nsight Compute to see which on-chip resource is.",
    ),
    BottleneckClass(
        "unknown",
        "the readings needed are missing, or the counters read something physically impossible (gpueff_readings_implausible)",
        "Enable profiling (GPM on Hopper and newer, or DCGM), or fix the counters that gpueff_readings_implausible names.",
    ),
)
CLASS_NAMES = tuple(each.name for each in CLASSES)
WHAT_TO_TRY = {each.name: each.what_to_try for each in CLASSES}


@dataclass(frozen=True, slots=True)
class Activity:
    """The window readings a class is judged from; all cover the same interval. None: not read."""

    busy: float | None = None  # nvidia-smi's utilization over the window (exporter/pipeline/derive.py busy_ratio)
    engine: float | None = None  # the graphics/compute engine's share of the window (GRAPHICS_UTIL / DCGM 1001): no copy engines
    # Where ``engine`` is not read: an upper bound on it, SM count x SM activity, at most 1 (a kernel
    # running for a share e of the window keeps at least one SM of sm_count active for e).
    engine_bound: float | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    pipes: float | None = None  # the busiest math pipe (tensor, FP64/32/16; not the integer pipe)
    dram: float | None = None
    link: float | None = None  # the busiest interconnect direction as a share of its peak


ACTIVITY_FIELDS = tuple(each.name for each in fields(Activity))
activity_values = attrgetter(*ACTIVITY_FIELDS)  # an Activity's readings as a tuple, in ACTIVITY_FIELDS order


def classify(activity: Activity, limits: BottleneckThresholds) -> str:
    """The class of one (possibly smoothed) window; the rules are checked in order."""
    sm_active = activity.sm_active
    link = activity.link
    if link is not None and link >= limits.communication_link and (sm_active is None or sm_active < limits.underfilled_sm_active):
        return "communication"
    busy = activity.busy
    if busy is None:
        return "unknown"
    if busy < limits.idle_utilization:
        return "idle"
    if busy < limits.host_utilization:
        return "host"
    engine = activity.engine if activity.engine is not None else activity.engine_bound
    if engine is not None and engine < limits.idle_utilization:
        return "host"  # only the copy engines work, well below the link's roof: the host paces the transfers
    if sm_active is None:
        return "unknown"
    pipes = activity.pipes or 0.0
    dram = activity.dram or 0.0
    if dram >= limits.memory_dram and dram >= pipes:
        return "memory"
    if dram >= limits.memory_dram_without_math and pipes < limits.compute_pipe:
        return "memory"
    if pipes >= limits.compute_pipe and sm_active >= limits.underfilled_sm_active:
        return "compute"
    if sm_active < limits.underfilled_sm_active:
        return "underfilled"
    occupancy = activity.sm_occupancy
    if occupancy is not None and occupancy < limits.latency_occupancy and max(pipes, dram) < limits.latency_work:
        return "latency"
    return "mixed"


def classes_within_margin(activity: Activity, limits: BottleneckThresholds, margin: float) -> set[str]:
    """The classes this window would get if any one reading moved up or down by ``margin``. Where
    the class in place is among them, the readings sit on a threshold's edge and the class in place
    stands: a hysteresis band of ``margin`` around every threshold."""
    found = {classify(activity, limits)}
    for name in (each.name for each in fields(Activity)):
        value = getattr(activity, name)
        if value is None:
            continue
        ceiling = math.inf if name == "link" else 1.0
        for moved in (value - margin, value + margin):
            found.add(classify(replace(activity, **{name: min(max(moved, 0.0), ceiling)}), limits))
    return found


# ---- counter health ---------------------------------------------------------------------------

IMPLAUSIBLE_MARGIN = 0.05  # two means over one window can differ by sampling skew; 5 points cannot
COUNTER_CHECKS: dict[str, str] = {
    "sm_above_engine": "SM activity exceeds the graphics/compute engine's activity by more than 5 points: an SM is only active while the engine is",
    "pipe_above_sm": "a math pipe (tensor, FP64/32/16, integer) is active more than SM activity allows (by more than 5 points): a pipe only issues on an active SM",
    "occupancy_above_sm": "SM occupancy exceeds SM activity by more than 5 points: a resident warp makes its SM active",
    "sm_zero_while_busy": "SM activity reads exactly 0 while the engine was active at least half the window: any kernel makes some SM active (one thread on one SM of 132 reads 0.0076)",
    "profiling_zero_under_load": "every profiling activity reads exactly 0 while NVML's utilization reads at least 0.5: the profiling counters are not counting",
}


def implausible_checks(readings: dict[str, float], nvml_utilization: float | None, link: float | None = None) -> dict[str, bool]:
    """Each counter-health check that can be judged from this window's profiling readings.

    ``readings``: the profiling activities by name (sm_active, graphics_active, sm_occupancy,
    tensor_active, ...); ``nvml_utilization``: NVML's own utilization figure, where read; ``link``:
    the busiest interconnect direction's share of its peak, where known (a copy moves bytes over
    PCIe with every activity at 0: that is no sign of counters that do not count).
    """
    sm = readings.get("sm_active")
    if sm is None:
        return {}
    checks: dict[str, bool] = {}
    engine = readings.get("graphics_active")
    if engine is not None:
        checks["sm_above_engine"] = sm > engine + IMPLAUSIBLE_MARGIN
        checks["sm_zero_while_busy"] = sm == 0 and engine >= 0.5
    pipes = [readings[name] for name in PIPE_READINGS if name in readings]
    if pipes:
        checks["pipe_above_sm"] = max(pipes) > sm + IMPLAUSIBLE_MARGIN
    occupancy = readings.get("sm_occupancy")
    if occupancy is not None:
        checks["occupancy_above_sm"] = occupancy > sm + IMPLAUSIBLE_MARGIN
    if nvml_utilization is not None:
        activities = [value for name, value in readings.items() if name in ACTIVITY_READINGS]
        checks["profiling_zero_under_load"] = nvml_utilization >= 0.5 and all(value == 0 for value in activities) and not link
    return checks


MATH_PIPE_READINGS = ("tensor_active", "fp64_active", "fp32_active", "fp16_active")  # the pipes that do the job's arithmetic
PIPE_READINGS = (*MATH_PIPE_READINGS, "integer_active")
ACTIVITY_READINGS = ("sm_active", "sm_occupancy", "graphics_active", "dram_active", *PIPE_READINGS)
