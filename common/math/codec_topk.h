/*
 * codec_topk.h: the sparse chunk codec of SparseLoCo-style pseudo-gradients (issue 28,
 * docs/compression.md "The sparse codec (`--compress topk`, SparseLoCo)"): one chunk; codec_sparse.h puts chunks together into a shard's payload.
 *
 * A chunk of n <= TOPK_CHUNK elements keeps k of them: the k largest magnitudes of the worker's
 * error-feedback accumulator e, ties broken by the lower index, each sent as a 2-bit code with one bf16
 * scale per chunk. Layout, little-endian: u16 count k, u16 bf16 scale, the k chunk-relative indices in
 * increasing order in Elias-Fano form (with l the largest integer such that k * 2^l <= n: each index's
 * low l bits, packed, the first in the lowest bits; then an upper bitmap of k + ((n - 1) >> l) + 1 bits
 * in which the j-th index i (from 0) sets bit (i >> l) + j; each part padded to whole bytes), then the
 * k codes, 2 bits each, four per byte, the first in the lowest bits. The size depends on k and n only:
 * 104 bytes for 82 of 4096 (2%), where 12-bit indices took 148. A code is bit 1 the sign, bit 0 the
 * magnitude minus one: it decodes as -+(1 or 2) * scale. The scale is the largest kept magnitude / 2
 * rounded to bf16; a magnitude code is |x| / scale rounded to nearest, ties to even, clamped to 1..2 (a
 * kept element is never 0). All exact IEEE arithmetic, so every build gives the same bits.
 */
#ifndef DILOCO_CODEC_TOPK_H
#define DILOCO_CODEC_TOPK_H

#include <stddef.h>
#include <stdint.h>

#define TOPK_CHUNK 4096 /* elements per chunk: indices fit 12 bits */

/* Bytes of an encoded chunk of k entries of n elements. */
size_t topk_chunk_bytes(uint32_t k, size_t n);
/* The number of entries a chunk of n elements keeps at this density: density * n rounded to nearest, at
 * least 1, at most n. */
uint32_t topk_count(double density, size_t n);

/* Encode the k largest magnitudes of e[0..n) into out (topk_chunk_bytes(k, n) bytes) and subtract their
 * decoded values from e (what the chunk did not carry stays for the next round). 0, or -1 with *bad =
 * the first index of a NaN or infinite element (nothing written, e unchanged); -1 with *bad = n when
 * n > TOPK_CHUNK or k > n. */
int topk_encode_chunk(float *e, size_t n, uint32_t k, uint8_t *out, size_t *bad);
/* A received chunk for n elements in in[0..len): 0 and *k = its count when the length matches the count,
 * the indices increase strictly and are < n, and the scale is finite, not negative and at most
 * CODEC_SCALE_MAX_BITS; -1 otherwise (err BADCODEC). */
int topk_check_chunk(const uint8_t *in, size_t len, size_t n, uint32_t *k);
/* acc[index] += decoded value, for each entry of a checked chunk of n elements. */
void topk_decode_add_chunk(const uint8_t *in, size_t n, float *acc);
/* acc[index] = acc[index] + w * decoded value (two roundings, no contraction), for each entry of a
 * checked chunk: a participant's share of the shard-servers' weighted mean (codec_sparse.h). */
void topk_decode_add_scaled_chunk(const uint8_t *in, size_t n, float w, float *acc);
/* The count k of an encoded chunk (its first two bytes). */
uint32_t topk_chunk_count(const uint8_t *in);

#endif
