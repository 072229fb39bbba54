/*
 * commit.c: the commit of a round of one shard, and snapshots (docs/PROTOCOL.md, "Commit").
 *
 * Driven by a `get(k, r+1)` while the shard is at version r:
 *   dl_barrier(f, r): open -> `wait`; closed -> participants (sorted id:inc) minus dropped;
 *   each participant without a stored Δ: dl_member; gone (or another incarnation) -> dl_drop; alive -> `need`;
 *   all present -> g = mean of the Δ in participant order (fp32, fixed order, no FMA), outer_sgd_step
 *   on copies of θ and momentum, SET dl:{R:k}:log:<r+1>:<epoch> (bulk), dl_commit (fenced by epoch and
 *   version); success -> the copies become the cache and every waiting get is answered.
 * Zero participants left: a no-op step (θ and momentum unchanged; log entry with aux 0) so the run
 * never wedges. FENCED/VERSION/unknown outcome: the cache is rebuilt from Redis (shard_reload), which
 * also drops the shard if the lease is gone. Only one commit per shard runs at a time.
 * Every snapshot_every versions a snapshot blob (θ then momentum) is written from a copy, recorded with
 * dl_snapshot, and the blobs it makes obsolete are deleted.
 */
#include "hash.h"
#include "ss.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include <xxhash.h>

#include "keys.h"
#include "log.h"
#include "outer.h"
#include "outer_dn.h"
#include "util.h"

#define MAX_PARTICIPANTS 4096
/* The compute of a commit runs in slices of this many elements, one slice per turn of the event loop,
 * so a server's sockets (the log entry streaming to Redis, parameters to workers) are served while it
 * computes the next shard. Every kernel is element-wise: slicing does not change a bit. */
#define COMMIT_SLICE ((size_t)256 * 1024)
#define COMMIT_BLOCK ((size_t)32 * 1024) /* mean and step of a block while it is in the L2 cache */

enum commit_outcome { OUT_DONE, OUT_WAIT, OUT_NEED, OUT_ERR };

typedef struct ss_commit {
    ss_ctx *ss;
    int k;
    uint64_t gen;
    int64_t round;       /* commits version round+1 */
    int64_t epoch;
    uint64_t t0;
    int np;              /* participants not dropped at barrier time */
    char *ids[MAX_PARTICIPANTS];
    int64_t incs[MAX_PARTICIPANTS];
    int dropped[MAX_PARTICIPANTS];
    float scale[MAX_PARTICIPANTS]; /* --weight-by tokens: each participant's weight (else unused) */
    int outstanding;     /* dl_member / dl_drop calls in flight */
    int failed;
    char need[512];
    char errmsg[256];
    /* the compute (queued, sliced) */
    struct ss_commit *qnext;
    size_t pos;          /* elements done */
    int first;
    ss_tunables t;
    XXH3_state_t *xs;    /* digest of the new θ, streamed */
    /* after the step */
    float *g;            /* the averaged pseudo-gradient: the log entry's payload, sent from here */
    uint8_t head[BLOB_HEADER_MAX];
    float *theta;
    float *mom;
    int has_mom;
    float *dnbuf;        /* async Delayed Nesterov buffer after the step (NULL when DN is off) */
    int used;            /* participants averaged */
    int g_deferred;      /* g not computed yet: the fast path computes it for the log entry (commit_fill_g) */
    char digest[17];
    uint64_t theta_xxh;  /* the digest as a number */
    uint64_t t_computed; /* now_ms() when θ' was ready (its log entry waits at most LOG_DEFER_MAX_MS) */
} ss_commit;

typedef struct ss_snap {
    ss_ctx *ss;
    int k;
    int64_t version;
    int64_t epoch;
    float *both;         /* θ, momentum, then the DN buffer when there is one: the payload, sent from here */
    uint8_t head[BLOB_HEADER_MAX];
} ss_snap;

static void commit_free(ss_commit *c)
{
    ss_shard *s = &c->ss->shards[c->k];
    if (c->theta != NULL && s->tent_theta == c->theta)
        s->tent_theta = NULL;
    for (int i = 0; i < c->np; i++)
        free(c->ids[i]);
    if (c->xs != NULL)
        XXH3_freeState(c->xs);
    free(c->g);
    ss_buf_release(c->theta); /* tentative replies may still be sending it */
    free(c->mom);
    free(c->dnbuf);
    free(c);
}

/* Is this commit still the shard's current operation? */
static ss_shard *commit_shard(ss_commit *c)
{
    ss_shard *s = &c->ss->shards[c->k];
    if (s->gen != c->gen || s->state != SH_READY || !s->committing)
        return NULL;
    return s;
}

static void snapshot_start(ss_ctx *ss, ss_shard *s);

/* Start the snapshots commits asked for, once this server has no commit running (a snapshot is 8 bytes
 * per parameter on the bulk connection: it must not delay the log entries of a round). */
