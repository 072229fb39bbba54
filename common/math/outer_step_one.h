/*
 * outer_step_one.h: the one-pass commit kernel's formula for one element (outer.h,
 * outer_mean_step_bf16_to), shared by its builds in outer.c (portable, vectorised by gcc) and
 * outer_avx2.c (intrinsics): their scalar heads and tails run exactly this, and their vector bodies
 * the same operations in the same order, so every build gives the same bits.
 */
#ifndef DILOCO_OUTER_STEP_ONE_H
#define DILOCO_OUTER_STEP_ONE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "math/outer_fma.h"

/* The step variants; each build compiles one branch-free loop per variant. */
enum { STEP_PLAIN, STEP_FIRST_NESTEROV, STEP_FIRST, STEP_NESTEROV, STEP_MOMENTUM };

static inline int step_variant(int first_step, float mu, int nesterov)
{
    if (mu == 0.0f) return STEP_PLAIN;
    if (first_step) return nesterov ? STEP_FIRST_NESTEROV : STEP_FIRST;
    return nesterov ? STEP_NESTEROV : STEP_MOMENTUM;
}

/* bf16 bits -> float (exact): the same widening as bf16_to_f32(), inline for the loops */
static inline float bf16_widen(uint16_t x)
{
    uint32_t bits = (uint32_t)x << 16;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* g[i]: +0, then each Δ added in order, then divided by k */
static inline float mean_one(const uint16_t *const *deltas, uint32_t k, size_t i)
{
    float acc = 0.0f;
    for (uint32_t p = 0; p < k; p++) acc = acc + bf16_widen(deltas[p][i]);
    return acc / (float)k;
}

/* b' = first ? g : mu*b + g; d = nesterov ? g + mu*b' : b'; θ' = θ - lr*d (mu 0: d = g, b untouched).
 * mu*b + g rounds twice, g + mu*b' and θ - lr*d once (outer_fma.h: as torch's SGD). */
static inline void mean_step_one(int variant, float *theta_out, float *b_out, const float *theta_in, const float *b_in,
                                 const uint16_t *const *deltas, uint32_t k, size_t i, float lr, float mu)
{
    float g = mean_one(deltas, k, i), b = 0.0f, d;
    switch (variant) {
    case STEP_PLAIN: d = g; break;
    case STEP_FIRST_NESTEROV:
        b = g;
        d = add_alpha(g, b, mu);
        break;
    case STEP_FIRST:
        b = g;
        d = b;
        break;
    case STEP_NESTEROV:
        b = mu * b_in[i] + g;
        d = add_alpha(g, b, mu);
        break;
    default:
        b = mu * b_in[i] + g;
        d = b;
        break;
    }
    if (variant != STEP_PLAIN) b_out[i] = b;
    theta_out[i] = add_alpha(theta_in[i], d, -lr);
}

#endif
