/*
 * outer_avx2.c: the sync commit's one-pass kernel (outer.h, outer_mean_step_bf16_to) in AVX2 and FMA,
 * with the new momentum written by non-temporal stores.
 *
 * The new momentum is read again only by the next round's commit, so it is written around the cache:
 * an ordinary store first reads every destination line, a quarter of the kernel's memory traffic
 * (docs/benchmarks.md has the measurement). θ' is stored normally: it is hashed and sent
 * right after. The arithmetic is the formula of outer_step_one.h, one IEEE operation per intrinsic in the
 * same order: a fused multiply-add (_mm256_fmadd_ps) exactly where the formula has add_alpha
 * (outer_fma.h), a multiply and an add elsewhere (-ffp-contract=off keeps them apart), so the bits are
 * those of every other kernel; test_outer_step compares them. This file alone is compiled with -mavx2
 * -mfma (Makefile); outer.c calls it only when the CPU has both.
 */
#include "math/outer_avx2.h"

#include <string.h>

#include "math/outer_step_one.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline __m256 widen8(const uint16_t *x)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)x));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* Eight elements from i (b_out + i 32-byte aligned when the momentum is written). */
static inline void step_eight(int variant, float *theta_out, float *b_out, const float *theta_in, const float *b_in,
                              const uint16_t *const *deltas, uint32_t k, size_t i, __m256 neg_lr, __m256 mu,
                              __m256 count)
{
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t p = 0; p < k; p++) acc = _mm256_add_ps(acc, widen8(deltas[p] + i));
    __m256 g = _mm256_div_ps(acc, count), b = _mm256_setzero_ps(), d;
    switch (variant) {
    case STEP_PLAIN: d = g; break;
    case STEP_FIRST_NESTEROV:
        b = g;
        d = _mm256_fmadd_ps(mu, b, g);
        break;
    case STEP_FIRST:
        b = g;
        d = b;
        break;
    case STEP_NESTEROV:
        b = _mm256_add_ps(_mm256_mul_ps(mu, _mm256_loadu_ps(b_in + i)), g);
        d = _mm256_fmadd_ps(mu, b, g);
        break;
    default:
        b = _mm256_add_ps(_mm256_mul_ps(mu, _mm256_loadu_ps(b_in + i)), g);
        d = b;
        break;
    }
    if (variant != STEP_PLAIN) _mm256_stream_ps(b_out + i, b);
    _mm256_storeu_ps(theta_out + i, _mm256_fmadd_ps(neg_lr, d, _mm256_loadu_ps(theta_in + i)));
}

static inline void run(int variant, float *theta_out, float *b_out, const float *theta_in, const float *b_in,
                       const uint16_t *const *deltas, uint32_t k, size_t n, float lr, float mu)
{
    size_t i = 0;
    /* scalar up to the first 32-byte boundary of the momentum (non-temporal stores need it) */
    if (variant != STEP_PLAIN)
        for (; i < n && ((uintptr_t)(b_out + i) & 31u) != 0; i++)
            mean_step_one(variant, theta_out, b_out, theta_in, b_in, deltas, k, i, lr, mu);
    __m256 vneg_lr = _mm256_set1_ps(-lr), vmu = _mm256_set1_ps(mu), vk = _mm256_set1_ps((float)k);
    for (; i + 8 <= n; i += 8) step_eight(variant, theta_out, b_out, theta_in, b_in, deltas, k, i, vneg_lr, vmu, vk);
    for (; i < n; i++) mean_step_one(variant, theta_out, b_out, theta_in, b_in, deltas, k, i, lr, mu);
    _mm_sfence(); /* the streamed stores are visible before anyone reads the momentum */
}

void outer_mean_step_bf16_to_avx2(float *theta_out, float *b_out, const float *theta_in, const float *b_in,
                                  int first_step, const uint16_t *const *deltas, uint32_t k, size_t n, float lr,
                                  float mu, int nesterov)
{
    int v = step_variant(first_step, mu, nesterov);
    if (v == STEP_PLAIN) {
        run(STEP_PLAIN, theta_out, b_out, theta_in, b_in, deltas, k, n, lr, mu);
        if (b_out != NULL && b_in != NULL) memcpy(b_out, b_in, n * sizeof *b_out);
    } else if (v == STEP_FIRST_NESTEROV) {
        run(STEP_FIRST_NESTEROV, theta_out, b_out, theta_in, b_in, deltas, k, n, lr, mu);
    } else if (v == STEP_FIRST) {
        run(STEP_FIRST, theta_out, b_out, theta_in, b_in, deltas, k, n, lr, mu);
    } else if (v == STEP_NESTEROV) {
        run(STEP_NESTEROV, theta_out, b_out, theta_in, b_in, deltas, k, n, lr, mu);
    } else {
        run(STEP_MOMENTUM, theta_out, b_out, theta_in, b_in, deltas, k, n, lr, mu);
    }
}

#else /* not built with -mavx2 -mfma (another architecture; outer.c does not call it there): plain scalar */

void outer_mean_step_bf16_to_avx2(float *theta_out, float *b_out, const float *theta_in, const float *b_in,
                                  int first_step, const uint16_t *const *deltas, uint32_t k, size_t n, float lr,
                                  float mu, int nesterov)
{
    int variant = step_variant(first_step, mu, nesterov);
    for (size_t i = 0; i < n; i++) mean_step_one(variant, theta_out, b_out, theta_in, b_in, deltas, k, i, lr, mu);
    if (variant == STEP_PLAIN && b_out != NULL && b_in != NULL) memcpy(b_out, b_in, n * sizeof *b_out);
}

#endif
