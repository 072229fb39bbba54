/*
 * test_codec.c: the int8/int4/int3/int2 block codecs (common/math/codec.c): sizes, known vectors (zeros, exact
 * scales, ties to even, one huge value in a block, denormals, -0, a shorter last block), NaN and Inf
 * rejected before encoding with their index, the decoding error bound, the check of received scales,
 * blobs carrying a codec, the portable and AVX2 builds giving the same bits, and the worker's one-pass
 * encoding with error feedback giving the bits of the separate steps; and the plain bf16/fp32 payloads
 * (little-endian elements at any alignment).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "base/util.h"
#include "format/blob.h"
#include "math/bf16.h"
#include "math/codec.h"
#include "math/outer.h"

static float scale_of(const uint8_t *block)
{
    return bf16_to_f32((uint16_t)(block[0] | block[1] << 8));
}

/* The block codecs, and the largest code of each. */
static const int block_dtypes[] = {BLOB_I8, BLOB_I4, BLOB_I3, BLOB_I2};
static float qmax_of(int dtype)
{
    return dtype == BLOB_I8 ? 127.0f : dtype == BLOB_I4 ? 7.0f : dtype == BLOB_I3 ? 3.0f : 1.0f;
}

static void names_and_sizes(void **state)
{
    (void)state;
    assert_int_equal(codec_parse("int8"), BLOB_I8);
    assert_int_equal(codec_parse("int4"), BLOB_I4);
    assert_int_equal(codec_parse("bf16"), BLOB_BF16);
    assert_int_equal(codec_parse("fp32"), BLOB_F32);
    assert_int_equal(codec_parse("int3"), BLOB_I3);
    assert_int_equal(codec_parse("int2"), BLOB_I2);
    assert_int_equal(codec_parse("int5"), 0);
    assert_string_equal(codec_name(BLOB_I4), "int4");
    assert_string_equal(codec_name(BLOB_I3), "int3");
    assert_string_equal(codec_name(BLOB_I2), "int2");
    assert_int_equal(codec_bytes(BLOB_I3, 256), 98); /* 3 bits a code */
    assert_int_equal(codec_bytes(BLOB_I2, 256), 66);
    assert_int_equal(codec_bytes(BLOB_I3, 300), 98 + 98); /* a shorter block is stored whole */
    assert_int_equal(codec_bytes(BLOB_I2, 300), 66 + 66);
    assert_int_equal(codec_offset(BLOB_I3, 512), 196);
    assert_int_equal(codec_offset(BLOB_I2, 768), 198);
    assert_int_equal(codec_bytes(BLOB_I8, 256), 258);
    assert_int_equal(codec_bytes(BLOB_I4, 256), 130);
    assert_int_equal(codec_bytes(BLOB_I8, 300), 258 + 2 + 44);
    assert_int_equal(codec_bytes(BLOB_I4, 300), 130 + 2 + 22);
    assert_int_equal(codec_bytes(BLOB_I4, 257), 130 + 2 + 1);
    assert_int_equal(codec_bytes(BLOB_BF16, 10), 20);
    assert_int_equal(codec_bytes(BLOB_TOPK, 10), 10); /* a sparse payload is counted in bytes */
    assert_int_equal(codec_parse("topk"), BLOB_TOPK);
    assert_int_equal(codec_is_block(BLOB_TOPK), 0);
    assert_int_equal(codec_bytes(8, 10), 0);
    assert_int_equal(codec_offset(BLOB_I4, 512), 260);
}

static void zeros_encode_to_zero_scale(void **state)
{
    (void)state;
    float x[256] = {0}, y[256];
    uint8_t out[258];
    size_t bad = 0;
    assert_int_equal(codec_encode(BLOB_I8, x, 256, out, &bad), 0);
    for (int i = 0; i < 258; i++) assert_int_equal(out[i], 0);
    codec_decode(BLOB_I8, out, 256, y);
    for (int i = 0; i < 256; i++) assert_true(y[i] == 0.0f);
}

