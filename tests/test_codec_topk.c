/*
 * test_codec_topk.c: the sparse chunk codec (common/math/codec_topk.c): sizes, a known vector (the
 * selection, ties broken by the lower index, the scale, the codes and what stays in the accumulator),
 * an all-zero chunk, the accumulator keeping exactly what the chunk did not carry, NaN refused with its
 * index and nothing changed, and the check refusing forged chunks (length, count, indices, scale);
 * the b-bit value grid at 3, 4 and 8 bits (known vectors, codes across bytes) and at every width (the
 * accumulator keeps the rest, the error within the grid's step, less left behind with more bits);
 * codec_sparse.c: a shard's payload (sizes, density and width checks), the update of two participants
 * and its mean (whole and by chunks), at 2 and 4 bits, and forged updates refused.
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
#include "math/codec_sparse.h"
#include "math/codec_topk.h"

static void sizes(void **state)
{
    (void)state;
    assert_int_equal(topk_count(0.02, 4096), 82);
    assert_int_equal(topk_count(0.0001, 100), 1);
    assert_int_equal(topk_count(2.0, 100), 100);
    /* 82 of 4096: low parts of 5 bits (52 bytes), an upper bitmap of 82 + 128 bits (27), codes (21) */
    assert_int_equal(topk_chunk_bytes(82, 4096, 2), 4 + 52 + 27 + 21);
    assert_int_equal(topk_chunk_bytes(3, 6, 2), 4 + 1 + 1 + 1);
    assert_int_equal(topk_chunk_bytes(1, 4096, 2), 4 + 2 + 1 + 1); /* l = 12: the bitmap is 2 bits */
    assert_int_equal(topk_chunk_bytes(4096, 4096, 2), 4 + 0 + 1024 + 1024); /* l = 0: a bitmap of 2n bits */
    /* other widths change the codes only: 82 codes of 3, 4 and 8 bits */
    assert_int_equal(topk_chunk_bytes(82, 4096, 3), 4 + 52 + 27 + 31);
    assert_int_equal(topk_chunk_bytes(82, 4096, 4), 4 + 52 + 27 + 41);
    assert_int_equal(topk_chunk_bytes(82, 4096, 8), 4 + 52 + 27 + 82);
}

static void known_vector(void **state)
{
    (void)state;
    float e[6] = {0.1f, -3.0f, 2.0f, 0.5f, -3.0f, 0.0f};
    uint8_t out[16];
    size_t bad = 99;
    assert_int_equal(topk_encode_chunk(e, 6, 3, 2, out, &bad), 0);
    /* count 3, scale 3/2 = 1.5 (bf16 0x3FC0), indices 1, 2, 4 (l = 1: low bits 1, 0, 0; upper bits
     * 0 + 0, 1 + 1, 2 + 2); codes: -2 (3), +1 (0), -2 (3) */
    const uint8_t want[7] = {3, 0, 0xC0, 0x3F, 0x01, 0x15, 0x33};
    assert_memory_equal(out, want, sizeof want);
    const float left[6] = {0.1f, 0.0f, 0.5f, 0.5f, 0.0f, 0.0f};
    assert_memory_equal(e, left, sizeof left);
    uint32_t k = 0;
    unsigned bits = 0;
    assert_int_equal(topk_check_chunk(out, topk_chunk_bytes(3, 6, 2), 6, &k, &bits), 0);
    assert_int_equal(k, 3);
    assert_int_equal(bits, 2);
    float acc[6] = {0};
    topk_decode_add_chunk(out, 6, acc);
    const float dec[6] = {0, -3.0f, 1.5f, 0, -3.0f, 0};
    assert_memory_equal(acc, dec, sizeof dec);
}

