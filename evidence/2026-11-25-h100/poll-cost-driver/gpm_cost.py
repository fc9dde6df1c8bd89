"""nvmlGpmMetricsGet's CPU per call on a fresh sample pair (the daemon's pattern), by metric set."""

import statistics
import time

import pynvml
from probe import load

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
IDS = {
    n: getattr(pynvml, "NVML_GPM_METRIC_" + n)
    for n in [
        "SM_UTIL",
        "SM_OCCUPANCY",
        "GRAPHICS_UTIL",
        "ANY_TENSOR_UTIL",
        "HMMA_TENSOR_UTIL",
        "IMMA_TENSOR_UTIL",
        "DFMA_TENSOR_UTIL",
        "DRAM_BW_UTIL",
        "FP64_UTIL",
        "FP32_UTIL",
        "FP16_UTIL",
        "INTEGER_UTIL",
        "PCIE_TX_PER_SEC",
        "PCIE_RX_PER_SEC",
        "NVLINK_TOTAL_TX_PER_SEC",
        "NVLINK_TOTAL_RX_PER_SEC",
    ]
}
pair = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
pynvml.nvmlGpmSampleGet(h, pair[0])


def run(names, reps=8):
    req = pynvml.c_nvmlGpmMetricsGet_t()
    req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    req.numMetrics = len(names)
    for i, n in enumerate(names):
        req.metrics[i].metricId = IDS[n]
    first, again = [], []
    for _ in range(reps):
        time.sleep(0.15)
        pynvml.nvmlGpmSampleGet(h, pair[1])
        req.sample1, req.sample2 = pair[0], pair[1]
        t = time.thread_time_ns()
        pynvml.nvmlGpmMetricsGet(req)
        first.append((time.thread_time_ns() - t) / 1e3)
        t = time.thread_time_ns()
        pynvml.nvmlGpmMetricsGet(req)
        again.append((time.thread_time_ns() - t) / 1e3)
        pair.reverse()
    vals = [
        round(req.metrics[i].value, 2) if req.metrics[i].nvmlReturn == 0 else f"rc{req.metrics[i].nvmlReturn}"
        for i in range(len(names))
    ]
    label = names[0] if len(names) == 1 else f"{len(names)} metrics ({names[0]}..{names[-1]})"
    print(
        f"{label:45s} fresh pair {statistics.median(first):8.1f} us   same pair again {statistics.median(again):8.1f} us   {vals if len(vals) <= 2 else ''}",
        flush=True,
    )


job = load("steady")
time.sleep(4)
for n in IDS:
    run([n])
allm = list(IDS)
run(allm)
run([n for n in allm if "NVLINK" not in n])
run([n for n in allm if "NVLINK" not in n and "PCIE" not in n])
run([n for n in allm if "PCIE" not in n])
job.kill()
job.wait()