static void exact_scales_give_exact_codes(void **state)
{
    (void)state;
    float x[256], y[256];
    uint8_t out8[258], out4[130];
    size_t bad;
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 255 - 127) * 0.5f; /* amax 63.5: scale 0.5, codes -127..127 */
    assert_int_equal(codec_encode(BLOB_I8, x, 256, out8, &bad), 0);
    assert_true(scale_of(out8) == 0.5f);
    for (int i = 0; i < 256; i++) assert_int_equal((int8_t)out8[2 + i], i % 255 - 127);
    codec_decode(BLOB_I8, out8, 256, y);
    assert_memory_equal(x, y, sizeof x);
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 15 - 7) * 0.25f; /* amax 1.75: scale 0.25, codes -7..7 */
    assert_int_equal(codec_encode(BLOB_I4, x, 256, out4, &bad), 0);
    assert_true(scale_of(out4) == 0.25f);
    assert_int_equal(out4[2], 0x9u | 0xau << 4); /* -7 and -6 as nibbles, the first element low */
    codec_decode(BLOB_I4, out4, 256, y);
    assert_memory_equal(x, y, sizeof x);
    uint8_t out3[98], out2[66];
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 7 - 3) * 0.25f; /* amax 0.75: scale 0.25, codes -3..3 */
    assert_int_equal(codec_encode(BLOB_I3, x, 256, out3, &bad), 0);
    assert_true(scale_of(out3) == 0.25f);
    /* byte 0 of the low plane: the low two bits of elements 0, 64, 128, 192 (codes -3 -2 -1 0: 101 110
     * 111 000), byte 0 of the high plane: the third bit of elements 0, 32, ..., 224 (codes -3 1 -2 2 -1 3
     * 0 -3) */
    assert_int_equal(out3[2], 1u | 2u << 2 | 3u << 4 | 0u << 6);
    assert_int_equal(out3[2 + 64], 1u | 0u << 1 | 1u << 2 | 0u << 3 | 1u << 4 | 0u << 5 | 0u << 6 | 1u << 7);
    codec_decode(BLOB_I3, out3, 256, y);
    assert_memory_equal(x, y, sizeof x);
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 3 - 1) * 0.5f; /* amax 0.5: scale 0.5, codes -1..1 */
    assert_int_equal(codec_encode(BLOB_I2, x, 256, out2, &bad), 0);
    assert_true(scale_of(out2) == 0.5f);
    assert_int_equal(out2[2], 3u | 0u << 2 | 1u << 4 | 3u << 6); /* elements 0, 64, 128, 192: -1 0 1 -1 */
    codec_decode(BLOB_I2, out2, 256, y);
    assert_memory_equal(x, y, sizeof x);
}

static void ties_round_to_even(void **state)
{
    (void)state;
    float x[256] = {127.0f, 0.5f, 1.5f, 2.5f, -2.5f, -0.5f, 126.5f}; /* scale 1 */
    uint8_t out[258];
    size_t bad;
    assert_int_equal(codec_encode(BLOB_I8, x, 256, out, &bad), 0);
    assert_true(scale_of(out) == 1.0f);
    int8_t want[7] = {127, 0, 2, 2, -2, 0, 126};
    for (int i = 0; i < 7; i++) assert_int_equal((int8_t)out[2 + i], want[i]);
    float x3[256] = {3.0f, 0.5f, 1.5f, 2.5f, -2.5f, -0.5f, -1.5f}, y3[256]; /* int3: scale 1 */
    assert_int_equal(codec_encode(BLOB_I3, x3, 256, out, &bad), 0);
    assert_true(scale_of(out) == 1.0f);
    codec_decode(BLOB_I3, out, 256, y3);
    float want3[7] = {3.0f, 0.0f, 2.0f, 2.0f, -2.0f, 0.0f, -2.0f};
    assert_memory_equal(y3, want3, sizeof want3);
}

