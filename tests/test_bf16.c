/*
 * test_bf16.c: fp32 <-> bf16 conversion (common/math/bf16.c): exhaustive round trip of every bf16 value,
 * round-to-nearest-even ties both ways, NaN kept and made quiet, Inf, denormals, negative zero,
 * overflow to Inf, the bulk encode/decode agreeing with the scalar functions, and the fused
 * difference-and-cast of the worker's pseudo-gradient.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "math/bf16.h"

static float f32_from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static void every_bf16_value_round_trips(void **state)
{
    (void)state;
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = bf16_to_f32((uint16_t)h);
        assert_int_equal(bits_of(f), h << 16);
        uint16_t back = bf16_from_f32(f);
        int is_nan = (h & 0x7fff) > 0x7f80;
        if (is_nan)
            assert_int_equal(back, h | 0x0040); /* NaN comes back quiet, same sign and payload */
        else
            assert_int_equal(back, h);
    }
}

static void ties_round_to_even_both_ways(void **state)
{
    (void)state;
    /* 1.0 = 0x3f80 (even). Exactly half way to 0x3f81 rounds down to the even 0x3f80. */
    assert_int_equal(bf16_from_f32(f32_from_bits(0x3f808000u)), 0x3f80);
    /* 0x3f81 is odd: half way to 0x3f82 rounds up to the even 0x3f82. */
    assert_int_equal(bf16_from_f32(f32_from_bits(0x3f818000u)), 0x3f82);
    /* Just below and above the tie go to the nearest. */
    assert_int_equal(bf16_from_f32(f32_from_bits(0x3f807fffu)), 0x3f80);
    assert_int_equal(bf16_from_f32(f32_from_bits(0x3f808001u)), 0x3f81);
    assert_int_equal(bf16_from_f32(f32_from_bits(0x3f817fffu)), 0x3f81);
    /* Negative values mirror the positive ones. */
    assert_int_equal(bf16_from_f32(f32_from_bits(0xbf808000u)), 0xbf80);
    assert_int_equal(bf16_from_f32(f32_from_bits(0xbf818000u)), 0xbf82);
    /* A carry out of the mantissa bumps the exponent: 1.9999999 -> 2.0 */
    assert_int_equal(bf16_from_f32(f32_from_bits(0x3fffffffu)), 0x4000);
}

static void nan_stays_nan_and_becomes_quiet(void **state)
{
    (void)state;
    /* A signalling NaN whose payload lives only in the low 16 bits would truncate to Inf. */
    uint16_t h = bf16_from_f32(f32_from_bits(0x7f800001u));
    assert_int_equal(h, 0x7fc0);
    assert_true(isnan(bf16_to_f32(h)));
    h = bf16_from_f32(f32_from_bits(0xff800001u));
    assert_int_equal(h, 0xffc0); /* sign kept */
    h = bf16_from_f32(f32_from_bits(0x7fa50000u));
    assert_int_equal(h, 0x7fe5); /* payload kept, quiet bit set */
    h = bf16_from_f32(NAN);
    assert_true(isnan(bf16_to_f32(h)));
    /* Rounding must not carry a NaN with all-ones mantissa into the sign bit. */
    assert_int_equal(bf16_from_f32(f32_from_bits(0x7fffffffu)), 0x7fff);
}

static void infinities_stay_infinite(void **state)
{
    (void)state;
    assert_int_equal(bf16_from_f32(INFINITY), 0x7f80);
    assert_int_equal(bf16_from_f32(-INFINITY), 0xff80);
    assert_true(isinf(bf16_to_f32(0x7f80)) && bf16_to_f32(0x7f80) > 0);
    assert_true(isinf(bf16_to_f32(0xff80)) && bf16_to_f32(0xff80) < 0);
}

static void overflow_rounds_to_infinity(void **state)
{
    (void)state;
    /* FLT_MAX is above the largest bf16 (0x7f7f) by more than half an ulp: RNE gives Inf. */
    assert_int_equal(bf16_from_f32(f32_from_bits(0x7f7fffffu)), 0x7f80);
    assert_int_equal(bf16_from_f32(f32_from_bits(0xff7fffffu)), 0xff80);
    /* Exactly half way between 0x7f7f (odd) and Inf rounds to the even side, Inf. */
    assert_int_equal(bf16_from_f32(f32_from_bits(0x7f7f8000u)), 0x7f80);
    /* Just below half way stays finite. */
    assert_int_equal(bf16_from_f32(f32_from_bits(0x7f7f7fffu)), 0x7f7f);
}

