/*
 * codec.c: the codecs of codec.h: names, sizes, and the block loop around the kernels of
 * codec_kernels.h (the portable build here, the AVX2 one in codec_avx2.c, chosen at run time). A
 * shorter last block is padded with zeros into a full one, which changes neither its scale nor its
 * codes.
 */
#include "math/codec.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "base/util.h"
#include "math/bf16.h"
#include "math/codec_avx2.h"
#include "math/dtype.h"
#include "math/outer.h"

#define CK(name) name##_portable
#define CK_LINKAGE static
#include "math/codec_kernels.h"

static atomic_int force_portable;

void codec_force_portable(int on)
{
    atomic_store(&force_portable, on);
}

static int use_avx2(void)
{
#if defined(__x86_64__)
    return !atomic_load(&force_portable) && cpu_has_avx2();
#else
    return 0;
#endif
}

static int encode_block(const float *a, const float *b, float *ef, uint8_t *out, int bits)
{
#if defined(__x86_64__)
    if (use_avx2()) return codec_encode_block_avx2(a, b, ef, out, bits);
#endif
    return codec_encode_block_portable(a, b, ef, out, bits);
}

/* Decode one full block into out, or (add) add it to out. */
static void decode_block(const uint8_t *in, float *out, int bits, int add)
{
    void (*f)(const uint8_t *, float *, int) = add ? codec_decode_block_add_portable : codec_decode_block_portable;
#if defined(__x86_64__)
    /* int4: the portable build unpacks nibbles faster than gcc's AVX2 code (bin/bench-codec); same bits */
    if (use_avx2() && bits != 4) f = add ? codec_decode_block_add_avx2 : codec_decode_block_avx2;
#endif
    f(in, out, bits);
}

static const struct {
    const char *name;
    int dtype;
} codecs[] = {{"fp32", BLOB_F32}, {"bf16", BLOB_BF16}, {"int8", BLOB_I8},
              {"int4", BLOB_I4},  {"int3", BLOB_I3},   {"int2", BLOB_I2}, {"topk", BLOB_TOPK}};

int codec_parse(const char *name)
{
    for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++)
        if (strcmp(name, codecs[i].name) == 0) return codecs[i].dtype;
    return 0;
}

const char *codec_name(int dtype)
{
    for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++)
        if (codecs[i].dtype == dtype) return codecs[i].name;
    return "?";
}

int codec_is_block(int dtype)
{
    return dtype == BLOB_I8 || dtype == BLOB_I4 || dtype == BLOB_I3 || dtype == BLOB_I2;
}

static int codec_bits(int dtype)
{
    return dtype == BLOB_I8 ? 8 : dtype == BLOB_I4 ? 4 : dtype == BLOB_I3 ? 3 : 2;
}

/* Bytes of one full block. */
static size_t block_bytes(int dtype)
{
    return 2 + (size_t)CODEC_BLOCK * (size_t)codec_bits(dtype) / 8;
}

/* Bytes of a block of m <= CODEC_BLOCK elements: int3 and int2 store a shorter block whole, since
 * their bit planes stride over the block. */
static size_t part_bytes(int dtype, size_t m)
{
    if (dtype == BLOB_I3 || dtype == BLOB_I2) return block_bytes(dtype);
    return 2 + (m * (size_t)codec_bits(dtype) + 7) / 8;
}

size_t codec_bytes(int dtype, uint64_t n)
{
    if (dtype == BLOB_F32 || dtype == BLOB_BF16) return n > SIZE_MAX / 4 ? 0 : (size_t)n * (dtype == BLOB_F32 ? 4 : 2);
    if (dtype == BLOB_TOPK) return n > SIZE_MAX / 4 ? 0 : (size_t)n; /* counted in bytes (codec_sparse.h) */
    if (!codec_is_block(dtype) || n > SIZE_MAX / 4) return 0;
    size_t full = (size_t)n / CODEC_BLOCK, rest = (size_t)n % CODEC_BLOCK;
    return full * block_bytes(dtype) + (rest ? part_bytes(dtype, rest) : 0);
}

size_t codec_offset(int dtype, size_t lo)
{
    return codec_is_block(dtype) ? lo / CODEC_BLOCK * block_bytes(dtype) : codec_bytes(dtype, lo);
}

