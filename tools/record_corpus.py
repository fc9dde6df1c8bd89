"""Record the real-workload corpus: each workload runs here while ``exporter record`` samples the GPU.

    python3 tools/record_corpus.py --out DIR [--only NAME,...] [--duration 24] [--interval 0.5] [--live | --both]

Needs one NVIDIA GPU with GPM (Hopper or newer), PyTorch with CUDA, and (for the Llama workloads)
transformers; models are built from a config with random weights, nothing is downloaded. Each
workload is warmed up first, so a trace holds only the steady state; then ``exporter record`` runs
in its own process for ``--duration`` seconds while the workload keeps going, and the workload's own
count of work over that time (FLOP, bytes) goes into the trace's ``truth``. One trace per workload
lands in DIR as <name>.json, and DIR/corpus.log says what ran and what did not. With ``--live`` the
daemon's own poller (bench/gpu/live_verdicts.py, 1 s) runs instead of the recorder and DIR gets
<name>.verdicts.jsonl, its verdict at every poll, with a summary line per workload in corpus.log;
with ``--both`` the recorder and the daemon's poller run side by side (two GPM readers: both read
the same windows' counters) and DIR gets both files per workload.

The truths, per workload:
- training: 6 x N x tokens + 12 x layers x hidden x seq x tokens FLOP a step (the PaLM/MFU
  convention; N = parameters that take part in matmuls, i.e. all but the input embedding);
- generate: 2 x N FLOP per token processed; bytes = weights read once per forward pass plus the KV
  cache read by each decode step;
- CUDA-graph decode: the weight bytes of one step x steps/s (each step streams every weight once);
- matmuls: 2 x n^3 FLOP each, over the whole time, idle phases included.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from corpus_fleet import GROUPS as FLEET_GROUPS  # noqa: E402  (tools/, the script's own folder)
from corpus_fleet import capture_cuda_graph  # noqa: E402
from corpus_issue34 import GROUPS as ISSUE34_GROUPS  # noqa: E402
from corpus_issue43 import GROUPS as ISSUE43_GROUPS  # noqa: E402

from gpueff.commands.record import format_trace  # noqa: E402

DUTY_PERIODS = {"50ms": 0.05, "140ms": 0.14, "250ms": 0.25, "1s": 1.0, "2s": 2.0}
MATMUL_N = 8192

LOG: list[str] = []
LIVE = [False]  # --live: the daemon's verdicts at every poll instead of a trace
BOTH = [False]  # --both: the daemon's verdicts at every poll beside the trace
DEADLINE = [math.inf]  # no workload starts a recording it cannot finish before this (perf_counter)


def say(message: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {message}"
    print(line, flush=True)
    LOG.append(line)


class Work:
    """The workload's own running count of FLOP and bytes, stamped after each synchronised step."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float, float]] = [(time.perf_counter(), 0.0, 0.0)]
        self.flop = 0.0
        self.bytes = 0.0

    def add(self, flop: float = 0.0, nbytes: float = 0.0) -> None:
        self.flop += flop
        self.bytes += nbytes
        self.marks.append((time.perf_counter(), self.flop, self.bytes))

    def rates(self, start: float, end: float) -> tuple[float, float]:
        """FLOP/s and bytes/s between the marks nearest ``start`` and ``end``."""
        inside = [mark for mark in self.marks if start <= mark[0] <= end]
        before = [mark for mark in self.marks if mark[0] < start]
        if not inside:
            return 0.0, 0.0
        first = before[-1] if before else inside[0]
        last = inside[-1]
        elapsed = last[0] - first[0]
        if elapsed <= 0:
            return 0.0, 0.0
        return (last[1] - first[1]) / elapsed, (last[2] - first[2]) / elapsed


