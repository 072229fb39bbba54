/*
 * outer.h: the outer-optimizer math of DiLoCo, shared by shard-servers (which apply it) and tests.
 *
 * Version v+1 of a shard must be a pure, bit-reproducible function of version v and the
 * participants' pseudo-gradients, so a replacement shard-server recomputes the same bytes. Hence:
 * fp32 throughout, a fixed accumulation order (the caller adds workers sorted by id), no FMA
 * contraction by the compiler (built with -ffp-contract=off) and no reassociation (never -ffast-math).
 * The step rounds as torch.optim.SGD does on its AVX2/AVX-512 and CUDA kernels: g + mu*b and
 * theta - lr*d once each (an explicit, exactly rounded fmaf: outer_fma.h), everything else once per
 * operation. The loops are element-wise, so gcc vectorises them without changing any rounding.
 */
#ifndef DILOCO_OUTER_H
#define DILOCO_OUTER_H

#include <stddef.h>
#include <stdint.h>

/* The outer optimizer a run gets when coordinator init is not told otherwise (tests/tools/ref_quadratic
 * takes the same, so a test that sets neither computes the run's steps). Momentum 0.5, not the DiLoCo
 * paper's 0.9: at the budgets docs/quality.md measures (up to a few hundred outer steps) 0.9 trains worse
 * at every H, sync and async alike. */
#define OUTER_DEFAULT_LR 0.7
#define OUTER_DEFAULT_MOMENTUM 0.5

/* An outer lr above this is warned about (coordinator init, control's update_optimizer): lr 1 moves the
 * parameters to the workers' mean, and on the quadratic (2 workers, H 20, 200 steps) lr 2 ends at loss
 * 0.055, lr 10 with momentum 0.5 at 0.35 (above its start), lr 1e6 at 7e10 from the first round on: the run
 * goes on, learning nothing. */
#define OUTER_LR_WARN 10.0

void outer_sum_zero(float *acc, size_t n);
void outer_sum_add_f32(float *acc, const float *x, size_t n);     /* acc[i] += x[i] */
void outer_sum_add_bf16(float *acc, const uint16_t *x, size_t n); /* acc[i] += bf16_to_f32(x[i]) */
/* acc[i] += w*x[i], the product rounded, then the sum (no torch counterpart: the weighted mean is ours) */
void outer_sum_add_scaled_f32(float *acc, const float *x, float w, size_t n);
void outer_sum_add_scaled_bf16(float *acc, const uint16_t *x, float w, size_t n); /* acc[i] += w*bf16(x[i]) */
/* acc[i] = acc[i] / (float)count: a true division, as torch's mean does; count 0 leaves acc as is. */
void outer_mean_finish(float *acc, size_t n, uint32_t count);

/* torch.optim.SGD(lr, momentum=mu, dampening=0, nesterov) on one tensor, g the averaged pseudo-gradient:
 * first_step: b = g; else b = mu*b + g; d = nesterov ? g + mu*b : b; theta = theta - lr*d, with torch's
 * roundings (mu*b + g twice, g + mu*b and theta - lr*d once: docs/PROTOCOL.md, "Bit-identical to torch").
 * With mu == 0: d = g and b is untouched (may be NULL). theta, b and g must not overlap. */
void outer_sgd_step(float *theta, float *b, int first_step, const float *g, size_t n, float lr, float mu, int nesterov);
/* The same step, out of place: theta_out/b_out get what outer_sgd_step would leave in theta_in/b_in
 * (bit for bit; with mu == 0, b_out is a copy of b_in). One pass instead of a copy and a step: the
 * shard-server's commit keeps the old version intact while it computes the new one. No overlaps. */
void outer_sgd_step_to(float *theta_out, float *b_out, const float *theta_in, const float *b_in, int first_step,
                       const float *g, size_t n, float lr, float mu, int nesterov);

/* The sync commit's usual case in one pass: g = the mean of k >= 1 bf16 pseudo-gradients (deltas[0..k-1],
 * added in that order), then outer_sgd_step_to with it, g kept in registers. Bit for bit what
 * outer_sum_zero, outer_sum_add_bf16 for each delta in order, outer_mean_finish and outer_sgd_step_to
 * give; outer_mean_bf16 gives that g alone (the log entry, written after the parameters are out). */
void outer_mean_step_bf16_to(float *theta_out, float *b_out, const float *theta_in, const float *b_in, int first_step,
                             const uint16_t *const *deltas, uint32_t k, size_t n, float lr, float mu, int nesterov);
void outer_mean_bf16(float *g, const uint16_t *const *deltas, uint32_t k, size_t n);
/* outer_mean_step_bf16_to without its AVX2 build (outer_avx2.c, used when the CPU has AVX2 and FMA):
 * tests compare the two. */
void outer_mean_step_bf16_to_generic(float *theta_out, float *b_out, const float *theta_in, const float *b_in,
                                     int first_step, const uint16_t *const *deltas, uint32_t k, size_t n, float lr,
                                     float mu, int nesterov);

/* 0 if every element is finite; else -1 and the index of the first NaN/Inf in *bad_index (may be NULL). */
int outer_check_finite(const float *x, size_t n, size_t *bad_index);
int outer_check_finite_bf16(const uint16_t *x, size_t n, size_t *bad_index);

/* XXH3_64bits of the raw bytes: compares parameter versions across processes. */
uint64_t digest_f32(const float *x, size_t n);

#endif
