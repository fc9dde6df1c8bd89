"""The GPU table's columns and which of them a width holds: each column has a priority, and a
narrower terminal drops them from the least important on, so the header never wraps (GPU, UTIL,
SM and CLASS always stay; then EFF, WASTE, WHOSE, MEM, POWER, TEMP, TCBUSY, TB/s and the
utilization bar, in that order). FLAGS follow the last column where they fit, else on a line of
their own; where a GPU's flags are short, room is kept for them beside the row. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpueff.commands.top.figures import (
    CLASS_COLOURS,
    DIM,
    GREEN,
    RED,
    SHORT_CLASSES,
    YELLOW,
    class_name,
    memory,
    percent,
    ratio,
    scaled,
    temperature,
    usage_bar,
    waste_text,
    watts,
    whose,
)
from gpueff.commands.top.text import pad, printable
from gpueff.overview import GpuOverview

FLAGS_ROOM = 6  # " FLAGS": the header's last word always fits
SHORT_FLAGS = 15  # flags up to this wide (no-profiling, busy-SMs-idle) are kept room for beside their row; longer ones go below it
WHOSE_WIDE = 22  # WHOSE's width once every other column fits


@dataclass(frozen=True, slots=True)
class Cells:
    """What the cells of one frame need beside the GPU."""

    waste: Mapping[str, float]
    users: Mapping[str, str]
    wide: bool


Cell = Callable[[GpuOverview, Cells], tuple[str, str]]  # (text, style)


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    title: str
    width: int
    left: bool  # aligned left (names), else right (figures)
    keep: int  # 0: always kept; then the lower, the longer a narrowing terminal keeps it
    cell: Cell


def _efficiency(gpu: GpuOverview, _cells: Cells) -> tuple[str, str]:
    value = gpu.efficiency
    return ratio(value), "" if value is None else RED if value < 0.3 else YELLOW if value < 0.7 else GREEN


def _class(gpu: GpuOverview, _cells: Cells) -> tuple[str, str]:
    name = class_name(gpu)
    return SHORT_CLASSES.get(name, name), CLASS_COLOURS.get(name, DIM)


def _whose(gpu: GpuOverview, cells: Cells) -> tuple[str, str]:
    return whose(gpu, cells.users) or (printable(gpu.source or gpu.model) if cells.wide else ""), ""


COLUMNS: tuple[Column, ...] = (
    Column("gpu", "GPU", 3, False, 0, lambda gpu, _: (str(gpu.index), "")),
    Column("util", "UTIL", 4, False, 0, lambda gpu, _: (percent(gpu.utilization), "")),
    Column("sm", "SM", 4, False, 0, lambda gpu, _: (percent(gpu.sm_active), "")),
    Column("eff", "EFF", 4, False, 1, _efficiency),
    Column("class", "CLASS", 11, True, 0, _class),
    Column("waste", "WASTE", 5, False, 2, lambda gpu, cells: (waste_text(cells.waste.get(gpu.uuid)), "")),
    Column("memory", "MEM", 8, False, 4, lambda gpu, _: (memory(gpu.memory_used_bytes, gpu.memory_total_bytes), "")),
    Column("temperature", "TEMP", 4, False, 6, lambda gpu, _: (temperature(gpu.temperature_celsius), "")),
    Column("power", "POWER", 5, False, 5, lambda gpu, _: (watts(gpu.power_watts), "")),
    Column("tensor", "TCBUSY", 7, False, 7, lambda gpu, _: (scaled(gpu.tensor_flops, 1e12), "")),
    Column("dram", "TB/s", 5, False, 8, lambda gpu, _: (scaled(gpu.dram_bytes_per_second, 1e12, 2), "")),
    Column("bar", "UTIL vs SM", 14, True, 9, lambda gpu, _: (f"[{usage_bar(gpu)}]", "")),
    Column("whose", "WHOSE", 14, True, 3, _whose),
)


WIDE = sum(column.width + 1 for column in COLUMNS) + WHOSE_WIDE - 14 + FLAGS_ROOM - 1  # 114: every column, WHOSE 22 wide and showing the trace where no owner is known


def layout(width: int, owned: bool, flags: int = 0) -> list[Column]:
    """The columns ``width`` holds, in their order: by priority while each next one fits beside
    the header's last word (FLAGS), or beside ``flags`` columns of flags where more (a short flag,
    as no-profiling, then stays beside its row). WHOSE is there where a GPU has an owner (or a
    reason none is named), and from WIDE columns always, 22 wide."""
    wide = width >= WIDE
    wanted = [column if column.name != "whose" or not wide else Column("whose", "WHOSE", WHOSE_WIDE, True, column.keep, column.cell) for column in COLUMNS if column.name != "whose" or owned or wide]
    kept: set[str] = set()
    used = max(FLAGS_ROOM, 1 + flags) - 1  # the first column has no space before it
    for column in sorted(wanted, key=lambda each: each.keep):
        if used + 1 + column.width > width and column.keep:
            break
        kept.add(column.name)
        used += 1 + column.width
    return [column for column in wanted if column.name in kept]


def _cell(text: str, column: Column) -> str:
    return pad(text, column.width) if column.left else " " * max(0, column.width - len(text)) + text


def header(columns: Sequence[Column]) -> str:
    return " ".join(_cell(column.title, column) for column in columns) + " FLAGS"


def row(gpu: GpuOverview, columns: Sequence[Column], cells: Cells, paint: Callable[[str, str], str]) -> str:
    """One GPU's cells, each painted in its style."""
    parts = []
    for column in columns:
        text, style = column.cell(gpu, cells)
        parts.append(paint(_cell(text, column), style))
    return " ".join(parts)
