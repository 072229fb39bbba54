/*
 * codec_kernels.h: the block kernels of the int8/int4/int3/int2 codecs (codec.h), written once and
 * compiled twice: by codec.c for any x86-64 (or other) CPU and by codec_avx2.c with -mavx2. Each loop
 * has a fixed trip count (one block), so gcc vectorises it at -O2. Only exactly rounded operations are
 * used (integer max, IEEE division and multiplication, an add-subtract round to nearest even), so both
 * builds give the same bits.
 *
 * The includer defines CK(name) (the suffixed name) and CK_LINKAGE (static or nothing).
 */
#include <string.h>

#include "math/bf16.h"
#include "math/codec.h"

/* v rounded to the nearest integer, ties to even, for |v| < 2^22 (the default rounding mode). */
#define CODEC_RNE_MAGIC 12582912.0f

/* The largest code of a `bits`-bit codec: the codes are symmetric, -qmax..qmax. */
static inline float CK(codec_qmax)(int bits)
{
    return bits == 8 ? 127.0f : bits == 4 ? 7.0f : bits == 3 ? 3.0f : 1.0f;
}

/* The codes q of one block packed, two's complement: bytes (8); nibbles, the first element of a byte in
 * the low one (4); for 3 and 2 bits, planes of bits strided over the block, so that every loop runs
 * over consecutive bytes with one fixed shift (vectorised): a plane of 64 bytes whose byte j holds the
 * low two bits of elements j, j+64, j+128, j+192 (from the lowest bits up), then (3 bits) a plane of 32
 * bytes whose byte j holds the third bit of elements j, j+32, ..., j+224. */
static inline void CK(codec_pack)(const int8_t *restrict q, uint8_t *restrict out, int bits)
{
    if (bits == 8) {
        memcpy(out, q, CODEC_BLOCK);
        return;
    }
    if (bits == 4) {
        for (int j = 0; j < CODEC_BLOCK / 2; j++)
            out[j] = (uint8_t)(((uint8_t)q[2 * j] & 0x0fu) | ((uint8_t)q[2 * j + 1] << 4));
        return;
    }
    const uint8_t *u = (const uint8_t *)q;
    for (int j = 0; j < 64; j++)
        out[j] = (uint8_t)((u[j] & 3u) | (u[j + 64] & 3u) << 2 | (u[j + 128] & 3u) << 4 | (u[j + 192] & 3u) << 6);
    if (bits == 2) return;
    uint8_t h[32] = {0};
    for (int m = 0; m < 8; m++)
        for (int j = 0; j < 32; j++) h[j] = (uint8_t)(h[j] | (u[32 * m + j] >> 2 & 1u) << m);
    memcpy(out + 64, h, sizeof h);
}

/* The inverse of codec_pack, sign-extending each code. */
static inline void CK(codec_unpack)(const uint8_t *restrict in, int8_t *restrict q, int bits)
{
    if (bits == 8) {
        memcpy(q, in, CODEC_BLOCK);
        return;
    }
    if (bits == 4) {
        for (int j = 0; j < CODEC_BLOCK / 2; j++) {
            uint8_t b = in[j]; /* arithmetic shifts sign-extend the nibbles */
            q[2 * j] = (int8_t)((int8_t)(uint8_t)(b << 4) >> 4);
            q[2 * j + 1] = (int8_t)((int8_t)b >> 4);
        }
        return;
    }
    uint8_t u[CODEC_BLOCK];
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 64; j++) u[64 * k + j] = (uint8_t)(in[j] >> (2 * k) & 3u);
    if (bits == 3)
        for (int m = 0; m < 8; m++)
            for (int j = 0; j < 32; j++) u[32 * m + j] = (uint8_t)(u[32 * m + j] | (in[64 + j] >> m & 1u) << 2);
    unsigned sign = bits == 3 ? 4u : 2u; /* a code with its top bit set is that minus 2^bits */
    for (int i = 0; i < CODEC_BLOCK; i++) q[i] = (int8_t)(u[i] - ((u[i] & sign) << 1));
}

/* The codes q and the scale (bf16 bits *sb, value *s) of one full block x. 0, or -1 (nothing written)
 * if a value of x is NaN or infinite. */