static void one_huge_value_in_a_block(void **state)
{
    (void)state;
    float x[256], y[256];
    uint8_t out[258];
    size_t bad;
    for (int i = 0; i < 256; i++) x[i] = 1e-3f * (float)(i - 128);
    x[77] = 3.0e38f;
    assert_int_equal(codec_encode(BLOB_I8, x, 256, out, &bad), 0);
    codec_decode(BLOB_I8, out, 256, y);
    for (int i = 0; i < 256; i++) {
        assert_true(isfinite(y[i]));
        if (i != 77) assert_true(y[i] == 0.0f); /* drowned by the block's scale: error feedback keeps them */
    }
    assert_true(fabsf(y[77] - x[77]) <= scale_of(out) * 0.5f);
}

static void denormals_and_negative_zero(void **state)
{
    (void)state;
    float x[256], y[256];
    uint8_t out[130];
    size_t bad;
    for (int i = 0; i < 256; i++) x[i] = (float)(i - 128) * 1e-40f; /* denormal (or zero) */
    x[0] = 5e-38f;                                                  /* the scale, 5e-38 / 7, is a denormal too */
    x[5] = -0.0f;
    assert_int_equal(codec_encode(BLOB_I4, x, 256, out, &bad), 0);
    codec_decode(BLOB_I4, out, 256, y);
    float s = scale_of(out);
    assert_true(s > 0.0f && s < 1.17e-38f);
    for (int i = 0; i < 256; i++) assert_true(fabsf(y[i] - x[i]) <= s * 0.5f * 1.01f);
    assert_true(y[5] == 0.0f && !signbit(y[5]));
    /* a block so small that its scale is below bf16's smallest denormal is flushed to zero (error
     * feedback carries it into the next round) */
    for (int i = 0; i < 256; i++) x[i] = (float)(i - 128) * 1e-43f;
    assert_int_equal(codec_encode(BLOB_I4, x, 256, out, &bad), 0);
    codec_decode(BLOB_I4, out, 256, y);
    assert_true(scale_of(out) == 0.0f);
    for (int i = 0; i < 256; i++) assert_true(y[i] == 0.0f);
}

static void non_finite_is_rejected_with_its_index(void **state)
{
    (void)state;
    size_t n = 1000, bad = 0;
    float *x = calloc(n, sizeof *x);
    uint8_t *out = malloc(codec_bytes(BLOB_I8, n));
    x[700] = NAN;
    assert_int_equal(codec_encode(BLOB_I8, x, n, out, &bad), -1);
    assert_int_equal(bad, 700);
    x[700] = 0;
    x[999] = -INFINITY; /* in the shorter last block */
    assert_int_equal(codec_encode(BLOB_I4, x, n, out, &bad), -1);
    assert_int_equal(bad, 999);
    free(x);
    free(out);
}

static void error_is_at_most_half_a_step(void **state)
{
    (void)state;
    size_t n = 4096 + 77, bad;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    uint8_t *out = malloc(codec_bytes(BLOB_I4, n) + codec_bytes(BLOB_I8, n));
    uint64_t st = 42;
    for (size_t i = 0; i < n; i++) x[i] = (float)((rng_uniform(&st) - 0.5) * pow(10.0, (double)(i / 256 % 9) - 4));
    for (size_t d = 0; d < sizeof block_dtypes / sizeof block_dtypes[0]; d++) {
        int dt = block_dtypes[d];
        assert_int_equal(codec_encode(dt, x, n, out, &bad), 0);
        codec_decode(dt, out, n, y);
        for (size_t i = 0; i < n; i++) {
            float s = scale_of(out + codec_offset(dt, i / 256 * 256));
            assert_true(fabsf(y[i] - x[i]) <= s * 0.5f * 1.0001f || fabsf(x[i]) > s * qmax_of(dt));
            assert_true(fabsf(y[i] - x[i]) <= s * 1.01f); /* clamping at the largest code costs at most a step */
        }
    }
    free(x);
    free(y);
    free(out);
}

