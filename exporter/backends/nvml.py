"""Live GPUs through NVML (nvidia-ml-py), with GPM profiling metrics on Hopper and newer.

Cost control (see GPU_FACTS): cheap calls every poll; energy, ECC, remapped rows and memory
temperature at the slow cadence; PCIe rates from GPM, never nvmlDeviceGetPcieThroughput (it blocks
20 ms). A call that answers NotSupported once is not made again for that GPU.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from exporter.backends.base import Backend, BackendUnavailable
from exporter.gpm import GPM_METRICS, to_sample_unit
from exporter.sample import DeviceInfo, GpuProcess, GpuSample, ProcessUtilization, Profiling, down_sample

log = logging.getLogger(__name__)

GPM_MIN_SAMPLE_GAP = 0.1  # two nvmlGpmSampleGet calls must be more than 100 ms apart
REINIT_BACKOFF = (1.0, 60.0)  # first and largest wait between NVML re-initialisations
PROFILING_FIX = (
    "profiling is restricted to admin users (driver option RmProfilingAdminOnly=1): either give the exporter "
    "CAP_SYS_ADMIN, or load the driver with NVreg_RestrictProfilingToAdminUsers=0 "
    "(options nvidia NVreg_RestrictProfilingToAdminUsers=0 in /etc/modprobe.d/, then reload the driver)"
)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cores_per_sm(major: int, minor: int) -> int:
    """FP32 CUDA cores per SM by compute capability: 64 on GP100, Volta, Turing and GA100; 128 elsewhere."""
    return 64 if (major, minor) in {(6, 0), (7, 0), (7, 2), (7, 5), (8, 0)} else 128


def profiling_admin_only(params: Path = Path("/proc/driver/nvidia/params")) -> bool | None:
    """The driver's RmProfilingAdminOnly setting, or None where it cannot be read."""
    try:
        for line in params.read_text().splitlines():
            if line.startswith("RmProfilingAdminOnly:"):
                return line.split(":", 1)[1].strip() == "1"
    except OSError:
        return None
    return None


@dataclass
class _Gpu:
    info: DeviceInfo
    handle: Any
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)  # calls that answered NotSupported
    gpm: bool = False
    gpm_samples: list[Any] = field(default_factory=list)  # [previous, current]
    gpm_previous_time: float | None = None
    gpm_request: Any = None  # a reused c_nvmlGpmMetricsGet_t
    slow: dict[str, Any] = field(default_factory=dict)  # the last slow-cadence readings
    slow_time: float | None = None
    parent: _Gpu | None = None  # a MIG device's physical GPU
    process_samples_seen_us: int = 0  # lastSeenTimeStamp for nvmlDeviceGetProcessUtilization
    process_samples_primed: bool = False  # asked once: later answers cover only the time since


