"""The metric catalogue (gpueff/metrics.py) against everything that must follow it: the typed
profiling readings, the sample's fields, the exposition, the metrics reference (docs/metrics.md), pynvml's
GPM ids, the DCGM fakes and what each backend really gives."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import time
from collections import Counter

import pynvml
import pytest
from conftest import payloads_of
from fakes.nvml import FakeClock, FakeGpu, FakeNvml
from prometheus_client.parser import text_string_to_metric_families
from repo import ROOT
from waiting import PATIENCE

from gpueff.apps.derive import AppState
from gpueff.attribution.doctor import Attribution
from gpueff.attribution.kubernetes.owners import AttributionHealth, GpuOwners, PodOwner, ProcessOwner
from gpueff.attribution.slurm import SlurmJob
from gpueff.backends.dcgm.bindings import load_bindings
from gpueff.backends.dcgm.fields import FIELDS
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.backends.replay import ReplayBackend
from gpueff.collectors import CollectorsConfig
from gpueff.metrics import (
    BY_NAME,
    DCGM,
    HELP_LIMIT,
    METRICS,
    NVML,
    PROFILING_FIELDS,
    READINGS,
    REPLAY,
    SUMMARY,
    Reading,
)
from gpueff.pipeline.derive import derive
from gpueff.pipeline.peers import JobGpu, JobState, LinkTraffic
from gpueff.pipeline.processes import GpuProcesses, ProcessRow
from gpueff.pipeline.split import GpuSharing, Holder, HolderTotals
from gpueff.pipeline.totals import Totals
from gpueff.poller import poll_settings
from gpueff.sample import Cycles, DeviceInfo, GpuSample, Health, PeerLink, Profiling
from gpueff.selfstats import read_process_stats
from gpueff.settings import Config
from gpueff.snapshot import GpuState, Snapshot
from gpueff.trace import HEALTH_KEYS, Trace, load_trace

# GpuSample fields that are bookkeeping or feed labels and attribution, not metrics of their own.
NOT_METRICS = {"device", "timestamp", "window_seconds", "processes", "process_utilization", "profiling", "health", "cycles", "gpu_utilization_window"}  # the last: exported as derived.busy


def sample_paths(reading_paths: set[str]) -> set[str]:
    return {path for path in reading_paths if path.startswith("sample.")}


def test_profiling_fields_are_the_catalogues_profiling_readings():
    assert tuple(field.name for field in dataclasses.fields(Profiling)) == PROFILING_FIELDS
    assert all(field.type == "float | None" for field in dataclasses.fields(Profiling))


def test_every_sample_reading_is_exported():
    read = {f"sample.{field.name}" for field in dataclasses.fields(GpuSample) if field.name not in NOT_METRICS}
    read |= {f"sample.profiling.{name}" for name in PROFILING_FIELDS} | {"sample.profiling_available"}
    read |= {f"sample.health.{field.name}" for field in dataclasses.fields(Health)}
    read |= {f"sample.cycles.{field.name}" for field in dataclasses.fields(Cycles)}
    exported = {reading.path for _, reading in READINGS}
    assert sorted(read - exported) == []
    assert sorted(path for path in sample_paths(exported) - read if not path.startswith("sample.device")) == []


def test_each_metric_is_defined_once_and_follows_prometheus_conventions():
    assert len(BY_NAME) == len(METRICS)
    for metric in METRICS:
        prefix = "process_" if metric.scope == "process" else "gpueff_"
        assert metric.name.startswith(prefix) and re.fullmatch(r"[a-z0-9_]+", metric.name), metric.name
        assert metric.help and metric.help[-1] in ".)", metric.name
        assert (metric.type == "counter") == metric.name.endswith("_total"), metric.name
        if metric.unit:
            assert metric.name.removesuffix("_total").endswith(metric.unit), metric.name
        labelled = [reading.label for reading in metric.readings if reading.label]
        assert not labelled or len(labelled) == len(metric.readings) and len(metric.labels) == 1, metric.name


def test_every_help_is_one_short_line_and_the_rest_is_the_references():
    for metric in METRICS:
        assert "\n" not in metric.help and len(metric.help) <= HELP_LIMIT, f"{metric.name}: {len(metric.help)} characters of HELP"
        assert metric.detail != metric.help and (not metric.detail or metric.detail[-1] in ".)"), metric.name


FULL_HEALTH = Health(**{field.name: 1 for field in dataclasses.fields(Health)} | {"nvlink_links_active": ((0, True), (1, False)), "nvlink_link_errors": ((0, "replay", 2.0),), "retired_pages_pending": False})


def full_snapshot() -> Snapshot:
    """One snapshot in which every metric of the catalogue has a series."""
    device = DeviceInfo(index=0, uuid="GPU-full", name="NVIDIA H100 80GB HBM3", driver="580.159.04", pci_bus_id="00000000:18:00.0", sm_count=132,
                        max_sm_clock_mhz=1980, max_memory_clock_mhz=2619, power_limit_watts=700, peers=(PeerLink(1, "GPU-peer", "pcie_switch", "direct", 18),))
    mig = dataclasses.replace(device, index=1, uuid="MIG-full", name="NVIDIA H100 80GB HBM3 MIG 1g.10gb", parent_uuid="GPU-full", gpu_instance_id=7)
    values = {field.name: 0.5 for field in dataclasses.fields(GpuSample) if field.type == "float | None" and field.name not in NOT_METRICS}
    # applications_clocks_setting: a clock event that holds no power or thermal limit, so the point estimates render
    sample = GpuSample(device=device, timestamp=10.0, window_seconds=1.0, clock_event_reasons=2, remapped_rows_pending=False, remapped_rows_failure=True, profiling_multiplexed=False,
                       xid_errors={79: 1}, last_xid=79, process_count=1, profiling=Profiling(**dict.fromkeys(PROFILING_FIELDS, 0.5)), health=FULL_HEALTH,
                       cycles=Cycles(**{field.name: 1e9 for field in dataclasses.fields(Cycles)}), **values)
    config = Config(price_per_gpu_hour=2.0, collectors=CollectorsConfig(enabled=("per_process",)))
    totals = Totals(busy_seconds=1.0, sm_active_seconds=0.5, busy_idle_sm_seconds=0.5, busy_idle_sm_cost=0.01, peer_wait_seconds=0.25)
    owners = GpuOwners(pods=(PodOwner("ns", "pod", "main"),), processes=((ProcessOwner("uid", "cid"), 1),))
    sharing = GpuSharing(holders=((Holder("slurm_job", "42"), HolderTotals(1.0, 0.5, 0.5, 10.0)),), jobs=(SlurmJob("42", user_id="1000"),))
    processes = GpuProcesses((ProcessRow(4242, "1000", "python3", 1e9, 0.75, "slurm_job", "42"),), others=2, others_memory_bytes=2e8, others_busy_share=0.25)
    states = tuple(GpuState(s, derive(s, config.derive_settings), totals, owners, sharing, Attribution("kubelet", "ok"), processes) for s in (sample, dataclasses.replace(sample, device=mig)))
    app = AppState(name="llm", unit="tokens", up=True, gpus=(device,), units_total=1.0, throughput=1.0, requests_per_second=1.0, units_per_joule=1.0,
                   units_per_sm_active_second=1.0, flops_per_second=1e14, model_flops_utilization=0.1, cost_per_million_units=1.0, scrape_duration_seconds=0.01)
    return Snapshot(sequence=1, gpus=states, taken_monotonic=10.0, settings=poll_settings(config), backend_name="nvml", replayed=False, polls_total=1,
                    collect_duration_sum_seconds=0.01, errors_total=0, last_success_wall=1.7e9, apps=(app,), process=read_process_stats(),
                    attribution=AttributionHealth(up=True, errors_total=0, last_success_wall=1.7e9), jobs=(FULL_JOB,))


FULL_JOB = JobState(kind="process_group", name="torchrun:0-1", gpus=(JobGpu(0, "GPU-full"), JobGpu(1, "MIG-full")), efficiency=0.5, classes=(("compute", 1), ("peer_wait", 1)),
                    traffic=LinkTraffic(1.0, 1.0, 1.0, 1.0), straggler=JobGpu(0, "GPU-full"), waiting=(JobGpu(1, "MIG-full"),), peer_wait=0.25)


def family_names(text: str) -> set[str]:
    return {family.name + ("_total" if family.type == "counter" else "") for family in text_string_to_metric_families(text)}


def test_every_catalogue_metric_is_rendered_and_nothing_else():
    body = payloads_of(full_snapshot(), lambda: 10.0).body()
    assert body is not None
    assert family_names(body.decode()) == set(BY_NAME)


def documented_names() -> set[str]:
    page = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    section = page.split("\n## Metrics reference", 1)[1].split("\n## ", 1)[0]
    names = set()
    for row in re.findall(r"^\| (.*?) \|", section, re.M):
        names.update(re.findall(r"`((?:gpueff|process)_[a-z0-9_]+)", row))
    summaries = {f"{metric.name}{suffix}" for metric in METRICS if metric.type == SUMMARY for suffix in ("_sum", "_count")}
    return names - summaries


def test_the_metrics_page_documents_exactly_the_catalogue():
    documented = documented_names()
    assert sorted(set(BY_NAME) - documented) == [], "exported but not in docs/metrics.md's reference"
    assert sorted(documented - set(BY_NAME)) == [], "in docs/metrics.md's reference but not exported"


def test_the_metrics_reference_is_generated_from_the_catalogue():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "metrics_reference.py"), "--check"], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stderr


def test_gpm_ids_are_pynvmls():
    for _, reading in READINGS:
        if reading.gpm is not None:
            assert getattr(pynvml, f"NVML_GPM_METRIC_{reading.gpm.name}") == reading.gpm.metric_id, reading.gpm.name


def test_the_dcgm_field_table_is_the_catalogues():
    from gpueff.backends.dcgm.fields import NVLINK_LINK_FIELDS

    from_catalogue = {reading.dcgm.field_id for _, reading in READINGS if reading.dcgm is not None}
    assert {field.field_id for field in FIELDS} == from_catalogue | {52} | {field.field_id for field in NVLINK_LINK_FIELDS}  # + each link's errors (one series, 72 fields)
    assert len(FIELDS) == len({field.field_id for field in FIELDS})
    assert max(Counter(field.cadence for field in FIELDS).values()) <= 128  # one field group a cadence: DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP


def test_the_dcgm_fakes_agree_with_the_catalogue():
    load_bindings(str(ROOT / "tests" / "support" / "fakes" / "dcgm"))
    import dcgm_fields
    import fake_hostengine

    for metric, reading in READINGS:
        if reading.dcgm is None:
            continue
        names = reading.dcgm.names.split()
        newest, legacy, _type = dcgm_fields.FIELD_NAMES[reading.dcgm.field_id]
        assert (newest, legacy or newest) == (names[0], names[-1]), metric.name
        played = fake_hostengine.TRACE_FIELDS.get(reading.dcgm.field_id)
        if played is None:
            continue
        key, to_dcgm = played
        source_key, source_scale = (reading.gpm.name, reading.gpm.scale) if reading.gpm is not None else reading.trace or ("", 0.0)
        assert key == source_key, metric.name
        assert to_dcgm * reading.dcgm.scale == pytest.approx(source_scale), metric.name


def given(samples: list[GpuSample]) -> set[str]:
    """The catalogue's sample readings that have a value in any of ``samples``."""
    out = set()
    for _, reading in READINGS:
        if reading.path.startswith("sample.") and reading.path not in {"sample.up", "sample.device", "sample.profiling_available"}:
            values = [_read(sample, reading) for sample in samples]
            if any(value is not None and value != {} and value != () for value in values):
                out.add(reading.path)
    return out


