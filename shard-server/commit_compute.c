/*
 * commit_compute.c: the compute of a commit (the mean of the Δ and the outer step), from a queue.
 *
 * Commits whose Δ are all here are queued in order and computed one slice per turn of the event loop,
 * in cache-sized blocks, on copies of θ and momentum (the cache keeps serving the current version
 * meanwhile); the digest of θ' is streamed along. The usual sync commit (unweighted bf16 Δ, no Delayed
 * Nesterov) fuses the mean and the step; a block codec's (int8 ... int2) computes the mean, and its
 * round trip with --download update, in one pass per codec block before the step; any other computes
 * g first (and an async --async-rule rebase adds θ_now - θ_base to it); a topk run's (commit_topk.c) the
 * weighted mean of sparse Δ. The mean is in fp32, in
 * participant order, without FMA: the same bits on every server and in replay. A finished compute goes
 * on through the commit's steps (commit.h: the log entry, or a compute ahead's wait for its barrier):
 * this file calls only commit_topk.c and commit_obj.c of the commit's files.
 */
#include "commit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "math/codec.h"
#include "math/codec_topk.h"
#include "math/hash.h"
#include "math/outer.h"
#include "math/outer_dn.h"

/* The compute of a commit runs in slices of this many elements, one slice per turn of the event loop,
 * so a server's sockets (the log entry streaming to Redis, parameters to workers) are served while it
 * computes the next shard. Every kernel is element-wise: slicing does not change a bit. */
#define COMMIT_SLICE ((size_t)256 * 1024)
#define COMMIT_BLOCK ((size_t)32 * 1024) /* mean and step of a block while it is in the L2 cache */

static void cq_arm(ss_ctx *ss)
{
    static const struct timeval zero = {0, 0};
    evtimer_add(ss->cq_ev, &zero);
}

static ss_commit *cq_pop(ss_ctx *ss)
{
    ss_commit *c = ss->cq_head;
    if (c != NULL) {
        ss->cq_head = c->qnext;
        if (ss->cq_head == NULL) ss->cq_tail = NULL;
        c->qnext = NULL;
    }
    return c;
}

void cq_replace(ss_ctx *ss, ss_commit *old, ss_commit *by)
{
    for (ss_commit **pp = &ss->cq_head; *pp != NULL; pp = &(*pp)->qnext) {
        if (*pp != old) continue;
        by->qnext = old->qnext;
        *pp = by;
        if (ss->cq_tail == old) ss->cq_tail = by;
        old->qnext = NULL;
        return;
    }
}

/* The participants' Δ of this commit, in participant order, dropped ones left out. Returns how many,
 * or -1 if one went missing; *all_bf16 tells whether every one is bf16. */
static int commit_gather_deltas(ss_commit *c, ss_shard *s, ss_delta **out, int *all_bf16)
{
    int k = 0;
    *all_bf16 = 1;
    for (int i = 0; i < c->np; i++) {
        if (c->dropped[i]) continue;
        ss_delta *d = delta_find(s, c->round, c->ids[i], c->incs[i]);
        if (d == NULL) return -1;
        *all_bf16 &= d->dtype == BLOB_BF16;
        out[k++] = d;
    }
    return k;
}

/* The usual sync commit (unweighted bf16 Δ, no Delayed Nesterov): the mean and the step in one pass per
 * block, g kept in registers; g itself is computed for the log entry once the parameters are out
 * (cq_fill_g), with the same formula, so the bits agree. */
static int commit_fast(const ss_commit *c, int used, int all_bf16)
{
    return used > 0 && all_bf16 && c->dnbuf == NULL && !runconf_weighted(&c->ss->rc) && c->gq == NULL &&
           c->base_theta == NULL;
}

static void commit_block_fast(ss_commit *c, ss_shard *s, ss_delta **ds, int used, size_t lo, size_t len)
{
    const uint16_t *x[MAX_PARTICIPANTS];
    for (int i = 0; i < used; i++) x[i] = (const uint16_t *)ds[i]->payload + lo;
    outer_mean_step_bf16_to(c->theta + lo, c->mom + lo, s->theta + lo, s->mom + lo, c->first, x, (uint32_t)used, len,
                            c->t.lr, c->t.mu, c->t.nesterov);
}