void commit_idle_work(ss_ctx *ss)
{
    if (ss->cq_head != NULL)
        return;
    for (int k = 0; k < ss->nshards; k++)
        if (ss->shards[k].committing)
            return;
    for (int k = 0; k < ss->nshards; k++) {
        ss_shard *s = &ss->shards[k];
        if (s->snap_wanted == 0)
            continue;
        if (s->state == SH_READY && s->version == s->snap_wanted)
            snapshot_start(ss, s);
        s->snap_wanted = 0;
    }
}

/* Answer the gets waiting for this round with the outcome; everything else is judged again. */
static void commit_finish(ss_commit *c, int outcome)
{
    ss_ctx *ss = c->ss;
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    s->committing = 0;
    ss_req *list = s->parked;
    s->parked = s->parked_tail = NULL;
    s->nparked = 0;
    int64_t round = c->round;
    char need[512], errmsg[256];
    snprintf(need, sizeof need, "%s", c->need);
    snprintf(errmsg, sizeof errmsg, "%s", c->errmsg);
    commit_free(c);
    while (list != NULL) {
        ss_req *req = list;
        list = req->next;
        req->next = NULL;
        /* async: a get for a later version waits on this one too (re-dispatching it would spin) */
        int waiting_for_it = strcmp(req->h.op, "get") == 0 &&
                             (req->h.version == round + 1 || (ss->rc.async && req->h.version > round + 1));
        if (outcome == OUT_DONE || !waiting_for_it || s->state != SH_READY || s->version != round)
            ops_dispatch(ss, req);
        else if (outcome == OUT_WAIT)
            req_reply_simple(req, "wait", ss->rc.async ? "an earlier submission has not arrived yet"
                                                       : "the round's barrier is not closed yet");
        else if (outcome == OUT_NEED)
            req_reply_simple(req, "need", need);
        else
            req_reply_err(req, "REDIS", "commit of shard %d round %lld failed: %s; retry", s->k, (long long)round,
                          errmsg);
    }
    commit_idle_work(ss);
}

static void commit_fail(ss_commit *c, const char *why, int reload)
{
    ss_ctx *ss = c->ss;
    ss_shard *s = commit_shard(c);
    log_warn("shard %d: commit of round %lld failed: %s", c->k, (long long)c->round, why);
    snprintf(c->errmsg, sizeof c->errmsg, "%s", why);
    if (s != NULL && reload) {
        commit_free(c);
        shard_reload(ss, s, why); /* parked gets wait for the reload, then are judged again */
        return;
    }
    commit_finish(c, OUT_ERR);
}

/* ---------------------------------------------------------------------------------------------- */
/* snapshots */

static void snap_on_recorded(redisReply *r, void *priv)
{
    ss_snap *sn = priv;
    ss_ctx *ss = sn->ss;
    ss->shards[sn->k].snapshotting = 0;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        log_warn("shard %d: dl_snapshot of version %lld failed: %s", sn->k, (long long)sn->version,
                 r == NULL ? "connection lost" : r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
        if (r != NULL && r->type == REDIS_REPLY_ERROR)
            ss->m.conflicts++;
        free(sn);
        return;
    }
    ss->m.snapshots++;
    log_info("shard %d: snapshot of version %lld recorded; deleting %zu obsolete blobs", sn->k,
             (long long)sn->version, r->elements);
    if (r->elements > 0) {
        store_del_refs(ss, sn->k, "snap", r->element, 1);
        store_del_refs(ss, sn->k, "log", r->element + 1, r->elements - 1);
    }
    free(sn);
}

static void snap_on_written(redisReply *r, void *priv)
{
    ss_snap *sn = priv;
    ss_ctx *ss = sn->ss;
    free(sn->both);
    sn->both = NULL;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        log_warn("shard %d: writing the snapshot of version %lld failed: %s", sn->k, (long long)sn->version,
                 r ? r->str : "connection lost");
        ss->shards[sn->k].snapshotting = 0;
        free(sn);
        return;
    }
    char ver[24], ep[24], shard[16], ref[64];
    snprintf(ver, sizeof ver, "%lld", (long long)sn->version);
    snprintf(ep, sizeof ep, "%lld", (long long)sn->epoch);
    snprintf(shard, sizeof shard, "%d", sn->k);
    snprintf(ref, sizeof ref, "%lld.%lld", (long long)sn->version, (long long)sn->epoch);
    const char *args[5] = { ss->id, ep, shard, ver, ref };
    if (fcall(ss, snap_on_recorded, sn, "dl_snapshot", 5, args) != 0) {
        ss->shards[sn->k].snapshotting = 0;
        free(sn);
    }
}