class NvmlBackend(Backend):
    name = "nvml"

    def __init__(self, slow_interval: float = 10.0, nvml: ModuleType | None = None, clock: Callable[[], float] = time.monotonic, process_utilization: bool = False) -> None:
        super().__init__()
        self.slow_interval = slow_interval
        self.process_utilization = process_utilization  # read per-process samples (the fair split, docs/sharing.md)
        self.clock = clock
        self._nvml = nvml
        self._gpus: list[_Gpu] = []
        self._xid_counts: dict[str, dict[int, int]] = {}  # uuid -> xid -> count
        self._xid_lock = threading.Lock()
        self._xid_thread: threading.Thread | None = None
        self._xid_stop = threading.Event()
        self._reinit_due: float | None = None  # set while NVML must be re-initialised
        self._backoff = REINIT_BACKOFF[0]
        self._logged: set[str] = set()

    # ---- start, stop, re-initialisation -------------------------------------------------

    @property
    def nvml(self) -> ModuleType:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                raise BackendUnavailable("the nvidia-ml-py package (module pynvml) is not installed: pip install nvidia-ml-py") from None
            self._nvml = pynvml
        return self._nvml

    @property
    def gpm_gpus(self) -> list[int]:
        """Indices of the GPUs whose profiling metrics are read through GPM."""
        return [gpu.info.index for gpu in self._gpus if gpu.gpm]

    def start(self) -> list[DeviceInfo]:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            raise BackendUnavailable(f"cannot initialise NVML ({error}): no usable NVIDIA driver on this machine") from None
        self._open_devices()
        if not self._gpus:
            raise BackendUnavailable("NVML found no NVIDIA GPU on this machine")
        self._start_xid_thread()
        return [gpu.info for gpu in self._gpus]

    def close(self) -> None:
        self._stop_xid_thread()
        self._free_gpm()
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def _open_devices(self) -> None:
        nvml = self.nvml
        known = {gpu.info.uuid: gpu for gpu in self._gpus}
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        opened = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                info = self._device_info(index, handle, driver)
            except nvml.NVMLError as error:
                if getattr(error, "value", None) in _driver_gone_codes(nvml):
                    raise
                log.warning("GPU %d cannot be opened (%s); it is skipped until the next re-initialisation", index, error)
                continue
            gpu = _Gpu(info=info, handle=handle)
            self._setup_gpm(gpu)
            opened.append(gpu)
            known.pop(info.uuid, None)
            for mig in self._open_mig_devices(gpu, driver):
                opened.append(mig)
                known.pop(mig.info.uuid, None)
        # GPUs that did not come back stay listed as lost, so their gpueff_gpu_up reads 0; a MIG
        # device whose GPU came back without it was destroyed (a new MIG layout) and is dropped.
        reopened = {gpu.info.uuid for gpu in opened}
        gone = [_Gpu(info=gpu.info, handle=None, lost=True) for gpu in known.values() if gpu.info.parent_uuid not in reopened]
        self._gpus = sorted(opened + gone, key=lambda gpu: gpu.info.index)

    def _device_info(self, index: int, handle: Any, driver: str) -> DeviceInfo:
        nvml = self.nvml
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        power_limit = self._optional(None, "power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        max_sm = self._optional(None, "max_sm_clock", nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM)
        max_mem = self._optional(None, "max_mem_clock", nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM)
        pci = self._optional(None, "pci", nvml.nvmlDeviceGetPciInfo, handle)
        return DeviceInfo(
            index=index,
            uuid=uuid,
            name=_text(nvml.nvmlDeviceGetName(handle)),
            driver=driver,
            pci_bus_id=_text(pci.busId) if pci is not None else "",
            sm_count=self._sm_count(handle),
            max_sm_clock_mhz=max_sm,
            max_memory_clock_mhz=max_mem,
            power_limit_watts=None if power_limit is None else power_limit / 1000,
        )

    def _sm_count(self, handle: Any) -> int | None:
        """SMs of a GPU: nvmlDeviceGetAttributes answers only for MIG handles (seen on an H200,
        driver 580), so a full GPU's count is its CUDA cores over the cores per SM of its compute
        capability."""
        nvml = self.nvml
        attributes = self._optional(None, "attributes", nvml.nvmlDeviceGetAttributes, handle)
        if attributes is not None and attributes.multiprocessorCount:
            return int(attributes.multiprocessorCount)
        cores = self._optional(None, "cores", nvml.nvmlDeviceGetNumGpuCores, handle)
        capability = self._optional(None, "compute_capability", nvml.nvmlDeviceGetCudaComputeCapability, handle)
        if not cores or capability is None:
            return None
        return int(cores) // cores_per_sm(*capability)

    def _open_mig_devices(self, parent: _Gpu, driver: str) -> list[_Gpu]:
        """The MIG devices of a GPU in MIG mode, each exported as a device of its own."""
        nvml = self.nvml
        mode = self._optional(parent, "mig_mode", nvml.nvmlDeviceGetMigMode, parent.handle)
        if mode is None or mode[0] != nvml.NVML_DEVICE_MIG_ENABLE:
            return []
        devices = []
        try:
            for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent.handle)):
                handle = self._optional(None, "mig_handle", nvml.nvmlDeviceGetMigDeviceHandleByIndex, parent.handle, slot)
                if handle is None:
                    continue  # an empty slot
                info = dataclasses.replace(
                    parent.info,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    sm_count=self._sm_count(handle),
                    power_limit_watts=None,  # power belongs to the whole GPU
                    parent_uuid=parent.info.uuid,
                    gpu_instance_id=int(nvml.nvmlDeviceGetGpuInstanceId(handle)),
                )
                mig = _Gpu(info=info, handle=handle, parent=parent)
                if parent.gpm:
                    self._setup_gpm(mig)
                devices.append(mig)
        except nvml.NVMLError as error:
            if getattr(error, "value", None) in _driver_gone_codes(nvml):
                raise
            self._log_once(f"mig-{parent.info.uuid}", logging.WARNING, "GPU %d is in MIG mode but its MIG devices cannot be listed (%s); they are not exported", parent.info.index, error)
        if devices:
            log.info("GPU %d is in MIG mode: %d MIG device(s) exported (no coarse utilization there; efficiency uses graphics engine activity)", parent.info.index, len(devices))
        return devices

    def _setup_gpm(self, gpu: _Gpu) -> None:
        nvml = self.nvml
        name = f"GPU {gpu.info.index} ({gpu.info.name})"
        try:
            supported = bool(nvml.nvmlGpmQueryDeviceSupport(gpu.handle if gpu.parent is None else gpu.parent.handle).isSupportedDevice)
        except (nvml.NVMLError, AttributeError):
            supported = False
        if not supported:
            self._log_once(f"nogpm-{gpu.info.uuid}", logging.WARNING, "%s has no GPM (it is older than Hopper or the driver is too old): SM activity and the other profiling metrics need DCGM there; gpueff_profiling_available is 0", name)
            return
        gpu.gpm_samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        for slot, metric in enumerate(GPM_METRICS):
            request.metrics[slot].metricId = metric.metric_id
        gpu.gpm_request = request
        gpu.gpm = True

    def _free_gpm(self) -> None:
        for gpu in self._gpus:
            for sample in gpu.gpm_samples:
                try:
                    self.nvml.nvmlGpmSampleFree(sample)
                except self.nvml.NVMLError:
                    pass
            gpu.gpm_samples = []
            gpu.gpm = False

    def _schedule_reinit(self, reason: str) -> None:
        if self._reinit_due is None:
            log.warning("%s: NVML will be re-initialised in %.0fs", reason, self._backoff)
            self._reinit_due = self.clock() + self._backoff

    def _try_reinit(self) -> None:
        nvml = self.nvml
        self._stop_xid_thread()
        self._free_gpm()
        try:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError:
                pass
            nvml.nvmlInit()
            self._open_devices()
        except nvml.NVMLError as error:
            self._backoff = min(self._backoff * 2, REINIT_BACKOFF[1])
            self._reinit_due = self.clock() + self._backoff
            log.warning("NVML re-initialisation failed (%s); next try in %.0fs", error, self._backoff)
            for gpu in self._gpus:
                gpu.lost = True
            return
        self._reinit_due = None
        lost = [gpu.info.index for gpu in self._gpus if gpu.lost]
        log.info("NVML re-initialised: %d GPU(s) readable%s", len(self._gpus) - len(lost), f", still lost: {lost}" if lost else "")
        if lost:  # each try restarts the GPM pairs of the healthy GPUs too: space the tries out
            self._backoff = min(self._backoff * 2, REINIT_BACKOFF[1])
            self._schedule_reinit(f"GPU(s) {lost} still lost")
        else:
            self._backoff = REINIT_BACKOFF[0]
        self._start_xid_thread()

    # ---- collection ----------------------------------------------------------------------

    def collect(self) -> list[GpuSample]:
        if self._reinit_due is not None and self.clock() >= self._reinit_due:
            self._try_reinit()
        samples = []
        for gpu in self._gpus:
            now = self.clock()
            if gpu.lost or gpu.handle is None:
                samples.append(down_sample(gpu.info, now))
                continue
            try:
                samples.append(self._read(gpu, now))
            except self.nvml.NVMLError as error:
                self.errors_total += 1
                samples.append(down_sample(gpu.info, now))
                self._on_device_error(gpu, error)
        return samples

    def _on_device_error(self, gpu: _Gpu, error: Exception) -> None:
        nvml = self.nvml
        code = getattr(error, "value", None)
        if code == nvml.NVML_ERROR_GPU_IS_LOST:
            gpu.lost = True
            self._schedule_reinit(f"GPU {gpu.info.index} ({gpu.info.uuid}) is lost")
        elif code in _driver_gone_codes(nvml):
            for each in self._gpus:
                each.lost = True
            self._schedule_reinit(f"the NVIDIA driver went away ({error})")
        else:
            self._log_once(f"error-{gpu.info.uuid}-{code}", logging.WARNING, "GPU %d: NVML error %s; it is reported down for this poll", gpu.info.index, error)

    def _optional(self, gpu: _Gpu | None, key: str, call: Callable[..., Any], *args: Any) -> Any:
        """Make a call that a GPU may not support: None on NotSupported/NoPermission/NotFound.

        Errors that mean the GPU or driver is gone propagate, so the GPU is marked down.
        """
        nvml = self.nvml
        if gpu is not None and key in gpu.unsupported:
            return None
        try:
            return call(*args)
        except nvml.NVMLError as error:
            code = getattr(error, "value", None)
            if code in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_NO_PERMISSION, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                if gpu is not None:
                    gpu.unsupported.add(key)
                    log.debug("GPU %d: %s is not available (%s); not asked again", gpu.info.index, key, error)
                return None
            if code in (nvml.NVML_ERROR_NOT_FOUND, nvml.NVML_ERROR_NO_DATA):
                return None
            raise

    def _read(self, gpu: _Gpu, now: float) -> GpuSample:
        nvml, handle, opt = self.nvml, gpu.handle, self._optional
        sample = GpuSample(device=gpu.info, timestamp=now)
        if gpu.gpm:  # first, so the GPM sample is taken at ``now`` and the windows are as long as the gaps between polls
            self._read_gpm(gpu, sample, now)
        utilization = opt(gpu, "utilization", nvml.nvmlDeviceGetUtilizationRates, handle)
        if utilization is not None:
            sample.gpu_utilization = utilization.gpu / 100
            sample.memory_utilization = utilization.memory / 100
        power = opt(gpu, "power", nvml.nvmlDeviceGetPowerUsage, handle)
        sample.power_watts = None if power is None else power / 1000
        sample.temperature_celsius = opt(gpu, "temperature", nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        sample.sm_clock_mhz = opt(gpu, "sm_clock", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
        sample.memory_clock_mhz = opt(gpu, "mem_clock", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM)
        memory = opt(gpu, "memory_v2", nvml.nvmlDeviceGetMemoryInfo, handle, nvml.nvmlMemory_v2)
        if memory is None:
            memory = opt(gpu, "memory", nvml.nvmlDeviceGetMemoryInfo, handle)
        if memory is not None:
            sample.memory_used_bytes = float(memory.used)
            sample.memory_total_bytes = float(memory.total)
            reserved = getattr(memory, "reserved", None)
            sample.memory_reserved_bytes = None if reserved is None else float(reserved)
        sample.clock_event_reasons = opt(gpu, "clock_events", nvml.nvmlDeviceGetCurrentClocksEventReasons, handle)
        processes = opt(gpu, "processes", nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        if processes is not None:
            sample.process_count = len(processes)
            sample.process_memory_bytes = float(sum(p.usedGpuMemory or 0 for p in processes))
            sample.processes = tuple(GpuProcess(int(p.pid), self._process_name(p.pid)) for p in processes)
            if self.process_utilization and processes:
                sample.process_utilization = self._read_process_utilization(gpu)
        self._read_slow(gpu, now)
        for key, value in gpu.slow.items():
            setattr(sample, key, value)
        with self._xid_lock:
            sample.xid_errors = dict(self._xid_counts.get(gpu.info.uuid, {}))
        return sample

    def _read_process_utilization(self, gpu: _Gpu) -> tuple[ProcessUtilization, ...] | None:
        """The per-process samples the driver took since the last call (one call per GPU per poll);
        () when it has none (NOT_FOUND: idle), None where the call is unsupported (MIG devices) or
        on the first call, whose answer is the driver's whole buffer, older than the poll window."""
        nvml = self.nvml
        first, gpu.process_samples_primed = not gpu.process_samples_primed, True
        try:
            entries = self._optional(gpu, "process_utilization", nvml.nvmlDeviceGetProcessUtilization, gpu.handle, gpu.process_samples_seen_us)
        except nvml.NVMLError as error:
            if getattr(error, "value", None) != nvml.NVML_SUCCESS:  # pynvml raises SUCCESS when the driver answers "no samples" without asking for a buffer
                raise
            entries = []
        if entries is None:
            return None if "process_utilization" in gpu.unsupported else ()
        samples = tuple(ProcessUtilization(int(e.pid), e.smUtil / 100, e.memUtil / 100, int(e.timeStamp)) for e in entries if e.pid)
        gpu.process_samples_seen_us = max([gpu.process_samples_seen_us, *(s.timestamp_us for s in samples)])
        return None if first else samples

    def _read_slow(self, gpu: _Gpu, now: float) -> None:
        if gpu.slow_time is not None and now - gpu.slow_time < self.slow_interval:
            return
        nvml, handle, opt = self.nvml, gpu.handle, self._optional
        gpu.slow_time = now
        slow: dict[str, Any] = {}
        energy = opt(gpu, "energy", nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        slow["energy_joules"] = None if energy is None else energy / 1000
        for attribute, error_type in (("ecc_corrected_errors", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED), ("ecc_uncorrected_errors", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            value = opt(gpu, f"ecc_{attribute}", nvml.nvmlDeviceGetTotalEccErrors, handle, error_type, nvml.NVML_VOLATILE_ECC)
            slow[attribute] = None if value is None else float(value)
        remapped = opt(gpu, "remapped_rows", nvml.nvmlDeviceGetRemappedRows, handle)
        if remapped is not None:
            correctable, uncorrectable, pending, failure = remapped
            slow.update(remapped_rows_correctable=float(correctable), remapped_rows_uncorrectable=float(uncorrectable), remapped_rows_pending=bool(pending), remapped_rows_failure=bool(failure))
        values = opt(gpu, "memory_temperature", nvml.nvmlDeviceGetFieldValues, handle, [nvml.NVML_FI_DEV_MEMORY_TEMP])
        if values:
            field_value = values[0]
            if field_value.nvmlReturn == nvml.NVML_SUCCESS:
                slow["memory_temperature_celsius"] = float(_field_number(nvml, field_value))
            else:
                gpu.unsupported.add("memory_temperature")
        gpu.slow = slow

    def _read_gpm(self, gpu: _Gpu, sample: GpuSample, now: float) -> None:
        nvml = self.nvml
        previous_time = gpu.gpm_previous_time
        if previous_time is not None and now - previous_time <= GPM_MIN_SAMPLE_GAP:
            return  # too soon after the last GPM sample: no profiling figures this poll
        previous, current = gpu.gpm_samples
        try:
            if gpu.parent is None:
                nvml.nvmlGpmSampleGet(gpu.handle, current)
            else:
                nvml.nvmlGpmMigSampleGet(gpu.parent.handle, gpu.info.gpu_instance_id, current)
        except nvml.NVMLError as error:
            if getattr(error, "value", None) == nvml.NVML_ERROR_NO_PERMISSION:
                admin_only = profiling_admin_only()
                gpu.gpm = False
                self._log_once(f"gpmperm-{gpu.info.uuid}", logging.WARNING, "GPU %d: GPM sampling was refused (%s; RmProfilingAdminOnly=%s): %s. gpueff_profiling_available is 0 until the exporter restarts with that fixed", gpu.info.index, error, {True: 1, False: 0, None: "unknown"}[admin_only], PROFILING_FIX)
                return
            if getattr(error, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
                gpu.gpm = False
                self._log_once(f"gpmns-{gpu.info.uuid}", logging.WARNING, "GPU %d: GPM sampling is not supported here (%s); gpueff_profiling_available is 0", gpu.info.index, error)
                return
            raise
        gpu.gpm_samples = [current, previous]
        gpu.gpm_previous_time = now
        if previous_time is None:
            return  # the first sample only primes the pair
        request = gpu.gpm_request
        request.sample1, request.sample2 = previous, current
        nvml.nvmlGpmMetricsGet(request)
        profiling = {}
        for slot, metric in enumerate(GPM_METRICS):
            result = request.metrics[slot]
            if result.nvmlReturn == nvml.NVML_SUCCESS:
                profiling[metric.key] = to_sample_unit(metric, result.value)
            else:
                self._log_once(f"gpmmetric-{gpu.info.uuid}-{metric.name}", logging.INFO, "GPU %d: GPM metric %s is not available (NVML return code %d); it is not exported", gpu.info.index, metric.name, result.nvmlReturn)
        sample.window_seconds = now - previous_time
        sample.profiling = Profiling(**profiling)

    def _process_name(self, pid: int) -> str:
        """NVML's name of a process; "" where it cannot be read (it exited, or lives in another PID namespace)."""
        try:
            return _text(self.nvml.nvmlSystemGetProcessName(pid))
        except self.nvml.NVMLError:
            return ""

    def _log_once(self, key: str, level: int, message: str, *args: Any) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, message, *args)

    # ---- Xid events ------------------------------------------------------------------------

    def _start_xid_thread(self) -> None:
        nvml = self.nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as error:
            self._log_once("xid-create", logging.WARNING, "cannot watch Xid errors (%s): gpueff_xid_errors_total is not exported", error)
            return
        watched = {}
        for gpu in self._gpus:
            if gpu.lost or gpu.parent is not None:  # a MIG device's Xids arrive on its GPU
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(gpu.handle, nvml.nvmlEventTypeXidCriticalError, event_set)
                watched[gpu.info.uuid] = gpu
                with self._xid_lock:
                    self._xid_counts.setdefault(gpu.info.uuid, {})
            except nvml.NVMLError as error:
                self._log_once(f"xid-{gpu.info.uuid}", logging.WARNING, "GPU %d: cannot watch Xid errors (%s)", gpu.info.index, error)
        self._xid_stop = threading.Event()
        self._xid_thread = threading.Thread(target=self._watch_xid, args=(event_set, self._xid_stop), name="xid-events", daemon=True)
        self._xid_thread.start()

    def _stop_xid_thread(self) -> None:
        self._xid_stop.set()
        if self._xid_thread is not None:
            self._xid_thread.join(2.0)
            self._xid_thread = None

    def _watch_xid(self, event_set: Any, stop: threading.Event) -> None:
        nvml = self.nvml
        try:
            while not stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait(event_set, 500)
                except nvml.NVMLError as error:
                    if getattr(error, "value", None) == nvml.NVML_ERROR_TIMEOUT:
                        continue
                    log.warning("Xid event watch stopped: %s", error)
                    return
                if data.eventType != nvml.nvmlEventTypeXidCriticalError:
                    continue
                try:
                    uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
                except nvml.NVMLError:
                    continue
                with self._xid_lock:
                    counts = self._xid_counts.setdefault(uuid, {})
                    counts[int(data.eventData)] = counts.get(int(data.eventData), 0) + 1
                log.warning("Xid %d on GPU %s", data.eventData, uuid)
        finally:
            try:
                nvml.nvmlEventSetFree(event_set)
            except nvml.NVMLError:
                pass


def _driver_gone_codes(nvml: ModuleType) -> tuple[int, ...]:
    """NVML errors that mean the whole driver is gone, not one GPU."""
    return (nvml.NVML_ERROR_DRIVER_NOT_LOADED, nvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, nvml.NVML_ERROR_UNINITIALIZED)


def _field_number(nvml: ModuleType, field_value: Any) -> float:
    """The number inside an nvmlFieldValue_t, by its value type."""
    kind = field_value.valueType
    value = field_value.value
    return float({
        nvml.NVML_VALUE_TYPE_DOUBLE: lambda: value.dVal,
        nvml.NVML_VALUE_TYPE_UNSIGNED_INT: lambda: value.uiVal,
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: lambda: value.ulVal,
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: lambda: value.ullVal,
        nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: lambda: value.sllVal,
    }.get(kind, lambda: value.uiVal)())