def _read(sample: GpuSample, reading: Reading) -> object:
    """The reading's value, as the exposition renders it."""
    value: object = sample
    for part in reading.path.split(".")[1:]:
        value = getattr(value, part)
    return value


def claimed(backend: str) -> set[str]:
    return {reading.path for metric, reading in READINGS if backend in metric.backends and reading.path.startswith("sample.")} - {"sample.up", "sample.device", "sample.profiling_available"}


def unrecorded(trace: Trace) -> set[str]:
    """The catalogue's readings a recording cannot give: sources added after it was recorded."""
    held = {key for record in trace.samples for key, value in record.items() if value is not None}
    return {reading.path for _, reading in READINGS if (reading.gpm is not None and reading.gpm.name not in held) or (reading.trace is not None and reading.trace[0] not in held)}


def unrecorded_health(trace: Trace) -> set[str]:
    """The health readings a replay of ``trace`` cannot give: those its samples do not hold."""
    held = {key for record in trace.samples for key in record.get("health") or {}}
    return {reading.path for _, reading in READINGS if reading.field in HEALTH_KEYS and reading.field not in held}


def test_the_nvml_backend_gives_what_the_catalogue_says(trace_paths):
    clock = FakeClock()
    trace = load_trace(trace_paths["matmul_8192"])
    gpu = FakeGpu(trace, fields={pynvml.NVML_FI_DEV_MEMORY_TEMP: 61.0}, processes=[(4242, 2**30, "python")],
                  nvlink_links=(True, False), nvlink_link_errors=((0, 0, 0), (0, 0, 0)), retired_pages=(1, 0, False), fan_percent=40)  # an NVLink board with a fan: every health reading
    fake = FakeNvml([gpu, FakeGpu(trace)], clock=clock)  # two: GPUs have peers
    # the second without the driver's samples: its graphics engine is read over every poll's window (the first's only over the slow one)
    fake.fail("nvmlDeviceGetSamples", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=1)
    backend = NvmlBackend(slow_interval=1.0, nvml=fake, clock=clock)
    backend.start()
    try:
        fake.xid(0, 79)
        samples: list[GpuSample] = []
        deadline = time.monotonic() + PATIENCE
        while len(samples) < 4 or not any(sample.xid_errors for sample in samples):  # the Xid (GPU 0's) arrives on the event thread
            assert time.monotonic() < deadline, "the Xid never arrived"
            clock.advance(0.6)
            samples += backend.collect()
    finally:
        backend.close()
    assert given(samples) == claimed(NVML) - unrecorded(trace)


