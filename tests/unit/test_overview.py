"""A multi-GPU job in the views: the live page's data, ``top`` on the snapshot and ``top --url`` on
the /metrics page, all from one replayed job whose rank 0 waits on rank 1 (docs/jobs.md)."""

from __future__ import annotations

import dataclasses
import json

from gpueff.backends.replay import ReplayBackend
from gpueff.commands.top.scrape import parse
from gpueff.commands.top.table import Frame, render
from gpueff.exposition.render import render as metrics_text
from gpueff.overview import job_overviews, snapshot_overview
from gpueff.poller import Poller
from gpueff.settings import Config
from gpueff.trace import load_trace
from gpueff.web.history import History
from gpueff.web.live import LiveData


def straggling_job(trace_paths):
    traces = [dataclasses.replace(load_trace(trace_paths[name]), job=job) for name, job in (("spin_1sm", "ddp"), ("matmul_8192", "ddp"), ("idle", ""))]
    now = [100.0]
    backend = ReplayBackend(traces, clock=lambda: now[0])
    backend.start()
    poller = Poller(backend, Config(), clock=lambda: now[0], wall_clock=lambda: 1.7e9 + now[0])
    snapshot = None
    for _ in range(6):
        now[0] += 1.0
        snapshot = poller.poll_once()
    assert snapshot is not None
    return snapshot


def test_top_shows_the_job_and_the_gpu_it_waits_on(trace_paths) -> None:
    snapshot = straggling_job(trace_paths)
    (job,) = job_overviews(snapshot, stale=False)
    assert (job.kind, job.name, job.gpus, job.straggler, job.waiting) == ("trace", "ddp", (0, 1), 1, (0,))
    lines = render(Frame(("replay",), snapshot_overview(snapshot, stale=False), None, jobs=[job]), 160, None, colour=False).lines
    (line,) = [line for line in lines if line.startswith("job ")]
    assert "job trace ddp: GPUs 0,1" in line and "compute 1, peer_wait 1" in line and "GPU 0 waits on GPU 1" in line
    assert any(line.startswith("peer_wait (GPU 0): Speed up the GPU this one waits for") for line in lines)
    assert job_overviews(snapshot, stale=True) == []


def test_top_url_reads_the_same_job_back_from_metrics(trace_paths) -> None:
    snapshot = straggling_job(trace_paths)
    page = parse(metrics_text(snapshot).decode(), "test")
    assert page.jobs == job_overviews(snapshot, stale=False)


def test_the_live_page_data_carries_the_job(trace_paths) -> None:
    snapshot = straggling_job(trace_paths)
    answer = LiveData(lambda: snapshot, History(), "", clock=lambda: snapshot.taken_monotonic).answer(0)
    assert answer is not None
    body = json.loads(b"".join(answer))
    (job,) = body["jobs"]
    assert job["straggler"] == 1 and job["waiting"] == [0] and job["classes"] == {"compute": 1, "peer_wait": 1}
    assert "peer_wait" in body["classes"]
