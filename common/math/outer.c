/*
 * outer.c: the outer-optimizer kernels of outer.h. Each kernel is one element-wise formula (a static
 * inline *_one function) applied over restrict pointers; the expression is exactly the documented
 * scalar formula, each operation rounded once (add_alpha, outer_fma.h, where torch fuses a + alpha*b),
 * so vectorised and scalar code give identical bits.
 *
 * Loops run in blocks of OUTER_LANES elements plus a scalar tail: at -O2, gcc 12 vectorises only
 * loops whose trip count is known (its "very cheap" cost model), and the fixed-size inner loop is one.
 */
#include "base/util.h"
#include "math/hash.h"
#include "math/outer.h"
#include "math/outer_avx2.h"
#include "math/outer_fma.h"
#include "math/outer_step_one.h"

#include <string.h>
#include <xxhash.h>

#define OUTER_LANES 16

/* The hot kernels of the shard-server's commit and of the checks are OUTER_HOT (outer_fma.h): compiled
 * for x86-64-v3 and for the baseline. Every kernel is element-wise with the same scalar formula, no
 * contraction (-ffp-contract=off) and fmaf only where written, so both give the same bits;
 * test_outer_step compares them with scalar code. */

/* Finite checks scan in blocks: a branch-free OR over a block vectorises, and only a block that
 * contains a bad value is rescanned to find the first index. */
#define FINITE_BLOCK 1024

void outer_sum_zero(float *acc, size_t n)
{
    memset(acc, 0, n * sizeof *acc);
}

static inline void add_one(float *restrict acc, const float *restrict x, size_t i)
{
    acc[i] = acc[i] + x[i];
}

OUTER_HOT void outer_sum_add_f32(float *restrict acc, const float *restrict x, size_t n)
{
    size_t i = 0;
    for (; i + OUTER_LANES <= n; i += OUTER_LANES)
        for (size_t j = 0; j < OUTER_LANES; j++) add_one(acc, x, i + j);
    for (; i < n; i++) add_one(acc, x, i);
}

/* Same widening as bf16_to_f32(), inline here because an out-of-line call stops vectorisation. */
static inline void add_bf16_one(float *restrict acc, const uint16_t *restrict x, size_t i)
{
    uint32_t bits = (uint32_t)x[i] << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    acc[i] = acc[i] + v;
}

OUTER_HOT void outer_sum_add_bf16(float *restrict acc, const uint16_t *restrict x, size_t n)
{
    size_t i = 0;
    for (; i + OUTER_LANES <= n; i += OUTER_LANES)
        for (size_t j = 0; j < OUTER_LANES; j++) add_bf16_one(acc, x, i + j);
    for (; i < n; i++) add_bf16_one(acc, x, i);
}

static inline void add_scaled_one(float *restrict acc, const float *restrict x, float w, size_t i)
{
    acc[i] = acc[i] + w * x[i];
}

void outer_sum_add_scaled_f32(float *restrict acc, const float *restrict x, float w, size_t n)
{
    size_t i = 0;
    for (; i + OUTER_LANES <= n; i += OUTER_LANES)
        for (size_t j = 0; j < OUTER_LANES; j++) add_scaled_one(acc, x, w, i + j);
    for (; i < n; i++) add_scaled_one(acc, x, w, i);
}

static inline void add_scaled_bf16_one(float *restrict acc, const uint16_t *restrict x, float w, size_t i)
{
    uint32_t bits = (uint32_t)x[i] << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    acc[i] = acc[i] + w * v;
}

void outer_sum_add_scaled_bf16(float *restrict acc, const uint16_t *restrict x, float w, size_t n)
{
    size_t i = 0;
    for (; i + OUTER_LANES <= n; i += OUTER_LANES)
        for (size_t j = 0; j < OUTER_LANES; j++) add_scaled_bf16_one(acc, x, w, i + j);
    for (; i < n; i++) add_scaled_bf16_one(acc, x, w, i);
}

static inline void div_one(float *restrict acc, float c, size_t i)
{
    acc[i] = acc[i] / c;
}

