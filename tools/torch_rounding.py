#!/usr/bin/python3
"""torch_rounding.py [N ...]: which operations of torch.optim.SGD(lr, momentum, nesterov=True) round
once (a fused multiply-add) with this machine's torch, and which round twice.

For each size N (default 100003) it draws N standard-normal fp32 values per operand and compares, bit
for bit, torch's result with two references: one rounding (the C library's correctly rounded fmaf)
and two roundings (numpy fp32: round(a*b), then round the sum). Operations: the momentum
buf.mul_(mu).add_(g), the Nesterov g.add(buf, alpha=mu), the update p.add_(d, alpha=-lr), and two
whole optim.SGD steps (the second one runs the momentum path). lr 0.7, mu 0.9.

Run it under ATEN_CPU_CAPABILITY=default, avx2 or avx512 to pick torch's CPU kernels (unset: the best
the CPU has that torch enables by default). docs/PROTOCOL.md, "Bit-identical to torch", has what it
printed on the machine the project was developed on."""
import ctypes
import os
import sys

import numpy as np
import torch

libm = ctypes.CDLL("libm.so.6")
libm.fmaf.restype = ctypes.c_float
libm.fmaf.argtypes = [ctypes.c_float] * 3


def once(a, b, c):
    """a*b + c rounded once, element-wise"""
    a, b, c = np.broadcast_arrays(np.float32(a), b, c)
    return np.fromiter((libm.fmaf(float(x), float(y), float(z)) for x, y, z in zip(a, b, c)),
                       dtype=np.float32, count=a.size)


def twice(a, b, c):
    """a*b + c, the product rounded, then the sum (numpy fp32)"""
    return np.float32(a) * b + c


def report(name, got, one, two):
    bits = lambda x: x.view(np.uint32)
    print("  %-32s n=%d  one vs two roundings differ in %d;  torch != one rounding: %d,  torch != two: %d" %
          (name, got.size, int((bits(one) != bits(two)).sum()), int((bits(got) != bits(one)).sum()),
           int((bits(got) != bits(two)).sum())))


def probe(n, rng, lr=0.7, mu=0.9):
    p, b, g, g0 = (rng.standard_normal(n).astype(np.float32) for _ in range(4))
    neg_lr = -np.float32(lr)
    T = lambda x: torch.from_numpy(x.copy())
    report("buf.mul_(mu).add_(g)", T(b).mul_(mu).add_(T(g)).numpy(), once(mu, b, g), twice(mu, b, g))
    report("g.add(buf, alpha=mu)", T(g).add(T(b), alpha=mu).numpy(), once(mu, b, g), twice(mu, b, g))
    report("p.add_(d, alpha=-lr)", T(p).add_(T(g), alpha=-lr).numpy(), once(neg_lr, g, p), twice(neg_lr, g, p))
    P = torch.nn.Parameter(T(p))
    opt = torch.optim.SGD([P], lr=lr, momentum=mu, nesterov=True)
    for grad in (g0, g):
        P.grad = T(grad)
        opt.step()
    report("optim.SGD, 2 steps: momentum", opt.state[P]["momentum_buffer"].numpy(), once(mu, g0, g), twice(mu, g0, g))
    b1 = twice(mu, g0, g)  # the momentum of step 2, as torch computes it; d and p fused or not:
    one = once(neg_lr, once(mu, b1, g), once(neg_lr, once(mu, g0, g0), p))
    two = twice(neg_lr, twice(mu, b1, g), twice(neg_lr, twice(mu, g0, g0), p))
    report("optim.SGD, 2 steps: params", P.detach().numpy(), one, two)


def main():
    print("torch %s, ATEN_CPU_CAPABILITY=%s, %d threads" %
          (torch.__version__, os.environ.get("ATEN_CPU_CAPABILITY", "(unset)"), torch.get_num_threads()))
    rng = np.random.default_rng(1)
    for n in map(int, sys.argv[1:] or ["100003"]):
        probe(n, rng)


if __name__ == "__main__":
    main()
