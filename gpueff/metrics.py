"""The metric catalogue: every metric the daemon exports, defined once, as data.

A row says what Prometheus sees (name, type, unit, labels, a one-line HELP), the longer text the
metrics reference shows beside it (``detail``), and where each value comes from:
the reading it renders (a path on a GpuState, e.g. ``sample.profiling.sm_active``), and that
reading's sources (the GPM metric id and scale, the DCGM field id(s) and scale, the trace key) and
the backends that give it. ``gpm_metrics.py``, ``backends/dcgm/fields.py``, the trace format's keys,
the exposition's families and the metrics reference (docs/metrics.md) all follow this table, and
tests/unit/test_metrics.py fails when any of them drifts from it.

Adding a metric: one row here (a per-GPU row names its collector; plus, for a new profiling
reading, one typed field in ``sample.Profiling``, which the test checks), then
``python tools/metrics_reference.py`` writes its line in the metrics reference, docs/metrics.md.
This module is declarative: it imports nothing of the project's.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024
HELP_LIMIT = 100  # characters of a HELP text: one line a metrics browser shows whole
MAX_PROCESSES = 16  # processes shown and exported per GPU (pipeline/processes.py); the rest are summed as "other"

# Metric types.
GAUGE, COUNTER, SUMMARY = "gauge", "counter", "summary"
# Scopes: which series a row renders and which labels they carry before the row's own.
GPU, POD, HOLDER, APP, EXPORTER, PROCESS, ATTRIBUTION, JOB = "gpu", "pod", "holder", "app", "exporter", "process", "attribution", "job"
# A job's labels are job_kind and job_id, never job: Prometheus's own target label is called job.
SCOPE_LABELS = {GPU: ("gpu", "uuid"), POD: ("gpu", "uuid"), HOLDER: ("gpu", "uuid"), APP: ("app",), EXPORTER: (), PROCESS: (), ATTRIBUTION: (), JOB: ("job_kind", "job_id")}
# Backends.
NVML, DCGM, REPLAY = "nvml", "dcgm", "replay"
ALL = frozenset({NVML, DCGM, REPLAY})
# DCGM watch cadences: FAST at the collect interval, SLOW at slow_collect_interval (costly driver
# calls), PROFILING at the collect interval in its own field group (it may be refused while the rest
# works), EVENT like FAST but a new timestamp means a new event, STATIC read once at start.
FAST, SLOW, PROFILING, EVENT, STATIC = "fast", "slow", "profiling", "event", "static"


@dataclass(frozen=True, slots=True)
class Gpm:
    name: str  # NVML_GPM_METRIC_<name>; also the key in a gpu-trace/1 sample
    metric_id: int
    scale: float  # NVML's unit -> the sample's (percent -> ratio, MiB/s -> bytes/s)


@dataclass(frozen=True, slots=True)
class Dcgm:
    field_id: int  # DCGM's stable ABI
    names: str  # the names DCGM has given the field over time, newest first, space-separated
    scale: float  # DCGM's unit -> the sample's
    cadence: str


@dataclass(frozen=True, slots=True)
class Reading:
    """One value a metric renders, and where it comes from."""

    path: str  # attribute path on a GpuState: sample.<field>, sample.profiling.<field>, sample.cycles.<field>, sample.device.<field>, derived.<field>, totals.<field>
    label: str = ""  # the value of the metric's own label this reading feeds (type="corrected"); "" where the row has one reading
    gpm: Gpm | None = None
    dcgm: Dcgm | None = None
    trace: tuple[str, float] | None = None  # gpu-trace/1 sample key and its scale to the sample's unit (GPM readings use gpm)

    @property
    def field(self) -> str:
        """The last part of the path: the attribute that holds the value."""
        return self.path.rsplit(".", 1)[1]


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    type: str
    unit: str  # the base unit the name ends in ("" for counts, states and info series)
    help: str  # one line of at most HELP_LIMIT characters: what the series is, its unit and labels where not obvious
    detail: str = ""  # the full description, shown beside the HELP in the metrics reference only (never served); "" where the HELP says it all
    scope: str = GPU
    readings: tuple[Reading, ...] = ()
    labels: tuple[str, ...] = ()  # the row's own labels, after its scope's
    scale: float = 1.0  # the reading's unit -> the exported one (MHz -> Hz)
    backends: frozenset[str] = ALL  # the backends that can give it (for derived rows: where its inputs exist)
    when_down: bool = False  # a GPU row also rendered for a GPU that is down
    collector: str = ""  # a GPU row's collector (gpueff/collectors.py: --no-collector.NAME); "" for the GPU's identity, always exported, and for the other scopes


def _r(path: str, **sources: object) -> tuple[Reading, ...]:
    return (Reading(path, **sources),)  # type: ignore[arg-type]


def _ratio(field: str, name: str, gpm: Gpm, dcgm: Dcgm, help_text: str, detail: str = "") -> Metric:
    """A profiling activity: a ratio 0..1 over the sample window, in sample.profiling.<field>; collector profiling."""
    return Metric(name, GAUGE, "ratio", help_text, detail, readings=_r(f"sample.profiling.{field}", gpm=gpm, dcgm=dcgm), collector="profiling")


def _rate(field: str, name: str, gpm: Gpm, dcgm: Dcgm, help_text: str, detail: str = "") -> Metric:
    """A profiling interconnect rate: bytes per second over the sample window; collector profiling."""
    return Metric(name, GAUGE, "bytes_per_second", help_text, detail, readings=_r(f"sample.profiling.{field}", gpm=gpm, dcgm=dcgm), collector="profiling")


NVML_ONLY = frozenset({NVML})
NOT_REPLAY = frozenset({NVML, DCGM})
NOT_DCGM = frozenset({NVML, REPLAY})
DCGM_ONLY = frozenset({DCGM})

METRICS: tuple[Metric, ...] = (
    # ---- identity and health, per GPU ----
    Metric("gpueff_gpu_up", GAUGE, "", "1 if the GPU was read in the last poll, 0 if it is lost, unreadable or the data is stale.", readings=_r("sample.up"), when_down=True),
    Metric("gpueff_gpu_info", GAUGE, "", "GPU identity: model, driver, PCI bus id, and the replayed trace (empty for a live GPU). Always 1.", labels=("model", "driver", "pci_bus_id", "trace"), readings=_r("sample.device"), when_down=True),
    Metric("gpueff_mig_device_info", GAUGE, "", "A MIG device exported as a GPU under its own uuid: its parent GPU's uuid and instance. Always 1.", detail="A MIG device, exported like a GPU under its own MIG uuid (gpu is its physical GPU's index): the physical GPU's uuid and the GPU instance id. Always 1.", labels=("parent_uuid", "gpu_instance"), readings=_r("sample.device"), backends=NOT_REPLAY, when_down=True),
    Metric("gpueff_profiling_available", GAUGE, "", "1 if SM activity and the other profiling metrics (GPM or DCGM) are read on this GPU, else 0.", detail="1 if SM activity and the other profiling metrics (GPM or DCGM) are read on this GPU, 0 if not (pre-Hopper without DCGM, or profiling restricted to admin).", readings=_r("sample.profiling_available"), collector="profiling"),
    Metric("gpueff_profiling_multiplexed", GAUGE, "", "DCGM before Hopper: 1 if the profiling counters are time-shared between metric groups.", detail="DCGM before Hopper: 1 if the GPU's profiling counters are time-shared between metric groups (--dcgm.multi-pass, or another client of a shared host engine watching a rival metric group), so a profiling value can read 0 for an interval whose pass did not run; 0 if one pass holds everything read. Absent where profiling is not read through DCGM.", readings=_r("sample.profiling_multiplexed"), backends=DCGM_ONLY, collector="profiling"),
    # ---- coarse device readings ----
    Metric("gpueff_gpu_utilization_ratio", GAUGE, "ratio", "Share of the poll window any engine was busy, as nvidia-smi means it (not SM activity).", detail="Utilization over the poll window as nvidia-smi means it: the share of time any engine worked, copy engines included (one thread on one SM reads 1; not SM activity). The mean of the driver's own samples inside the window (nvmlDeviceGetSamples; on DCGM, field 203 sampled every 0.2 s); where they cannot be read (MIG devices, traces recorded before), the graphics engine's activity over the window (gpueff_graphics_engine_active_ratio, which misses copy-engine work), else NVML's latest sample. Efficiency, mismatch and waste use this figure.",
           readings=_r("derived.busy"), collector="utilization"),
    Metric("gpueff_gpu_utilization_instant_ratio", GAUGE, "ratio", "NVML utilization as nvidia-smi shows it: the driver's latest ~200 ms sample at the poll.", detail="NVML utilization as nvidia-smi shows it: the driver's latest ~200 ms sample at the poll, not a mean over the poll window (under a duty-cycled load it swings while the window's figure holds).",
           readings=_r("sample.gpu_utilization", dcgm=Dcgm(203, "DCGM_FI_DEV_GPU_UTIL_RATIO DCGM_FI_DEV_GPU_UTIL", 0.01, FAST), trace=("util_gpu", 0.01)), collector="utilization"),
    Metric("gpueff_memory_utilization_ratio", GAUGE, "ratio", "Coarse NVML memory utilization: share of time device memory was read or written.",
           readings=_r("sample.memory_utilization", dcgm=Dcgm(204, "DCGM_FI_DEV_MEM_COPY_UTIL", 0.01, FAST), trace=("util_mem", 0.01)), collector="utilization"),
    Metric("gpueff_power_watts", GAUGE, "watts", "Power draw in watts at the poll (an instant reading, not a window mean).", detail="Power draw in watts at the poll: an instant reading, not a window mean (FLOP per joule uses the mean of the readings at both ends of the window).",
           readings=_r("sample.power_watts", dcgm=Dcgm(155, "DCGM_FI_DEV_BOARD_POWER_WATTS DCGM_FI_DEV_POWER_USAGE", 1, FAST), trace=("power_mw", 0.001)), collector="power"),
    Metric("gpueff_power_limit_watts", GAUGE, "watts", "Enforced power limit in watts.", detail="Enforced power limit in watts (NVML and DCGM: read again at the slow cadence, so a limit changed at run time shows).",
           readings=_r("sample.device.power_limit_watts", dcgm=Dcgm(164, "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS DCGM_FI_DEV_ENFORCED_POWER_LIMIT", 1, SLOW)), collector="power"),
    Metric("gpueff_energy_joules_total", COUNTER, "joules", "Energy consumed in joules (the driver's counter since it loaded).", detail="Energy consumed in joules (NVML counter since driver load; on replay, recorded power integrated over replay time). Read at the slow cadence.",
           readings=_r("sample.energy_joules", dcgm=Dcgm(156, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 0.001, SLOW)), collector="power"),
    Metric("gpueff_temperature_celsius", GAUGE, "celsius", "GPU core temperature in degrees Celsius.",
           readings=_r("sample.temperature_celsius", dcgm=Dcgm(150, "DCGM_FI_DEV_GPU_TEMP_CELSIUS DCGM_FI_DEV_GPU_TEMP", 1, FAST), trace=("temp_c", 1)), collector="thermal"),
    Metric("gpueff_memory_temperature_celsius", GAUGE, "celsius", "GPU memory (HBM) temperature in degrees Celsius.",
           readings=_r("sample.memory_temperature_celsius", dcgm=Dcgm(140, "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS DCGM_FI_DEV_MEMORY_TEMP", 1, SLOW)), backends=NOT_REPLAY, collector="thermal"),
    Metric("gpueff_sm_clock_hertz", GAUGE, "hertz", "SM clock in hertz at the poll (an instant reading, not a window mean).", detail="SM clock in hertz at the poll: an instant reading, not a window mean (the busy FLOP/s use the mean of the readings at both ends of the window).", scale=1e6,
           readings=_r("sample.sm_clock_mhz", dcgm=Dcgm(100, "DCGM_FI_DEV_SM_CLOCK", 1, FAST), trace=("sm_clock_mhz", 1)), collector="clocks"),
    Metric("gpueff_sm_clock_max_hertz", GAUGE, "hertz", "Maximum SM clock in hertz.", scale=1e6,
           readings=_r("sample.device.max_sm_clock_mhz", dcgm=Dcgm(113, "DCGM_FI_DEV_MAX_SM_CLOCK", 1, STATIC)), collector="clocks"),
    Metric("gpueff_memory_clock_hertz", GAUGE, "hertz", "Current memory clock in hertz.", scale=1e6,
           readings=_r("sample.memory_clock_mhz", dcgm=Dcgm(101, "DCGM_FI_DEV_MEM_CLOCK", 1, FAST), trace=("mem_clock_mhz", 1)), collector="clocks"),
    Metric("gpueff_memory_clock_max_hertz", GAUGE, "hertz", "Maximum memory clock in hertz.", scale=1e6,
           readings=_r("sample.device.max_memory_clock_mhz", dcgm=Dcgm(114, "DCGM_FI_DEV_MAX_MEM_CLOCK", 1, STATIC)), backends=NOT_REPLAY, collector="clocks"),
    Metric("gpueff_memory_used_bytes", GAUGE, "bytes", "Device memory in use, bytes.",
           readings=_r("sample.memory_used_bytes", dcgm=Dcgm(252, "DCGM_FI_DEV_FB_USED", MIB, FAST), trace=("mem_used", 1)), collector="memory"),
    Metric("gpueff_memory_total_bytes", GAUGE, "bytes", "Device memory in all, bytes.",
           readings=_r("sample.memory_total_bytes", dcgm=Dcgm(250, "DCGM_FI_DEV_FB_TOTAL", MIB, FAST), trace=("mem_total", 1)), collector="memory"),
    Metric("gpueff_memory_reserved_bytes", GAUGE, "bytes", "Device memory reserved by the driver and firmware, bytes.",
           readings=_r("sample.memory_reserved_bytes", dcgm=Dcgm(253, "DCGM_FI_DEV_FB_RESERVED", MIB, FAST)), backends=NOT_REPLAY, collector="memory"),
    Metric("gpueff_clock_event_active", GAUGE, "", "1 while this clock-event (throttle) reason holds the clocks down.", detail="1 while this clock-event (throttle) reason holds the clocks down: reason is gpu_idle, applications_clocks_setting, sw_power_cap, hw_slowdown, sync_boost, sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown or display_clock_setting.", labels=("reason",),
           readings=_r("sample.clock_event_reasons", dcgm=Dcgm(112, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 1, FAST), trace=("throttle", 1)), collector="clocks"),
    Metric("gpueff_ecc_errors_total", COUNTER, "", "ECC errors since driver load, by type (corrected, uncorrected).", labels=("type",), readings=(
        Reading("sample.ecc_corrected_errors", "corrected", dcgm=Dcgm(310, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 1, SLOW)),
        Reading("sample.ecc_uncorrected_errors", "uncorrected", dcgm=Dcgm(311, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1, SLOW)),
    ), collector="errors"),
    Metric("gpueff_remapped_rows", GAUGE, "", "Memory rows remapped, by cause (correctable, uncorrectable).", labels=("cause",), readings=(
        Reading("sample.remapped_rows_correctable", "correctable", dcgm=Dcgm(394, "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 1, SLOW)),
        Reading("sample.remapped_rows_uncorrectable", "uncorrectable", dcgm=Dcgm(393, "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 1, SLOW)),
    ), collector="errors"),
    Metric("gpueff_remapped_rows_pending", GAUGE, "", "1 if a row remap is pending (the GPU needs a reset).",
           readings=_r("sample.remapped_rows_pending", dcgm=Dcgm(396, "DCGM_FI_DEV_ROW_REMAP_PENDING", 1, SLOW)), collector="errors"),
    Metric("gpueff_remapped_rows_failure", GAUGE, "", "1 if a row remap has failed.",
           readings=_r("sample.remapped_rows_failure", dcgm=Dcgm(395, "DCGM_FI_DEV_ROW_REMAP_FAILED DCGM_FI_DEV_ROW_REMAP_FAILURE", 1, SLOW)), collector="errors"),
    Metric("gpueff_xid_errors_total", COUNTER, "", "Critical Xid errors seen since the daemon started, by Xid code.", labels=("xid",), backends=NOT_REPLAY,
           readings=_r("sample.xid_errors", dcgm=Dcgm(230, "DCGM_FI_DEV_XID_ERROR DCGM_FI_DEV_XID_ERRORS", 1, EVENT)), collector="errors"),
    Metric("gpueff_xid_last_code", GAUGE, "", "Code of the most recent critical Xid error since the daemon started, also as the xid label.", detail="The code of the most recent critical Xid error since the daemon started, as the value and as the xid label (one series per GPU); absent before the first. dcgm-exporter's DCGM_FI_DEV_XID_ERRORS is recorded from it.",
           labels=("xid",), backends=NOT_REPLAY, readings=_r("sample.last_xid"), collector="errors"),
    # ---- health (docs/health.md; the DCGM fields: docs/dcgm.md, DCGM 4.6's dcgm_fields.h and
    # dcgm_fields.cpp): absent where the GPU, driver or DCGM does not give it ----
    Metric("gpueff_pcie_replay_errors_total", COUNTER, "", "PCIe link-level replays (retransmissions after a bad packet) since driver load.", detail="PCIe link-level replays (retransmissions after a bad packet) since driver load. A steady rate means a marginal link: riser, slot or seating. Read at the slow cadence. Every health reading, its cadence and where it is absent: docs/health.md.",
           readings=_r("sample.health.pcie_replay_errors", dcgm=Dcgm(202, "DCGM_FI_DEV_PCIE_REPLAY_TOTAL DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 1, SLOW)), collector="pcie"),
    Metric("gpueff_pcie_link_generation", GAUGE, "", "Current PCIe link generation (1-6).", detail="Current PCIe link generation (1-6). Drops at idle to save power are normal; below the maximum under load means a degraded link. Read at the slow cadence.",
           readings=_r("sample.health.pcie_link_generation", dcgm=Dcgm(237, "DCGM_FI_DEV_PCIE_LINK_GEN", 1, SLOW)), collector="pcie"),
    Metric("gpueff_pcie_link_max_generation", GAUGE, "", "Highest PCIe link generation the GPU and its slot support together.",
           readings=_r("sample.health.pcie_link_generation_max", dcgm=Dcgm(235, "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", 1, SLOW)), collector="pcie"),
    Metric("gpueff_pcie_link_width", GAUGE, "", "Current PCIe link width in lanes.", detail="Current PCIe link width in lanes. Below the maximum means lanes failed to train (a seating or riser fault). Read at the slow cadence.",
           readings=_r("sample.health.pcie_link_width", dcgm=Dcgm(238, "DCGM_FI_DEV_PCIE_LINK_WIDTH", 1, SLOW)), collector="pcie"),
    Metric("gpueff_pcie_link_max_width", GAUGE, "", "Widest PCIe link, in lanes, the GPU and its slot support together.",
           readings=_r("sample.health.pcie_link_width_max", dcgm=Dcgm(236, "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", 1, SLOW)), collector="pcie"),
    Metric("gpueff_nvlink_errors_total", COUNTER, "", "NVLink errors since driver load summed over the GPU's links, by type.", detail="NVLink errors since driver load summed over the GPU's links, by type: crc_flit (flow-control CRC), crc_data (data CRC), replay (retransmissions), recovery (link retraining). Absent on GPUs without NVLink. Read at the slow cadence. On Hopper crc_data is the sum of the per-link counts.",
           labels=("type",), readings=(
        Reading("sample.health.nvlink_crc_flit_errors", "crc_flit", dcgm=Dcgm(409, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 1, SLOW)),
        Reading("sample.health.nvlink_crc_data_errors", "crc_data", dcgm=Dcgm(419, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", 1, SLOW)),
        Reading("sample.health.nvlink_replay_errors", "replay", dcgm=Dcgm(429, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", 1, SLOW)),
        Reading("sample.health.nvlink_recovery_errors", "recovery", dcgm=Dcgm(439, "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", 1, SLOW)),
    ), collector="nvlink"),
    Metric("gpueff_nvlink_link_active", GAUGE, "", "1 if this NVLink link is up, 0 if it is down, for each link the GPU has.", detail="1 if this NVLink link is up, 0 if it is down, for each link the GPU has (at most 36). Read at the slow cadence.", labels=("link",),
           readings=_r("sample.health.nvlink_links_active"), collector="nvlink"),
    Metric("gpueff_nvlink_link_errors_total", COUNTER, "", "NVLink errors since driver load on each active link, by type.", detail="NVLink errors since driver load on each active link (at most 36), by type: crc_flit (flow-control CRC), crc_data (data CRC), replay, recovery. NVML: the data-link error fields, scopeId = the link, one call per GPU, and crc_data, which no field answers on Hopper, one nvmlDeviceGetNvLinkErrorCounter call per link; DCGM: its per-link fields (links 0-17). Read at the slow cadence.",
           labels=("link", "type"), backends=NOT_REPLAY, readings=_r("sample.health.nvlink_link_errors"), collector="nvlink"),
    Metric("gpueff_gpu_peer_info", GAUGE, "", "How this GPU reaches each other GPU of the node: the PCIe path and NVLink. Always 1.", detail="How this GPU reaches each other GPU of the node, read once per device open: pcie_path is the nearest PCIe element both hang from (same_board, pcie_switch, pcie_switches, host_bridge, numa_node, system: across CPU sockets; unknown), nvlink is direct (NVLink links join them), switch (peer-to-peer over NVLink works with no direct link NVML names: an NVSwitch fabric) or none. Always 1.",
           labels=("peer_gpu", "peer_uuid", "pcie_path", "nvlink"), backends=NVML_ONLY, readings=_r("sample.device.peers"), when_down=True, collector="topology"),
    Metric("gpueff_gpu_peer_nvlinks", GAUGE, "", "Active NVLink links joining this GPU directly to the peer GPU.", detail="Active NVLink links joining this GPU directly to the peer GPU (absent where none do: no NVLink, or an NVSwitch fabric between them).",
           labels=("peer_gpu", "peer_uuid"), backends=NVML_ONLY, readings=_r("sample.device.peers"), when_down=True, collector="topology"),
    Metric("gpueff_clock_violation_seconds_total", COUNTER, "seconds", "Seconds the clocks were held below their target since driver load, by policy.", detail="Time the clocks were held below their target since driver load, by policy: power, thermal, sync_boost, board_limit, low_utilization, reliability (nvmlDeviceGetViolationStatus). Its rate is the share of time throttled. Read at the slow cadence.",
           labels=("reason",), readings=tuple(
               # DCGM stores NVML's NVML_FI_DEV_PERF_POLICY_* value unchanged: nanoseconds (docs/dcgm.md).
               Reading(f"sample.health.violation_{reason}_seconds", reason, dcgm=Dcgm(field_id, name, 1e-9, SLOW)) for reason, field_id, name in (
                   ("power", 240, "DCGM_FI_DEV_POWER_VIOLATION"),
                   ("thermal", 241, "DCGM_FI_DEV_THERMAL_VIOLATION"),
                   ("sync_boost", 242, "DCGM_FI_DEV_SYNC_BOOST_VIOLATION"),
                   ("board_limit", 243, "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION"),
                   ("low_utilization", 244, "DCGM_FI_DEV_LOW_UTIL_VIOLATION"),
                   ("reliability", 245, "DCGM_FI_DEV_RELIABILITY_VIOLATION"),
               )), collector="violations"),
    Metric("gpueff_retired_pages", GAUGE, "", "Device memory pages retired, by cause (single_bit, double_bit); pre-Ampere GPUs only.", detail="Device memory pages retired, by cause (single_bit: multiple correctable errors, double_bit: an uncorrectable error). Pre-Ampere GPUs only; newer ones remap rows (gpueff_remapped_rows).",
           labels=("cause",), readings=(
        Reading("sample.health.retired_pages_single_bit", "single_bit", dcgm=Dcgm(390, "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL DCGM_FI_DEV_RETIRED_SBE", 1, SLOW)),
        Reading("sample.health.retired_pages_double_bit", "double_bit", dcgm=Dcgm(391, "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL DCGM_FI_DEV_RETIRED_DBE", 1, SLOW)),
    ), collector="errors"),
    Metric("gpueff_retired_pages_pending", GAUGE, "", "1 if a page retirement waits for the next driver reload or GPU reset (pre-Ampere GPUs only).",
           readings=_r("sample.health.retired_pages_pending", dcgm=Dcgm(392, "DCGM_FI_DEV_PAGE_RETIRED_PENDING DCGM_FI_DEV_RETIRED_PENDING", 1, SLOW)), collector="errors"),
    Metric("gpueff_performance_state", GAUGE, "", "Performance state: 0 (P0, fastest) to 15 (slowest).",
           readings=_r("sample.health.performance_state", dcgm=Dcgm(190, "DCGM_FI_DEV_GPU_PSTATE DCGM_FI_DEV_PSTATE", 1, FAST)), collector="clocks"),
    Metric("gpueff_encoder_utilization_ratio", GAUGE, "ratio", "Share of the driver's sample period the video encoder (NVENC) was busy.",
           readings=_r("sample.health.encoder_utilization", dcgm=Dcgm(206, "DCGM_FI_DEV_ENC_UTIL", 0.01, FAST)), collector="video"),
    Metric("gpueff_decoder_utilization_ratio", GAUGE, "ratio", "Share of the driver's sample period the video decoder (NVDEC) was busy.",
           readings=_r("sample.health.decoder_utilization", dcgm=Dcgm(207, "DCGM_FI_DEV_DEC_UTIL", 0.01, FAST)), collector="video"),
    Metric("gpueff_fan_speed_ratio", GAUGE, "ratio", "Fan speed as a share of its maximum. Absent on passively cooled GPUs (most data-centre boards).",
           readings=_r("sample.health.fan_speed", dcgm=Dcgm(191, "DCGM_FI_DEV_FAN_SPEED", 0.01, FAST)), collector="fan"),
    Metric("gpueff_temperature_limit_celsius", GAUGE, "celsius", "Temperature limits in degrees Celsius, by threshold (slowdown, shutdown, gpu_max, memory_max).", detail="Temperature limits in degrees Celsius, by threshold: slowdown (the clocks drop), shutdown, gpu_max and memory_max (the most the GPU core and memory should run at). Fixed while the driver runs: NVML reads them once per device open, DCGM watches them at the slow cadence.",
           labels=("threshold",), readings=tuple(Reading(f"sample.health.temperature_{name}_celsius", name, dcgm=Dcgm(field_id, names, 1, SLOW)) for name, field_id, names in (
               ("slowdown", 158, "DCGM_FI_DEV_GPU_TEMP_SLOWDOWN_CELSIUS DCGM_FI_DEV_SLOWDOWN_TEMP"),
               ("shutdown", 159, "DCGM_FI_DEV_GPU_TEMP_SHUTDOWN_CELSIUS DCGM_FI_DEV_SHUTDOWN_TEMP"),
               ("gpu_max", 152, "DCGM_FI_DEV_GPU_MAX_OP_TEMP_CELSIUS DCGM_FI_DEV_GPU_MAX_OP_TEMP"),
               ("memory_max", 151, "DCGM_FI_DEV_MEMORY_MAX_OP_TEMP_CELSIUS DCGM_FI_DEV_MEM_MAX_OP_TEMP"),
           )), collector="thermal"),
    Metric("gpueff_compute_processes", GAUGE, "", "Compute processes running on the GPU.", readings=_r("sample.process_count"), backends=NVML_ONLY, collector="processes"),
    Metric("gpueff_compute_process_memory_bytes", GAUGE, "bytes", "Device memory used by the running compute processes, bytes.", readings=_r("sample.process_memory_bytes"), backends=NVML_ONLY, collector="processes"),
    Metric("gpueff_process_memory_bytes", GAUGE, "bytes", "Device memory used by one compute process (per_process collector, off by default).",
           detail=f"Device memory used by one compute process (the per_process collector, off by default: --collector.per_process): at most {MAX_PROCESSES} per GPU, the most memory first; the rest summed in one series with pid=\"other\" and the other labels empty. command is the program's name (/proc/<pid>/comm), empty with process_names: false; holder_kind and holder are the fair split's owner. A PID is a label, so every process started is a new series: why it is opt-in, docs/collectors.md.",
           labels=("pid", "user_id", "command", "holder_kind", "holder"), readings=_r("processes.rows"), backends=NOT_DCGM, collector="per_process"),
    Metric("gpueff_process_busy_share_ratio", GAUGE, "ratio", "One compute process's share of the GPU's busy time over the poll window (per_process).",
           detail="This compute process's share of the GPU's busy time over the poll window, from NVML's per-process samples (the per_process collector; the same rows and labels as gpueff_process_memory_bytes).",
           labels=("pid", "user_id", "command", "holder_kind", "holder"), readings=_r("processes.rows"), backends=NVML_ONLY, collector="per_process"),
    # ---- profiling (GPM on Hopper+, DCGM 1001-1016): ratios 0..1 and bytes per second over the window ----
    _ratio("sm_active", "gpueff_sm_active_ratio", Gpm("SM_UTIL", 2, 0.01), Dcgm(1002, "DCGM_FI_PROF_SM_UTIL_RATIO DCGM_FI_PROF_SM_ACTIVE", 1, PROFILING),
           "SM activity: average share of SMs with at least one warp resident over the window.", detail="SM activity: average share of SMs with at least one warp resident (GPM SM_UTIL / DCGM SM_ACTIVE). The truth that coarse utilization is not."),
    _ratio("sm_occupancy", "gpueff_sm_occupancy_ratio", Gpm("SM_OCCUPANCY", 3, 0.01), Dcgm(1003, "DCGM_FI_PROF_SM_OCCUPANCY_RATIO DCGM_FI_PROF_SM_OCCUPANCY", 1, PROFILING),
           "SM occupancy: resident warps over the theoretical maximum."),
    _ratio("graphics_active", "gpueff_graphics_engine_active_ratio", Gpm("GRAPHICS_UTIL", 1, 0.01), Dcgm(1001, "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1, PROFILING),
           "Share of the poll window the graphics/compute engine was active.", detail="Share of time the graphics/compute engine was active (GPM GRAPHICS_UTIL / DCGM GR_ENGINE_ACTIVE) over the poll window, like every ratio beside it. Absent where the engine is read only over the slow window (the NVML backend on a full GPU): see gpueff_graphics_engine_active_slow_window_ratio."),
    Metric("gpueff_graphics_engine_active_slow_window_ratio", GAUGE, "ratio",
           "NOT the poll window: graphics engine activity over the last slow_collect_interval (default 30 s).", detail="NOT the poll window: the graphics/compute engine's activity (GPM GRAPHICS_UTIL) averaged over the last slow_collect_interval (default 30 s) up to the last slow round, read at the slow cadence because one read costs 1.5 ms of CPU (NVML backend, a GPU not in MIG mode). It lags a job's start or end by up to two slow intervals (one H200 scrape read 0.001 beside SM activity 0.86): read it beside nothing of the same scrape; the window's utilization is gpueff_gpu_utilization_ratio. Why: docs/collectors.md#one-window-per-scrape.",
           readings=_r("sample.graphics_active_slow_window"), backends=NVML_ONLY, collector="profiling"),
    _ratio("tensor_active", "gpueff_tensor_active_ratio", Gpm("ANY_TENSOR_UTIL", 5, 0.01), Dcgm(1004, "DCGM_FI_PROF_TENSOR_UTIL_RATIO DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1, PROFILING),
           "Share of cycles any tensor pipe was active."),
    _ratio("tensor_hmma_active", "gpueff_tensor_hmma_active_ratio", Gpm("HMMA_TENSOR_UTIL", 7, 0.01), Dcgm(1014, "DCGM_FI_PROF_HMMA_UTIL_RATIO DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", 1, PROFILING),
           "Share of cycles the HMMA (FP16/BF16/FP8) tensor pipe was active."),
    _ratio("tensor_imma_active", "gpueff_tensor_imma_active_ratio", Gpm("IMMA_TENSOR_UTIL", 9, 0.01), Dcgm(1013, "DCGM_FI_PROF_IMMA_UTIL_RATIO DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE", 1, PROFILING),
           "Share of cycles the IMMA (integer) tensor pipe was active."),
    _ratio("tensor_dfma_active", "gpueff_tensor_dfma_active_ratio", Gpm("DFMA_TENSOR_UTIL", 6, 0.01), Dcgm(1015, "DCGM_FI_PROF_DFMA_UTIL_RATIO DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE", 1, PROFILING),
           "Share of cycles the DFMA (FP64) tensor pipe was active."),
    _ratio("dram_active", "gpueff_dram_active_ratio", Gpm("DRAM_BW_UTIL", 10, 0.01), Dcgm(1005, "DCGM_FI_PROF_DRAM_UTIL_RATIO DCGM_FI_PROF_DRAM_ACTIVE", 1, PROFILING),
           "DRAM bandwidth used over its theoretical maximum."),
    _ratio("fp64_active", "gpueff_fp64_active_ratio", Gpm("FP64_UTIL", 11, 0.01), Dcgm(1006, "DCGM_FI_PROF_FP64_UTIL_RATIO DCGM_FI_PROF_PIPE_FP64_ACTIVE", 1, PROFILING),
           "Share of cycles the non-tensor FP64 pipe was active."),
    _ratio("fp32_active", "gpueff_fp32_active_ratio", Gpm("FP32_UTIL", 12, 0.01), Dcgm(1007, "DCGM_FI_PROF_FP32_UTIL_RATIO DCGM_FI_PROF_PIPE_FP32_ACTIVE", 1, PROFILING),
           "Share of cycles the non-tensor FP32 pipe was active."),
    _ratio("fp16_active", "gpueff_fp16_active_ratio", Gpm("FP16_UTIL", 13, 0.01), Dcgm(1008, "DCGM_FI_PROF_FP16_UTIL_RATIO DCGM_FI_PROF_PIPE_FP16_ACTIVE", 1, PROFILING),
           "Share of cycles the non-tensor FP16 pipe was active."),
    _ratio("integer_active", "gpueff_integer_active_ratio", Gpm("INTEGER_UTIL", 4, 0.01), Dcgm(1016, "DCGM_FI_PROF_INT_UTIL_RATIO DCGM_FI_PROF_PIPE_INT_ACTIVE", 1, PROFILING),
           "Share of cycles the integer pipe was active."),
    _rate("pcie_tx_bytes_per_second", "gpueff_pcie_tx_bytes_per_second", Gpm("PCIE_TX_PER_SEC", 20, MIB), Dcgm(1009, "DCGM_FI_PROF_PCIE_TX_BYTES", 1, PROFILING),
          "PCIe traffic from the GPU, bytes per second over the last window."),
    _rate("pcie_rx_bytes_per_second", "gpueff_pcie_rx_bytes_per_second", Gpm("PCIE_RX_PER_SEC", 21, MIB), Dcgm(1010, "DCGM_FI_PROF_PCIE_RX_BYTES", 1, PROFILING),
          "PCIe traffic to the GPU, bytes per second over the last window."),
    _rate("nvlink_tx_bytes_per_second", "gpueff_nvlink_tx_bytes_per_second", Gpm("NVLINK_TOTAL_TX_PER_SEC", 61, MIB), Dcgm(1011, "DCGM_FI_PROF_NVLINK_TX_BYTES", 1, PROFILING),
          "NVLink traffic sent over all links, bytes per second over the last window."),
    _rate("nvlink_rx_bytes_per_second", "gpueff_nvlink_rx_bytes_per_second", Gpm("NVLINK_TOTAL_RX_PER_SEC", 60, MIB), Dcgm(1012, "DCGM_FI_PROF_NVLINK_RX_BYTES", 1, PROFILING),
          "NVLink traffic received over all links, bytes per second over the last window."),
    # ---- DCGM 4.6's monotonic counters (dcgm_fields.h 1084-1096): exact over any range where DCGM gives them ----
    Metric("gpueff_sm_cycles_elapsed_total", COUNTER, "", "SM cycles elapsed since the driver loaded (DCGM 4.6's raw counter, field 1084).",
           detail="SM cycles elapsed since the driver loaded, DCGM's raw counter (DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL, 1084; DCGM 4.6 and newer). With gpueff_sm_cycles_active_total and gpueff_pipe_cycles_active_total, increase(active) / increase(elapsed) over any range is that range's exact activity. DCGM backend only; absent where DCGM does not give it.",
           readings=_r("sample.cycles.sm_elapsed", dcgm=Dcgm(1084, "DCGM_FI_PROF_SM_CYCLES_ELAPSED_TOTAL", 1, FAST)), backends=DCGM_ONLY, collector="profiling"),
    Metric("gpueff_sm_cycles_active_total", COUNTER, "", "SM cycles with a warp resident since the driver loaded (DCGM 4.6's raw counter, field 1085).",
           detail="SM cycles with at least one warp resident since the driver loaded, DCGM's raw counter (DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL, 1085): over gpueff_sm_cycles_elapsed_total, the exact SM activity of any range. DCGM backend only.",
           readings=_r("sample.cycles.sm_active", dcgm=Dcgm(1085, "DCGM_FI_PROF_SM_CYCLES_ACTIVE_TOTAL", 1, FAST)), backends=DCGM_ONLY, collector="profiling"),
    Metric("gpueff_pipe_cycles_active_total", COUNTER, "", "Cycles each pipe was active since the driver loaded, by pipe (DCGM 4.6's raw counters).",
           detail="Cycles each pipe was active since the driver loaded, DCGM's raw counters (1086-1090, 1093-1096): pipe is tensor (any tensor pipe, MMA), tensor_dmma, tensor_hmma, tensor_imma, tensor_dfma, integer, fp64, fp32 or fp16; over gpueff_sm_cycles_elapsed_total, the exact activity of any range. DCGM backend only.",
           labels=("pipe",), backends=DCGM_ONLY, collector="profiling", readings=tuple(
               Reading(f"sample.cycles.{pipe}", pipe, dcgm=Dcgm(field_id, name, 1, FAST)) for pipe, field_id, name in (
                   ("tensor", 1086, "DCGM_FI_PROF_MMA_CYCLES_ACTIVE_TOTAL"),
                   ("tensor_dmma", 1087, "DCGM_FI_PROF_DMMA_CYCLES_ACTIVE_TOTAL"),
                   ("tensor_hmma", 1088, "DCGM_FI_PROF_HMMA_CYCLES_ACTIVE_TOTAL"),
                   ("tensor_imma", 1089, "DCGM_FI_PROF_IMMA_CYCLES_ACTIVE_TOTAL"),
                   ("tensor_dfma", 1090, "DCGM_FI_PROF_DFMA_CYCLES_ACTIVE_TOTAL"),
                   ("integer", 1093, "DCGM_FI_PROF_INT_CYCLES_ACTIVE_TOTAL"),
                   ("fp64", 1094, "DCGM_FI_PROF_FP64_CYCLES_ACTIVE_TOTAL"),
                   ("fp32", 1095, "DCGM_FI_PROF_FP32_CYCLES_ACTIVE_TOTAL"),
                   ("fp16", 1096, "DCGM_FI_PROF_FP16_CYCLES_ACTIVE_TOTAL"),
               ))),
    Metric("gpueff_pcie_bytes_total", COUNTER, "bytes", "PCIe bytes since the driver loaded, by direction (DCGM 4.6's raw counters).",
           detail="PCIe bytes since the driver loaded by direction (tx from the GPU, rx to it), DCGM's raw counters (DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL 1091, _RX_ 1092): rate() over any range is its exact mean traffic. DCGM backend only.",
           labels=("direction",), backends=DCGM_ONLY, collector="profiling", readings=(
               Reading("sample.cycles.pcie_tx_bytes", "tx", dcgm=Dcgm(1091, "DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL", 1, FAST)),
               Reading("sample.cycles.pcie_rx_bytes", "rx", dcgm=Dcgm(1092, "DCGM_FI_PROF_PCIE_RX_BYTES_TOTAL", 1, FAST)),
           )),
    # ---- derived (gpueff/pipeline/derive.py, gpueff/pipeline/totals.py) ----
    Metric("gpueff_efficiency_ratio", GAUGE, "ratio", "SM activity / utilization over the same window, 0..1; absent when utilization is 0.", detail="SM activity / utilization over the same window, 0..1: how much of the 'busy' time the SMs really worked. Absent when utilization is 0.", readings=_r("derived.efficiency"), collector="efficiency"),
    Metric("gpueff_mismatch", GAUGE, "", "1 while the GPU is 'busy but not working' by this rule.", detail="1 while the GPU is 'busy but not working' by this rule: high_util_low_sm (high utilization, low SM activity), low_efficiency (high enough utilization, low efficiency), high_util_low_work (high utilization while every math pipe, DRAM and link is below a tenth of its peak: busy, nothing near any roof, which SM activity misses when warps sit resident and issue nothing); thresholds under mismatch: in the config. Never 1 while gpueff_readings_implausible is.", labels=("rule",), readings=_r("derived.mismatch"), collector="efficiency"),
    Metric("gpueff_bottleneck", GAUGE, "", "Roofline-style bottleneck class, a state set: exactly one class is 1 per GPU.", detail="Roofline-style bottleneck class, a state set: exactly one class is 1 per GPU. Judged from the last bottleneck.window of readings; a new class must win bottleneck.hold_polls polls in a row. What to try: gpueff_bottleneck_class_info. class is idle, host, compute, memory, memory_latency, communication, peer_wait, underfilled, latency, mixed or unknown (docs/classes.md).", labels=("class",), readings=_r("derived.bottleneck"), collector="efficiency"),
    Metric("gpueff_readings_implausible", GAUGE, "", "1 while this counter-health check finds the window's profiling readings impossible.", detail="1 while this counter-health check finds the window's profiling readings physically impossible (docs/metrics.md says what each check means); the GPU's class is then unknown and it raises no mismatch or busy-but-idle time.", labels=("check",), readings=_r("derived.implausible"), collector="efficiency"),
    Metric("gpueff_pipe_busy_flops_per_second", GAUGE, "flops_per_second", "Upper bound of each math pipe's FLOP/s: its busy cycles at its full dense rate and clock.", detail="Tensor-busy and pipe-busy FLOP/s: each math pipe's active cycles at its full dense rate at the window's SM clock (activity x the data sheet's figure for this model x SM clock / the clock that figure is quoted at; docs/peaks.md derives each pipe's clock basis). An upper bound of the work done, not a count of it: the counters count busy pipe cycles, so padded tiles (batch-1 decode GEMVs read 5-9x their FLOP) and slower instruction paths (Hopper's mma.sync: INT8 1.5-1.65x, cuDNN convolutions ~1.3x) count as full work; large GEMMs and attention read 1.0-1.12x (measured bands: docs/peaks.md). pipe=hmma_bf16_equivalent is the HMMA tensor pipe at its BF16 rate (it runs FP16, BF16, TF32 and FP8 alike: TF32 work reads twice its FLOP, FP8 half); dmma_fp64 the FP64 tensor pipe; fp64, fp32, fp16 the non-tensor pipes. The work really done: an app's own count (gpueff_app_model_flops_utilization_ratio). Absent where the pipe's activity or this model's figure is unknown.",
           labels=("pipe",), readings=tuple(Reading(f"derived.pipe_busy.{pipe}", pipe) for pipe in ("hmma_bf16_equivalent", "dmma_fp64", "fp64", "fp32", "fp16")), collector="estimates"),
    Metric("gpueff_pipe_busy_int8_ops_per_second", GAUGE, "ops_per_second", "Upper bound of INT8 tensor ops per second: IMMA busy cycles at the dense INT8 rate and clock.", detail="Tensor-busy INT8 operations per second: IMMA pipe activity x this model's dense INT8 figure x SM clock / its clock basis. An upper bound: an INT8 GEMM on Hopper's older mma.sync path (torch._int_mm's cuBLASLt kernel) does 2/3 of it. Not FLOP: not in the FLOP totals.", readings=_r("derived.pipe_busy.imma_int8"), collector="estimates"),
    Metric("gpueff_busy_flops_per_second", GAUGE, "flops_per_second", "All floating-point pipes' busy FLOP/s together: an upper bound of the FLOP/s done.", detail="All floating-point pipes' busy FLOP/s together (the sum of gpueff_pipe_busy_flops_per_second over its pipes; the HMMA part BF16-equivalent): an upper bound of the FLOP/s done.", readings=_r("derived.busy_flops"), collector="estimates"),
    Metric("gpueff_estimated_flops_per_second", GAUGE, "flops_per_second", "Point estimate of the FLOP/s done, where the busiest pipe's kernels are math-bound.", detail="A point estimate of the FLOP/s done, beside the busy upper bound: gpueff_busy_flops_per_second where the pipe that carries most of it is busy for at least a quarter of the SMs' active cycles, so its kernels are bound by their math and a busy cycle does the pipe's rate (large GEMMs, attention, transformer training, FP32 convolutions: 1.0-1.17x the jobs' own counts at the clock read, 1.01-1.08x where no limit held the clocks). The HMMA pipe counts at the BF16 rate: TF32 work reads twice its FLOP, FP8 half. 0 where no floating-point pipe had a busy cycle (the bound holds the work to 0). Absent where that pipe is busy for less (skinny and batch-1 GEMMs, recurrent cells, cuDNN bf16 and TF32 convolutions, starved jobs: their busy cycles read 1.0-8.6x the work, so no point estimate), where no floating-point pipe or this model's figure is known, while a power or thermal limit held the clocks at any reading of the last bottleneck.window or the clock-event reasons are not read (the SM clock read is then the controller's setting, not the SMs' rate: an H200 at its 700 W cap read 1525 MHz while its SMs' cycle counter ran at 1378), and while gpueff_readings_implausible is 1 (docs/peaks.md).",
           readings=_r("derived.estimated_flops"), collector="estimates"),
    Metric("gpueff_estimated_int8_ops_per_second", GAUGE, "ops_per_second", "Point estimate of the INT8 tensor ops per second done, at the mma.sync path's rate.", detail="A point estimate of the INT8 tensor operations per second done: the IMMA pipe's busy cycles at the rate of the mma.sync path (2/3 of the data sheet's wgmma figure on Hopper, measured; the data sheet's rate before Hopper), where the IMMA pipe is busy for at least a quarter of the SMs' active cycles. The counters cannot tell the paths apart: an INT8 GEMM on Hopper's wgmma reads 2/3 of its work, never more. 0 where the IMMA pipe had no busy cycle. Absent where the pipe is busy for less, where the architecture's mma.sync rate is not measured (Blackwell, a model known only from the config), while a power or thermal limit held the clocks at any reading of the last bottleneck.window or the clock-event reasons are not read (as gpueff_estimated_flops_per_second), and while gpueff_readings_implausible is 1 (docs/peaks.md).",
           readings=_r("derived.estimated_int8_ops"), collector="estimates"),
    Metric("gpueff_pipe_peak_ratio", GAUGE, "ratio", "Each math pipe's busy share of its rate at the maximum SM clock, 0..1.", detail="Each math pipe's active cycles as a share of what it can do at the maximum SM clock (activity x SM clock / max SM clock), 0..1; pipe is hmma_bf16_equivalent, dmma_fp64, imma_int8, fp64, fp32 or fp16. The HMMA share is the same at any precision it runs. Busy, not useful: padded tiles count (see gpueff_pipe_busy_flops_per_second).",
           labels=("pipe",), readings=tuple(Reading(f"derived.peak_share.{pipe}", pipe) for pipe in ("hmma_bf16_equivalent", "dmma_fp64", "imma_int8", "fp64", "fp32", "fp16")), collector="estimates"),
    Metric("gpueff_estimated_dram_bytes_per_second", GAUGE, "bytes_per_second", "Estimated achieved DRAM bandwidth in bytes per second: DRAM activity x peak bandwidth.", detail="Estimated achieved DRAM bandwidth: DRAM activity x peak bandwidth. Absent for models without a known peak.", readings=_r("derived.dram_bytes_per_second"), collector="estimates"),
    Metric("gpueff_busy_flop_per_joule", GAUGE, "flop_per_joule", "Busy FLOP/s over the window's mean power: an upper bound of the FLOP done per joule.", detail="gpueff_busy_flops_per_second over the window's mean power: an upper bound of the FLOP done per joule.", readings=_r("derived.busy_flop_per_joule"), collector="estimates"),
    Metric("gpueff_peak_tensor_flops_per_second", GAUGE, "flops_per_second", "Dense BF16 tensor FLOP/s of this model as its data sheet quotes it, at its own clock basis.", detail="Dense BF16 tensor (HMMA) FLOP/s of this model as its data sheet quotes it, at that figure's own clock basis (H100 SXM: 989.4 at ~1830 MHz; docs/peaks.md lists every pipe's figure and basis per model). A tensor pipe clocked above its basis does more (1.08x at 1980 MHz).", readings=_r("derived.peak.tensor_flops"), collector="estimates"),
    Metric("gpueff_peak_dram_bytes_per_second", GAUGE, "bytes_per_second", "Peak DRAM bandwidth of this model, bytes per second.", readings=_r("derived.peak.dram_bytes_per_second"), collector="estimates"),
    Metric("gpueff_peak_info", GAUGE, "", "Where this GPU's peak figures come from (origin: data_sheet, derived, device, config). Always 1.", detail="Where this GPU's peak figures (the denominators of every FLOP/s and bandwidth estimate) come from: origin is data_sheet (NVIDIA's documents), derived (a table row NVIDIA gives no figures for, derived from its SMs, per-SM rates, boost clock and memory interface; docs/peaks.md shows each derivation), device (a model in no row, derived from what NVML reports on the GPU: SM count, max SM clock, compute capability, memory bus width, max memory clock) or config (the config's peaks: section set at least one figure). Absent for a model with no peaks. Always 1.", labels=("origin",), readings=_r("derived.peak.origin"), collector="estimates"),
    Metric("gpueff_gpu_busy_seconds_total", COUNTER, "seconds", "Integral of utilization (gpueff_gpu_utilization_ratio) over time: seconds the GPU counted as busy.", readings=_r("totals.busy_seconds"), collector="efficiency"),
    Metric("gpueff_sm_active_seconds_total", COUNTER, "seconds", "Integral of SM activity over time: SM-active GPU-seconds.", detail="Integral of SM activity over time: SM-active GPU-seconds, each window's SM activity times its length (with GPM exactly the window the activity is the mean of), so rate() over any range is that range's mean SM activity, whatever the scrape interval.", readings=_r("totals.sm_active_seconds"), collector="efficiency"),
    Metric("gpueff_pipe_active_seconds_total", COUNTER, "seconds", "Integral of each math pipe's activity over time: pipe-active GPU-seconds, by pipe.", detail="Integral of each pipe's activity over time, like gpueff_sm_active_seconds_total: pipe is tensor (any tensor pipe), tensor_hmma, tensor_imma, tensor_dfma, fp64, fp32, fp16 or integer; rate() over any range is that pipe's mean activity over it. Only for the pipes this GPU's profiling reads.",
           labels=("pipe",), readings=_r("totals.pipe_active_seconds"), collector="efficiency"),
    Metric("gpueff_dram_active_seconds_total", COUNTER, "seconds", "Integral of DRAM activity (the share of peak bandwidth used) over time, in seconds.", detail="Integral of DRAM activity (the share of peak bandwidth used) over time, like gpueff_sm_active_seconds_total: rate() over any range is its mean DRAM activity.", readings=_r("totals.dram_active_seconds"), collector="efficiency"),
    Metric("gpueff_busy_idle_sm_seconds_total", COUNTER, "seconds", "Seconds the GPU looked busy while its SMs were not: integral of max(0, util - SM activity).", detail="Integral of max(0, utilization - SM activity) over windows whose counters are plausible: seconds the GPU looked busy while its SMs were not.", readings=_r("totals.busy_idle_sm_seconds"), collector="efficiency"),
    Metric("gpueff_peer_wait_seconds_total", COUNTER, "seconds", "Seconds this GPU lost waiting on a slower GPU of its job (class peer_wait).", detail="Seconds this GPU lost waiting on a slower GPU of its job while it read class peer_wait: its busy-but-idle share beyond the straggler's (gpueff_job_straggler), integrated over time. Absent until the GPU first waits.",
           readings=_r("totals.peer_wait_seconds"), collector="efficiency"),
    Metric("gpueff_busy_idle_sm_cost_total", COUNTER, "", "What the busy-but-idle-SM seconds cost at price_per_gpu_hour, in the labelled currency.", detail="What the busy-but-idle-SM seconds cost at price_per_gpu_hour, in the labelled currency; only with a price set.", labels=("currency",), readings=_r("totals.busy_idle_sm_cost"), collector="efficiency"),
    # GPU time by state (gpueff/pipeline/states.py): each observed window whole in one state, so a GPU's states add up to the time observed.
    Metric("gpueff_gpu_state_seconds_total", COUNTER, "seconds", "Observed seconds by state: free, held_idle, host_starved, busy_not_working, working, unknown.", detail="Observed time by state, each poll window whole in one: free (no kernel ran, no compute process), held_idle (no kernel ran, a compute process holds the GPU), host_starved (class host), busy_not_working (a gpueff_mismatch rule holds), working (the rest of the time a kernel ran), unknown (the readings cannot place the window). The states add up to the time observed: a gap longer than stale_after is not counted. How each window is placed: docs/metrics.md#gpu-time-by-state.",
           labels=("state",), readings=_r("totals.state_seconds"), collector="efficiency"),
    Metric("gpueff_gpu_state_joules_total", COUNTER, "joules", "Energy in joules since the daemon started, split by the state the GPU was in.", detail="The energy counter's advances since the daemon started, split by state in proportion to power x time in each (an advance with no window observed since the previous one goes to unknown): the states add up to the advances.",
           labels=("state",), readings=_r("totals.state_joules"), collector="efficiency"),
    Metric("gpueff_gpu_state_cost_total", COUNTER, "", "gpueff_gpu_state_seconds_total at price_per_gpu_hour, in the labelled currency.", detail="gpueff_gpu_state_seconds_total at price_per_gpu_hour (the price in force at the time), in the labelled currency; only with a price set.",
           labels=("state", "currency"), readings=_r("totals.state_cost"), collector="efficiency"),
    # ---- whose GPU (gpueff/attribution/doctor.py, docs/troubleshooting.md) ----
    Metric("gpueff_gpu_attribution_info", GAUGE, "", "Which path found this GPU's owner (path), and why none did or only that one (reason). Always 1.", detail="Which path found this GPU's owner, one series per GPU: path is kubelet, dra (the kubelet's assignment), pod_cgroup, slurm_cgroup (a process's cgroup), process (the process itself), demo (declared beside replayed traces) or none; reason is ok (a series names the owner) or why none does, or why only that path found it: no_process, processes_not_listed, attribution_off, socket_missing, kubelet_unreachable, no_gpu_limit, resource_not_matched, replica_ids, index_ids, dra_unmapped, pids_not_visible, outside_pods_and_jobs (docs/troubleshooting.md has an entry for each). Always 1.",
           labels=("path", "reason"), readings=_r("attribution.path")),
    # ---- Kubernetes attribution (docs/kubernetes.md) ----
    Metric("gpueff_gpu_pod_info", GAUGE, "", "A container the kubelet assigned this GPU (or MIG instance) to. Always 1.", detail="The containers the kubelet assigned this GPU (or MIG instance) to, one series each (several under time-slicing). Always 1.", scope=POD, labels=("namespace", "pod", "container")),
    Metric("gpueff_pod_compute_processes", GAUGE, "", "Compute processes on this GPU by the pod UID and container id of their cgroup (needs hostPID).", scope=POD, labels=("pod_uid", "container_id")),
    # ---- the fair split of shared GPUs (docs/sharing.md) ----
    Metric("gpueff_holder_busy_seconds_total", COUNTER, "seconds", "This holder's share of gpueff_gpu_busy_seconds_total (by NVML's per-process samples).", detail="This holder's share of gpueff_gpu_busy_seconds_total, split by NVML's per-process utilization samples; the holders of a GPU add up to it.", scope=HOLDER, labels=("holder_kind", "holder"), backends=NOT_DCGM),
    Metric("gpueff_holder_sm_active_seconds_total", COUNTER, "seconds", "This holder's share of gpueff_sm_active_seconds_total, split by busy time.", detail="This holder's share of gpueff_sm_active_seconds_total, split in proportion to busy time window by window (not measured per process).", scope=HOLDER, labels=("holder_kind", "holder"), backends=NOT_DCGM),
    Metric("gpueff_holder_busy_idle_sm_seconds_total", COUNTER, "seconds", "This holder's share of gpueff_busy_idle_sm_seconds_total, split by busy time.", detail="This holder's share of gpueff_busy_idle_sm_seconds_total, split in proportion to busy time window by window.", scope=HOLDER, labels=("holder_kind", "holder"), backends=NOT_DCGM),
    Metric("gpueff_holder_energy_joules_total", COUNTER, "joules", "This holder's share of the GPU's energy in joules since the daemon started.", detail="This holder's share of the energy counter's advances since the daemon started, split by power-weighted holding time; unattributed takes the windows no holder ran in.", scope=HOLDER, labels=("holder_kind", "holder"), backends=NOT_DCGM),
    Metric("gpueff_holder_state_seconds_total", COUNTER, "seconds", "This holder's share of gpueff_gpu_state_seconds_total, by state.", detail="This holder's share of gpueff_gpu_state_seconds_total by the same shares (a held_idle window held by several holders is shared equally); the holders of a GPU add up to each state but free, which no one holds.", scope=HOLDER, labels=("holder_kind", "holder", "state"), backends=NOT_DCGM),
    Metric("gpueff_holder_state_joules_total", COUNTER, "joules", "This holder's energy in joules by the state it held the GPU in.", detail="This holder's gpueff_holder_energy_joules_total by the state it held the GPU in; the unattributed holder's also takes the free windows' energy, which no state of a holder shows.", scope=HOLDER, labels=("holder_kind", "holder", "state"), backends=NOT_DCGM),
    Metric("gpueff_holder_state_cost_total", COUNTER, "", "gpueff_holder_state_seconds_total at price_per_gpu_hour, in the labelled currency.", detail="gpueff_holder_state_seconds_total at price_per_gpu_hour, in the labelled currency; only with a price set.", scope=HOLDER, labels=("holder_kind", "holder", "state", "currency"), backends=NOT_DCGM),
    Metric("gpueff_gpu_job_info", GAUGE, "", "A Slurm job whose processes run on this GPU (from their cgroups), for joins. Always 1.", detail="The Slurm jobs whose processes run on this GPU (from their cgroups), for joins with the GPU's series. user_id is known on cgroup v1 only. Always 1.", scope=HOLDER, labels=("job_id", "user_id"), backends=NOT_DCGM),
    Metric("gpueff_kubernetes_attribution_up", GAUGE, "", "1 if the last kubelet pod-resources List call answered, 0 if it failed.", detail="1 if the last kubelet pod-resources List call answered; 0 if it failed (the last good pod assignment is kept for 3 refresh intervals). After that the assignment is dropped.", scope=ATTRIBUTION),
    Metric("gpueff_kubernetes_attribution_errors_total", COUNTER, "", "Kubelet pod-resources List calls that failed or could not be made (no socket, no grpcio).", scope=ATTRIBUTION),
    Metric("gpueff_kubernetes_attribution_refused_total", COUNTER, "", "Entries of kubelet pod-resources List answers left out for breaking a limit.", detail="Entries of kubelet pod-resources List answers left out: containers whose namespace, pod or container name breaks Kubernetes' limits (DNS-1123, 63 or 253 characters), device ids over 256 characters, containers past 64 on one GPU. The limits: docs/security.md#limits-on-input.", scope=ATTRIBUTION),
    Metric("gpueff_kubernetes_attribution_last_success_timestamp_seconds", GAUGE, "seconds", "Unix time of the last kubelet pod-resources List answer.", scope=ATTRIBUTION),
    # ---- jobs of two or more GPUs, judged together (gpueff/pipeline/peers.py, docs/jobs.md) ----
    Metric("gpueff_job_gpus", GAUGE, "", "GPUs held by the job on this node.", detail="GPUs held by the job on this node. job_kind: pod (job_id the pod UID), slurm_job (the Slurm job id), process_group (one user's processes of one launcher on a bare host; job_id is the uid, the launcher's name and its GPUs, e.g. 1000:torchrun:0-3) or trace (a replayed recording).", scope=JOB),
    Metric("gpueff_job_gpu_info", GAUGE, "", "The GPUs of each job, for joins with the GPU series. Always 1.", scope=JOB, labels=("gpu", "uuid")),
    Metric("gpueff_job_efficiency_ratio", GAUGE, "ratio", "The job's efficiency: SM activity summed over its GPUs over their summed utilization, 0..1.", scope=JOB),
    Metric("gpueff_job_bottleneck_gpus", GAUGE, "", "The job's GPUs per bottleneck class (gpueff_bottleneck, peer_wait included): the job's class mix.", scope=JOB, labels=("class",)),
    Metric("gpueff_job_link_bytes_per_second", GAUGE, "bytes_per_second", "The job's interconnect traffic summed over its GPUs, by link (nvlink, pcie) and direction (tx, rx).", scope=JOB, labels=("link", "direction")),
    Metric("gpueff_job_straggler", GAUGE, "", "1 for the GPU the job's other GPUs wait on, while one of them reads peer_wait.", detail="1 for the GPU the job's other GPUs wait on (the working GPU that idles least while busy), while at least one of them reads peer_wait; absent otherwise.", scope=JOB, labels=("gpu", "uuid")),
    Metric("gpueff_job_peer_wait_ratio", GAUGE, "ratio", "Share of the job's GPU time lost waiting on its straggler over the last window.", detail="Share of the job's GPU time lost waiting on its straggler over the last window: the waiting GPUs' busy-but-idle share beyond the straggler's, summed, over the job's GPUs. 0 while none waits.", scope=JOB),
    # ---- per application (docs/apps.md) ----
    Metric("gpueff_app_up", GAUGE, "", "1 if the app's last scrape answered with its counter, else 0.", detail="1 if the app's last scrape answered with its counter, 0 if it was down, slow, too large or not Prometheus text.", scope=APP),
    Metric("gpueff_app_scrape_errors_total", COUNTER, "", "Failed scrapes of the app since the exporter started.", scope=APP),
    Metric("gpueff_app_gpus", GAUGE, "", "GPUs attributed to the app at the last poll (by index, UUID, process name or Kubernetes pod).", scope=APP),
    Metric("gpueff_app_gpu_info", GAUGE, "", "The GPUs attributed to each app, for joins with the gpueff_ GPU metrics. Always 1.", scope=APP, labels=("gpu", "uuid")),
    Metric("gpueff_app_units_total", COUNTER, "", "Work the app reported done since the exporter started, in its unit.", detail="Work the app reported done since the exporter started, in its unit: the increases of its counter, resets handled as rate() does.", scope=APP, labels=("unit",)),
    Metric("gpueff_app_throughput_per_second", GAUGE, "", "Units of work per second between the app's two latest good scrapes.", scope=APP, labels=("unit",)),
    Metric("gpueff_app_requests_per_second", GAUGE, "", "Requests per second between the app's two latest good scrapes (its requests_counter).", scope=APP),
    Metric("gpueff_app_units_per_joule", GAUGE, "", "Units of work per joule: throughput / summed power of the app's GPUs, both over the same window.", scope=APP, labels=("unit",)),
    Metric("gpueff_app_units_per_sm_active_second", GAUGE, "", "Units of work per SM-active GPU-second: throughput / summed SM activity of the app's GPUs.", scope=APP, labels=("unit",)),
    Metric("gpueff_app_flops_per_second", GAUGE, "flops_per_second", "The app's own FLOP/s: throughput x flops_per_unit, the work it really did.", detail="The app's own FLOP/s: throughput x flops_per_unit, the work it really did. Over its GPUs' gpueff_busy_flops_per_second (an upper bound) it is the share of their busy pipe cycles doing the app's work: the recording rule app:gpueff_useful_share_of_busy_flops:ratio.", scope=APP),
    Metric("gpueff_app_model_flops_utilization_ratio", GAUGE, "ratio", "Model FLOPs utilization: the app's FLOP/s over its GPUs' dense peak at its precision.", detail="Model FLOPs utilization: throughput x flops_per_unit / the summed dense peak of the app's GPUs at its precision (apps[].precision; default BF16).", scope=APP),
    Metric("gpueff_app_scrape_duration_seconds", GAUGE, "seconds", "How long the app's last scrape took.", scope=APP),
    Metric("gpueff_app_cost_per_million_units", GAUGE, "", "What a million units of the app's work cost at price_per_gpu_hour.", detail="What a million units of the app's work cost at price_per_gpu_hour: its GPUs x price per second / throughput x 1e6.", scope=APP, labels=("unit", "currency")),
    # ---- the exporter itself ----
    Metric("gpueff_exporter_build_info", GAUGE, "", "The exporter's version and backend (replayed=true: recorded traces). Always 1.", detail="The exporter's version and the backend it reads from (replayed=true: recorded traces, not live GPUs). Always 1.", scope=EXPORTER, labels=("version", "backend", "replayed")),
    Metric("gpueff_bottleneck_class_info", GAUGE, "", "What each gpueff_bottleneck class means and what to try, for joins and alert annotations. Always 1.", scope=EXPORTER, labels=("class", "meaning", "what_to_try")),
    Metric("gpueff_collect_duration_seconds", SUMMARY, "seconds", "Time one poll of all GPUs took.", detail="Time one poll of all GPUs took, a summary: gpueff_collect_duration_seconds_sum and gpueff_collect_duration_seconds_count.", scope=EXPORTER),
    Metric("gpueff_collect_errors_total", COUNTER, "", "Unexpected failures reading GPUs (lost GPUs, driver errors, backend failures).", scope=EXPORTER),
    Metric("gpueff_collect_stale", GAUGE, "", "1 if the last poll is older than stale_after, so every GPU is served as down.", scope=EXPORTER),
    Metric("gpueff_last_collect_success_timestamp_seconds", GAUGE, "seconds", "Unix time of the last poll that read at least one GPU.", scope=EXPORTER),
    Metric("gpueff_snapshot_age_seconds", GAUGE, "seconds", "Age of the served data: seconds since the last poll finished.", scope=EXPORTER),
    # ---- the daemon's process, under the names every Prometheus client library uses (no gpueff_ prefix) ----
    Metric("process_cpu_seconds_total", COUNTER, "seconds", "Total user and system CPU time spent in seconds.", scope=PROCESS),
    Metric("process_resident_memory_bytes", GAUGE, "bytes", "Resident memory size in bytes.", scope=PROCESS),
    Metric("process_virtual_memory_bytes", GAUGE, "bytes", "Virtual memory size in bytes.", scope=PROCESS),
    Metric("process_open_fds", GAUGE, "", "Number of open file descriptors.", scope=PROCESS),
    Metric("process_max_fds", GAUGE, "", "Maximum number of open file descriptors.", scope=PROCESS),
    Metric("process_start_time_seconds", GAUGE, "seconds", "Start time of the process since unix epoch in seconds.", scope=PROCESS),
)

BY_NAME: dict[str, Metric] = {metric.name: metric for metric in METRICS}
READINGS: tuple[tuple[Metric, Reading], ...] = tuple((metric, reading) for metric in METRICS for reading in metric.readings)
GPM_READINGS: tuple[Reading, ...] = tuple(reading for _, reading in READINGS if reading.gpm is not None)
PROFILING_FIELDS: tuple[str, ...] = tuple(reading.field for reading in GPM_READINGS)
PROFILING_RATIOS: frozenset[str] = frozenset(reading.field for metric, reading in READINGS if reading.gpm is not None and metric.unit == "ratio")
