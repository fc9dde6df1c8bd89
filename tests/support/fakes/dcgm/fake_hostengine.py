"""The engine behind the fake DCGM bindings: GPUs that replay recorded gpu-trace/1 files.

Not part of DCGM's bindings; the fake dcgm_agent calls it. Tests drive it through ``CONTROL``
(in-process) or environment variables (a daemon subprocess):

- FAKE_DCGM_TRACES: trace files, one per GPU, separated by ``os.pathsep`` (default: the shipped H200 traces)
- FAKE_DCGM_GPUS: comma-separated GPU kinds, one per GPU (``hopper``, ``ampere``, ``l4``, ``pascal``, ``unknown-architecture``;
  default: ``hopper`` for every GPU, as the traces were recorded on H200s)
- FAKE_DCGM_NAMING: "4.6" (default) or "3": which field names dcgm_fields defines
- FAKE_DCGM_PROFILING: a DCGM_ST_* name every profiling watch is refused with
- FAKE_DCGM_ROOT: "0" runs the embedded engine (the exporter's own process) as non-root
- FAKE_DCGM_PROFILING_MODULE: "0" as if DCGM 4's proprietary package (the profiling module) were missing
- FAKE_DCGM_MIG: "0:3,1:2": GPU 0 in MIG mode with three GPU instances (one compute instance each), GPU 1 with two
- FAKE_DCGM_SERVE: an address ("127.0.0.1:5555", or a unix socket's path) where a standalone nv-hostengine answers
- FAKE_DCGM_STOP_FILE: while this file exists, that standalone engine is stopped; when it goes, the engine restarts

Each behaviour names the DCGM source file (NVIDIA/DCGM on GitHub, DCGM 4.6, some compared with 3.3.8) it
follows; the few taken from reports instead (the profiling module is closed source) say so.
"""

from __future__ import annotations

import bisect
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpueff.trace import Trace, load_trace, planted_trace_paths

MIB = 1024 * 1024
PROFILING_IDS = frozenset(range(1001, 1017))
XID_ID = 230
UUID_ID = 54
NAME_ID = 50
COMPUTE_CAPABILITY_ID = 63
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


@dataclass(frozen=True)
class Board:
    """What the health fields read on one GPU model (illustrative, except Hopper's limits, read on an
    H100: docs/health.md). Where NVML answers NOT_SUPPORTED, DCGM stores its NOT_SUPPORTED sentinel
    (DcgmCacheManager.cpp, NvmlErrorToInt64Value), played here as None."""

    pcie: tuple[int, int]  # link generation and width, current and maximum alike
    nvlinks: int  # NVLink links; without any, the error totals 409/419/429/439 read NOT_SUPPORTED and every link state NotSupported
    page_retirement: bool  # 390-392: pre-Ampere only (Ampere and newer remap rows instead)
    temperature_limits: tuple[int, int, int, int]  # slowdown, shutdown, GPU max, memory max (158, 159, 152, 151)
    fan: bool = False  # 191: data-centre boards are passively cooled


# The per-link NVLink error fields (dcgm_fields.h, links 0-17): ID -> (link, type).
NVLINK_LINK_IDS = {
    starts[run] + link - (0, 6, 12, 15)[run]: (link, kind)
    for kind, starts in (("crc_flit", (400, 451, 406, 481)), ("crc_data", (410, 457, 416, 484)), ("replay", (420, 463, 426, 487)), ("recovery", (430, 469, 436, 491)))
    for link in range(18) for run in (3 if link >= 15 else 2 if link >= 12 else 1 if link >= 6 else 0,)
}
POWER_VIOLATION_SHARE = 0.25  # of the time since the engine started, the clocks were held down by power