static void received_scales_are_checked(void **state)
{
    (void)state;
    float x[600] = {1.0f};
    uint8_t out[1024];
    size_t bad = 0;
    assert_int_equal(codec_encode(BLOB_I8, x, 600, out, &bad), 0);
    assert_int_equal(codec_check(BLOB_I8, out, 600, &bad), 0);
    out[258 * 2] = 0xc0;
    out[258 * 2 + 1] = 0x7f; /* NaN scale in the third (last, shorter) block */
    assert_int_equal(codec_check(BLOB_I8, out, 600, &bad), -1);
    assert_int_equal(bad, 512);
    out[258 * 2 + 1] = 0xbf; /* negative */
    assert_int_equal(codec_check(BLOB_I8, out, 600, &bad), -1);
    /* finite but so large that code 127 decodes to +Inf (found by fuzz/fuzz_codec.c); the largest
     * scale allowed keeps even a crafted code -128 finite */
    out[258 * 2] = 0x7f;
    out[258 * 2 + 1] = 0x7f;
    assert_int_equal(codec_check(BLOB_I8, out, 600, &bad), -1);
    assert_int_equal(bad, 512);
    out[258 * 2] = 0xff;
    out[258 * 2 + 1] = 0x7b;
    out[258 * 2 + 2] = 0x80; /* code -128 */
    assert_int_equal(codec_check(BLOB_I8, out, 600, &bad), 0);
    float y[600];
    codec_decode(BLOB_I8, out, 600, y);
    assert_true(isfinite(y[512]) && y[512] < -1e38f);
    /* int3 and int2: their crafted smallest codes (-4, -2) at the largest scale are finite too */
    uint8_t in3[98] = {0xff, 0x7b}, in2[66] = {0xff, 0x7b, 0x02};
    in3[2 + 64] = 0x01; /* element 0: low bits 00, high bit 1 */
    assert_int_equal(codec_check(BLOB_I3, in3, 256, &bad), 0);
    codec_decode(BLOB_I3, in3, 256, y);
    assert_true(isfinite(y[0]) && y[0] == -4.0f * scale_of(in3) && y[1] == 0.0f);
    assert_int_equal(codec_check(BLOB_I2, in2, 256, &bad), 0);
    codec_decode(BLOB_I2, in2, 256, y);
    assert_true(isfinite(y[0]) && y[0] == -2.0f * scale_of(in2) && y[1] == 0.0f);
}

static void blobs_carry_the_codec(void **state)
{
    (void)state;
    float x[300] = {0.25f, -3.0f};
    uint8_t payload[200];
    size_t bad, plen = codec_bytes(BLOB_I4, 300);
    char err[256];
    assert_int_equal(codec_encode(BLOB_I4, x, 300, payload, &bad), 0);
    blob_header h, back;
    blob_header_init(&h, "push");
    h.dtype = BLOB_I4;
    h.count = 300;
    uint8_t *buf;
    size_t len;
    assert_int_equal(blob_encode(&h, payload, plen, &buf, &len, err, sizeof err), 0);
    const uint8_t *p;
    size_t pl;
    assert_int_equal(blob_decode(buf, len, &back, &p, &pl, err, sizeof err), 0);
    assert_int_equal(back.dtype, BLOB_I4);
    assert_int_equal(pl, plen);
    assert_int_equal(blob_decode(buf, len - 1, &back, &p, &pl, err, sizeof err), -1); /* short */
    free(buf);
    h.count = 301;
    assert_int_equal(blob_encode(&h, payload, plen, &buf, &len, err, sizeof err), -1);
}

