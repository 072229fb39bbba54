#!/usr/bin/python3
"""topk_reference.py: the reference of a sync --compress topk run of the quadratic trainer (SparseLoCo), in
numpy, written from the algorithm (docs/compression.md "The sparse codec"), not from our C code.

Per round, each worker (ids in byte order) takes H AdamW steps from the global parameters theta, then
  delta = theta - x;  e = beta*e + delta
and per chunk of 4096 elements counted from each shard's start (the last one shorter), keeps the k =
max(1, round(density * len)) largest |e| (ties: the lower index), sends each as sign and magnitude code
m = clamp(round(|e| / s), 1, M) with M = 2^(bits-1) (bits 2 by default: M = 2) and s = bf16(max kept
|e| / M), and keeps e - m*s in e. The servers'
mean is g = +0 then + w*v of each worker in order (w = fp32(1/W)), and the step theta = fma(-lr, g, theta)
(outer momentum 0, the codec's default; lr the run's, 2 by default for topk). Prints "shard K DIGEST" per shard and "all DIGEST" (XXH3 of
the fp32 bytes, as dl:{R}:shards and the workers' logs have them).

usage: topk_reference.py --numel N --seed S --workers a,b --rounds R --sync-every H --bounds b0,..,bS
                         [--density 0.02] [--bits 2] [--beta 0.95] [--outer-lr 2]"""
import argparse
import fractions
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quad_numpy import adamw_constants, adamw_step_numpy, bias_corrections, initial_params, problem_numpy, xxh3  # noqa: E402

CHUNK = 4096


def bf16_round(x):
    """fp32 -> bf16 (round to nearest, ties to even) -> fp32, for a finite non-negative x."""
    b = np.array([x], dtype=np.float32).view(np.uint32)[0]
    r = (int(b) + 0x7FFF + ((int(b) >> 16) & 1)) >> 16
    return np.array([r << 16], dtype=np.uint32).view(np.float32)[0]


def topk_chunk(e, k, bits):
    """The chunk's sent values (indices, fp32 values) at `bits` a value and e minus them, in place."""
    mag = np.abs(e).view(np.uint32).astype(np.int64)
    order = np.lexsort((np.arange(len(e)), -mag))  # larger magnitude first, then the lower index
    idx = np.sort(order[:k])
    x = e[idx]
    top = np.float32(2 ** (bits - 1))
    scale = bf16_round(np.max(np.abs(x)) / top)
    if scale > 0:
        m = np.clip(np.rint(np.abs(x) / scale), 1, top).astype(np.float32)
    else:
        m = np.ones(k, dtype=np.float32)
    v = (m * scale).astype(np.float32)
    v = np.where(x < 0, -v, v).astype(np.float32)
    e[idx] = x - v
    return idx, v


def fma32(a, b, c):
    """fp32 fma(a, b, c): exact a*b + c rounded once to fp32 (nearest, ties to even)."""
    exact = fractions.Fraction(float(a)) * fractions.Fraction(float(b)) + fractions.Fraction(float(c))
    near = np.float32(float(exact))
    cands = [np.nextafter(near, np.float32(-np.inf)), near, np.nextafter(near, np.float32(np.inf))]
    def key(y):
        return (abs(fractions.Fraction(float(y)) - exact), int(np.array([y]).view(np.uint32)[0]) & 1)
    return min(cands, key=key)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--numel", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--workers", required=True)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--sync-every", type=int, required=True)
    ap.add_argument("--bounds", required=True)
    ap.add_argument("--density", type=float, default=0.02)
    ap.add_argument("--bits", type=int, default=2)
    ap.add_argument("--beta", type=float, default=0.95)
    ap.add_argument("--outer-lr", type=float, default=2.0)  # coordinator init's default for topk
    a = ap.parse_args()
    ids = sorted(a.workers.split(","), key=lambda s: s.encode())
    bounds = [int(b) for b in a.bounds.split(",")]
    theta = initial_params(a.seed, a.numel)
    k = adamw_constants()
    beta, lr = np.float32(a.beta), np.float32(a.outer_lr)
    w = np.float32(1.0 / len(ids))
    state = {}
    for wid in ids:
        pa, pc = problem_numpy(a.seed, wid, a.numel)
        state[wid] = dict(a=pa, c=pc, m=np.zeros(a.numel, np.float32), v=np.zeros(a.numel, np.float32),
                          e=np.zeros(a.numel, np.float32), step=0)
    for _ in range(a.rounds):
        g = np.zeros(a.numel, dtype=np.float32)
        for wid in ids:
            st = state[wid]
            x = theta.copy()
            for _ in range(a.sync_every):
                st["step"] += 1
                bc1, bc2 = bias_corrections(k, st["step"])
                adamw_step_numpy(x, st["a"] * (x - st["c"]), st["m"], st["v"], bc1, bc2, k)
            st["e"] = (beta * st["e"] + (theta - x)).astype(np.float32)
            for s in range(len(bounds) - 1):
                for lo in range(bounds[s], bounds[s + 1], CHUNK):
                    hi = min(lo + CHUNK, bounds[s + 1])
                    kk = int(min(hi - lo, max(1, round(a.density * (hi - lo)))))
                    idx, v = topk_chunk(st["e"][lo:hi], kk, a.bits)
                    g[lo + idx] = g[lo + idx] + w * v
        for i in np.nonzero(g)[0]:
            theta[i] = fma32(-lr, g[i], theta[i])
    for s in range(len(bounds) - 1):
        print("shard %d %016x" % (s, xxh3(theta[bounds[s]:bounds[s + 1]].tobytes())))
    print("all %016x" % xxh3(theta.tobytes()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