def health_value(board: Board, field_id: int, since_start_us: int) -> float | None:
    """A health field's value; None where this board does not have the reading."""
    if field_id == 240:  # dcgm_fields.cpp: NVML_FI_DEV_PERF_POLICY_POWER, stored unchanged: nanoseconds
        return float(int(since_start_us * 1000 * POWER_VIOLATION_SHARE))
    if field_id in (241, 242, 243, 244, 245, 190, 206, 207):  # other violations, P0, video engines idle
        return 0.0
    if field_id == 202:
        return 0.0
    if field_id in (235, 237):
        return float(board.pcie[0])
    if field_id in (236, 238):
        return float(board.pcie[1])
    if field_id in (409, 419, 429, 439):
        return (3.0 if field_id == 409 else 0.0) if board.nvlinks else None
    if field_id in NVLINK_LINK_IDS:  # each link's errors: link 7 of the board has 5 data-CRC errors, every other count 0
        link, kind = NVLINK_LINK_IDS[field_id]
        return (5.0 if (link, kind) == (7, "crc_data") else 0.0) if link < board.nvlinks else None
    if field_id in (390, 391, 392):
        return {390: 2.0, 391: 0.0, 392: 0.0}[field_id] if board.page_retirement else None
    if field_id in (158, 159, 152, 151):
        return float(board.temperature_limits[(158, 159, 152, 151).index(field_id)])
    if field_id == 191:
        return 40.0 if board.fan else None
    raise KeyError(field_id)


HEALTH_IDS = frozenset({190, 191, 202, 206, 207, 235, 236, 237, 238, *range(240, 246), 390, 391, 392, 409, 419, 429, 439, 151, 152, 158, 159, *NVLINK_LINK_IDS})


@dataclass(frozen=True)
class GpuKind:
    """What the profiling module says about one GPU model.

    ``metric_groups`` is the answer of dcgmProfGetSupportedMetricGroups: (majorId, minorId, field IDs).
    dcgm_structs.h (dcgmProfMetricGroupInfo_v2): groups with the same majorId cannot be watched
    concurrently; dcgm_agent.h (dcgmProfGetSupportedMetricGroups): that limit holds for Ampere and older,
    Hopper and newer read GPM and have none. The group layouts below are illustrative, not copied from a GPU.
    """

    name: str
    compute_capability: tuple[int, int]
    metric_groups: tuple[tuple[int, int, tuple[int, ...]], ...]
    chip_architecture: int  # dcgm_structs.h DCGM_CHIP_ARCH_*
    board: Board = Board((5, 16), nvlinks=18, page_retirement=False, temperature_limits=(89, 95, 87, 95))

    @property
    def one_pass_limited(self) -> bool:
        return self.compute_capability < (9, 0)

    @property
    def supported(self) -> frozenset[int]:
        return frozenset(f for _major, _minor, fields in self.metric_groups for f in fields) & PROFILING_IDS

    def group_of(self, field_id: int) -> tuple[int, int] | None:
        return next(((major, minor) for major, minor, fields in self.metric_groups if field_id in fields), None)


_PRE_HOPPER_GROUPS = (
    (0, 0, (1001,)),
    (1, 0, (1002, 1003, 1004, 1007)),
    (1, 1, (1006,)),
    (1, 2, (1008,)),
    (1, 3, (1013, 1014, 1015, 1016)),
    (2, 0, (1005,)),
    (3, 0, (1009, 1010)),
    (4, 0, (1011, 1012)),
)
KINDS = {
    # DcgmModuleCore.cpp ProcessProfGetMetricGroups (DCGM 4.6) answers for GPM GPUs itself, three groups:
    # 1001-1034, the NVLink and peer-memory fields 1040-1083 (+ per-link 1532, 1533), the cycle counters 1084-1096.
    "hopper": GpuKind("", (9, 0), ((0, 0, tuple(range(1001, 1035))), (1, 0, (*range(1040, 1084), 1532, 1533)), (2, 0, tuple(range(1084, 1097)))), 9),
    "ampere": GpuKind("NVIDIA A100-SXM4-80GB", (8, 0), _PRE_HOPPER_GROUPS, 7, Board((4, 16), nvlinks=12, page_retirement=False, temperature_limits=(90, 95, 87, 95))),
    # A PCIe card without NVLink nor the per-type tensor pipes: only some profiling fields.
    "l4": GpuKind("NVIDIA L4", (8, 9), tuple(g for g in _PRE_HOPPER_GROUPS if g[0] != 4 and g[1] != 3), 8, Board((4, 16), nvlinks=0, page_retirement=False, temperature_limits=(92, 98, 90, 0))),
    # A PCIe Pascal board: page retirement, no NVLink; 0 for the memory limit it does not have.
    "pascal": GpuKind("Tesla P100-PCIE-16GB", (6, 0), (), 4, Board((3, 16), nvlinks=0, page_retirement=True, temperature_limits=(85, 90, 0, 0))),
}
# A GPU newer than this DCGM knows: dcgmGetGpuChipArchitecture answers DCGM_CHIP_ARCH_UNKNOWN (0xFFFFFFFF).
KINDS["unknown-architecture"] = GpuKind("NVIDIA next", (10, 0), KINDS["hopper"].metric_groups, 0xFFFFFFFF)