/* One block of a block codec's Δ, decoded for a weighted sum (the server is single-threaded). */
static float decoded[COMMIT_BLOCK];
_Static_assert(COMMIT_BLOCK % CODEC_BLOCK == 0, "a compute block holds whole codec blocks");
_Static_assert(COMMIT_BLOCK % TOPK_CHUNK == 0 && COMMIT_SLICE % TOPK_CHUNK == 0, "blocks hold whole top-k chunks");
/* g of one block when the log entry keeps its encoding only (--download update): a scratch that stays in
 * the cache, where a per-commit array of n floats would pull every block of g in from memory. */
static float g_block[COMMIT_BLOCK];

/* A block codec's commit (unweighted, no Delayed Nesterov): the mean of the codes, and with --download
 * update its round trip, in one pass per codec block (codec_mean), then the step, in blocks of
 * CODEC_COMMIT_BLOCK: g stays in the L1 cache from the codes to the step and θ' to its digest. */
#define CODEC_COMMIT_BLOCK ((size_t)4096)
_Static_assert(COMMIT_BLOCK % CODEC_COMMIT_BLOCK == 0 && CODEC_COMMIT_BLOCK % CODEC_BLOCK == 0,
               "blocks nest in whole codec blocks");

static int commit_codec(const ss_commit *c, ss_delta **ds, int used)
{
    if (used <= 0 || c->dnbuf != NULL || c->base_theta != NULL || runconf_weighted(&c->ss->rc) ||
        !codec_is_block(c->ss->rc.compress))
        return 0;
    for (int i = 0; i < used; i++)
        if (ds[i]->dtype != c->ss->rc.compress) return 0;
    return 1;
}

static void commit_block_codec(ss_commit *c, ss_shard *s, ss_delta **ds, int used, size_t lo, size_t len)
{
    const uint8_t *in[MAX_PARTICIPANTS];
    int dt = c->ss->rc.compress;
    size_t bad, off = codec_offset(dt, lo);
    for (int i = 0; i < used; i++) in[i] = ds[i]->payload + off;
    float *g = c->gq != NULL ? g_block : c->g + lo;
    if (codec_mean(dt, in, (uint32_t)used, len, g, c->gq != NULL ? c->gq + off : NULL, &bad) != 0)
        c->g_bad = 1; /* the mean is not finite: the commit fails at the end of this slice */
    outer_sgd_step_to(c->theta + lo, c->mom + lo, s->theta + lo, s->mom + lo, c->first, g, len, c->t.lr, c->t.mu,
                      c->t.nesterov);
}

/* Any other commit: g = the (weighted) mean into c->g (or g_block), then the step (plain, or Delayed Nesterov). */
static void commit_block_general(ss_commit *c, ss_shard *s, ss_delta **ds, int used, size_t lo, size_t len)
{
    float *g = c->gq != NULL ? g_block : c->g + lo;
    if (c->ss->rc.compress == BLOB_TOPK) { /* sync only (coordinator init refuses async topk) */
        commit_topk_block(c, s, ds, used, g, lo, len);
        return;
    }
    outer_sum_zero(g, len);
    int weighted = runconf_weighted(&c->ss->rc);
    for (int i = 0, p = 0; i < c->np; i++) {
        if (c->dropped[i]) continue;
        ss_delta *d = ds[p++];
        if (codec_is_block(d->dtype) && !weighted) { /* decoded and summed as fp32 at once */
            codec_decode_add(d->dtype, d->payload + codec_offset(d->dtype, lo), len, g);
        } else if (codec_is_block(d->dtype)) {
            codec_decode(d->dtype, d->payload + codec_offset(d->dtype, lo), len, decoded);
            outer_sum_add_scaled_f32(g, decoded, c->scale[i], len);
        } else if (weighted && d->dtype == BLOB_BF16)
            outer_sum_add_scaled_bf16(g, (const uint16_t *)d->payload + lo, c->scale[i], len);
        else if (weighted)
            outer_sum_add_scaled_f32(g, (const float *)d->payload + lo, c->scale[i], len);
        else if (d->dtype == BLOB_BF16)
            outer_sum_add_bf16(g, (const uint16_t *)d->payload + lo, len);
        else
            outer_sum_add_f32(g, (const float *)d->payload + lo, len);
    }
    if (!weighted) outer_mean_finish(g, len, (uint32_t)used);
    if (used > 0 && c->base_theta != NULL) /* --async-rule rebase: measured from the version it moves */
        outer_rebase(g, s->theta + lo, c->base_theta + lo, c->ss->rc.rebase_fraction, len);
    size_t bad;
    int dt = c->ss->rc.compress;
    if (c->gq != NULL && codec_round_trip(dt, g, len, c->gq + codec_offset(dt, lo), &bad) != 0)
        c->g_bad = 1; /* --download update: the step takes exactly what the workers will decode */
    if (used > 0 && c->dnbuf == NULL) {
        outer_sgd_step_to(c->theta + lo, c->mom + lo, s->theta + lo, s->mom + lo, c->first, g, len, c->t.lr, c->t.mu,
                          c->t.nesterov);
        return;
    }
    memcpy(c->theta + lo, s->theta + lo, len * sizeof(float));
    memcpy(c->mom + lo, s->mom + lo, len * sizeof(float));
    if (c->dnbuf != NULL) memcpy(c->dnbuf + lo, s->dnbuf + lo, len * sizeof(float));
    if (used > 0 && c->dnbuf != NULL) /* async Delayed Nesterov: submission number t = dn_t0 + version + 1 */
        outer_dn_step(c->ss->rc.dn_variant, c->theta + lo, c->mom + lo, c->dnbuf + lo, g, len,
                      runconf_dn_t0(&c->ss->rc, c->k) + (uint64_t)c->round + 1, (uint32_t)c->ss->rc.dn_buffer,
                      c->t.lr, c->t.mu, c->t.nesterov);
    else if (used > 0)
        outer_sgd_step(c->theta + lo, c->mom + lo, c->first, g, len, c->t.lr, c->t.mu, c->t.nesterov);
}

