"""A real PyTorch training loop (a small GPT-like transformer, bf16 autocast, AdamW) that prints its own
FLOP/s: the FLOP of one step counted by torch's FlopCounterMode, times steps per second."""
import sys
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 40.0
torch.manual_seed(0)
dev = "cuda"
d_model, heads, layers, seq, batch, vocab = 1024, 16, 8, 1024, 16, 32000
emb = torch.nn.Embedding(vocab, d_model)
enc = torch.nn.TransformerEncoder(
    torch.nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, batch_first=True, norm_first=True, dropout=0.0),
    layers,
)
head = torch.nn.Linear(d_model, vocab)
model = torch.nn.Sequential(emb, enc, head).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
mask = torch.nn.Transformer.generate_square_subsequent_mask(seq, device=dev)
x = torch.randint(0, vocab, (batch, seq), device=dev)
y = torch.randint(0, vocab, (batch, seq), device=dev)


def step() -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        h = emb(x)
        h = enc(h, mask=mask, is_causal=True)
        loss = torch.nn.functional.cross_entropy(head(h).float().view(-1, vocab), y.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for _ in range(3):
    step()
torch.cuda.synchronize()
with FlopCounterMode(display=False) as counter:
    step()
flop = counter.get_total_flops()
torch.cuda.synchronize()
print(f"job: FLOP per step {flop:.4g}", flush=True)
start = last = time.perf_counter()
steps = window_steps = 0
while time.perf_counter() - start < seconds:
    step()
    steps += 1
    window_steps += 1
    if window_steps == 10:
        torch.cuda.synchronize()
        now = time.perf_counter()
        print(f"job: t={now - start:5.1f}s {window_steps * flop / (now - last) / 1e12:7.1f} TFLOP/s", flush=True)
        last, window_steps = now, 0
torch.cuda.synchronize()
elapsed = time.perf_counter() - start
print(f"job: mean {steps * flop / elapsed / 1e12:.1f} TFLOP/s over {elapsed:.1f}s ({steps} steps)", flush=True)
