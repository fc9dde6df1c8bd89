"""The bottleneck taxonomy: each class, the rule that picks it from one window's activity, and what
to try; and the counter-health checks that say when a window's readings cannot be physically true.

The rules come from what the counters mean on the hardware, not from fitting traces, and each is
stated in shares of the card's own roofs so that a job gets the same class on every GPU wherever its
bound is the same (docs/classes.md gives each class's physical argument, where the bound really moves
between cards, and the recorded jobs that show it):
- a link (PCIe, NVLink) moving data at ``communication_link`` of its peak or more while most SMs
  have nothing to run is the limit, whatever the other readings say: checked first, so a transfer
  the graphics engine does not see is never called idle. So is a link at its practical roof
  (``communication_roof`` of ``link_roof``) while no math pipe is as near its own and DRAM is below
  its roof band, whatever the SM share: kernels that read or write host memory directly (zero-copy,
  UVA) fill every SM with warps that wait on the link, and SM activity counts a waiting warp as
  active.
- ``idle`` only where it is known that no kernel ran (SM activity, or the engine's, exactly 0 over a
  profiling window) and no engine was busy: a job that runs kernels rarely is starved (``host``) on
  every card, however fast the card makes its kernels. Utilization 0 with no such reading (no
  profiling, or the first poll, before any window) is ``unknown``: its whole-percent driver samples
  read 0 beside short kernels.
- ``host``: the GPU had nothing queued for a share of the window (1 - utilization) that is at
  least ``1 - host_utilization`` and at least what the kernels could save by reaching their
  practical roofs (Amdahl: the larger lever is the feeder). Busy with the compute engine idle means
  only the copy engines worked: transfers the link's rate does not explain are paced by the host.
- the roofline's side: DRAM's share over its practical roof (``dram_roof``) against the busiest math
  pipe's over its own (``pipe_roof``) is the job's arithmetic intensity against the card's ridge
  point (peak FLOP/s / peak bandwidth), so it is the same comparison on every card.
- ``memory``: DRAM at ``memory_dram`` or more, on the memory side: at its roof, bandwidth-bound.
- ``compute``: a math pipe (tensor, FP64, FP32, FP16) at ``compute_pipe`` of its own peak with SMs
  busy. The integer pipe is not among them: it issues address and index arithmetic for every load.
- ``underfilled``: SM activity below ``underfilled_sm_active``: most SMs have no block to run;
  unless a link carries at least ``transfer_link`` of its peak, more than any math pipe or DRAM
  carries of theirs: then moving bytes is the GPU's work (``communication`` below the link's roof).
- ``latency``: occupancy below ``latency_occupancy`` with nothing near a roof: too few warps.
- ``memory_latency``: the memory side with DRAM carrying ``memory_latency_dram`` or more but below
  its roof: the SMs wait on memory accesses (latency, too few bytes in flight), which a card with
  more bandwidth does not shorten (the same gather moves the same bytes/s on H100 and H200).
- ``communication`` below the link's roof with the SMs busy: where nothing above holds and the link
  is the only unit doing work (at least ``transfer_link`` of its peak, every math pipe and DRAM
  below that share of theirs), the warps the SMs hold wait on the link: scattered reads of host
  memory from kernels run at the link's latency, not its bandwidth (the link's ``memory_latency``).
A change of class is reported only once it holds when any one reading moves by ``margin`` (so a
job sitting on a threshold keeps one verdict) and has won ``hold_polls`` polls in a row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from operator import attrgetter

from gpueff.config.engine import setting
from gpueff.config.values import min_duration, ratio, whole_number

MAX_HOLD_POLLS = 1000


@dataclass(frozen=True)
class MismatchThresholds:
    high_utilization: float = setting(0.8, ratio, "high_util_low_sm and high_util_low_work fire at coarse utilization >= this")
    low_sm_active: float = setting(0.3, ratio, "high_util_low_sm: ... together with SM activity below this")
    low_work_activity: float = setting(0.1, ratio, "high_util_low_work: ... together with every math pipe (not the integer pipe), DRAM and link below this share of its peak: busy, nothing near any roof")
    low_efficiency_utilization: float = setting(0.5, ratio, "low_efficiency fires at utilization >= this")
    low_efficiency_ratio: float = setting(0.3, ratio, "... together with efficiency below this")


@dataclass(frozen=True)
class BottleneckThresholds:
    idle_utilization: float = setting(0.05, ratio, "idle: no kernel ran (SM activity 0) and utilization (copy engines included) below this; host: the compute engine below this while the GPU is busy (only copy engines work)")
    host_utilization: float = setting(0.8, ratio, "host: utilization below this, and the GPU waits at least as long as its kernels could save by reaching their practical roofs")
    dram_roof: float = setting(0.8, ratio, "DRAM's practical roof as a share of its peak (DCGM's guide; copies reach 0.89): the roofline side compares DRAM / this with the busiest math pipe / pipe_roof")
    pipe_roof: float = setting(0.9, ratio, "a math pipe's practical roof as a share of its peak (large matmuls reach 0.9-0.97)")
    memory_dram: float = setting(0.65, ratio, "memory (bandwidth-bound): DRAM at least this active (about 80 % of its practical roof) and on the memory side of the roofline")
    compute_pipe: float = setting(0.2, ratio, "compute: a math pipe (tensor, FP64, FP32, FP16; not the integer pipe) at least this active, with SM activity at least underfilled_sm_active")
    memory_latency_dram: float = setting(0.1, ratio, "memory_latency: DRAM at least this active, below memory_dram, on the memory side, with the SMs busy: the job waits on memory without filling its bandwidth")
    communication_link: float = setting(0.3, ratio, "communication: PCIe or NVLink at least this share of its peak while SM activity is below underfilled_sm_active (checked before every other rule)")
    link_roof: float = setting(0.9, ratio, "a link's practical roof as a share of its per-direction peak (pinned copies and zero-copy kernels reach 0.85-0.94 of PCIe Gen5 x16's 64 GB/s)")
    communication_roof: float = setting(0.8, ratio, "communication whatever the SM share: the busiest link direction at this nearness to its practical roof (link / link_roof) or more while no math pipe is that near its own (pipes / pipe_roof) and DRAM is below memory_dram: the warps the SMs hold wait on the link")
    transfer_link: float = setting(0.1, ratio, "communication below the link's roof: where most SMs are idle (else underfilled), PCIe or NVLink at least this share of its peak and above every math pipe's and DRAM's share: moving bytes is the GPU's main work (NCCL's point-to-point transfers run on few SMs by design); where the SMs are busy, the link at least this share while every math pipe and DRAM is below it (else mixed): the warps wait on the link (scattered host reads from kernels)")
    underfilled_sm_active: float = setting(0.5, ratio, "underfilled: SM activity below this while the GPU is busy")
    latency_occupancy: float = setting(0.1, ratio, "latency: SM occupancy below this ...")
    latency_work: float = setting(0.2, ratio, "... and every pipe and DRAM below this")
    window: float = setting(5.0, min_duration(0.0), "the class is judged from the readings' time-weighted mean over this much recent time (at least the last poll's window)")
    hold_polls: int = setting(2, whole_number(MAX_HOLD_POLLS, "a class that must win longer than that would never change"), "a new class is reported only once it has won this many polls in a row (2: no single poll flips it; at most 1000)")
    step: float = setting(0.25, ratio, "a change of regime: a window whose utilization, SM activity, busiest math pipe, DRAM or link lies more than this above or below that reading of every recent window (those of the last bottleneck.window) restarts the class's mean at it, so the class follows a job that starts, stops or changes phase within hold_polls polls; a job alternating busy and idle keeps both levels in its recent windows and its mean")
    margin: float = setting(0.02, ratio, "a new class is reported only where the one in place would not be chosen with any one reading moved up or down by this much (a job sitting on a threshold keeps its verdict); a reading of exactly 0 (nothing ran) is not moved, nor a positive one to 0")


@dataclass(frozen=True, slots=True)
class BottleneckClass:
    name: str
    meaning: str
    what_to_try: str
    colour: str  # how top paints it: one of TERMINAL_COLOURS


# The colours top paints a class in (ANSI's, or dim); the live page has its own palette (web/ui/page.css).
TERMINAL_COLOURS = ("dim", "red", "green", "yellow", "blue", "magenta", "cyan")


CLASSES: tuple[BottleneckClass, ...] = (
    BottleneckClass("idle", "no kernel runs on the GPU and no engine is busy", "Nothing runs: release the GPU or give it work (look for jobs that hold a GPU they do not use).", "dim"),
    BottleneckClass(
        "host",
        "the GPU has no work queued for a share of the time larger than its kernels could save, or only its copy engines work, well below the link's roof: it waits on the host (starved)",
        "Feed the GPU faster: more DataLoader workers, pinned memory and prefetch (pageable copies are staged by the CPU), fewer host syncs (.item(), .cpu()), CUDA graphs or torch.compile against launch overhead, larger batches.",
        "yellow",
    ),
    BottleneckClass(
        "compute",
        "the SMs are busy and a meaningful share of their cycles go to a math pipe (tensor, FP64, FP32 or FP16): the GPU's own arithmetic is the limit",
        "Raise MFU: move FP32 math to tensor cores (TF32, bf16, FP8), fused kernels, flash attention, larger matmul tiles; then scale out.",
        "green",
    ),
    BottleneckClass(
        "memory",
        "DRAM moves data at its practical roof, and DRAM is nearer its roof than any math pipe (the job's FLOP per byte is below the card's ridge point): bandwidth-bound",
        "Move fewer bytes: more work per byte read (larger batches per weight read), kernel fusion (torch.compile), quantized weights, KV cache or embedding tables, cached hot rows. A GPU with more bandwidth is faster here.",
        "blue",
    ),
    BottleneckClass(
        "memory_latency",
        "the SMs are busy and wait on memory, yet DRAM moves well below its roof and no math pipe does meaningful work: latency-bound, too few bytes in flight (scattered rows, small dependent loads, short kernels)",
        "Keep more bytes in flight: fuse the small kernels (torch.compile), larger or vectorized and coalesced loads, sort or batch gather indices, more independent work per kernel (larger batches). A GPU with more bandwidth will not be faster here.",
        "blue",
    ),
    BottleneckClass(
        "communication",
        "PCIe or NVLink moves data near its peak, or is the unit nearest its roof, while most SMs have nothing to run; or a link is at its practical roof with no math pipe or DRAM near theirs, or the only unit doing work, whatever the SM share (kernels reading host memory directly keep every SM's warps waiting on the link): moving bytes is the GPU's work and the link is the limit",
        "Move fewer bytes over the link: stage data through device memory in large batched copies instead of reading host memory from kernels (zero-copy, UVA; scattered host reads run at the link's latency, not its bandwidth: sort and coalesce them, cache the hot rows on the GPU), keep hot data resident on the GPU, batch or compress transfers, overlap them with compute, let NCCL use more channels (NCCL_MIN_NCHANNELS), use a faster path (NVLink, GPUDirect, C2C).",
        "cyan",
    ),
    BottleneckClass(
        "peer_wait",
        "the GPU is busy with nothing near a roof and idles (utilization - SM activity) clearly more than another GPU of its job: it waits inside collectives (NCCL) for that slower peer (judged across the job's GPUs, gpueff/pipeline/peers.py)",
        "Speed up the GPU this one waits for (gpueff_job_straggler names it), not this one: even out the work per rank (uneven batches, pipeline stages or experts), feed that rank's host faster, check its clocks, power and links.",
        "yellow",
    ),
    BottleneckClass(
        "underfilled",
        "the GPU is busy but most SMs have no block to run",
        "Give each kernel more parallel work (larger batches, more blocks), or share the GPU (MIG, MPS).",
        "red",
    ),
    BottleneckClass(
        "latency",
        "SMs are active but hold too few warps to hide latency, and no unit is near its roof",
        "Raise occupancy (more threads and blocks, fewer registers per thread) or batch dependent work.",
        "magenta",
    ),
    BottleneckClass(
        "mixed",
        "the GPU is fed and its SMs active, yet no unit the counters see is near its roof (on-chip memory, instruction issue or synchronisation)",
        "No single unit is the limit: profile a step with Nsight Compute to see which on-chip resource is.",
        "cyan",
    ),
    BottleneckClass(
        "unknown",
        "the readings needed are missing, or the counters read something physically impossible (gpueff_readings_implausible)",
        "Enable profiling (GPM on Hopper and newer, or DCGM), or fix the counters that gpueff_readings_implausible names.",
        "dim",
    ),
)
CLASS_NAMES = tuple(each.name for each in CLASSES)
WHAT_TO_TRY = {each.name: each.what_to_try for each in CLASSES}


@dataclass(frozen=True, slots=True)
class Activity:
    """The window readings a class is judged from; all cover the same interval. None: not read."""

    busy: float | None = None  # nvidia-smi's utilization over the window (gpueff/pipeline/derive.py busy_ratio)
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


def kernels_ran(activity: Activity) -> bool | None:
    """Whether any kernel ran in the window: any SM activity at all (one thread on one SM for 1 ms of
    a 1 s window still reads 7.6e-6 on a 132-SM GPU), else any engine activity; None where neither is read."""
    for value in (activity.sm_active, activity.engine):
        if value is not None:
            return value > 0
    return None


def roof_nearness(activity: Activity, limits: BottleneckThresholds) -> float:
    """How near the kernels run to their nearest practical roof while they run (0..1): the busiest
    math pipe and DRAM, each over its practical roof, over the share of the window kernels ran."""
    running = activity.engine if activity.engine is not None else activity.busy
    if not running:
        return 0.0
    near = max((activity.pipes or 0.0) / limits.pipe_roof, (activity.dram or 0.0) / limits.dram_roof)
    return min(1.0, near / running)


def host_bound(activity: Activity, busy: float, limits: BottleneckThresholds) -> bool:
    """The GPU waits on its feeder: it had nothing queued for 1 - busy of the window, at least
    1 - host_utilization, and at least what its kernels could save by reaching their roofs
    (busy x (1 - nearness)). Removing the gaps saves exactly that share; making the kernels
    faster saves at most the other, so the host is the larger lever. A job that waits longer than
    it works is host-bound whatever its kernels do; one that waits a few points is not, however
    utilization jitters."""
    gap = 1.0 - busy
    return busy < limits.host_utilization and gap >= busy * (1.0 - roof_nearness(activity, limits))


def link_at_roof(activity: Activity, limits: BottleneckThresholds) -> bool:
    """The busiest link direction is at its practical roof, no math pipe is as near its own and DRAM
    is below its roof band (``memory_dram``, the memory rule's): the time goes to moving bytes over
    the link, however many SMs hold warps waiting on it. Each unit is weighed against its own
    practical roof, so the test reads the same on every card."""
    link = activity.link
    if link is None or link < limits.communication_roof * limits.link_roof:
        return False
    return (activity.pipes or 0.0) < limits.communication_roof * limits.pipe_roof and (activity.dram or 0.0) < limits.memory_dram


def classify(activity: Activity, limits: BottleneckThresholds) -> str:
    """The class of one (possibly smoothed) window; the rules are checked in order."""
    sm_active = activity.sm_active
    link = activity.link
    if link is not None and link >= limits.communication_link and (sm_active is None or sm_active < limits.underfilled_sm_active):
        return "communication"
    if link_at_roof(activity, limits):
        return "communication"  # zero-copy kernels, many-channel collectives: the SMs hold warps that wait on the link
    busy = activity.busy
    if busy is None:
        return "unknown"
    if busy < limits.idle_utilization:
        ran = kernels_ran(activity)
        if ran is False:
            return "idle"
        if ran is None and busy == 0:
            return "unknown"  # nothing says whether a kernel ran: utilization's whole-percent samples miss short kernels
    if host_bound(activity, busy, limits):
        return "host"
    engine = activity.engine if activity.engine is not None else activity.engine_bound
    if engine is not None and engine < limits.idle_utilization:
        return "host"  # only the copy engines work, well below the link's roof: the host paces the transfers
    if sm_active is None:
        return "unknown"
    pipes = activity.pipes or 0.0
    dram = activity.dram or 0.0
    memory_side = dram / limits.dram_roof >= pipes / limits.pipe_roof  # FLOP per byte below the card's ridge point
    if dram >= limits.memory_dram and memory_side:
        return "memory"
    if pipes >= limits.compute_pipe and sm_active >= limits.underfilled_sm_active:
        return "compute"
    if sm_active < limits.underfilled_sm_active:
        if link is not None and link >= limits.transfer_link and link > max(pipes, dram):
            return "communication"  # the link is the unit nearest its roof, and the SMs only drive it
        return "underfilled"
    occupancy = activity.sm_occupancy
    if occupancy is not None and occupancy < limits.latency_occupancy and max(pipes, dram) < limits.latency_work:
        return "latency"
    if dram >= limits.memory_latency_dram and memory_side:
        return "memory_latency"
    if link is not None and link >= limits.transfer_link > max(pipes, dram):
        return "communication"  # the link is the only unit doing work: the SMs' warps wait on it (host reads from kernels)
    return "mixed"


def moved(value: float, margin: float, ceiling: float) -> tuple[float, ...]:
    """A reading moved down and up by ``margin``. Zero is no noise: a reading of exactly 0 (nothing
    ran, nothing moved) stays 0, and a positive one stays positive (no threshold sits below margin)."""
    if value == 0:
        return ()
    lower = value - margin if value > margin else value / 2
    return lower, min(value + margin, ceiling)


def classes_within_margin(activity: Activity, limits: BottleneckThresholds, margin: float) -> set[str]:
    """The classes this window would get if any one reading moved up or down by ``margin``. Where
    the class in place is among them, the readings sit on a threshold's edge and the class in place
    stands: a hysteresis band of ``margin`` around every threshold."""
    found = {classify(activity, limits)}
    for name in ACTIVITY_FIELDS:
        value = getattr(activity, name)
        if value is None:
            continue
        for each in moved(value, margin, math.inf if name == "link" else 1.0):
            found.add(classify(replace(activity, **{name: each}), limits))
    return found


# ---- counter health ---------------------------------------------------------------------------

IMPLAUSIBLE_MARGIN = 0.05  # two means over one window can differ by sampling skew; 5 points cannot
COUNTER_CHECKS: dict[str, str] = {
    "sm_above_engine": "SM activity exceeds the graphics/compute engine's activity by more than 5 points: an SM is only active while the engine is",
    "pipe_above_sm": "a math pipe (tensor, FP64/32/16, integer) is active more than SM activity allows (by more than 5 points): a pipe only issues on an active SM",
    "occupancy_above_sm": "SM occupancy exceeds SM activity by more than 5 points: a resident warp makes its SM active",
    "sm_zero_while_busy": "SM activity reads exactly 0 while the engine was active at least half the window: any kernel makes some SM active (one thread on one SM of 132 reads 0.0076)",
    "profiling_zero_under_load": "every profiling activity (and the links) reads exactly 0 while NVML's utilization reads at least 0.5: the profiling counters are not counting (DCGM's profiling module after an Xid, DCGM issue 303: utilization 100, every profiling field 0)",
}


def implausible_checks(readings: dict[str, float], nvml_utilization: float | None, link: float | None = None) -> dict[str, bool]:
    """Each counter-health check that can be judged from this window's profiling readings.

    ``readings``: the profiling activities by name (sm_active, graphics_active, sm_occupancy,
    tensor_active, ...); ``nvml_utilization``: NVML's own utilization figure (the window's mean of the
    driver's samples, else its latest; DCGM field 203), where read; ``link``:
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
