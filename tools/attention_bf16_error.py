#!/usr/bin/python3
"""attention_bf16_error.py [gemm|flash|emu] [SEEDS]: how far the CUDA GPT's bf16 attentions can be from exact
causal attention, emulated on the CPU with torch; the tests' limits are chosen from what it prints.

gemm (the default; --precision bf16 --attention gemm, worker/cuda/gpt_cuda_bf16.cu): q, k, v and dY are
rounded to bf16 before the products, the products accumulate in fp32, the softmax and its backward are
fp32, and P (for Y = P V and dV = P^T dY) and dS (for dQ, dK) are rounded to bf16. This script does the
same roundings in fp32 arithmetic and compares out and dqkv with float64 attention, in the measure of
tests/test_cuda_bf16.c (max |a - b| / max |b|; dq, dk, dv together, and the worst of them measured alone), on that test's three shapes with
standard-normal inputs, SEEDS seeds each (default 30), and prints the range of the errors per shape.

flash (--attention flash, worker/cuda/flash_mma.cuh): the same roundings but one: the forward rounds the
unnormalised p = exp(s - m) and divides by the fp32 sum of the unrounded p afterwards (online softmax);
the backward recomputes the normalised P from lse, as gemm keeps it, and takes D = rowsum(dY * out) from
its own out (the fused kernels' D) where gemm has rowsum(P dP). (The kernel's m is the running max
of the key tiles seen so far: it changes which value each p is before rounding, not the size of the
rounding, 2^-9 relative.) On test_cuda_bf16's flash shapes.

emu (tests/test_flash_emu.cc, the flash kernels under the CPU lane emulator): q, k, v and dY are bf16
values already and the float64 reference is computed from them, so only P and dS are rounded; on that
test's shapes.

What it cannot show: the GPU's own order of the fp32 sums, a few ulps of fp32, far below the bf16
roundings."""
import sys

import torch


def bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


def attention(q, k, v, dy, rnd, dtype, rnd_in=None, online=False):
    """out, dq, dk, dv of causal attention per head ((B, NH, T, hs) tensors), rnd() applied to each
    product's operands as the bf16 attentions round them (rnd_in to q, k, v, dy: rnd unless given);
    online: the forward rounds exp(s - rowmax) and divides by its unrounded sum (flash)"""
    rnd_in = rnd_in or rnd
    q, k, v, dy = (rnd_in(x.to(dtype)) for x in (q, k, v, dy))
    T, hs = q.shape[-2], q.shape[-1]
    scale = 1.0 / hs ** 0.5
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    p = torch.softmax(s, -1)
    if online:
        e = torch.exp(s - s.max(-1, keepdim=True).values)
        out = (rnd(e) @ v) / e.sum(-1, keepdim=True)
    else:
        out = rnd(p) @ v
    dp = dy @ v.transpose(-1, -2)
    dv = rnd(p).transpose(-1, -2) @ dy
    # D: flash takes rowsum(dY * out) of its own (rounded) out, as the fused kernels (FlashAttention's
    # form); gemm the softmax backward's rowsum(P dP)
    ds = p * (dp - ((dy * out) if online else (p * dp)).sum(-1, keepdim=True))
    dq = scale * (rnd(ds) @ k)
    dk = scale * (rnd(ds).transpose(-1, -2) @ q)
    return out, dq, dk, dv


def rel(a, b):
    """max |a - b| / max |b|; the max |a - b| itself where b is all zero (the C tests' measure)"""
    num, den = (a.double() - b.double()).abs().max().item(), b.double().abs().max().item()
    return num / den if den > 0 else num


# (B, T, C, NH) per mode: test_cuda_bf16's gemm and flash shapes, test_flash_emu's cases
SHAPES = {
    "gemm": [(2, 33, 64, 4), (2, 50, 128, 2), (1, 64, 192, 2)],
    "flash": [(2, 33, 64, 4), (2, 100, 64, 2), (1, 130, 128, 2), (1, 70, 256, 2)],
    "emu": [(1, 17, 32, 2), (2, 100, 128, 2), (1, 130, 256, 2), (2, 64, 32, 2), (1, 1, 128, 2), (1, 70, 96, 2),
            (1, 129, 96, 1)],
}


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].isdigit() else "gemm"
    args = [a for a in sys.argv[1:] if a.isdigit()]
    seeds = int(args[0]) if args else 30
    if mode not in SHAPES:
        print(f"usage: attention_bf16_error.py [gemm|flash|emu] [SEEDS]; unknown mode {mode}", file=sys.stderr)
        return 2
    for B, T, C, NH in SHAPES[mode]:
        eo, ed, ep = [], [], []
        for seed in range(seeds):
            g = torch.Generator().manual_seed(seed)
            q, k, v, dy = (torch.randn(B, NH, T, C // NH, generator=g) for _ in range(4))
            if mode == "emu":
                q, k, v, dy = (bf16(x) for x in (q, k, v, dy))
            ref = attention(q, k, v, dy, lambda x: x, torch.float64)
            got = attention(q, k, v, dy, bf16, torch.float32, (lambda x: x) if mode == "emu" else None,
                            mode != "gemm")
            eo.append(rel(got[0], ref[0]))
            ed.append(rel(torch.cat([x.reshape(-1) for x in got[1:]]), torch.cat([x.reshape(-1) for x in ref[1:]])))
            ep.append(max(rel(got[i], ref[i]) for i in (1, 2, 3)))
        print(f"{mode} B{B} T{T} C{C} NH{NH} (head {C // NH}), {seeds} seeds: out rel {min(eo):.2e} .. {max(eo):.2e}, "
              f"dqkv rel {min(ed):.2e} .. {max(ed):.2e}, worst of dq, dk, dv alone {max(ep):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