static void ties_go_to_the_lower_index(void **state)
{
    (void)state;
    float e[10];
    for (int i = 0; i < 10; i++) e[i] = i % 2 ? -1.0f : 1.0f;
    uint8_t out[16];
    size_t bad;
    assert_int_equal(topk_encode_chunk(e, 10, 3, 2, out, &bad), 0);
    float acc[10] = {0};
    topk_decode_add_chunk(out, 10, acc);
    for (int i = 0; i < 10; i++) {
        assert_true(acc[i] == (i < 3 ? (i % 2 ? -1.0f : 1.0f) : 0.0f));
        assert_true(e[i] == (i < 3 ? 0.0f : (i % 2 ? -1.0f : 1.0f)));
    }
}

static void zero_chunk(void **state)
{
    (void)state;
    float e[8] = {0};
    uint8_t out[16];
    size_t bad;
    assert_int_equal(topk_encode_chunk(e, 8, 2, 2, out, &bad), 0);
    uint32_t k;
    unsigned bits;
    assert_int_equal(topk_check_chunk(out, topk_chunk_bytes(2, 8, 2), 8, &k, &bits), 0);
    float acc[8] = {0};
    topk_decode_add_chunk(out, 8, acc);
    for (int i = 0; i < 8; i++) assert_true(acc[i] == 0.0f && e[i] == 0.0f);
}

/* v: uniform in [-0.5, 0.5) from seed, every `every`-th element `big` times larger (a few outliers for
 * the top-k to pick). */
