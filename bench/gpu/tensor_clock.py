"""What a busy tensor cycle does, and at which SM clock it runs, on a live GPU (issue 43).

    python3 bench/gpu/tensor_clock.py --output FILE
    python3 bench/gpu/tensor_clock.py --ncu bf16|tf32       (a few GEMMs for Nsight Compute to profile)
    python3 bench/gpu/tensor_clock.py --ncu-metrics LIST     (the metrics of ours that LIST, ncu --query-metrics, has)

On GPU 0, in one process, phase after phase (idle, a bf16 8192^3 GEMM loop with and without the
probe below, a short burst after idle, timm's ViT-B/16 bf16 training step, a TF32 GEMM loop):
- the job's own count: FLOP per batch, timed on the host between synchronised batches;
- NVML every 100 ms: the SM clock (what every busy-FLOP/s figure is scaled by), power, clock-event reasons;
- GPM over 1 s windows: SM_UTIL, ANY_TENSOR_UTIL, HMMA_TENSOR_UTIL, and in a request of their own
  the cumulative counters the newer drivers give (NVML_GPM_METRIC_SM_CYCLES_ELAPSED = 248 ...
  FP16_CYCLES_ACTIVE = 260: DCGM 4.6's fields 1084-1096), with each metric's own return code;
- a clock probe (CuPy, one thread on a non-blocking stream): the SM's cycle counter (clock64)
  against the GPU's nanosecond timer (%globaltimer) every 50 ms: the clock the SMs really ran at.
The output holds every reading; the summary printed at the end gives, per phase, the FLOP done per
busy HMMA cycle per SM under each clock (the data sheet's rate is 4096 on Hopper).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

N = 8192
SM_RATE = 4096  # Hopper's dense BF16 FLOP per clock per SM (H100 whitepaper)
PERCENT_METRICS = {1: "GRAPHICS_UTIL", 2: "SM_UTIL", 5: "ANY_TENSOR_UTIL", 7: "HMMA_TENSOR_UTIL", 10: "DRAM_BW_UTIL"}
CYCLE_METRICS = {248: "SM_CYCLES_ELAPSED", 249: "SM_CYCLES_ACTIVE", 250: "MMA_CYCLES_ACTIVE", 251: "DMMA_CYCLES_ACTIVE", 252: "HMMA_CYCLES_ACTIVE",
                 253: "IMMA_CYCLES_ACTIVE", 254: "DFMA_CYCLES_ACTIVE", 255: "PCIE_TX", 256: "PCIE_RX", 257: "INTEGER_CYCLES_ACTIVE",
                 258: "FP64_CYCLES_ACTIVE", 259: "FP32_CYCLES_ACTIVE", 260: "FP16_CYCLES_ACTIVE"}
PROBE = r"""
extern "C" __global__ void clock_probe(unsigned long long* out, int intervals, unsigned long long interval_ns) {
    for (int i = 0; i < intervals; ++i) {
        unsigned long long t0, t1, c0, c1;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        c0 = clock64();
        do {
            __nanosleep(20000);
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
        } while (t1 - t0 < interval_ns);
        c1 = clock64();
        out[3 * i] = t0;
        out[3 * i + 1] = t1 - t0;
        out[3 * i + 2] = c1 - c0;
    }
}
"""


class Gpm:
    """GPM samples of GPU 0 and the metrics between two of them, each with its own return code."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle

    def sample(self) -> Any:
        buffer = self.nvml.nvmlGpmSampleAlloc()
        self.nvml.nvmlGpmSampleGet(self.handle, buffer)
        return buffer

    def metrics(self, first: Any, second: Any, ids: list[int]) -> dict[str, Any]:
        nvml = self.nvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(ids)
        request.sample1, request.sample2 = first, second
        for slot, metric in enumerate(ids):
            request.metrics[slot].metricId = metric
        try:
            nvml.nvmlGpmMetricsGet(request)
        except nvml.NVMLError as error:
            return {"call_error": str(error)}
        return {str(metric): [int(request.metrics[slot].nvmlReturn), float(request.metrics[slot].value)] for slot, metric in enumerate(ids)}

    def free(self, buffer: Any) -> None:
        self.nvml.nvmlGpmSampleFree(buffer)


