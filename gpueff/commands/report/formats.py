"""The report written out: text for a terminal, Markdown for a ticket or a proposal, CSV for a
spreadsheet, JSON for a program. Names come from Prometheus's answer (pods, jobs, programs): in
text and Markdown a control character is shown as '?' and Markdown's table syntax is escaped; in
CSV a cell that a spreadsheet would run as a formula is quoted with a leading apostrophe; JSON
escapes everything itself."""

from __future__ import annotations

import csv
import io
import json
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpueff.attribution.reasons import REASONS
from gpueff.commands.report.ledger import WASTE, Amounts, Ledger, Owner
from gpueff.commands.top.text import printable
from gpueff.pipeline.states import STATES

FORMATS = ("text", "markdown", "csv", "json")
STATE_NAMES = {"free": "free", "held_idle": "held idle", "host_starved": "host-starved", "busy_not_working": "busy not working", "working": "working", "unknown": "unknown"}
JOULES_PER_KWH = 3.6e6
TEXT_WIDTH = 100


@dataclass(frozen=True, slots=True)
class Heading:
    prometheus: str
    start: float  # Unix time
    end: float
    by: str
    limit: int  # owners listed; the rest summed in one line
    warnings: tuple[str, ...] = ()
    minutes: bool = False  # text and Markdown in GPU-minutes (a short range), else GPU-hours

    @property
    def span(self) -> str:
        stamp = lambda moment: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(moment))  # noqa: E731
        return f"{stamp(self.start)} to {stamp(self.end)}"


def owner_name(owner: Owner) -> str:
    """How a row names its owner (text from outside: callers make it safe for their format)."""
    if owner.kind == "pod":
        return owner.name if owner.name.startswith("pod uid ") else f"pod {owner.name}"
    if owner.kind == "slurm_job":
        return f"Slurm job {owner.name}" + (f" ({owner.team})" if owner.team else "")
    if owner.kind == "process":
        uid, _, program = owner.name.partition(":")
        return f"uid {uid}: {program}"
    if owner.kind == "user":
        return f"uid {owner.name}"
    if owner.kind == "unattributed":
        return "unattributed (shared GPUs' time no process's samples name)"
    if owner.kind == "no_owner":
        return f"no owner: {owner.name}"
    return owner.name  # a team


HOURS_FROM = 10 * 3600.0  # GPU-seconds: a fleet observed for less is shown in GPU-minutes


def unit_minutes(ledger: Ledger) -> bool:
    return sum(ledger.fleet.seconds.values()) < HOURS_FROM


def _unit(heading: Heading) -> str:
    return "GPU-min" if heading.minutes else "GPU-h"


def _time(seconds: float, heading: Heading) -> str:
    return f"{seconds / (60 if heading.minutes else 3600):.1f}"


def _money(costs: dict[str, float]) -> str:
    return " + ".join(f"{value:.2f} {currency}" for currency, value in sorted(costs.items())) or "-"


def _kwh(joules: float) -> str:
    return f"{joules / JOULES_PER_KWH:.1f}"


def _wasted_money(owner: Owner) -> dict[str, float]:
    return owner.amounts.wasted_cost(owner.free_is_waste)


def _wasted_joules(owner: Owner) -> float:
    return owner.amounts.wasted("joules", owner.free_is_waste)


def _fleet_line(ledger: Ledger, heading: Heading) -> tuple[str, str]:
    fleet = ledger.fleet
    total = sum(fleet.seconds.values())
    states = ", ".join(f"{STATE_NAMES[state]} {_time(fleet.seconds[state], heading)}" for state in STATES)
    waste_seconds = sum(fleet.seconds[state] for state in WASTE)
    waste_cost = {currency: sum(costs[state] for state in WASTE) for currency, costs in fleet.cost.items()}
    waste = f"{_time(waste_seconds, heading)} {_unit(heading)}, {_money(waste_cost)}, {_kwh(sum(fleet.joules[state] for state in WASTE))} kWh"
    return f"{ledger.gpus} GPUs, {_time(total, heading)} {_unit(heading)} observed: {states}", waste