static void portable_and_avx2_agree(void **state)
{
    (void)state;
    if (!cpu_has_avx2()) {
        print_message("no AVX2 on this CPU: only the portable build runs\n");
        return;
    }
    size_t n = 64 * 256 + 100, bad;
    float *x = malloc(n * sizeof *x), *ya = malloc(n * sizeof *ya), *yp = malloc(n * sizeof *yp);
    size_t cap = codec_bytes(BLOB_I8, n);
    uint8_t *a = malloc(cap), *p = malloc(cap);
    uint64_t st = 7;
    for (size_t i = 0; i < n; i++) {
        double u = rng_uniform(&st) - 0.5;
        x[i] = (float)(u * pow(2.0, (double)(i % 97) - 60));   /* wide exponents, denormals included */
        if (i % 31 == 0) x[i] = (float)((int)(u * 20)) * 0.5f; /* exact halves: ties */
    }
    for (size_t d = 0; d < sizeof block_dtypes / sizeof block_dtypes[0]; d++) {
        int dt = block_dtypes[d];
        size_t nb = codec_bytes(dt, n);
        codec_force_portable(0);
        assert_int_equal(codec_encode(dt, x, n, a, &bad), 0);
        codec_decode(dt, a, n, ya);
        codec_force_portable(1);
        assert_int_equal(codec_encode(dt, x, n, p, &bad), 0);
        codec_decode(dt, p, n, yp);
        assert_memory_equal(a, p, nb);
        assert_memory_equal(ya, yp, n * sizeof(float));
    }
    codec_force_portable(0);
    free(x);
    free(ya);
    free(yp);
    free(a);
    free(p);
}

/* codec_encode_delta (the worker's one pass: Δ = a - b, plus the kept error, encoded, the new error
 * kept) gives the bits of the separate steps, in both builds, and finds a non-finite Δ's index. */
static void encode_delta_is_the_separate_steps(void **state)
{
    (void)state;
    size_t n = 3 * 256 + 77, bad;
    float *buf = malloc(6 * n * sizeof *buf), *a = buf, *b = a + n, *ef = b + n, *x = ef + n, *y = x + n, *ef2 = y + n;
    uint8_t *qbuf = malloc(2 * codec_bytes(BLOB_I8, n)), *qa = qbuf, *qb = qa + codec_bytes(BLOB_I8, n);
    uint64_t st = 11;
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(rng_uniform(&st) - 0.5);
        b[i] = a[i] + (float)((rng_uniform(&st) - 0.5) * 1e-3);
        ef[i] = (float)((rng_uniform(&st) - 0.5) * 1e-5);
    }
    for (int portable = 0; portable < 2; portable++)
        for (size_t d = 0; d < sizeof block_dtypes / sizeof block_dtypes[0]; d++) {
            int dt = block_dtypes[d];
            codec_force_portable(portable);
            for (size_t i = 0; i < n; i++) x[i] = (a[i] - b[i]) + ef[i];
            assert_int_equal(codec_encode(dt, x, n, qa, &bad), 0);
            codec_decode(dt, qa, n, y);
            memcpy(ef2, ef, n * sizeof *ef);
            assert_int_equal(codec_encode_delta(dt, a, b, ef2, n, qb, &bad), 0);
            assert_memory_equal(qa, qb, codec_bytes(dt, n));
            for (size_t i = 0; i < n; i++) assert_true(ef2[i] == x[i] - y[i]);
            assert_int_equal(codec_encode_delta(dt, x, NULL, NULL, n, qb, &bad), 0); /* a given Δ, no error */
            assert_memory_equal(qa, qb, codec_bytes(dt, n));
        }
    codec_force_portable(0);
    b[800] = INFINITY; /* in the shorter last block */
    assert_int_equal(codec_encode_delta(BLOB_I3, a, b, ef, n, qb, &bad), -1);
    assert_int_equal(bad, 800);
    free(buf);
    free(qbuf);
}

/* codec_decode_add (the shard-server's sum) gives the bits of codec_decode and an add, in both builds,
 * and codec_round_trip those of codec_encode and codec_decode. */
