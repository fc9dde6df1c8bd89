"""The engine behind the fake DCGM bindings: GPUs that replay recorded gpu-trace/1 files.

Not part of DCGM's bindings; the fake dcgm_agent calls it. Tests drive it through ``CONTROL``
(in-process) or environment variables (a daemon subprocess):

- FAKE_DCGM_TRACES: trace files, one per GPU, separated by ``os.pathsep`` (default: the shipped H200 traces)
- FAKE_DCGM_NAMING: "4.6" (default) or "3": which field names dcgm_fields defines
- FAKE_DCGM_PROFILING: a DCGM_ST_* name the profiling watch is refused with
- FAKE_DCGM_SERVE: an address ("127.0.0.1:5555") where a standalone nv-hostengine answers
- FAKE_DCGM_STOP_FILE: while this file exists, that standalone engine is stopped; when it goes, the engine restarts

Behaviour modelled on DCGM's documentation: watched fields update every watch interval (their ``ts`` is the
update time in microseconds since the epoch); profiling fields are blank until the second update; a
field not in the trace reads blank (DCGM_*_BLANK / NOT_SUPPORTED); a stopped or restarted engine answers
every call of an old connection with DCGM_ST_CONNECTION_NOT_VALID.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from exporter.trace import Trace, demo_trace_paths, load_trace

MIB = 1024 * 1024
PROFILING_IDS = frozenset(range(1001, 1017))
# DCGM field ID -> (trace key, scale from the trace's unit to DCGM's).
TRACE_FIELDS = {
    100: ("sm_clock_mhz", 1),
    101: ("mem_clock_mhz", 1),
    112: ("throttle", 1),
    150: ("temp_c", 1),
    155: ("power_mw", 0.001),
    203: ("util_gpu", 1),
    204: ("util_mem", 1),
    250: ("mem_total", 1 / MIB),
    252: ("mem_used", 1 / MIB),
    1001: ("GRAPHICS_UTIL", 0.01),
    1002: ("SM_UTIL", 0.01),
    1003: ("SM_OCCUPANCY", 0.01),
    1004: ("ANY_TENSOR_UTIL", 0.01),
    1005: ("DRAM_BW_UTIL", 0.01),
    1006: ("FP64_UTIL", 0.01),
    1007: ("FP32_UTIL", 0.01),
    1008: ("FP16_UTIL", 0.01),
    1009: ("PCIE_TX_PER_SEC", MIB),
    1010: ("PCIE_RX_PER_SEC", MIB),
    1011: ("NVLINK_TOTAL_TX_PER_SEC", MIB),
    1012: ("NVLINK_TOTAL_RX_PER_SEC", MIB),
    1013: ("IMMA_TENSOR_UTIL", 0.01),
    1014: ("HMMA_TENSOR_UTIL", 0.01),
    1015: ("DFMA_TENSOR_UTIL", 0.01),
    1016: ("INTEGER_UTIL", 0.01),
}


def _all_known_ids() -> set[int]:
    import dcgm_fields

    return set(dcgm_fields.FIELD_NAMES)


@dataclass
class Control:
    naming: str = field(default_factory=lambda: os.environ.get("FAKE_DCGM_NAMING", "4.6"))
    known_field_ids: set[int] = field(default_factory=_all_known_ids)
    no_library: bool = False
    profiling_refusal: str | None = field(default_factory=lambda: os.environ.get("FAKE_DCGM_PROFILING") or None)
    profiling_one_pass_max: int = 16  # more profiling fields in one watch -> DCGM_ST_PROFILING_MULTI_PASS
    traces: list[str] = field(default_factory=lambda: [p for p in os.environ.get("FAKE_DCGM_TRACES", "").split(os.pathsep) if p])
    embedded: list[FakeHostEngine] = field(default_factory=list)  # every embedded engine started


CONTROL = Control()
ENGINES: dict[str, FakeHostEngine] = {}
_lock = threading.Lock()


def reset() -> None:
    """Forget every engine and setting (between tests)."""
    global CONTROL
    CONTROL = Control()
    ENGINES.clear()


def _load_traces() -> list[Trace]:
    paths = [Path(p) for p in CONTROL.traces] or demo_trace_paths()
    return [load_trace(path) for path in paths]


class FakeHostEngine:
    def __init__(self, traces: list[Trace] | None = None) -> None:
        self.traces = traces if traces is not None else _load_traces()
        self.times = [[record["t"] for record in trace.samples] for trace in self.traces]
        self.running = True
        self.generation = 0
        self.started_wall_us = int(time.time() * 1e6)
        self.watches: dict[int, tuple[int, int]] = {}  # field -> (interval us, watch start us)
        self.groups: dict[int, list[int]] = {}
        self.field_groups: dict[int, list[int]] = {}
        self.values: dict[tuple[int, int], float] = {}  # (gpu, field) -> a value set by a test
        self.blank: set[tuple[int, int]] = set()  # (gpu, field) that read DCGM_*_NOT_SUPPORTED
        self.lost: set[int] = set()
        self.frozen_us: int | None = None  # while set, DCGM's cache stops updating
        self.xid: dict[int, tuple[int, int]] = {}  # gpu -> (last Xid, its ts)
        self._next_id = 1

    # ---- test controls ---------------------------------------------------------------------

    def stop(self) -> None:
        self.running = False

    def restart(self) -> None:
        """A new nv-hostengine process: no groups, no watches, old connections invalid."""
        self.generation += 1
        self.running = True
        self.watches.clear()
        self.groups.clear()
        self.field_groups.clear()

    def inject_xid(self, gpu: int, code: int) -> None:
        self.xid[gpu] = (code, self.now_us())

    def freeze(self) -> None:
        self.frozen_us = self.now_us()

    # ---- engine --------------------------------------------------------------------------------

    def now_us(self) -> int:
        return self.frozen_us if self.frozen_us is not None else int(time.time() * 1e6)

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def record(self, gpu: int, ts_us: int) -> dict:
        trace, times = self.traces[gpu], self.times[gpu]
        position = ((ts_us - self.started_wall_us) / 1e6) % trace.duration
        return trace.samples[min(bisect.bisect_left(times, position), len(times) - 1)]

    def device_attributes(self, gpu: int) -> dict:
        trace = self.traces[gpu]
        return {
            "deviceName": trace.gpu["name"],
            "uuid": f"GPU-fakedcgm-{gpu}-{trace.workload}",
            "pciBusId": f"00000000:{0x18 + gpu:02X}:00.0",
            "driverVersion": trace.gpu["driver"],
            "enforcedPowerLimit": int(trace.gpu["power_limit_mw"] / 1000),
        }

    def reading(self, gpu: int, field_id: int, live: bool) -> tuple[str, int | None, float | None]:
        """(status name, ts, value) of one field; value None means blank."""
        if gpu in self.lost:
            return "DCGM_ST_GPU_IS_LOST", 0, None
        now = self.now_us()
        if field_id == 230:
            code, ts = self.xid.get(gpu, (None, 0))
            if not live and field_id not in self.watches:
                return "DCGM_ST_NOT_WATCHED", 0, None
            return "DCGM_ST_OK", ts, None if code is None else float(code)
        if live:
            ts, updates = now, 2
        else:
            if field_id not in self.watches:
                return "DCGM_ST_NOT_WATCHED", 0, None
            interval, start = self.watches[field_id]
            updates = (now - start) // interval + 1
            ts = start + (updates - 1) * interval
        if (gpu, field_id) in self.blank:
            return "DCGM_ST_OK", ts, None
        if (gpu, field_id) in self.values:
            return "DCGM_ST_OK", ts, self.values[(gpu, field_id)]
        if field_id in PROFILING_IDS and updates < 2:
            return "DCGM_ST_OK", ts, None  # a ratio needs two samples
        record = self.record(gpu, ts)
        if field_id == 52:
            return "DCGM_ST_OK", ts, float(gpu)
        if field_id == 113:
            return "DCGM_ST_OK", ts, float(self.traces[gpu].gpu["max_sm_clock_mhz"])
        if field_id == 156:  # energy in mJ: the trace's mean power integrated since the engine started
            powers = [r["power_mw"] for r in self.traces[gpu].samples if r.get("power_mw") is not None]
            return "DCGM_ST_OK", ts, float(int(sum(powers) / len(powers) * (ts - self.started_wall_us) / 1e6))
        key_scale = TRACE_FIELDS.get(field_id)
        if key_scale is None or record.get(key_scale[0]) is None:
            return "DCGM_ST_OK", ts, None
        return "DCGM_ST_OK", ts, record[key_scale[0]] * key_scale[1]


def embedded_engine() -> FakeHostEngine:
    engine = FakeHostEngine()
    CONTROL.embedded.append(engine)
    return engine


def serve(address: str, traces: list[Trace] | None = None) -> FakeHostEngine:
    """Start a standalone fake nv-hostengine answering at ``address``."""
    engine = FakeHostEngine(traces)
    ENGINES[normalise(address)] = engine
    return engine


def normalise(address: str) -> str:
    return address if ":" in address else f"{address}:5555"


def standalone_engine(address: str) -> FakeHostEngine | None:
    address = normalise(address)
    with _lock:
        if address not in ENGINES and os.environ.get("FAKE_DCGM_SERVE") and normalise(os.environ["FAKE_DCGM_SERVE"]) == address:
            serve(address)
        engine = ENGINES.get(address)
    if engine is not None:
        follow_stop_file(engine)
    return engine


def follow_stop_file(engine: FakeHostEngine) -> None:
    stop_file = os.environ.get("FAKE_DCGM_STOP_FILE")
    if not stop_file:
        return
    if os.path.exists(stop_file):
        engine.stop()
    elif not engine.running:
        engine.restart()