def _env_kinds() -> list[str]:
    return [each.strip() for each in os.environ.get("FAKE_DCGM_GPUS", "").split(",") if each.strip()]


def _env_mig() -> dict[int, int]:
    """FAKE_DCGM_MIG="0:3,1:2": GPU 0 in MIG mode with three GPU instances, GPU 1 with two."""
    pairs = [each.split(":") for each in os.environ.get("FAKE_DCGM_MIG", "").split(",") if each.strip()]
    return {int(gpu): int(count) for gpu, count in pairs}


@dataclass
class Control:
    naming: str = field(default_factory=lambda: os.environ.get("FAKE_DCGM_NAMING", "4.6"))
    known_field_ids: set[int] | None = None  # None: every ID in dcgm_fields.FIELD_NAMES
    no_library: bool = False
    profiling_refusal: str | None = field(default_factory=lambda: os.environ.get("FAKE_DCGM_PROFILING") or None)
    root: bool = field(default_factory=lambda: os.environ.get("FAKE_DCGM_ROOT", "1") != "0")  # the exporter's own user
    gpu_kinds: list[str] = field(default_factory=_env_kinds)  # per GPU; missing ones are "hopper"
    refuse_fields: set[int] = field(default_factory=set)  # watched with any of these, a watch fails although the query lists them
    multi_pass: str = "multiplex"  # "multiplex" (DCGM >= 2.1) or "refuse" (DCGM_ST_PROFILING_MULTI_PASS, older DCGM)
    traces: list[str] = field(default_factory=lambda: [p for p in os.environ.get("FAKE_DCGM_TRACES", "").split(os.pathsep) if p])
    embedded: list[FakeHostEngine] = field(default_factory=list)  # every embedded engine started
    shuffle_seed: int = 1
    profiling_module: bool = field(default_factory=lambda: os.environ.get("FAKE_DCGM_PROFILING_MODULE", "1") != "0")  # DCGM 4's proprietary package installed
    mig: dict[int, int] = field(default_factory=lambda: _env_mig())  # gpu -> GPU instances, for GPUs in MIG mode

    def knows(self, field_id: int, all_ids: set[int]) -> bool:
        return field_id in (self.known_field_ids if self.known_field_ids is not None else all_ids)


CONTROL = Control()
ENGINES: dict[str, FakeHostEngine] = {}
_lock = threading.Lock()


def reset() -> None:
    """Forget every engine and setting (between tests)."""
    global CONTROL
    CONTROL = Control()
    ENGINES.clear()


def _load_traces() -> list[Trace]:
    paths = [Path(p) for p in CONTROL.traces] or planted_trace_paths()
    return [load_trace(path) for path in paths]


@dataclass
class Watch:
    """One client's watch of one field on one entity. DcgmCacheManager.cpp AddOrUpdateWatcher keys
    watchers by client connection: the same client watching a field again replaces its watcher."""

    interval_us: int
    start_us: int
    keep_us: int  # how long DCGM keeps this watcher's samples (maxKeepAge)
    owner: int  # the session (connection) that asked for it


GPU, GPU_I, GPU_CI = 1, 4, 5  # dcgm_fields.py DCGM_FE_GPU, DCGM_FE_GPU_I, DCGM_FE_GPU_CI
Entity = tuple[int, int]  # (entity group, entity id)
MAX_GROUPS = 64  # dcgm_structs.h DCGM_MAX_NUM_GROUPS, DCGM_MAX_NUM_FIELD_GROUPS: per host engine, every client together
MAX_INSTANCES_PER_GPU = 8  # dcgm_structs.h DCGM_MAX_INSTANCES_PER_GPU


