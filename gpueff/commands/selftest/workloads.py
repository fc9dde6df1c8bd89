"""The planted workloads, each measuring its own throughput, over PyTorch or CuPy.

An engine is the few GPU operations the workloads need; PyTorch and CuPy are imported only in
``load_engine``, so nothing else in the package needs them. Spin kernels need a raw CUDA kernel:
CuPy compiles one (NVRTC); with PyTorch alone, 1 thread on 1 SM uses ``torch.cuda._sleep`` (the same
clock64 spin kernel, launched <<<1, 1>>>) and 1 warp on every SM is unavailable.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from gpueff.sample import DeviceInfo

MATMUL_N = 8192
COPY_BYTES = 2 * 1024**3
TINY_ELEMENTS = 16
TINY_KERNELS_PER_SYNC = 1000
DUTY_PHASE_SECONDS = 0.05  # matmuls for this long, then host sleep for as long
ALIASED_PHASE_SECONDS = 0.5  # the same with a 1 s period: 500 ms sampling sees whole busy and idle windows
TRAIN_LAYERS, TRAIN_WIDTH, TRAIN_VOCAB = 8, 2048, 32000  # a ~0.5 B parameter transformer
TRAIN_BATCH, TRAIN_SEQUENCE = 8, 1024
SPIN_LAUNCH_SECONDS = 0.05  # one spin kernel runs this long at the maximum SM clock

SPIN_SOURCE = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


class SelftestUnavailable(Exception):
    """The selftest cannot run here; the message is the one line the user sees."""


class Engine(Protocol):
    name: str
    tensor_dtype: str  # what the matmul runs in (bf16, or fp16 where bf16 is not available)

    def synchronize(self) -> None: ...
    def matmul_operands(self, n: int) -> tuple[Any, Any]: ...
    def matmul(self, a: Any, b: Any) -> Any: ...
    def copy_buffers(self, nbytes: int) -> tuple[Any, Any]: ...
    def copy(self, source: Any, target: Any) -> None: ...
    def tiny_buffer(self, elements: int) -> Any: ...
    def tiny_kernel(self, buffer: Any) -> None: ...
    def spin(self, blocks: int, threads: int, cycles: int) -> None: ...
    def release(self) -> None: ...


class TorchEngine:
    name = "pytorch"
    tensor_dtype = "bf16"

    def __init__(self, torch: Any, cupy: Any | None, gpu: int) -> None:
        self.torch, self.cupy = torch, cupy
        self.device = torch.device("cuda", gpu)
        self.kept: dict[str, Any] = {}  # what a workload builds once and reuses across its runs
        torch.cuda.set_device(self.device)
        self._kernel = _spin_kernel(cupy, gpu) if cupy is not None else None
        if cupy is not None:
            cupy.cuda.Device(gpu).use()  # CuPy launches on its current device

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def matmul_operands(self, n: int) -> tuple[Any, Any]:
        make = lambda: self.torch.randn(n, n, device=self.device, dtype=self.torch.bfloat16)  # noqa: E731
        return make(), make()

    def matmul(self, a: Any, b: Any) -> Any:
        return a @ b

    def copy_buffers(self, nbytes: int) -> tuple[Any, Any]:
        empty = lambda: self.torch.empty(nbytes, device=self.device, dtype=self.torch.uint8)  # noqa: E731
        return empty(), empty()

    def copy(self, source: Any, target: Any) -> None:
        target.copy_(source)

    def tiny_buffer(self, elements: int) -> Any:
        return self.torch.zeros(elements, device=self.device)

    def tiny_kernel(self, buffer: Any) -> None:
        buffer.add_(1)

    def spin(self, blocks: int, threads: int, cycles: int) -> None:
        if self._kernel is not None and self.cupy is not None:
            self.synchronize()  # the CuPy kernel runs on CuPy's stream: keep the two in order
            _launch(self._kernel, blocks, threads, cycles)
            self.cupy.cuda.Device().synchronize()
        elif blocks == 1 and threads == 1:
            self.torch.cuda._sleep(cycles)
            self.synchronize()
        else:
            raise SelftestUnavailable("needs CuPy for its raw CUDA kernel (pip install cupy-cuda12x)")

    def release(self) -> None:
        self.torch.cuda.empty_cache()


class CupyEngine:
    name = "cupy"
    tensor_dtype = "fp16"  # CuPy has no bfloat16; fp16 runs on the same tensor pipe at the same peak

    def __init__(self, cupy: Any, gpu: int) -> None:
        self.cupy = cupy
        cupy.cuda.Device(gpu).use()
        self._kernel = _spin_kernel(cupy, gpu)

    def synchronize(self) -> None:
        self.cupy.cuda.Device().synchronize()

    def matmul_operands(self, n: int) -> tuple[Any, Any]:
        make = lambda: self.cupy.random.standard_normal((n, n), dtype=self.cupy.float32).astype(self.cupy.float16)  # noqa: E731
        return make(), make()

    def matmul(self, a: Any, b: Any) -> Any:
        return a @ b

    def copy_buffers(self, nbytes: int) -> tuple[Any, Any]:
        return self.cupy.empty(nbytes, dtype=self.cupy.uint8), self.cupy.empty(nbytes, dtype=self.cupy.uint8)

    def copy(self, source: Any, target: Any) -> None:
        self.cupy.copyto(target, source)

    def tiny_buffer(self, elements: int) -> Any:
        return self.cupy.zeros(elements, dtype=self.cupy.float32)

    def tiny_kernel(self, buffer: Any) -> None:
        buffer += 1

    def spin(self, blocks: int, threads: int, cycles: int) -> None:
        _launch(self._kernel, blocks, threads, cycles)
        self.synchronize()

    def release(self) -> None:
        self.cupy.get_default_memory_pool().free_all_blocks()


def _spin_kernel(cupy: Any, gpu: int) -> Any:
    with cupy.cuda.Device(gpu):
        return cupy.RawKernel(SPIN_SOURCE, "spin")


def _launch(kernel: Any, blocks: int, threads: int, cycles: int) -> None:
    import numpy

    kernel((blocks,), (threads,), (numpy.int64(cycles),))


def load_engine(gpu: int, prefer: str = "auto") -> Engine:
    """PyTorch (with CuPy for the raw kernel when it is there), else CuPy; a clear error otherwise."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        raise SelftestUnavailable("CUDA_VISIBLE_DEVICES is set, so CUDA and NVML may number the GPUs differently: unset it and choose the GPU with --gpu")
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA numbers GPUs as NVML does
    torch, cupy = _import("torch") if prefer in ("auto", "pytorch") else None, _import("cupy") if prefer in ("auto", "cupy") else None
    if torch is None and cupy is None:
        wanted = {"auto": "PyTorch or CuPy", "pytorch": "PyTorch", "cupy": "CuPy"}[prefer]
        raise SelftestUnavailable(f"the selftest needs {wanted} with CUDA to run its workloads: pip install 'gpu-efficiency-exporter[selftest]' (CuPy) or install PyTorch with CUDA")
    if torch is not None and torch.cuda.is_available():
        if gpu >= torch.cuda.device_count():
            raise SelftestUnavailable(f"--gpu {gpu}: PyTorch sees GPUs 0..{torch.cuda.device_count() - 1}")
        return TorchEngine(torch, cupy if _cupy_gpus(cupy) else None, gpu)
    if cupy is not None:
        count = _cupy_gpus(cupy)
        if count > gpu:
            return CupyEngine(cupy, gpu)
        if count:
            raise SelftestUnavailable(f"--gpu {gpu}: CuPy sees GPUs 0..{count - 1}")
    found = " and ".join(name for name, module in (("PyTorch", torch), ("CuPy", cupy)) if module is not None)
    raise SelftestUnavailable(f"{found} is installed but sees no CUDA GPU: the selftest needs a real NVIDIA GPU")


