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

/* The staleness weight of an async submission (coordinator init --staleness-weight): a pseudo-gradient
 * computed from version base and placed at seq (staleness tau = seq - base, both recorded by dl_submit)
 * is scaled by
 *     none:     1
 *     inverse:  min(1, (1 + ref) / (1 + tau))
 *     sqrt:     min(1, sqrt((1 + ref) / (1 + tau)))
 * before it enters the outer step. ref is the staleness that keeps weight 1 (by default the number of
 * workers minus 1: what equal workers see), so a submission no staler than usual is untouched and a
 * straggler's counts less. Computed in double with IEEE division and square root (both exactly rounded),
 * so every server and every replay gets the same weight; the caller rounds it to float once. */
enum { STALE_W_NONE = 0, STALE_W_INVERSE = 1, STALE_W_SQRT = 2 };
double outer_stale_weight(int rule, int64_t tau, int64_t ref);
/* "none", "inverse", "sqrt" -> STALE_W_*, or -1 */
int outer_stale_rule_parse(const char *name);

/* The rule that turns an async submission into the g of the outer step (coordinator init --async-rule):
 *     plain:   g = the (scaled) pseudo-gradient, theta_base - theta_worker, as the worker sent it
 *     rebase:  g = g + a * (theta_now - theta_base), a = --rebase-fraction (default 1): with a = 1 the
 *              pseudo-gradient measured from the version it is
 *              applied to, theta_now - theta_worker, so a stale submission pulls the current version
 *              towards the worker's result instead of repeating progress that version already has
 * theta_base is the version the worker trained from, theta_now the one the submission turns into the
 * next; both are exact fp32 versions, so the rebased g is too (fp32, each operation rounded once: the
 * difference, the product by a (exact for a = 1), the sum; no FMA) and the log keeps it: replay needs
 * nothing more. a < 1 assumes the worker's training would have kept a fraction 1 - a of a difference in
 * its start (0: plain). docs/async.md. */
enum { ASYNC_RULE_PLAIN = 0, ASYNC_RULE_REBASE = 1 };
/* "plain", "rebase" -> ASYNC_RULE_*, or -1 */
int outer_async_rule_parse(const char *name);
/* g[i] += a * (now[i] - base[i]) for n elements. */
void outer_rebase(float *g, const float *now, const float *base, float a, size_t n);

/* --async-lookahead G (docs/async.md, "Starting ahead"): a worker's next interval starts from
 *   start = theta_got + c (theta_got - theta_prev),   c = G * stale / moved,
 * where theta_prev is the version its previous submission was based on, theta_got the one that submission
 * got back, moved their distance in versions and stale the versions the others applied between its base
 * and its place: the others' progress expected while it trains, extrapolated from the last stretch.
 * fp32, each operation rounded once (the difference, the product by c, the sum; no FMA), so the reference
 * recomputes the same start. outer_lookahead_coef is 0 when moved <= 0. */
float outer_lookahead_coef(double g, int64_t stale, int64_t moved);
/* start[i] = got[i] + c * (got[i] - prev[i]) for n elements (start may be prev). */
void outer_lookahead(float *start, const float *got, const float *prev, float c, size_t n);

/* One submission g (already scaled, fp32) for submission number t >= 1. m, buf: n floats each. */
void outer_dn_step(int variant, float *theta, float *m, float *buf, const float *g, size_t n, uint64_t t, uint32_t N,
                   float lr, float mu, int nesterov);
#endif
