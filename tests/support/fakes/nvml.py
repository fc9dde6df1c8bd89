"""A fake ``pynvml`` (nvidia-ml-py 13.x) driven by gpu-trace/1 recordings, for tests and benchmarks.

It offers the functions gpueff/backends/nvml/backend.py calls, with the real module's constants, NVMLError
classes and ctypes structs (taken from the installed pynvml, which loads no library until nvmlInit).
Device handles and GPM samples are real ctypes pointers, and strings come back as str or bytes
exactly where pynvml returns them. Each fake GPU plays one trace, looping: a reading is the trace sample whose window
holds the fake time (the same rule as the replay backend); a ``null`` in the trace answers
NOT_SUPPORTED. GPM metrics are the trace's time-weighted mean between the two samples, as GPM's are.
What a trace does not hold (ECC, remapped rows, field values, processes) comes from the ``FakeGpu``
settings; energy is the trace's power integrated over fake time.

Injection: ``fail`` (any call, any NVML error, for one GPU or all, optionally a few times only),
``lose_gpu``/``recover_gpu``, ``unload_driver``/``load_driver``, ``xid`` (delivered through
nvmlEventSetWait) and ``call_cost`` (seconds slept per call, by function name). ``calls`` and
``device_calls`` count every call. The fake is stricter than the driver in one place: it refuses
nvmlGpmMetricsGet on two samples clearly less than 100 ms apart, or from different GPUs.

To extend it, add a method decorated with ``@_api(...)`` named exactly like the pynvml function.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import inspect
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml as _real

from gpueff.gpm_metrics import GPM_METRICS, GpmMetric
from gpueff.trace import Trace


def recorded_gpm(trace: Trace) -> tuple[GpmMetric, ...]:
    """The catalogue's GPM metrics that ``trace`` holds values of. A metric added to the catalogue
    after the trace was recorded plays as NVML_ERROR_NOT_SUPPORTED, as a GPU without it would."""
    return tuple(metric for metric in GPM_METRICS if any(record.get(metric.name) is not None for record in trace.samples))

# Seconds per call measured on an H100 (docs/gpu-facts.md; nvmlDeviceGetSamples, GPM, energy, field
# values and processes re-measured 2026-11-25 with bench/nvml/nvml_poll_cost.py, docs/benchmarks.md), for
# benchmarks that want them. nvmlDeviceGetSamples is pynvml's call: a 17 µs count query and the fill.
# nvmlGpmMetricsGet on a fresh sample pair costs 11-16 µs for any one metric but GRAPHICS_UTIL, which
# costs 1.48 ms, alone or with any others (evidence/2026-11-25-h100/poll-cost-driver/gpm_cost.txt):
# "nvmlGpmMetricsGet:<metric>" is such a metric's cost, and a request costs its costliest metric's.
H100_CALL_COSTS = {
    "nvmlDeviceGetUtilizationRates": 5e-6,
    "nvmlDeviceGetSamples": 1.5e-3,
    "nvmlDeviceGetPowerUsage": 5e-6,
    "nvmlDeviceGetTemperature": 5e-6,
    "nvmlDeviceGetClockInfo": 5e-6,
    "nvmlDeviceGetMemoryInfo": 10e-6,
    "nvmlDeviceGetComputeRunningProcesses": 45e-6,
    "nvmlDeviceGetCurrentClocksEventReasons": 5e-6,
    "nvmlGpmSampleGet": 217e-6,
    "nvmlGpmMetricsGet": 13e-6,
    "nvmlGpmMetricsGet:GRAPHICS_UTIL": 1.48e-3,
    "nvmlDeviceGetTotalEnergyConsumption": 3.4e-3,
    "nvmlDeviceGetFieldValues": 5e-6,
    "nvmlDeviceGetPcieThroughput": 21e-3,
}
GPM_MIN_GAP = 0.1
CALL_LOG_LENGTH = 512  # calls kept in each call log (the tests read the last few hundred at most)
PROCESS_SAMPLE_PERIOD = 1.0  # one per-process utilization sample a second per process, as seen on an H100
# nvmlDeviceGetMemoryBusWidth as the real cards report it (H100: a public CUDA device query; H200: read on
# the device, evidence/2026-11-28-h200/peaks); other models answer NotSupported.
MEMORY_BUS_WIDTH_BITS = {"NVIDIA H100 80GB HBM3": 5120, "NVIDIA H200": 6016}
_GPM_NAMES = {value: name.removeprefix("NVML_GPM_METRIC_") for name, value in vars(_real).items() if name.startswith("NVML_GPM_METRIC_") and name != "NVML_GPM_METRIC_MAX"}


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass
class FakeGpu:
    """One fake GPU: the trace it plays and what the trace does not hold."""

    trace: Trace
    uuid: str = ""  # default: the trace's uuid, or GPU-fake-<index>-<workload>
    name: str | bytes = ""  # default: the trace's GPU name; bytes: returned as pynvml returns the driver's bytes
    gpm: bool = True  # False: a pre-Hopper GPU (nvmlGpmQueryDeviceSupport says unsupported)
    fields: dict[int, float] = field(default_factory=dict)  # nvmlDeviceGetFieldValues: field id -> value
    ecc_errors: tuple[int, int] = (0, 0)  # volatile (corrected, uncorrected)
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # correctable, uncorrectable, pending, failure
    processes: list[tuple[int, int, str | bytes]] = field(default_factory=list)  # (pid, used bytes, process name)
    # nvmlDeviceGetProcessUtilization: pid -> share of each driver sample period its kernels ran (smUtil / 100)
    process_duty: dict[int, float] = field(default_factory=dict)
    # Health readings (gpueff/backends/nvml_health.py). The defaults are what a one-GPU H100 SXM
    # answered (docs/health.md); None answers NOT_SUPPORTED, as a GPU without the reading does.
    pcie_replays: int | None = 0
    pcie_link: tuple[int, int, int, int] | None = (5, 5, 16, 16)  # current generation, max generation, current width, max width
    nvlink_links: tuple[bool, ...] = ()  # each link's state; () is a GPU without NVLink (link count 0)
    nvlink_errors: tuple[int, int, int, int] = (0, 0, 0, 0)  # crc_flit, crc_data, replay, recovery totals
    # Hopper's data-link error fields, per link (crc_flit, replay, recovery), read with scopeId = the link
    # (ALL_LINKS: their sums); () answers them NotSupported, as a driver without them does.
    nvlink_link_errors: tuple[tuple[int, int, int], ...] = ()
    nvlink_totals: bool = True  # whether the *_TOTAL error fields answer (Hopper's driver: NotSupported)
    nvlink_crc_data: tuple[int, ...] = ()  # each link's data-CRC count (nvmlDeviceGetNvLinkErrorCounter); () answers NotSupported
    # Topology (nvmlDeviceGetNvLinkRemotePciInfo, nvmlDeviceGetTopologyCommonAncestor, nvmlDeviceGetP2PStatus):
    # each link's far end, as the index of the GPU it joins or NVSWITCH; GPUs of one pcie_switch hang
    # from one PCIe switch, else from one host bridge within a numa_node, else across sockets.
    nvlink_remote: tuple[int, ...] = ()
    pcie_switch: int = 0
    numa_node: int = 0
    violation_ns: dict[int, int] = field(default_factory=dict)  # NVML_PERF_POLICY_* -> violationTime (ns); missing: 0
    retired_pages: tuple[int, int, bool] | None = None  # single-bit pages, double-bit pages, pending; None: Ampere and newer
    performance_state: int = 0
    codec_utilization: tuple[int, int] | None = (0, 0)  # encoder, decoder percent
    fan_percent: int | None = None  # passively cooled
    temperature_limits: dict[int, int] = field(default_factory=lambda: {0: 92, 1: 89, 2: 95, 3: 87})  # NVML_TEMPERATURE_THRESHOLD_* -> celsius
    lost: bool = False
    # MIG: a FakeGpu with mig_of set is a MIG device of the GPU at that position in the list (whose
    # MIG mode is then enabled); it is not counted by nvmlDeviceGetCount, only reached through
    # nvmlDeviceGetMigDeviceHandleByIndex, and answers NOT_SUPPORTED for utilization rates.
    mig_of: int | None = None
    gpu_instance_id: int = 0


NVSWITCH = -1  # FakeGpu.nvlink_remote: the link ends at an NVSwitch


@dataclass
class _Failure:
    code: int
    times: int | None  # None: until cleared


class _EventSet:
    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # GPU index -> event type mask
        self.pending: list[tuple[int, int, int]] = []  # (GPU index, event type, data)
        self.ready = threading.Condition()
        self.freed = False


def _as_pynvml_returns(value: str | bytes) -> str:
    """A driver string as the real pynvml hands it over: its own ``convertStrBytes`` decodes the
    driver's bytes as strict UTF-8 (UnicodeDecodeError where they are not)."""
    return _real.convertStrBytes(lambda: value)()