/* Write a snapshot of the shard's current version from a copy (the blob buffer). */
static void snapshot_start(ss_ctx *ss, ss_shard *s)
{
    if (s->snapshotting)
        return;
    size_t n = s->n;
    int with_buf = s->dnbuf != NULL, with_mom = s->has_mom || with_buf;
    float *both = malloc((size_t)(1 + with_mom + with_buf) * n * sizeof(float));
    ss_snap *sn = malloc(sizeof *sn);
    if (both == NULL || sn == NULL) {
        free(both);
        free(sn);
        return;
    }
    memcpy(both, s->theta, n * sizeof(float));
    if (with_mom)
        memcpy(both + n, s->mom, n * sizeof(float));
    if (with_buf)
        memcpy(both + 2 * n, s->dnbuf, n * sizeof(float));
    sn->both = both;
    blob_header h;
    blob_header_init(&h, "snap");
    h.shard = s->k;
    h.version = s->version;
    h.epoch = s->epoch;
    h.frag = s->frag;
    h.dtype = BLOB_F32;
    h.count = (size_t)(1 + with_mom + with_buf) * n;
    h.flags = (with_mom ? 1 : 0) | (with_buf ? 2 : 0);
    char err[256];
    int hl = blob_encode_header(&h, both, h.count * sizeof(float), sn->head, sizeof sn->head, err, sizeof err);
    if (hl < 0) {
        log_error("shard %d: cannot encode a snapshot: %s", s->k, err);
        free(both);
        free(sn);
        return;
    }
    sn->ss = ss;
    sn->k = s->k;
    sn->version = s->version;
    sn->epoch = s->epoch;
    char key[KEY_MAX];
    store_blob_key(ss, key, sizeof key, s->k, "snap", s->version, s->epoch);
    if (store_set(ss, key, sn->head, (size_t)hl, both, h.count * sizeof(float), snap_on_written, sn) != 0) {
        free(both);
        free(sn);
    } else {
        s->snapshotting = 1;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* the commit proper */

static void commit_on_commit(redisReply *r, void *priv)
{
    ss_commit *c = priv;
    ss_ctx *ss = c->ss;
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    if (r == NULL) {
        commit_fail(c, "connection lost during dl_commit (outcome unknown)", 1);
        return;
    }
    if (r->type != REDIS_REPLY_INTEGER) {
        ss->m.conflicts++;
        commit_fail(c, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected dl_commit reply", 1);
        return;
    }
    ss_buf_release(s->theta);
    free(s->mom);
    s->tent_theta = NULL;
    s->theta = c->theta;
    s->mom = c->mom;
    s->has_mom = c->has_mom;
    c->theta = c->mom = NULL;
    if (c->dnbuf != NULL) {
        free(s->dnbuf);
        s->dnbuf = c->dnbuf;
        c->dnbuf = NULL;
    }
    s->version = c->round + 1;
    snprintf(s->digest, sizeof s->digest, "%s", c->digest);
    s->theta_xxh = c->theta_xxh;
    shard_free_deltas(s, s->version, 0);
    double secs = (double)(now_ms() - c->t0) / 1000.0;
    ss->m.rounds_committed++;
    if (c->used == 0)
        ss->m.noop_commits++;
    ss->m.commit_seconds += secs;
    if (secs > ss->m.commit_seconds_max)
        ss->m.commit_seconds_max = secs;
    log_info("shard %d: committed version %lld (%d participants, %.3f s, digest %s)", s->k, (long long)s->version,
             c->used, secs, s->digest);
    if (ss->rc.snapshot_every > 0 && s->version % ss->rc.snapshot_every == 0)
        s->snap_wanted = s->version; /* written once no commit is running: never ahead of a log entry */
    store_mark_replicated(ss, s->k, c->epoch, s->version);
    commit_finish(c, OUT_DONE);
}

/* Fault injection (--fault-crash-before-commit): die in the worst place, with the pseudo-gradients
 * received and the log blob written but the version not committed. The crash tests use it. */
static void crash_if_asked(ss_ctx *ss, const ss_commit *c)
{
    if (ss->opts.crash_before_commit <= 0)
        return;
    static uint64_t state;
    if (state == 0)
        state = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull;
    if (rng_uniform(&state) < ss->opts.crash_before_commit) {
        log_warn("shard %d round %lld: fault injection: exiting before dl_commit", c->k, (long long)c->round);
        _exit(137);
    }
}

static void commit_on_log_written(redisReply *r, void *priv)
{
    ss_commit *c = priv;
    ss_ctx *ss = c->ss;
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        commit_fail(c, r ? r->str : "connection lost writing the log blob", 0);
        return;
    }
    log_debug("shard %d round %lld: log written at +%llu ms", c->k, (long long)c->round,
              (unsigned long long)(now_ms() - c->t0));
    if (!lease_valid(ss)) {
        commit_fail(c, "the lease may have expired before dl_commit", 1);
        return;
    }
    crash_if_asked(ss, c);
    char ep[24], shard[16], from[24], ref[64], parts[16], frag[16], round[24];
    snprintf(ep, sizeof ep, "%lld", (long long)c->epoch);
    snprintf(shard, sizeof shard, "%d", c->k);
    snprintf(from, sizeof from, "%lld", (long long)c->round);
    snprintf(ref, sizeof ref, "%lld.%lld", (long long)(c->round + 1), (long long)c->epoch);
    snprintf(parts, sizeof parts, "%d", c->used);
    snprintf(frag, sizeof frag, "%d", s->frag);
    snprintf(round, sizeof round, "%lld", (long long)c->round);
    const char *args[9] = { ss->id, ep, shard, from, c->digest, ref, parts, frag, round };
    if (fcall_durable(ss, commit_on_commit, c, "dl_commit", 9, args) != 0)
        commit_fail(c, "Redis is unavailable", 0);
}

/* ---------------------------------------------------------------------------------------------- */
/* the compute queue: commits whose Δ are all here, computed one slice per loop turn, in order */

static void cq_arm(ss_ctx *ss)
{
    static const struct timeval zero = { 0, 0 };
    evtimer_add(ss->cq_ev, &zero);
}

static ss_commit *cq_pop(ss_ctx *ss)
{
    ss_commit *c = ss->cq_head;
    if (c != NULL) {
        ss->cq_head = c->qnext;
        if (ss->cq_head == NULL)
            ss->cq_tail = NULL;
        c->qnext = NULL;
    }
    return c;
}

int commit_reply_tentative(ss_ctx *ss, ss_shard *s, ss_req *req)
{
    if (s->tent_theta == NULL || !s->committing || strcmp(req->h.op, "get") != 0 ||
        !(req->h.flags & BLOB_GET_TENTATIVE_OK) || req->h.version != s->tent_version)
        return 0;
    ops_reply_params(ss, s, req, s->tent_theta, s->tent_version, s->tent_xxh, 1);
    return 1;
}

/* θ' is computed: the parked gets that accept tentative parameters get them now, while the log entry
 * goes to Redis; the others keep waiting for the commit. */
static void commit_serve_tentative(ss_commit *c, ss_shard *s)
{
    s->tent_theta = c->theta;
    s->tent_xxh = c->theta_xxh;
    s->tent_version = c->round + 1;
    ss_req *list = s->parked;
    s->parked = s->parked_tail = NULL;
    s->nparked = 0;
    while (list != NULL) {
        ss_req *req = list;
        list = req->next;
        if (!commit_reply_tentative(c->ss, s, req))
            shard_park(c->ss, s, req); /* back in the list, in order (it keeps its parked_ms) */
    }
}

static int commit_fill_g(ss_commit *c, ss_shard *s);

/* Write the log entry (g) of version round+1 to Redis. The callback owns c now. */
static void commit_start_log(ss_commit *c, ss_shard *s)
{
    ss_ctx *ss = c->ss;
    size_t n = s->n;
    if (c->g_deferred && commit_fill_g(c, s) != 0) {
        commit_fail(c, "a pseudo-gradient went missing before the log entry was written", 0);
        return;
    }
    blob_header h;
    blob_header_init(&h, "log");
    h.shard = s->k;
    h.version = c->round + 1;
    h.round = c->round;
    h.epoch = c->epoch;
    h.frag = s->frag;
    h.dtype = BLOB_F32;
    h.count = n;
    h.lr = (double)c->t.lr;
    h.mu = (double)c->t.mu;
    h.flags = (c->t.nesterov ? 1 : 0) | (c->first ? 2 : 0) | (c->dnbuf != NULL ? 4 : 0);
    h.aux = c->used;
    char err[256];
    int hl = blob_encode_header(&h, c->g, n * sizeof(float), c->head, sizeof c->head, err, sizeof err);
    if (hl < 0) {
        commit_fail(c, err, 0);
        return;
    }
    char key[KEY_MAX];
    store_blob_key(ss, key, sizeof key, s->k, "log", c->round + 1, c->epoch);
    log_debug("shard %d round %lld: writing %zu bytes of log at +%llu ms", s->k, (long long)c->round,
              (size_t)hl + n * sizeof(float), (unsigned long long)(now_ms() - c->t0));
    if (store_set(ss, key, c->head, (size_t)hl, c->g, n * sizeof(float), commit_on_log_written, c) != 0)
        commit_fail(c, "Redis is unavailable", 0);
}

/* Sync rounds: the log entry waits while parameters are still streaming out to workers (at most
 * LOG_DEFER_MAX_MS). Since workers continue from tentative parameters, durability is off the round's
 * critical path; what matters on a machine with few cores is that hashing the entry and Redis taking
 * it in (fresh memory, page faults) do not compete with the parameters going out. */
#define LOG_DEFER_CHECK_MS 2
#define LOG_DEFER_MAX_MS 300

static void lq_arm(ss_ctx *ss)
{
    struct timeval tv = { 0, LOG_DEFER_CHECK_MS * 1000 };
    evtimer_add(ss->lq_ev, &tv);
}

/* Whether a computed version's log entry should wait: parameters are still going out, or another shard's
 * step is still to be computed (its parameters will go out next). */
static int log_should_wait(const ss_ctx *ss, const ss_commit *c)
{
    return (ss_bufs_in_flight() > 0 || ss->cq_head != NULL) && now_ms() - c->t_computed < LOG_DEFER_MAX_MS;
}

static void lq_on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ss_ctx *ss = arg;
    while (ss->lq_head != NULL) {
        ss_commit *c = ss->lq_head;
        ss_shard *s = commit_shard(c);
        if (s != NULL && log_should_wait(ss, c)) {
            lq_arm(ss);
            return;
        }
        ss->lq_head = c->qnext;
        if (ss->lq_head == NULL)
            ss->lq_tail = NULL;
        c->qnext = NULL;
        if (s == NULL)
            commit_free(c);
        else
            commit_start_log(c, s);
    }
}

/* Version round+1 is computed: serve it tentatively, then write its log entry (now, or once the
 * parameters are out). */
static void commit_write_log(ss_commit *c, ss_shard *s)
{
    ss_ctx *ss = c->ss;
    c->theta_xxh = (uint64_t)XXH3_64bits_digest(c->xs);
    snprintf(c->digest, sizeof c->digest, "%016" PRIx64, c->theta_xxh);
    c->t_computed = now_ms();
    log_debug("shard %d round %lld: step computed at +%llu ms", s->k, (long long)c->round,
              (unsigned long long)(c->t_computed - c->t0));
    if (ss->rc.async) {
        commit_start_log(c, s);
        return;
    }
    commit_serve_tentative(c, s);
    if (ss->lq_head == NULL && !log_should_wait(ss, c)) {
        commit_start_log(c, s);
        return;
    }
    if (ss->lq_tail != NULL)
        ss->lq_tail->qnext = c;
    else
        ss->lq_head = c;
    ss->lq_tail = c;
    lq_arm(ss);
}

/* The participants' Δ of this commit, in participant order, dropped ones left out. Returns how many,
 * or -1 if one went missing; *all_bf16 tells whether every one is bf16. */
static int commit_gather_deltas(ss_commit *c, ss_shard *s, ss_delta **out, int *all_bf16)
{
    int k = 0;
    *all_bf16 = 1;
    for (int i = 0; i < c->np; i++) {
        if (c->dropped[i])
            continue;
        ss_delta *d = shard_find_delta(s, c->round, c->ids[i], c->incs[i]);
        if (d == NULL)
            return -1;
        *all_bf16 &= d->dtype == BLOB_BF16;
        out[k++] = d;
    }
    return k;
}

/* The usual sync commit (unweighted bf16 Δ, no Delayed Nesterov): the mean and the step in one pass per
 * block, g kept in registers; g itself is computed for the log entry once the parameters are out
 * (commit_fill_g), with the same formula, so the bits agree. */
static int commit_fast(const ss_commit *c, int used, int all_bf16)
{
    return used > 0 && all_bf16 && c->dnbuf == NULL && !c->ss->rc.weight_tokens;
}

static void commit_block_fast(ss_commit *c, ss_shard *s, ss_delta **ds, int used, size_t lo, size_t len)
{
    const uint16_t *x[MAX_PARTICIPANTS];
    for (int i = 0; i < used; i++)
        x[i] = (const uint16_t *)ds[i]->payload + lo;
    outer_mean_step_bf16_to(c->theta + lo, c->mom + lo, s->theta + lo, s->mom + lo, c->first, x, (uint32_t)used, len,
                            c->t.lr, c->t.mu, c->t.nesterov);
}

/* Any other commit: g = the (weighted) mean into c->g, then the step (plain, or Delayed Nesterov). */
static void commit_block_general(ss_commit *c, ss_shard *s, ss_delta **ds, int used, size_t lo, size_t len)
{
    float *g = c->g + lo;
    outer_sum_zero(g, len);
    for (int i = 0, p = 0; i < c->np; i++) {
        if (c->dropped[i])
            continue;
        ss_delta *d = ds[p++];
        if (c->ss->rc.weight_tokens && d->dtype == BLOB_BF16)
            outer_sum_add_scaled_bf16(g, (const uint16_t *)d->payload + lo, c->scale[i], len);
        else if (c->ss->rc.weight_tokens)
            outer_sum_add_scaled_f32(g, (const float *)d->payload + lo, c->scale[i], len);
        else if (d->dtype == BLOB_BF16)
            outer_sum_add_bf16(g, (const uint16_t *)d->payload + lo, len);
        else
            outer_sum_add_f32(g, (const float *)d->payload + lo, len);
    }
    if (!c->ss->rc.weight_tokens)
        outer_mean_finish(g, len, (uint32_t)used);
    if (used > 0 && c->dnbuf == NULL) {
        outer_sgd_step_to(c->theta + lo, c->mom + lo, s->theta + lo, s->mom + lo, c->first, g, len, c->t.lr, c->t.mu,
                          c->t.nesterov);
        return;
    }
    memcpy(c->theta + lo, s->theta + lo, len * sizeof(float));
    memcpy(c->mom + lo, s->mom + lo, len * sizeof(float));
    if (c->dnbuf != NULL)
        memcpy(c->dnbuf + lo, s->dnbuf + lo, len * sizeof(float));
    if (used > 0 && c->dnbuf != NULL) /* async Delayed Nesterov: submission number t = dn_t0 + version + 1 */
        outer_dn_step(c->ss->rc.dn_variant, c->theta + lo, c->mom + lo, c->dnbuf + lo, g, len,
                      c->ss->rc.dn_t0 + (uint64_t)c->round + 1, (uint32_t)c->ss->rc.dn_buffer, c->t.lr, c->t.mu,
                      c->t.nesterov);
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
    if (c->pos == 0) { /* the path is chosen once: the fast one leaves g to commit_fill_g for every block */
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
    for (size_t lo = c->pos; lo < end; lo += COMMIT_BLOCK) {
        size_t len = end - lo < COMMIT_BLOCK ? end - lo : COMMIT_BLOCK;
        if (c->g_deferred)
            commit_block_fast(c, s, ds, used, lo, len);
        else
            commit_block_general(c, s, ds, used, lo, len);
        hash_update(c->xs, c->theta + lo, len * sizeof(float));
    }
    c->pos = end;
    if (c->pos < n)
        return;
    c->has_mom = s->has_mom || (c->used > 0 && (c->t.mu != 0.0f || c->dnbuf != NULL));
    cq_pop(c->ss);
    commit_write_log(c, s);
}

/* The log entry's g of a fast commit, computed once the parameters are out. 0, or -1 if a Δ went
 * missing meanwhile (the commit is then given up like any other that lost a Δ). */
static int commit_fill_g(ss_commit *c, ss_shard *s)
{
    ss_delta *ds[MAX_PARTICIPANTS];
    const uint16_t *x[MAX_PARTICIPANTS];
    int all_bf16, used = commit_gather_deltas(c, s, ds, &all_bf16);
    if (used != c->used || !all_bf16)
        return -1;
    for (int i = 0; i < used; i++)
        x[i] = (const uint16_t *)ds[i]->payload;
    outer_mean_bf16(c->g, x, (uint32_t)used, s->n);
    c->g_deferred = 0;
    return 0;
}

static void cq_on_turn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ss_ctx *ss = arg;
    ss_commit *c = ss->cq_head;
    if (c == NULL)
        return;
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        cq_pop(ss);
        commit_free(c);
    } else {
        commit_slice(c, s); /* pops c when it is done with it */
    }
    if (ss->cq_head != NULL)
        cq_arm(ss);
}