class Sampler(threading.Thread):
    """NVML's clock, power and clock-event reasons every 100 ms; GPM windows of 1 s."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        super().__init__(daemon=True)
        self.nvml, self.handle, self.gpm = nvml, handle, Gpm(nvml, handle)
        self.instants: list[list[float]] = []
        self.windows: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        previous, previous_time = self.gpm.sample(), time.perf_counter()
        next_window = previous_time + 1.0
        while not self.stop.wait(0.1):
            try:
                previous, previous_time, next_window = self.tick(previous, previous_time, next_window)
            except Exception as error:  # evidence only: keep sampling, say what failed
                self.errors.append(repr(error))
        self.gpm.free(previous)

    def tick(self, previous: Any, previous_time: float, next_window: float) -> tuple[Any, float, float]:
        """One 100 ms reading, and where a second has passed the GPM window that ends now."""
        nvml, now = self.nvml, time.perf_counter()
        try:
            reasons = nvml.nvmlDeviceGetCurrentClocksEventReasons(self.handle)
        except (nvml.NVMLError, AttributeError):
            reasons = -1
        self.instants.append([now, nvml.nvmlDeviceGetClockInfo(self.handle, nvml.NVML_CLOCK_SM), nvml.nvmlDeviceGetPowerUsage(self.handle), reasons])
        if now < next_window:
            return previous, previous_time, next_window
        current, current_time = self.gpm.sample(), time.perf_counter()
        self.windows.append({"t0": previous_time, "t1": current_time,
                             "percent": self.gpm.metrics(previous, current, list(PERCENT_METRICS)),
                             "cycles": self.gpm.metrics(previous, current, list(CYCLE_METRICS))})
        self.gpm.free(previous)
        return current, current_time, current_time + 1.0


def counter_semantics(gpm: Gpm) -> dict[str, Any]:
    """Whether a cumulative GPM metric between two samples is their difference or the second's count:
    three samples 1 s apart, read pairwise; and whether a request mixing them with SM_UTIL still answers."""
    samples, times = [], []
    for _ in range(3):
        samples.append(gpm.sample())
        times.append(time.perf_counter())
        time.sleep(1.0)
    ids = [248, 249, 252]
    result = {"times": times,
              "01": gpm.metrics(samples[0], samples[1], ids), "12": gpm.metrics(samples[1], samples[2], ids), "02": gpm.metrics(samples[0], samples[2], ids),
              "mixed_request": gpm.metrics(samples[1], samples[2], [2, 7, 248, 252])}
    for buffer in samples:
        gpm.free(buffer)
    return result


def probe_start(cupy: Any, seconds: float) -> tuple[Any, Any, float, Any]:
    module = cupy.RawModule(code=PROBE)
    kernel = module.get_function("clock_probe")
    intervals = int(seconds / 0.05)
    out = cupy.zeros(3 * intervals, dtype=cupy.uint64)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        kernel((1,), (1,), (out, cupy.int32(intervals), cupy.uint64(50_000_000)))
    return out, stream, time.perf_counter(), module


def probe_read(started: tuple[Any, Any, float, Any]) -> dict[str, Any]:
    out, stream, launched, _ = started
    stream.synchronize()
    values = out.get().reshape(-1, 3).tolist()
    return {"launched_perf_counter": launched, "intervals": values}  # [globaltimer start ns, ns, cycles]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path)
    parser.add_argument("--ncu", choices=("bf16", "tf32"))
    parser.add_argument("--ncu-metrics", type=Path)
    parser.add_argument("--phase-seconds", type=float, default=10.0)
    args = parser.parse_args()
    if args.ncu_metrics:
        print(ncu_metrics(args.ncu_metrics.read_text()))
        return 0
    import torch

    if args.ncu:
        dtype = torch.bfloat16 if args.ncu == "bf16" else torch.float32
        torch.backends.cuda.matmul.allow_tf32 = True
        a, b = torch.randn(N, N, device="cuda", dtype=dtype), torch.randn(N, N, device="cuda", dtype=dtype)
        for _ in range(40):
            a @ b
        torch.cuda.synchronize()
        return 0
    import cupy
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    result: dict[str, Any] = {"gpu": pynvml.nvmlDeviceGetName(handle), "driver": pynvml.nvmlSystemGetDriverVersion(), "torch": torch.__version__, "cupy": cupy.__version__}
    result["semantics_idle"] = counter_semantics(Gpm(pynvml, handle))
    sampler = Sampler(pynvml, handle)
    sampler.start()
    phases: dict[str, Any] = {}
    seconds = args.phase_seconds
    a, b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16), torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    flop = 2.0 * N**3

    def gemm_loop(name: str, duration: float, x: Any, y: Any, batch: int = 10) -> None:
        stream = torch.cuda.current_stream()
        started = time.perf_counter()
        batches = []
        while time.perf_counter() - started < duration:
            begin = time.perf_counter()
            for _ in range(batch):
                x @ y
            stream.synchronize()  # this stream only: the probe's stream runs on
            batches.append([begin, time.perf_counter(), batch * flop])
        phases[name] = {"start": started, "end": time.perf_counter(), "batches": batches}

    def idle(name: str, duration: float) -> None:
        started = time.perf_counter()
        time.sleep(duration)
        phases[name] = {"start": started, "end": time.perf_counter(), "batches": []}

    for _ in range(30):
        a @ b
    torch.cuda.synchronize()
    idle("warm_idle", 3.0)
    probe = probe_start(cupy, 2.5 + seconds + 1.0)
    idle("idle_probe", 2.0)
    gemm_loop("gemm_bf16_probe", seconds, a, b)
    result["probe_gemm"] = probe_read(probe)
    gemm_loop("gemm_bf16", seconds, a, b)
    idle("cool", 3.0)
    probe = probe_start(cupy, 1.5)
    gemm_loop("burst_bf16", 0.05, a, b, batch=20)
    result["probe_burst"] = probe_read(probe)
    try:
        vit(torch, cupy, phases, seconds, result)
    except Exception as error:  # evidence only: never stop the run for it
        result["vit_error"] = repr(error)
    torch.backends.cuda.matmul.allow_tf32 = True
    c, d = a.float(), b.float()
    gemm_loop("gemm_tf32", seconds / 2, c, d, batch=5)
    sampler.stop.set()
    sampler.join()
    result.update(phases=phases, instants=sampler.instants, windows=sampler.windows, sampler_errors=sampler.errors[:20])
    result["semantics_after"] = counter_semantics(Gpm(pynvml, handle))
    args.output.write_text(json.dumps(result))
    try:
        print(summary(result))
    except Exception as error:  # the readings are written: the summary can be made again from them
        print(f"no summary: {error!r}")
    return 0


def vit(torch: Any, cupy: Any, phases: dict[str, Any], seconds: float, result: dict[str, Any]) -> None:
    import timm
    from torch.utils.flop_counter import FlopCounterMode

    model = timm.create_model("vit_base_patch16_224", pretrained=False).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    images, labels = torch.randn(128, 3, 224, 224, device="cuda"), torch.randint(0, 1000, (128,), device="cuda")

    def train_step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(5):
        train_step()
    counter = FlopCounterMode(display=False)
    with counter:
        train_step()
    step_flop = float(counter.get_total_flops())
    stream = torch.cuda.current_stream()
    stream.synchronize()
    probe = probe_start(cupy, seconds + 0.5)
    started = time.perf_counter()
    batches = []
    while time.perf_counter() - started < seconds:
        begin = time.perf_counter()
        for _ in range(2):
            train_step()
        stream.synchronize()
        batches.append([begin, time.perf_counter(), 2 * step_flop])
    phases["vit_b16_bf16_probe"] = {"start": started, "end": time.perf_counter(), "batches": batches, "step_flop": step_flop}
    result["probe_vit"] = probe_read(probe)


def probe_clock(probe: dict[str, Any], start: float, end: float) -> float | None:
    """The probe's mean SM clock (MHz) over its intervals inside [start, end] (host perf_counter):
    interval i starts about launch + 0.05 i, the kernel's first interval at its launch."""
    intervals = probe["intervals"]
    if not intervals or not intervals[0][0]:
        return None
    first = intervals[0][0]
    inside = [(ns, cycles) for t0, ns, cycles in intervals if ns and start <= probe["launched_perf_counter"] + (t0 - first) / 1e9 and probe["launched_perf_counter"] + (t0 + ns - first) / 1e9 <= end]
    total_ns = sum(ns for ns, _ in inside)
    return sum(cycles for _, cycles in inside) / total_ns * 1e3 if total_ns else None


