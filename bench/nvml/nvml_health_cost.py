#!/usr/bin/env python3
"""What each NVML health reading answers on this machine and what one call costs: per GPU, every
call behind gpueff/backends/nvml/health.py (supported or its NVML error, the value, the median
and p90 cost of --repeat calls), a few alternatives (the same counters through one
nvmlDeviceGetFieldValues call), and the Health the NVML backend builds from them. The cadences in
nvml/health.py HEALTH_CALLS and the figures in docs/health.md come from this script's output.

With --load-seconds N a PyTorch matrix-product loop runs on GPU 0 for N seconds while the backend
polls once a second, so the P-state and the violation counters are seen moving.

Run: python bench/nvml/nvml_health_cost.py [--repeat 200] [--load-seconds 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pynvml  # noqa: E402

from gpueff.backends.nvml.backend import NvmlBackend  # noqa: E402
from gpueff.backends.nvml.health import HEALTH_CALLS  # noqa: E402


def timed(call: Callable[[], Any], repeat: int) -> dict[str, Any]:
    """The call's answer (or its NVML error) and its cost in microseconds."""
    try:
        value = call()
    except pynvml.NVMLError as error:
        return {"supported": False, "error": str(error)}
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        try:
            call()
        except pynvml.NVMLError:
            pass
        times.append(time.perf_counter() - started)
    times.sort()
    return {"supported": True, "value": value, "median_us": round(statistics.median(times) * 1e6, 1), "p90_us": round(times[int(len(times) * 0.9)] * 1e6, 1)}


class Bound(NamedTuple):
    read: Callable[[Any, Any], Any]
    handle: Any


def bind(call: Callable[[Any], Any], argument: Any) -> Callable[[], Any]:
    return lambda: call(argument)


def raw_calls(handle: Any) -> dict[str, Callable[[], Any]]:
    """The single NVML calls the health readings make, and the field-value alternatives."""
    nvml = pynvml
    calls: dict[str, Callable[[], Any]] = {
        "PcieReplayCounter": lambda: nvml.nvmlDeviceGetPcieReplayCounter(handle),
        "CurrPcieLinkGeneration": lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle),
        "MaxPcieLinkGeneration": lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle),
        "GpuMaxPcieLinkGeneration": lambda: nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle),
        "CurrPcieLinkWidth": lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle),
        "MaxPcieLinkWidth": lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle),
        "NvLinkState(0)": lambda: nvml.nvmlDeviceGetNvLinkState(handle, 0),
        "NvLinkErrorCounter(0, CRC_FLIT)": lambda: nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 0, nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT),
        "PerformanceState": lambda: nvml.nvmlDeviceGetPerformanceState(handle),
        "EncoderUtilization": lambda: nvml.nvmlDeviceGetEncoderUtilization(handle),
        "DecoderUtilization": lambda: nvml.nvmlDeviceGetDecoderUtilization(handle),
        "FanSpeed": lambda: nvml.nvmlDeviceGetFanSpeed(handle),
        "NumFans": lambda: nvml.nvmlDeviceGetNumFans(handle),
        "EnforcedPowerLimit": lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle),
        "PowerManagementLimit": lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle),
        "RetiredPages(SBE)": lambda: nvml.nvmlDeviceGetRetiredPages(handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        "RetiredPages(DBE)": lambda: nvml.nvmlDeviceGetRetiredPages(handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
        "RetiredPagesPendingStatus": lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle),
        "RemappedRows": lambda: nvml.nvmlDeviceGetRemappedRows(handle),
        "TotalEnergyConsumption": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),
    }
    for policy in ("POWER", "THERMAL", "SYNC_BOOST", "BOARD_LIMIT", "LOW_UTILIZATION", "RELIABILITY"):
        calls[f"ViolationStatus({policy})"] = bind(lambda p: nvml.nvmlDeviceGetViolationStatus(handle, getattr(nvml, f"NVML_PERF_POLICY_{p}")).violationTime, policy)
    for threshold in ("SLOWDOWN", "SHUTDOWN", "GPU_MAX", "MEM_MAX"):
        calls[f"TemperatureThreshold({threshold})"] = bind(lambda t: nvml.nvmlDeviceGetTemperatureThreshold(handle, getattr(nvml, f"NVML_TEMPERATURE_THRESHOLD_{t}")), threshold)
    fields = {
        "LINK_COUNT": nvml.NVML_FI_DEV_NVLINK_LINK_COUNT,
        "CRC_FLIT_TOTAL": nvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        "CRC_DATA_TOTAL": nvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
        "REPLAY_TOTAL": nvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
        "RECOVERY_TOTAL": nvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
        "PCIE_REPLAY": nvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
        "PERF_POLICY_POWER": nvml.NVML_FI_DEV_PERF_POLICY_POWER,
        "PERF_POLICY_THERMAL": nvml.NVML_FI_DEV_PERF_POLICY_THERMAL,
        "MEMORY_TEMP": nvml.NVML_FI_DEV_MEMORY_TEMP,
    }

    def field_values(ids: list[int]) -> list[tuple[int, Any]]:
        return [(value.nvmlReturn, value.value.ullVal if value.nvmlReturn == 0 else None) for value in nvml.nvmlDeviceGetFieldValues(handle, ids)]

    for name, field_id in fields.items():
        calls[f"FieldValues([{name}])"] = bind(lambda f: field_values([f]), field_id)
    calls["FieldValues(nvlink: count + 4 totals)"] = lambda: field_values(list(fields.values())[:5])
    calls[f"FieldValues(all {len(fields)})"] = lambda: field_values(list(fields.values()))
    return calls


LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""


def health_rows(backend: NvmlBackend) -> list[dict[str, Any]]:
    return [{"gpu": s.device.index, "up": s.up, "power_limit_watts": s.device.power_limit_watts, **{k: jsonable(v) for k, v in s.health.readings().items()}} for s in backend.collect()]


def jsonable(value: Any) -> Any:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return repr(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--load-seconds", type=float, default=0.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pynvml.nvmlInit()
    report: dict[str, Any] = {"driver": pynvml.nvmlSystemGetDriverVersion(), "python": sys.version.split()[0], "nvidia_ml_py": metadata.version("nvidia-ml-py"), "gpus": []}
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        gpu: dict[str, Any] = {"index": index, "name": pynvml.nvmlDeviceGetName(handle), "raw": {}, "readers": {}}
        for name, call in raw_calls(handle).items():
            result = timed(call, args.repeat)
            result["value"] = jsonable(result.get("value"))
            gpu["raw"][name] = result
        for health_call in HEALTH_CALLS:
            result = timed(bind(lambda c: c.read(pynvml, c.handle), Bound(health_call.read, handle)), max(10, args.repeat // 10))
            result["value"] = jsonable(result.get("value"))
            gpu["readers"][f"{health_call.key} ({health_call.cadence})"] = result
        report["gpus"].append(gpu)
    pynvml.nvmlShutdown()
    backend = NvmlBackend(slow_interval=10.0)
    backend.start()
    try:
        polls = []
        for _ in range(3):
            started = time.perf_counter()
            backend.collect()
            polls.append(round((time.perf_counter() - started) * 1e3, 2))
            time.sleep(0.2)
        report["backend"] = {"collect_ms": polls, "health": health_rows(backend)}
        if args.load_seconds > 0:
            backend.slow_interval = 1.0
            load = subprocess.Popen([sys.executable, "-c", LOAD, str(args.load_seconds)])
            report["under_load"] = []
            while load.poll() is None:
                time.sleep(1.0)
                report["under_load"].append(health_rows(backend))
            report["after_load"] = health_rows(backend)
    finally:
        backend.close()
    for gpu in report["gpus"]:
        print(f"\n## GPU {gpu['index']}: {gpu['name']} (driver {report['driver']}, Python {report['python']}, nvidia-ml-py {report['nvidia_ml_py']})")
        print("| call | answer | value | median us | p90 us |\n| --- | --- | --- | ---: | ---: |")
        for section in ("raw", "readers"):
            for name, result in gpu[section].items():
                answer = "ok" if result["supported"] else result["error"]
                print(f"| {name} | {answer} | {str(result.get('value'))[:60]} | {result.get('median_us', '')} | {result.get('p90_us', '')} |")
    for key in ("backend", "under_load", "after_load"):
        if key in report:
            print(f"\n{key}:", json.dumps(report[key]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
