"""The report's outputs (gpueff/commands/report/formats.py): names from Prometheus's answer cannot
drive a terminal, break a Markdown table or run as a spreadsheet formula; CSV and JSON read back."""

from __future__ import annotations

import csv
import io
import json

from gpueff.commands.report.formats import CSV_COLUMNS, Heading, csv_text, json_text, markdown, text, unit_minutes
from gpueff.commands.report.ledger import account
from gpueff.commands.report.prometheus import Sample
from unit.commands.report.test_ledger import A, B, answers, gpu_sample, holder_sample

HOSTILE_POD = "evil|pod\x1b[2J`*_<b>"


def ledger():
    gpu = [gpu_sample(A, "held_idle", 7 * 3600, f"ns/{HOSTILE_POD}"), gpu_sample(A, "working", 3600, f"ns/{HOSTILE_POD}"), gpu_sample(B, "host_starved", 3 * 3600), gpu_sample(B, "free", 3600)]
    holder = [holder_sample(B, "process", "1003:=HYPERLINK(\"http://x\")", "host_starved", 3 * 3600)]
    cost = [gpu_sample(A, "held_idle", 17.5, f"ns/{HOSTILE_POD}", currency="USD")]
    classes = [Sample({"instance": A[0], "uuid": A[1], "namespace": "ns", "pod": HOSTILE_POD, "class": "idle"}, 10)]
    attribution = [Sample({"instance": B[0], "uuid": B[1], "path": "process", "reason": "outside_pods_and_jobs"}, 1)]
    return account(answers(gpu, holder, classes, attribution, cost=cost))


HEADING = Heading("http://prometheus:9090", 1_795_000_000.0, 1_795_604_800.0, "owner", 20)


def test_text_ranks_by_waste_with_what_to_try_and_no_control_character() -> None:
    report = text(ledger(), HEADING)
    assert "\x1b" not in report and "GPU time by owner, 2026-11-18" in report
    lines = report.splitlines()
    first = next(line for line in lines if line.startswith("  1  "))
    assert "pod ns/evil|pod?[2J" in first and first.split()[-1] == "idle" and "17.50 USD" in first
    assert any("what to try (idle): Nothing runs" in line for line in lines)
    assert "free: 1.0 GPU-h on 1 GPU(s)" in report or "outside_pods_and_jobs: 1.0 GPU-h" in report


def test_markdown_keeps_its_table_whatever_the_names() -> None:
    report = markdown(ledger(), HEADING)
    row = next(line for line in report.splitlines() if line.startswith("| 1 |"))
    assert row.count(" | ") == 12 and "evil\\|pod?[2J\\`\\*\\_&lt;b>" in row and "\x1b" not in report


def test_csv_reads_back_and_no_cell_runs_as_a_formula() -> None:
    rows = list(csv.reader(io.StringIO(csv_text(ledger(), HEADING))))
    assert tuple(rows[0]) == CSV_COLUMNS
    process = next(row for row in rows[1:] if row[1] == "process")
    assert process[2].startswith("1003:=") and not any(cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row)
    pod = next(row for row in rows[1:] if row[1] == "pod")
    assert float(pod[CSV_COLUMNS.index("held_idle_seconds")]) == 7 * 3600 and pod[CSV_COLUMNS.index("currency")] == "USD"


def test_json_reads_back_in_base_units() -> None:
    body = json.loads(json_text(ledger(), HEADING))
    assert body["fleet"]["gpus"] == 2 and body["fleet"]["seconds"]["held_idle"] == 7 * 3600
    assert body["owners"][0]["name"] == f"ns/{HOSTILE_POD}" and body["owners"][0]["wasted_cost"] == {"USD": 17.5}
    assert body["unowned"][0]["name"] == "outside_pods_and_jobs" and body["unowned"][0]["meaning"].startswith("on a Kubernetes node")


def test_a_short_range_is_told_in_gpu_minutes() -> None:
    short = account(answers([gpu_sample(A, "working", 600)]))
    assert unit_minutes(short) and not unit_minutes(ledger())
    assert "10.0 GPU-min observed" in text(short, Heading("http://p", 0.0, 600.0, "owner", 20, minutes=True))
