"""One frame of ``top``: a fleet line, a table row per GPU, and what to try for each class shown,
fitted to the terminal's width (80 columns and up) and, in a live terminal, its height. Colours
are ANSI escapes, only where asked for. Pure: text in, lines out."""

from __future__ import annotations

import re
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.overview import NO_PROFILING_FLAG, GpuOverview, JobOverview, fleet
from exporter.taxonomy import WHAT_TO_TRY

RESET = "\x1b[0m"
BOLD, DIM, RED, GREEN, YELLOW, BLUE, MAGENTA, CYAN = "\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[34m", "\x1b[35m", "\x1b[36m"
CLASS_COLOURS = {
    "idle": DIM,
    "host": YELLOW,
    "compute": GREEN,
    "memory": BLUE,
    "memory_latency": BLUE,
    "communication": CYAN,
    "peer_wait": YELLOW,
    "underfilled": RED,
    "latency": MAGENTA,
    "mixed": CYAN,
    "unknown": DIM,
}
FLAG_NAMES = {"high_util_low_sm": "busy-SMs-idle", "low_efficiency": "low-eff", "high_util_low_work": "no-work", NO_PROFILING_FLAG: "no-profiling"}
WIDE = 104  # from this width on, a bar shows utilization against SM activity, and the workload's name
BAR = 12


@dataclass(frozen=True, slots=True)
class Frame:
    source: tuple[str, ...]  # where the figures come from: ("nvml backend",), or the URL and what it says
    gpus: Sequence[GpuOverview]
    taken: float | None = None  # Unix time the figures were read; None before any were
    error: str = ""  # the last fetch's failure, shown above the (last good) figures
    jobs: Sequence[JobOverview] = ()  # the multi-GPU jobs (docs/jobs.md)


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f}%"


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _scaled(value: float | None, scale: float, digits: int = 1) -> str:
    return "–" if value is None else f"{value / scale:.{digits}f}"


