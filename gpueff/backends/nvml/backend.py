"""Live GPUs through NVML (nvidia-ml-py), with GPM profiling metrics on Hopper and newer.

Cost control (docs/gpu-facts.md): cheap calls every poll; energy, ECC, remapped rows and memory
temperature at the slow cadence; PCIe rates from GPM, never nvmlDeviceGetPcieThroughput (it blocks
20 ms). A call that answers NotSupported once is not made again for that GPU.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gpueff.backends.backoff import Backoff
from gpueff.backends.base import SLOW_INTERVAL, Backend, BackendUnavailable, CollectSettings, binding_text, text
from gpueff.backends.nvml.gpm import GPM_MIN_SAMPLE_GAP, GpmPair, free_pair, open_pair, read_pair, too_soon
from gpueff.backends.nvml.health import HealthReader, field_number
from gpueff.backends.nvml.topology import read_peers
from gpueff.backends.nvml.utilization import UtilizationWindow
from gpueff.backends.nvml.xid import XidWatcher
from gpueff.logs import gpu_fields
from gpueff.sample import DeviceInfo, GpuProcess, GpuSample, ProcessUtilization, down_sample

__all__ = ["GPM_MIN_SAMPLE_GAP", "REINIT_BACKOFF", "NvmlBackend", "cores_per_sm"]

log = logging.getLogger(__name__)

REINIT_BACKOFF = (1.0, 60.0)  # first and largest wait between NVML re-initialisations
def cores_per_sm(major: int, minor: int) -> int:
    """FP32 CUDA cores per SM by compute capability: 64 on GP100, Volta, Turing and GA100; 128 elsewhere."""
    return 64 if (major, minor) in {(6, 0), (7, 0), (7, 2), (7, 5), (8, 0)} else 128


@dataclass
class _Gpu:
    info: DeviceInfo
    handle: Any
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)  # calls that answered NotSupported
    gpm: GpmPair | None = None  # None where the GPU has no GPM (or the driver refused it)
    slow: dict[str, Any] = field(default_factory=dict)  # the last slow-cadence readings
    slow_time: float | None = None
    parent: _Gpu | None = None  # a MIG device's physical GPU
    process_samples_seen_us: int = 0  # lastSeenTimeStamp for nvmlDeviceGetProcessUtilization
    process_samples_primed: bool = False  # asked once: later answers cover only the time since
    health: HealthReader | None = None  # None for a MIG device: its physical GPU carries the health readings
    utilization_window: UtilizationWindow = field(default_factory=UtilizationWindow)
    # Where in the slow interval this GPU's slow rounds fall, 0..1: the GPUs' rounds are spread over
    # the interval instead of all landing on one poll (each costs a few ms of NVML calls per GPU).
    slow_phase: float = 0.0


class NvmlBackend(Backend):
    name = "nvml"

    def __init__(self, slow_interval: float = SLOW_INTERVAL, nvml: ModuleType | None = None, clock: Callable[[], float] = time.monotonic, process_utilization: bool = False, wall_clock: Callable[[], float] = time.time, engine_every_poll: bool = False) -> None:
        super().__init__()
        self.slow_interval = slow_interval
        # Read GPM GRAPHICS_UTIL over every window even where the driver's samples give the
        # utilization (1.5 ms a poll): for recordings, whose traces keep it (commands/record.py).
        self.engine_every_poll = engine_every_poll
        self.disabled_collectors: frozenset[str] = frozenset()  # their health readings are not read
        self.process_utilization = process_utilization  # read per-process samples (the fair split, docs/sharing.md)
        self.clock = clock
        self.wall_clock = wall_clock  # what the driver dates its utilization samples by (nvml/utilization.py)
        self._nvml = nvml
        self._gpus: list[_Gpu] = []
        self._xid: XidWatcher | None = None
        self._reinit_due: float | None = None  # set while NVML must be re-initialised
        self._backoff = Backoff(*REINIT_BACKOFF)

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
        return [gpu.info.index for gpu in self._gpus if gpu.gpm is not None]

    def configure(self, settings: CollectSettings) -> None:
        super().configure(settings)
        self.slow_interval = settings.slow_interval
        self.disabled_collectors = frozenset(settings.disabled_collectors)

    def start(self) -> list[DeviceInfo]:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            if getattr(error, "value", None) == nvml.NVML_ERROR_NO_PERMISSION:
                why = "this user may not open the NVIDIA device files (/dev/nvidia*: their mode and group, NVreg_DeviceFileMode/NVreg_DeviceFileGID, or a container without the GPUs' devices)"
            else:
                why = "no usable NVIDIA driver on this machine"
            raise BackendUnavailable(f"cannot initialise NVML ({error}): {why}") from None
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
        driver = binding_text(nvml.nvmlSystemGetDriverVersion)
        opened = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                info = self._device_info(index, handle, driver)
            except nvml.NVMLError as error:
                if getattr(error, "value", None) in _driver_gone_codes(nvml):
                    raise
                log.warning("GPU %d cannot be opened (%s); it is skipped until the next re-initialisation", index, error, extra=gpu_fields(index))
                continue
            gpu = _Gpu(info=info, handle=handle, health=HealthReader(index, self.log_once))
            self._setup_gpm(gpu)
            opened.append(gpu)
            known.pop(info.uuid, None)
            for mig in self._open_mig_devices(gpu, driver):
                opened.append(mig)
                known.pop(mig.info.uuid, None)
        # GPUs that did not come back stay listed as lost, so their gpueff_gpu_up reads 0; a MIG
        # device whose GPU came back without it was destroyed (a new MIG layout) and is dropped.
        self._read_topology(opened)
        for position, gpu in enumerate(opened):
            gpu.slow_phase = position / len(opened)
        reopened = {gpu.info.uuid for gpu in opened}
        gone = [_Gpu(info=gpu.info, handle=None, lost=True) for gpu in known.values() if gpu.info.parent_uuid not in reopened]
        self._gpus = sorted(opened + gone, key=lambda gpu: gpu.info.index)

    def _read_topology(self, opened: list[_Gpu]) -> None:
        """Each whole GPU's peers: PCIe path, NVLink links (backends/nvml/topology.py)."""
        whole = [gpu for gpu in opened if gpu.parent is None]
        peers = read_peers(self.nvml, [(gpu.info, gpu.handle) for gpu in whole], lambda key, call, *args: self._optional(None, key, call, *args))
        for gpu in whole:
            if gpu.info.uuid in peers:
                gpu.info = dataclasses.replace(gpu.info, peers=peers[gpu.info.uuid])

    def _device_info(self, index: int, handle: Any, driver: str) -> DeviceInfo:
        nvml = self.nvml
        uuid = binding_text(nvml.nvmlDeviceGetUUID, handle)
        power_limit = self._optional(None, "power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        max_sm = self._optional(None, "max_sm_clock", nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM)
        max_mem = self._optional(None, "max_mem_clock", nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM)
        pci = self._optional(None, "pci", nvml.nvmlDeviceGetPciInfo, handle)
        bus_width = self._optional(None, "memory_bus_width", nvml.nvmlDeviceGetMemoryBusWidth, handle)
        capability = self._optional(None, "compute_capability", nvml.nvmlDeviceGetCudaComputeCapability, handle)
        return DeviceInfo(
            index=index,
            uuid=uuid,
            name=binding_text(nvml.nvmlDeviceGetName, handle),
            driver=driver,
            pci_bus_id=text(pci.busId) if pci is not None else "",
            sm_count=self._sm_count(handle, capability),
            max_sm_clock_mhz=max_sm,
            max_memory_clock_mhz=max_mem,
            memory_bus_width_bits=int(bus_width) if bus_width else None,
            compute_capability=(int(capability[0]), int(capability[1])) if capability is not None else None,
            power_limit_watts=None if power_limit is None else power_limit / 1000,
        )

    def _sm_count(self, handle: Any, capability: tuple[int, int] | None = None) -> int | None:
        """SMs of a GPU: nvmlDeviceGetAttributes answers only for MIG handles (seen on an H200,
        driver 580), so a full GPU's count is its CUDA cores over the cores per SM of its compute
        capability."""
        nvml = self.nvml
        attributes = self._optional(None, "attributes", nvml.nvmlDeviceGetAttributes, handle)
        if attributes is not None and attributes.multiprocessorCount:
            return int(attributes.multiprocessorCount)
        cores = self._optional(None, "cores", nvml.nvmlDeviceGetNumGpuCores, handle)
        capability = capability or self._optional(None, "compute_capability", nvml.nvmlDeviceGetCudaComputeCapability, handle)
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
                    uuid=binding_text(nvml.nvmlDeviceGetUUID, handle),
                    name=binding_text(nvml.nvmlDeviceGetName, handle),
                    sm_count=self._sm_count(handle),
                    power_limit_watts=None,  # power belongs to the whole GPU
                    parent_uuid=parent.info.uuid,
                    gpu_instance_id=int(nvml.nvmlDeviceGetGpuInstanceId(handle)),
                )
                mig = _Gpu(info=info, handle=handle, parent=parent)
                if parent.gpm is not None:
                    self._setup_gpm(mig)
                devices.append(mig)
        except nvml.NVMLError as error:
            if getattr(error, "value", None) in _driver_gone_codes(nvml):
                raise
            self.log_once(f"mig-{parent.info.uuid}", logging.WARNING, "GPU %d is in MIG mode but its MIG devices cannot be listed (%s); they are not exported", parent.info.index, error, extra=gpu_fields(parent.info.index, parent.info.uuid))
        if devices:
            log.info("GPU %d is in MIG mode: %d MIG device(s) exported (no coarse utilization there; efficiency uses graphics engine activity)", parent.info.index, len(devices), extra=gpu_fields(parent.info.index, parent.info.uuid))
        return devices

    def _setup_gpm(self, gpu: _Gpu) -> None:
        support_handle = gpu.handle if gpu.parent is None else gpu.parent.handle
        gpu.gpm = open_pair(self.nvml, gpu.info, support_handle, self.log_once)

    def _free_gpm(self) -> None:
        for gpu in self._gpus:
            if gpu.gpm is not None:
                free_pair(self.nvml, gpu.gpm)
                gpu.gpm = None

    def _schedule_reinit(self, reason: str) -> None:
        if self._reinit_due is None:
            log.warning("%s: NVML will be re-initialised in %.0fs", reason, self._backoff.wait)
            self._reinit_due = self.clock() + self._backoff.wait

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
            self._reinit_due = self.clock() + self._backoff.grow()
            log.warning("NVML re-initialisation failed (%s); next try in %.0fs", error, self._backoff.wait)
            for gpu in self._gpus:
                gpu.lost = True
            return
        self._reinit_due = None
        lost = [gpu.info.index for gpu in self._gpus if gpu.lost]
        log.info("NVML re-initialised: %d GPU(s) readable%s", len(self._gpus) - len(lost), f", still lost: {lost}" if lost else "")
        if lost:  # each try restarts the GPM pairs of the healthy GPUs too: space the tries out
            self._backoff.grow()
            self._schedule_reinit(f"GPU(s) {lost} still lost")
        else:
            self._backoff.reset()
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
            self.log_once(f"error-{gpu.info.uuid}-{code}", logging.WARNING, "GPU %d: NVML error %s; it is reported down for this poll", gpu.info.index, error, extra=gpu_fields(gpu.info.index, gpu.info.uuid))

    def _optional(self, gpu: _Gpu | None, key: str, call: Callable[..., Any], *args: Any) -> Any:
        """Make a call that a GPU may not support: None on NotSupported/NoPermission/NotFound.

        Errors that mean the GPU or driver is gone propagate, so the GPU is marked down.
        """
        if gpu is not None and key in gpu.unsupported:
            return None
        try:
            return call(*args)
        except self.nvml.NVMLError as error:
            nvml = self.nvml
            code = getattr(error, "value", None)
            if code in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_NO_PERMISSION, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                if gpu is not None:
                    gpu.unsupported.add(key)
                    log.debug("GPU %d: %s is not available (%s); not asked again", gpu.info.index, key, error, extra=gpu_fields(gpu.info.index, gpu.info.uuid))
                return None
            if code in (nvml.NVML_ERROR_NOT_FOUND, nvml.NVML_ERROR_NO_DATA):
                return None
            raise

    def _read(self, gpu: _Gpu, now: float) -> GpuSample:
        nvml, handle, opt = self.nvml, gpu.handle, self._optional
        sample = GpuSample(device=gpu.info, timestamp=now)
        if gpu.gpm is not None:  # first, so the GPM sample is taken at ``now`` and the windows are as long as the gaps between polls
            self._read_gpm(gpu, gpu.gpm, sample, now)
        utilization = opt(gpu, "utilization", nvml.nvmlDeviceGetUtilizationRates, handle)
        if utilization is not None:
            sample.gpu_utilization = utilization.gpu / 100
            sample.memory_utilization = utilization.memory / 100
            window, now_us = gpu.utilization_window, round(self.wall_clock() * 1e6)
            if window.may_have_new(now_us):  # else the call would answer NOT_FOUND (nvml/utilization.py)
                answer = opt(gpu, "utilization_samples", nvml.nvmlDeviceGetSamples, handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, window.seen_us or 0)
                sample.gpu_utilization_window = window.mean_since_last(answer, now_us)
            else:
                sample.gpu_utilization_window = window.newest
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
            sample.processes = tuple(GpuProcess(int(p.pid), self._process_name(p.pid), None if p.usedGpuMemory is None else float(p.usedGpuMemory)) for p in processes)
            if self.process_utilization and processes:
                sample.process_utilization = self._read_process_utilization(gpu)
        self._read_slow(gpu, now)
        for key, value in gpu.slow.items():
            setattr(sample, key, value)
        sample.device = gpu.info  # the slow read may have found a new power limit
        if gpu.health is not None:
            sample.health = gpu.health.read(nvml, handle, now, self.slow_interval, self.disabled_collectors, gpu.slow_phase)
        if self._xid is not None:
            sample.xid_errors = self._xid.counts(gpu.info.uuid)
            sample.last_xid = self._xid.last(gpu.info.uuid)
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
        gpu.slow_time = now - (gpu.slow_phase * self.slow_interval if gpu.slow_time is None else 0.0)  # the first round now, the next at the GPU's phase
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
                slow["memory_temperature_celsius"] = float(field_number(nvml, field_value))
            else:
                gpu.unsupported.add("memory_temperature")
        if gpu.parent is None:  # the enforced power limit can be changed at run time (nvidia-smi -pl)
            limit = opt(gpu, "power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            if limit is not None and limit / 1000 != gpu.info.power_limit_watts:
                gpu.info = dataclasses.replace(gpu.info, power_limit_watts=limit / 1000)
        gpu.slow = slow

    def _read_gpm(self, gpu: _Gpu, pair: GpmPair, sample: GpuSample, now: float) -> None:
        """The GPM window; where the driver's samples give the window's utilization, the graphics
        engine (1.5 ms a read) only over the slow window, held between slow rounds (nvml/gpm.py)."""
        parent_handle = gpu.parent.handle if gpu.parent is not None else None
        slow_engine = self.slow_interval if _utilization_from_samples(gpu) and not self.engine_every_poll else None
        window = read_pair(self.nvml, pair, gpu.info, gpu.handle, parent_handle, now, self.log_once, slow_engine, gpu.slow_phase)
        if pair.refused:
            free_pair(self.nvml, pair)
            gpu.gpm = None
        sample.graphics_active_slow_window = pair.slow_graphics_active
        if window is not None:
            sample.profiling, sample.window_seconds = window
        elif gpu.gpm is not None and pair.last_window is not None and (too_soon(pair, now) or pair.deferred):
            # NVML closes no GPM window under 100 ms, and polls at 100 ms are often a hair shorter:
            # the last window's readings stand for this poll (no window length: it is not a window
            # of its own), so its series do not vanish and its SM-active time is counted; the next
            # window spans this poll's time too. The same where the driver's own clock found the
            # sample too soon after the window's start (this thread held up on a busy host).
            sample.profiling = pair.last_window

    def _process_name(self, pid: int) -> str:
        """NVML's name of a process; "" where it cannot be read (it exited, or lives in another PID namespace)."""
        try:
            return binding_text(self.nvml.nvmlSystemGetProcessName, pid)
        except self.nvml.NVMLError:
            return ""

    # ---- Xid events ------------------------------------------------------------------------

    def _start_xid_thread(self) -> None:
        if self._xid is None:  # one watcher for the backend's life: its counts outlive re-initialisations
            self._xid = XidWatcher(self.nvml, self.log_once)
        self._xid.start((gpu.info, gpu.handle) for gpu in self._gpus if not gpu.lost and gpu.parent is None)

    def _stop_xid_thread(self) -> None:
        if self._xid is not None:
            self._xid.stop()


def _utilization_from_samples(gpu: _Gpu) -> bool:
    """The window's utilization comes from the driver's samples (nvml/utilization.py): a full GPU
    whose utilization calls have not proved unsupported."""
    return gpu.parent is None and not gpu.unsupported & {"utilization", "utilization_samples"}


def _driver_gone_codes(nvml: ModuleType) -> tuple[int, ...]:
    """NVML errors that mean the whole driver is gone, not one GPU."""
    return (nvml.NVML_ERROR_DRIVER_NOT_LOADED, nvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, nvml.NVML_ERROR_UNINITIALIZED)