/* --weight-by tokens: sync, each participant weighs tokens_i / sum(tokens) (a weighted mean); async,
 * the one submission is scaled by tokens / weight_ref_tokens. Computed in double, used as fp32, in
 * participant order: the same on every server and in replay (the log keeps the weighted g). */
static void commit_weights(ss_commit *c, ss_shard *s)
{
    double total = 0;
    for (int i = 0; i < c->np; i++) {
        ss_delta *d = c->dropped[i] ? NULL : shard_find_delta(s, c->round, c->ids[i], c->incs[i]);
        if (d != NULL)
            total += (double)d->tokens;
    }
    if (c->ss->rc.async)
        total = (double)(c->ss->rc.weight_ref_tokens ? c->ss->rc.weight_ref_tokens : 1);
    for (int i = 0; i < c->np; i++) {
        ss_delta *d = c->dropped[i] ? NULL : shard_find_delta(s, c->round, c->ids[i], c->incs[i]);
        c->scale[i] = d != NULL && total > 0 ? (float)((double)d->tokens / total) : 0.0f;
    }
}

/* Every Δ is here: queue the compute of version round+1. */
static void commit_compute(ss_commit *c, ss_shard *s)
{
    if (c->ss->rc.weight_tokens)
        commit_weights(c, s);
    ss_ctx *ss = c->ss;
    size_t n = s->n;
    c->g = malloc(n * sizeof(float));
    c->theta = malloc(n * sizeof(float));
    c->mom = malloc(n * sizeof(float));
    c->xs = XXH3_createState();
    if (s->dnbuf != NULL)
        c->dnbuf = malloc(n * sizeof(float));
    if (c->g == NULL || c->theta == NULL || c->mom == NULL || c->xs == NULL || (s->dnbuf != NULL && c->dnbuf == NULL)) {
        commit_fail(c, "out of memory", 0);
        return;
    }
    XXH3_64bits_reset(c->xs);
    c->t = ss->tun;
    c->first = !s->has_mom;
    c->pos = 0;
    log_debug("shard %d round %lld: every pseudo-gradient here at +%llu ms; step queued", s->k, (long long)c->round,
              (unsigned long long)(now_ms() - c->t0));
    if (ss->cq_tail != NULL)
        ss->cq_tail->qnext = c;
    else
        ss->cq_head = c;
    ss->cq_tail = c;
    cq_arm(ss);
}

