"""One frame of ``top``: the fleet lines, a table row per GPU in the chosen order (those the
filter finds), what to try for each class shown (the flagged GPUs' first) and the process panel,
fitted to the terminal's width (columns drop by priority: columns.py) and, in a live terminal, its
height (the rows scroll to keep the selected GPU in sight; the process panel takes the rows left);
or the help, the sort menu, or the selected GPU's detail. Colours are ANSI escapes, only where asked
for. Widths are the columns a terminal gives the text (``display_width``: a CJK character takes
two), never its length. Pure: text in, lines out."""

from __future__ import annotations

import textwrap
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpueff.commands.top.columns import SHORT_FLAGS, WIDE, Cells, header, layout, row
from gpueff.commands.top.detail import detail_lines
from gpueff.commands.top.figures import (
    BOLD,
    DIM,
    NO_PROFILING_FLAG,
    RED,
    YELLOW,
    Painter,
    flag_name,
    job_line,
    percent,
    ratio,
    si,
)
from gpueff.commands.top.processes import header as process_header
from gpueff.commands.top.processes import listed_anywhere, process_lines
from gpueff.commands.top.search import found
from gpueff.commands.top.text import display_width, fit, joined, printable, visible_width
from gpueff.commands.top.view import SORTS, View, ordered
from gpueff.overview import GpuOverview, JobOverview, fleet
from gpueff.taxonomy import WHAT_TO_TRY

ADVICE_KEPT = 3  # lines of advice a short terminal keeps below the rows it scrolls
MIN_WIDTH = 40  # narrower terminals get lines of 40 columns
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
    ("q, F10, Ctrl-C", "quit"),
    ("h, ?, F1", "this help; any key closes it"),
    ("↑ ↓, k j", "select a GPU;  PgUp PgDn, b space  a page;  Home End, g G  the first, the last"),
    ("Enter, →", "the selected GPU's detail and all its processes (Esc, Enter or ← returns; ↑ ↓ scroll; Tab, n p the next, previous GPU)"),
    ("/, F3, F4", "filter: type words (Enter keeps them, Esc clears); each must be in the GPU's name, model, trace or processes' names, pods, namespaces, jobs, users or class; name a field to look only there: name: pod: ns: job: user: class:"),
    ("F6", "the sort menu (↑ ↓ and Enter, or the order's letter)"),
    ("w u s e p m t i", "order by waste, utilization, SM activity, efficiency, power, memory, temperature, GPU index"),
    ("< >", "the previous or next order;  r  reverse it;  Esc  clears the filter"),
    ("Columns", ""),
    ("UTIL", "utilization: the share of time a kernel ran (what nvidia-smi shows)"),
    ("SM", "SM activity: the share of the SMs with work"),
    ("EFF", "efficiency: SM activity over utilization"),
    ("CLASS", "the bottleneck class (comm: communication, mem-latency: memory_latency); what to try for each is below the table"),
    ("WASTE", "GPU time busy while the SMs idled, over the last 10 minutes (since top started, if less)"),
    ("MEM TEMP", "device memory used of the total (GiB), GPU temperature"),
    ("TCBUSY TB/s", "busy tensor cycles at full rate in TFLOP/s (an upper bound of the work), estimated DRAM traffic"),
    ("WHOSE", "the pod (namespace/pod), else the Slurm job, else a bare host's Unix user, else why no owner is named (free: no process holds it); from 112 columns the replayed trace where none of these"),
    ("owners:", "the line above the table: how many GPUs each path named the owner of, then each reason none did, with its GPUs (docs/troubleshooting.md)"),
    ("FLAGS", "busy-SMs-idle, no-work: busy but not working; low-eff; no-profiling; implausible:<check>"),
    ("processes", "below the advice: PID, user, GPU memory, BUSY (share of the GPU's busy time), owner (pod UID, Slurm job, or a bare host's user), COMMAND (the program's name; – with process_names: false)"),
    ("narrow", "columns give way from the right by priority: TB/s and TCBUSY first, then TEMP, POWER, MEM, WHOSE, WASTE, EFF"),
]


def help_lines(width: int) -> list[str]:
    lines = ["gpu-efficiency-exporter top: help (any key returns to the table)"]
    for name, text in HELP:
        if not text:
            lines.append(name)
            continue
        lines.extend(textwrap.wrap(f"  {name:<16}{text}", width, subsequent_indent=" " * 18))
    return [fit(line, width) for line in lines]


def _panel(gpus: Sequence[GpuOverview], users: Mapping[str, str], width: int, paint: Painter) -> list[str]:
    """The process panel (processes.py) under its header; none where no GPU lists processes."""
    if not listed_anywhere(gpus):
        return []
    rows = process_lines(gpus, users, width)
    return [paint(process_header(width), BOLD), *(rows or [fit("no compute process on these GPUs", width)])]