OUTER_HOT void outer_mean_finish(float *restrict acc, size_t n, uint32_t count)
{
    if (count == 0) return;
    float c = (float)count;
    size_t i = 0;
    for (; i + OUTER_LANES <= n; i += OUTER_LANES)
        for (size_t j = 0; j < OUTER_LANES; j++) div_one(acc, c, i + j);
    for (; i < n; i++) div_one(acc, c, i);
}

/* theta = theta - lr*d (one rounding: torch's theta.add_(d, alpha=-lr)) */
static inline void descend_one(float *restrict theta, const float *restrict d, float lr, size_t i)
{
    theta[i] = add_alpha(theta[i], d[i], -lr);
}

OUTER_INLINE void descend(float *restrict theta, const float *restrict d, size_t n, float lr)
{
    size_t i = 0;
    for (; i + OUTER_LANES <= n; i += OUTER_LANES)
        for (size_t j = 0; j < OUTER_LANES; j++) descend_one(theta, d, lr, i + j);
    for (; i < n; i++) descend_one(theta, d, lr, i);
}

/* b = mu*b + g (two roundings: torch's b.mul_(mu).add_(g)) */
static inline void momentum_one(float *restrict b, const float *restrict g, float mu, size_t i)
{
    b[i] = mu * b[i] + g[i];
}

OUTER_INLINE void momentum_update(float *restrict b, int first_step, const float *restrict g, size_t n, float mu)
{
    if (first_step) {
        memcpy(b, g, n * sizeof *b);
        return;
    }
    size_t i = 0;
    for (; i + OUTER_LANES <= n; i += OUTER_LANES)
        for (size_t j = 0; j < OUTER_LANES; j++) momentum_one(b, g, mu, i + j);
    for (; i < n; i++) momentum_one(b, g, mu, i);
}

/* d = g + mu*b; theta = theta - lr*d (one rounding each: torch's g.add(b, alpha=mu), theta.add_(d, alpha=-lr)) */
static inline void nesterov_one(float *restrict theta, const float *restrict b, const float *restrict g, float lr,
                                float mu, size_t i)
{
    float d = add_alpha(g[i], b[i], mu);
    theta[i] = add_alpha(theta[i], d, -lr);
}

OUTER_INLINE void apply_nesterov(float *restrict theta, const float *restrict b, const float *restrict g, size_t n,
                                 float lr, float mu)
{
    size_t i = 0;
    for (; i + OUTER_LANES <= n; i += OUTER_LANES)
        for (size_t j = 0; j < OUTER_LANES; j++) nesterov_one(theta, b, g, lr, mu, i + j);
    for (; i < n; i++) nesterov_one(theta, b, g, lr, mu, i);
}

OUTER_HOT void outer_sgd_step(float *restrict theta, float *restrict b, int first_step, const float *restrict g,
                              size_t n, float lr, float mu, int nesterov)
{
    if (mu == 0.0f) {
        descend(theta, g, n, lr);
        return;
    }
    momentum_update(b, first_step, g, n, mu);
    if (nesterov)
        apply_nesterov(theta, b, g, n, lr, mu);
    else
        descend(theta, b, n, lr);
}

/* Out of place: the same *_one formulas, reading the old values from the *_in arrays. */
static inline void descend_to_one(float *restrict out, const float *restrict in, const float *restrict d, float lr,
                                  size_t i)
{
    out[i] = add_alpha(in[i], d[i], -lr);
}

static inline void momentum_to_one(float *restrict out, const float *restrict in, const float *restrict g, float mu,
                                   size_t i)
{
    out[i] = mu * in[i] + g[i];
}

static inline void nesterov_to_one(float *restrict out, const float *restrict in, const float *restrict b,
                                   const float *restrict g, float lr, float mu, size_t i)
{
    float d = add_alpha(g[i], b[i], mu);
    out[i] = add_alpha(in[i], d, -lr);
}

