"""The wider corpus: jobs of the kinds a fleet runs beyond LLM training and decoding, each with its
own count of the work it does. tools/record_corpus.py records them like the rest of the corpus.

Every count is the job's own: FLOP from PyTorch's FlopCounterMode over one real step (ResNet-50,
attention, BERT) or from the model's shape (the JAX step); 2 n^3 for an n^3 matmul
(ops for INT8); bytes for the copies and the gather from the tensors each call reads and writes.

The truth keys: ``tflops`` (floating-point FLOP/s of the job, whatever the precision), ``tops``
(INT8 ops/s), ``tbps`` (device-memory bytes read + written per second), ``pcie_gbps`` (bytes per
second moved between host and device). Each description names the precision the math runs in.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

MATMUL_N = 8192

Record = Callable[..., None]  # record(name, description, step, truth_keys, extra_truth=None)


def step_flop(torch: Any, run_once: Callable[[], Any]) -> float:
    """FLOP of one call of ``run_once`` as PyTorch's FlopCounterMode counts them."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        run_once()
    torch.cuda.synchronize()
    return float(counter.get_total_flops())


def capture_cuda_graph(torch: Any, run_once: Callable[[], Any]) -> tuple[Any, Any]:
    """Warm `run_once` up on a side stream, then capture it into one CUDA graph: (graph, its outputs)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            run_once()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = run_once()
    return graph, outputs


def resnet_training(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    import torchvision

    # resnet50_train_tf32: FP32 with PyTorch's defaults, under which cuDNN runs the convolutions in TF32
    for name, dtype, batch in (("resnet50_train_bf16", torch.bfloat16, 256), ("resnet50_train_fp32", None, 128), ("resnet50_train_tf32", None, 128)):
        if not wanted(name):
            continue
        tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        if name == "resnet50_train_fp32":  # true FP32: no TF32 on the tensor cores, the FP32 pipe does the math
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        elif name == "resnet50_train_tf32":
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
        torch.backends.cudnn.benchmark = True
        model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        images = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
        labels = torch.randint(0, 1000, (batch,), device="cuda")

        def train_step(model: Any = model, optimizer: Any = optimizer, images: Any = images, labels: Any = labels, dtype: Any = dtype) -> None:
            with torch.autocast("cuda", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
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
        say(f"{name}: {flop / 1e9:.0f} GFLOP a step (FlopCounterMode), {step_time * 1000:.0f} ms a step, {flop / step_time / 1e12:.1f} TFLOP/s, {batch / step_time:.0f} images/s")

        def step(work: Any, train_step: Callable[[], None] = train_step, flop: float = flop) -> None:
            for _ in range(2):
                train_step()
            torch.cuda.synchronize()
            work.add(flop=2 * flop)

        label = {"resnet50_train_bf16": "bf16 autocast", "resnet50_train_fp32": "FP32 with TF32 off (cuDNN and matmul)"}.get(name, "FP32 with PyTorch's defaults (cuDNN convolutions in TF32)")
        record(name, f"torchvision ResNet-50 training, {label}, SGD momentum, batch {batch} of synthetic 224x224 images on the GPU, channels_last, cudnn.benchmark", step, ("tflops",), lambda batch=batch, step_time=step_time, dtype=dtype: {"images_per_s": round(batch / step_time, 1)})
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        del model, optimizer, images
        torch.cuda.empty_cache()


def matmuls(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    n = MATMUL_N
    flop = 2.0 * n**3

    def operands(name: str) -> Callable[[], Any]:
        """The product a job repeats, its operands held by the returned closure alone."""
        if name == "matmul_fp64_8192":
            a, b = (torch.randn(n, n, device="cuda", dtype=torch.float64) for _ in range(2))
            return lambda: a @ b
        if name == "matmul_tf32_8192":
            torch.backends.cuda.matmul.allow_tf32 = True
            c, d = (torch.randn(n, n, device="cuda", dtype=torch.float32) for _ in range(2))
            return lambda: c @ d
        if name == "matmul_int8_8192":
            e = torch.randint(-64, 64, (n, n), device="cuda", dtype=torch.int8)
            f = torch.randint(-64, 64, (n, n), device="cuda", dtype=torch.int8).t().contiguous().t()  # column-major, as cuBLASLt's IMMA wants
            return lambda: torch._int_mm(e, f)
        g = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        h = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major
        one = torch.tensor(1.0, device="cuda")
        return lambda: torch._scaled_mm(g, h, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    jobs = (
        ("matmul_fp64_8192", f"torch float64 {n}x{n} matmuls back to back (cuBLAS DGEMM: the FP64 tensor-core pipe, DMMA)", "tflops"),
        ("matmul_tf32_8192", f"torch float32 {n}x{n} matmuls with TF32 allowed (tensor cores at TF32, half the BF16 rate)", "tflops"),
        ("matmul_int8_8192", f"torch._int_mm: int8 x int8 -> int32, {n}^3 (the IMMA tensor pipe); the count is in ops", "tops"),
        ("matmul_fp8_8192", f"torch._scaled_mm: float8 e4m3 x e4m3 -> bf16, {n}^3, per-tensor scales (FP8 on the HMMA tensor pipe)", "tflops"),
    )
    for name, description, key in jobs:
        if not wanted(name):
            continue
        try:
            product = operands(name)
            for _ in range(5):
                product()
            torch.cuda.synchronize()
        except Exception as error:  # one kind the build lacks must not stop the others
            say(f"{name}: cannot run here: {error!r}")
            continue
        started = time.perf_counter()
        for _ in range(5):
            product()
        torch.cuda.synchronize()
        rate = 5 * flop / (time.perf_counter() - started)
        say(f"{name}: {rate / 1e12:.1f} T{'OP' if key == 'tops' else 'FLOP'}/s")
        repeats = max(1, min(20, int(0.1 * rate / flop)))  # about 100 ms between synchronisations

        def step(work: Any, product: Callable[[], Any] = product, repeats: int = repeats) -> None:
            for _ in range(repeats):
                product()
            torch.cuda.synchronize()
            work.add(flop=repeats * flop)

        record(name, description, step, (key,))
        del product, step
        torch.cuda.empty_cache()


def attention(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    name = "sdpa_train_bf16"
    if not wanted(name):
        return
    batch, heads, seq, dim = 8, 16, 4096, 128
    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16)

    def fwd_bwd() -> None:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=False)
        out.backward(grad)
        q.grad = k.grad = v.grad = None

    for _ in range(3):
        fwd_bwd()
    flop = step_flop(torch, fwd_bwd)
    say(f"{name}: {flop / 1e12:.2f} TFLOP a forward+backward (FlopCounterMode)")

    def step(work: Any) -> None:
        for _ in range(4):
            fwd_bwd()
        torch.cuda.synchronize()
        work.add(flop=4 * flop)

    record(name, f"F.scaled_dot_product_attention forward + backward (flash attention), not causal, bf16, batch {batch} x {heads} heads x {seq} tokens x {dim}", step, ("tflops",))
    torch.cuda.empty_cache()


def embedding_gather(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    name = "embedding_bag_gather"
    if not wanted(name):
        return
    rows, dim, bags, per_bag = 40_000_000, 128, 65536, 64
    table = torch.nn.EmbeddingBag(rows, dim, mode="sum", device="cuda")
    indices = torch.randint(0, rows, (bags * per_bag,), device="cuda")
    offsets = torch.arange(0, bags * per_bag, per_bag, device="cuda")
    call_bytes = float(bags * per_bag * (dim * 4 + 8) + bags * dim * 4)  # rows read + indices read + sums written
    with torch.inference_mode():
        for _ in range(5):
            table(indices, offsets)
    torch.cuda.synchronize()

    def step(work: Any) -> None:
        with torch.inference_mode():
            for _ in range(20):
                table(indices, offsets)
        torch.cuda.synchronize()
        work.add(nbytes=20 * call_bytes)

    record(name, f"DLRM-like inference lookup: nn.EmbeddingBag {rows // 1_000_000}M x {dim} FP32 ({rows * dim * 4 / 1e9:.0f} GB), sum of {per_bag} random rows for each of {bags} bags a call: a random DRAM gather, no float math to speak of", step, ("tbps",))
    torch.cuda.empty_cache()


def host_copies(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    size = 1 << 30
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(size, dtype=torch.uint8, device="cuda")
    for name, direction, copy in (("copy_h2d_pinned", "host-to-device", lambda: device.copy_(host, non_blocking=True)), ("copy_d2h_pinned", "device-to-host", lambda: host.copy_(device, non_blocking=True))):
        if not wanted(name):
            continue
        copy()
        torch.cuda.synchronize()

        def step(work: Any, copy: Callable[[], Any] = copy) -> None:
            for _ in range(4):
                copy()
            torch.cuda.synchronize()
            work.add(nbytes=4.0 * size)

        record(name, f"pinned {direction} copies of 1 GiB back to back (copy engine over PCIe; no kernel runs)", step, ("pcie_gbps",))
    torch.cuda.empty_cache()


def bert_inference(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    from transformers import BertConfig, BertModel

    for name, batch, seq in (("bert_infer_b1", 1, 128), ("bert_infer_b256", 256, 128)):
        if not wanted(name):
            continue
        torch.manual_seed(0)
        model = BertModel(BertConfig()).to(device="cuda", dtype=torch.bfloat16).eval()  # BERT-base shape, random weights
        ids = torch.randint(0, 30522, (batch, seq), device="cuda")

        def forward(model: Any = model, ids: Any = ids) -> None:
            with torch.inference_mode():
                model(input_ids=ids)

        for _ in range(5):
            forward()
        flop = step_flop(torch, forward)
        calls = 20 if batch == 1 else 4

        def step(work: Any, forward: Callable[[], None] = forward, flop: float = flop, calls: int = calls) -> None:
            for _ in range(calls):
                forward()
            torch.cuda.synchronize()
            work.add(flop=calls * flop)

        say(f"{name}: {flop / 1e9:.1f} GFLOP a forward (FlopCounterMode)")
        record(name, f"Hugging Face BertModel (BERT-base config, random weights), eager, bf16, inference_mode, batch {batch} x {seq} tokens", step, ("tflops",))
        del model, ids
        torch.cuda.empty_cache()


def jax_step(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    name = "jax_mlp_train_bf16"
    if not wanted(name):
        return
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with PyTorch's cache
    import jax
    import jax.numpy as jnp

    width, depth, batch = 8192, 4, 8192
    keys = jax.random.split(jax.random.PRNGKey(0), depth + 1)
    params = [jax.random.normal(key, (width, width), dtype=jnp.bfloat16) * 0.01 for key in keys[:depth]]
    data = jax.random.normal(keys[depth], (batch, width), dtype=jnp.bfloat16)

    def loss(params: list[Any], x: Any) -> Any:
        for weight in params:
            x = jax.nn.gelu(x @ weight)
        return jnp.mean(x.astype(jnp.float32) ** 2)

    @jax.jit
    def train(params: list[Any], x: Any) -> list[Any]:
        grads = jax.grad(loss)(params, x)
        return [w - 1e-3 * g for w, g in zip(params, grads)]

    compiled = train.lower(params, data).compile()
    # XLA's cost analysis leaves out the matmuls it hands to cuBLAS (it counted 0.01 TFLOP a step on
    # an H100), so the count is the model's: a forward matmul per layer, and backward the weight
    # gradient of every layer and the input gradient of all but the first (2 FLOP per multiply-add).
    flop = 2.0 * batch * width * width * (3 * depth - 1)
    state = [params]
    for _ in range(3):
        state[0] = compiled(state[0], data)
    jax.block_until_ready(state[0])
    say(f"{name}: {flop / 1e12:.2f} TFLOP a step (from the model's shape), jax {jax.__version__}")

    def step(work: Any) -> None:
        for _ in range(4):
            state[0] = compiled(state[0], data)
        jax.block_until_ready(state[0])
        work.add(flop=4 * flop)

    record(name, f"JAX jitted training step of a {depth}-layer {width}-wide GELU MLP, bf16, batch {batch}, plain SGD update", step, ("tflops",))


GROUPS: tuple[tuple[str, frozenset[str], Callable[..., None]], ...] = (
    ("resnet", frozenset({"resnet50_train_bf16", "resnet50_train_fp32", "resnet50_train_tf32"}), resnet_training),
    ("matmuls", frozenset({"matmul_fp64_8192", "matmul_tf32_8192", "matmul_int8_8192", "matmul_fp8_8192"}), matmuls),
    ("attention", frozenset({"sdpa_train_bf16"}), attention),
    ("gather", frozenset({"embedding_bag_gather"}), embedding_gather),
    ("copies", frozenset({"copy_h2d_pinned", "copy_d2h_pinned"}), host_copies),
    ("bert", frozenset({"bert_infer_b1", "bert_infer_b256"}), bert_inference),
    ("jax", frozenset({"jax_mlp_train_bf16"}), jax_step),
)