/* One slice of the head commit, in cache-sized blocks: θ' and momentum' on copies (the cache keeps
 * serving version round meanwhile), the digest of θ' streamed along. Pops c from the queue when it is
 * done with it. */
static void commit_slice(ss_commit *c, ss_shard *s)
{
    ss_delta *ds[MAX_PARTICIPANTS];
    int all_bf16, used = commit_gather_deltas(c, s, ds, &all_bf16);
    if (c->pos == 0) { /* the path is chosen once: the fast one leaves g to cq_fill_g for every block */
        c->used = used;
        c->g_deferred = used >= 0 && commit_fast(c, used, all_bf16);
    }
    if (used < 0 || used != c->used || (c->g_deferred && !all_bf16)) {
        snprintf(c->errmsg, sizeof c->errmsg, "a pseudo-gradient went missing");
        cq_pop(c->ss);
        commit_finish(c, OUT_WAIT);
        return;
    }
    size_t n = s->n, end = n - c->pos < COMMIT_SLICE ? n : c->pos + COMMIT_SLICE;
    int codec = !c->g_deferred && commit_codec(c, ds, used);
    size_t block = codec ? CODEC_COMMIT_BLOCK : COMMIT_BLOCK;
    for (size_t lo = c->pos; lo < end; lo += block) {
        size_t len = end - lo < block ? end - lo : block;
        if (c->g_deferred)
            commit_block_fast(c, s, ds, used, lo, len);
        else if (codec)
            commit_block_codec(c, s, ds, used, lo, len);
        else
            commit_block_general(c, s, ds, used, lo, len);
        hash_update(c->xs, c->theta + lo, len * sizeof(float));
    }
    c->pos = end;
    if (c->g_bad) {
        cq_pop(c->ss);
        commit_fail(c, "the averaged pseudo-gradient is not finite", 0);
        return;
    }
    if (c->pos < n) return;
    c->has_mom = s->has_mom || (c->used > 0 && (c->t.mu != 0.0f || c->dnbuf != NULL));
    cq_pop(c->ss);
    c->steps->computed(c, s); /* a round's commit: the log entry; a compute ahead: it waits for its barrier */
}

/* The commit is then given up like any other that lost a Δ. */
int cq_fill_g(ss_commit *c, ss_shard *s)
{
    ss_delta *ds[MAX_PARTICIPANTS];
    const uint16_t *x[MAX_PARTICIPANTS];
    int all_bf16, used = commit_gather_deltas(c, s, ds, &all_bf16);
    if (used != c->used || !all_bf16) return -1;
    for (int i = 0; i < used; i++) x[i] = (const uint16_t *)ds[i]->payload;
    outer_mean_bf16(c->g, x, (uint32_t)used, s->n);
    c->g_deferred = 0;
    return 0;
}