static void decode_add_and_round_trip_are_the_separate_steps(void **state)
{
    (void)state;
    size_t n = 20 * 256 + 77, bad;
    float *buf = malloc(4 * n * sizeof *buf), *x = buf, *acc = x + n, *want = acc + n, *y = want + n;
    uint8_t *qbuf = malloc(2 * codec_bytes(BLOB_I8, n)), *q = qbuf, *q2 = q + codec_bytes(BLOB_I8, n);
    uint64_t st = 3;
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)((rng_uniform(&st) - 0.5) * pow(2.0, (double)(i % 29) - 10));
        acc[i] = (float)(rng_uniform(&st) - 0.5);
    }
    for (int portable = 0; portable < 2; portable++)
        for (size_t d = 0; d < sizeof block_dtypes / sizeof block_dtypes[0]; d++) {
            int dt = block_dtypes[d];
            codec_force_portable(portable);
            assert_int_equal(codec_encode(dt, x, n, q, &bad), 0);
            codec_decode(dt, q, n, y);
            for (size_t i = 0; i < n; i++) want[i] = acc[i] + y[i];
            memcpy(y, acc, n * sizeof *y);
            codec_decode_add(dt, q, n, y);
            assert_memory_equal(y, want, n * sizeof *y);
            memcpy(y, x, n * sizeof *y);
            assert_int_equal(codec_round_trip(dt, y, n, q2, &bad), 0);
            assert_memory_equal(q2, q, codec_bytes(dt, n));
            codec_decode(dt, q, n, want);
            assert_memory_equal(y, want, n * sizeof *y);
        }
    codec_force_portable(0);
    x[5000] = NAN;
    assert_int_equal(codec_round_trip(BLOB_I4, x, n, q2, &bad), -1);
    assert_int_equal(bad, 5000);
    free(buf);
    free(qbuf);
}

/* codec_mean (the shard-server's commit of block-codec Δ) gives the bits of the separate steps: a zeroed
 * sum, codec_decode_add of each payload in order, outer_mean_finish, then codec_round_trip; in both
 * builds, for 1 to 3 payloads, with and without the round trip, with a shorter last block. */
static void mean_is_the_separate_steps(void **state)
{
    (void)state;
    enum { K = 3 };
    size_t n = 20 * 256 + 77, bad, qn = codec_bytes(BLOB_I8, n);
    float *buf = malloc(3 * n * sizeof *buf), *x = buf, *want = x + n, *g = want + n;
    uint8_t *qbuf = malloc((K + 2) * qn), *out = qbuf + K * qn, *out2 = out + qn;
    const uint8_t *in[K];
    uint64_t st = 5;
    for (size_t d = 0; d < sizeof block_dtypes / sizeof block_dtypes[0]; d++) {
        int dt = block_dtypes[d];
        for (int p = 0; p < K; p++) {
            for (size_t i = 0; i < n; i++) x[i] = (float)((rng_uniform(&st) - 0.5) * pow(2.0, (double)((i + p) % 23) - 8));
            assert_int_equal(codec_encode(dt, x, n, qbuf + p * qn, &bad), 0);
            in[p] = qbuf + p * qn;
        }
        for (int portable = 0; portable < 2; portable++)
            for (uint32_t k = 1; k <= K; k++) {
                codec_force_portable(portable);
                memset(want, 0, n * sizeof *want);
                for (uint32_t p = 0; p < k; p++) codec_decode_add(dt, in[p], n, want);
                outer_mean_finish(want, n, k);
                assert_int_equal(codec_mean(dt, in, k, n, g, NULL, &bad), 0);
                assert_memory_equal(g, want, n * sizeof *g);
                assert_int_equal(codec_round_trip(dt, want, n, out, &bad), 0);
                assert_int_equal(codec_mean(dt, in, k, n, g, out2, &bad), 0);
                assert_memory_equal(out2, out, codec_bytes(dt, n));
                assert_memory_equal(g, want, n * sizeof *g);
            }
    }
    codec_force_portable(0);
    assert_int_equal(codec_encode(BLOB_I8, x, n, qbuf, &bad), 0);
    uint8_t *blk = qbuf + 3 * (2 + 256); /* int8: block 3 at the largest scale, every code 127 */
    blk[0] = CODEC_SCALE_MAX_BITS & 0xff;
    blk[1] = CODEC_SCALE_MAX_BITS >> 8;
    memset(blk + 2, 127, 256);
    in[0] = in[1] = qbuf;
    assert_int_equal(codec_mean(BLOB_I8, in, 1, n, g, out, &bad), 0);
    assert_int_equal(codec_mean(BLOB_I8, in, 2, n, g, out, &bad), -1); /* the sum overflows */
    assert_int_equal(bad, 3 * 256);
    free(buf);
    free(qbuf);
}