def _rows(ledger: Ledger, limit: int) -> tuple[list[Owner], Owner | None]:
    """The owners listed, and the rest summed in one row (None where all are listed)."""
    shown, rest = ledger.owners[:limit], ledger.owners[limit:]
    if not rest:
        return shown, None
    others = Owner("others", f"{len(rest)} more owners", "")
    for owner in rest:
        for gpu, amounts in owner.per_gpu.items():
            others.per_gpu[gpu].merge(amounts)
    return shown, others


def text(ledger: Ledger, heading: Heading) -> str:
    fleet, waste = _fleet_line(ledger, heading)
    out = [printable(f"GPU time by {heading.by}, {heading.span}, from {heading.prometheus}"),
           *textwrap.wrap(f"Fleet: {fleet}", TEXT_WIDTH, subsequent_indent="  "),
           f"  wasted (held idle, host-starved, busy not working): {printable(waste)}", ""]
    head = f"{'#':>3}  {heading.by:<34} {'GPUs':>4} {'wasted':>7} {'held':>6} {'host':>6} {'busy':>6} {'work':>7} {'free':>6}  {'cost wasted':>12} {'kWh':>6}  class"
    out += [head, f"{'':>3}  {'':<34} {'':>4} {_unit(heading):>7} {'idle':>6} {'starv':>6} {'!work':>6} {'ing':>7} {'':>6}  {'':>12} {'wasted':>6}"]
    shown, others = _rows(ledger, heading.limit)
    for rank, owner in enumerate([*shown, *([others] if others else [])], 1):
        seconds = owner.amounts.seconds
        name = printable(owner_name(owner))
        name = name if len(name) <= 34 else name[:33] + "…"
        number = f"{rank:>3}" if owner.kind != "others" else "   "
        line = (f"{number}  {name:<34} {len(owner.gpus):>4} {_time(owner.wasted_seconds, heading):>7} {_time(seconds['held_idle'], heading):>6} {_time(seconds['host_starved'], heading):>6} "
               f"{_time(seconds['busy_not_working'], heading):>6} {_time(seconds['working'], heading):>7} {_time(seconds['free'], heading):>6}  {_money(_wasted_money(owner)):>12} {_kwh(_wasted_joules(owner)):>6}  ")
        out.append((line + (owner.dominant_class if owner.kind != "others" else "")).rstrip())
        if owner.kind != "others" and owner.what_to_try and owner.wasted_seconds > 0:
            out += textwrap.wrap(f"what to try ({owner.dominant_class}): {owner.what_to_try}", TEXT_WIDTH, initial_indent=" " * 5, subsequent_indent=" " * 7)
    if not ledger.owners:
        out.append("     no owner is named on any GPU's series in this range (gpueff_gpu_attribution_info says why, below)")
    if ledger.unowned:
        out += ["", "GPU time no owner accounts for:"]
        for row in ledger.unowned:
            total = sum(row.amounts.seconds.values())
            states = ", ".join(f"{STATE_NAMES[state]} {_time(value, heading)}" for state, value in row.amounts.seconds.items() if value > 0)
            out += textwrap.wrap(f"{printable(row.name)}: {_time(total, heading)} {_unit(heading)} on {len(row.gpus)} GPU(s) ({states}): {REASONS.get(row.name, 'no gpueff_gpu_attribution_info in this range')}",
                                 TEXT_WIDTH, initial_indent="  ", subsequent_indent="    ")
    out += [f"warning from Prometheus: {printable(warning)}" for warning in heading.warnings]
    return "\n".join(out) + "\n"


def _cell(value: str) -> str:
    """Markdown table text: control characters shown as '?', the table's own syntax escaped."""
    return printable(value).replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("*", "\\*").replace("_", "\\_").replace("<", "&lt;")


