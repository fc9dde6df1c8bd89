"""One frame of ``top``: a fleet line, a table row per GPU in the chosen order, and what to try for
each class shown (the flagged GPUs' first), fitted to the terminal's width (80 columns and up) and,
in a live terminal, its height (the rows scroll); or the help screen. Colours are ANSI escapes, only
where asked for. Widths are the columns a terminal gives the text (``display_width``: a CJK
character takes two), never its length. Pure: text in, lines out."""

from __future__ import annotations

import textwrap
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter.commands.top.processes import header, listed_anywhere, process_lines
from exporter.commands.top.text import display_width, fit, pad, printable, visible_width
from exporter.commands.top.view import View, ordered
from exporter.overview import NO_PROFILING_FLAG, GpuOverview, JobOverview, fleet
from exporter.taxonomy import CLASSES, WHAT_TO_TRY

RESET = "\x1b[0m"
BOLD, DIM, RED, GREEN, YELLOW, BLUE, MAGENTA, CYAN = "\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[34m", "\x1b[35m", "\x1b[36m"
TERMINAL_ESCAPES = {"dim": DIM, "red": RED, "green": GREEN, "yellow": YELLOW, "blue": BLUE, "magenta": MAGENTA, "cyan": CYAN}  # taxonomy.TERMINAL_COLOURS
CLASS_COLOURS = {each.name: TERMINAL_ESCAPES[each.colour] for each in CLASSES}  # each class's colour, from its row
SHORT_CLASSES = {"communication": "comm", "memory_latency": "mem-latency"}  # the class column is 11 wide
FLAG_NAMES = {"high_util_low_sm": "busy-SMs-idle", "low_efficiency": "low-eff", "high_util_low_work": "no-work", NO_PROFILING_FLAG: "no-profiling"}
WIDE = 112  # from this width on, a bar shows utilization against SM activity, and whose the GPU is (or its workload's name)
BAR = 12
WHOSE_WIDE, WHOSE_NARROW = 22, 14
ADVICE_KEPT = 3  # lines of advice a short terminal keeps below the rows it scrolls
DEFAULT_VIEW = View()


@dataclass(frozen=True, slots=True)
class Frame:
    source: tuple[str, ...]  # where the figures come from: ("nvml backend",), or the URL and what it says
    gpus: Sequence[GpuOverview]
    taken: float | None = None  # Unix time the figures were read; None before any were
    error: str = ""  # the last fetch's failure, shown above the (last good) figures
    jobs: Sequence[JobOverview] = ()  # the multi-GPU jobs (docs/jobs.md)
    waste: Mapping[str, float] = field(default_factory=dict)  # uuid -> GPU-seconds busy while the SMs idled over top's window
    users: Mapping[str, str] = field(default_factory=dict)  # uid -> user name, where top reads its own host's GPUs


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


