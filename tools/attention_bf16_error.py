#!/usr/bin/python3
"""attention_bf16_error.py [SEEDS]: how far the CUDA GPT's gemm attention (--precision bf16 --attention gemm,
worker/cuda/gpt_cuda_bf16.cu) can be from exact causal attention, emulated on the CPU with torch.

The gemm attention rounds q, k, v and dY to bf16 before the products, multiplies with fp32 accumulation,
keeps the softmax and its backward in fp32, and rounds P (for Y = P V and dV = P^T dY) and dS (for dQ, dK)
to bf16. This script does the same roundings in fp32 arithmetic and compares out and dqkv with float64
attention, in the measure of tests/test_cuda_bf16.c (max |a - b| / max |b|; dq, dk, dv together), on the
test's three shapes with standard-normal inputs, SEEDS seeds each (default 30). It prints the range of
the errors per shape: test_cuda_bf16's limit for the gemm attention (2e-2) is chosen from them. What it
cannot show: the GPU's own order of the fp32 sums, a few ulps of fp32, far below the bf16 roundings."""
import sys

import torch


def bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


def attention(q, k, v, dy, rnd, dtype):
    """out, dq, dk, dv of causal attention per head ((B, NH, T, hs) tensors), rnd() applied to each
    product's operands as the gemm attention rounds them"""
    q, k, v, dy = (x.to(dtype) for x in (q, k, v, dy))
    T, hs = q.shape[-2], q.shape[-1]
    scale = 1.0 / hs ** 0.5
    s = (rnd(q) @ rnd(k).transpose(-1, -2)) * scale
    p = torch.softmax(s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")), -1)
    out = rnd(p) @ rnd(v)
    dp = rnd(dy) @ rnd(v).transpose(-1, -2)
    dv = rnd(p).transpose(-1, -2) @ rnd(dy)
    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
    dq = scale * (rnd(ds) @ rnd(k))
    dk = scale * (rnd(ds).transpose(-1, -2) @ rnd(q))
    return out, torch.cat([dq.reshape(-1), dk.reshape(-1), dv.reshape(-1)])


def rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def main():
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    for B, T, C, NH in [(2, 33, 64, 4), (2, 50, 128, 2), (1, 64, 192, 2)]:
        eo, ed = [], []
        for seed in range(seeds):
            g = torch.Generator().manual_seed(seed)
            q, k, v, dy = (torch.randn(B, NH, T, C // NH, generator=g) for _ in range(4))
            ref = attention(q, k, v, dy, lambda x: x, torch.float64)
            got = attention(q, k, v, dy, bf16, torch.float32)
            eo.append(rel(got[0], ref[0]))
            ed.append(rel(got[1], ref[1]))
        print(f"B{B} T{T} C{C} NH{NH} (head {C // NH}), {seeds} seeds: out rel {min(eo):.2e} .. {max(eo):.2e}, "
              f"dqkv rel {min(ed):.2e} .. {max(ed):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