/* bf16 and fp32 payloads: little-endian element by element at any alignment and length (chunk edges,
 * odd sizes), the bits of bf16_from_f32 and bf16_to_f32, and NaN/Inf refused with their index. */
static void plain_codecs_are_little_endian_elements(void **state)
{
    (void)state;
    static const size_t lens[] = {1, 7, 2047, 2048, 2049, 5000};
    const size_t nmax = 5000;
    float *x = malloc(nmax * sizeof(float)), *y = malloc(nmax * sizeof(float));
    uint8_t *buf = malloc(4 * nmax + 1);
    for (size_t i = 0; i < nmax; i++) /* ties, -0, denormals and large values among ordinary ones */
        x[i] = i % 5 == 0 ? -0.0f : i % 5 == 1 ? 1e-40f * (float)i : ((float)i - 2500.0f) * 1.00390625f;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li], bad = 0;
        uint8_t *out = buf + 1; /* an odd address: payloads follow a header of any length */
        assert_int_equal(codec_encode(BLOB_BF16, x, n, out, &bad), 0);
        for (size_t i = 0; i < n; i++) {
            uint16_t h = bf16_from_f32(x[i]);
            assert_int_equal(out[2 * i], h & 0xff);
            assert_int_equal(out[2 * i + 1], h >> 8);
        }
        codec_decode(BLOB_BF16, out, n, y);
        for (size_t i = 0; i < n; i++) {
            float want = bf16_to_f32(bf16_from_f32(x[i]));
            assert_memory_equal(&y[i], &want, sizeof want);
        }
        assert_int_equal(codec_encode(BLOB_F32, x, n, out, &bad), 0);
        codec_decode(BLOB_F32, out, n, y);
        assert_memory_equal(y, x, n * sizeof(float));
    }
    x[2049] = NAN;
    size_t bad = 0;
    assert_int_equal(codec_encode(BLOB_BF16, x, nmax, buf + 1, &bad), -1);
    assert_int_equal(bad, 2049);
    free(x);
    free(y);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_and_sizes),
        cmocka_unit_test(zeros_encode_to_zero_scale),
        cmocka_unit_test(exact_scales_give_exact_codes),
        cmocka_unit_test(ties_round_to_even),
        cmocka_unit_test(one_huge_value_in_a_block),
        cmocka_unit_test(denormals_and_negative_zero),
        cmocka_unit_test(non_finite_is_rejected_with_its_index),
        cmocka_unit_test(error_is_at_most_half_a_step),
        cmocka_unit_test(received_scales_are_checked),
        cmocka_unit_test(blobs_carry_the_codec),
        cmocka_unit_test(portable_and_avx2_agree),
        cmocka_unit_test(encode_delta_is_the_separate_steps),
        cmocka_unit_test(decode_add_and_round_trip_are_the_separate_steps),
        cmocka_unit_test(mean_is_the_separate_steps),
        cmocka_unit_test(plain_codecs_are_little_endian_elements),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
