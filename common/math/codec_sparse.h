/*
 * codec_sparse.h: the top-k codec over whole shards (coordinator init --compress topk; SparseLoCo,
 * docs/compression.md "The sparse codec").
 *
 * A shard's pushed payload (blob dtype BLOB_TOPK, whose count is its length in bytes) is its chunks of
 * TOPK_CHUNK elements, counted from the shard's first element (the last one may be shorter), each
 * encoded by codec_topk.c with k = topk_count(density, chunk length) entries: the size is a function of
 * the shard's length and the run's density alone, and every full chunk has the same size.
 *
 * The worker keeps an accumulator e (one fp32 per parameter): e = beta * e + Δ, then each chunk sends
 * its top k of e and e keeps what was not sent (sparse_accumulate_encode).
 *
 * The round's update (the log entry with --download update, and the reply to a worker's get) carries
 * every participant's payload as pushed, with its weight: u32 W, u32 P, W fp32 weights, then the W
 * payloads of P bytes each, in participant order (little-endian). Its mean g is, per element, +0 plus
 * each participant's w * decoded value in that order, in fp32 (sparse_update_mean): the same bits on
 * every shard-server, every worker and in replay. Its size is 8 + W * (4 + P): it grows linearly with
 * the participants.
 */
#ifndef DILOCO_CODEC_SPARSE_H
#define DILOCO_CODEC_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "math/codec_topk.h"

#define SPARSE_DENSITY_DEFAULT 0.02 /* entries kept per chunk: SparseLoCo's 1-3% */
#define SPARSE_BETA_DEFAULT 0.95    /* the accumulator's decay (e = beta * e + Δ) */

/* Bytes of a shard's payload of n elements at this density. */
size_t sparse_shard_bytes(double density, size_t n);
/* Byte offset, in a checked payload, of the chunk that starts at element c (a multiple of TOPK_CHUNK):
 * every chunk before it is full, and a checked payload's full chunks all have the size of its first. */
size_t sparse_chunk_offset(const uint8_t *payload, size_t c);
/* A received payload of a shard of n elements at this density: its length, and every chunk's count,
 * indices and scale (topk_check_chunk). 0, or -1 with *bad the first element of the first bad chunk
 * (n when the length is wrong). */
int sparse_check(const uint8_t *in, size_t len, size_t n, double density, size_t *bad);

/* The worker's chunk [0, len) of its accumulator e: e = beta * e + (a - b) (b NULL: + a), then the top
 * k of e encoded into out, e keeping what the chunk did not carry. 0, or -1 with *bad the first index
 * whose Δ or e is not finite (out and e then must not be used). */
int sparse_accumulate_encode(float *e, const float *a, const float *b, size_t len, float beta, uint32_t k, uint8_t *out,
                             size_t *bad);

/* g[0..len) = g + w * the decoded elements [lo, lo+len) of a checked payload (lo a multiple of
 * TOPK_CHUNK; len whole chunks, or up to the shard's end n). */
void sparse_add_scaled(const uint8_t *payload, size_t n, size_t lo, size_t len, float w, float *g);

/* The update of a round with w participants whose payloads are p bytes each. */
size_t sparse_update_bytes(uint32_t w, size_t p);
/* Its head: W, P and the weights (the payloads follow; the caller copies them after it). Returns the
 * offset of the first payload. */
size_t sparse_update_head(uint8_t *out, uint32_t w, size_t p, const float *weights);
/* A received update for a shard of n elements: its length, finite weights and every payload's chunks
 * (any density; full chunks all of one size). 0 and *w its participants, or -1. */
int sparse_update_check(const uint8_t *in, size_t len, size_t n, uint32_t *w);
/* g[0..len) = the mean of a checked update over elements [lo, lo+len) of the shard (lo a multiple of
 * TOPK_CHUNK): +0, then each participant's weighted values in order. */
void sparse_update_mean(const uint8_t *in, size_t n, size_t lo, size_t len, float *g);

#endif