/* All membership checks are back: need, drop or compute. */
static void commit_after_checks(ss_commit *c)
{
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    if (c->need[0] != '\0') {
        log_debug("shard %d round %lld: waiting for the pseudo-gradients of %s", c->k, (long long)c->round, c->need);
        commit_finish(c, OUT_NEED);
        return;
    }
    if (c->failed) {
        commit_finish(c, OUT_ERR);
        return;
    }
    commit_compute(c, s);
}

static void need_add(ss_commit *c, const char *id)
{
    size_t used = strlen(c->need);
    snprintf(c->need + used, sizeof c->need - used, "%s%s", used ? "," : "", id);
}

typedef struct member_q {
    ss_commit *c;
    int i;
} member_q;

static void commit_on_drop(redisReply *r, void *priv)
{
    member_q *q = priv;
    ss_commit *c = q->c;
    int i = q->i;
    free(q);
    if (r == NULL) {
        c->failed = 1;
        snprintf(c->errmsg, sizeof c->errmsg, "connection lost during dl_drop");
    } else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ALIVE", 5) == 0) {
        need_add(c, c->ids[i]);
    } else if (r->type == REDIS_REPLY_ERROR) {
        c->failed = 1;
        snprintf(c->errmsg, sizeof c->errmsg, "dl_drop: %s", r->str);
    } else {
        c->dropped[i] = 1;
        log_info("shard %d round %lld: dropped %s:%lld (no longer a member)", c->k, (long long)c->round, c->ids[i],
                 (long long)c->incs[i]);
    }
    if (--c->outstanding == 0)
        commit_after_checks(c);
}

