/*
 * bf16.c: the fp32 <-> bf16 conversions of bf16.h. Type punning goes through memcpy (well defined
 * in C11 and compiled to plain register moves); the NaN test is a select rather than a branch so the
 * bulk loops vectorise.
 *
 * The bulk loops run in blocks of BF16_LANES elements with a scalar tail: at -O2, gcc 12 vectorises
 * only loops whose trip count is known (its "very cheap" cost model), and the fixed-size inner loop
 * is such a loop.
 */
#include "math/bf16.h"

#include <string.h>

#define BF16_LANES 16

static inline uint16_t bf16_from_bits(uint32_t b)
{
    /* Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry out of the
     * mantissa correctly bumps the exponent, up to Inf for values beyond the largest bf16. */
    uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    /* Truncating a NaN could clear every mantissa bit and yield Inf; forcing the quiet bit prevents it. */
    uint32_t quiet_nan = (b >> 16) | 0x0040u;
    int is_nan = (b & 0x7fffffffu) > 0x7f800000u;
    return (uint16_t)(is_nan ? quiet_nan : rounded);
}

uint16_t bf16_from_f32(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return bf16_from_bits(b);
}

float bf16_to_f32(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static inline void encode_one(const float *restrict src, uint16_t *restrict dst, size_t i)
{
    uint32_t b;
    memcpy(&b, &src[i], sizeof b);
    dst[i] = bf16_from_bits(b);
}

static inline void decode_one(const uint16_t *restrict src, float *restrict dst, size_t i)
{
    uint32_t b = (uint32_t)src[i] << 16;
    memcpy(&dst[i], &b, sizeof b);
}

void bf16_encode(const float *restrict src, uint16_t *restrict dst, size_t n)
{
    size_t i = 0;
    for (; i + BF16_LANES <= n; i += BF16_LANES)
        for (size_t j = 0; j < BF16_LANES; j++) encode_one(src, dst, i + j);
    for (; i < n; i++) encode_one(src, dst, i);
}

static inline int encode_diff_one(const float *restrict a, const float *restrict b, uint16_t *restrict dst, size_t i)
{
    float d = a[i] - b[i];
    uint32_t bits;
    memcpy(&bits, &d, sizeof bits);
    dst[i] = bf16_from_bits(bits);
    return (bits & 0x7f800000u) == 0x7f800000u;
}

int bf16_encode_diff(const float *restrict a, const float *restrict b, uint16_t *restrict dst, size_t n,
                     size_t *bad_index)
{
    int bad = 0;
    size_t i = 0;
    for (; i + BF16_LANES <= n; i += BF16_LANES)
        for (size_t j = 0; j < BF16_LANES; j++) bad |= encode_diff_one(a, b, dst, i + j);
    for (; i < n; i++) bad |= encode_diff_one(a, b, dst, i);
    if (!bad) return 0;
    for (i = 0; i < n; i++) {
        float d = a[i] - b[i];
        uint32_t bits;
        memcpy(&bits, &d, sizeof bits);
        if ((bits & 0x7f800000u) == 0x7f800000u) break;
    }
    if (bad_index != NULL) *bad_index = i;
    return -1;
}

void bf16_decode(const uint16_t *restrict src, float *restrict dst, size_t n)
{
    size_t i = 0;
    for (; i + BF16_LANES <= n; i += BF16_LANES)
        for (size_t j = 0; j < BF16_LANES; j++) decode_one(src, dst, i + j);
    for (; i < n; i++) decode_one(src, dst, i);
}
