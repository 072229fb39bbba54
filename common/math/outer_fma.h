/*
 * outer_fma.h: the one operation of the outer step rounded once (a fused multiply-add), as torch does.
 *
 * torch.optim.SGD(lr, momentum=mu, nesterov) computes, per element (torch/optim/sgd.py):
 *     buf.mul_(mu).add_(g)      two operations, two roundings: b = round(round(mu*b) + g)
 *     g.add(buf, alpha=mu)      one operation: d = g + mu*b
 *     p.add_(d, alpha=-lr)      one operation: p = p - lr*d
 * and torch's a.add(b, alpha) is a fused multiply-add (one rounding) in its AVX2 and AVX-512 CPU
 * kernels, their scalar tails included, and on CUDA; only its baseline CPU build
 * (ATEN_CPU_CAPABILITY=default) rounds twice, so torch's own bits depend on the machine. We round those
 * two operations once, with fmaf: an IEEE 754 fused multiply-add is exactly rounded, so it gives one
 * value on every machine, whether it runs as a hardware instruction (the OUTER_HOT clones, the AVX2
 * build in outer_avx2.c) or as the C library's correctly rounded fmaf (the baseline build). Every other
 * operation rounds on its own: the files are compiled with -ffp-contract=off. The measurements behind
 * this are in docs/PROTOCOL.md, "Bit-identical to torch".
 */
#ifndef DILOCO_OUTER_FMA_H
#define DILOCO_OUTER_FMA_H

#include <math.h>

#include "base/clones.h"

/* torch's a.add(b, alpha=alpha) on its AVX2/AVX-512/CUDA kernels: a + alpha*b rounded once */
static inline float add_alpha(float a, float b, float alpha)
{
    return fmaf(alpha, b, a);
}

/* The hot kernels are compiled twice, for x86-64-v3 (AVX2 and FMA: fmaf becomes one instruction and
 * vectorises) and for the x86-64 baseline (fmaf calls the C library), and the loader picks one (gcc
 * function multiversioning, common/base/clones.h). fmaf is exactly rounded, so both give the same bits. */
#define OUTER_HOT HOT_CLONES
/* The loops an OUTER_HOT kernel runs are inlined into each of its builds: called, they would run their
 * own baseline build (fmaf through the C library, one element at a time). */
#define OUTER_INLINE static inline __attribute__((always_inline))

#endif