OUTER_HOT void outer_sgd_step_to(float *restrict theta_out, float *restrict b_out, const float *restrict theta_in,
                                 const float *restrict b_in, int first_step, const float *restrict g, size_t n,
                                 float lr, float mu, int nesterov)
{
    size_t i = 0;
    if (mu == 0.0f) {
        for (; i + OUTER_LANES <= n; i += OUTER_LANES)
            for (size_t j = 0; j < OUTER_LANES; j++) descend_to_one(theta_out, theta_in, g, lr, i + j);
        for (; i < n; i++) descend_to_one(theta_out, theta_in, g, lr, i);
        if (b_out != NULL && b_in != NULL) memcpy(b_out, b_in, n * sizeof *b_out);
        return;
    }
    if (first_step)
        memcpy(b_out, g, n * sizeof *b_out);
    else {
        for (; i + OUTER_LANES <= n; i += OUTER_LANES)
            for (size_t j = 0; j < OUTER_LANES; j++) momentum_to_one(b_out, b_in, g, mu, i + j);
        for (; i < n; i++) momentum_to_one(b_out, b_in, g, mu, i);
    }
    i = 0;
    if (nesterov) {
        for (; i + OUTER_LANES <= n; i += OUTER_LANES)
            for (size_t j = 0; j < OUTER_LANES; j++) nesterov_to_one(theta_out, theta_in, b_out, g, lr, mu, i + j);
        for (; i < n; i++) nesterov_to_one(theta_out, theta_in, b_out, g, lr, mu, i);
    } else {
        for (; i + OUTER_LANES <= n; i += OUTER_LANES)
            for (size_t j = 0; j < OUTER_LANES; j++) descend_to_one(theta_out, theta_in, b_out, lr, i + j);
        for (; i < n; i++) descend_to_one(theta_out, theta_in, b_out, lr, i);
    }
}

/* The sync commit in one pass (outer.h): per block of lanes, the mean of the k bf16 pseudo-gradients
 * in registers, then the step: the formula of outer_step_one.h, lane by lane (the scalar tail runs it
 * as is). The variant is a compile-time constant of each mean_step_run call, so every variant gets its
 * own branch-free loop. */
OUTER_INLINE void mean_lanes(float *restrict g, const uint16_t *const *deltas, uint32_t k, float c, size_t i)
{
    for (size_t j = 0; j < OUTER_LANES; j++) g[j] = 0.0f;
    for (uint32_t p = 0; p < k; p++) {
        const uint16_t *restrict x = deltas[p] + i;
        for (size_t j = 0; j < OUTER_LANES; j++) g[j] = g[j] + bf16_widen(x[j]);
    }
    for (size_t j = 0; j < OUTER_LANES; j++) g[j] = g[j] / c;
}

OUTER_INLINE void step_lanes(int variant, float *restrict theta_out, float *restrict b_out,
                             const float *restrict theta_in, const float *restrict b_in, const float *restrict g,
                             float lr, float mu)
{
    for (size_t j = 0; j < OUTER_LANES; j++) {
        float b = 0.0f, d;
        switch (variant) {
        case STEP_PLAIN: d = g[j]; break;
        case STEP_FIRST_NESTEROV:
            b = g[j];
            d = add_alpha(g[j], b, mu);
            break;
        case STEP_FIRST:
            b = g[j];
            d = b;
            break;
        case STEP_NESTEROV:
            b = mu * b_in[j] + g[j];
            d = add_alpha(g[j], b, mu);
            break;
        default:
            b = mu * b_in[j] + g[j];
            d = b;
            break;
        }
        if (variant != STEP_PLAIN) b_out[j] = b;
        theta_out[j] = add_alpha(theta_in[j], d, -lr);
    }
}

OUTER_INLINE void mean_step_run(int variant, float *restrict theta_out, float *restrict b_out,
                                const float *restrict theta_in, const float *restrict b_in,
                                const uint16_t *const *deltas, uint32_t k, size_t n, float lr, float mu)
{
    size_t i = 0;
    for (; i + OUTER_LANES <= n; i += OUTER_LANES) {
        float g[OUTER_LANES];
        mean_lanes(g, deltas, k, (float)k, i);
        step_lanes(variant, theta_out + i, variant == STEP_PLAIN ? NULL : b_out + i, theta_in + i,
                   variant >= STEP_NESTEROV ? b_in + i : NULL, g, lr, mu);
    }
    for (; i < n; i++) mean_step_one(variant, theta_out, b_out, theta_in, b_in, deltas, k, i, lr, mu);
}

