/* delta.c: the worker's pseudo-gradient of a round, as it goes on the wire (docs/compression.md).
 *
 * Δ = base - params (with --async-lookahead's plain rule: the start it trained from, lookahead.c), in the
 * run's codec (sync.c sends it): bf16 or fp32 in one pass with its finite
 * check and checksum; the block codecs (int8, int4, int3, int2) quantize base - params (or a device's
 * fp32 Δ) per shard in one pass per block (blocks count from each shard's first element, as the
 * shard-server decodes them). With --error-feedback, what quantization
 * dropped (Δ + e minus its decoded value) is kept in e and added to the next round's Δ; e lives only in
 * this process (a restarted worker starts again from zero). With device hooks the device computes Δ
 * (device.c); a block-codec run takes it in fp32 and quantizes it here. A topk run (SparseLoCo) sends
 * the top entries of its accumulator instead (delta_topk.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"
#include "math/bf16.h"
#include "math/codec.h"
#include "math/codec_topk.h"
#include "math/hash.h"
#include "math/outer.h"

/* Δ is made and hashed in chunks of this many elements: each chunk is hashed (the push frame's
 * checksum) while it is still in the cache, instead of in a second pass over memory as it is sent. */
#define DELTA_CHUNK 16384
_Static_assert(DELTA_CHUNK % CODEC_BLOCK == 0, "a chunk holds whole codec blocks");
_Static_assert(DELTA_CHUNK % TOPK_CHUNK == 0, "a chunk holds whole top-k chunks");

int dl_delta_dtype(const diloco *d)
{
    return d->rc.compress == BLOB_BF16 && !d->o.bf16 ? BLOB_F32 : d->rc.compress;
}

int dl_delta_alloc(diloco *d, char *err, size_t errlen)
{
    size_t n = d->numel;
    int block = codec_is_block(d->push_dtype), topk = d->push_dtype == BLOB_TOPK;
    /* a block codec encodes base - params straight from them; an fp32 Δ is needed only from a device */
    int f32 = d->push_dtype == BLOB_F32 || ((block || topk) && d->o.device.delta != NULL);
    d->delta_f32 = f32 ? dl_host_alloc(d, n * sizeof(float)) : NULL;
    d->delta_bf16 = d->push_dtype == BLOB_BF16 ? dl_host_alloc(d, n * sizeof(uint16_t)) : NULL;
    if ((f32 && !d->delta_f32) || (d->push_dtype == BLOB_BF16 && !d->delta_bf16)) goto oom;
    if (topk) return dl_delta_topk_alloc(d, err, errlen);
    if (!block) return 0;
    d->delta_qoff = calloc((size_t)d->rc.nshards + 1, sizeof(size_t));
    if (!d->delta_qoff) goto oom;
    for (int k = 0; k < d->rc.nshards; k++)
        d->delta_qoff[k + 1] = d->delta_qoff[k] + codec_bytes(d->push_dtype, runconf_shard_numel(&d->rc, k));
    d->delta_q = malloc(d->delta_qoff[d->rc.nshards] ? d->delta_qoff[d->rc.nshards] : 1);
    if (!d->delta_q) goto oom;
    if (d->o.error_feedback && !(d->ef = calloc(n, sizeof(float)))) goto oom;
    return 0;
oom:
    err_set(err, errlen, "out of memory for the pseudo-gradient of %zu parameters", n);
    return -1;
}

void dl_delta_free(diloco *d)
{
    dl_host_free(d, d->delta_bf16);
    dl_host_free(d, d->delta_f32);
    free(d->delta_q);
    free(d->delta_qoff);
    free(d->ef);
}

const void *dl_delta_shard(const diloco *d, int k, size_t *bytes)
{
    size_t off = (size_t)d->rc.shard_bounds[k], n = (size_t)runconf_shard_numel(&d->rc, k);
    if (codec_is_block(d->push_dtype) || d->push_dtype == BLOB_TOPK) {
        *bytes = d->delta_qoff[k + 1] - d->delta_qoff[k];
        return d->delta_q + d->delta_qoff[k];
    }
    *bytes = n * (d->push_dtype == BLOB_BF16 ? sizeof(uint16_t) : sizeof(float));
    return d->push_dtype == BLOB_BF16 ? (const void *)(d->delta_bf16 + off) : (const void *)(d->delta_f32 + off);
}