def _api(device: str | None = "handle", needs_init: bool = True) -> Callable:
    """Counts the call, sleeps its cost, then raises what the fake's state says the call would raise.

    ``device``: how the first argument names a GPU ("handle", "index") or None for no GPU.
    """

    def wrap(method: Callable) -> Callable:
        name = method.__name__

        @functools.wraps(method)
        def call(self: FakeNvml, *args: Any) -> Any:
            index = None
            if device == "handle":
                index = self._index_of(args[0])
            elif device == "index":
                index = args[0] if isinstance(args[0], int) and 0 <= args[0] < len(self.gpus) else None
            with self._lock:
                self.calls[name] += 1
                if index is not None:
                    self.device_calls[name, index] += 1
            cost = self.call_cost.get(name)
            if cost:
                time.sleep(cost)
            self._raise_if_failing(name, index, needs_init)
            if device == "index" and index is None:
                raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
            return method(self, *args)

        call.fake_api = True
        return call

    return wrap


class FakeNvml:
    """Stands in for the ``pynvml`` module: pass it as NvmlBackend(nvml=...) or put it in sys.modules."""

    def __init__(self, gpus: Sequence[Trace | FakeGpu], clock: Callable[[], float] = time.monotonic, call_cost: dict[str, float] | None = None, event_wait_cap: float = 0.05) -> None:
        self.gpus = [gpu if isinstance(gpu, FakeGpu) else FakeGpu(gpu) for gpu in gpus]
        for index, gpu in enumerate(self.gpus):
            gpu.uuid = gpu.uuid or gpu.trace.gpu.get("uuid") or f"GPU-fake-{index}-{gpu.trace.workload}"
            gpu.name = gpu.name or gpu.trace.gpu["name"]
        self.clock = clock
        self.started = clock()
        self.call_cost = dict(call_cost or {})
        self.event_wait_cap = event_wait_cap  # nvmlEventSetWait returns TIMEOUT after at most this long
        self.calls: Counter[str] = Counter()
        self.event_wait_timeouts: Counter[int] = Counter()  # nvmlEventSetWait calls by the timeout asked for (ms)
        # The call logs keep the last CALL_LOG_LENGTH calls: a soak's memory is the exporter's, not the fake's.
        self.samples_last_seen: deque[tuple[int, int]] = deque(maxlen=CALL_LOG_LENGTH)  # (GPU index, lastSeenTimeStamp) of each nvmlDeviceGetSamples call
        self.device_calls: Counter[tuple[str, int]] = Counter()
        self.driver_loaded = True
        self.init_count = 0
        self.gpm_samples: dict[int, list[Any]] = {}  # address -> [buffer, GPU index, fake time]
        self._integrals: dict[tuple[int, str], tuple[list[float], list[Any], list[float], list[float]]] = {}  # (GPU, key) -> bounds, values, running sums
        self.gpm_requests: deque[tuple[int, tuple[str, ...], float, float]] = deque(maxlen=CALL_LOG_LENGTH)  # each nvmlGpmMetricsGet: (GPU index, metric names, fake times of its two samples)
        self.event_sets: list[_EventSet] = []
        self._failures: dict[tuple[str, int | None], _Failure] = {}
        self._lock = threading.Lock()
        self._times = [[record["t"] for record in gpu.trace.samples] for gpu in self.gpus]
        self._handle_buffers = [ctypes.create_string_buffer(8) for _ in self.gpus]
        self._handles = [ctypes.cast(buffer, _real.c_nvmlDevice_t) for buffer in self._handle_buffers]
        self._index_by_address = {ctypes.addressof(buffer): index for index, buffer in enumerate(self._handle_buffers)}

    # ---- constants, error classes and structs come from the real module ----------------------

    def __getattr__(self, name: str) -> Any:
        value = getattr(_real, name, None)
        if value is None or inspect.isfunction(value):
            raise AttributeError(f"the fake pynvml has no {name!r}: add it to tests/support/fakes/nvml.py")
        return value

    # ---- injection -----------------------------------------------------------------------------

    def fail(self, function: str, code: int, gpu: int | None = None, times: int | None = None) -> None:
        """Make ``function`` raise NVMLError(code), for one GPU or all, ``times`` times or until cleared."""
        self._failures[function, gpu] = _Failure(code, times)

    def clear_failures(self, function: str | None = None) -> None:
        for key in [key for key in self._failures if function in (None, key[0])]:
            del self._failures[key]

    def lose_gpu(self, index: int) -> None:
        self.gpus[index].lost = True

    def recover_gpu(self, index: int) -> None:
        self.gpus[index].lost = False

    def unload_driver(self) -> None:
        self.driver_loaded = False

    def load_driver(self) -> None:
        self.driver_loaded = True

    def xid(self, index: int, code: int) -> int:
        """Raise Xid ``code`` on GPU ``index``; returns how many event sets it was delivered to."""
        delivered = 0
        for event_set in self.event_sets:
            if not event_set.freed and event_set.registered.get(index, 0) & _real.nvmlEventTypeXidCriticalError:
                with event_set.ready:
                    event_set.pending.append((index, _real.nvmlEventTypeXidCriticalError, code))
                    event_set.ready.notify_all()
                delivered += 1
        return delivered

    # ---- internals -----------------------------------------------------------------------------

    def _index_of(self, handle: Any) -> int:
        try:
            address = ctypes.cast(handle, ctypes.c_void_p).value
        except (TypeError, ctypes.ArgumentError):
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT) from None
        if address not in self._index_by_address:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return self._index_by_address[address]

    def _raise_if_failing(self, name: str, index: int | None, needs_init: bool) -> None:
        for key in ((name, index), (name, None)):
            failure = self._failures.get(key)
            if failure is not None:
                if failure.times is not None:
                    failure.times -= 1
                    if failure.times <= 0:
                        del self._failures[key]
                raise _real.NVMLError(failure.code)
        if not self.driver_loaded:
            raise _real.NVMLError(_real.NVML_ERROR_DRIVER_NOT_LOADED)
        if needs_init and self.init_count == 0:
            raise _real.NVMLError(_real.NVML_ERROR_UNINITIALIZED)
        if index is not None and self.gpus[index].lost:
            raise _real.NVMLError(_real.NVML_ERROR_GPU_IS_LOST)

    def record(self, index: int, at: float | None = None) -> dict[str, Any]:
        """The trace sample GPU ``index`` plays at fake time ``at`` (default: now)."""
        trace, times = self.gpus[index].trace, self._times[index]
        position = ((self.clock() if at is None else at) - self.started) % trace.duration
        return trace.samples[min(bisect.bisect_left(times, position), len(times) - 1)]

    def _value(self, index: int, key: str) -> Any:
        value = self.record(index).get(key)
        if value is None:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _integral(self, index: int, key: str, at: float) -> tuple[float, float]:
        """The trace's ``key`` integrated over fake time from the start to ``at``, and the time it was not null."""
        cached = self._integrals.get((index, key))
        if cached is None:
            trace, times = self.gpus[index].trace, self._times[index]
            bounds = [0.0, *times[:-1], trace.duration]  # sample i covers bounds[i]..bounds[i + 1]
            values = [record.get(key) for record in trace.samples]
            totals, covered = [0.0], [0.0]  # before sample i
            for i, value in enumerate(values):
                span = bounds[i + 1] - bounds[i] if value is not None else 0.0
                totals.append(totals[-1] + (value or 0) * span)
                covered.append(covered[-1] + span)
            cached = self._integrals[index, key] = (bounds, values, totals, covered)
        bounds, values, totals, covered = cached
        loops, position = divmod(at - self.started, self.gpus[index].trace.duration)
        i = min(max(bisect.bisect_right(bounds, position) - 1, 0), len(values) - 1)
        part = max(0.0, position - bounds[i]) if values[i] is not None else 0.0
        return loops * totals[-1] + totals[i] + (values[i] or 0) * part, loops * covered[-1] + covered[i] + part

    def energy_mj(self, index: int, at: float | None = None) -> int:
        """The trace's power integrated from the fake start to ``at``, in millijoules."""
        return int(self._integral(index, "power_mw", self.clock() if at is None else at)[0])

    def window_mean(self, index: int, key: str, start: float, end: float) -> float | None:
        """The time-weighted mean of the trace's ``key`` over fake times ``start``..``end`` (what GPM
        reads between two samples); None where the sample at ``end`` holds null (not supported)."""
        if self.record(index, at=end).get(key) is None:
            return None
        (total_end, covered_end), (total_start, covered_start) = self._integral(index, key, end), self._integral(index, key, start)
        return (total_end - total_start) / (covered_end - covered_start)

    # ---- init and system -----------------------------------------------------------------------

    @_api(device=None, needs_init=False)
    def nvmlInit(self) -> None:
        self.init_count += 1

    @_api(device=None)
    def nvmlShutdown(self) -> None:
        self.init_count -= 1
        if self.init_count == 0:  # NVML frees the event sets it still holds
            for event_set in self.event_sets:
                event_set.freed = True
            self.event_sets.clear()

    @_api(device=None)
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.gpus[0].trace.gpu["driver"] if self.gpus else "580.159.04"

    @_api(device=None)
    def nvmlDeviceGetCount(self) -> int:
        return sum(1 for gpu in self.gpus if gpu.mig_of is None)

    @_api(device="index")
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if self.gpus[index].mig_of is not None:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return self._handles[index]

    # ---- MIG -----------------------------------------------------------------------------------

    def _mig_children(self, index: int) -> list[int]:
        return [child for child, gpu in enumerate(self.gpus) if gpu.mig_of == index]

    @_api()
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        index = self._index_of(handle)
        if self.gpus[index].mig_of is not None:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        mode = _real.NVML_DEVICE_MIG_ENABLE if self._mig_children(index) else _real.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    @_api()
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        return 7 if self._mig_children(self._index_of(handle)) else 0

    @_api()
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, slot: int) -> Any:
        children = self._mig_children(self._index_of(handle))
        if not 0 <= slot < len(children):
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)  # an empty slot
        return self._handles[children[slot]]

    @_api()
    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        gpu = self.gpus[self._index_of(handle)]
        if gpu.mig_of is None:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.gpu_instance_id

    @_api()
    def nvmlGpmMigSampleGet(self, handle: Any, gpu_instance_id: int, sample: Any) -> Any:
        index = self._index_of(handle)
        children = [child for child in self._mig_children(index) if self.gpus[child].gpu_instance_id == gpu_instance_id]
        if not children or not self.gpus[index].gpm:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT if not children else _real.NVML_ERROR_NOT_SUPPORTED)
        entry = self._gpm_sample(sample)
        entry[1], entry[2] = children[0], self.clock()
        return sample

    # ---- identity ------------------------------------------------------------------------------

    @_api()
    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self.gpus[self._index_of(handle)].uuid

    @_api()
    def nvmlDeviceGetName(self, handle: Any) -> str:
        return _as_pynvml_returns(self.gpus[self._index_of(handle)].name)

    @_api()
    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        gpu = self.gpus[self._index_of(handle)]
        if gpu.mig_of is None:  # as the real NVML (H200, driver 580): only MIG handles answer
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        attributes = _real.c_nvmlDeviceAttributes()
        attributes.multiprocessorCount = gpu.trace.gpu["sm_count"]
        return attributes

    @_api()
    def nvmlDeviceGetNumGpuCores(self, handle: Any) -> int:
        return int(self.gpus[self._index_of(handle)].trace.gpu["sm_count"]) * 128  # Hopper: 128 per SM

    @_api()
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        return (9, 0)

    @_api()
    def nvmlDeviceGetMemoryBusWidth(self, handle: Any) -> int:
        width = MEMORY_BUS_WIDTH_BITS.get(self.gpus[self._index_of(handle)].trace.gpu["name"])
        if width is None:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return width

    @_api()
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return int(self.gpus[self._index_of(handle)].trace.gpu["power_limit_mw"])

    @_api()
    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock_type: int) -> int:
        index = self._index_of(handle)
        if clock_type == _real.NVML_CLOCK_SM:
            return int(self.gpus[index].trace.gpu["max_sm_clock_mhz"])
        if clock_type == _real.NVML_CLOCK_MEM:
            clocks = [record["mem_clock_mhz"] for record in self.gpus[index].trace.samples if record.get("mem_clock_mhz") is not None]
            if clocks:
                return int(max(clocks))
        raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)

    @_api()
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        info = _real.nvmlPciInfo_t()
        info.busId = self._bus_id(self._index_of(handle)).encode()
        return info

    @staticmethod
    def _bus_id(index: int) -> str:
        return f"00000000:{0x18 + index:02X}:00.0"

    # ---- readings every poll -------------------------------------------------------------------

    DRIVER_SAMPLE_PERIOD = 0.2  # the driver takes a utilization sample every ~167 ms on an H100 (72 kept)
    DRIVER_SAMPLES_KEPT = 70

    @_api()
    def nvmlDeviceGetSamples(self, handle: Any, sampling_type: int, last_seen: int) -> tuple[int, list[Any]]:
        """The driver's utilization samples newer than ``last_seen`` (microseconds), each the trace's
        util_gpu at its time; NOT_FOUND when there is none, as the real call answers."""
        index = self._index_of(handle)
        self.samples_last_seen.append((index, last_seen))
        if sampling_type != _real.NVML_GPU_UTILIZATION_SAMPLES:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        newest = int((self.clock() - self.started) / self.DRIVER_SAMPLE_PERIOD)
        samples = []
        for number in range(max(0, newest - self.DRIVER_SAMPLES_KEPT + 1), newest + 1):
            at = self.started + number * self.DRIVER_SAMPLE_PERIOD
            stamp = round(at * 1e6)
            if stamp <= last_seen:
                continue
            sample = _real.c_nvmlSample_t()
            sample.timeStamp = stamp
            sample.sampleValue.uiVal = int(self.record(index, at=at).get("util_gpu") or 0)
            samples.append(sample)
        if not samples:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
        return _real.NVML_VALUE_TYPE_UNSIGNED_INT, samples

    @_api()
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        index = self._index_of(handle)
        if self.gpus[index].mig_of is not None or self._mig_children(index):
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)  # no coarse utilization with MIG on
        utilization = _real.c_nvmlUtilization_t()
        utilization.gpu = int(self._value(index, "util_gpu"))
        utilization.memory = int(self._value(index, "util_mem"))
        return utilization

    @_api()
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return int(self._value(self._index_of(handle), "power_mw"))

    @_api()
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        if sensor != _real.NVML_TEMPERATURE_GPU:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return int(self._value(self._index_of(handle), "temp_c"))

    @_api()
    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        key = {_real.NVML_CLOCK_SM: "sm_clock_mhz", _real.NVML_CLOCK_MEM: "mem_clock_mhz"}.get(clock_type)
        if key is None:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return int(self._value(self._index_of(handle), key))

    @_api()
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        index = self._index_of(handle)
        used, total = int(self._value(index, "mem_used")), int(self._value(index, "mem_total"))
        if version:
            if version != _real.nvmlMemory_v2:
                raise _real.NVMLError(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
            memory = _real.c_nvmlMemory_v2_t()
            memory.version, memory.reserved = version, 0
        else:
            memory = _real.c_nvmlMemory_t()
        memory.total, memory.used, memory.free = total, used, total - used
        return memory

    @_api()
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return int(self._value(self._index_of(handle), "throttle"))

    @_api()
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return [_real.nvmlFriendlyObject({"pid": pid, "usedGpuMemory": used, "gpuInstanceId": 0xFFFFFFFF, "computeInstanceId": 0xFFFFFFFF}) for pid, used, _ in self.gpus[self._index_of(handle)].processes]

    @_api(device=None)
    def nvmlSystemGetProcessName(self, pid: int) -> str:
        for gpu in self.gpus:
            for process_id, _, name in gpu.processes:
                if process_id == pid:
                    return _as_pynvml_returns(name)
        raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)

    @_api()
    def nvmlDeviceGetProcessUtilization(self, handle: Any, last_seen_us: int) -> list[Any]:
        """As the driver answered on an H100 (evidence/2026-11-25-h100/sharing/README.md): one entry
        per process that ran since ``last_seen_us`` (0: ever), stamped with that process's latest
        sample time (CPU time in microseconds; one sample a second per process, each process at its
        own phase), ``smUtil`` its utilization over that time; NOT_FOUND when no process has a
        newer sample (an idle GPU); NOT_SUPPORTED with MIG on."""
        index = self._index_of(handle)
        gpu = self.gpus[index]
        if gpu.mig_of is not None or self._mig_children(index):
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        elapsed = self.clock() - self.started
        samples = []
        for pid, duty in gpu.process_duty.items():
            phase = (pid % 10) / 10 * PROCESS_SAMPLE_PERIOD
            ticks = int((elapsed - phase) // PROCESS_SAMPLE_PERIOD)
            stamp = int((self.started + phase + ticks * PROCESS_SAMPLE_PERIOD) * 1e6)
            if ticks >= 1 and stamp > last_seen_us and round(duty * 100) > 0:
                sample = _real.c_nvmlProcessUtilizationSample_t()
                sample.pid, sample.timeStamp, sample.smUtil, sample.memUtil = pid, stamp, round(duty * 100), round(duty * 30)
                samples.append(sample)
        if not samples:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
        return samples

    @_api()
    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        """KB/s; on a real GPU this call blocks 20 ms to measure (the daemon must not use it)."""
        key = {_real.NVML_PCIE_UTIL_TX_BYTES: "PCIE_TX_PER_SEC", _real.NVML_PCIE_UTIL_RX_BYTES: "PCIE_RX_PER_SEC"}[counter]
        return int(self._value(self._index_of(handle), key) * 1024 * 1024 / 1000)

    # ---- health (nvml_health.py) ---------------------------------------------------------------

    def _gpu(self, handle: Any) -> FakeGpu:
        return self.gpus[self._index_of(handle)]

    def _whole_gpu(self, handle: Any) -> FakeGpu:
        """A GPU's own readings; a MIG device answers NOT_SUPPORTED (they belong to its GPU)."""
        gpu = self._gpu(handle)
        if gpu.mig_of is not None:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    @staticmethod
    def _given(value: Any) -> Any:
        if value is None:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return value

    @_api()
    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        return int(self._given(self._whole_gpu(handle).pcie_replays))

    def _link(self, handle: Any, slot: int) -> int:
        return int(self._given(self._whole_gpu(handle).pcie_link)[slot])

    @_api()
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._link(handle, 0)

    @_api()
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._link(handle, 1)

    @_api()
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._link(handle, 2)

    @_api()
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._link(handle, 3)

    @_api()
    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        links = self._whole_gpu(handle).nvlink_links
        if not links:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(links):
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return int(links[link])

    @_api()
    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int:
        gpu = self._whole_gpu(handle)
        if not gpu.nvlink_crc_data or counter != _real.NVML_NVLINK_ERROR_DL_CRC_DATA:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.nvlink_links):
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.nvlink_crc_data[link]

    @_api()
    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        gpu = self._whole_gpu(handle)
        if not 0 <= link < len(gpu.nvlink_links):
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT if gpu.nvlink_links else _real.NVML_ERROR_NOT_SUPPORTED)
        if link >= len(gpu.nvlink_remote):
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        far = gpu.nvlink_remote[link]
        info = _real.nvmlPciInfo_t()
        info.busId = (b"00000000:F0:00.0" if far == NVSWITCH else self._bus_id(far).encode())
        return info

    @_api()
    def nvmlDeviceGetTopologyCommonAncestor(self, handle: Any, other: Any) -> int:
        one, two = self._whole_gpu(handle), self._whole_gpu(other)
        if one is two:
            return int(_real.NVML_TOPOLOGY_INTERNAL)
        if one.numa_node != two.numa_node:
            return int(_real.NVML_TOPOLOGY_SYSTEM)
        return int(_real.NVML_TOPOLOGY_SINGLE if one.pcie_switch == two.pcie_switch else _real.NVML_TOPOLOGY_HOSTBRIDGE)

    @_api()
    def nvmlDeviceGetP2PStatus(self, handle: Any, other: Any, capability: int) -> int:
        one, two = self._index_of(handle), self._index_of(other)
        if capability != _real.NVML_P2P_CAPS_INDEX_NVLINK:
            return int(_real.NVML_P2P_STATUS_OK)
        ends = [set(self.gpus[index].nvlink_remote) for index in (one, two)]
        joined = two in ends[0] or one in ends[1] or (NVSWITCH in ends[0] and NVSWITCH in ends[1])
        return int(_real.NVML_P2P_STATUS_OK if joined else _real.NVML_P2P_STATUS_NOT_SUPPORTED)

    @_api()
    def nvmlDeviceGetViolationStatus(self, handle: Any, policy: int) -> Any:
        gpu = self._whole_gpu(handle)
        if not 0 <= policy < _real.NVML_PERF_POLICY_COUNT:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        violation = _real.c_nvmlViolationTime_t()
        violation.referenceTime = int(self.clock() * 1e6)
        violation.violationTime = gpu.violation_ns.get(policy, 0)
        return violation

    @_api()
    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> list[int]:
        single, double, _ = self._given(self._whole_gpu(handle).retired_pages)
        count = single if cause == _real.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS else double
        return [0x1000 * (page + 1) for page in range(count)]

    @_api()
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        return int(self._given(self._whole_gpu(handle).retired_pages)[2])

    @_api()
    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int:
        return self._whole_gpu(handle).performance_state

    @_api()
    def nvmlDeviceGetEncoderUtilization(self, handle: Any) -> list[int]:
        return [int(self._given(self._whole_gpu(handle).codec_utilization)[0]), 167000]

    @_api()
    def nvmlDeviceGetDecoderUtilization(self, handle: Any) -> list[int]:
        return [int(self._given(self._whole_gpu(handle).codec_utilization)[1]), 167000]

    @_api()
    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        return int(self._given(self._whole_gpu(handle).fan_percent))

    @_api()
    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int:
        return int(self._given(self._whole_gpu(handle).temperature_limits.get(threshold)))

    # ---- slow-cadence readings -----------------------------------------------------------------

    @_api()
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return self.energy_mj(self._index_of(handle))

    @_api()
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        if counter_type != _real.NVML_VOLATILE_ECC:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return self.gpus[self._index_of(handle)].ecc_errors[0 if error_type == _real.NVML_MEMORY_ERROR_TYPE_CORRECTED else 1]

    @_api()
    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        return self.gpus[self._index_of(handle)].remapped_rows

    @_api()
    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> Any:
        """The GPU's ``fields``, and its NVLink link count and error totals; NOT_SUPPORTED in the
        value's own nvmlReturn for the rest (and for the error totals of a GPU without NVLink)."""
        gpu = self.gpus[self._index_of(handle)]
        fields = dict(gpu.fields)
        fields[_real.NVML_FI_DEV_NVLINK_LINK_COUNT] = len(gpu.nvlink_links)
        if gpu.nvlink_links and gpu.nvlink_totals:
            totals = (_real.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, _real.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
                      _real.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, _real.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL)
            fields.update(zip(totals, gpu.nvlink_errors))
        scoped = {(_real.NVML_FI_DEV_NVLINK_GET_STATE, link): float(up) for link, up in enumerate(gpu.nvlink_links)}
        for position, field_id in enumerate((_real.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, _real.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, _real.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY)):
            scoped.update({(field_id, link): float(counts[position]) for link, counts in enumerate(gpu.nvlink_link_errors)})
            if gpu.nvlink_link_errors:
                scoped[field_id, 0xFFFFFFFF] = float(sum(counts[position] for counts in gpu.nvlink_link_errors))
        values = (_real.c_nvmlFieldValue_t * len(field_ids))()
        for slot, asked in enumerate(field_ids):
            field_id, scope = asked if isinstance(asked, tuple) else (asked, 0)
            values[slot].fieldId, values[slot].scopeId = field_id, scope
            values[slot].timestamp = int(self.clock() * 1e6)
            value = scoped.get((field_id, scope)) if isinstance(asked, tuple) else fields.get(field_id)
            if value is not None:
                values[slot].nvmlReturn = _real.NVML_SUCCESS
                values[slot].valueType = _real.NVML_VALUE_TYPE_DOUBLE
                values[slot].value.dVal = value
            else:
                values[slot].nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
        return values

    # ---- GPM -----------------------------------------------------------------------------------

    @_api()
    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        support = _real.c_nvmlGpmSupport_t()
        support.version = _real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(self.gpus[self._index_of(handle)].gpm)
        return support

    @_api(device=None)
    def nvmlGpmSampleAlloc(self) -> Any:
        buffer = ctypes.create_string_buffer(8)
        self.gpm_samples[ctypes.addressof(buffer)] = [buffer, None, None]
        return ctypes.cast(buffer, _real.c_nvmlGpmSample_t)

    def _gpm_sample(self, sample: Any) -> list[Any]:
        entry = self.gpm_samples.get(ctypes.cast(sample, ctypes.c_void_p).value)
        if entry is None:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return entry

    @_api(device=None)
    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._gpm_sample(sample)
        del self.gpm_samples[ctypes.cast(sample, ctypes.c_void_p).value]

    @_api()
    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        index = self._index_of(handle)
        if self.gpus[index].mig_of is not None:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)  # MIG devices: nvmlGpmMigSampleGet
        if not self.gpus[index].gpm:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        entry = self._gpm_sample(sample)
        entry[1], entry[2] = index, self.clock()
        return sample

    @_api(device=None)
    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        if request.version != _real.NVML_GPM_METRICS_GET_VERSION:
            raise _real.NVMLError(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        _, index1, time1 = self._gpm_sample(request.sample1)
        _, index2, time2 = self._gpm_sample(request.sample2)
        if index1 is None or index1 != index2 or time2 - time1 < GPM_MIN_GAP - 0.001 or not 0 < request.numMetrics <= _real.NVML_GPM_METRIC_MAX:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index2].lost:
            raise _real.NVMLError(_real.NVML_ERROR_GPU_IS_LOST)
        names = [_GPM_NAMES.get(request.metrics[slot].metricId, "") for slot in range(request.numMetrics)]
        self.gpm_requests.append((index2, tuple(names), time1, time2))
        dearest = max((self.call_cost.get(f"nvmlGpmMetricsGet:{name}", 0.0) for name in names), default=0.0)
        if dearest > self.call_cost.get("nvmlGpmMetricsGet", 0.0):
            time.sleep(dearest - self.call_cost.get("nvmlGpmMetricsGet", 0.0))
        for slot, name in enumerate(names):
            metric = request.metrics[slot]
            value = self.window_mean(index2, name, time1, time2) if name else None
            metric.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED if value is None else _real.NVML_SUCCESS
            metric.value = 0.0 if value is None else value
        return request

    # ---- events --------------------------------------------------------------------------------

    @_api(device=None)
    def nvmlEventSetCreate(self) -> _EventSet:
        event_set = _EventSet()
        self.event_sets.append(event_set)
        return event_set

    @_api()
    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: _EventSet) -> None:
        index = self._index_of(handle)
        event_set.registered[index] = event_set.registered.get(index, 0) | event_types

    @_api(device=None)
    def nvmlEventSetWait(self, event_set: _EventSet, timeout_ms: int) -> Any:
        self.event_wait_timeouts[timeout_ms] += 1
        with event_set.ready:
            if not event_set.pending:
                event_set.ready.wait(min(timeout_ms / 1000, self.event_wait_cap))
            if not event_set.pending:
                raise _real.NVMLError(_real.NVML_ERROR_TIMEOUT)
            index, event_type, code = event_set.pending.pop(0)
        data = _real.c_nvmlEventData_t()
        data.device, data.eventType, data.eventData = self._handles[index], event_type, code
        return data

    @_api(device=None)
    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        event_set.freed = True
        self.event_sets.remove(event_set)


def started_backend(gpus: Sequence[Any], slow_interval: float = 10.0, **fake_options: Any) -> tuple[Any, FakeNvml, FakeClock]:
    """A started NvmlBackend over a FakeNvml of ``gpus`` (traces or FakeGpus), on one fake clock."""
    from gpueff.backends.nvml.backend import NvmlBackend  # the backend under test, not a dependency of the fake

    clock = FakeClock()
    fake = FakeNvml(gpus, clock=clock, **fake_options)
    backend = NvmlBackend(slow_interval=slow_interval, nvml=fake, clock=clock)
    backend.start()
    return backend, fake, clock