def summary(result: dict[str, Any]) -> str:
    """Per phase: the job's rate, the clocks, HMMA activity and the FLOP per busy HMMA cycle per SM under each clock."""
    lines = []
    probes = {"gemm_bf16_probe": "probe_gemm", "idle_probe": "probe_gemm", "burst_bf16": "probe_burst", "vit_b16_bf16_probe": "probe_vit"}
    for name, phase in result["phases"].items():
        start, end, batches = phase["start"], phase["end"], phase["batches"]
        work = sum(each[2] for each in batches)
        short = end - start < 1.0
        windows = [each for each in result["windows"] if (each["t0"] <= start and end <= each["t1"]) if short] or [
            each for each in result["windows"] if start <= each["t0"] and each["t1"] <= end]
        span = sum(each["t1"] - each["t0"] for each in windows)
        elapsed = (batches[-1][1] - batches[0][0]) if batches else end - start
        rate = work / elapsed if elapsed > 0 else 0.0
        done = work if short else rate * span  # the FLOP done inside the windows
        clocks = [each[1] for each in result["instants"] if start <= each[0] <= end]
        ok = [each for each in windows if each["percent"].get("7", [1])[0] == 0]
        hmma_seconds = sum(each["percent"]["7"][1] / 100 * (each["t1"] - each["t0"]) for each in ok)
        line: dict[str, Any] = {"phase": name, "tflops": round(rate / 1e12, 1), "nvml_clock_mhz": round(sum(clocks) / len(clocks)) if clocks else None,
                                "windows": len(windows), "hmma": round(hmma_seconds / span, 4) if span else None}
        probe = result.get(probes.get(name, ""))
        line["probe_clock_mhz"] = probe_clock(probe, start, end) if probe and not short else None
        counted = [each for each in windows if each["cycles"].get("248", [1])[0] == 0]
        if counted:
            seconds = sum(each["t1"] - each["t0"] for each in counted)
            line["gpm_sm_cycles_per_s"] = sum(each["cycles"]["248"][1] for each in counted) / seconds
            if all(each["cycles"].get("252", [1])[0] == 0 for each in counted):
                hmma_cycles = sum(each["cycles"]["252"][1] for each in counted)
                line["gpm_hmma_cycles"] = hmma_cycles
                line["flop_per_gpm_hmma_cycle"] = done * seconds / span / hmma_cycles if hmma_cycles and span else None
        for basis in ("nvml_clock_mhz", "probe_clock_mhz"):
            if line.get(basis) and hmma_seconds:
                line[f"flop_per_busy_cycle_per_sm_at_{basis}"] = round(done / (hmma_seconds * 132 * line[basis] * 1e6))
        lines.append(json.dumps(line))
    return "\n".join(lines)


