/*
 * codec_topk.h: the sparse chunk codec of SparseLoCo-style pseudo-gradients (issue 28,
 * docs/compression.md "The sparse codec (`--compress topk`, SparseLoCo)"): one chunk; codec_sparse.h puts chunks together into a shard's payload.
 *
 * A chunk of n <= TOPK_CHUNK elements keeps k of them: the k largest magnitudes of the worker's
 * error-feedback accumulator e, ties broken by the lower index, each sent as a b-bit code (b from
 * TOPK_BITS_MIN to TOPK_BITS_MAX, the run's --topk-bits, 2 by default) with one bf16 scale per chunk.
 * Layout, little-endian: u16 head (bits 0-12 the count k, bits 13-15 b - 2: a 2-bit chunk's head is its
 * count, as before the width was a setting), u16 bf16 scale, the k chunk-relative indices in increasing
 * order in Elias-Fano form (with l the largest integer such that k * 2^l <= n: each index's low l bits,
 * packed, the first in the lowest bits; then an upper bitmap of k + ((n - 1) >> l) + 1 bits in which the
 * j-th index i (from 0) sets bit (i >> l) + j; each part padded to whole bytes), then the k codes, b bits
 * each, packed from the lowest bit of the first byte (at 2 bits, four per byte, the first in the lowest
 * bits). The size depends on k, n and b only: 104 bytes for 82 of 4096 (2%) at 2 bits, 124 at 4, 165 at 8.
 *
 * The value grid, with M = 2^(b-1): a code is bit b-1 the sign, bits 0..b-2 the magnitude minus one: it
 * decodes as -+(1..M) * scale. The scale is the largest kept magnitude / M rounded to bf16, so the top of
 * the grid is the largest kept magnitude and nothing clips (up to the scale's rounding); a magnitude code
 * is |x| / scale rounded to nearest, ties to even, clamped to 1..M: a kept element is among the chunk's
 * largest and is never sent as 0, so no code is spent on 0. At b = 2 this is sign and 1 or 2 times
 * max / 2; at 4 bits, 1..8 times max / 8. All exact IEEE arithmetic (M is a power of two, m * scale is
 * exact in fp32), so every build gives the same bits.
 */
#ifndef DILOCO_CODEC_TOPK_H
#define DILOCO_CODEC_TOPK_H

#include <stddef.h>
#include <stdint.h>

#define TOPK_CHUNK 4096 /* elements per chunk: indices fit 12 bits, a count 13 */
#define TOPK_BITS_MIN 2
#define TOPK_BITS_MAX 8
#define TOPK_BITS_DEFAULT 2 /* SparseLoCo's 2-bit values; a run without topk_bits has them */

/* Bytes of an encoded chunk of k entries of n elements at b bits a value. */
size_t topk_chunk_bytes(uint32_t k, size_t n, unsigned bits);
/* The number of entries a chunk of n elements keeps at this density: density * n rounded to nearest, at
 * least 1, at most n. */
uint32_t topk_count(double density, size_t n);

/* Encode the k largest magnitudes of e[0..n) at b bits into out (topk_chunk_bytes(k, n, bits) bytes) and
 * subtract their decoded values from e (what the chunk did not carry stays for the next round). 0, or -1
 * with *bad = the first index of a NaN or infinite element (nothing written, e unchanged); -1 with
 * *bad = n when n > TOPK_CHUNK, k is 0 or > n, or bits is outside TOPK_BITS_MIN..TOPK_BITS_MAX. */
int topk_encode_chunk(float *e, size_t n, uint32_t k, unsigned bits, uint8_t *out, size_t *bad);
/* A received chunk for n elements in in[0..len): 0, *k = its count and *bits = its code width when the
 * width is one of TOPK_BITS_MIN..TOPK_BITS_MAX, the length matches count and width, the indices increase
 * strictly and are < n, and the scale is finite, not negative and at most CODEC_SCALE_MAX_BITS; -1
 * otherwise (err BADCODEC). */
int topk_check_chunk(const uint8_t *in, size_t len, size_t n, uint32_t *k, unsigned *bits);
/* acc[index] += decoded value, for each entry of a checked chunk of n elements. */
void topk_decode_add_chunk(const uint8_t *in, size_t n, float *acc);
/* acc[index] = acc[index] + w * decoded value (two roundings, no contraction), for each entry of a
 * checked chunk: a participant's share of the shard-servers' weighted mean (codec_sparse.h). */
void topk_decode_add_scaled_chunk(const uint8_t *in, size_t n, float w, float *acc);
/* The count k of an encoded chunk (its head's low 13 bits). */
uint32_t topk_chunk_count(const uint8_t *in);
/* The code width b of an encoded chunk (its head's top 3 bits + 2). */
unsigned topk_chunk_bits(const uint8_t *in);
/* Bytes of an encoded chunk of n elements, from its head (count and width). */
size_t topk_chunk_size(const uint8_t *in, size_t n);

#endif
