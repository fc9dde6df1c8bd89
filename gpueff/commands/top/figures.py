"""How ``top`` writes a figure, a flag, a class, an owner and a job in a few columns, and the
colours (ANSI escapes, only where asked for) it paints them in. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from gpueff.commands.top.text import printable
from gpueff.overview import NO_PROFILING_FLAG, GpuOverview, JobOverview
from gpueff.taxonomy import CLASSES

RESET = "\x1b[0m"
BOLD, DIM, REVERSE, RED, GREEN, YELLOW, BLUE, MAGENTA, CYAN = "\x1b[1m", "\x1b[2m", "\x1b[7m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[34m", "\x1b[35m", "\x1b[36m"
TERMINAL_ESCAPES = {"dim": DIM, "red": RED, "green": GREEN, "yellow": YELLOW, "blue": BLUE, "magenta": MAGENTA, "cyan": CYAN}  # taxonomy.TERMINAL_COLOURS
CLASS_COLOURS = {each.name: TERMINAL_ESCAPES[each.colour] for each in CLASSES}  # each class's colour, from its row
SHORT_CLASSES = {"communication": "comm", "memory_latency": "mem-latency"}  # the class column is 11 wide
FLAG_NAMES = {"high_util_low_sm": "busy-SMs-idle", "low_efficiency": "low-eff", "high_util_low_work": "no-work", NO_PROFILING_FLAG: "no-profiling"}
BAR = 12
GIB = 1024**3


class Painter:
    """Paints text in a style where colours are on; the selected row's reverse video always (it
    is no colour, and a live terminal needs it to show the selection)."""

    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def __call__(self, text: str, style: str) -> str:
        return f"{style}{text}{RESET}" if self.colour and style else text

    @staticmethod
    def selected(line: str) -> str:
        return f"{REVERSE}{line.replace(RESET, RESET + REVERSE)}{RESET}"


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f}%"


def ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def scaled(value: float | None, scale: float, digits: int = 1) -> str:
    return "–" if value is None else f"{value / scale:.{digits}f}"


def si(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def memory(used: float | None, total: float | None) -> str:
    """Device memory in at most 8 columns, GiB as nvidia-smi's total reads: 71/141G, 0.4/80G."""
    if used is None:
        return "–"
    shown = f"{used / GIB:.1f}" if used < 9.95 * GIB else f"{used / GIB:.0f}"
    return f"{shown}/{total / GIB:.0f}G" if total else f"{shown}G"


def temperature(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}C"


def watts(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}W"


def flag_name(flag: str) -> str:
    """A flag as the table shows it: the mismatch rules shortened, a failed counter check as implausible."""
    return FLAG_NAMES.get(flag, f"implausible:{printable(flag)}")


def class_name(gpu: GpuOverview) -> str:
    return (printable(gpu.bottleneck) if gpu.bottleneck else "–") if gpu.up else "down"


def usage_bar(gpu: GpuOverview, width: int = BAR) -> str:
    """``█`` for SM activity, ``░`` for the rest of utilization (busy while the SMs idled), blank for idle."""
    if gpu.utilization is None:
        return " " * width
    busy = round(min(1.0, max(0.0, gpu.utilization)) * width)
    working = min(busy, round(min(1.0, max(0.0, gpu.sm_active or 0.0)) * width))
    return "█" * working + "░" * (busy - working) + " " * (width - busy)


def waste_text(seconds: float | None) -> str:
    """GPU time in at most 5 characters: 0.3s, 42s, 9.5m, 57m, 3.2h, 240h."""
    if seconds is None:
        return "–"
    if seconds < 9.95:
        return f"{seconds:.1f}s"
    if seconds < 59.5:
        return f"{seconds:.0f}s"
    if seconds < 595:
        return f"{seconds / 60:.1f}m"
    if seconds < 3570:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h" if seconds < 35640 else f"{seconds / 3600:.0f}h"


def job_line(job: JobOverview) -> str:
    """One multi-GPU job: its GPUs, efficiency, classes, and the GPU the others wait on."""
    classes = ", ".join(f"{name} {count}" for name, count in sorted(job.classes.items()))
    line = f"job {job.kind} {job.name}: GPUs {','.join(map(str, job.gpus))} · eff {ratio(job.efficiency)} · {classes}"
    if job.nvlink_bytes_per_second is not None:
        line += f" · NVLink {si(job.nvlink_bytes_per_second, 'B/s')}"
    if job.straggler is not None:
        waiting = f"GPU {job.waiting[0]} waits" if len(job.waiting) == 1 else f"GPUs {','.join(map(str, job.waiting))} wait"
        line += f" · {waiting} on GPU {job.straggler} ({percent(job.peer_wait)} of the job's GPU time lost)"
    return line


def _bare_users(gpu: GpuOverview, users: Mapping[str, str]) -> list[str]:
    """The Unix users whose processes hold the GPU outside any pod and job (a bare host's owners)."""
    found: dict[str, None] = {}
    for row in gpu.processes.rows if gpu.processes is not None else ():
        if row.holder_kind in ("process", "user"):
            uid = row.holder.split(":", 1)[0] or row.user_id
            found[users.get(uid) or uid] = None
    return list(found)


def whose(gpu: GpuOverview, users: Mapping[str, str] | None = None) -> str:
    """Whose the GPU is, shown safely: its pod (namespace/pod, +N more under time-slicing), else its
    Slurm jobs, else on a bare host the Unix users of its processes; else why none is named ("free",
    "? <reason>"); "" where nothing is known."""
    if gpu.pods:
        first = gpu.pods[0]
        more = f" +{len(gpu.pods) - 1}" if len(gpu.pods) > 1 else ""
        return printable(f"{first.namespace}/{first.pod}{more}")
    if gpu.slurm_jobs:
        return printable("job " + ",".join(job.job_id for job in gpu.slurm_jobs))
    bare = _bare_users(gpu, users or {})
    if bare:
        return printable("user " + ",".join(bare))
    if gpu.attribution is not None and gpu.attribution[1] not in ("ok", "processes_not_listed"):
        return "free" if gpu.attribution[1] == "no_process" else "? " + gpu.attribution[1].replace("_", " ")
    return ""