static void commit_on_member(redisReply *r, void *priv)
{
    member_q *q = priv;
    ss_commit *c = q->c;
    ss_ctx *ss = c->ss;
    int i = q->i;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        c->failed = 1;
        snprintf(c->errmsg, sizeof c->errmsg, "dl_member: %s", r ? r->str : "connection lost");
    } else if (r->type == REDIS_REPLY_INTEGER && r->integer == c->incs[i]) {
        need_add(c, c->ids[i]);
    } else if (ss->rc.async) {
        /* async: the submitter of this version is gone and can never push it (its incarnation is dead):
         * the version becomes a no-op, so the shard's order never wedges */
        c->dropped[i] = 1;
        log_info("shard %d: submission %lld of %s:%lld dropped (no longer a member)", c->k, (long long)c->round,
                 c->ids[i], (long long)c->incs[i]);
    } else {
        char f[16], round[24];
        snprintf(f, sizeof f, "%d", ss->shards[c->k].frag);
        snprintf(round, sizeof round, "%lld", (long long)c->round);
        const char *args[3] = { f, round, c->ids[i] };
        if (fcall(ss, commit_on_drop, q, "dl_drop", 3, args) == 0)
            return; /* still outstanding */
        c->failed = 1;
        snprintf(c->errmsg, sizeof c->errmsg, "Redis is unavailable");
    }
    free(q);
    if (--c->outstanding == 0)
        commit_after_checks(c);
}

