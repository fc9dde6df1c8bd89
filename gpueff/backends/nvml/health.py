"""The NVML health readings (docs/health.md): PCIe replays and link state, NVLink errors and link
state, clock-violation time, retired pages, P-state, encoder/decoder utilization, fan speed and the
thermal limits.

Each reading is one entry of HEALTH_CALLS with the cadence its cost allows (measured on an H100,
docs/health.md): FAST ones every poll, SLOW ones every slow_collect_interval, their last values
kept in between, ONCE ones (limits no one can change while the driver runs) once per device open,
at its first slow round, and again after a re-initialisation. A call that answers NotSupported (or FunctionNotFound on an older driver,
InvalidArgument for a link or a policy the GPU does not have, NoPermission) is not made again for
that GPU, and its readings stay absent: never a fake 0. Any other error leaves the readings absent
for this round and is logged once; only a lost GPU or driver propagates, so a health reading can
never take a GPU's other readings down with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gpueff.logs import gpu_fields
from gpueff.sample import NO_HEALTH, Health

FAST, SLOW, ONCE = "fast", "slow", "once"
UNKNOWN_PSTATE = 32  # NVML_PSTATE_UNKNOWN

Reader = Callable[[ModuleType, Any], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class HealthCall:
    key: str  # what the GPU remembers as unsupported
    cadence: str
    read: Reader
    collector: str  # the collector (gpueff/collectors.py) whose series it feeds: not read while that is disabled
    # Readings (of calls made before it in the same round) that move whenever this call's answer does:
    # while each reads as in the last round, the last answer stands and the call is not made.
    kept_while: tuple[str, ...] = ()
    # Tuple readings this call's answer adds to (after what calls before it in the round gave) rather than replaces.
    adds_to: tuple[str, ...] = ()


def _pcie_replays(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    return {"pcie_replay_errors": float(nvml.nvmlDeviceGetPcieReplayCounter(handle))}


def _pcie_link(generation: str, width: str, suffix: str) -> Reader:
    return lambda nvml, handle: {f"pcie_link_generation{suffix}": int(getattr(nvml, generation)(handle)), f"pcie_link_width{suffix}": int(getattr(nvml, width)(handle))}


def _violation(policy: str, name: str) -> Reader:
    """Time the clocks were held down by ``policy``: violationTime is in nanoseconds (nvml.h)."""
    return lambda nvml, handle: {f"violation_{name}_seconds": nvml.nvmlDeviceGetViolationStatus(handle, getattr(nvml, policy)).violationTime / 1e9}


def _retired_pages(cause: str, name: str) -> Reader:
    return lambda nvml, handle: {f"retired_pages_{name}": len(nvml.nvmlDeviceGetRetiredPages(handle, getattr(nvml, cause)))}


def _retired_pending(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    return {"retired_pages_pending": bool(nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))}


def _pstate(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    state = int(nvml.nvmlDeviceGetPerformanceState(handle))
    return {"performance_state": state} if 0 <= state <= 15 else {}


def _codec(call: str, name: str) -> Reader:
    return lambda nvml, handle: {name: getattr(nvml, call)(handle)[0] / 100}


def _fan(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    return {"fan_speed": nvml.nvmlDeviceGetFanSpeed(handle) / 100}


def _threshold(threshold: str, name: str) -> Reader:
    """A temperature limit; 0 is what some boards answer for a limit they do not have: absent."""

    def read(nvml: ModuleType, handle: Any) -> dict[str, Any]:
        value = nvml.nvmlDeviceGetTemperatureThreshold(handle, getattr(nvml, threshold))
        return {f"temperature_{name}_celsius": float(value)} if value > 0 else {}

    return read


_NVLINK_ERROR_FIELDS = (
    ("NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "nvlink_crc_flit_errors"),
    ("NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "nvlink_crc_data_errors"),
    ("NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "nvlink_replay_errors"),
    ("NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "nvlink_recovery_errors"),
)
# The data-link error fields that take a link as scopeId (all links: ALL_LINKS), by the type they
# count. Hopper answers these and NotSupported for the *_TOTAL and per-link-numbered fields above;
# DL_CRC counts flit CRC errors (on an H200 it read 0 on every link whose data-CRC counter read 1-30).
_NVLINK_LINK_FIELDS = (
    ("NVML_FI_DEV_NVLINK_ERROR_DL_CRC", "crc_flit"),
    ("NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY", "replay"),
    ("NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY", "recovery"),
)
_TOTAL_OF_TYPE = {"crc_flit": "nvlink_crc_flit_errors", "replay": "nvlink_replay_errors", "recovery": "nvlink_recovery_errors"}
ALL_LINKS = 0xFFFFFFFF  # scopeId: the sum over the GPU's links


def _nvlink_count(nvml: ModuleType, values: Any) -> int:
    """The link count in a field-values answer; NOT_SUPPORTED for a GPU without NVLink."""
    if values[0].nvmlReturn != nvml.NVML_SUCCESS or field_number(nvml, values[0]) <= 0:
        raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
    return min(int(field_number(nvml, values[0])), int(nvml.NVML_NVLINK_MAX_LINKS))


def _nvlink_errors(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    """The error totals over all links, with the link count, in one field-values call: the
    *_TOTAL fields, else (Hopper) the data-link fields summed over all links. A GPU with no NVLink
    (count 0, or the count unsupported) gives no NVLink reading at all."""
    summed = [(getattr(nvml, name), ALL_LINKS) for name, _ in _NVLINK_LINK_FIELDS]
    values = nvml.nvmlDeviceGetFieldValues(handle, [nvml.NVML_FI_DEV_NVLINK_LINK_COUNT, *(getattr(nvml, name) for name, _ in _NVLINK_ERROR_FIELDS), *summed])
    _nvlink_count(nvml, values)
    totals = values[1 : 1 + len(_NVLINK_ERROR_FIELDS)]
    found = {_TOTAL_OF_TYPE[kind]: field_number(nvml, value) for (_, kind), value in zip(_NVLINK_LINK_FIELDS, values[1 + len(_NVLINK_ERROR_FIELDS) :]) if value.nvmlReturn == nvml.NVML_SUCCESS}
    found.update({key: field_number(nvml, value) for (_, key), value in zip(_NVLINK_ERROR_FIELDS, totals) if value.nvmlReturn == nvml.NVML_SUCCESS})
    return found


def _nvlink_link_errors(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    """Each active link's error counters, by type, in one field-values call (the link's state and
    its data-link error fields, scopeId = the link): (link, type, count) for the links whose state
    reads active. None answering: NOT_SUPPORTED, so the GPU is not asked again."""
    count = _nvlink_count(nvml, nvml.nvmlDeviceGetFieldValues(handle, [nvml.NVML_FI_DEV_NVLINK_LINK_COUNT]))
    asked = [nvml.NVML_FI_DEV_NVLINK_GET_STATE, *(getattr(nvml, name) for name, _ in _NVLINK_LINK_FIELDS)]
    values = nvml.nvmlDeviceGetFieldValues(handle, [(field_id, link) for link in range(count) for field_id in asked])
    found, answered = [], False
    for link in range(count):
        state, *errors = values[link * len(asked) : (link + 1) * len(asked)]
        read = [(link, kind, field_number(nvml, value)) for (_, kind), value in zip(_NVLINK_LINK_FIELDS, errors) if value.nvmlReturn == nvml.NVML_SUCCESS]
        answered = answered or bool(read)
        if state.nvmlReturn == nvml.NVML_SUCCESS and field_number(nvml, state) == 1:
            found.extend(read)  # a link down (or one whose state is unknown) has no error series
    if not answered:
        raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
    return {"nvlink_link_errors": tuple(found)}


def _nvlink_link_crc_data(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    """Each link's data-CRC error count (added to the per-link error readings), and their sum. No
    field answers it on Hopper (neither a total nor per link), so each link is asked with
    nvmlDeviceGetNvLinkErrorCounter, in order up to the first link the GPU does not have: one call a
    link (~0.8 ms on an H200) at the slow cadence. It is the NVLink counter that reads above 0 on
    healthy boards (1-172 a link on 4 x H200). A link that does not answer is left out; none
    answering: NOT_SUPPORTED, so the GPU is not asked again."""
    found: list[tuple[int, str, float]] = []
    for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
        try:
            found.append((link, "crc_data", float(nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, nvml.NVML_NVLINK_ERROR_DL_CRC_DATA))))
        except nvml.NVMLError as error:
            code = getattr(error, "value", None)
            if code not in unsupported_codes(nvml):
                raise
            if code == nvml.NVML_ERROR_INVALID_ARGUMENT or link == 0:
                break  # past the GPU's last link, or a GPU that does not count them
    if not found:
        raise nvml.NVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
    return {"nvlink_link_errors": tuple(found), "nvlink_crc_data_errors": sum(count for _, _, count in found)}


def _nvlink_states(nvml: ModuleType, handle: Any) -> dict[str, Any]:
    """Each link's state. A link that does not answer is left out; when none answers, the last
    error is raised, so a GPU whose links all refuse is not asked again."""
    count = _nvlink_count(nvml, nvml.nvmlDeviceGetFieldValues(handle, [nvml.NVML_FI_DEV_NVLINK_LINK_COUNT]))
    links, refused = [], None
    for link in range(count):
        try:
            links.append((link, bool(nvml.nvmlDeviceGetNvLinkState(handle, link))))
        except nvml.NVMLError as error:
            if getattr(error, "value", None) not in unsupported_codes(nvml):
                raise
            refused = error
    if not links and refused is not None:
        raise refused
    return {"nvlink_links_active": tuple(links)}


HEALTH_CALLS: tuple[HealthCall, ...] = (
    HealthCall("pstate", FAST, _pstate, "clocks"),
    HealthCall("encoder", FAST, _codec("nvmlDeviceGetEncoderUtilization", "encoder_utilization"), "video"),
    HealthCall("decoder", FAST, _codec("nvmlDeviceGetDecoderUtilization", "decoder_utilization"), "video"),
    HealthCall("fan", FAST, _fan, "fan"),
    HealthCall("pcie_replays", SLOW, _pcie_replays, "pcie"),
    HealthCall("pcie_link", SLOW, _pcie_link("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth", ""), "pcie"),
    HealthCall("pcie_link_max", ONCE, _pcie_link("nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth", "_max"), "pcie"),
    HealthCall("nvlink_errors", SLOW, _nvlink_errors, "nvlink"),
    HealthCall("nvlink_states", SLOW, _nvlink_states, "nvlink"),
    # Each link's counters only rise, and the totals are their sums: while no total moves and no link
    # changes state, no link's counter moved (the one call costs ~17 ms a GPU on an H200; the totals 1.7 ms).
    HealthCall("nvlink_link_errors", SLOW, _nvlink_link_errors, "nvlink",
               kept_while=("nvlink_crc_flit_errors", "nvlink_replay_errors", "nvlink_recovery_errors", "nvlink_links_active")),
    HealthCall("nvlink_link_crc_data", SLOW, _nvlink_link_crc_data, "nvlink", adds_to=("nvlink_link_errors",)),
    *(HealthCall(f"violation_{name}", SLOW, _violation(policy, name), "violations") for policy, name in (
        ("NVML_PERF_POLICY_POWER", "power"),
        ("NVML_PERF_POLICY_THERMAL", "thermal"),
        ("NVML_PERF_POLICY_SYNC_BOOST", "sync_boost"),
        ("NVML_PERF_POLICY_BOARD_LIMIT", "board_limit"),
        ("NVML_PERF_POLICY_LOW_UTILIZATION", "low_utilization"),
        ("NVML_PERF_POLICY_RELIABILITY", "reliability"),
    )),
    HealthCall("retired_single_bit", SLOW, _retired_pages("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", "single_bit"), "errors"),
    HealthCall("retired_double_bit", SLOW, _retired_pages("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", "double_bit"), "errors"),
    HealthCall("retired_pending", SLOW, _retired_pending, "errors"),
    *(HealthCall(f"threshold_{name}", ONCE, _threshold(threshold, name), "thermal") for threshold, name in (
        ("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", "slowdown"),
        ("NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", "shutdown"),
        ("NVML_TEMPERATURE_THRESHOLD_GPU_MAX", "gpu_max"),
        ("NVML_TEMPERATURE_THRESHOLD_MEM_MAX", "memory_max"),
    )),
)


def unsupported_codes(nvml: ModuleType) -> tuple[int, ...]:
    """Errors that mean: this GPU (or this link, policy or limit of it) does not have the reading."""
    return (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND, nvml.NVML_ERROR_INVALID_ARGUMENT, nvml.NVML_ERROR_NO_PERMISSION)


def gone_codes(nvml: ModuleType) -> tuple[int, ...]:
    """Errors that mean the GPU or the driver is gone: the GPU is reported down."""
    return (nvml.NVML_ERROR_GPU_IS_LOST, nvml.NVML_ERROR_DRIVER_NOT_LOADED, nvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, nvml.NVML_ERROR_UNINITIALIZED)


@dataclass
class HealthReader:
    """One GPU's health readings: what it does not support, and the last slow readings."""

    index: int
    log_once: Callable[..., None]
    calls: tuple[HealthCall, ...] = HEALTH_CALLS
    unsupported: set[str] = field(default_factory=set)
    slow: dict[str, Any] = field(default_factory=dict)
    slow_time: float | None = None
    once: dict[str, dict[str, Any]] = field(default_factory=dict)  # the ONCE calls' answers, by call key
    kept: dict[str, dict[str, Any]] = field(default_factory=dict)  # the last answer of each call with kept_while, by call key
    kept_inputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # ... and the kept_while readings it was made beside

    def read(self, nvml: ModuleType, handle: Any, now: float, slow_interval: float, disabled: frozenset[str] = frozenset(), phase: float = 0.0) -> Health:
        """The fast readings now, the slow ones when due and the ONCE ones kept, leaving out the
        ``disabled`` collectors'. A ONCE call that has not answered yet is tried at each slow round.
        The first slow round is made at once; the next comes ``phase`` of an interval early, so the
        node's GPUs make their rounds on different polls."""
        slow_due = self.slow_time is None or now - self.slow_time >= slow_interval
        values: dict[str, Any] = {}
        if slow_due:
            self.slow_time = now - (phase * slow_interval if self.slow_time is None else 0.0)
            self.slow = self._read(nvml, handle, SLOW, disabled)
            for call in self._due(ONCE, disabled):
                if call.key not in self.once and (answer := self._call(nvml, handle, call)) is not None:
                    self.once[call.key] = answer
        for call in self._due(ONCE, disabled):
            values.update(self.once.get(call.key, {}))
        values.update(self.slow)
        values.update(self._read(nvml, handle, FAST, disabled))
        return Health(**values) if values else NO_HEALTH

    def _due(self, cadence: str, disabled: frozenset[str]) -> list[HealthCall]:
        return [call for call in self.calls if call.cadence == cadence and call.key not in self.unsupported and call.collector not in disabled]

    def _read(self, nvml: ModuleType, handle: Any, cadence: str, disabled: frozenset[str]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for call in self._due(cadence, disabled):
            if call.key in self.kept and all(key in values and values[key] == self.kept_inputs[call.key].get(key) for key in call.kept_while):
                values.update(self.kept[call.key])
                continue
            answer = self._call(nvml, handle, call)
            if answer is not None and call.kept_while:
                self.kept[call.key], self.kept_inputs[call.key] = answer, {key: values.get(key) for key in call.kept_while}
            for key in call.adds_to:
                if answer is not None and key in answer:
                    answer = {**answer, key: (*values.get(key, ()), *answer[key])}
            values.update(answer or {})
        return values

    def _call(self, nvml: ModuleType, handle: Any, call: HealthCall) -> dict[str, Any] | None:
        """One call's readings; None where it failed (absent this round) or is not supported."""
        try:
            return call.read(nvml, handle)
        except nvml.NVMLError as error:
            code = getattr(error, "value", None)
            if code in gone_codes(nvml):
                raise
            if code in unsupported_codes(nvml):
                self.unsupported.add(call.key)
                logging.getLogger(__name__).debug("GPU %d: %s is not available (%s); not asked again", self.index, call.key, error, extra=gpu_fields(self.index))
            else:
                self.log_once(f"health-{self.index}-{call.key}-{code}", logging.WARNING, "GPU %d: reading %s failed (%s); it is absent until it answers", self.index, call.key, error, extra=gpu_fields(self.index))
            return None


def field_number(nvml: ModuleType, field_value: Any) -> float:
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
