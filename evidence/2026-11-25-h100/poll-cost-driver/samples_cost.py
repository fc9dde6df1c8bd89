"""Does nvmlDeviceGetSamples cost depend on the buffer we pass, the sampling type, or load?"""

import ctypes
import statistics
import time

import pynvml
from probe import load

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetSamples")


def raw(count, last, kind=pynvml.NVML_GPU_UTILIZATION_SAMPLES):
    vt = pynvml._nvmlValueType_t()
    n = ctypes.c_uint(count)
    buf = (pynvml.c_nvmlSample_t * max(count, 1))()
    t = time.thread_time_ns()
    w = time.perf_counter_ns()
    ret = fn(h, kind, ctypes.c_ulonglong(last), ctypes.byref(vt), ctypes.byref(n), buf if count else None)
    return (
        (time.thread_time_ns() - t) / 1e3,
        (time.perf_counter_ns() - w) / 1e3,
        ret,
        n.value,
        [buf[i].timeStamp for i in range(min(n.value, count))],
    )


def bench(label, f, reps=30):
    cpu, wall = [], []
    for _ in range(reps):
        c, w, *rest = f()
        cpu.append(c)
        wall.append(w)
        time.sleep(0.05)
    print(f"{label:60s} cpu {statistics.median(cpu):8.1f} us  wall {statistics.median(wall):8.1f} us  last {rest[:2]}")


for phase in ("idle", "steady load"):
    job = None
    if phase != "idle":
        job = load("steady")
        time.sleep(5)
    print(f"### {phase}")

    def now_us():
        return int(time.time() * 1e6)

    bench("count query (NULL buffer)", lambda: raw(0, 0))
    for count in (1, 2, 8, 72, 100):
        bench(f"fill, buffer {count}, lastSeen 0", lambda count=count: raw(count, 0))
    bench("fill, buffer 8, lastSeen now-1s", lambda: raw(8, now_us() - 1_000_000))
    bench("fill, buffer 72, lastSeen now-1s", lambda: raw(72, now_us() - 1_000_000))
    for kind in ("NVML_MEMORY_UTILIZATION_SAMPLES", "NVML_TOTAL_POWER_SAMPLES", "NVML_PROCESSOR_CLK_SAMPLES"):
        bench(f"fill, buffer 72, {kind}", lambda kind=kind: raw(72, 0, getattr(pynvml, kind)))
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()

    def gpm(s1=s1):
        t = time.thread_time_ns()
        w = time.perf_counter_ns()
        pynvml.nvmlGpmSampleGet(h, s1)
        return (time.thread_time_ns() - t) / 1e3, (time.perf_counter_ns() - w) / 1e3, 0

    bench("nvmlGpmSampleGet", gpm)
    pynvml.nvmlGpmSampleGet(h, s2)
    time.sleep(0.2)
    pynvml.nvmlGpmSampleGet(h, s1)
    req = pynvml.c_nvmlGpmMetricsGet_t()
    req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    req.numMetrics = 1
    req.sample1, req.sample2 = s2, s1
    req.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL

    def metrics(req=req):
        t = time.thread_time_ns()
        w = time.perf_counter_ns()
        pynvml.nvmlGpmMetricsGet(req)
        return (time.thread_time_ns() - t) / 1e3, (time.perf_counter_ns() - w) / 1e3, req.metrics[0].value

    bench("nvmlGpmMetricsGet (SM_UTIL only)", metrics)
    for call, args in (
        ("nvmlDeviceGetTotalEnergyConsumption", ()),
        ("nvmlDeviceGetViolationStatus", (pynvml.NVML_PERF_POLICY_POWER,)),
        ("nvmlDeviceGetUtilizationRates", ()),
        ("nvmlDeviceGetComputeRunningProcesses", ()),
    ):
        f = getattr(pynvml, call)

        def one(f=f, args=args):
            t = time.thread_time_ns()
            w = time.perf_counter_ns()
            f(h, *args)
            return (time.thread_time_ns() - t) / 1e3, (time.perf_counter_ns() - w) / 1e3, 0

        bench(call, one)
    if job:
        job.kill()
        job.wait()