def _import(name: str) -> Any | None:
    try:
        return __import__(name)
    except ImportError:
        return None


def _cupy_gpus(cupy: Any | None) -> int:
    if cupy is None:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # CuPy raises CUDARuntimeError (no driver, no device) from its own module
        return 0


# ---- the workloads: each runs about ``seconds`` and returns its own figures -------------------

Workload = Callable[[Engine, float, DeviceInfo], dict[str, float]]  # (engine, seconds, GPU) -> truth


def idle(engine: Engine, seconds: float, device: DeviceInfo) -> dict[str, float]:
    engine.synchronize()
    time.sleep(seconds)
    return {}


def _spin_for(engine: Engine, seconds: float, blocks: int, threads: int, device: DeviceInfo) -> None:
    cycles = int((device.max_sm_clock_mhz or 2000) * 1e6 * SPIN_LAUNCH_SECONDS)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        engine.spin(blocks, threads, cycles)


def spin_1sm(engine: Engine, seconds: float, device: DeviceInfo) -> dict[str, float]:
    _spin_for(engine, seconds, 1, 1, device)
    return {}


def warp_every_sm(engine: Engine, seconds: float, device: DeviceInfo) -> dict[str, float]:
    if not device.sm_count:
        raise SelftestUnavailable("NVML did not report the SM count")
    _spin_for(engine, seconds, device.sm_count, 32, device)
    return {}


def _matmul_loop(engine: Engine, a: Any, b: Any, seconds: float, batch: int) -> int:
    """Matmuls in batches until ``seconds`` have passed (synchronized); returns how many ran."""
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(batch):
            engine.matmul(a, b)
        engine.synchronize()
        done += batch
    return done


def matmul(engine: Engine, seconds: float, device: DeviceInfo, n: int = MATMUL_N) -> dict[str, float]:
    a, b = engine.matmul_operands(n)
    engine.synchronize()
    started = time.perf_counter()
    count = _matmul_loop(engine, a, b, seconds, batch=10)
    elapsed = time.perf_counter() - started
    return {"tflops": 2 * n**3 * count / elapsed / 1e12}


