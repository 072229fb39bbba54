/*
 * codec_topk.c: the sparse chunk codec (codec_topk.h): selection of the k largest magnitudes with ties
 * broken by index, 2-bit codes with a per-chunk bf16 scale, 12-bit chunk-relative indices, the check of
 * a received chunk, and its decoding into a sum. The error-feedback accumulator is the caller's: encoding
 * subtracts what it carried, so e keeps exactly what was not sent.
 */
#include "codec_topk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "codec.h"

size_t topk_chunk_bytes(uint32_t k) { return 4 + ((size_t)k * 12 + 7) / 8 + ((size_t)k * 2 + 7) / 8; }

uint32_t topk_count(double density, size_t n)
{
    double k = nearbyint(density * (double)n);
    if (k < 1) k = 1;
    if (k > (double)n) k = (double)n;
    return (uint32_t)k;
}

/* Sort keys in decreasing order: the magnitude's bits above, ~index below, so that a larger magnitude
 * comes first and, among equal ones, the lower index. */
static int key_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int u16_asc(const void *a, const void *b)
{
    return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

static uint32_t abs_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u & 0x7FFFFFFFu;
}

static void put_index(uint8_t *p, uint32_t i, uint16_t v)
{
    uint8_t *q = p + (i / 2) * 3;
    if (i % 2 == 0) {
        q[0] = (uint8_t)v;
        q[1] = (uint8_t)((q[1] & 0xF0) | (v >> 8));
    } else {
        q[1] = (uint8_t)((q[1] & 0x0F) | ((v & 0x0F) << 4));
        q[2] = (uint8_t)(v >> 4);
    }
}

static uint16_t get_index(const uint8_t *p, uint32_t i)
{
    const uint8_t *q = p + (i / 2) * 3;
    return i % 2 == 0 ? (uint16_t)(q[0] | (q[1] & 0x0F) << 8) : (uint16_t)(q[1] >> 4 | q[2] << 4);
}

static float decode_code(unsigned code, float scale)
{
    float v = (float)((code & 1u) + 1u) * scale;
    return code & 2u ? -v : v;
}

/* The k selected indices of e, increasing, into idx. */
static int select_top(const float *e, size_t n, uint32_t k, uint16_t *idx)
{
    uint64_t *keys = malloc(n * sizeof *keys);
    if (!keys) return -1;
    for (size_t i = 0; i < n; i++) keys[i] = (uint64_t)abs_bits(e[i]) << 32 | (uint32_t)(0xFFFFFFFFu - (uint32_t)i);
    qsort(keys, n, sizeof *keys, key_desc);
    for (uint32_t j = 0; j < k; j++) idx[j] = (uint16_t)(0xFFFFFFFFu - (uint32_t)keys[j]);
    free(keys);
    qsort(idx, k, sizeof *idx, u16_asc);
    return 0;
}

int topk_encode_chunk(float *e, size_t n, uint32_t k, uint8_t *out, size_t *bad)
{
    if (n > TOPK_CHUNK || k > n) {
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
    float largest = 0;
    for (uint32_t j = 0; j < k; j++) largest = fmaxf(largest, fabsf(e[idx[j]]));
    uint16_t sbits = bf16_from_f32(largest / 2.0f);
    float scale = bf16_to_f32(sbits);
    size_t ib = ((size_t)k * 12 + 7) / 8;
    memset(out, 0, topk_chunk_bytes(k));
    out[0] = (uint8_t)k, out[1] = (uint8_t)(k >> 8), out[2] = (uint8_t)sbits, out[3] = (uint8_t)(sbits >> 8);
    uint8_t *codes = out + 4 + ib;
    for (uint32_t j = 0; j < k; j++) {
        float x = e[idx[j]];
        float m = scale > 0 ? nearbyintf(fabsf(x) / scale) : 1.0f;
        m = m < 1.0f ? 1.0f : m > 2.0f ? 2.0f : m;
        unsigned code = (x < 0 ? 2u : 0u) | ((unsigned)m - 1u);
        put_index(out + 4, j, idx[j]);
        codes[j / 4] |= (uint8_t)(code << (2 * (j % 4)));
        e[idx[j]] = x - decode_code(code, scale);
    }
    return 0;
}

int topk_check_chunk(const uint8_t *in, size_t len, size_t n, uint32_t *k)
{
    if (len < 4) return -1;
    uint32_t count = (uint32_t)(in[0] | in[1] << 8);
    uint16_t sbits = (uint16_t)(in[2] | in[3] << 8);
    if (count > n || len != topk_chunk_bytes(count) || sbits > CODEC_SCALE_MAX_BITS) return -1;
    for (uint32_t j = 0; j < count; j++) {
        uint16_t i = get_index(in + 4, j);
        if (i >= n || (j > 0 && i <= get_index(in + 4, j - 1))) return -1;
    }
    *k = count;
    return 0;
}

void topk_decode_add_chunk(const uint8_t *in, float *acc)
{
    uint32_t k = (uint32_t)(in[0] | in[1] << 8);
    float scale = bf16_to_f32((uint16_t)(in[2] | in[3] << 8));
    const uint8_t *codes = in + 4 + ((size_t)k * 12 + 7) / 8;
    for (uint32_t j = 0; j < k; j++) {
        unsigned code = codes[j / 4] >> (2 * (j % 4)) & 3u;
        uint16_t i = get_index(in + 4, j);
        acc[i] = acc[i] + decode_code(code, scale);
    }
}

void topk_decode_add_scaled_chunk(const uint8_t *in, float w, float *acc)
{
    uint32_t k = topk_chunk_count(in);
    float scale = bf16_to_f32((uint16_t)(in[2] | in[3] << 8));
    const uint8_t *codes = in + 4 + ((size_t)k * 12 + 7) / 8;
    for (uint32_t j = 0; j < k; j++) {
        unsigned code = codes[j / 4] >> (2 * (j % 4)) & 3u;
        uint16_t i = get_index(in + 4, j);
        float v = w * decode_code(code, scale);
        acc[i] = acc[i] + v;
    }
}

uint32_t topk_chunk_count(const uint8_t *in) { return (uint32_t)(in[0] | in[1] << 8); }