void cq_on_turn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ss_ctx *ss = arg;
    ss_commit *c = ss->cq_head;
    if (c == NULL) return;
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        cq_pop(ss);
        commit_free(c);
    } else {
        commit_slice(c, s); /* pops c when it is done with it */
    }
    if (ss->cq_head != NULL) cq_arm(ss);
}

/* --weight-by tokens: sync, each participant weighs tokens_i / sum(tokens) (a weighted mean); async,
 * the one submission is scaled by tokens / weight_ref_tokens. An async --staleness-weight multiplies
 * that (or 1) by its weight of the submission's staleness (outer_stale_weight; round - base, as
 * dl_submit recorded them). Computed in double, used as fp32, in participant order: the same on every
 * server and in replay (the log keeps the weighted g). Nothing otherwise. */
void commit_compute_weights(ss_commit *c, ss_shard *s)
{
    const runconf *rc = &c->ss->rc;
    if (!runconf_weighted(rc)) return;
    double total = 0;
    for (int i = 0; i < c->np; i++) {
        ss_delta *d = c->dropped[i] ? NULL : delta_find(s, c->round, c->ids[i], c->incs[i]);
        if (d != NULL) total += (double)d->tokens;
    }
    if (rc->async) total = (double)(rc->weight_ref_tokens ? rc->weight_ref_tokens : 1);
    double stale = rc->async ? outer_stale_weight(rc->stale_weight, c->round - c->base, rc->stale_ref) : 1.0;
    for (int i = 0; i < c->np; i++) {
        ss_delta *d = c->dropped[i] ? NULL : delta_find(s, c->round, c->ids[i], c->incs[i]);
        double w = d == NULL || total <= 0 ? 0.0 : rc->weight_tokens ? (double)d->tokens / total : 1.0;
        c->scale[i] = (float)(w * stale);
    }
}

/* --async-rule rebase: θ of the version the submission was computed from (c->base), which the shard
 * holds back to rebase_window versions (past.c; dl_submit refuses staler ones). -1 (the commit failed)
 * if it does not: the shard reloads, which rebuilds them from the snapshot and the log. */
static int commit_find_base(ss_commit *c, ss_shard *s)
{
    c->base_theta = past_theta(s, c->base);
    if (c->base_theta != NULL) return 0;
    char why[160];
    snprintf(why, sizeof why, "the rebase needs version %lld, which this server does not hold (it holds %lld back)",
             (long long)c->base, (long long)s->past_cap);
    commit_fail(c, why, 1);
    return -1;
}

/* Every Δ is here: the participants' weights, then queue the compute of version round+1. */
void commit_compute(ss_commit *c, ss_shard *s)
{
    commit_compute_weights(c, s);
    ss_ctx *ss = c->ss;
    size_t n = s->n;
    if (runconf_rebase(&ss->rc) && commit_find_base(c, s) != 0) return;
    if (!ss->rc.download_update) c->g = malloc(n * sizeof(float)); /* else the log entry is c->gq */
    c->theta = malloc(n * sizeof(float));
    c->mom = malloc(n * sizeof(float));
    c->xs = XXH3_createState();
    if (s->dnbuf != NULL) c->dnbuf = malloc(n * sizeof(float));
    if (ss->rc.download_update) {
        c->gq_len = ss->rc.compress == BLOB_TOPK ? commit_topk_update_bytes(c, s) : codec_bytes(ss->rc.compress, n);
        c->gq = malloc(c->gq_len + 1);
    }
    int g_missing = ss->rc.download_update ? c->gq == NULL : c->g == NULL;
    if (g_missing || c->theta == NULL || c->mom == NULL || c->xs == NULL || (s->dnbuf != NULL && c->dnbuf == NULL)) {
        commit_fail(c, "out of memory", 0);
        return;
    }
    XXH3_64bits_reset(c->xs);
    c->t = ss->tun;
    c->first = !s->has_mom;
    c->pos = 0;
    log_debug("shard %d round %lld: every pseudo-gradient here at +%llu ms; step queued%s", s->k, (long long)c->round,
              (unsigned long long)(now_ms() - c->t0), c->ahead ? " (ahead of the barrier)" : "");
    if (ss->cq_tail != NULL)
        ss->cq_tail->qnext = c;
    else
        ss->cq_head = c;
    ss->cq_tail = c;
    cq_arm(ss);
}
