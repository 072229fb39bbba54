/* outer_dn.h: Delayed Nesterov, the outer step of async DiLoCo (one submission at a time).
 *
 * Applying full Nesterov momentum to every single, possibly stale submission amplifies staleness.
 * Delayed Nesterov keeps a buffer of the last N submissions and only moves the momentum every N-th.
 * Two forms, both element-wise and bit-reproducible like outer.h (fp32, no FMA contraction). Each
 * operation rounds once, and so does each a + alpha*b written below as torch's SGD computes it
 * (outer_fma.h): theta - lr*x (theta.add_(x, alpha=-lr)) and g/N + mu*m (torch's Nesterov
 * g.add(m, alpha=mu)); mu*m + x rounds twice (torch's m.mul_(mu).add_(x)):
 *
 *  paper (default; Async Local-SGD, arXiv 2401.09135, Algorithm 3), t = 1-based submission count:
 *      buf += g
 *      if t % N == 0:  m = mu*m + buf/N;  theta -= lr*(g/N + mu*m);  buf = 0
 *      else:           theta -= lr*g/N
 *  forgather (to reproduce Forgather runs; it applies the first N-1 submissions twice, once plainly
 *  and again inside the averaged momentum step):
 *      buf += g
 *      if t % N != 0:  theta -= lr*g
 *      else:           gbar = buf/N;  torch SGD(nesterov) step with gbar (b = gbar at the first one);
 *                      buf = 0
 * The buffer and the momentum live with the shard's state (snapshot + log replay), and t is the
 * shard's version + 1, so a shard-server crash loses nothing. See docs/async.md. */
#ifndef DILOCO_OUTER_DN_H
#define DILOCO_OUTER_DN_H
#include <stddef.h>
#include <stdint.h>

enum { DN_PAPER = 0, DN_FORGATHER = 1 };

/* One submission g (already scaled, fp32) for submission number t >= 1. m, buf: n floats each. */
void outer_dn_step(int variant, float *theta, float *m, float *buf, const float *g, size_t n, uint64_t t, uint32_t N,
                   float lr, float mu, int nesterov);
#endif