NCU_BASES = {"gpu__time_duration": ("sum",), "sm__cycles_elapsed": ("avg.per_second", "avg", "max"), "gpc__cycles_elapsed": ("avg.per_second",),
             "sm__cycles_active": ("avg",), "sm__pipe_tensor_op_hmma_cycles_active": ("sum", "avg.pct_of_peak_sustained_elapsed"),
             "sm__pipe_tensor_op_gmma_cycles_active": ("sum", "avg.pct_of_peak_sustained_elapsed"), "sm__pipe_tensor_cycles_active": ("sum",),
             "sm__inst_executed_pipe_tensor_op_gmma": ("sum",), "sm__inst_executed_pipe_tensor_op_hmma": ("sum",), "sm__pipe_shared_cycles_active": ("sum",)}
PRECISION_WORDS = ("bf16", "tf32", "fp16", "f16", "fp8", "e4m3", "e5m2", "int8", "s8", "fp64", "dmma", "hgmma", "igmma")


def ncu_metrics(listing: str) -> str:
    """The metrics to ask ncu for: ours that the device lists, and every tensor metric naming a precision (at most 24)."""
    names = {line.split()[0] for line in listing.splitlines() if line.strip() and "__" in line.split()[0]}
    chosen = [f"{base}.{suffix}" for base, suffixes in NCU_BASES.items() if base in names for suffix in suffixes]
    precision = sorted(name for name in names if "tensor" in name and any(word in name for word in PRECISION_WORDS))
    return ",".join(chosen + [f"{name}.sum" for name in precision[:24]])


if __name__ == "__main__":
    sys.exit(main())