def record_while(name: str, description: str, step: Callable[[Work], None], out: Path, duration: float, interval: float, truth_keys: tuple[str, ...], extra_truth: Callable[[], dict[str, float]] | None = None) -> None:
    """Run ``step`` over and over while ``exporter record`` samples the GPU; write the truth into the trace."""
    output = out / f"{name}.json"
    if time.perf_counter() + duration + 5 > DEADLINE[0]:
        say(f"{name}: skipped, not enough of the time budget left")
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "gpueff", "record", "-o", str(output), "--duration", f"{duration}s", "--interval", f"{int(interval * 1000)}ms", "--workload", name, "--description", description]
    verdicts_path = out / f"{name}.verdicts.jsonl"
    live = [sys.executable, str(ROOT / "bench" / "gpu" / "live_verdicts.py"), "--output", str(verdicts_path), "--duration", str(duration), "--interval", "1"]
    commands = [live] if LIVE[0] else [command, live] if BOTH[0] else [command]
    work = Work()
    launched = time.perf_counter()
    running = [subprocess.Popen(each, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for each in commands]
    while any(each.poll() is None for each in running):
        step(work)
    ended = time.perf_counter()
    for each in running:
        log = each.stdout.read() if each.stdout else ""
        if each.returncode != 0:
            say(f"{name}: {'record' if each.args is commands[0] and not LIVE[0] else 'live_verdicts'} failed (exit {each.returncode}): {log.strip()}")
            return
    if not LIVE[0] and not output.exists():
        say(f"{name}: record wrote no trace")
        return
    # The recorder spends about a second starting up before its first window opens.
    flops, bps = work.rates(max(launched + 1.5, ended - duration), ended)
    truth: dict[str, float] = {}
    if LIVE[0] or BOTH[0]:
        verdicts = [json.loads(line) for line in verdicts_path.read_text().splitlines()]
        classes = [each.get("class") for each in verdicts]
        summary = {"workload": name, "polls": len(verdicts), "classes": {c: classes.count(c) for c in set(classes)}, "truth_tflops": round(flops / 1e12, 3), "truth_tbps": round(bps / 1e12, 4), "truth_keys": list(truth_keys)}
        for key in ("util", "util_instant", "engine", "sm", "occupancy", "tensor", "dram", "pcie_rx_gbps", "pcie_tx_gbps", "tflops", "hmma_bf16_equivalent_t", "dmma_fp64_t", "imma_int8_t", "fp32_t", "estimated_t", "estimated_int8_t", "tbps"):
            values = [each[key] for each in verdicts[1:] if each.get(key) is not None]
            summary[key] = round(sum(values) / len(values), 4) if values else None
        mismatches = [rule for each in verdicts[1:] for rule in each.get("mismatch", [])]
        summary["mismatch_polls"] = {rule: mismatches.count(rule) for rule in set(mismatches)}
        summary["implausible_polls"] = sum(bool(each.get("implausible")) for each in verdicts)
        summary["estimate_polls"] = sum(each.get("estimated_t") is not None or each.get("estimated_int8_t") is not None for each in verdicts[1:])
        if extra_truth is not None:
            summary.update(extra_truth())
        say(f"LIVE {json.dumps(summary)}")
        if LIVE[0]:
            return
    for key, value, scale, digits in (("tflops", flops, 1e12, 3), ("tops", flops, 1e12, 3), ("tbps", bps, 1e12, 4), ("pcie_gbps", bps, 1e9, 2)):
        if key in truth_keys:
            truth[key] = round(value / scale, digits)
    if extra_truth is not None:
        truth.update(extra_truth())
    trace = json.loads(output.read_text())
    trace["truth"] = truth
    output.write_text(format_trace(compact(trace)))
    say(f"{name}: {len(trace['samples'])} samples, truth {truth}")


def compact(trace: dict[str, Any]) -> dict[str, Any]:
    """Round each reading to what the counters resolve (0.0001 percent, 0.001 MiB/s), integers stay integers."""

    def rounded(value: Any) -> Any:
        if isinstance(value, float):
            return int(value) if value.is_integer() else round(value, 4)
        return value

    trace["samples"] = [{key: rounded(value) for key, value in sample.items()} for sample in trace["samples"]]
    return trace


# ---- workloads ----------------------------------------------------------------------------------


def matmul_workloads(torch: Any, out: Path, duration: float, interval: float, wanted: Callable[[str], bool]) -> None:
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    flop = 2.0 * MATMUL_N**3
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()

    def steady(work: Work) -> None:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        work.add(flop=10 * flop)

    if wanted("matmul_8192"):
        record_while("matmul_8192", f"torch bf16 {MATMUL_N}x{MATMUL_N} matmuls back to back (compute-bound)", steady, out, duration, interval, ("tflops",))
    for label, period in DUTY_PERIODS.items():
        if not wanted(f"matmul_duty_{label}"):
            continue
        half = period / 2

        def duty(work: Work, half: float = half) -> None:
            started = time.perf_counter()
            while time.perf_counter() - started < half:
                a @ b
                torch.cuda.synchronize()
                work.add(flop=flop)
            time.sleep(half)
            work.add()

        record_while(f"matmul_duty_{label}", f"torch bf16 {MATMUL_N}^3 matmuls for {half * 1000:g} ms, then the host sleeps {half * 1000:g} ms (50 % duty, period {label})", duty, out, duration, interval, ("tflops",), functools.partial(dict, period_s=period, duty=0.5))


def graph_decode(torch: Any, out: Path, duration: float, interval: float) -> None:
    """Batch-1 decode of an 8B-shaped MLP+projection stack, captured in one CUDA graph: every step
    streams all weights once and launches nothing from Python (memory-bound)."""
    hidden, inner, layers, kv = 4096, 14336, 32, 1024
    shapes = [(hidden, hidden + 2 * kv), (hidden, hidden), (hidden, 2 * inner), (inner, hidden)]
    weights = [[torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 0.01 for shape in shapes] for _ in range(layers)]
    weight_bytes = float(sum(w.numel() * w.element_size() for layer in weights for w in layer))
    x = torch.randn(1, hidden, device="cuda", dtype=torch.bfloat16)

    def forward() -> Any:
        h = x
        for wqkv, wo, wgu, wdown in weights:
            h = torch.nn.functional.rms_norm(h, (hidden,))
            h = h + (h @ wqkv)[:, :hidden] @ wo
            gate, up = (torch.nn.functional.rms_norm(h, (hidden,)) @ wgu).chunk(2, dim=-1)
            h = h + (torch.nn.functional.silu(gate) * up) @ wdown
        return h

    graph, result = capture_cuda_graph(torch, forward)
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    del result

    def step(work: Work) -> None:
        for _ in range(20):
            graph.replay()
        torch.cuda.synchronize()
        work.add(flop=20 * weight_bytes, nbytes=20 * weight_bytes)  # 2 FLOP per bf16 weight = 1 per byte

    record_while("graph_decode_b1", f"batch-1 decode step of a {layers}-layer 8B-shaped stack ({weight_bytes / 1e9:.1f} GB bf16 weights) replayed from one CUDA graph: streams every weight once a step, no launch overhead", step, out, duration, interval, ("tflops", "tbps"))


def llama_workloads(torch: Any, out: Path, duration: float, interval: float, only: set[str] | None) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048)
    torch.manual_seed(0)
    built = time.perf_counter()
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model = model.to(device="cuda", dtype=torch.bfloat16)
    total = sum(p.numel() for p in model.parameters())
    matmul_params = total - model.model.embed_tokens.weight.numel()
    say(f"llama: {total / 1e9:.2f} B parameters ({matmul_params / 1e9:.2f} B in matmuls), built in {time.perf_counter() - built:.1f}s")
    batch, seq = 8, 1024
    tokens = batch * seq
    layers, hidden = config.num_hidden_layers, config.hidden_size
    step_flop = 6.0 * matmul_params * tokens + 12.0 * layers * hidden * seq * tokens
    data = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")

    def wanted(name: str) -> bool:
        return only is None or name in only

    if wanted("llama_train") or wanted("llama_train_starved"):
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)

        def train_step() -> None:
            loss = model(input_ids=data, labels=data).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss.item()  # the usual per-step loss logging: one synchronisation a step

        for _ in range(3):
            train_step()
        started = time.perf_counter()
        for _ in range(5):
            train_step()
        step_time = (time.perf_counter() - started) / 5
        say(f"llama_train: {step_time * 1000:.0f} ms a step, {step_flop / step_time / 1e12:.0f} TFLOP/s")
        description = f"Hugging Face LlamaForCausalLM, {total / 1e9:.2f} B params, random init, bf16, AdamW (fused), batch {batch} x {seq} tokens, loss.item() each step"

        def train(work: Work) -> None:
            train_step()
            work.add(flop=step_flop)

        if wanted("llama_train"):
            record_while("llama_train", description, train, out, duration, interval, ("tflops",), lambda: {"step_s": round(step_time, 4), "mfu": round(step_flop / step_time / 989.4e12, 3)})

        def starved(work: Work) -> None:
            time.sleep(step_time)  # the input pipeline: the next batch takes as long as a step to arrive
            train_step()
            work.add(flop=step_flop)

        if wanted("llama_train_starved"):
            record_while("llama_train_starved", description + f"; the host sleeps {step_time * 1000:.0f} ms before each step (a slow input pipeline): GPU busy about half the time", starved, out, duration, interval, ("tflops",), lambda: {"step_s": round(2 * step_time, 4)})
        optimizer.state.clear()  # the generate runs below need no optimizer state
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()

    model.eval()
    if wanted("llama_prefill"):
        prefill_batch, prefill_seq = 4, 2048
        prefill_ids = torch.randint(0, config.vocab_size, (prefill_batch, prefill_seq), device="cuda")
        prefill_tokens = prefill_batch * prefill_seq
        prefill_flop = 2.0 * matmul_params * prefill_tokens + 2.0 * layers * hidden * prefill_seq * prefill_tokens  # causal attention: half of QK^T and AV

        def prefill(work: Work) -> None:
            with torch.inference_mode():
                model(input_ids=prefill_ids, use_cache=False)
            torch.cuda.synchronize()
            work.add(flop=prefill_flop)

        for _ in range(3):
            prefill(Work())
        record_while("llama_prefill", f"prefill: one forward pass (inference, no cache) of the same {total / 1e9:.2f} B Llama over {prefill_batch} x {prefill_seq} prompt tokens, bf16", prefill, out, duration, interval, ("tflops",))
        torch.cuda.empty_cache()
    prompt, new = 128, 128
    weight_bytes = 2.0 * matmul_params
    kv_per_token = 2 * layers * config.num_key_value_heads * (hidden // config.num_attention_heads) * 2  # K and V, bf16, per layer
    for generate_batch in (1, 64):
        name = f"llama_generate_b{generate_batch}"
        if not wanted(name):
            continue
        ids = torch.randint(0, config.vocab_size, (generate_batch, prompt), device="cuda")
        mask = torch.ones_like(ids)
        processed = generate_batch * (prompt + new)
        call_flop = 2.0 * matmul_params * processed
        mean_context = prompt + new / 2
        call_bytes = new * (weight_bytes + generate_batch * mean_context * kv_per_token)

        def generate(work: Work, ids: Any = ids, mask: Any = mask, call_flop: float = call_flop, call_bytes: float = call_bytes) -> None:
            with torch.inference_mode():
                model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            work.add(flop=call_flop, nbytes=call_bytes)

        timed = Work()
        generate(timed)
        started = time.perf_counter()
        generate(timed)
        call_time = time.perf_counter() - started
        say(f"{name}: {call_time:.2f} s a call, {generate_batch * new / call_time:.0f} new tokens/s")
        record_while(name, f"model.generate (eager, dynamic KV cache, greedy) on the same {total / 1e9:.2f} B Llama: batch {generate_batch}, {prompt}-token prompt, {new} new tokens", generate, out, duration, interval, ("tflops", "tbps"), functools.partial(dict, tokens_per_s=round(generate_batch * new / call_time, 1)))


def idle(torch: Any, out: Path, duration: float, interval: float) -> None:
    record_while("idle", "nothing runs on the GPU (a process holds a CUDA context)", lambda work: time.sleep(0.05), out, min(duration, 12.0), interval, ())


def measure_get_samples_cost() -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        started = time.perf_counter()
        for _ in range(20):
            pynvml.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
        say(f"nvmlDeviceGetSamples (whole buffer): {(time.perf_counter() - started) / 20 * 1000:.2f} ms a call; driver {pynvml.nvmlSystemGetDriverVersion()}, GPU {pynvml.nvmlDeviceGetName(handle)}")
        pynvml.nvmlShutdown()
    except Exception as error:  # evidence only: never stop the corpus for it
        say(f"nvmlDeviceGetSamples cost not measured: {error!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--only", help="comma-separated workload names (default: all)")
    parser.add_argument("--duration", type=float, default=24.0, help="seconds recorded per workload (default 24)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples (default 0.5, record's default)")
    parser.add_argument("--live", action="store_true", help="run the daemon's own poller (bench/gpu/live_verdicts.py, 1 s interval) beside each workload and write its verdicts at every poll instead of a trace")
    parser.add_argument("--both", action="store_true", help="record the trace and run the daemon's own poller beside it (both files per workload)")
    parser.add_argument("--compact", nargs="+", type=Path, metavar="TRACE", help="only rewrite these recorded traces compactly (rounded, one sample a line) and exit")
    parser.add_argument("--budget", type=float, default=540.0, help="start no recording that would end later than this many seconds after the start (default 540)")
    args = parser.parse_args()
    if args.compact:
        for path in args.compact:
            (args.out / path.name).write_text(format_trace(compact(json.loads(path.read_text()))))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    LIVE[0] = args.live
    BOTH[0] = args.both
    only = set(args.only.split(",")) if args.only else None
    started = time.perf_counter()
    DEADLINE[0] = started + args.budget
    measure_get_samples_cost()
    import torch

    say(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    torch.backends.cuda.matmul.allow_tf32 = True
    groups: list[tuple[str, set[str], Callable[[], None]]] = [
        ("idle", {"idle"}, lambda: idle(torch, args.out, args.duration, args.interval)),
        ("llama", {"llama_train", "llama_train_starved", "llama_generate_b1", "llama_generate_b64", "llama_prefill"}, lambda: llama_workloads(torch, args.out, args.duration, args.interval, only)),
        ("graph_decode", {"graph_decode_b1"}, lambda: graph_decode(torch, args.out, args.duration, args.interval)),
        ("matmul", {"matmul_8192"} | {f"matmul_duty_{label}" for label in DUTY_PERIODS}, lambda: matmul_workloads(torch, args.out, args.duration, args.interval, wanted)),
    ]

    def wanted(name: str) -> bool:
        return only is None or name in only

    def record(name: str, description: str, step: Callable[[Work], None], truth_keys: tuple[str, ...], extra_truth: Callable[[], dict[str, float]] | None = None) -> None:
        record_while(name, description, step, args.out, args.duration, args.interval, truth_keys, extra_truth)

    for group, fleet_members, fleet_run in (*FLEET_GROUPS, *ISSUE34_GROUPS, *ISSUE43_GROUPS):
        groups.append((group, set(fleet_members), functools.partial(fleet_run, torch, record, wanted, say)))
    for name, members, run in groups:
        if only is not None and not members & only:
            continue
        try:
            run()
        except Exception:
            say(f"{name}: failed:\n{traceback.format_exc()}")
        torch.cuda.empty_cache()
    say(f"done in {time.perf_counter() - started:.0f}s")
    (args.out / "corpus.log").write_text("\n".join(LOG) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