def _wrap_parts(parts: list[str], width: int) -> list[str]:
    """Parts joined with ' · ', onto as many lines as the width needs, never split inside a part."""
    lines = [parts[0]]
    for part in parts[1:]:
        if display_width(lines[-1]) + 3 + display_width(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return [fit(line, width) for line in lines]


def job_line(job: JobOverview) -> str:
    """One multi-GPU job: its GPUs, efficiency, classes, and the GPU the others wait on."""
    classes = ", ".join(f"{name} {count}" for name, count in sorted(job.classes.items()))
    line = f"job {job.kind} {job.name}: GPUs {','.join(map(str, job.gpus))} · eff {_ratio(job.efficiency)} · {classes}"
    if job.nvlink_bytes_per_second is not None:
        line += f" · NVLink {_si(job.nvlink_bytes_per_second, 'B/s')}"
    if job.straggler is not None:
        waiting = f"GPU {job.waiting[0]} waits" if len(job.waiting) == 1 else f"GPUs {','.join(map(str, job.waiting))} wait"
        line += f" · {waiting} on GPU {job.straggler} ({_percent(job.peer_wait)} of the job's GPU time lost)"
    return line


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


def whose(gpu: GpuOverview) -> str:
    """Whose the GPU is, shown safely: its pod (namespace/pod, +N more under time-slicing), else its
    Slurm jobs; "" where neither is known."""
    if gpu.pods:
        first = gpu.pods[0]
        more = f" +{len(gpu.pods) - 1}" if len(gpu.pods) > 1 else ""
        return printable(f"{first.namespace}/{first.pod}{more}")
    if gpu.slurm_jobs:
        return printable("job " + ",".join(job.job_id for job in gpu.slurm_jobs))
    if gpu.attribution is not None and gpu.attribution[1] not in ("ok", "processes_not_listed"):
        return "free" if gpu.attribution[1] == "no_process" else "? " + gpu.attribution[1].replace("_", " ")
    return ""


def attribution_parts(gpus: Sequence[GpuOverview]) -> list[str]:
    """Whose the GPUs are (gpueff_gpu_attribution_info): how many each path named, then each
    reason none did with its GPUs, the most GPUs first and the free ones last; none where no GPU says."""
    named: Counter[str] = Counter()
    missing: dict[str, list[int]] = {}
    for gpu in gpus:
        if gpu.attribution is not None:
            path, reason = gpu.attribution
            if reason == "ok":
                named[path] += 1
            else:
                missing.setdefault(reason, []).append(gpu.index)
    if not named and not missing:
        return []
    parts = ["owners: " + (", ".join(f"{'demo (declared)' if path == 'demo' else path} {count}" for path, count in sorted(named.items())) or "none named")]
    for reason, indexes in sorted(missing.items(), key=lambda item: (item[0] == "no_process", -len(item[1]), item[0])):
        listed = ", ".join(str(index) for index in indexes[:6]) + (", …" if len(indexes) > 6 else "")
        parts.append(f"{'free' if reason == 'no_process' else reason.replace('_', ' ')}: GPU {listed}")
    return parts


def advice(gpus: Sequence[GpuOverview], waste: Mapping[str, float], width: int) -> tuple[list[str], int]:
    """What to try for each class shown (idle aside), the classes of flagged GPUs first, then by
    waste; each names its GPUs. Also how many of the lines are the flagged GPUs' classes'."""
    by_waste = ordered(gpus, waste)
    first = [gpu for gpu in by_waste if gpu.up and gpu.mismatch] + [gpu for gpu in by_waste if not (gpu.up and gpu.mismatch)]
    classes: dict[str, list[int]] = {}
    flagged: set[str] = set()
    for gpu in first:
        if gpu.up and gpu.bottleneck in WHAT_TO_TRY and gpu.bottleneck != "idle":
            classes.setdefault(gpu.bottleneck, []).append(gpu.index)
            if gpu.mismatch:
                flagged.add(gpu.bottleneck)
    lines: list[str] = []
    urgent = 0
    for name, indexes in classes.items():
        listed = ", ".join(str(index) for index in indexes[:4]) + (", …" if len(indexes) > 4 else "")
        wrapped = textwrap.wrap(f"{name} (GPU {listed}): {WHAT_TO_TRY[name]}", width, subsequent_indent="  ")
        lines.extend(wrapped)
        urgent += len(wrapped) if name in flagged else 0
    return lines, urgent


HELP = [
    ("Keys", ""),
    ("q, Ctrl-C", "quit"),
    ("h, ?", "this help; any key closes it"),
    ("w u s e p i", "order by waste, utilization, SM activity, efficiency, power, GPU index"),
    ("< >", "the previous or next order;  r  reverse it"),
    ("↑ ↓, k j", "scroll a row;  PgUp PgDn, b space  a page;  Home End, g G  top, end"),
    ("Columns", ""),
    ("UTIL", "utilization: the share of time a kernel ran (what nvidia-smi shows)"),
    ("SM", "SM activity: the share of the SMs with work"),
    ("EFF", "efficiency: SM activity over utilization"),
    ("CLASS", "the bottleneck class (comm: communication, mem-latency: memory_latency); what to try for each is below the table"),
    ("WASTE", "GPU time busy while the SMs idled, over the last 10 minutes (since top started, if less)"),
    ("TCBUSY TB/s", "busy tensor cycles at full rate in TFLOP/s (an upper bound of the work), estimated DRAM traffic"),
    ("WHOSE", "the pod (namespace/pod), else the Slurm job, else why no owner is named (free: no process holds it); from 112 columns the replayed trace where none of these"),
    ("owners:", "the line above the table: how many GPUs each path named the owner of, then each reason none did, with its GPUs (docs/troubleshooting.md)"),
    ("FLAGS", "busy-SMs-idle, no-work: busy but not working; low-eff; no-profiling; implausible:<check>"),
]


def help_lines(width: int) -> list[str]:
    lines = ["gpu-efficiency-exporter top: help (any key returns to the table)"]
    for name, text in HELP:
        if not text:
            lines.append(name)
            continue
        lines.extend(textwrap.wrap(f"  {name:<13}{text}", width, subsequent_indent=" " * 15))
    return [fit(line, width) for line in lines]


def _panel(gpus: Sequence[GpuOverview], users: Mapping[str, str], width: int, paint: _Painter) -> list[str]:
    """The process panel (processes.py) under its header; none where no GPU lists processes."""
    if not listed_anywhere(gpus):
        return []
    found = process_lines(gpus, users, width)
    return [paint(header(width), BOLD), *(found or [fit("no compute process on any GPU", width)])]


def _cut(panel: list[str], room: int, width: int, paint: _Painter) -> list[str]:
    """The panel in ``room`` lines: none under two, else cut with a line saying how many rows did not fit."""
    if len(panel) <= room:
        return panel
    if room < 2:
        return []
    return [*panel[: room - 1], paint(fit(f"… {len(panel) - room + 1} more: top --once shows every process", width), DIM)]


@dataclass(frozen=True, slots=True)
class Screen:
    lines: list[str]
    scroll: int  # the first table row shown (the view's, kept within the rows)
    page: int  # table lines one screen shows


def render(frame: Frame, width: int, height: int | None, colour: bool, view: View = DEFAULT_VIEW, live: bool = False) -> Screen:
    """The frame's lines, none wider than ``width`` characters (escapes aside). With a ``height``
    (a live terminal), at most that many lines: the table rows scroll from ``view.scroll`` where
    they do not fit, and the advice for the flagged GPUs' classes keeps up to three lines."""
    paint = _Painter(colour)
    width = max(width, 40)
    if view.help:
        lines = help_lines(width)
        return Screen(lines[:height] if height is not None else lines, view.scroll, 0)
    wide = width >= WIDE
    summary = fleet(frame.gpus)
    taken = f" {time.strftime('%H:%M:%S', time.localtime(frame.taken))}" if frame.taken is not None else ""
    hints = (view.label, "h: help") if live else (view.label,)
    lines = _wrap_parts([f"gpu-efficiency-exporter top{taken}", *(printable(part) for part in frame.source), *hints], width)
    if frame.error:
        lines.append(paint(fit(printable(frame.error), width), BOLD + RED))
    parts = [
        f"{summary.gpus} GPUs ({summary.up} up)",
        f"util {_percent(summary.utilization)}",
        f"SM {_percent(summary.sm_active)}",
        f"eff {_ratio(summary.efficiency)}",
        f"{summary.flagged} busy-not-working",
    ]
    if summary.tensor_flops is not None:
        parts.append(f"tensor-busy {_si(summary.tensor_flops, 'FLOP/s')} of {_si(summary.peak_tensor_flops, 'FLOP/s')}")
    if summary.estimated_flops is not None:
        parts.append(f"work est. {_si(summary.estimated_flops, 'FLOP/s')} ({summary.estimated_gpus} of {summary.up})")
    if summary.power_watts is not None:
        parts.append(_si(summary.power_watts, "W"))
    lines.extend(_wrap_parts(parts, width))
    whose_parts = attribution_parts(frame.gpus)
    if whose_parts:
        lines.extend(_wrap_parts(whose_parts, width))
    owned = any(gpu.pods or gpu.slurm_jobs for gpu in frame.gpus)
    narrow_whose = owned and not wide  # at 80 columns a WHOSE column takes the place of TB/s
    head = f"{'GPU':>3} {'UTIL':>4} {'SM':>4} {'EFF':>4} {'CLASS':<11} {'WASTE':>5} {'TCBUSY':>7}" + ("" if narrow_whose else f" {'TB/s':>5}") + f" {'POWER':>5}"
    if wide:
        head += f" {'UTIL vs SM':<{BAR + 2}} {'WHOSE':<{WHOSE_WIDE}}"
    elif narrow_whose:
        head += f" {'WHOSE':<{WHOSE_NARROW}}"
    lines.append(paint(head + " FLAGS", BOLD))
    rows: list[str] = []
    order = ordered(frame.gpus, frame.waste, view.sort, view.reverse)
    for gpu in order:
        name = printable(gpu.bottleneck) if gpu.up and gpu.bottleneck else "down" if not gpu.up else "–"
        cells = f"{gpu.index:>3} {_percent(gpu.utilization):>4} {_percent(gpu.sm_active):>4} "
        efficiency = _ratio(gpu.efficiency)
        style = "" if gpu.efficiency is None else RED if gpu.efficiency < 0.3 else YELLOW if gpu.efficiency < 0.7 else GREEN
        row = cells + paint(f"{efficiency:>4}", style) + " " + paint(pad(SHORT_CLASSES.get(name, name), 11), CLASS_COLOURS.get(name, DIM))
        row += f" {waste_text(frame.waste.get(gpu.uuid)):>5} {_scaled(gpu.tensor_flops, 1e12):>7}"
        if not narrow_whose:
            row += f" {_scaled(gpu.dram_bytes_per_second, 1e12, 2):>5}"
        row += f" {_scaled(gpu.power_watts, 1.0, 0) + 'W' if gpu.power_watts is not None else '–':>5}"
        if wide:
            row += f" [{usage_bar(gpu)}] {pad(whose(gpu) or printable(gpu.source or gpu.model), WHOSE_WIDE)}"
        elif narrow_whose:
            row += f" {pad(whose(gpu), WHOSE_NARROW)}"
        flags = " ".join(flag_name(flag) for flag in gpu.flags)
        flag_style = YELLOW if gpu.flags == (NO_PROFILING_FLAG,) else RED
        if flags and display_width(flags) <= width - visible_width(row) - 1:
            row += " " + paint(flags, flag_style)
        rows.append(row.rstrip())
        if flags and flags not in row:  # too many to fit beside the figures: on their own line below, whole
            rows.append(paint(fit(f"{'':>5}{flags}", width), flag_style))
        for app in gpu.apps:
            figures = f"{_si(app.throughput, app.unit + '/s')} · {_si(app.units_per_joule, app.unit + '/J')}" if app.up else "not answering"
            rows.append(fit(printable(f"    └ {app.name}: {figures}"), width))
    for job in frame.jobs:
        rows.append(paint(fit(printable(job_line(job)), width), RED if job.straggler is not None else ""))
    tips, urgent = advice(frame.gpus, frame.waste, width)
    styled = [paint(line, "" if number < urgent else DIM) for number, line in enumerate(tips)]
    panel = _panel(order, frame.users, width, paint)
    if height is None:
        return Screen(lines + rows + styled + panel, 0, len(rows))
    room = max(0, height - len(lines))
    if len(rows) + len(tips) <= room:
        return Screen(lines + rows + styled + _cut(panel, room - len(rows) - len(tips), width, paint), 0, len(rows))  # the panel takes what is left
    kept = min(len(tips), max(min(ADVICE_KEPT, len(tips)), room - len(rows)))  # the flagged GPUs' advice stays on screen
    if len(rows) <= room - kept:
        return Screen(lines + rows + styled[: room - len(rows)], 0, len(rows))
    page = max(1, room - kept - 1)  # one line says which rows show
    scroll = min(view.scroll, max(0, len(rows) - page))
    shown = rows[scroll : scroll + page]
    where = f"lines {scroll + 1}-{scroll + len(shown)} of {len(rows)} · ↑↓ PgUp PgDn scroll" if live else f"… {len(rows) - len(shown)} more lines: top --once | less shows them"
    return Screen((lines + shown + [paint(fit(where, width), DIM)] + styled[:kept])[: max(height, 1)], scroll, page)
