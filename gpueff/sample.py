"""The one data shape that flows through the daemon: backend -> GpuSample -> derivations -> exposition.

Every reading is optional: ``None`` means "not available on this GPU / driver / backend" and is
never exposed, so a missing counter is never served as a fake 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Profiling:
    """The profiling readings (GPM / DCGM) over the sample window, one field per catalogue row
    (gpueff/metrics.py; tests/unit/test_metrics.py checks the two agree). None: not read."""

    # Activities, ratios 0..1.
    sm_active: float | None = None
    sm_occupancy: float | None = None
    graphics_active: float | None = None
    tensor_active: float | None = None
    tensor_hmma_active: float | None = None
    tensor_imma_active: float | None = None
    tensor_dfma_active: float | None = None
    dram_active: float | None = None
    fp64_active: float | None = None
    fp32_active: float | None = None
    fp16_active: float | None = None
    integer_active: float | None = None
    # Interconnect, bytes per second.
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    nvlink_tx_bytes_per_second: float | None = None
    nvlink_rx_bytes_per_second: float | None = None

    def readings(self) -> dict[str, float]:
        """The readings that exist, by field name (for traces, checks and tests)."""
        return {name: value for name in self.__slots__ if (value := getattr(self, name)) is not None}


NO_PROFILING = Profiling()


@dataclass(frozen=True, slots=True)
class Cycles:
    """DCGM 4.6's monotonic counters (dcgm_fields.h 1084-1096, from GPM on Hopper and newer): raw SM
    and pipe cycle counts and PCIe bytes since the driver loaded, read where DCGM gives them. The
    ratio of two counters' increases over any range is that range's exact activity. None: not read."""

    sm_elapsed: float | None = None
    sm_active: float | None = None
    tensor: float | None = None  # any tensor pipe (MMA)
    tensor_dmma: float | None = None
    tensor_hmma: float | None = None
    tensor_imma: float | None = None
    tensor_dfma: float | None = None
    integer: float | None = None
    fp64: float | None = None
    fp32: float | None = None
    fp16: float | None = None
    pcie_tx_bytes: float | None = None
    pcie_rx_bytes: float | None = None


NO_CYCLES = Cycles()


@dataclass(frozen=True, slots=True)
class Health:
    """The health readings dcgm-exporter's default counters cover (docs/health.md): one field per
    catalogue reading, None where the GPU, driver or backend does not give it (never a fake 0).
    Counters are totals since driver load; times in seconds; ratios 0..1."""

    pcie_replay_errors: float | None = None
    pcie_link_generation: int | None = None
    pcie_link_generation_max: int | None = None
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    # NVLink error counters, summed over the GPU's links (NVML's *_TOTAL fields).
    nvlink_crc_flit_errors: float | None = None
    nvlink_crc_data_errors: float | None = None
    nvlink_replay_errors: float | None = None
    nvlink_recovery_errors: float | None = None
    nvlink_links_active: tuple[tuple[int, bool], ...] | None = None  # (link, active) for each link the GPU has
    nvlink_link_errors: tuple[tuple[int, str, float], ...] | None = None  # (link, type, count) for each active link (not recorded in traces)
    # Time the clocks were held below their target, by policy (nvmlDeviceGetViolationStatus).
    violation_power_seconds: float | None = None
    violation_thermal_seconds: float | None = None
    violation_sync_boost_seconds: float | None = None
    violation_board_limit_seconds: float | None = None
    violation_low_utilization_seconds: float | None = None
    violation_reliability_seconds: float | None = None
    # Page retirement (pre-Ampere; Ampere and newer remap rows instead).
    retired_pages_single_bit: int | None = None
    retired_pages_double_bit: int | None = None
    retired_pages_pending: bool | None = None
    performance_state: int | None = None  # P0 (fastest) .. P15
    encoder_utilization: float | None = None
    decoder_utilization: float | None = None
    fan_speed: float | None = None  # share of the fan's maximum speed; may exceed 1 briefly
    temperature_slowdown_celsius: float | None = None
    temperature_shutdown_celsius: float | None = None
    temperature_gpu_max_celsius: float | None = None
    temperature_memory_max_celsius: float | None = None

    def readings(self) -> dict[str, object]:
        """The readings that exist, by field name."""
        return {name: value for name in self.__slots__ if (value := getattr(self, name)) is not None}


NO_HEALTH = Health()


@dataclass(frozen=True, slots=True)
class PeerLink:
    """How a GPU reaches another GPU of the node (backends/nvml/topology.py)."""

    index: int
    uuid: str
    pcie_path: str  # the nearest PCIe element both hang from: same_board, pcie_switch, pcie_switches, host_bridge, numa_node, system, unknown
    nvlink: str  # direct (links join them), switch (through an NVSwitch fabric), none
    nvlinks: int = 0  # active links joining the two directly


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What does not change while a GPU is attached."""

    index: int
    uuid: str
    name: str
    driver: str = ""
    pci_bus_id: str = ""
    sm_count: int | None = None
    max_sm_clock_mhz: float | None = None
    max_memory_clock_mhz: float | None = None
    memory_bus_width_bits: int | None = None  # NVML: the DRAM interface's width; with the max memory clock, its bandwidth
    compute_capability: tuple[int, int] | None = None  # CUDA (major, minor): names the architecture's per-SM rates
    power_limit_watts: float | None = None
    source: str = ""  # replay: the trace's workload name; empty for live GPUs
    peers: tuple[PeerLink, ...] = ()  # the node's other GPUs and how this one reaches them (NVML, whole GPUs)
    job: str = ""  # replay: the multi-GPU job the trace was recorded in (its GPUs are judged together); empty for live GPUs
    # MIG: a MIG device has its parent GPU's index and its own MIG-... uuid.
    parent_uuid: str = ""  # the physical GPU's uuid; empty for a whole GPU
    gpu_instance_id: int | None = None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process running on a GPU, as NVML lists it."""

    pid: int
    name: str  # nvmlSystemGetProcessName (usually the executable's path); "" where it cannot be read
    memory_bytes: float | None = None  # the device memory it uses (usedGpuMemory); None where the driver does not say


@dataclass(frozen=True, slots=True)
class ProcessUtilization:
    """One NVML per-process utilization sample (nvmlDeviceGetProcessUtilization): the share of the
    driver's sample period in which this process had a kernel running (``sm``, the same time-occupancy
    figure as coarse utilization, not SM activity) or device memory busy (``memory``)."""

    pid: int
    sm: float  # ratio 0..1 (NVML smUtil / 100)
    memory: float  # ratio 0..1 (NVML memUtil / 100)
    timestamp_us: int  # CPU time of the sample, microseconds


@dataclass(slots=True)
class GpuSample:
    """One reading of one GPU. ``up`` False means the GPU could not be read at all this poll."""

    device: DeviceInfo
    timestamp: float  # time.monotonic() of the reading
    up: bool = True
    window_seconds: float | None = None  # the time the profiling ratios cover
    # Coarse device readings: ratios 0..1, bytes, watts, joules, degrees Celsius; clocks in MHz.
    gpu_utilization: float | None = None  # NVML's latest driver sample (what nvidia-smi shows at this instant)
    gpu_utilization_window: float | None = None  # the mean of the driver's samples inside the window (nvmlDeviceGetSamples)
    # NVML on a full GPU: the graphics engine's activity (GPM GRAPHICS_UTIL) over the slow window, read at the
    # slow cadence and held between (one read costs 1.5 ms of CPU); the window's own reading is then not read.
    graphics_active_slow_window: float | None = None
    memory_utilization: float | None = None
    power_watts: float | None = None
    energy_joules: float | None = None  # cumulative since driver load (or replay start)
    temperature_celsius: float | None = None
    memory_temperature_celsius: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    memory_reserved_bytes: float | None = None
    clock_event_reasons: int | None = None  # NVML clock-event (throttle) bitmask
    ecc_corrected_errors: float | None = None  # volatile, since driver load
    ecc_uncorrected_errors: float | None = None
    remapped_rows_correctable: float | None = None
    remapped_rows_uncorrectable: float | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    xid_errors: dict[int, int] = field(default_factory=dict)  # Xid code -> count since start
    last_xid: int | None = None  # the code of the most recent Xid since start
    process_count: int | None = None
    process_memory_bytes: float | None = None
    processes: tuple[GpuProcess, ...] | None = None  # None where the backend cannot list them (replay)
    # Per-process samples since the last poll; () when NVML had none (idle), None where not read.
    process_utilization: tuple[ProcessUtilization, ...] | None = None
    profiling: Profiling = NO_PROFILING
    health: Health = NO_HEALTH
    cycles: Cycles = NO_CYCLES
    # DCGM before Hopper: the profiling counters are time-shared between metric groups (several passes),
    # so a profiling value can read 0 for an interval whose pass did not run. None where not known.
    profiling_multiplexed: bool | None = None

    @property
    def profiling_available(self) -> bool:
        """SM activity (and with it the other profiling readings) was read this poll."""
        return self.profiling.sm_active is not None

    def replace(self, **changes: Any) -> GpuSample:
        return dataclasses.replace(self, **changes)


def down_sample(device: DeviceInfo, timestamp: float) -> GpuSample:
    """A sample that says only: this GPU could not be read."""
    return GpuSample(device=device, timestamp=timestamp, up=False)