/* A block codec's round trip goes this many elements at a time (whole blocks), so that x is decoded
 * while it is in the cache. */
#define ROUND_TRIP_CHUNK (16 * CODEC_BLOCK)

int codec_round_trip(int dtype, float *x, size_t n, uint8_t *out, size_t *bad)
{
    size_t step = codec_is_block(dtype) ? ROUND_TRIP_CHUNK : n;
    for (size_t lo = 0; lo < n; lo += step) {
        size_t m = n - lo < step ? n - lo : step;
        uint8_t *o = out + codec_offset(dtype, lo);
        if (codec_encode(dtype, x + lo, m, o, bad) != 0) {
            *bad += lo;
            return -1;
        }
        codec_decode(dtype, o, m, x + lo);
    }
    return 0;
}

/* bf16 payloads need no alignment, so they go through an aligned chunk on the stack, where the bulk
 * conversions of bf16.h vectorise (a byte-wise loop per element does not). */
#define PLAIN_CHUNK 2048
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "codec.c copies bf16 payloads as in memory: the wire format is little-endian"
#endif

/* fp32 and bf16, for the callers that handle every codec alike (the update a shard-server sends). */
static int encode_plain(int dtype, const float *x, size_t n, uint8_t *out, size_t *bad)
{
    if (outer_check_finite(x, n, bad) != 0) return -1;
    if (dtype == BLOB_F32) {
        memcpy(out, x, n * sizeof(float));
        return 0;
    }
    uint16_t t[PLAIN_CHUNK];
    for (size_t c = 0; c < n; c += PLAIN_CHUNK) {
        size_t len = n - c < PLAIN_CHUNK ? n - c : PLAIN_CHUNK;
        bf16_encode(x + c, t, len);
        memcpy(out + 2 * c, t, len * sizeof(uint16_t));
    }
    return 0;
}

static void decode_plain(int dtype, const uint8_t *in, size_t n, float *out)
{
    if (dtype == BLOB_F32) {
        memcpy(out, in, n * sizeof(float));
        return;
    }
    uint16_t t[PLAIN_CHUNK];
    for (size_t c = 0; c < n; c += PLAIN_CHUNK) {
        size_t len = n - c < PLAIN_CHUNK ? n - c : PLAIN_CHUNK;
        memcpy(t, in + 2 * c, len * sizeof(uint16_t));
        bf16_decode(t, out + c, len);
    }
}

/* The first index of a - b (+ ef) that is not finite, in a block the kernel refused. */
static size_t first_non_finite(const float *a, const float *b, const float *ef, size_t m)
{
    for (size_t i = 0; i < m; i++) {
        float x = b ? a[i] - b[i] : a[i];
        if (ef) x = x + ef[i];
        if (!isfinite(x)) return i;
    }
    return m;
}

/* A shorter last block of m elements, padded with zeros into a full one (which changes neither its
 * scale nor its codes). */
static int encode_part(int dtype, const float *a, const float *b, float *ef, size_t m, uint8_t *out)
{
    float pa[CODEC_BLOCK] = {0}, pb[CODEC_BLOCK] = {0}, pe[CODEC_BLOCK] = {0};
    uint8_t tail[2 + CODEC_BLOCK];
    memcpy(pa, a, m * sizeof(float));
    if (b) memcpy(pb, b, m * sizeof(float));
    if (ef) memcpy(pe, ef, m * sizeof(float));
    if (encode_block(pa, b ? pb : NULL, ef ? pe : NULL, tail, codec_bits(dtype)) != 0) return -1;
    if (ef) memcpy(ef, pe, m * sizeof(float));
    memcpy(out, tail, part_bytes(dtype, m));
    return 0;
}

int codec_encode_delta(int dtype, const float *a, const float *b, float *ef, size_t n, uint8_t *out, size_t *bad)
{
    int bits = codec_bits(dtype);
    size_t bb = block_bytes(dtype);
    for (size_t lo = 0; lo < n; lo += CODEC_BLOCK, out += bb) {
        size_t m = n - lo < CODEC_BLOCK ? n - lo : CODEC_BLOCK;
        const float *blo = b ? b + lo : NULL;
        float *elo = ef ? ef + lo : NULL;
        int rc =
            m == CODEC_BLOCK ? encode_block(a + lo, blo, elo, out, bits) : encode_part(dtype, a + lo, blo, elo, m, out);
        if (rc != 0) {
            *bad = lo + first_non_finite(a + lo, blo, elo, m);
            return -1;
        }
    }
    return 0;
}

