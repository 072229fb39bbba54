/*
 * codec_topk.c: the sparse chunk codec (codec_topk.h): selection of the k largest magnitudes with ties
 * broken by index, b-bit codes (2 to 8) with a per-chunk bf16 scale, chunk-relative indices in Elias-Fano form, the check of
 * a received chunk, and its decoding into a sum. The error-feedback accumulator is the caller's: encoding
 * subtracts what it carried, so e keeps exactly what was not sent.
 */
#include "math/codec_topk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "math/bf16.h"
#include "math/codec.h"

/* The indices in Elias-Fano form: each one's low l bits (l the largest with k * 2^l <= n), then the
 * upper bitmap, where the j-th index i sets bit (i >> l) + j: k + ((n - 1) >> l) + 1 bits. Its size
 * depends on n and k alone, and it is within 2 bits per index of the fewest bits any layout of k
 * increasing indices below n can take: 5 + 2.56 bits per index at 2% of 4096, 12 in the plain layout. */
static unsigned ef_low(size_t n, uint32_t k)
{
    unsigned l = 0;
    while (k > 0 && l < 15 && ((size_t)k << (l + 1)) <= n) l++;
    return l;
}

static size_t ef_upper_bits(size_t n, uint32_t k, unsigned l) { return k + (n > 0 ? ((n - 1) >> l) + 1 : 0); }

static size_t ef_low_bytes(size_t n, uint32_t k) { return ((size_t)k * ef_low(n, k) + 7) / 8; }

static size_t index_bytes(size_t n, uint32_t k)
{
    return ef_low_bytes(n, k) + (ef_upper_bits(n, k, ef_low(n, k)) + 7) / 8;
}

static int bits_ok(unsigned bits) { return bits >= TOPK_BITS_MIN && bits <= TOPK_BITS_MAX; }

size_t topk_chunk_bytes(uint32_t k, size_t n, unsigned bits)
{
    return 4 + index_bytes(n, k) + ((size_t)k * bits + 7) / 8;
}

uint32_t topk_chunk_count(const uint8_t *in) { return (uint32_t)(in[0] | (in[1] & 0x1F) << 8); }

unsigned topk_chunk_bits(const uint8_t *in) { return (unsigned)(in[1] >> 5) + TOPK_BITS_MIN; }

size_t topk_chunk_size(const uint8_t *in, size_t n)
{
    return topk_chunk_bytes(topk_chunk_count(in), n, topk_chunk_bits(in));
}

uint32_t topk_count(double density, size_t n)
{
    double k = nearbyint(density * (double)n);
    if (k < 1) k = 1;
    if (k > (double)n) k = (double)n;
    return (uint32_t)k;
}

static uint32_t abs_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u & 0x7FFFFFFFu;
}

/* p: zeroed; the k increasing indices idx below n in Elias-Fano form. */
static void put_indices(uint8_t *p, size_t n, uint32_t k, const uint16_t *idx)
{
    unsigned l = ef_low(n, k);
    uint8_t *upper = p + ef_low_bytes(n, k);
    for (uint32_t j = 0; j < k; j++) {
        for (unsigned b = 0; b < l; b++) {
            size_t pos = (size_t)j * l + b;
            p[pos / 8] |= (uint8_t)((idx[j] >> b & 1u) << (pos % 8));
        }
        size_t u = (size_t)(idx[j] >> l) + j;
        upper[u / 8] |= (uint8_t)(1u << (u % 8));
    }
}

/* The k indices of p into idx: 0, or -1 unless the upper bitmap has exactly k bits set and the
 * indices increase strictly and are below n (a forged chunk). */
static int get_indices(const uint8_t *p, size_t n, uint32_t k, uint16_t *idx)
{
    unsigned l = ef_low(n, k);
    const uint8_t *upper = p + ef_low_bytes(n, k);
    size_t bits = ef_upper_bits(n, k, l);
    uint32_t j = 0;
    for (size_t u = 0; u < bits; u++) {
        if (!(upper[u / 8] >> (u % 8) & 1u)) continue;
        if (j == k) return -1;
        size_t i = (u - j) << l;
        for (unsigned b = 0; b < l; b++) {
            size_t pos = (size_t)j * l + b;
            i |= (size_t)(p[pos / 8] >> (pos % 8) & 1u) << b;
        }
        if (i >= n || (j > 0 && i <= idx[j - 1])) return -1;
        idx[j++] = (uint16_t)i;
    }
    return j == k ? 0 : -1;
}

/* Code j of b bits, packed from the lowest bit of codes[0] (b <= 8: it spans at most two bytes). */
static void put_code(uint8_t *codes, uint32_t j, unsigned bits, unsigned code)
{
    size_t pos = (size_t)j * bits;
    unsigned shift = pos % 8;
    codes[pos / 8] |= (uint8_t)(code << shift);
    if (shift + bits > 8) codes[pos / 8 + 1] |= (uint8_t)(code >> (8 - shift));
}

static unsigned get_code(const uint8_t *codes, uint32_t j, unsigned bits)
{
    size_t pos = (size_t)j * bits;
    unsigned shift = pos % 8, v = codes[pos / 8] >> shift;
    if (shift + bits > 8) v |= (unsigned)codes[pos / 8 + 1] << (8 - shift);
    return v & ((1u << bits) - 1u);
}

/* A b-bit code: bit b-1 the sign, the bits below the magnitude m - 1, m in 1..2^(b-1); m * scale is
 * exact in fp32 (m has at most 8 significant bits, a bf16 scale 8). */
static float decode_code(unsigned code, unsigned bits, float scale)
{
    unsigned sign = 1u << (bits - 1);
    float v = (float)((code & (sign - 1u)) + 1u) * scale;
    return code & sign ? -v : v;
}

