"""``report`` against a real Prometheus that scraped the demo (its 20 replayed GPUs with their
made-up owners, a price set): the owners ranked by what they wasted, each with its class and what to
try, the free GPU under its reason, and every state adding up to the fleet's; in every format."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from conftest import ROOT, free_port, http_get, running_daemon
from waiting import PATIENCE

from gpueff.pipeline.states import STATES
from gpueff.taxonomy import WHAT_TO_TRY
from system.test_end_to_end_prometheus import Process, Prometheus, binary, wait_for

pytestmark = pytest.mark.e2e  # a real Prometheus

OBSERVED = 30.0  # seconds of scrapes before the report is asked for


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("report")
    (work / "exporter.yml").write_text(yaml.safe_dump({"price_per_gpu_hour": 3.5, "currency": "EUR"}))
    with running_daemon("--demo", "--collect-interval", "500ms", "--config", str(work / "exporter.yml")) as daemon:
        port = free_port()
        (work / "prometheus.yml").write_text(json.dumps({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": "gpu-efficiency-exporter", "static_configs": [{"targets": [f"127.0.0.1:{daemon.port}"]}]}],
        }))
        server = Process("prometheus", [binary("prometheus"), f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}"], work / "prometheus.log")
        try:
            prom = Prometheus(f"http://127.0.0.1:{port}")
            wait_for("Prometheus to be ready", lambda: (server.check_running(), http_get(prom.url + "/-/ready", timeout=PATIENCE)[0] == 200)[1], PATIENCE)
            wait_for("the first scrape of the exporter", lambda: prom.query("gpueff_gpu_state_seconds_total"), PATIENCE)
            time.sleep(OBSERVED)
            yield {"url": prom.url, "prometheus": prom}
        finally:
            server.stop()


def report(url: str, *flags: str) -> str:
    result = subprocess.run([sys.executable, "-m", "gpueff", "report", "--prometheus", url, "--since", "2m", *flags], capture_output=True, text=True, cwd=ROOT, timeout=PATIENCE)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_owners_are_ranked_by_what_they_wasted_with_their_class_and_what_to_try(prometheus: dict[str, Any]) -> None:
    body = json.loads(report(prometheus["url"], "--format", "json"))
    owners = {(owner["kind"], owner["name"]): owner for owner in body["owners"]}
    notebook = owners[("pod", "notebooks/jupyter-alice-0")]
    assert notebook["seconds"]["held_idle"] > 10 and notebook["dominant_class"] == "idle" and notebook["what_to_try"] == WHAT_TO_TRY["idle"]
    assert notebook["wasted_cost"]["EUR"] == pytest.approx(notebook["wasted_seconds"] * 3.5 / 3600, rel=0.05)
    spin = owners[("pod", "research/sweep-lr-3e4-0")]
    assert spin["seconds"]["busy_not_working"] > 10 and spin["dominant_class"] == "underfilled"
    slurm = owners[("slurm_job", "48213")]
    assert len(slurm["gpus"]) == 5 and slurm["team"] == "uid 2001" and slurm["dominant_class"] == "host" and slurm["seconds"]["host_starved"] > slurm["seconds"]["working"]
    assert owners[("process", "1004:bench")]["seconds"]["host_starved"] > 10  # a bare host's user and program
    assert body["owners"][0]["kind"] == "slurm_job"  # five GPUs host-starved waste the most
    wasted = [owner["wasted_seconds"] for owner in body["owners"]]
    assert wasted == sorted(wasted, reverse=True)
    free = [row for row in body["unowned"] if row["name"] == "no_process"]
    assert len(free) == 1 and len(free[0]["gpus"]) == 1 and free[0]["seconds"]["free"] > 10
    # Every state: the owners and the time no owner accounts for add up to the fleet's.
    for state in STATES:
        parts = sum(owner["seconds"][state] for owner in body["owners"]) + sum(row["seconds"][state] for row in body["unowned"])
        assert parts == pytest.approx(body["fleet"]["seconds"][state], rel=1e-6, abs=1e-6), state
    assert body["fleet"]["gpus"] == 20 and sum(body["fleet"]["seconds"].values()) <= 20 * 120 * 1.05


def test_the_same_report_reads_as_text_markdown_and_csv(prometheus: dict[str, Any]) -> None:
    text = report(prometheus["url"], "--top", "5")
    assert text.startswith("GPU time by owner, ") and "Fleet: 20 GPUs" in text and "more owners" in text
    assert "  1  Slurm job 48213 (uid 2001)" in text and "what to try (host): Feed the GPU faster" in text
    assert "no_process:" in text and "EUR" in text
    markdown = report(prometheus["url"], "--format", "markdown", "--by", "team")
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| #") and not line.startswith("| ---")]
    assert rows and all(row.count(" | ") == 12 for row in rows)
    assert any("| notebooks |" in row and "| idle |" in row for row in rows)
    table = list(csv.DictReader(io.StringIO(report(prometheus["url"], "--format", "csv"))))
    assert {row["owner"] for row in table if row["owner_kind"] == "pod"} >= {"notebooks/jupyter-alice-0", "research/sweep-lr-3e4-0", "ml/llama-train-0"}
    assert all(row["currency"] in ("EUR", "") for row in table)
