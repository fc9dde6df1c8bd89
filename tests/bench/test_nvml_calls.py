"""bench/nvml_calls.py: the NVML calls of a poll are taken from NvmlBackend itself, each with its cadence."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fakes.nvml import FakeNvml
from repo import bench_module
from waiting import PATIENCE

from gpueff.trace import load_trace, planted_trace_paths

pytestmark = pytest.mark.slow  # polls a backend for a second


class XidThreadFirst(FakeNvml):
    """Polls read power only once the Xid thread has waited for an event: its calls are then in the
    recording however slowly a busy machine starts that thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.xid_waited = threading.Event()

    def nvmlEventSetWait(self, *args: Any) -> Any:  # noqa: N802 (pynvml's name)
        self.xid_waited.set()
        return super().nvmlEventSetWait(*args)

    def nvmlDeviceGetPowerUsage(self, *args: Any) -> Any:  # noqa: N802 (pynvml's name)
        assert self.xid_waited.wait(PATIENCE), "the Xid thread never waited for an event"
        return super().nvmlDeviceGetPowerUsage(*args)


def test_each_call_of_the_backend_is_listed_once_with_its_cadence_and_gpm_request() -> None:
    nvml_calls = bench_module("nvml_calls")
    recording = nvml_calls.record(XidThreadFirst([load_trace(planted_trace_paths()[0])], event_wait_cap=0.05), interval=0.11, polls=6, slow_every=4)
    rows = nvml_calls.rows(recording)
    cadence = {row.label: row.cadence for row in rows}
    assert cadence["nvmlInit()"] == "open"
    assert cadence["nvmlDeviceGetPowerUsage(device 0)"] == "poll"
    assert cadence["nvmlDeviceGetTotalEnergyConsumption(device 0)"] == "slow"
    assert "nvmlShutdown()" not in cadence
    gpm = [row for row in rows if row.name == "nvmlGpmMetricsGet"]
    assert gpm and all(row.arguments.startswith("device 0, ") for row in gpm)
    assert any("SM_UTIL" in row.arguments and row.cadence == "poll" and row.per_round == 1.0 for row in gpm)
    assert recording.other_threads["nvmlEventSetWait"] > 0  # the Xid thread's calls are counted apart
    assert "NvmlBackend.collect per ordinary poll" in nvml_calls.markdown(recording)