/* Elements [c, c+len) of shard k (c - lo a multiple of CODEC_BLOCK) of Δ = from - params (from_device:
 * the fp32 Δ in delta_f32), plus the kept error, quantized, the new error kept, in one pass per codec
 * block. Returns the encoded bytes (in delta_q), or NULL with *bad set when Δ is not finite. */
static const uint8_t *encode_chunk(diloco *d, const float *from, int k, size_t c, size_t len, int from_device,
                                   size_t *bad, size_t *qlen)
{
    size_t lo = (size_t)d->rc.shard_bounds[k];
    const float *a = from_device ? d->delta_f32 + c : from + c, *b = from_device ? NULL : d->params + c;
    uint8_t *q = d->delta_q + d->delta_qoff[k] + codec_offset(d->push_dtype, c - lo);
    /* a non-finite Δ stays non-finite with the error added: the encoder finds it */
    if (codec_encode_delta(d->push_dtype, a, b, d->ef ? d->ef + c : NULL, len, q, bad) < 0) return NULL;
    *qlen = codec_bytes(d->push_dtype, len);
    return q;
}

/* Δ = from - params of shard k on the host (or, from_device, already in delta_f32), its finite check
 * (from is finite, so a non-finite Δ means params are not), its encoding and its checksum, in one pass.
 * 0, or -1 with *bad its first bad index. */
static int shard_delta(diloco *d, const float *from, int k, int from_device, XXH3_state_t *xs, size_t *bad)
{
    size_t lo = (size_t)d->rc.shard_bounds[k], hi = (size_t)d->rc.shard_bounds[k + 1];
    int block = codec_is_block(d->push_dtype) || d->push_dtype == BLOB_TOPK;
    XXH3_64bits_reset(xs);
    for (size_t c = lo; c < hi; c += DELTA_CHUNK) {
        size_t len = hi - c < DELTA_CHUNK ? hi - c : DELTA_CHUNK, b = 0, qlen = 0;
        int rc;
        if (d->push_dtype == BLOB_BF16) {
            rc = bf16_encode_diff(from + c, d->params + c, d->delta_bf16 + c, len, &b);
            hash_update(xs, d->delta_bf16 + c, len * sizeof(uint16_t));
        } else if (!block) {
            for (size_t i = c; i < c + len; i++) d->delta_f32[i] = from[i] - d->params[i];
            rc = outer_check_finite(d->delta_f32 + c, len, &b);
            hash_update(xs, d->delta_f32 + c, len * sizeof(float));
        } else {
            const uint8_t *q = d->push_dtype == BLOB_TOPK ? dl_delta_topk_encode(d, k, c, len, from_device, &b, &qlen)
                                                          : encode_chunk(d, from, k, c, len, from_device, &b, &qlen);
            rc = q ? 0 : -1;
            if (q) hash_update(xs, q, qlen);
        }
        if (rc < 0) {
            *bad = c + b;
            return -1;
        }
    }
    d->delta_xxh[k] = hi > lo ? XXH3_64bits_digest(xs) : 0; /* (0 is the checksum of no bytes) */
    return 0;
}

/* The tokens the trainer has reported so far (diloco_report, on the training thread; the heartbeat reads them). */
static uint64_t tokens_now(diloco *d)
{
    pthread_mutex_lock(&d->hb_mu);
    uint64_t tokens = d->tokens;
    pthread_mutex_unlock(&d->hb_mu);
    return tokens;
}

/* --weight-by tokens: a pseudo-gradient counts by the tokens behind it (the shard-server weighs them, and an
 * async run scales each submission by tokens / --weight-ref-tokens). A worker that reports no tokens
 * (diloco_report's count; a window after a new registration may have none, a session none at all is the
 * mistake) sends 1, and an async reference far from a submission's tokens scales every step
 * far down or up: the quadratic, 4 async workers of 20-token submissions, --weight-ref-tokens 1000000 (scale
 * 2e-5): loss 0.2276 after 200 steps, flat since step 40, where 20 reaches 0.073. Checked at the first send,
 * said with what to do. */
