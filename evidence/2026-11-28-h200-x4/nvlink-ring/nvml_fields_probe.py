#!/usr/bin/env python3
"""Which NVML field values give per-link NVLink error counters on this driver, and at what cost
(run once on 4 x H200 before the per-link reading was written; output: nvml_fields_probe.txt).

Per GPU: nvmlDeviceGetNvLinkErrorCounter for every link and counter (the reference, timed), the
per-link state calls, the per-link-numbered fields (_L0.._L11) and *_TOTAL fields in one call, the
fields that may take a link as scopeId (161-166, 146, 148) for every link, an out-of-range link
(40) and all links (0xFFFFFFFF), then two candidate single calls timed five times each.

Run: python3 nvml_fields_probe.py
"""
import json
import subprocess
import time

import pynvml as n

n.nvmlInit()
out = {"driver": n.nvmlSystemGetDriverVersion(), "nvml": n.nvmlSystemGetNVMLVersion()}
UMAX = 0xFFFFFFFF
FIXED = {  # type -> field ids of links 0..11 (the _L0.._L11 names)
    "crc_flit": list(range(32, 38)) + list(range(96, 102)),
    "crc_data": list(range(39, 45)) + list(range(102, 108)),
    "replay": list(range(46, 52)) + list(range(108, 114)),
    "recovery": list(range(53, 59)) + list(range(114, 120)),
}
TOTALS = {"crc_flit": 38, "crc_data": 45, "replay": 52, "recovery": 59}
SCOPED = {"dl_replay": 161, "dl_recovery": 162, "dl_crc": 163, "speed": 164, "state": 165, "version": 166, "remote_id": 146, "ecc_data": 148}
COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3, "ecc_data": 4}


def dump(values, ids):
    """[field (or [field, scope]), nvmlReturn, valueType, value, latencyUsec] per entry."""
    return [[i if isinstance(i, int) else list(i), v.nvmlReturn, v.valueType,
             (v.value.ullVal if v.valueType in (3, 2) else v.value.uiVal if v.valueType == 1 else v.value.dVal if v.valueType == 0 else v.value.sllVal) if v.nvmlReturn == 0 else None,
             v.latencyUsec] for i, v in zip(ids, values)]


for gpu in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(gpu)
    g = {}
    count = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_NVLINK_LINK_COUNT])[0].value.uiVal
    g["link_count"] = count
    t = time.perf_counter()
    ref = {}
    for link in range(count):
        for name, c in COUNTERS.items():
            try:
                ref[f"{link}/{name}"] = n.nvmlDeviceGetNvLinkErrorCounter(h, link, c)
            except n.NVMLError as e:
                ref[f"{link}/{name}"] = f"err {e.value}"
    g["ref_calls_ms"] = round((time.perf_counter() - t) * 1000, 2)
    g["ref"] = ref
    t = time.perf_counter()
    states = [n.nvmlDeviceGetNvLinkState(h, link) for link in range(count)]
    g["state_calls_ms"] = round((time.perf_counter() - t) * 1000, 2)
    g["states"] = states
    ids = [f for each in FIXED.values() for f in each] + list(TOTALS.values())
    t = time.perf_counter()
    v = n.nvmlDeviceGetFieldValues(h, ids)
    g["fixed_ms"] = round((time.perf_counter() - t) * 1000, 2)
    g["fixed"] = dump(v, ids)
    ids = [(f, link) for f in SCOPED.values() for link in range(count)] + [(f, 40) for f in SCOPED.values()] + [(f, UMAX) for f in SCOPED.values()]
    t = time.perf_counter()
    v = n.nvmlDeviceGetFieldValues(h, ids)
    g["scoped_ms"] = round((time.perf_counter() - t) * 1000, 2)
    g["scoped"] = dump(v, ids)
    ids = [(f, link) for f in (32, 39, 46, 53, 38, 45, 52, 59) for link in (0, 5, 12, 17)]
    g["fixed_with_scope"] = dump(n.nvmlDeviceGetFieldValues(h, ids), ids)
    for name, ids in (("one_call_scoped_ms", [(f, link) for link in range(count) for f in (161, 162, 163, 165)]),
                      ("one_call_fixed_ms", [f for each in FIXED.values() for f in each] + [(165, link) for link in range(count)])):
        walls = []
        for _ in range(5):
            t = time.perf_counter()
            n.nvmlDeviceGetFieldValues(h, ids)
            walls.append(round((time.perf_counter() - t) * 1000, 3))
        g[name] = walls
    out[f"gpu{gpu}"] = g
print(json.dumps(out))
for args in (["nvlink", "-e", "-i", "0"], ["nvlink", "-s", "-i", "0"]):
    print(subprocess.run(["nvidia-smi", *args], capture_output=True, text=True).stdout[:3000])