def _cut(panel: list[str], room: int, width: int, paint: Painter) -> list[str]:
    """The panel in ``room`` lines, cut with a line saying how many rows did not fit (one line: only that)."""
    if len(panel) <= room:
        return panel
    if room < 1:
        return []
    more = len(panel) - room + (1 if room > 1 else 0)  # rows of the panel not shown (the header aside, where it is not)
    return [*panel[: room - 1], paint(fit(f"… {more} {'more ' if room > 1 else ''}processes: Enter on a GPU shows all of its own, top --once every one", width), DIM)]


@dataclass(frozen=True, slots=True)
class Screen:
    lines: list[str]
    scroll: int  # the first line shown of what scrolls (the table's rows, or the detail), kept within them
    page: int  # lines of it one screen shows
    order: tuple[str, ...] = ()  # the uuids of the GPUs listed, in their order (what the arrows move through)


def _head(frame: Frame, width: int, view: View, live: bool, listed: int, paint: Painter) -> list[str]:
    """The lines above the table: where the figures come from, the order and filter, the fleet, the owners."""
    summary = fleet(frame.gpus)
    taken = f" {time.strftime('%H:%M:%S', time.localtime(frame.taken))}" if frame.taken is not None else ""
    chosen = f"filter {printable(view.query)!r}: {listed} of {len(frame.gpus)} GPUs" if view.query else ""
    hints = [view.label, *([chosen] if chosen else []), *(["h: help"] if live else [])]
    lines = joined([f"gpu-efficiency-exporter top{taken}", *(printable(part) for part in frame.source), *hints], width)
    if frame.error:
        lines.append(paint(fit(printable(frame.error), width), BOLD + RED))
    parts = [f"{summary.gpus} GPUs ({summary.up} up)", f"util {percent(summary.utilization)}", f"SM {percent(summary.sm_active)}", f"eff {ratio(summary.efficiency)}", f"{summary.flagged} busy-not-working"]
    if summary.tensor_flops is not None:
        parts.append(f"tensor-busy {si(summary.tensor_flops, 'FLOP/s')} of {si(summary.peak_tensor_flops, 'FLOP/s')}")
    if summary.estimated_flops is not None:
        parts.append(f"work est. {si(summary.estimated_flops, 'FLOP/s')} ({summary.estimated_gpus} of {summary.up})")
    if summary.power_watts is not None:
        parts.append(si(summary.power_watts, "W"))
    lines.extend(joined(parts, width))
    owners = attribution_parts(frame.gpus)
    if owners:
        lines.extend(joined(owners, width))
    return lines


def _rows(frame: Frame, gpus: Sequence[GpuOverview], width: int, paint: Painter) -> tuple[list[str], dict[str, int], str]:
    """The table's rows (a GPU's flags below it where they do not fit beside, its apps below), the
    row each GPU starts at, and the header."""
    owned = any(gpu.pods or gpu.slurm_jobs or (gpu.attribution is not None and gpu.attribution[1] not in ("ok", "processes_not_listed")) for gpu in frame.gpus)
    short = [size for gpu in gpus if (size := display_width(" ".join(flag_name(flag) for flag in gpu.flags))) <= SHORT_FLAGS]
    columns = layout(width, owned, max(short, default=0))
    cells = Cells(frame.waste, frame.users, width >= WIDE)
    rows: list[str] = []
    starts: dict[str, int] = {}
    for gpu in gpus:
        line = row(gpu, columns, cells, paint)
        flags = " ".join(flag_name(flag) for flag in gpu.flags)
        flag_style = YELLOW if gpu.flags == (NO_PROFILING_FLAG,) else RED
        beside = bool(flags) and display_width(flags) <= width - visible_width(line) - 1
        starts[gpu.uuid] = len(rows)
        rows.append((line + " " + paint(flags, flag_style) if beside else line).rstrip())
        if flags and not beside:  # too many to fit beside the figures: on their own line below, whole
            rows.append(paint(fit(f"{'':>5}{flags}", width), flag_style))
        for app in gpu.apps:
            figures = f"{si(app.throughput, app.unit + '/s')} · {si(app.units_per_joule, app.unit + '/J')}" if app.up else "not answering"
            rows.append(fit(printable(f"    └ {app.name}: {figures}"), width))
    listed = {gpu.index for gpu in gpus}
    for job in frame.jobs:
        if listed & set(job.gpus):
            rows.append(paint(fit(printable(job_line(job)), width), RED if job.straggler is not None else ""))
    return rows, starts, paint(header(columns), BOLD)


