"""Jobs whose kernels move their bytes over a link while every SM holds warps (issue 43), and a
ViT-B/16 training step for the FLOP/s estimate. tools/record_corpus.py records them like the rest
of the corpus; each counts its own work.

- ``zerocopy_read``: a kernel reads a 1 GiB pinned host buffer directly (mapped, zero-copy over
  PCIe: the device uses the host pointer, as a UVA read of a host-resident table does), 16 bytes a
  load, every SM full of warps waiting on the link. ``pcie_gbps``: bytes read per second.
- ``zerocopy_write``: the same kernel shape writing the host buffer. ``pcie_gbps``: bytes written.
- ``zerocopy_gather``: random 512-byte rows of a 2 GiB pinned host table gathered into device
  memory, a warp a row (the shape of a UVA embedding lookup). ``pcie_gbps``: row bytes read.
- ``vit_b16_train_bf16``: timm's ViT-B/16 (random weights), bf16 autocast, batch 128, fused AdamW.
  FLOP per step from FlopCounterMode; ``images_per_s``.
- ``matmul_from_idle``: a job that starts while the recording runs: the GPU idles for the first
  ``IDLE_FIRST`` seconds, then bf16 8192^3 matmuls back to back; ``started_s`` is when (seconds after
  the recording's launch), ``tflops`` the matmuls' own count over the whole recording. Beside the
  daemon's poller it shows how many polls the class takes to follow the start (issue 43: two).

The zero-copy kernels are CuPy RawKernels on pinned memory from ``cudaHostAlloc`` (CuPy's pinned
pool): under unified addressing its host pointer is valid on the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from corpus_fleet import Record, step_flop

ZERO_COPY_BYTES = 1 << 30
GATHER_TABLE_BYTES = 2 << 30
GATHER_ROW_BYTES = 512
GATHER_ROWS_PER_CALL = 1 << 20
BLOCK = 256

KERNELS = r"""
extern "C" __global__ void zc_read(unsigned long long host_address, unsigned long long count, float* sink) {
    const float4* host = (const float4*)host_address;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    float total = 0.0f;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count; i += stride) {
        float4 v = host[i];
        total += v.x + v.y + v.z + v.w;
    }
    if (total == 1234.5f) sink[0] = total;  // never true: keeps the loads
}

extern "C" __global__ void zc_write(unsigned long long host_address, unsigned long long count, float value) {
    float4* host = (float4*)host_address;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count; i += stride) {
        host[i] = make_float4(value, value, value, value);
    }
}