class FakeHostEngine:
    def __init__(self, traces: list[Trace] | None = None, root: bool = True) -> None:
        self.traces = traces if traces is not None else _load_traces()
        self.kinds = [KINDS[CONTROL.gpu_kinds[i] if i < len(CONTROL.gpu_kinds) else "hopper"] for i in range(len(self.traces))]
        self.times = [[record["t"] for record in trace.samples] for trace in self.traces]
        self.root = root
        self.running = True
        self.generation = 0
        self.started_wall_us = int(time.time() * 1e6)
        self.watches: dict[tuple[Entity, int], dict[int, Watch]] = {}  # (entity, field) -> {owner: watch}
        # The profiling module's own watches, keyed as its unwatch message addresses them: (owner, group)
        # (modules/profiling/dcgm_profiling_structs.h dcgmProfUnwatchFields_v1 carries the group only, the
        # module command header the connection). A profiling field no module watch covers gets no new
        # samples from the time the last one went, though the cache manager still watches it.
        self.module_watches: dict[tuple[int, int], set[tuple[Entity, int]]] = {}
        self.module_stopped: dict[tuple[Entity, int], int] = {}  # (entity, field) -> when the module stopped sampling it
        self.groups: dict[int, tuple[str, list[Entity], int]] = {}  # id -> (name, entities, owner)
        self.field_groups: dict[int, tuple[str, list[int], int]] = {}  # id -> (name, fields, owner)
        self.values: dict[tuple[int, int], float | Callable[[int], float]] = {}  # (gpu, field) -> a value set by a test, or its function of ts
        self.blank: set[tuple[int, int]] = set()  # (gpu, field) that read DCGM_*_NOT_SUPPORTED
        self.links_down: set[tuple[int, int]] = set()  # (gpu, link) NVML reports inactive
        self.lost: set[int] = set()
        self.paused = False
        self.frozen_us: int | None = None  # while set, DCGM's clock (and so its cache) stands still
        self.xids: dict[Entity, list[tuple[int, int]]] = {}  # entity -> [(Xid, ts)], oldest first
        self.mig: dict[int, int] = dict(CONTROL.mig)  # gpu -> number of GPU instances (one compute instance each)
        self.log: list[str] = []  # what the host engine logs at ERROR (nv-hostengine.log)
        self.shuffle = random.Random(CONTROL.shuffle_seed)
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
        self.module_watches.clear()
        self.module_stopped.clear()
        self.paused = False

    def inject_xid(self, gpu: int, code: int, entity: Entity | None = None) -> None:
        """An Xid on ``gpu``, stored on ``entity`` (a GPU instance's for an Xid the driver attributes to it)."""
        self.xids.setdefault(entity or (GPU, gpu), []).append((code, self.now_us()))

    def freeze(self) -> None:
        self.frozen_us = self.now_us()

    def watched(self, gpu: int = 0) -> dict[int, int]:
        """Field -> update interval (us) of what is watched on ``gpu``."""
        return {f: self.update_period((GPU, gpu), f) for ((eg, eid), f) in self.watches if (eg, eid) == (GPU, gpu)}

    def watch_as_another_client(self, gpu: int, field_ids: list[int], interval_us: int, owner: int = -1) -> None:
        """Another client of this host engine (dcgm-exporter, dcgmi dmon) watches ``field_ids`` on ``gpu``."""
        start = self.now_us()
        for field_id in field_ids:
            self.watches.setdefault(((GPU, gpu), field_id), {})[owner] = Watch(interval_us, start, 10_000_000, owner)

    # ---- engine --------------------------------------------------------------------------------

    def now_us(self) -> int:
        return self.frozen_us if self.frozen_us is not None else int(time.time() * 1e6)

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    @property
    def profiling_module_loads(self) -> bool:
        """Whether DCGM's profiling module (the one pre-Hopper GPUs need) loads: it needs DCGM 4's
        proprietary package (a non-root engine loads it too and refuses the watch: _profiling_refusal), and GPM GPUs (Hopper and newer) do without it (DcgmModuleCore.cpp
        ProcessProfGetMetricGroups answers for them itself; DcgmApi.cpp helperProfPauseResume: "for
        GPM-enabled platforms, the profiling module may not be loadable")."""
        return CONTROL.profiling_module and any(kind.metric_groups and kind.one_pass_limited for kind in self.kinds)

    def remove_owner(self, owner: int) -> None:
        """A client disconnected: its groups, field groups and watches go (DcgmHostEngineHandler.cpp
        OnConnectionRemove, DcgmFieldGroup.cpp OnConnectionRemove; persistAfterDisconnect is 0)."""
        for table in (self.groups, self.field_groups):
            for key in [k for k, (_name, _members, who) in table.items() if who == owner]:
                del table[key]
        for key, watchers in list(self.watches.items()):
            watchers.pop(owner, None)
            if not watchers:
                del self.watches[key]
        for owner_group in [key for key in self.module_watches if key[0] == owner]:
            self.module_unwatch(*owner_group)

    def unwatch(self, entities: list[Entity], field_ids: list[int], owner: int, group: int = 0) -> None:
        """dcgmUnwatchFields, as DcgmHostEngineHandler.cpp UnwatchFieldGroup runs it: this client's
        watchers of these fields go (DcgmCacheManager.cpp RemoveWatcher), and where any is a profiling
        field the profiling module is told to unwatch the whole group for this client."""
        for entity in entities:
            for field_id in field_ids:
                watchers = self.watches.get((entity, field_id), {})
                watchers.pop(owner, None)
                if not watchers:
                    self.watches.pop((entity, field_id), None)
        if any(f in PROFILING_IDS for f in field_ids):
            self.module_unwatch(owner, group)

    def module_unwatch(self, owner: int, group: int) -> None:
        """The profiling module's unwatch (DCGM_PROFILING_SR_UNWATCH_FIELDS): it names the group and the
        connection, no fields, so every profiling field this client watches on that group stops."""
        dropped = self.module_watches.pop((owner, group), set())
        covered = set().union(*self.module_watches.values())
        now = self.now_us()
        for key in dropped - covered:
            self.module_stopped[key] = now

    def sampled_by_module(self, entity: Entity, field_id: int) -> bool:
        return (entity, field_id) not in self.module_stopped

    def update_period(self, entity: Entity, field_id: int) -> int:
        """The fastest watcher's interval decides (DcgmCacheManager.cpp UpdateWatchFromWatchers)."""
        return min(watch.interval_us for watch in self.watches[(entity, field_id)].values())

    def gpu_of(self, entity: Entity) -> int:
        return entity[1] if entity[0] == GPU else entity[1] // MAX_INSTANCES_PER_GPU

    def instances(self) -> list[tuple[Entity, Entity, int]]:
        """Every MIG entity: (entity, parent, instance number), GPU instances then their compute instance."""
        out = []
        for gpu, count in sorted(self.mig.items()):
            for number in range(count):
                instance = (GPU_I, gpu * MAX_INSTANCES_PER_GPU + number)
                out.append((instance, (GPU, gpu), number))
                out.append(((GPU_CI, instance[1]), instance, number))
        return out

    def link_states(self, gpu: int, up: int, down: int, not_supported: int) -> list[int]:
        """One GPU's NVLink link states as dcgmGetNvLinkLinkStatus gives them (DcgmTopology.cpp
        UpdateNvLinkLinkStateFromNvml): NotSupported beyond the GPU's link count or for a lost GPU."""
        count = 0 if gpu in self.lost else self.kinds[gpu].board.nvlinks
        return [(down if (gpu, link) in self.links_down else up) if link < count else not_supported for link in range(36)]

    def entity_exists(self, entity: Entity) -> bool:
        if entity[0] == GPU:
            return 0 <= entity[1] < len(self.traces)
        return any(each == entity for each, _parent, _number in self.instances())

    def record(self, gpu: int, ts_us: int) -> dict:
        trace, times = self.traces[gpu], self.times[gpu]
        position = ((ts_us - self.started_wall_us) / 1e6) % trace.duration
        return trace.samples[min(bisect.bisect_left(times, position), len(times) - 1)]

    def device_attributes(self, gpu: int) -> dict:
        trace = self.traces[gpu]
        return {
            "deviceName": self.kinds[gpu].name or trace.gpu["name"],
            "uuid": f"GPU-fakedcgm-{gpu}-{trace.workload}",
            "pciBusId": f"00000000:{0x18 + gpu:02X}:00.0",
            "driverVersion": trace.gpu["driver"],
            "enforcedPowerLimit": int(trace.gpu["power_limit_mw"] / 1000),
        }

    def watch(self, entities: list[Entity], field_ids: list[int], interval_us: int, keep_us: int, owner: int, group: int = 0) -> str:
        """Watch ``field_ids`` on ``entities`` (the members of ``group``); the DCGM_ST_* name of the answer.
        All or nothing: a refused watch leaves none of its fields watched, by running the unwatch of the
        whole field group (DcgmHostEngineHandler.cpp WatchFieldGroup: "Clean up any watches that were
        established since at least one failed" calls UnwatchFieldGroup), whose profiling-module message
        carries the group only: every profiling field this client watched on that group before stops
        too (module_unwatch)."""
        profiling = [f for f in field_ids if f in PROFILING_IDS]
        if profiling:
            refusal = self._profiling_refusal(sorted({self.gpu_of(e) for e in entities}), profiling)
            if refusal:
                self.unwatch(entities, field_ids, owner, group)
                return refusal
        if any(self.gpu_of(e) in self.lost for e in entities):
            return "DCGM_ST_GPU_IS_LOST"  # DcgmCacheManager.cpp AddEntityFieldWatch: no watch on a detached GPU
        start = self.now_us()
        for entity in entities:
            for field_id in field_ids:
                self.watches.setdefault((entity, field_id), {})[owner] = Watch(interval_us, start, keep_us, owner)
        if profiling:
            covered = {(entity, f) for entity in entities for f in profiling}
            self.module_watches.setdefault((owner, group), set()).update(covered)
            for key in covered:
                self.module_stopped.pop(key, None)
        return "DCGM_ST_OK"

    def _profiling_refusal(self, gpus: list[int], profiling: list[int]) -> str | None:
        if CONTROL.profiling_refusal:
            return CONTROL.profiling_refusal
        kinds = {self.kinds[gpu] for gpu in gpus}
        if any(kind.one_pass_limited and kind.metric_groups for kind in kinds) and not self.profiling_module_loads:
            # DcgmHostEngineHandler.cpp LoadModule: a module whose load failed is never tried again ("Skipping
            # loading of module {} in status {}"), so every request to it answers DCGM_ST_MODULE_NOT_LOADED for
            # the life of the engine (DCGM 4 without its proprietary package, from reports: the module is closed).
            return "DCGM_ST_MODULE_NOT_LOADED"
        # testing/python3/tests/test_prof.py test_dcgm_prof_requires_root_privileges: on a non-root engine the
        # metric-group query answers and watching a non-GPM GPU's profiling fields answers
        # DCGM_ST_REQUIRES_ROOT; GPM GPUs (Hopper and newer) need no root. dcgmproftester and
        # dcgmi/DeviceMonitor.cpp handle the same answer from dcgmWatchFields.
        if not self.root and any(kind.one_pass_limited and kind.metric_groups for kind in kinds):
            return "DCGM_ST_REQUIRES_ROOT"
        if len(kinds) > 1:  # dcgmProfWatchFields_v1 (DCGM 2.0 API docs): the group's GPUs must be identical
            return "DCGM_ST_GROUP_INCOMPATIBLE"
        kind = kinds.pop()
        if not kind.metric_groups:
            return "DCGM_ST_PROFILING_NOT_SUPPORTED"
        if any(f not in kind.supported or f in CONTROL.refuse_fields for f in profiling):
            return "DCGM_ST_NOT_SUPPORTED"
        if kind.one_pass_limited and CONTROL.multi_pass == "refuse":
            watched = {kind.group_of(f) for (entity, f) in self.watches if entity[0] == GPU and entity[1] in gpus and f in PROFILING_IDS and self.sampled_by_module(entity, f)}
            wanted = watched | {kind.group_of(f) for f in profiling}
            majors = [group[0] for group in wanted if group is not None]
            if len(majors) != len(set(majors)):
                return "DCGM_ST_PROFILING_MULTI_PASS"
        return None

    def _multiplexed_out(self, gpu: int, field_id: int, update: int) -> bool:
        """Whether this update's pass skipped ``field_id``: its metric group shares a majorId with other
        watched groups, by any client of this engine, and DCGM samples one of them per update (the
        "Multiplexing of Profiling Counters" section of DCGM's user guide; DCGM issue 169: such a field
        then reads 0)."""
        kind = self.kinds[gpu]
        if not kind.one_pass_limited:
            return False
        mine = kind.group_of(field_id)
        if mine is None:
            return False
        watched = {kind.group_of(f) for (entity, f) in self.watches if entity == (GPU, gpu) and f in PROFILING_IDS and self.sampled_by_module(entity, f)}
        rivals = sorted(group for group in watched if group is not None and group[0] == mine[0])
        return len(rivals) > 1 and rivals[update % len(rivals)] != mine

    def latest(self, entity: Entity, field_id: int, live: bool) -> tuple[str, int, float | None]:
        """(status name, ts, value) of the latest value, as dcgmEntitiesGetLatestValues answers it; every
        answer that is not OK is logged at ERROR, as DcgmCacheManager.cpp GetMultipleLatestSamples does
        (DCGM 3.3.8 and older log DCGM_ST_NO_DATA too; 4.x logs it at DEBUG)."""
        answer = self._latest(entity, field_id, live)
        status = answer[0]
        if status != "DCGM_ST_OK" and (status != "DCGM_ST_NO_DATA" or CONTROL.naming == "3"):
            self.log.append(f"ERROR GetLatestSample returned {status} for entityId {entity[1]} groupId {entity[0]} fieldId {field_id}")
        return answer

    def _latest(self, entity: Entity, field_id: int, live: bool) -> tuple[str, int, float | None]:
        now = self.now_us()
        gpu = self.gpu_of(entity)
        if gpu in self.lost:
            # DcgmCacheManager.cpp BufferOrCacheLatestGpuValue: a lost GPU's fields get
            # InsertNvmlErrorValue(NVML_ERROR_GPU_IS_LOST) with status OK and the time of the update;
            # DcgmCMUtils.cpp NvmlErrorToInt64Value/NvmlErrorToDoubleValue turn that error into the plain BLANK.
            return "DCGM_ST_OK", now, LOST
        if not live and (entity, field_id) not in self.watches:
            # DcgmCacheManager.cpp GetLatestSample: no watch -> DCGM_ST_NOT_WATCHED and a blank value.
            return "DCGM_ST_NOT_WATCHED", 0, None
        if field_id == XID_ID:
            events = self.xids.get(entity)
            if not events:
                return "DCGM_ST_NO_DATA", 0, None  # GetLatestSample: a watched field with no sample yet
            code, ts = events[-1]
            return "DCGM_ST_OK", ts, float(code)
        if live:
            return self.value_at(entity, field_id, now, 1)
        updates = self.updates(entity, field_id, 0, now)
        if not updates:
            return "DCGM_ST_NO_DATA", 0, None
        update, ts = updates[-1]
        return self.value_at(entity, field_id, ts, update)

    def updates(self, entity: Entity, field_id: int, since_us: int, until_us: int) -> list[tuple[int, int]]:
        """(update number, ts) of the cached samples of a watched field between ``since_us`` and ``until_us``:
        the cache keeps the longest maxKeepAge any watcher asked for (UpdateWatchFromWatchers)."""
        watchers = self.watches[(entity, field_id)].values()
        until_us = min(until_us, self.module_stopped.get((entity, field_id), until_us))  # the profiling module stopped sampling it
        first = min(watch.start_us for watch in watchers)
        period = self.update_period(entity, field_id)
        keep = max(watch.keep_us for watch in watchers)
        low = max(since_us, until_us - keep, first)
        first_update = -(-(low - first) // period)
        last_update = (until_us - first) // period
        return [(update, first + update * period) for update in range(first_update, last_update + 1)]

    def samples(self, entity: Entity, field_id: int, since_us: int, until_us: int) -> tuple[str, list[tuple[int, float | None]]]:
        """(status, [(ts, value)]) as DcgmCacheManager.cpp GetSamples answers dcgmGetValuesSince: an unwatched
        field is DCGM_ST_NOT_WATCHED, a time range without samples DCGM_ST_NO_DATA."""
        if (entity, field_id) not in self.watches:
            return "DCGM_ST_NOT_WATCHED", []
        if field_id == XID_ID:
            events = [(ts, float(code)) for code, ts in self.xids.get(entity, []) if since_us <= ts <= until_us]
            return ("DCGM_ST_OK", events) if events else ("DCGM_ST_NO_DATA", [])
        if self.gpu_of(entity) in self.lost:
            return "DCGM_ST_OK", [(until_us, LOST)]
        out = []
        for update, ts in self.updates(entity, field_id, since_us, until_us):
            status, ts, value = self.value_at(entity, field_id, ts, update)
            out.append((ts, value))
        return ("DCGM_ST_OK", out) if out else ("DCGM_ST_NO_DATA", [])

    def value_at(self, entity: Entity, field_id: int, ts: int, update: int) -> tuple[str, int, float | None]:
        """The value DCGM sampled at ``ts`` (its ``update``-th update of the watch); None is blank."""
        gpu = self.gpu_of(entity)
        kind = self.kinds[gpu]
        if field_id in PROFILING_IDS and self.paused:
            return "DCGM_ST_OK", ts, LOST  # dcgm_agent.h dcgmProfPause: "DCGM will save BLANK values while profiling is paused"
        if (gpu, field_id) in self.blank:
            return "DCGM_ST_OK", ts, None
        if entity[0] == GPU and gpu in self.mig and field_id == 203:
            return "DCGM_ST_OK", ts, None  # NVML answers no coarse utilization for a GPU in MIG mode
        if (gpu, field_id) in self.values:
            value = self.values[(gpu, field_id)]
            return "DCGM_ST_OK", ts, value(ts) if callable(value) else value
        if field_id in PROFILING_IDS:
            if update < 1 and not kind.one_pass_limited:
                return "DCGM_ST_OK", ts, None  # GPM: a rate between two samples (DcgmGpmManager.cpp); the profiling module's first value is valid
            if self._multiplexed_out(gpu, field_id, update):
                return "DCGM_ST_OK", ts, 0.0
        if field_id == 52:
            return "DCGM_ST_OK", ts, float(gpu)
        if field_id == UUID_ID:  # DcgmCacheManager.cpp: nvmlDeviceGetUUID, on a GPU instance its MIG device's
            uuid = self.device_attributes(gpu)["uuid"]
            return "DCGM_ST_OK", ts, uuid if entity[0] == GPU else f"MIG-{uuid.removeprefix('GPU-')}-{entity[1] % MAX_INSTANCES_PER_GPU}"
        if field_id == NAME_ID:  # DcgmCacheManager.cpp: nvmlDeviceGetName; on a GPU instance its profile name, "<slices>g.<GB>gb"
            return "DCGM_ST_OK", ts, self.device_attributes(gpu)["deviceName"] if entity[0] == GPU else "1g.10gb"
        if field_id == COMPUTE_CAPABILITY_ID:
            major, minor = kind.compute_capability
            return "DCGM_ST_OK", ts, float(major << 16 | minor)  # dcgm_fields.h DCGM_CUDA_COMPUTE_CAPABILITY_MAJOR/MINOR
        if field_id == 113:
            return "DCGM_ST_OK", ts, float(self.traces[gpu].gpu["max_sm_clock_mhz"])
        if field_id == 164:  # watts, a double (dcgm_fields.cpp); what the device attributes say at first
            return "DCGM_ST_OK", ts, float(self.device_attributes(gpu)["enforcedPowerLimit"])
        if field_id in HEALTH_IDS:
            return "DCGM_ST_OK", ts, health_value(kind.board, field_id, ts - self.started_wall_us)
        if field_id == 156:  # energy in mJ: the trace's mean power integrated since the engine started
            powers = [r["power_mw"] for r in self.traces[gpu].samples if r.get("power_mw") is not None]
            return "DCGM_ST_OK", ts, float(int(sum(powers) / len(powers) * (ts - self.started_wall_us) / 1e6))
        key_scale = TRACE_FIELDS.get(field_id)
        record = self.record(gpu, ts)
        if key_scale is None or record.get(key_scale[0]) is None:
            return "DCGM_ST_OK", ts, None
        return "DCGM_ST_OK", ts, record[key_scale[0]] * key_scale[1]


LOST = float("nan")  # marks "the plain DCGM_*_BLANK value" (a lost GPU, paused profiling) for dcgm_agent


def embedded_engine() -> FakeHostEngine:
    engine = FakeHostEngine(root=CONTROL.root)  # an embedded engine runs as the exporter's own user
    CONTROL.embedded.append(engine)
    return engine


def serve(address: str, traces: list[Trace] | None = None, root: bool = True) -> FakeHostEngine:
    """Start a standalone fake nv-hostengine answering at ``address`` (host:port, or a unix socket's path)."""
    engine = FakeHostEngine(traces, root=root)
    ENGINES[normalise(address)] = engine
    return engine


def normalise(address: str) -> str:
    return address if ":" in address or address.startswith("/") else f"{address}:5555"


def standalone_engine(address: str, unix_socket: bool = False) -> FakeHostEngine | None:
    """The engine answering at ``address``; a unix socket's path reaches only one served at that path."""
    address = address if unix_socket else normalise(address)
    with _lock:
        if address not in ENGINES and os.environ.get("FAKE_DCGM_SERVE") and normalise(os.environ["FAKE_DCGM_SERVE"]) == address:
            serve(address)
        engine = ENGINES.get(address)
    if engine is not None and unix_socket != address.startswith("/"):
        return None
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