int codec_encode(int dtype, const float *x, size_t n, uint8_t *out, size_t *bad)
{
    if (!codec_is_block(dtype)) return encode_plain(dtype, x, n, out, bad);
    return codec_encode_delta(dtype, x, NULL, NULL, n, out, bad);
}

void codec_decode(int dtype, const uint8_t *in, size_t n, float *out)
{
    if (!codec_is_block(dtype)) {
        decode_plain(dtype, in, n, out);
        return;
    }
    int bits = codec_bits(dtype);
    size_t bb = block_bytes(dtype);
    for (size_t lo = 0; lo < n; lo += CODEC_BLOCK, in += bb) {
        size_t m = n - lo < CODEC_BLOCK ? n - lo : CODEC_BLOCK;
        if (m == CODEC_BLOCK) {
            decode_block(in, out + lo, bits, 0);
            continue;
        }
        uint8_t padin[2 + CODEC_BLOCK] = {0};
        float tail[CODEC_BLOCK];
        memcpy(padin, in, part_bytes(dtype, m));
        decode_block(padin, tail, bits, 0);
        memcpy(out + lo, tail, m * sizeof(float));
    }
}

void codec_decode_add(int dtype, const uint8_t *in, size_t n, float *acc)
{
    int bits = codec_bits(dtype);
    size_t bb = block_bytes(dtype);
    for (size_t lo = 0; lo < n; lo += CODEC_BLOCK, in += bb) {
        size_t m = n - lo < CODEC_BLOCK ? n - lo : CODEC_BLOCK;
        if (m == CODEC_BLOCK) {
            decode_block(in, acc + lo, bits, 1);
            continue;
        }
        float tail[CODEC_BLOCK];
        codec_decode(dtype, in, m, tail);
        for (size_t i = 0; i < m; i++) acc[lo + i] = acc[lo + i] + tail[i];
    }
}

static int mean_block(const uint8_t *const *in, size_t off, uint32_t k, float *g, uint8_t *out, int bits)
{
#if defined(__x86_64__)
    if (use_avx2()) return codec_mean_block_avx2(in, off, k, g, out, bits);
#endif
    return codec_mean_block_portable(in, off, k, g, out, bits);
}

/* A shorter last block, from the separate steps (which pad it as they do). */
static int mean_part(int dtype, const uint8_t *const *in, size_t off, uint32_t k, size_t m, float *g, uint8_t *out,
                     size_t *bad)
{
    float t[CODEC_BLOCK] = {0};
    for (uint32_t p = 0; p < k; p++) codec_decode_add(dtype, in[p] + off, m, t);
    outer_mean_finish(t, m, k);
    if (out != NULL && codec_round_trip(dtype, t, m, out, bad) != 0) return -1;
    memcpy(g, t, m * sizeof(float));
    return 0;
}

int codec_mean(int dtype, const uint8_t *const *in, uint32_t k, size_t n, float *g, uint8_t *out, size_t *bad)
{
    int bits = codec_bits(dtype);
    size_t bb = block_bytes(dtype);
    for (size_t lo = 0; lo < n; lo += CODEC_BLOCK) {
        size_t m = n - lo < CODEC_BLOCK ? n - lo : CODEC_BLOCK, off = lo / CODEC_BLOCK * bb;
        uint8_t *o = out != NULL ? out + off : NULL;
        int rc = m == CODEC_BLOCK ? mean_block(in, off, k, g + lo, o, bits) : mean_part(dtype, in, off, k, m, g + lo, o, bad);
        if (rc != 0) {
            *bad = lo;
            return -1;
        }
    }
    return 0;
}

int codec_check(int dtype, const uint8_t *in, size_t n, size_t *bad)
{
    size_t bb = block_bytes(dtype);
    for (size_t lo = 0; lo < n; lo += CODEC_BLOCK, in += bb) {
        unsigned sb = (unsigned)in[0] | (unsigned)in[1] << 8;
        if (sb > CODEC_SCALE_MAX_BITS) { /* too large (its codes overflow), Inf, NaN, or a sign bit */
            *bad = lo;
            return -1;
        }
    }
    return 0;
}