def _si(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def flag_name(flag: str) -> str:
    """A flag as the table shows it: the mismatch rules shortened, a failed counter check as implausible."""
    return FLAG_NAMES.get(flag, f"implausible:{printable(flag)}")


def usage_bar(gpu: GpuOverview, width: int = BAR) -> str:
    """``█`` for SM activity, ``░`` for the rest of utilization (busy while the SMs idled), blank for idle."""
    if gpu.utilization is None:
        return " " * width
    busy = round(min(1.0, max(0.0, gpu.utilization)) * width)
    working = min(busy, round(min(1.0, max(0.0, gpu.sm_active or 0.0)) * width))
    return "█" * working + "░" * (busy - working) + " " * (width - busy)


class _Painter:
    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def __call__(self, text: str, style: str) -> str:
        return f"{style}{text}{RESET}" if self.colour and style else text


_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """Text from outside (GPU, trace and app names, URLs, errors) with control characters shown as
    '?': an escape sequence in a name must not drive the terminal."""
    return _CONTROLS.sub("?", text)


def visible_width(line: str) -> int:
    return len(_ESCAPES.sub("", line))


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _wrap_parts(parts: list[str], width: int) -> list[str]:
    """Parts joined with ' · ', onto as many lines as the width needs, never split inside a part."""
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return [_fit(line, width) for line in lines]


def job_line(job: JobOverview) -> str:
    """One multi-GPU job: its GPUs, efficiency, classes, and the GPU the others wait on."""
    classes = ", ".join(f"{name} {count}" for name, count in sorted(job.classes.items()))
    line = f"job {job.kind} {job.name}: GPUs {','.join(map(str, job.gpus))} · eff {_ratio(job.efficiency)} · {classes}"
    if job.nvlink_bytes_per_second is not None:
        line += f" · NVLink {_si(job.nvlink_bytes_per_second, 'B/s')}"
    if job.straggler is not None:
        line += f" · GPUs {','.join(map(str, job.waiting))} wait on GPU {job.straggler} ({_percent(job.peer_wait)} of the job's GPU time lost)"
    return line


def render(frame: Frame, width: int, height: int | None, colour: bool) -> list[str]:
    """The frame's lines, none wider than ``width`` characters (escapes aside); at most ``height``
    lines where a height is given (a live terminal), the GPUs that do not fit counted on the last."""
    paint = _Painter(colour)
    width = max(width, 40)
    wide = width >= WIDE
    summary = fleet(frame.gpus)
    taken = f" {time.strftime('%H:%M:%S', time.localtime(frame.taken))}" if frame.taken is not None else ""
    lines = _wrap_parts([f"gpu-efficiency-exporter top{taken}", *(printable(part) for part in frame.source)], width)
    if frame.error:
        lines.append(paint(_fit(printable(frame.error), width), BOLD + RED))
    parts = [
        f"{summary.gpus} GPUs ({summary.up} up)",
        f"util {_percent(summary.utilization)}",
        f"SM {_percent(summary.sm_active)}",
        f"eff {_ratio(summary.efficiency)}",
        f"{summary.flagged} busy-not-working",
    ]
    if summary.tensor_flops is not None:
        parts.append(f"tensor-busy {_si(summary.tensor_flops, 'FLOP/s')} of {_si(summary.peak_tensor_flops, 'FLOP/s')}")
    if summary.power_watts is not None:
        parts.append(_si(summary.power_watts, "W"))
    lines.extend(_wrap_parts(parts, width))
    head = f"{'GPU':>3} {'UTIL':>4} {'SM':>4} {'EFF':>4} {'CLASS':<11} {'TCBUSY':>7} {'TB/s':>5} {'POWER':>5}"
    if wide:
        head += f" {'UTIL vs SM':<{BAR + 2}} {'WORKLOAD':<18}"
    lines.append(paint(head + " FLAGS", BOLD))
    rows: list[str] = []
    for gpu in frame.gpus:
        name = _fit(printable(gpu.bottleneck), 11) if gpu.up and gpu.bottleneck else "down" if not gpu.up else "–"
        cells = f"{gpu.index:>3} {_percent(gpu.utilization):>4} {_percent(gpu.sm_active):>4} "
        efficiency = _ratio(gpu.efficiency)
        style = "" if gpu.efficiency is None else RED if gpu.efficiency < 0.3 else YELLOW if gpu.efficiency < 0.7 else GREEN
        row = cells + paint(f"{efficiency:>4}", style) + " " + paint(f"{name:<11}", CLASS_COLOURS.get(name, DIM))
        row += f" {_scaled(gpu.tensor_flops, 1e12):>7} {_scaled(gpu.dram_bytes_per_second, 1e12, 2):>5} {_scaled(gpu.power_watts, 1.0, 0) + 'W' if gpu.power_watts is not None else '–':>5}"
        if wide:
            workload = _fit(printable(gpu.source or gpu.model), 18)
            row += f" [{usage_bar(gpu)}] {workload:<18}"
        flags = " ".join(flag_name(flag) for flag in gpu.flags)
        if flags:
            room = width - visible_width(row) - 1
            row += " " + paint(_fit(flags, max(1, room)), YELLOW if gpu.flags == (NO_PROFILING_FLAG,) else RED)
        rows.append(row.rstrip())
        for app in gpu.apps:
            figures = f"{_si(app.throughput, app.unit + '/s')} · {_si(app.units_per_joule, app.unit + '/J')}" if app.up else "not answering"
            rows.append(_fit(printable(f"    └ {app.name}: {figures}"), width))
    for job in frame.jobs:
        rows.append(paint(_fit(printable(job_line(job)), width), RED if job.straggler is not None else ""))
    shown = sorted({gpu.bottleneck for gpu in frame.gpus if gpu.up and gpu.bottleneck and gpu.bottleneck != "idle"})
    advice = [line for name in shown if name in WHAT_TO_TRY for line in textwrap.wrap(f"{name}: {WHAT_TO_TRY[name]}", width, subsequent_indent="  ")]
    if height is not None:  # the rows first; what to try only in the room they leave
        room = height - len(lines)
        if len(rows) > room:
            hidden = len(rows) - room + 1
            rows = rows[: max(0, room - 1)] + [_fit(f"… {hidden} more rows: a taller terminal shows them, or top --once | less", width)]
        advice = advice[: max(0, room - len(rows))]
    return lines + rows + [paint(line, DIM) for line in advice]