def _units_per_second(seconds: float, run_once: Callable[[], int]) -> float:
    """Call ``run_once`` (it returns how many units of work it did) until ``seconds`` have passed;
    the units per second over the time it took."""
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        count += run_once()
    return count / (time.perf_counter() - started)


def _matmul_duty(engine: Engine, seconds: float, phase: float, n: int = MATMUL_N) -> dict[str, float]:
    """Matmuls for ``phase`` seconds, then host sleep for as long; FLOP/s over the whole time."""
    a, b = engine.matmul_operands(n)
    engine.synchronize()

    def busy_then_idle() -> int:
        done = _matmul_loop(engine, a, b, phase, batch=1)
        time.sleep(phase)
        return done

    return {"tflops": 2 * n**3 * _units_per_second(seconds, busy_then_idle) / 1e12}


def matmul_duty50(engine: Engine, seconds: float, device: DeviceInfo) -> dict[str, float]:
    return _matmul_duty(engine, seconds, DUTY_PHASE_SECONDS)


def matmul_duty_1s(engine: Engine, seconds: float, device: DeviceInfo) -> dict[str, float]:
    return _matmul_duty(engine, seconds, ALIASED_PHASE_SECONDS)


def train_step(engine: Engine, seconds: float, device: DeviceInfo) -> dict[str, float]:
    """Training steps of a pre-norm transformer in bf16 with AdamW, one loss.item() a step; the
    FLOP count is the usual 6 x parameters x tokens + 12 x layers x width x sequence x tokens."""
    torch = getattr(engine, "torch", None)
    if torch is None:
        raise SelftestUnavailable("needs PyTorch (the training step is a PyTorch model)")
    kept = engine.kept  # type: ignore[attr-defined]
    if "training" not in kept:  # built once (in the warm-up run), kept for the measured run
        kept["training"] = _training_setup(torch, engine.device)  # type: ignore[attr-defined]
    step, step_flop = kept["training"]
    engine.synchronize()

    def one_step() -> int:
        step()
        return 1

    return {"tflops": step_flop * _units_per_second(seconds, one_step) / 1e12}


def _training_setup(torch: Any, device: Any) -> tuple[Callable[[], None], float]:
    nn = torch.nn
    torch.manual_seed(0)
    layer = lambda: nn.TransformerEncoderLayer(TRAIN_WIDTH, TRAIN_WIDTH // 128, 4 * TRAIN_WIDTH, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)  # noqa: E731
    model = nn.ModuleDict({"embed": nn.Embedding(TRAIN_VOCAB, TRAIN_WIDTH), "layers": nn.ModuleList(layer() for _ in range(TRAIN_LAYERS)), "head": nn.Linear(TRAIN_WIDTH, TRAIN_VOCAB, bias=False)})
    model = model.to(device=device, dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    tokens = torch.randint(0, TRAIN_VOCAB, (TRAIN_BATCH, TRAIN_SEQUENCE), device=device)
    mask = nn.Transformer.generate_square_subsequent_mask(TRAIN_SEQUENCE, device=device, dtype=torch.bfloat16)

    def step() -> None:
        hidden = model["embed"](tokens)
        for each in model["layers"]:
            hidden = each(hidden, src_mask=mask, is_causal=True)
        logits = model["head"](hidden)
        loss = nn.functional.cross_entropy(logits.view(-1, TRAIN_VOCAB).float(), tokens.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()

    matmul_parameters = sum(p.numel() for p in model.parameters()) - model["embed"].weight.numel()
    token_count = TRAIN_BATCH * TRAIN_SEQUENCE
    step_flop = 6.0 * matmul_parameters * token_count + 12.0 * TRAIN_LAYERS * TRAIN_WIDTH * TRAIN_SEQUENCE * token_count
    return step, step_flop


def copy(engine: Engine, seconds: float, device: DeviceInfo, nbytes: int = COPY_BYTES) -> dict[str, float]:
    source, target = engine.copy_buffers(nbytes)
    engine.synchronize()

    def four_copies() -> int:
        for _ in range(4):
            engine.copy(source, target)
        engine.synchronize()
        return 4

    return {"tbps": 2 * nbytes * _units_per_second(seconds, four_copies) / 1e12}  # each copy reads and writes nbytes


def tiny_kernels(engine: Engine, seconds: float, device: DeviceInfo) -> dict[str, float]:
    buffer = engine.tiny_buffer(TINY_ELEMENTS)
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(TINY_KERNELS_PER_SYNC):
            engine.tiny_kernel(buffer)
        engine.synchronize()
    return {}


# By the names in expectations.EXPECTATIONS, in the order they run.
WORKLOADS: dict[str, Workload] = {
    "idle": idle,
    "spin_1sm": spin_1sm,
    "warp_every_sm": warp_every_sm,
    "matmul_8192": matmul,
    "matmul_8192_duty50": matmul_duty50,
    "copy_2GB": copy,
    "tiny_kernels": tiny_kernels,
    "matmul_duty_1s": matmul_duty_1s,
    "train_step": train_step,
}
