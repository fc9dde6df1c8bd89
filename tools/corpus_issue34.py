"""Jobs that test one verdict on every card (issue 34): a training step starved by CPU
preprocessing, a skinny (decode-shaped) GEMM, a batch-1 LSTM cell replayed from a CUDA graph, and a
bf16 matmul for the estimate bands beside the fleet corpus's INT8/FP8 GEMMs. tools/record_corpus.py
records them like the rest of the corpus; each counts its own work.

- ``resnet18_starved``: torchvision ResNet-18, bf16 autocast, batch 64, each batch built on the CPU
  first (decode-like augmentation on one thread: random crop, flip, normalise of 64 x 3 x 256 x 256
  floats) and copied from pageable memory: the GPU runs kernels a few percent of the time. FLOP per
  step from FlopCounterMode; ``steps_per_s``.
- ``matmul_skinny_b8``: x[8, 8192] @ W[8192, 8192]^T in bf16, the shape of a batch-8 decode step's
  projection: every call streams W (128 MiB) once. FLOP 2 x 8 x 8192^2, bytes W + x + out.
- ``lstm_graph_b1``: an nn.LSTMCell(1024, 1024) stepped 64 times at batch 1, captured in one CUDA
  graph and replayed: no launch gaps, tiny dependent kernels. FLOP 2 x 4 x (1024 x 1024) x 2 per step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from corpus_fleet import Record, capture_cuda_graph, step_flop

SKINNY_N, SKINNY_BATCH = 8192, 8
LSTM_HIDDEN, LSTM_STEPS = 1024, 64


def resnet18_starved(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    name = "resnet18_starved"
    if not wanted(name):
        return
    import torchvision

    batch = 64
    model = torchvision.models.resnet18().cuda().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    labels = torch.randint(0, 1000, (batch,), device="cuda")
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    threads = torch.get_num_threads()

    def preprocess() -> Any:
        """A CPU input pipeline on one thread: the batch is decoded, cropped, flipped and normalised."""
        torch.set_num_threads(1)
        try:
            raw = torch.rand(batch, 3, 256, 256)
            top, left = int(torch.randint(0, 32, ()).item()), int(torch.randint(0, 32, ()).item())
            crop = raw[:, :, top : top + 224, left : left + 224].flip(3)
            return ((crop - mean) / std).contiguous(memory_format=torch.channels_last)
        finally:
            torch.set_num_threads(threads)

    def train_step(images: Any) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()

    on_gpu = preprocess().cuda()
    for _ in range(3):
        train_step(on_gpu)
    flop = step_flop(torch, lambda: train_step(on_gpu))
    started = time.perf_counter()
    for _ in range(3):
        train_step(preprocess().cuda())
    step_time = (time.perf_counter() - started) / 3
    say(f"{name}: {flop / 1e9:.0f} GFLOP a step, {step_time * 1000:.0f} ms a step with preprocessing")

    def step(work: Any) -> None:
        train_step(preprocess().cuda())
        work.add(flop=flop)

    record(name, f"torchvision ResNet-18 training, bf16 autocast, batch {batch}, each batch preprocessed on one CPU thread (crop, flip, normalise) and copied from pageable memory: a starved job", step, ("tflops",), lambda: {"steps_per_s": round(1 / step_time, 2)})


def skinny_gemm(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    name = f"matmul_skinny_b{SKINNY_BATCH}"
    if not wanted(name):
        return
    n, m = SKINNY_N, SKINNY_BATCH
    weight = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    flop = 2.0 * m * n * n
    nbytes = 2.0 * (n * n + 2 * m * n)
    calls = 200
    for _ in range(20):
        torch.nn.functional.linear(x, weight)
    torch.cuda.synchronize()

    def step(work: Any) -> None:
        for _ in range(calls):
            torch.nn.functional.linear(x, weight)
        torch.cuda.synchronize()
        work.add(flop=calls * flop, nbytes=calls * nbytes)

    record(name, f"skinny bf16 GEMM x[{m}, {n}] @ W[{n}, {n}]^T (a batch-{m} decode projection), {calls} calls per synchronisation: streams W once a call", step, ("tflops", "tbps"))


def lstm_graph(torch: Any, record: Record, wanted: Callable[[str], bool], say: Callable[[str], None]) -> None:
    name = "lstm_graph_b1"
    if not wanted(name):
        return
    hidden = LSTM_HIDDEN
    cell = torch.nn.LSTMCell(hidden, hidden, device="cuda")
    x = torch.randn(1, hidden, device="cuda")
    h, c = torch.zeros(1, hidden, device="cuda"), torch.zeros(1, hidden, device="cuda")

    def unrolled() -> Any:
        state = (h, c)
        for _ in range(LSTM_STEPS):
            state = cell(x, state)
        return state

    with torch.inference_mode():
        graph, _ = capture_cuda_graph(torch, unrolled)
    flop = 2.0 * 4 * hidden * hidden * 2 * LSTM_STEPS  # input and hidden projections, 4 gates
    replays = 50
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    steps_per_s = replays * LSTM_STEPS / (time.perf_counter() - started)
    say(f"{name}: {steps_per_s:.0f} cell steps/s")

    def step(work: Any) -> None:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
        work.add(flop=replays * flop)

    record(name, f"nn.LSTMCell({hidden}, {hidden}) at batch 1, {LSTM_STEPS} dependent steps captured in one CUDA graph and replayed back to back: busy, tiny dependent kernels", step, ("tflops",), lambda: {"steps_per_s": round(steps_per_s, 1)})


GROUPS: tuple[tuple[str, frozenset[str], Callable[..., None]], ...] = (
    ("starved", frozenset({"resnet18_starved"}), resnet18_starved),
    ("skinny", frozenset({f"matmul_skinny_b{SKINNY_BATCH}"}), skinny_gemm),
    ("lstm", frozenset({"lstm_graph_b1"}), lstm_graph),
)
