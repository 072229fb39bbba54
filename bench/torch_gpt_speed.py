#!/usr/bin/python3
"""bench/torch_gpt_speed.py: PyTorch's training speed on the GPT of bin/bench-trainer_cuda, for the figure that
benchmark prints beside its own (docs/cuda.md). The model is rediloco.examples.gpt's GPT (the C trainer's
GPT in torch, same shapes); a step is forward, backward, clip_grad_norm_ 1.0 and AdamW, as a user runs it:

  --precision bf16   torch.autocast bf16 on fp32 master weights, scaled_dot_product_attention (flash on a
                     GPU) where torch has it, AdamW fused=True where torch has it
  --precision fp32   fp32, TF32 off;  --precision tf32: fp32 with TF32 matmuls allowed

Prints one line: "torch <version> <precision> <device>: <ms> ms/step, <tokens/s> tokens/s". Exits 77 when
--device cuda and torch sees no GPU."""
import argparse
import inspect
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from rediloco.examples.gpt import GPT  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, default in (("layers", 12), ("heads", 12), ("dim", 768), ("ctx", 1024), ("vocab", 50257),
                          ("batch", 8), ("seq", 1024), ("steps", 20)):
        ap.add_argument("--" + flag, type=int, default=default)
    ap.add_argument("--precision", default="bf16", choices=("bf16", "fp32", "tf32"))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch %s sees no GPU: no torch figure" % torch.__version__)
        return 77
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    model = GPT(a.layers, a.heads, a.dim, a.ctx, a.vocab).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    extra = {"fused": True} if dev.type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **extra)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(dev)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(dev)

    def step():
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(3):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    dt = (time.perf_counter() - t0) / a.steps
    print("torch %s %s %s: %.2f ms/step, %.0f tokens/s (loss %.3f)" % (
        torch.__version__, a.precision, dev.type, dt * 1e3, a.batch * a.seq / dt, loss.item()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
