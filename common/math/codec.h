/*
 * codec.h: the codecs of pseudo-gradients on the wire and in the log (docs/compression.md).
 *
 * A run sends pseudo-gradients as fp32, bf16 (blob.h dtypes 1 and 2) or as block-quantized integers:
 * int8 (dtype 3), int4 (dtype 4), int3 (dtype 5) or int2 (dtype 6). A quantized payload of n elements
 * is a sequence of blocks of CODEC_BLOCK elements (the last one may be shorter), each a little-endian
 * bf16 scale followed by its codes, packed little-endian with the first element in the lowest bits: one
 * signed byte per element (int8), two 4-bit codes per byte (int4), eight 3-bit codes in every 3 bytes
 * (int3), four 2-bit codes per byte (int2), all two's complement. An element is code * scale; the scale
 * is the block's largest magnitude divided by the largest code (127, 7, 3 or 1), rounded to bf16; codes
 * are x / scale rounded to nearest, ties to even, clamped to -largest..largest. Everything is exact IEEE arithmetic without contraction, so the portable and the AVX2 build
 * give the same bits (tests/test_codec.c). Blocks count from the start of one shard's payload.
 */
#ifndef DILOCO_CODEC_H
#define DILOCO_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "math/dtype.h"

#define CODEC_BLOCK 256

/* The run setting `compress`: a blob dtype (BLOB_F32 ... BLOB_I2), or 0 if unknown. */
int codec_parse(const char *name);
const char *codec_name(int dtype); /* "fp32", "bf16", "int8", "int4", "int3", "int2", "topk" or "?" */
int codec_is_block(int dtype);     /* int8, int4, int3 or int2 */

/* Payload bytes of n elements in this dtype (0 for an unknown dtype or an overflowing n); a BLOB_TOPK
 * payload's n is its length in bytes (codec_sparse.h has its sizes). */
size_t codec_bytes(int dtype, uint64_t n);
/* Byte offset of element lo (for the block codecs a multiple of CODEC_BLOCK) in a payload. */
size_t codec_offset(int dtype, size_t lo);

/* Encode x[0..n) (n elements at a block boundary of the shard) into out (codec_bytes(dtype, n) bytes).
 * 0, or -1 with *bad = the first index whose value is NaN or infinite (out then must not be used).
 * Every dtype: fp32 and bf16 (little-endian, no alignment needed) as well. */
int codec_encode(int dtype, const float *x, size_t n, uint8_t *out, size_t *bad);
/* A block codec's encoding of x = a - b (b NULL: x = a), plus ef when ef is not NULL, in one pass per
 * block: with ef, ef then holds what the encoding dropped (x minus its decoded value: error feedback).
 * Bit for bit what computing x, codec_encode and codec_decode would give. 0, or -1 with *bad = the
 * first index whose x is not finite (out, and ef from the block of *bad on, then must not be used). */
int codec_encode_delta(int dtype, const float *a, const float *b, float *ef, size_t n, uint8_t *out, size_t *bad);
/* Decode n elements from in (starting at a block boundary) into out. */
void codec_decode(int dtype, const uint8_t *in, size_t n, float *out);
/* A block codec's n decoded elements added to acc (acc[i] = acc[i] + decoded, in one pass): bit for bit
 * codec_decode followed by that sum. */
void codec_decode_add(int dtype, const uint8_t *in, size_t n, float *acc);
/* Encode x into out, then replace x by its decoded value (what a receiver of out will see). */
int codec_round_trip(int dtype, float *x, size_t n, uint8_t *out, size_t *bad);
/* The shard-server's mean of k >= 1 block-codec payloads in[0..k-1] (each pointing at element 0 of the
 * n, at a block boundary), summed in that order in fp32 and divided by k, into g; with out, then
 * codec_round_trip of it (out gets the encoding, g the decoded mean). One pass per block of
 * CODEC_BLOCK: bit for bit outer_sum_zero, codec_decode_add of each, outer_mean_finish and
 * codec_round_trip. 0, or -1 (with out only) and *bad = the first element of the first block whose mean
 * is not finite. */
int codec_mean(int dtype, const uint8_t *const *in, uint32_t k, size_t n, float *g, uint8_t *out, size_t *bad);
/* The largest scale a received block may have (bf16 bits): below 2^121, so that every code, even a
 * crafted -128, times it is a finite fp32. Larger finite scales passed codec_check and decoded to +-Inf
 * (found by fuzz/fuzz_codec.c); an honest encoder only makes one for values beyond ~3.36e38. */
#define CODEC_SCALE_MAX_BITS 0x7BFFu
/* A received payload's scales are finite, not negative and at most CODEC_SCALE_MAX_BITS: 0, or -1 with
 * *bad = the first element of the first bad block. */
int codec_check(int dtype, const uint8_t *in, size_t n, size_t *bad);

/* Which build runs (tests and bin/bench-codec): 1 forces the portable code, 0 lets the CPU decide. */
void codec_force_portable(int on);

#endif