/* The key of rank r (0: the largest) among the distinct keys a[0..n), by quickselect (a is reordered):
 * average O(n), where sorting the chunk took most of a worker's encode. */
static uint64_t rank_key(uint64_t *a, size_t n, size_t r)
{
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint64_t x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi]; /* pivot: the median of three */
        uint64_t pivot = x < y ? (y < z ? y : x < z ? z : x) : (x < z ? x : y < z ? z : y);
        size_t i = lo, j = hi;
        for (;;) { /* Hoare's partition, larger keys first: [lo, j] >= pivot >= [j + 1, hi] */
            while (a[i] > pivot) i++;
            while (a[j] < pivot) j--;
            if (i >= j) break;
            uint64_t t = a[i];
            a[i++] = a[j], a[j--] = t;
        }
        if (r <= j)
            hi = j;
        else
            lo = j + 1;
    }
    return a[r];
}

/* The k selected indices of e, increasing, into idx: the keys are the magnitude's bits above, ~index
 * below, so they are distinct, a larger magnitude ranks first and, among equal ones, the lower index;
 * the chunk's top k are the keys at or above the key of rank k - 1. */
static int select_top(const float *e, size_t n, uint32_t k, uint16_t *idx)
{
    uint64_t *keys = malloc(n * sizeof *keys);
    if (!keys) return -1;
    for (size_t i = 0; i < n; i++) keys[i] = (uint64_t)abs_bits(e[i]) << 32 | (uint32_t)(0xFFFFFFFFu - (uint32_t)i);
    uint64_t least = rank_key(keys, n, k - 1);
    free(keys);
    uint32_t j = 0;
    for (size_t i = 0; i < n; i++)
        if (((uint64_t)abs_bits(e[i]) << 32 | (uint32_t)(0xFFFFFFFFu - (uint32_t)i)) >= least) idx[j++] = (uint16_t)i;
    return 0;
}

int topk_encode_chunk(float *e, size_t n, uint32_t k, unsigned bits, uint8_t *out, size_t *bad)
{
    if (n > TOPK_CHUNK || k == 0 || k > n || !bits_ok(bits)) { /* k = 0: no key of rank k - 1 to select */
        *bad = n;
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (!isfinite(e[i])) {
            *bad = i;
            return -1;
        }
    uint16_t idx[TOPK_CHUNK];
    if (select_top(e, n, k, idx) != 0) {
        *bad = n;
        return -1;
    }
    /* the grid: 1..M times the scale, M = 2^(b-1), its top at the largest kept magnitude (codec_topk.h) */
    unsigned levels = 1u << (bits - 1);
    float largest = 0, top = (float)levels;
    for (uint32_t j = 0; j < k; j++) largest = fmaxf(largest, fabsf(e[idx[j]]));
    uint16_t sbits = bf16_from_f32(largest / top);
    float scale = bf16_to_f32(sbits);
    unsigned head = k | (bits - TOPK_BITS_MIN) << 13;
    memset(out, 0, topk_chunk_bytes(k, n, bits));
    out[0] = (uint8_t)head, out[1] = (uint8_t)(head >> 8), out[2] = (uint8_t)sbits, out[3] = (uint8_t)(sbits >> 8);
    put_indices(out + 4, n, k, idx);
    uint8_t *codes = out + 4 + index_bytes(n, k);
    for (uint32_t j = 0; j < k; j++) {
        float x = e[idx[j]];
        float m = scale > 0 ? nearbyintf(fabsf(x) / scale) : 1.0f;
        m = m < 1.0f ? 1.0f : m > top ? top : m;
        unsigned code = (x < 0 ? levels : 0u) | ((unsigned)m - 1u);
        put_code(codes, j, bits, code);
        e[idx[j]] = x - decode_code(code, bits, scale);
    }
    return 0;
}

int topk_check_chunk(const uint8_t *in, size_t len, size_t n, uint32_t *k, unsigned *bits)
{
    if (len < 4 || n > TOPK_CHUNK) return -1;
    uint32_t count = topk_chunk_count(in);
    unsigned width = topk_chunk_bits(in);
    uint16_t sbits = (uint16_t)(in[2] | in[3] << 8), idx[TOPK_CHUNK];
    if (!bits_ok(width) || count > n || len != topk_chunk_bytes(count, n, width) || sbits > CODEC_SCALE_MAX_BITS)
        return -1;
    if (get_indices(in + 4, n, count, idx) != 0) return -1;
    *k = count;
    *bits = width;
    return 0;
}

/* acc[index] = acc[index] + (w * decoded value, or the value alone when !scaled), for each entry. */
static void decode_add(const uint8_t *in, size_t n, int scaled, float w, float *acc)
{
    uint32_t k = topk_chunk_count(in);
    unsigned bits = topk_chunk_bits(in);
    float scale = bf16_to_f32((uint16_t)(in[2] | in[3] << 8));
    const uint8_t *codes = in + 4 + index_bytes(n, k);
    uint16_t idx[TOPK_CHUNK];
    if (get_indices(in + 4, n, k, idx) != 0) return; /* (checked before: cannot happen) */
    for (uint32_t j = 0; j < k; j++) {
        float v = decode_code(get_code(codes, j, bits), bits, scale);
        if (scaled) v = w * v;
        acc[idx[j]] = acc[idx[j]] + v;
    }
}

void topk_decode_add_scaled_chunk(const uint8_t *in, size_t n, float w, float *acc) { decode_add(in, n, 1, w, acc); }

void topk_decode_add_chunk(const uint8_t *in, size_t n, float *acc) { decode_add(in, n, 0, 1.0f, acc); }
