/*
 * commit_log.c: a computed commit's tentative serving and its log entry, deferred while parameters
 * stream out.
 *
 * Once θ' is computed, the gets that accept tentative parameters are answered with it; the log entry
 * (the averaged g, dl:{R:k}:log:<v>:<epoch>) is then written to Redis, in sync runs after the parameters
 * have gone out (at most LOG_DEFER_MAX_MS later), and the commit's logged step (commit.c's dl_commit)
 * runs when it is written. The fast path's g, which the entry carries, is computed here only then
 * (commit_compute.c's cq_fill_g): this file sits above the compute.
 */
#include "commit.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "math/hash.h"

int commit_log_reply_tentative(ss_ctx *ss, ss_shard *s, ss_req *req)
{
    if (s->tent_theta == NULL || !s->committing || strcmp(req->h.op, "get") != 0 ||
        !(req->h.flags & BLOB_GET_TENTATIVE_OK) || req->h.version != s->tent_version ||
        !fault_may_serve_tentative(ss, req))
        return 0;
    int update = reply_wants_update(ss, req, &s->tent_upd);
    if (!update && ss->rc.download_update) return 0; /* parameters with momentum: the cache's, once committed */
    fault_tentative_served(ss, s->k, s->tent_version);
    if (update)
        reply_update(ss, s, req, &s->tent_upd, 1);
    else
        reply_params(ss, s, req, s->tent_theta, s->tent_version, s->tent_xxh, 1);
    return 1;
}

void commit_log_update_of(const ss_commit *c, ss_update *u)
{
    u->buf = c->gq;
    u->len = c->gq_len;
    u->xxh = c->gq_xxh;
    u->version = c->round + 1;
    u->lr = c->t.lr;
    u->mu = c->t.mu;
    u->flags = (c->t.nesterov ? 1 : 0) | (c->first ? 2 : 0);
    u->aux = c->used;
    snprintf(u->digest, sizeof u->digest, "%s", c->digest);
}

/* θ' is computed: the parked gets that accept tentative parameters get them now, while the log entry
 * goes to Redis; the others keep waiting for the commit. */
static void commit_serve_tentative(ss_commit *c, ss_shard *s)
{
    s->tent_theta = c->theta;
    s->tent_xxh = c->theta_xxh;
    s->tent_version = c->round + 1;
    memset(&s->tent_upd, 0, sizeof s->tent_upd);
    if (c->gq != NULL) commit_log_update_of(c, &s->tent_upd);
    ss_req *list = park_take(s);
    while (list != NULL) {
        ss_req *req = list;
        list = req->next;
        if (!commit_log_reply_tentative(c->ss, s, req))
            park_add(c->ss, s, req); /* back in the list, in order (it keeps its parked_ms) */
    }
}

/* Write the log entry (g) of version round+1 to Redis. The callback owns c now. */
static void commit_start_log(ss_commit *c, ss_shard *s)
{
    ss_ctx *ss = c->ss;
    size_t n = s->n;
    if (c->g_deferred && cq_fill_g(c, s) != 0) {
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
    h.dtype = c->gq != NULL ? ss->rc.compress : BLOB_F32; /* --download update: the update as sent */
    h.count = c->gq != NULL && ss->rc.compress == BLOB_TOPK ? c->gq_len : n; /* (topk: counted in bytes) */
    h.lr = (double)c->t.lr;
    h.mu = (double)c->t.mu;
    h.flags = (c->t.nesterov ? 1 : 0) | (c->first ? 2 : 0) | (c->dnbuf != NULL ? 4 : 0);
    h.aux = c->used;
    snprintf(h.run, sizeof h.run, "%s", ss->opts.run);
    char err[256];
    const void *payload = c->gq != NULL ? (const void *)c->gq : (const void *)c->g;
    size_t plen = c->gq != NULL ? c->gq_len : n * sizeof(float);
    h.xxh = c->gq != NULL ? c->gq_xxh : 0;
    int hl = c->gq != NULL ? blob_encode_header_hashed(&h, plen, c->head, sizeof c->head, err, sizeof err)
                           : blob_encode_header(&h, payload, plen, c->head, sizeof c->head, err, sizeof err);
    if (hl < 0) {
        commit_fail(c, err, 0);
        return;
    }
    char key[KEY_MAX];
    store_blob_key(ss, key, sizeof key, s->k, "log", c->round + 1, c->epoch);
    log_debug("shard %d round %lld: writing %zu bytes of log at +%llu ms", s->k, (long long)c->round, (size_t)hl + plen,
              (unsigned long long)(now_ms() - c->t0));
    if (store_set(ss, key, c->head, (size_t)hl, payload, plen, c->steps->logged, c) != 0)
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
    struct timeval tv = {0, LOG_DEFER_CHECK_MS * 1000};
    evtimer_add(ss->lq_ev, &tv);
}

/* Whether a computed version's log entry should wait: parameters are still going out, or another shard's
 * step is still to be computed (its parameters will go out next). */
static int log_should_wait(const ss_ctx *ss, const ss_commit *c)
{
    return (server_bufs_in_flight() > 0 || ss->cq_head != NULL) && now_ms() - c->t_computed < LOG_DEFER_MAX_MS;
}

void lq_on_timer(evutil_socket_t fd, short what, void *arg)
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
        if (ss->lq_head == NULL) ss->lq_tail = NULL;
        c->qnext = NULL;
        if (s == NULL)
            commit_free(c);
        else
            commit_start_log(c, s);
    }
}

/* Version round+1 is computed: serve it tentatively, then write its log entry (now, or once the
 * parameters are out). */
void commit_log_write(ss_commit *c, ss_shard *s)
{
    ss_ctx *ss = c->ss;
    c->theta_xxh = (uint64_t)XXH3_64bits_digest(c->xs);
    if (c->gq != NULL) c->gq_xxh = hash64(c->gq, c->gq_len);
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
