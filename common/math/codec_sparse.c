/*
 * codec_sparse.c: the top-k codec over whole shards and its round update (codec_sparse.h): sizes and
 * offsets of a shard's chunks, the check of a received payload or update, the worker's accumulate and
 * encode, and the weighted mean that the shard-servers, the workers and the replay share.
 */
#include "math/codec_sparse.h"

#include <math.h>
#include <string.h>

static size_t chunk_len(size_t n, size_t c)
{
    return n - c < TOPK_CHUNK ? n - c : TOPK_CHUNK;
}

size_t sparse_shard_bytes(double density, size_t n)
{
    size_t bytes = 0;
    for (size_t c = 0; c < n; c += TOPK_CHUNK)
        bytes += topk_chunk_bytes(topk_count(density, chunk_len(n, c)), chunk_len(n, c));
    return bytes;
}

size_t sparse_chunk_offset(const uint8_t *payload, size_t c)
{
    return c == 0 ? 0 : c / TOPK_CHUNK * topk_chunk_bytes(topk_chunk_count(payload), TOPK_CHUNK);
}

int sparse_check(const uint8_t *in, size_t len, size_t n, double density, size_t *bad)
{
    if (len != sparse_shard_bytes(density, n)) {
        *bad = n;
        return -1;
    }
    size_t off = 0;
    for (size_t c = 0; c < n; c += TOPK_CHUNK) {
        uint32_t want = topk_count(density, chunk_len(n, c)), k;
        size_t bytes = topk_chunk_bytes(want, chunk_len(n, c));
        if (topk_check_chunk(in + off, bytes, chunk_len(n, c), &k) != 0 || k != want) {
            *bad = c;
            return -1;
        }
        off += bytes;
    }
    return 0;
}

int sparse_accumulate_encode(float *e, const float *a, const float *b, size_t len, float beta, uint32_t k, uint8_t *out,
                             size_t *bad)
{
    for (size_t i = 0; i < len; i++) {
        float delta = b != NULL ? a[i] - b[i] : a[i];
        e[i] = beta * e[i] + delta;
    }
    return topk_encode_chunk(e, len, k, out, bad);
}

void sparse_add_scaled(const uint8_t *payload, size_t n, size_t lo, size_t len, float w, float *g)
{
    const uint8_t *p = payload + sparse_chunk_offset(payload, lo);
    for (size_t c = lo; c < lo + len && c < n; c += TOPK_CHUNK) {
        topk_decode_add_scaled_chunk(p, chunk_len(n, c), w, g + (c - lo));
        p += topk_chunk_bytes(topk_chunk_count(p), chunk_len(n, c));
    }
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

size_t sparse_update_bytes(uint32_t w, size_t p)
{
    return 8 + (size_t)w * (4 + p);
}

size_t sparse_update_head(uint8_t *out, uint32_t w, size_t p, const float *weights)
{
    put_u32(out, w);
    put_u32(out + 4, (uint32_t)p);
    for (uint32_t i = 0; i < w; i++) {
        uint32_t bits;
        memcpy(&bits, &weights[i], sizeof bits);
        put_u32(out + 8 + 4 * (size_t)i, bits);
    }
    return 8 + 4 * (size_t)w;
}

static float weight_of(const uint8_t *in, uint32_t i)
{
    uint32_t bits = get_u32(in + 8 + 4 * (size_t)i);
    float w;
    memcpy(&w, &bits, sizeof w);
    return w;
}

/* One participant's payload of p bytes for n elements: chunks that fit exactly, each passing
 * topk_check_chunk, the full ones all of the first one's size (sparse_chunk_offset relies on it). */
static int payload_ok(const uint8_t *in, size_t p, size_t n)
{
    size_t off = 0, full = 0;
    for (size_t c = 0; c < n; c += TOPK_CHUNK) {
        if (p - off < 4) return -1;
        size_t bytes = topk_chunk_bytes(topk_chunk_count(in + off), chunk_len(n, c));
        uint32_t k;
        if (bytes > p - off || topk_check_chunk(in + off, bytes, chunk_len(n, c), &k) != 0) return -1;
        if (c == 0) full = bytes;
        if (chunk_len(n, c) == TOPK_CHUNK && bytes != full) return -1;
        off += bytes;
    }
    return off == p ? 0 : -1;
}

int sparse_update_check(const uint8_t *in, size_t len, size_t n, uint32_t *w)
{
    if (len < 8) return -1;
    uint32_t count = get_u32(in);
    size_t p = get_u32(in + 4);
    if (count > (len - 8) / 4 || (count > 0 && p > (len - 8 - 4 * (size_t)count) / count) ||
        len != sparse_update_bytes(count, p))
        return -1;
    const uint8_t *payloads = in + 8 + 4 * (size_t)count;
    for (uint32_t i = 0; i < count; i++)
        if (!isfinite(weight_of(in, i)) || payload_ok(payloads + (size_t)i * p, p, n) != 0) return -1;
    *w = count;
    return 0;
}

void sparse_update_mean(const uint8_t *in, size_t n, size_t lo, size_t len, float *g)
{
    uint32_t count = get_u32(in);
    size_t p = get_u32(in + 4);
    const uint8_t *payloads = in + 8 + 4 * (size_t)count;
    for (size_t i = 0; i < len; i++) g[i] = 0.0f;
    for (uint32_t i = 0; i < count; i++) sparse_add_scaled(payloads + (size_t)i * p, n, lo, len, weight_of(in, i), g);
}