static void fill_spiky(float *v, int n, unsigned seed, int every, float big)
{
    srand(seed);
    for (int i = 0; i < n; i++) v[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * (i % every == 0 ? big : 1.0f);
}

/* Whatever the values, e afterwards is e before minus what the receiver decodes, element by element. */
static void accumulator_keeps_what_was_not_sent(void **state)
{
    (void)state;
    enum { N = TOPK_CHUNK };
    static float e[N], before[N], acc[N];
    static uint8_t out[8192];
    fill_spiky(e, N, 7, 97, 100.0f);
    memcpy(before, e, sizeof e);
    uint32_t k = topk_count(0.02, N);
    size_t bad;
    assert_int_equal(topk_encode_chunk(e, N, k, 2, out, &bad), 0);
    uint32_t got;
    unsigned bits;
    assert_int_equal(topk_check_chunk(out, topk_chunk_bytes(k, N, 2), N, &got, &bits), 0);
    assert_int_equal(got, k);
    memset(acc, 0, sizeof acc);
    topk_decode_add_chunk(out, N, acc);
    int sent = 0;
    float smallest_sent = INFINITY, largest_kept = 0;
    for (int i = 0; i < N; i++) {
        float want = acc[i] != 0.0f ? before[i] - acc[i] : before[i];
        assert_memory_equal(&e[i], &want, sizeof want);
        if (acc[i] != 0.0f) {
            sent++;
            smallest_sent = fminf(smallest_sent, fabsf(before[i]));
        } else {
            largest_kept = fmaxf(largest_kept, fabsf(before[i]));
        }
    }
    assert_int_equal(sent, k);
    assert_true(smallest_sent >= largest_kept); /* the k largest magnitudes went */
}

static void nan_refused_and_nothing_changed(void **state)
{
    (void)state;
    float e[5] = {1, 2, NAN, 4, 5}, copy[5];
    memcpy(copy, e, sizeof e);
    uint8_t out[16];
    size_t bad = 0;
    assert_int_equal(topk_encode_chunk(e, 5, 2, 2, out, &bad), -1);
    assert_int_equal(bad, 2);
    assert_memory_equal(e, copy, sizeof e);
    e[2] = INFINITY;
    assert_int_equal(topk_encode_chunk(e, 5, 2, 2, out, &bad), -1);
    assert_int_equal(topk_encode_chunk(e, 5, 6, 2, out, &bad), -1); /* k > n */
    assert_int_equal(bad, 5);
}

/* k = 0 (and so an empty chunk) is refused like k > n: the selection looked for the key of rank
 * k - 1 = 2^32 - 1, far past the chunk's keys (clang-tidy, make analyze) */
static void no_entries_refused(void **state)
{
    (void)state;
    float e[5] = {1, 2, 3, 4, 5}, copy[5];
    memcpy(copy, e, sizeof e);
    uint8_t out[16];
    size_t bad = 0;
    assert_int_equal(topk_encode_chunk(e, 5, 0, 2, out, &bad), -1);
    assert_int_equal(bad, 5);
    assert_int_equal(topk_encode_chunk(e, 0, 0, 2, out, &bad), -1);
    assert_int_equal(bad, 0);
    assert_memory_equal(e, copy, sizeof e);
}

static void forged_chunks_refused(void **state)
{
    (void)state;
    float e[6] = {0.1f, -3.0f, 2.0f, 0.5f, -3.0f, 0.0f};
    uint8_t good[16] = {0}, bad_chunk[16] = {0};
    size_t bad, len = topk_chunk_bytes(3, 6, 2);
    uint32_t k;
    unsigned bits;
    assert_int_equal(topk_encode_chunk(e, 6, 3, 2, good, &bad), 0);
    assert_int_equal(topk_check_chunk(good, len - 1, 6, &k, &bits), -1); /* short */
    assert_int_equal(topk_check_chunk(good, len, 4, &k, &bits), -1);     /* index 4 >= n */
    assert_int_equal(topk_check_chunk(good, 3, 6, &k, &bits), -1);       /* no header */
    memcpy(bad_chunk, good, len);
    bad_chunk[0] = 7; /* count > n */
    assert_int_equal(topk_check_chunk(bad_chunk, len, 6, &k, &bits), -1);
    memcpy(bad_chunk, good, len);
    bad_chunk[5] = 0x13; /* upper bits 0, 1, 4: indices 1, 0, 4, not increasing */
    assert_int_equal(topk_check_chunk(bad_chunk, len, 6, &k, &bits), -1);
    bad_chunk[5] = 0x35; /* four upper bits for three indices */
    assert_int_equal(topk_check_chunk(bad_chunk, len, 6, &k, &bits), -1);
    bad_chunk[5] = 0x05; /* two */
    assert_int_equal(topk_check_chunk(bad_chunk, len, 6, &k, &bits), -1);
    memcpy(bad_chunk, good, len);
    bad_chunk[3] = 0xBF; /* negative scale */
    assert_int_equal(topk_check_chunk(bad_chunk, len, 6, &k, &bits), -1);
    bad_chunk[3] = 0x7F, bad_chunk[2] = 0xC0; /* NaN scale */
    assert_int_equal(topk_check_chunk(bad_chunk, len, 6, &k, &bits), -1);
    memcpy(bad_chunk, good, len);
    bad_chunk[1] = 2 << 5; /* the head says 4 bits: 3 codes take 2 bytes, the chunk has 1 */
    assert_int_equal(topk_check_chunk(bad_chunk, len, 6, &k, &bits), -1);
    assert_int_equal(topk_check_chunk(bad_chunk, len + 1, 6, &k, &bits), 0); /* (a chunk of that length is one) */
    assert_int_equal(bits, 4);
    bad_chunk[1] = 7 << 5; /* 9 bits: no such width */
    assert_int_equal(topk_check_chunk(bad_chunk, topk_chunk_bytes(3, 6, 9), 6, &k, &bits), -1);
}

/* The b-bit value grid (codec_topk.h): sign and 1..2^(b-1) times max / 2^(b-1), codes packed from the
 * lowest bit. The known vector at 3 (codes across a byte boundary), 4 and 8 bits. */
static void known_vectors_at_other_widths(void **state)
{
    (void)state;
    static const struct {
        unsigned bits;
        uint8_t want[9]; /* head, scale, indices 1, 2, 4 (as at 2 bits), the codes */
        size_t len;
        float two; /* what 2.0 decodes to */
    } cases[] = {
        /* 3 bits: scale 3/4 = 0.75 (0x3F40); -3 -> -4*0.75 (code 4|3 = 7), 2 -> 3*0.75 (2), -3 -> 7:
         * bits 111 010 111 -> 0xD7, 0x01 */
        {3, {3, 1 << 5, 0x40, 0x3F, 0x01, 0x15, 0xD7, 0x01}, 8, 2.25f},
        /* 4 bits: scale 3/8 = 0.375 (0x3EC0); -3 -> 8|7 = 15, 2 -> 5*0.375 = 1.875 (code 4), -3 -> 15 */
        {4, {3, 2 << 5, 0xC0, 0x3E, 0x01, 0x15, 0x4F, 0x0F}, 8, 1.875f},
        /* 8 bits: scale 3/128 (0x3CC0); -3 -> 128|127, 2 -> 85 * 3/128 = 1.9921875 (code 84) */
        {8, {3, 6 << 5, 0xC0, 0x3C, 0x01, 0x15, 0xFF, 0x54, 0xFF}, 9, 1.9921875f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float e[6] = {0.1f, -3.0f, 2.0f, 0.5f, -3.0f, 0.0f};
        uint8_t out[16] = {0};
        size_t bad, len = topk_chunk_bytes(3, 6, cases[c].bits);
        assert_int_equal(len, cases[c].len);
        assert_int_equal(topk_encode_chunk(e, 6, 3, cases[c].bits, out, &bad), 0);
        assert_memory_equal(out, cases[c].want, len);
        uint32_t k;
        unsigned bits;
        assert_int_equal(topk_check_chunk(out, len, 6, &k, &bits), 0);
        assert_true(k == 3 && bits == cases[c].bits);
        float acc[6] = {0};
        topk_decode_add_chunk(out, 6, acc);
        const float dec[6] = {0, -3.0f, cases[c].two, 0, -3.0f, 0};
        assert_memory_equal(acc, dec, sizeof dec);
        const float left[6] = {0.1f, 0.0f, 2.0f - cases[c].two, 0.5f, 0.0f, 0.0f};
        assert_memory_equal(e, left, sizeof left);
    }
    float e[4] = {1, 2, 3, 4};
    uint8_t out[16];
    size_t bad;
    assert_int_equal(topk_encode_chunk(e, 4, 2, 1, out, &bad), -1); /* widths 1 and 9: refused */
    assert_int_equal(topk_encode_chunk(e, 4, 2, 9, out, &bad), -1);
}

/* At every width the accumulator keeps exactly what the receiver does not add, each sent value is within
 * one step of the grid (|e - sent| <= scale), and more bits leave less behind. */
static void every_width_keeps_the_rest(void **state)
{
    (void)state;
    enum { N = TOPK_CHUNK };
    static float e[N], before[N], acc[N];
    static uint8_t out[8192];
    fill_spiky(before, N, 5, 89, 20.0f);
    double last = INFINITY;
    uint32_t k = topk_count(0.02, N);
    for (unsigned b = TOPK_BITS_MIN; b <= TOPK_BITS_MAX; b++) {
        memcpy(e, before, sizeof e);
        size_t bad;
        assert_int_equal(topk_encode_chunk(e, N, k, b, out, &bad), 0);
        uint32_t got;
        unsigned width;
        assert_int_equal(topk_check_chunk(out, topk_chunk_bytes(k, N, b), N, &got, &width), 0);
        assert_true(got == k && width == b);
        float scale = bf16_to_f32((uint16_t)(out[2] | out[3] << 8));
        memset(acc, 0, sizeof acc);
        topk_decode_add_chunk(out, N, acc);
        double left = 0;
        for (int i = 0; i < N; i++) {
            float want = acc[i] != 0.0f ? before[i] - acc[i] : before[i];
            assert_memory_equal(&e[i], &want, sizeof want);
            if (acc[i] != 0.0f) {
                assert_true(fabsf(e[i]) <= scale);
                left += (double)e[i] * e[i];
            }
        }
        assert_true(left < last);
        last = left;
    }
}


/* A shard of 2 full chunks and a short one, as a worker encodes it (sparse_accumulate_encode per chunk). */
#define SHARD_N (2 * TOPK_CHUNK + 1000)
static size_t encode_shard(float *e, const float *delta, float beta, unsigned bits, uint8_t *out)
{
    size_t off = 0, bad;
    for (size_t c = 0; c < SHARD_N; c += TOPK_CHUNK) {
        size_t m = SHARD_N - c < TOPK_CHUNK ? SHARD_N - c : TOPK_CHUNK;
        uint32_t k = topk_count(0.02, m);
        assert_int_equal(sparse_accumulate_encode(e + c, delta + c, NULL, m, beta, k, bits, out + off, &bad), 0);
        off += topk_chunk_bytes(k, m, bits);
    }
    return off;
}

/* A shard's payload and the update of two participants, at b bits. */
static void payload_and_update(unsigned bits)
{
    static float d1[SHARD_N], d2[SHARD_N], e1[SHARD_N], e2[SHARD_N], g[SHARD_N], want[SHARD_N];
    static uint8_t p1[8192], p2[8192], upd[20000];
    for (size_t i = 0; i < SHARD_N; i++) {
        d1[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        d2[i] = (float)((i * 104729) % 997) / 997.0f - 0.5f;
        e1[i] = 0.25f, e2[i] = 0.0f;
    }
    size_t bytes = sparse_shard_bytes(0.02, bits, SHARD_N);
    assert_int_equal(bytes, 2 * topk_chunk_bytes(82, TOPK_CHUNK, bits) + topk_chunk_bytes(20, 1000, bits));
    assert_int_equal(encode_shard(e1, d1, 0.5f, bits, p1), bytes);
    assert_int_equal(encode_shard(e2, d2, 0.5f, bits, p2), bytes);
    size_t bad;
    assert_int_equal(sparse_check(p1, bytes, SHARD_N, 0.02, bits, &bad), 0);
    /* e = beta*e + Δ, minus what was sent: decoding the payload back gives exactly beta*e0 + Δ */
    memset(g, 0, sizeof g);
    sparse_add_scaled(p1, SHARD_N, 0, SHARD_N, 1.0f, g);
    for (size_t i = 0; i < SHARD_N; i++) assert_true(e1[i] + g[i] == 0.5f * 0.25f + d1[i] || g[i] != 0.0f);
    /* wrong density, length or width: refused; a chunk whose head says another width, too */
    unsigned other = bits == 2 ? 4 : 2;
    assert_int_equal(sparse_check(p1, bytes, SHARD_N, 0.03, bits, &bad), -1);
    assert_int_equal(sparse_check(p1, bytes - 1, SHARD_N, 0.02, bits, &bad), -1);
    assert_int_equal(sparse_check(p1, bytes, SHARD_N, 0.02, other, &bad), -1);
    assert_int_equal(bad, SHARD_N);
    size_t second = topk_chunk_bytes(82, TOPK_CHUNK, bits);
    uint8_t head = p1[second + 1];
    p1[second + 1] = (uint8_t)((head & 0x1F) | (other - 2) << 5);
    assert_int_equal(sparse_check(p1, bytes, SHARD_N, 0.02, bits, &bad), -1);
    assert_int_equal(bad, TOPK_CHUNK);
    p1[second + 1] = head;
    /* the update of two participants, weights 0.25 and 0.75: its mean is + w * decoded in order */
    float w[2] = {0.25f, 0.75f};
    size_t off = sparse_update_head(upd, 2, bytes, w);
    memcpy(upd + off, p1, bytes);
    memcpy(upd + off + bytes, p2, bytes);
    size_t len = sparse_update_bytes(2, bytes);
    uint32_t count = 0;
    assert_int_equal(sparse_update_check(upd, len, SHARD_N, &count), 0);
    assert_int_equal(count, 2);
    memset(want, 0, sizeof want);
    sparse_add_scaled(p1, SHARD_N, 0, SHARD_N, 0.25f, want);
    sparse_add_scaled(p2, SHARD_N, 0, SHARD_N, 0.75f, want);
    sparse_update_mean(upd, SHARD_N, 0, SHARD_N, g);
    assert_memory_equal(g, want, sizeof want);
    /* the same by chunks from TOPK_CHUNK on (a worker's and a server's blocks) */
    sparse_update_mean(upd, SHARD_N, TOPK_CHUNK, SHARD_N - TOPK_CHUNK, g);
    assert_memory_equal(g, want + TOPK_CHUNK, (SHARD_N - TOPK_CHUNK) * sizeof(float));
    /* forged updates: short, a NaN weight, a payload size that does not add up, a bad chunk */
    assert_int_equal(sparse_update_check(upd, len - 1, SHARD_N, &count), -1);
    uint8_t keep[4];
    memcpy(keep, upd + 8, 4);
    memset(upd + 8, 0xFF, 4);
    assert_int_equal(sparse_update_check(upd, len, SHARD_N, &count), -1);
    memcpy(upd + 8, keep, 4);
    upd[4] ^= 1;
    assert_int_equal(sparse_update_check(upd, len, SHARD_N, &count), -1);
    upd[4] ^= 1;
    upd[off + 1] = 0x1F; /* the first chunk's count far beyond its length */
    assert_int_equal(sparse_update_check(upd, len, SHARD_N, &count), -1);
    assert_int_equal(sparse_update_check(upd, 8, SHARD_N, &count), -1);
}

static void shard_payload_and_update(void **state)
{
    (void)state;
    payload_and_update(2);
}

static void shard_payload_and_update_at_4_bits(void **state)
{
    (void)state;
    payload_and_update(4);
}

/* The selection (quickselect of the rank k-1 key) against a plain sort by magnitude, then index, on
 * chunks full of ties and of random values, for k from 1 to n. */
static int by_magnitude_then_index(const void *a, const void *b)
{
    const float *x = *(const float *const *)a, *y = *(const float *const *)b;
    if (fabsf(*x) != fabsf(*y)) return fabsf(*x) > fabsf(*y) ? -1 : 1;
    return x < y ? -1 : x > y;
}

static void selection_matches_sorting(void **state)
{
    (void)state;
    enum { N = TOPK_CHUNK };
    static float e[N], before[N], acc[N];
    static const float *order[N];
    static uint8_t out[3 * N];
    const size_t ns[] = {N, 1000, 7};
    srand(11);
    for (int trial = 0; trial < 12; trial++) {
        size_t n = ns[trial % 3];
        for (size_t i = 0; i < n; i++) /* no zeros: every kept element decodes to a non-zero value */
            e[i] = trial % 2 ? (float)(rand() % 3 + 1) * (rand() % 2 ? 1.0f : -1.0f)
                             : (float)rand() / (float)RAND_MAX + 0.001f;
        memcpy(before, e, n * sizeof(float));
        uint32_t ks[] = {1, (uint32_t)(n / 50 + 1), (uint32_t)(n / 2), (uint32_t)n};
        for (int q = 0; q < 4; q++) {
            uint32_t k = ks[q];
            memcpy(e, before, n * sizeof(float));
            size_t bad;
            assert_int_equal(topk_encode_chunk(e, n, k, 2, out, &bad), 0);
            memset(acc, 0, n * sizeof(float));
            topk_decode_add_chunk(out, n, acc);
            for (size_t i = 0; i < n; i++) order[i] = &before[i];
            qsort(order, n, sizeof order[0], by_magnitude_then_index);
            static char want[N];
            memset(want, 0, n);
            for (uint32_t j = 0; j < k; j++) want[order[j] - before] = 1;
            for (size_t i = 0; i < n; i++) assert_int_equal(acc[i] != 0.0f, want[i]);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sizes),
        cmocka_unit_test(known_vector),
        cmocka_unit_test(ties_go_to_the_lower_index),
        cmocka_unit_test(zero_chunk),
        cmocka_unit_test(accumulator_keeps_what_was_not_sent),
        cmocka_unit_test(nan_refused_and_nothing_changed),
        cmocka_unit_test(no_entries_refused),
        cmocka_unit_test(forged_chunks_refused),
        cmocka_unit_test(known_vectors_at_other_widths),
        cmocka_unit_test(every_width_keeps_the_rest),
        cmocka_unit_test(shard_payload_and_update),
        cmocka_unit_test(shard_payload_and_update_at_4_bits),
        cmocka_unit_test(selection_matches_sorting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