def markdown(ledger: Ledger, heading: Heading) -> str:
    fleet, waste = _fleet_line(ledger, heading)
    out = [f"## GPU time by {heading.by}, {heading.span}", "", f"From {_cell(heading.prometheus)}.", "",
           f"- **Fleet**: {_cell(fleet)}", f"- **Wasted** (held idle, host-starved, busy not working): {_cell(waste)}", "",
           f"| # | {heading.by} | GPUs | wasted {_unit(heading)} | held idle | host-starved | busy not working | working | free | cost wasted | kWh wasted | class | what to try |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    shown, others = _rows(ledger, heading.limit)
    for rank, owner in enumerate([*shown, *([others] if others else [])], 1):
        seconds = owner.amounts.seconds
        last = owner.kind == "others"
        out.append(f"| {'' if last else rank} | {_cell(owner_name(owner))} | {len(owner.gpus)} | {_time(owner.wasted_seconds, heading)} | {_time(seconds['held_idle'], heading)} | {_time(seconds['host_starved'], heading)} | "
                   f"{_time(seconds['busy_not_working'], heading)} | {_time(seconds['working'], heading)} | {_time(seconds['free'], heading)} | {_money(_wasted_money(owner))} | {_kwh(_wasted_joules(owner))} | "
                   f"{'' if last else owner.dominant_class} | {'' if last else _cell(owner.what_to_try)} |")
    if ledger.unowned:
        out += ["", "GPU time no owner accounts for:", ""]
        for row in ledger.unowned:
            out.append(f"- {_cell(row.name)}: {_time(sum(row.amounts.seconds.values()), heading)} {_unit(heading)} on {len(row.gpus)} GPU(s): {_cell(REASONS.get(row.name, 'no gpueff_gpu_attribution_info in this range'))}")
    out += [f"> warning from Prometheus: {_cell(warning)}" for warning in heading.warnings]
    return "\n".join(out) + "\n"


def _spreadsheet_safe(value: object) -> object:
    """A cell a spreadsheet would run as a formula (=, +, -, @, a tab or CR first) starts with an apostrophe."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


CSV_COLUMNS = ("rank", "owner_kind", "owner", "team", "gpus", *(f"{state}_seconds" for state in STATES), "wasted_seconds",
               *(f"{state}_joules" for state in STATES), "wasted_joules", "wasted_cost", "currency", "dominant_class", "what_to_try")


def _csv_rows(owner: Owner, rank: int | str) -> list[list[object]]:
    amounts: Amounts = owner.amounts
    money = _wasted_money(owner) or {"": 0.0}
    return [[rank, owner.kind, owner.name, owner.team, len(owner.gpus), *(amounts.seconds[state] for state in STATES), owner.wasted_seconds,
             *(amounts.joules[state] for state in STATES), _wasted_joules(owner), cost, currency, owner.dominant_class, owner.what_to_try]
            for currency, cost in sorted(money.items())]


def csv_text(ledger: Ledger, heading: Heading) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for rank, owner in enumerate(ledger.owners, 1):
        for row in _csv_rows(owner, rank):
            writer.writerow([_spreadsheet_safe(cell) for cell in row])
    for owner in ledger.unowned:
        for row in _csv_rows(owner, ""):
            writer.writerow([_spreadsheet_safe(cell) for cell in row])
    return buffer.getvalue()


def _amounts(amounts: Amounts) -> dict[str, Any]:
    return {"seconds": amounts.seconds, "joules": amounts.joules, "cost": amounts.cost}


def _owner(owner: Owner) -> dict[str, Any]:
    return {"kind": owner.kind, "name": owner.name, "team": owner.team, "gpus": [{"instance": instance, "uuid": uuid} for instance, uuid in sorted(owner.gpus)],
            **_amounts(owner.amounts), "wasted_seconds": owner.wasted_seconds, "wasted_joules": _wasted_joules(owner), "wasted_cost": _wasted_money(owner),
            "free_is_waste": owner.free_is_waste, "dominant_class": owner.dominant_class, "what_to_try": owner.what_to_try}


def json_text(ledger: Ledger, heading: Heading) -> str:
    body = {
        "prometheus": heading.prometheus, "start": heading.start, "end": heading.end, "by": heading.by,
        "fleet": {"gpus": ledger.gpus, **_amounts(ledger.fleet)},
        "owners": [_owner(owner) for owner in ledger.owners],
        "unowned": [{**_owner(row), "meaning": REASONS.get(row.name, "")} for row in ledger.unowned],
        "warnings": list(heading.warnings),
    }
    return json.dumps(body, indent=1, sort_keys=False) + "\n"


WRITERS: dict[str, Callable[[Ledger, Heading], str]] = {"text": text, "markdown": markdown, "csv": csv_text, "json": json_text}