def test_the_replay_backend_gives_what_the_catalogue_says(trace_paths):
    clock = FakeClock()
    trace = load_trace(trace_paths["matmul_8192"])
    backend = ReplayBackend([trace], clock=clock)
    backend.start()
    samples = []
    for _ in range(3):
        clock.advance(0.5)
        samples += backend.collect()
    assert given(samples) == claimed(REPLAY) - unrecorded(trace) - unrecorded_health(trace)


def test_a_metric_with_a_dcgm_source_says_dcgm_gives_it():
    for metric, reading in READINGS:
        if reading.dcgm is not None:
            assert DCGM in metric.backends, metric.name
        elif reading.path.startswith("sample.") and reading.path not in {"sample.up", "sample.device", "sample.profiling_available", "sample.profiling_multiplexed", "sample.last_xid",  # field 230, as xid_errors
                                                                       "sample.health.nvlink_links_active",  # DCGM: dcgmGetNvLinkLinkStatus
                                                                       "sample.health.nvlink_link_errors"}:  # DCGM: 72 per-link fields (backends/dcgm/fields.py)
            assert DCGM not in metric.backends, metric.name


def test_the_trace_format_documents_every_key_the_catalogue_reads():
    documented = set(re.findall(r"`([A-Za-z_0-9]+)`", (ROOT / "gpueff" / "traces" / "README.md").read_text(encoding="utf-8")))
    keys = {reading.trace[0] for _, reading in READINGS if reading.trace is not None} | {reading.gpm.name for _, reading in READINGS if reading.gpm is not None}
    assert sorted(keys - documented) == []