static void denormals_and_zeros(void **state)
{
    (void)state;
    assert_int_equal(bf16_from_f32(0.0f), 0x0000);
    assert_int_equal(bf16_from_f32(-0.0f), 0x8000);
    assert_true(signbit(bf16_to_f32(0x8000)) && bf16_to_f32(0x8000) == 0.0f);
    /* Smallest fp32 denormal rounds to zero; a denormal with high bits survives. */
    assert_int_equal(bf16_from_f32(f32_from_bits(0x00000001u)), 0x0000);
    assert_int_equal(bf16_from_f32(f32_from_bits(0x80000001u)), 0x8000);
    assert_int_equal(bf16_from_f32(f32_from_bits(0x00010000u)), 0x0001);
    assert_int_equal(bf16_from_f32(f32_from_bits(0x00018000u)), 0x0002); /* tie, odd -> even */
    assert_int_equal(bf16_from_f32(f32_from_bits(0x00008000u)), 0x0000); /* tie, even -> even */
    /* Largest denormal rounds up into the smallest normal. */
    assert_int_equal(bf16_from_f32(f32_from_bits(0x007fffffu)), 0x0080);
    assert_true(bf16_to_f32(0x0001) > 0.0f && fpclassify(bf16_to_f32(0x0001)) == FP_SUBNORMAL);
}

static void bulk_matches_scalar(void **state)
{
    (void)state;
    /* An odd length exercises both the vector body and the scalar tail. */
    enum { N = 4099 };
    float *src = malloc(N * sizeof *src);
    uint16_t *enc = malloc(N * sizeof *enc);
    float *dec = malloc(N * sizeof *dec);
    assert_non_null(src);
    assert_non_null(enc);
    assert_non_null(dec);
    uint32_t x = 12345;
    for (size_t i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u; /* every bit pattern class, NaNs included */
        src[i] = f32_from_bits(x);
    }
    src[7] = NAN;
    src[8] = -INFINITY;
    bf16_encode(src, enc, N);
    bf16_decode(enc, dec, N);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(enc[i], bf16_from_f32(src[i]));
        assert_int_equal(bits_of(dec[i]), bits_of(bf16_to_f32(enc[i])));
    }
    free(src);
    free(enc);
    free(dec);
}

/* The fused Δ + finite check + cast gives the same bits as the scalar cast of the difference, and finds
 * the first non-finite difference in the vector body and in the tail. */
static void encode_diff_matches_scalar_and_finds_first_bad(void **state)
{
    (void)state;
    enum { N = 4099 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    uint16_t *enc = malloc(N * sizeof *enc);
    assert_true(a && b && enc);
    uint32_t x = 777;
    for (size_t i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        a[i] = (float)(x % 100000) * 1e-3f - 50.0f;
        x = x * 1664525u + 1013904223u;
        b[i] = (float)(x % 100000) * 1e-3f - 50.0f;
    }
    size_t bad = 99;
    assert_int_equal(bf16_encode_diff(a, b, enc, N, &bad), 0);
    for (size_t i = 0; i < N; i++) assert_int_equal(enc[i], bf16_from_f32(a[i] - b[i]));
    b[4098] = NAN; /* in the scalar tail */
    assert_int_equal(bf16_encode_diff(a, b, enc, N, &bad), -1);
    assert_int_equal(bad, 4098);
    b[17] = INFINITY; /* in the vector body */
    assert_int_equal(bf16_encode_diff(a, b, enc, N, &bad), -1);
    assert_int_equal(bad, 17);
    b[17] = 0.0f;
    b[4098] = 0.0f;
    a[5] = 3.0e38f; /* finite operands whose difference overflows */
    b[5] = -3.0e38f;
    assert_int_equal(bf16_encode_diff(a, b, enc, N, &bad), -1);
    assert_int_equal(bad, 5);
    free(a);
    free(b);
    free(enc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_bf16_value_round_trips),
        cmocka_unit_test(ties_round_to_even_both_ways),
        cmocka_unit_test(nan_stays_nan_and_becomes_quiet),
        cmocka_unit_test(infinities_stay_infinite),
        cmocka_unit_test(overflow_rounds_to_infinity),
        cmocka_unit_test(denormals_and_zeros),
        cmocka_unit_test(bulk_matches_scalar),
        cmocka_unit_test(encode_diff_matches_scalar_and_finds_first_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