OUTER_HOT void outer_mean_step_bf16_to_generic(float *restrict theta_out, float *restrict b_out,
                                               const float *restrict theta_in, const float *restrict b_in,
                                               int first_step, const uint16_t *const *deltas, uint32_t k, size_t n,
                                               float lr, float mu, int nesterov)
{
    int v = step_variant(first_step, mu, nesterov);
    if (v == STEP_PLAIN) {
        mean_step_run(STEP_PLAIN, theta_out, b_out, theta_in, b_in, deltas, k, n, lr, mu);
        if (b_out != NULL && b_in != NULL) memcpy(b_out, b_in, n * sizeof *b_out);
    } else if (v == STEP_FIRST_NESTEROV) {
        mean_step_run(STEP_FIRST_NESTEROV, theta_out, b_out, theta_in, b_in, deltas, k, n, lr, mu);
    } else if (v == STEP_FIRST) {
        mean_step_run(STEP_FIRST, theta_out, b_out, theta_in, b_in, deltas, k, n, lr, mu);
    } else if (v == STEP_NESTEROV) {
        mean_step_run(STEP_NESTEROV, theta_out, b_out, theta_in, b_in, deltas, k, n, lr, mu);
    } else {
        mean_step_run(STEP_MOMENTUM, theta_out, b_out, theta_in, b_in, deltas, k, n, lr, mu);
    }
}

void outer_mean_step_bf16_to(float *theta_out, float *b_out, const float *theta_in, const float *b_in, int first_step,
                             const uint16_t *const *deltas, uint32_t k, size_t n, float lr, float mu, int nesterov)
{
    if (cpu_has_avx2_fma())
        outer_mean_step_bf16_to_avx2(theta_out, b_out, theta_in, b_in, first_step, deltas, k, n, lr, mu, nesterov);
    else
        outer_mean_step_bf16_to_generic(theta_out, b_out, theta_in, b_in, first_step, deltas, k, n, lr, mu, nesterov);
}

OUTER_HOT void outer_mean_bf16(float *restrict g, const uint16_t *const *deltas, uint32_t k, size_t n)
{
    float c = (float)k;
    size_t i = 0;
    for (; i + OUTER_LANES <= n; i += OUTER_LANES) mean_lanes(g + i, deltas, k, c, i);
    for (; i < n; i++) g[i] = mean_one(deltas, k, i);
}

static inline int f32_nonfinite(const float *x, size_t i)
{
    uint32_t bits;
    memcpy(&bits, &x[i], sizeof bits);
    return (bits & 0x7f800000u) == 0x7f800000u;
}

static inline int bf16_nonfinite(const uint16_t *x, size_t i)
{
    return (x[i] & 0x7f80u) == 0x7f80u;
}

/* 1 if any of the FINITE_BLOCK elements at x is NaN or infinite. The trip count is a constant so gcc
 * vectorises the OR at -O2; the caller rescans a bad block element by element for the index. */
static inline int f32_block_bad(const float *x)
{
    int bad = 0;
    for (size_t i = 0; i < FINITE_BLOCK; i++) bad |= f32_nonfinite(x, i);
    return bad;
}

static inline int bf16_block_bad(const uint16_t *x)
{
    int bad = 0;
    for (size_t i = 0; i < FINITE_BLOCK; i++) bad |= bf16_nonfinite(x, i);
    return bad;
}

OUTER_HOT int outer_check_finite(const float *x, size_t n, size_t *bad_index)
{
    size_t start = 0;
    while (start + FINITE_BLOCK <= n && !f32_block_bad(x + start)) start += FINITE_BLOCK;
    for (size_t i = start; i < n; i++) {
        if (f32_nonfinite(x, i)) {
            if (bad_index != NULL) *bad_index = i;
            return -1;
        }
    }
    return 0;
}

OUTER_HOT int outer_check_finite_bf16(const uint16_t *x, size_t n, size_t *bad_index)
{
    size_t start = 0;
    while (start + FINITE_BLOCK <= n && !bf16_block_bad(x + start)) start += FINITE_BLOCK;
    for (size_t i = start; i < n; i++) {
        if (bf16_nonfinite(x, i)) {
            if (bad_index != NULL) *bad_index = i;
            return -1;
        }
    }
    return 0;
}

uint64_t digest_f32(const float *x, size_t n)
{
    return hash64(x, n * sizeof *x);
}