/* Parse "id:inc,id:inc" (sorted by id) and the dropped ids. -1 if malformed. */
static int parse_participants(ss_commit *c, const char *parts, const char *dropped)
{
    char *copy = strdup(parts);
    if (copy == NULL)
        return -1;
    int rc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        if (colon == NULL || c->np >= MAX_PARTICIPANTS) {
            rc = -1;
            break;
        }
        *colon = '\0';
        c->ids[c->np] = strdup(tok);
        c->incs[c->np] = strtoll(colon + 1, NULL, 10);
        c->dropped[c->np] = 0;
        size_t idlen = strlen(tok);
        for (const char *p = dropped; p != NULL && *p;) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            if (len == idlen && strncmp(p, tok, len) == 0)
                c->dropped[c->np] = 1;
            p = end ? end + 1 : p + len;
        }
        c->np++;
    }
    free(copy);
    return rc;
}

static void commit_check_deltas(ss_commit *c, ss_shard *s);

static void commit_on_barrier(redisReply *r, void *priv)
{
    ss_commit *c = priv;
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 3) {
        snprintf(c->errmsg, sizeof c->errmsg, "dl_barrier: %s",
                 r == NULL ? "connection lost" : r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
        commit_finish(c, OUT_ERR);
        return;
    }
    const char *state = r->element[0]->str ? r->element[0]->str : "";
    if (strcmp(state, "closed") != 0) {
        if (strcmp(state, "expired") == 0)
            log_warn("shard %d: the barrier of round %lld has expired; cannot commit", c->k, (long long)c->round);
        commit_finish(c, OUT_WAIT);
        return;
    }
    const char *parts = r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "";
    const char *dropped = r->element[2]->type == REDIS_REPLY_STRING ? r->element[2]->str : "";
    if (parse_participants(c, parts, dropped) != 0) {
        snprintf(c->errmsg, sizeof c->errmsg, "malformed participants '%s'", parts);
        commit_finish(c, OUT_ERR);
        return;
    }
    commit_check_deltas(c, s);
}

