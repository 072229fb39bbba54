/*
 * commit_topk.c: the compute of a commit of a --compress topk run (SparseLoCo; common/math/codec_sparse.h,
 * docs/compression.md "The sparse codec").
 *
 * Each participant's Δ is a sparse payload (the top entries of its accumulator per chunk, 2 bits each).
 * The mean g is, per element, +0 plus each participant's weight times its decoded value, in participant
 * order, in fp32: the weight is 1/W for W participants, or the token weight (--weight-by tokens). Then
 * the outer step (momentum 0 by default for this codec: the workers' accumulators are the momentum).
 * With --download update the round's update is the participants' payloads as pushed, with their
 * weights (sparse_update_head): the log entry and the reply to workers, who compute the same mean from
 * it (worker/diloco/update.c), so it grows with the participants instead of being selected again.
 * commit_compute.c calls these for topk runs.
 */
#include "commit.h"

#include <string.h>

#include "math/codec_sparse.h"
#include "math/outer.h"

size_t commit_topk_update_bytes(const ss_commit *c, const ss_shard *s)
{
    uint32_t w = 0;
    for (int i = 0; i < c->np; i++) w += !c->dropped[i];
    return sparse_update_bytes(w, sparse_shard_bytes(c->ss->rc.topk_density, s->n));
}

/* Participant i's weight (i counts every participant, p the ones not dropped). */
static float weight_of(const ss_commit *c, int i, int used)
{
    return runconf_weighted(&c->ss->rc) ? c->scale[i] : (float)(1.0 / (double)used);
}

/* The update's head and payloads into c->gq, once, with the first block. -1 if its size is not what
 * commit_compute allocated (a participant's Δ went missing in between). */
static int write_update(ss_commit *c, ss_shard *s, ss_delta **ds, int used)
{
    float w[MAX_PARTICIPANTS];
    size_t p = sparse_shard_bytes(c->ss->rc.topk_density, s->n);
    if (sparse_update_bytes((uint32_t)used, p) != c->gq_len) return -1;
    for (int i = 0, j = 0; i < c->np; i++)
        if (!c->dropped[i]) w[j++] = weight_of(c, i, used);
    uint8_t *out = c->gq + sparse_update_head(c->gq, (uint32_t)used, p, w);
    for (int j = 0; j < used; j++) memcpy(out + (size_t)j * p, ds[j]->payload, p);
    return 0;
}

void commit_topk_block(ss_commit *c, ss_shard *s, ss_delta **ds, int used, float *g, size_t lo, size_t len)
{
    if (lo == 0 && c->gq != NULL && write_update(c, s, ds, used) != 0) {
        c->g_bad = 1;
        return;
    }
    for (size_t i = 0; i < len; i++) g[i] = 0.0f;
    for (int i = 0, p = 0; i < c->np; i++)
        if (!c->dropped[i]) sparse_add_scaled(ds[p++]->payload, s->n, lo, len, weight_of(c, i, used), g);
    size_t bad;
    if (outer_check_finite(g, len, &bad) != 0) c->g_bad = 1; /* (crafted scales can overflow a sum) */
    if (used > 0) {
        outer_sgd_step_to(c->theta + lo, c->mom + lo, s->theta + lo, s->mom + lo, c->first, g, len, c->t.lr, c->t.mu,
                          c->t.nesterov);
    } else {
        memcpy(c->theta + lo, s->theta + lo, len * sizeof(float));
        memcpy(c->mom + lo, s->mom + lo, len * sizeof(float));
    }
}