static inline int CK(codec_quantize)(const float *restrict x, int8_t *restrict q, uint16_t *sb, float *s, int bits)
{
    uint32_t amax = 0, bad = 0;
    for (int i = 0; i < CODEC_BLOCK; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u &= 0x7fffffffu;
        bad |= u >= 0x7f800000u ? 1u : 0u;
        amax = u > amax ? u : amax; /* finite magnitudes order as their bits do */
    }
    if (bad) return -1;
    float qmax = CK(codec_qmax)(bits), famax;
    memcpy(&famax, &amax, sizeof famax);
    *sb = bf16_from_f32(famax / qmax);
    *s = bf16_to_f32(*sb);
    if (*s == 0.0f) {
        memset(q, 0, CODEC_BLOCK);
        return 0;
    }
    for (int i = 0; i < CODEC_BLOCK; i++) {
        float v = x[i] / *s;
        v = v > qmax ? qmax : v;
        v = v < -qmax ? -qmax : v;
        v = (v + CODEC_RNE_MAGIC) - CODEC_RNE_MAGIC;
        q[i] = (int8_t)(int32_t)v;
    }
    return 0;
}

/* A block's scale and codes into out (bf16 scale, then the packed codes). */
static inline void CK(codec_store)(const int8_t *restrict q, uint16_t sb, uint8_t *restrict out, int bits)
{
    out[0] = (uint8_t)(sb & 0xff);
    out[1] = (uint8_t)(sb >> 8);
    CK(codec_pack)(q, out + 2, bits);
}

/* Encode one full block of x = a - b (b NULL: x = a), plus ef when ef is not NULL, into out (bf16
 * scale, then codes of `bits` bits); with ef, then keep in ef what the codes drop: x - decoded x (error
 * feedback, in the same pass). 0, or -1 (nothing written to ef) if a value of x is NaN or infinite. */
CK_LINKAGE int CK(codec_encode_block)(const float *restrict a, const float *restrict b, float *restrict ef,
                                      uint8_t *restrict out, int bits)
{
    float x[CODEC_BLOCK];
    if (b != NULL)
        for (int i = 0; i < CODEC_BLOCK; i++) x[i] = a[i] - b[i];
    else
        memcpy(x, a, sizeof x);
    if (ef != NULL)
        for (int i = 0; i < CODEC_BLOCK; i++) x[i] = x[i] + ef[i];
    int8_t q[CODEC_BLOCK];
    uint16_t sb;
    float s;
    if (CK(codec_quantize)(x, q, &sb, &s, bits) != 0) return -1;
    if (ef != NULL) /* decoded exactly as codec_decode_block does */
        for (int i = 0; i < CODEC_BLOCK; i++) ef[i] = x[i] - (float)q[i] * s;
    CK(codec_store)(q, sb, out, bits);
    return 0;
}

/* Decode one full block. */
CK_LINKAGE void CK(codec_decode_block)(const uint8_t *restrict in, float *restrict out, int bits)
{
    float s = bf16_to_f32((uint16_t)(in[0] | (in[1] << 8)));
    int8_t q[CODEC_BLOCK];
    CK(codec_unpack)(in + 2, q, bits);
    for (int i = 0; i < CODEC_BLOCK; i++) out[i] = (float)q[i] * s;
}

/* Decode one full block and add it to acc: acc[i] = acc[i] + decoded (the shard-server's sum, without a
 * decoded copy). */
CK_LINKAGE void CK(codec_decode_block_add)(const uint8_t *restrict in, float *restrict acc, int bits)
{
    float s = bf16_to_f32((uint16_t)(in[0] | (in[1] << 8)));
    int8_t q[CODEC_BLOCK];
    CK(codec_unpack)(in + 2, q, bits);
    for (int i = 0; i < CODEC_BLOCK; i++) acc[i] = acc[i] + (float)q[i] * s;
}

/* The mean of k >= 1 decoded blocks (in[0..k-1] + off: +0, each added in that order, then divided by k); with
 * out, then encoded into out and replaced in g by its decoded value (what the workers will decode),
 * else g is the mean. One block in the cache from the codes to g: bit for bit the zeroed sum,
 * codec_decode_block_add of each, the division and codec_encode_block + codec_decode_block. 0, or -1
 * (out and g unusable) if the mean is not finite. */
CK_LINKAGE int CK(codec_mean_block)(const uint8_t *const *in, size_t off, uint32_t k, float *restrict g,
                                    uint8_t *restrict out, int bits)
{
    float x[CODEC_BLOCK];
    for (int i = 0; i < CODEC_BLOCK; i++) x[i] = 0.0f;
    for (uint32_t p = 0; p < k; p++) CK(codec_decode_block_add)(in[p] + off, x, bits);
    float c = (float)k;
    for (int i = 0; i < CODEC_BLOCK; i++) x[i] = x[i] / c;
    if (out == NULL) {
        memcpy(g, x, sizeof x);
        return 0;
    }
    int8_t q[CODEC_BLOCK];
    uint16_t sb;
    float s;
    if (CK(codec_quantize)(x, q, &sb, &s, bits) != 0) return -1;
    for (int i = 0; i < CODEC_BLOCK; i++) g[i] = (float)q[i] * s; /* as codec_decode_block decodes out */
    CK(codec_store)(q, sb, out, bits);
    return 0;
}