def _sort_menu(head: list[str], view: View, width: int, height: int | None) -> Screen:
    lines = [*head, "Sort by (↑ ↓ and Enter, or the letter; Esc closes):"]
    letters = {name: letter for letter, name in (("w", "waste"), ("u", "utilization"), ("s", "sm_active"), ("e", "efficiency"), ("p", "power"), ("m", "memory"), ("t", "temperature"), ("i", "index"))}
    for number, (name, (_, label, most_first)) in enumerate(SORTS.items()):
        line = fit(f"  {'*' if name == view.sort else ' '} {letters.get(name, ' ')}  {label}, {'most' if most_first else 'least'} first", width)
        lines.append(Painter.selected(line) if number == view.choice else line)
    return Screen(lines[:height] if height is not None else lines, 0, 0)


def _detail(frame: Frame, gpu: GpuOverview, head: list[str], view: View, width: int, height: int | None, paint: Painter, order: tuple[str, ...]) -> Screen:
    body = detail_lines(gpu, frame.jobs, frame.waste, frame.users, width, paint)
    if height is None:
        return Screen(head + body, 0, len(body), order)
    footer = paint(fit("Esc, Enter or ←: the table · ↑ ↓ PgUp PgDn: scroll · Tab, n p: the next, previous GPU", width), DIM)
    page = max(1, height - len(head) - 1)
    scroll = min(view.scroll, max(0, len(body) - page))
    return Screen((head + body[scroll : scroll + page] + [footer])[: max(height, 1)], scroll, page, order)


def render(frame: Frame, width: int, height: int | None, colour: bool, view: View = DEFAULT_VIEW, live: bool = False) -> Screen:
    """The frame's lines, none wider than ``width`` columns (escapes aside). With a ``height`` (a
    live terminal), at most that many lines: the rows scroll to keep the selected GPU in sight, the
    advice for the flagged GPUs' classes keeps up to three lines, and the process panel takes what is left."""
    paint = Painter(colour)
    width = max(width, MIN_WIDTH)
    if view.help:
        lines = help_lines(width)
        return Screen(lines[:height] if height is not None else lines, view.scroll, 0)
    gpus = ordered(found(frame.gpus, view.query, frame.users, frame.jobs), frame.waste, view.sort, view.reverse)
    order = tuple(gpu.uuid for gpu in gpus)
    head = _head(frame, width, view, live, len(gpus), paint)
    if view.sorting:
        return _sort_menu(head, view, width, height)
    if view.detail and view.selected in order:
        return _detail(frame, gpus[order.index(view.selected)], head, view, width, height, paint, order)
    rows, starts, table_header = _rows(frame, gpus, width, paint)
    if not gpus:
        rows = [fit(f"no GPU matches {printable(view.query)!r}" + (" (Esc clears the filter)" if live else ""), width)]
    selected = starts.get(view.selected) if live else None
    if selected is not None:
        rows[selected] = Painter.selected(rows[selected] + " " * max(0, width - visible_width(rows[selected])))  # the bar across the screen
    lines = [*head, table_header]
    prompt = [paint(fit(f"filter: {printable(view.query)}█  Enter keeps it · Esc clears it", width), BOLD)] if view.editing else []
    tips, urgent = advice(gpus, frame.waste, width)
    styled = [paint(line, "" if number < urgent else DIM) for number, line in enumerate(tips)]
    panel = _panel(gpus, frame.users, width, paint)
    if height is None:
        return Screen(lines + rows + styled + panel, 0, len(rows), order)
    room = max(0, height - len(lines) - len(prompt))
    if len(rows) + len(tips) <= room:
        return Screen(lines + rows + styled + _cut(panel, room - len(rows) - len(tips), width, paint) + prompt, 0, len(rows), order)  # the panel takes what is left
    kept = min(len(tips), max(min(ADVICE_KEPT, len(tips)), room - len(rows)))  # the flagged GPUs' advice stays on screen
    if len(rows) <= room - kept:
        return Screen(lines + rows + styled[: room - len(rows)] + prompt, 0, len(rows), order)
    page = max(1, room - kept - 1)  # one line says which rows show
    scroll = min(view.scroll, max(0, len(rows) - page))
    if selected is not None:  # the selected GPU's row in sight
        scroll = selected if selected < scroll else selected - page + 1 if selected >= scroll + page else scroll
    shown = rows[scroll : scroll + page]
    where = f"lines {scroll + 1}-{scroll + len(shown)} of {len(rows)} · ↑↓ select · Enter: its detail" if live else f"… {len(rows) - len(shown)} more lines: top --once | less shows them"
    return Screen((lines + shown + [paint(fit(where, width), DIM)] + styled[:kept] + prompt)[: max(height, 1)], scroll, page, order)