static void warn_token_weight(diloco *d, int f, int reported)
{
    if (!d->rc.weight_tokens || d->tokens_checked) return;
    d->tokens_checked = 1; /* the first send: later windows may be short for a reason (a new registration) */
    uint64_t ref = d->rc.weight_ref_tokens ? d->rc.weight_ref_tokens : 1, n = d->push_tokens[f];
    double scale = (double)n / (double)ref;
    if (!reported)
        log_warn("run '%s' weighs pseudo-gradients by tokens (--weight-by tokens), but this worker has reported "
                 "none (diloco_report's tokens; Python: DiLoCo.report(loss, tokens=N)): each of its "
                 "pseudo-gradients counts as 1 token, %s; report the tokens of every step",
                 d->run,
                 d->rc.async ? "scaled by 1 / --weight-ref-tokens, so it barely moves the run"
                             : "next to the other workers' counts, so it barely enters the mean");
    else if (d->rc.async && (scale < 0.1 || scale > 10))
        log_warn("fragment %d's submission of %llu tokens enters the outer step scaled by %llu / %llu = %.3g (the "
                 "--weight-ref-tokens of run '%s'), so every step is %s; init the run with --weight-ref-tokens near "
                 "the tokens of a normal submission (about %llu here)",
                 f, (unsigned long long)n, (unsigned long long)n, (unsigned long long)ref, scale, d->run,
                 scale < 1 ? "far smaller than the outer lr says and the run barely moves"
                           : "far larger than the outer lr says and overshoots",
                 (unsigned long long)n);
}

/* Where fragment f's training started, what Δ is measured from: base, or with --async-lookahead's plain
 * rule the start ahead that the trainer was given (lookahead.c; a rebase run measures from base). */
static const float *delta_origin(const diloco *d, int f)
{
    return d->la_on != NULL && d->la_on[f] && !runconf_rebase(&d->rc) ? d->la : d->base;
}

/* Δ of fragment f into delta_*, each shard's checksum into delta_xxh; -1 if our own training produced
 * NaN/Inf (or the device failed). */
int dl_delta_compute(diloco *d, int f, char *err, size_t errlen)
{
    size_t lo = (size_t)d->rc.shard_bounds[dl_first_shard(d, f)], bad = 0;
    int rc = 0, block = codec_is_block(d->push_dtype) || d->push_dtype == BLOB_TOPK;
    if (d->dev) { /* the device computes it against its snapshot (device.c); -1 here: a device error */
        if ((rc = dl_dev_delta(d, f, delta_origin(d, f), &bad, err, errlen)) < 0) return -1;
        rc = -rc;
        for (int k = dl_first_shard(d, f); k < dl_last_shard(d, f) && rc == 0 && !block; k++) {
            size_t bytes;
            const void *p = dl_delta_shard(d, k, &bytes);
            d->delta_xxh[k] = hash64(p, bytes);
        }
        if (rc < 0) bad += lo;
    }
    if (rc == 0 && (!d->dev || block)) {
        XXH3_state_t *xs = XXH3_createState();
        if (!xs) {
            err_set(err, errlen, "out of memory");
            return -1;
        }
        const float *from = delta_origin(d, f);
        for (int k = dl_first_shard(d, f); k < dl_last_shard(d, f) && rc == 0; k++)
            rc = shard_delta(d, from, k, d->dev, xs, &bad);
        XXH3_freeState(xs);
    }
    if (rc < 0) {
        err_set(err, errlen,
                "the pseudo-gradient is not finite at index %zu (NaN or Inf in the local parameters): inner training "
                "diverged",
                bad);
        return -1;
    }
    uint64_t tokens = tokens_now(d);
    d->push_tokens[f] = tokens > d->tokens_at_send[f] ? tokens - d->tokens_at_send[f] : 1;
    warn_token_weight(d, f, tokens > 0);
    d->tokens_before[f] = d->tokens_at_send[f];
    d->tokens_at_send[f] = tokens;
    d->counted_round[f] = -1; /* this Δ has not passed a barrier yet */
    return 0;
}

void dl_delta_untaken(diloco *d, int f)
{
    d->tokens_at_send[f] = d->tokens_before[f];
}

void dl_delta_restart_tokens(diloco *d, int f)
{
    d->tokens_at_send[f] = d->tokens_before[f] = tokens_now(d);
}

void dl_delta_forget_tokens(diloco *d)
{
    for (int f = 0; f < d->rc.nfragments; f++) dl_delta_restart_tokens(d, f);
}
