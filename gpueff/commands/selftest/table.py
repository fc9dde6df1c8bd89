"""The selftest's result table, as aligned text for a terminal or as Markdown for docs."""

from __future__ import annotations

from gpueff.commands.selftest.checks import CheckResult

COLUMNS = ("workload", "check", "expected", "measured", "result")


def _rows(results: list[CheckResult]) -> list[tuple[str, ...]]:
    return [(r.workload, r.check, r.expected, r.measured, "PASS" if r.passed else "FAIL") for r in results]


def summary(results: list[CheckResult]) -> str:
    failed = sum(not result.passed for result in results)
    if not results:
        return "no checks ran: FAILED"
    if failed:
        return f"{failed} of {len(results)} checks FAILED"
    return f"all {len(results)} checks passed"


def render_text(results: list[CheckResult], header: list[str]) -> str:
    rows = [tuple(column.upper() for column in COLUMNS), *_rows(results)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(COLUMNS))]
    lines = [*header, ""] if header else []
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return "\n".join([*lines, "", summary(results)]) + "\n"


def render_markdown(results: list[CheckResult], header: list[str]) -> str:
    escape = lambda cell: cell.replace("|", "\\|")  # noqa: E731
    lines = [f"{line}  " for line in header]
    if header:
        lines.append("")
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + " --- |" * len(COLUMNS))
    lines += ["| " + " | ".join(escape(cell) for cell in row) + " |" for row in _rows(results)]
    return "\n".join([*lines, "", summary(results)]) + "\n"


def render(results: list[CheckResult], header: list[str], markdown: bool = False) -> str:
    return (render_markdown if markdown else render_text)(results, header)