/* Every participant without a stored Δ: is it still a live member (then we need its Δ) or gone (then
 * it is dropped from this round)? */
static void commit_check_deltas(ss_commit *c, ss_shard *s)
{
    ss_ctx *ss = c->ss;
    c->outstanding = 1; /* guard while issuing */
    for (int i = 0; i < c->np; i++) {
        if (c->dropped[i] || shard_find_delta(s, c->round, c->ids[i], c->incs[i]) != NULL)
            continue;
        member_q *q = malloc(sizeof *q);
        if (q == NULL) {
            c->failed = 1;
            break;
        }
        q->c = c;
        q->i = i;
        const char *args[1] = { c->ids[i] };
        c->outstanding++;
        if (fcall(ss, commit_on_member, q, "dl_member", 1, args) != 0) {
            c->outstanding--;
            free(q);
            c->failed = 1;
            snprintf(c->errmsg, sizeof c->errmsg, "Redis is unavailable");
            break;
        }
    }
    if (--c->outstanding == 0)
        commit_after_checks(c);
}

int commit_init(ss_ctx *ss)
{
    ss->cq_ev = evtimer_new(ss->base, cq_on_turn, ss);
    ss->lq_ev = evtimer_new(ss->base, lq_on_timer, ss);
    return ss->cq_ev != NULL && ss->lq_ev != NULL ? 0 : -1;
}

/* Async: the submission that turns version round into round+1, as dl_submit recorded it. */
static void commit_on_submission(redisReply *r, void *priv)
{
    ss_commit *c = priv;
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        snprintf(c->errmsg, sizeof c->errmsg, "reading submission %lld: %s", (long long)c->round,
                 r ? r->str : "connection lost");
        commit_finish(c, OUT_ERR);
        return;
    }
    if (r->type != REDIS_REPLY_STRING) { /* nobody has been given this place in the order yet */
        commit_finish(c, OUT_WAIT);
        return;
    }
    char rec[256];
    snprintf(rec, sizeof rec, "%s", r->str);
    char *base = strrchr(rec, ':'); /* "worker:inc:base" -> participant "worker:inc" */
    if (base != NULL)
        *base = '\0';
    if (base == NULL || parse_participants(c, rec, "") != 0 || c->np != 1) {
        snprintf(c->errmsg, sizeof c->errmsg, "malformed submission record '%s'", r->str);
        commit_finish(c, OUT_ERR);
        return;
    }
    commit_check_deltas(c, s);
}

void commit_start(ss_ctx *ss, ss_shard *s)
{
    if (s->committing || s->state != SH_READY)
        return;
    ss_commit *c = calloc(1, sizeof *c);
    if (c == NULL)
        return;
    c->ss = ss;
    c->k = s->k;
    c->gen = s->gen;
    c->round = s->version;
    c->epoch = s->epoch;
    c->t0 = now_ms();
    s->committing = 1;
    char f[16], round[24];
    snprintf(f, sizeof f, "%d", s->frag);
    snprintf(round, sizeof round, "%lld", (long long)c->round);
    if (ss->rc.async) {
        char key[KEY_MAX], name[32];
        snprintf(name, sizeof name, "subs:%d", s->k);
        key_run(key, sizeof key, ss->rc.run, name);
        const char *argv[3] = { "HGET", key, round };
        if (rlink_cmds(&ss->ctl, commit_on_submission, c, 3, argv) != 0) {
            snprintf(c->errmsg, sizeof c->errmsg, "Redis is unavailable");
            commit_finish(c, OUT_ERR);
        }
        return;
    }
    const char *args[2] = { f, round };
    if (fcall(ss, commit_on_barrier, c, "dl_barrier", 2, args) != 0) {
        snprintf(c->errmsg, sizeof c->errmsg, "Redis is unavailable");
        commit_finish(c, OUT_ERR);
    }
}