extern "C" __global__ void zc_gather(unsigned long long table_address, const long long* rows, unsigned long long count, float4* out) {
    const float4* table = (const float4*)table_address;
    unsigned long long lane = threadIdx.x & 31;
    unsigned long long warp = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) >> 5;
    unsigned long long warps = ((unsigned long long)gridDim.x * blockDim.x) >> 5;
    for (unsigned long long r = warp; r < count; r += warps) {
        out[r * 32 + lane] = table[rows[r] * 32 + lane];  // one 512-byte row a warp: 32 x 16 bytes
    }
}
"""


def zero_copy(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    names = ("zerocopy_read", "zerocopy_write", "zerocopy_gather")
    if not any(wanted(name) for name in names):
        return
    import cupy

    module = cupy.RawModule(code=KERNELS)
    read, write, gather = (module.get_function(name) for name in ("zc_read", "zc_write", "zc_gather"))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = sms * 8  # 8 blocks of 256 threads per SM: every SM full of warps (2048 threads)
    stream = cupy.cuda.Stream(non_blocking=True)
    sink = cupy.zeros(1, dtype=cupy.float32)

    def on_stream(kernel: Any, args: tuple[Any, ...]) -> None:
        with stream:  # a non-blocking stream: it never waits on PyTorch's legacy default stream
            kernel((grid,), (BLOCK,), args)

    if wanted("zerocopy_read") or wanted("zerocopy_write"):
        host = cupy.cuda.alloc_pinned_memory(ZERO_COPY_BYTES)
        count = cupy.uint64(ZERO_COPY_BYTES // 16)
        address = cupy.uint64(host.ptr)
        for name, launch, direction in (
            ("zerocopy_read", lambda: on_stream(read, (address, count, sink)), "reads"),
            ("zerocopy_write", lambda: on_stream(write, (address, count, cupy.float32(1.0))), "writes"),
        ):
            if not wanted(name):
                continue
            launch()
            stream.synchronize()
            started = time.perf_counter()
            for _ in range(8):
                launch()
            stream.synchronize()
            say(f"{name}: {8 * ZERO_COPY_BYTES / (time.perf_counter() - started) / 1e9:.1f} GB/s over PCIe")

            def step(work: Any, launch: Callable[[], Any] = launch) -> None:
                for _ in range(8):
                    launch()
                stream.synchronize()
                work.add(nbytes=8.0 * ZERO_COPY_BYTES)

            record(name, f"a kernel {direction} a 1 GiB pinned host buffer directly (mapped, zero-copy over PCIe: the host pointer used on the device), 16 bytes a thread a load, {grid} blocks of {BLOCK} threads ({grid // sms} per SM): every SM holds warps that wait on the link", step, ("pcie_gbps",))
        del host
    if wanted("zerocopy_gather"):
        table = cupy.cuda.alloc_pinned_memory(GATHER_TABLE_BYTES)
        table_rows = GATHER_TABLE_BYTES // GATHER_ROW_BYTES
        rows = cupy.random.randint(0, table_rows, size=GATHER_ROWS_PER_CALL, dtype=cupy.int64)
        out = cupy.empty((GATHER_ROWS_PER_CALL, GATHER_ROW_BYTES // 4), dtype=cupy.float32)
        args = (cupy.uint64(table.ptr), rows, cupy.uint64(GATHER_ROWS_PER_CALL), out)
        call_bytes = float(GATHER_ROWS_PER_CALL * GATHER_ROW_BYTES)

        def launch_gather() -> None:
            on_stream(gather, args)

        launch_gather()
        stream.synchronize()

        def gather_step(work: Any) -> None:
            for _ in range(8):
                launch_gather()
            stream.synchronize()
            work.add(nbytes=8 * call_bytes)

        record("zerocopy_gather", f"random {GATHER_ROW_BYTES}-byte rows of a {GATHER_TABLE_BYTES >> 30} GiB pinned host table ({table_rows // 1_000_000} M rows) gathered into device memory by a kernel, a warp a row, {GATHER_ROWS_PER_CALL} rows a call: a UVA embedding lookup over PCIe, every SM full of warps", gather_step, ("pcie_gbps",))
        del table, rows, out
    cupy.get_default_memory_pool().free_all_blocks()


def vit_training(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    name = "vit_b16_train_bf16"
    if not wanted(name):
        return
    import timm

    batch = 128
    model = timm.create_model("vit_base_patch16_224", pretrained=False).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    images = torch.randn(batch, 3, 224, 224, device="cuda")
    labels = torch.randint(0, 1000, (batch,), device="cuda")

    def train_step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(5):
        train_step()
    flop = step_flop(torch, train_step)
    started = time.perf_counter()
    for _ in range(5):
        train_step()
    torch.cuda.synchronize()
    step_time = (time.perf_counter() - started) / 5
    say(f"{name}: {flop / 1e12:.2f} TFLOP a step (FlopCounterMode), {step_time * 1000:.0f} ms a step, {flop / step_time / 1e12:.0f} TFLOP/s")

    def step(work: Any) -> None:
        for _ in range(2):
            train_step()
        torch.cuda.synchronize()
        work.add(flop=2 * flop)

    record(name, f"timm ViT-B/16 (vit_base_patch16_224, random weights) training, bf16 autocast, batch {batch}, fused AdamW", step, ("tflops",), lambda: {"images_per_s": round(batch / step_time, 1)})


IDLE_FIRST = 8.0
MATMUL_N = 8192


def matmul_from_idle(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    name = "matmul_from_idle"
    if not wanted(name):
        return
    a, b = (torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    flop = 2.0 * MATMUL_N**3
    first: list[float] = []
    started: list[float] = []

    def step(work: Any) -> None:
        now = time.perf_counter()
        if not first:
            first.append(now)
        if now - first[0] < IDLE_FIRST:
            time.sleep(0.05)  # the job has not started yet: the GPU idles
            work.add()
            return
        if not started:
            started.append(now - first[0])
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        work.add(flop=10 * flop)

    time.sleep(3.0)  # the warm-up's clock boost and power settle back to idle first
    record(name, f"the GPU idles {IDLE_FIRST:g} s, then torch bf16 {MATMUL_N}^3 matmuls back to back (a job starting under the daemon)", step, ("tflops",),
           lambda: {"started_s": round(started[0], 2) if started else -1.0})


GROUPS: tuple[tuple[str, frozenset[str], Callable[..., None]], ...] = (
    ("zero_copy", frozenset({"zerocopy_read", "zerocopy_write", "zerocopy_gather"}), zero_copy),
    ("vit", frozenset({"vit_b16_train_bf16"}), vit_training),
    ("from_idle", frozenset({"matmul_from_idle"}), matmul_from_idle),
)
