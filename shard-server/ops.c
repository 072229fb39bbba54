/*
 * ops.c: the data-plane operations `push` and `get` (docs/PROTOCOL.md, "Data plane").
 *
 * push: the shard must be ours (else `moved`), not corrupt (`CORRUPT`, until `coordinator repair`) and
 * loaded (else the request waits for the load), the
 * round must be the shard's version (STALE), the dtype the run's codec (BADDTYPE, BADCODEC), count and
 * checksum must match (BADSIZE, CHECKSUM), every element (of int8/int4, every block scale) finite (NAN), and the worker a live member with that incarnation
 * (`dl_member`; UNKNOWN_WORKER). Accepted pseudo-gradients are kept in memory as received.
 * get: answered with `params` when the shard is at the wanted version; one version behind drives the
 * commit of that round (commit.c); further behind means our cache is stale: reload, then retry. A request
 * that says so (this get, a push for a round ahead) makes the shard reload only if Redis holds a newer version
 * than the cache (reload_if_stale).
 * Every rejection is answered with `err` and recorded with `dl_reject` (the process and the run go on).
 */
#include "math/hash.h"
#include "ss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "base/log.h"
#include "math/codec.h"
#include "math/codec_sparse.h"
#include "math/outer.h"

typedef struct member_check {
    ss_ctx *ss;
    ss_req *req;
    uint64_t gen;
} member_check;

/* A push of a sync round that has already committed (the worker did not see the commit: a failover, a
 * lost reply): answered STALE like a refusal, so the worker fetches the current version, but counted
 * as a duplicate (dl_duplicate), not a rejection: nothing is wrong. */
static void reply_duplicate(ss_ctx *ss, ss_req *req, const ss_shard *s)
{
    char shard[24], round[24];
    snprintf(shard, sizeof shard, "%d", s->k);
    snprintf(round, sizeof round, "%lld", (long long)req->h.round);
    const char *args[4] = {ss->id, req->h.worker, shard, round};
    ss->m.duplicates++;
    fault_late_need_resent(ss, req, s->k);
    log_info("duplicate push from %s: round %lld of shard %d has committed already (version %lld)",
             req->h.worker[0] ? req->h.worker : "?", (long long)req->h.round, s->k, (long long)s->version);
    if (store_fcall(ss, NULL, NULL, "dl_duplicate", 4, args) != 0)
        log_debug("cannot count a duplicate (not connected)");
    req_reply_err(req, DP_STALE, "round %lld of shard %d has committed already (its version is %lld)",
                  (long long)req->h.round, s->k, (long long)s->version);
}

static void reply_moved(ss_ctx *ss, ss_req *req, int k)
{
    const char *addr = lease_owner_addr(ss, k);
    req_reply_simple(req, "moved", addr ? addr : "");
}

/* The shard of a request if it is ours and loaded. NULL when the request has been answered or parked. */
static ss_shard *own_shard(ss_ctx *ss, ss_req *req)
{
    lease_check_expiry(ss);
    if (req->h.shard < 0 || req->h.shard >= ss->nshards) {
        req_reject(ss, req, DP_BADARG, "shard %lld does not exist (the run has %d shards)", (long long)req->h.shard,
                   ss->nshards);
        return NULL;
    }
    ss_shard *s = &ss->shards[req->h.shard];
    if (s->state == SH_FREE) {
        reply_moved(ss, req, s->k);
        return NULL;
    }
    if (s->state == SH_LOADING) {
        park_add(ss, s, req);
        return NULL;
    }
    if (s->state == SH_CORRUPT) { /* not the worker's fault: answered, not recorded as a rejection */
        req_reply_err(req, DP_CORRUPT, "shard %d's durable state is corrupt (key %s: %s); see coordinator repair", s->k,
                      s->corrupt_key, s->corrupt_reason);
        return NULL;
    }
    return s;
}

/* Checksum and finite check of a pushed payload in one pass, block by block while each block is in
 * the cache (XXH3's streaming digest equals the one-shot one). A corrupt payload is reported as
 * CHECKSUM even if its garbage also decodes as NaN: the checksum is judged first. */
#define PUSH_CHECK_BLOCK ((size_t)64 * 1024) /* bytes */

static int push_check_payload(ss_ctx *ss, ss_req *req)
{
    const blob_header *h = &req->h;
    size_t esize = blob_dtype_size(h->dtype), bad = 0, first_bad = SIZE_MAX;
    if (codec_is_block(h->dtype) && codec_check(h->dtype, req->payload, h->count, &bad) != 0)
        first_bad = bad; /* the scales: every code of a finite scale is finite */
    XXH3_state_t *xs = XXH3_createState();
    if (xs == NULL) {
        req_reply_err(req, DP_BUSY, "out of memory");
        return -1;
    }
    XXH3_64bits_reset(xs);
    for (size_t off = 0; off < req->payload_len; off += PUSH_CHECK_BLOCK) {
        size_t len = req->payload_len - off < PUSH_CHECK_BLOCK ? req->payload_len - off : PUSH_CHECK_BLOCK;
        const uint8_t *p = req->payload + off;
        hash_update(xs, p, len);
        int rc = first_bad != SIZE_MAX || esize == 0 ? 0
                 : esize == 4                        ? outer_check_finite((const float *)p, len / 4, &bad)
                                                     : outer_check_finite_bf16((const uint16_t *)p, len / 2, &bad);
        if (rc != 0) first_bad = off / esize + bad;
    }
    uint64_t sum = XXH3_64bits_digest(xs);
    XXH3_freeState(xs);
    if (sum != h->xxh) {
        req_reject(ss, req, DP_CHECKSUM, "payload does not match its header: xxh3 %016llx, header says %016llx",
                   (unsigned long long)sum, (unsigned long long)h->xxh);
        return -1;
    }
    if (first_bad != SIZE_MAX) {
        if (codec_is_block(h->dtype))
            req_reject(ss, req, DP_NAN, "the scale of the %s block at element %zu is NaN, infinite or negative",
                       codec_name(h->dtype), first_bad);
        else
            req_reject(ss, req, DP_NAN, "element %zu of the pseudo-gradient is NaN or infinite", first_bad);
        return -1;
    }
    return 0;
}

/* A topk push (codec_sparse.h): its size follows the run's density and value bits (BADSIZE); after its
 * checksum, its chunks (counts, widths, indices in order and in range, scales) must be the codec's
 * (BADCODEC). */
static int push_check_sparse_size(ss_ctx *ss, ss_shard *s, ss_req *req)
{
    size_t want = sparse_shard_bytes(ss->rc.topk_density, ss->rc.topk_bits, s->n);
    if (req->h.count != req->payload_len || req->payload_len != want) {
        req_reject(ss, req, DP_BADSIZE,
                   "shard %d has %zu elements: a top-k payload at density %g and %u bits is %zu bytes; got count "
                   "%llu with %zu payload bytes",
                   s->k, s->n, ss->rc.topk_density, ss->rc.topk_bits, want, (unsigned long long)req->h.count,
                   req->payload_len);
        return -1;
    }
    return 0;
}

static int push_check_sparse_chunks(ss_ctx *ss, ss_shard *s, ss_req *req)
{
    size_t bad = 0;
    if (sparse_check(req->payload, req->payload_len, s->n, ss->rc.topk_density, ss->rc.topk_bits, &bad) != 0) {
        req_reject(ss, req, DP_BADCODEC,
                   "the top-k chunk at element %zu of shard %d is malformed (count, width, indices or scale): not "
                   "what --compress topk at density %g and %u bits sends",
                   bad, s->k, ss->rc.topk_density, ss->rc.topk_bits);
        return -1;
    }
    return 0;
}

/* Static checks of a push against the loaded shard; 0 if acceptable, else replied. */
static int push_validate(ss_ctx *ss, ss_shard *s, ss_req *req)
{
    const blob_header *h = &req->h;
    if (!ss->rc.async && h->round >= 0 && h->round < s->version) {
        reply_duplicate(ss, req, s);
        return -1;
    }
    if (h->round != s->version && !(ss->rc.async && h->round > s->version)) {
        req_reject(ss, req, DP_STALE, "round %lld is not the open round of shard %d (its version is %lld)",
                   (long long)h->round, s->k, (long long)s->version);
        return -1;
    }
    if (h->dtype != BLOB_F32 && h->dtype != BLOB_BF16 && !codec_is_block(h->dtype) && h->dtype != BLOB_TOPK) {
        req_reject(ss, req, DP_BADDTYPE,
                   "pseudo-gradients must be fp32, bf16, int8, int4, int3, int2 or topk (dtype %d)", h->dtype);
        return -1;
    }
    if (!runconf_accepts_dtype(&ss->rc, h->dtype)) {
        req_reject(ss, req, DP_BADCODEC,
                   "this run's pseudo-gradients are %s (coordinator init --compress), got %s: "
                   "run a worker that knows the codec",
                   codec_name(ss->rc.compress), codec_name(h->dtype));
        return -1;
    }
    if (h->dtype == BLOB_TOPK) {
        if (push_check_sparse_size(ss, s, req) != 0) return -1;
    } else if (h->count != s->n || req->payload_len != blob_payload_bytes(h->dtype, s->n)) {
        req_reject(ss, req, DP_BADSIZE, "shard %d has %zu elements; got count %llu with %zu payload bytes", s->k, s->n,
                   (unsigned long long)h->count, req->payload_len);
        return -1;
    }
    if (push_check_payload(ss, req) != 0) return -1;
    if (h->dtype == BLOB_TOPK && push_check_sparse_chunks(ss, s, req) != 0) return -1;
    if (ss->rc.weight_tokens && h->aux < 1) {
        req_reject(ss, req, DP_BADARG,
                   "this run weights pseudo-gradients by tokens: a push must say how many "
                   "tokens it took (header aux >= 1)");
        return -1;
    }
    if (h->worker[0] == '\0' || h->inc < 0) {
        req_reject(ss, req, DP_UNKNOWN_WORKER, "a push must name its worker and incarnation");
        return -1;
    }
    return 0;
}

/* Why incarnation inc is no member, from dl_member's reply "kicked:<inc>" / "evicted:<inc>" (the words of
 * lua/20_membership.lua's not_member_why); "" when it does not say. */
static const char *gone_why(const redisReply *r, long long inc)
{
    char why[16];
    long long ginc;
    if (r->type != REDIS_REPLY_STRING || sscanf(r->str, "%15[a-z]:%lld", why, &ginc) != 2 || ginc != inc) return "";
    if (strcmp(why, "kicked") == 0) return " was kicked by the operator (coordinator control kick)";
    if (strcmp(why, "evicted") == 0) return " was evicted: no heartbeat for longer than the run's heartbeat timeout";
    return "";
}

static void push_on_member(redisReply *r, void *priv)
{
    member_check *mc = priv;
    ss_ctx *ss = mc->ss;
    ss_req *req = mc->req;
    uint64_t gen = mc->gen;
    free(mc);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        req_reply_err(req, DP_REDIS, "cannot check membership in Redis: %s", r ? r->str : "connection lost");
        return;
    }
    if (r->type == REDIS_REPLY_INTEGER && r->integer > 0 && r->integer != req->h.inc) {
        /* (the words of lua/20_membership.lua's not_member_why: the worker tells from them that another
         * process took its id, and leaves it instead of taking it back) */
        req_reject(ss, req, DP_UNKNOWN_WORKER,
                   "worker %s (incarnation %lld) was replaced: incarnation %lld registered since; two processes "
                   "share this worker id, or it was started again",
                   req->h.worker, (long long)req->h.inc, (long long)r->integer);
        return;
    }
    if (r->type != REDIS_REPLY_INTEGER || r->integer != req->h.inc) {
        const char *why = gone_why(r, (long long)req->h.inc);
        req_reject(ss, req, DP_UNKNOWN_WORKER, "worker %s (incarnation %lld)%s; register again", req->h.worker,
                   (long long)req->h.inc, why[0] ? why : " is not a live member of the run");
        return;
    }
    ss_shard *s = &ss->shards[req->h.shard];
    int fits = ss->rc.async ? s->version <= req->h.round : s->version == req->h.round;
    if (s->gen != gen || s->state != SH_READY || !fits) {
        ss->dispatch(ss, req); /* the shard changed meanwhile: judge the push again */
        return;
    }
    if (s->committing && delta_find(s, req->h.round, req->h.worker, req->h.inc) != NULL) {
        /* a resend while the commit that uses it runs: that commit reads the one we have */
        req_reply_simple(req, "ack", "have it");
        return;
    }
    ahead_discard(s, "a pseudo-gradient arrived after it started"); /* (another one, or a resend) */
    delta_store(s, req);
    ss->m.pushes++;
    log_debug("shard %d round %lld: stored pseudo-gradient of %s:%lld (%s)", s->k, (long long)req->h.round,
              req->h.worker, (long long)req->h.inc, codec_name(req->h.dtype));
    req_reply_simple(req, "ack", NULL);
    ahead_consider(ss, s);
}

/* A request that says the shard is further on than our cache: reload_if_stale's question to Redis. */
typedef struct stale_check {
    ss_ctx *ss;
    ss_req *req;
    uint64_t gen;
    const char *why;
} stale_check;

static void reload_for(ss_ctx *ss, ss_shard *s, ss_req *req, const char *why)
{
    req->reloads++;
    shard_reload(ss, s, why);
    park_add(ss, s, req);
}

static void on_durable_version(redisReply *r, void *priv)
{
    stale_check *sc = priv;
    ss_ctx *ss = sc->ss;
    ss_req *req = sc->req;
    ss_shard *s = &ss->shards[req->h.shard];
    int same = s->gen == sc->gen && s->state == SH_READY;
    /* (no answer, or none we can read: reload, as before this question was asked) */
    int newer = r == NULL || r->type != REDIS_REPLY_STRING || strtoll(r->str, NULL, 10) > s->version;
    const char *why = sc->why;
    free(sc);
    if (same && newer) {
        reload_for(ss, s, req, why);
        return;
    }
    req->reloads++; /* judged again as after a reload: a get is answered `wait`, a push STALE */
    ss->dispatch(ss, req);
}

/* The request says the shard is further on than our cache (a worker saw a newer version in Redis): reload, but
 * only once Redis says it holds a newer version. A peer that asked for versions that never were (a bug, or one
 * that knows the run's secret) made the shard reload at every request, parking every other request of the shard
 * meanwhile: two workers trained 3 times slower against such a peer, and a big shard's reload takes seconds. */
static void reload_if_stale(ss_ctx *ss, ss_shard *s, ss_req *req, const char *why)
{
    stale_check *sc = malloc(sizeof *sc);
    if (sc != NULL) *sc = (stale_check){.ss = ss, .req = req, .gen = s->gen, .why = why};
    if (sc == NULL || store_shard_version(ss, s->k, on_durable_version, sc) != 0) {
        free(sc);
        reload_for(ss, s, req, why);
    }
}

static void op_push(ss_ctx *ss, ss_req *req)
{
    ss_shard *s = own_shard(ss, req);
    if (s == NULL) return;
    if (ss->rc.async && req->h.round < s->version) {
        /* async: that submission was applied already (we are a new owner and the worker resends) */
        req_reply_simple(req, "ack", "applied already");
        return;
    }
    if (!ss->rc.async && req->h.round == s->version + 1 && s->committing) {
        /* the worker saw round `version` committed in Redis before our dl_commit reply came back */
        park_add(ss, s, req);
        return;
    }
    if (!ss->rc.async && req->h.round > s->version && !s->committing && req->reloads == 0) {
        /* the worker saw a newer version than our cache: it must be stale */
        reload_if_stale(ss, s, req, "a push for a round ahead of the cached version");
        return;
    }
    if (push_validate(ss, s, req) != 0) return;
    member_check *mc = malloc(sizeof *mc);
    if (mc == NULL) {
        req_reply_err(req, DP_BUSY, "out of memory");
        return;
    }
    mc->ss = ss;
    mc->req = req;
    mc->gen = s->gen;
    const char *args[1] = {req->h.worker};
    if (store_fcall(ss, push_on_member, mc, "dl_member", 1, args) != 0) {
        free(mc);
        req_reply_err(req, DP_REDIS, "Redis is unavailable; retry");
    }
}

static void reply_current(ss_ctx *ss, ss_shard *s, ss_req *req)
{
    reply_params(ss, s, req, s->theta, s->version, s->theta_xxh, 0);
}

/* A get for version r+1 comes when the barrier of round r has closed or while its worker arrives: the
 * worker asks for every other shard of the fragment with it. Start their commits now (those that have a
 * pushed Δ of round r), so the server computes, logs and commits them back to back instead of one per
 * request (each reads the barrier: open, they end at once and the close starts them again, subscribe.c). */
static void commit_siblings(ss_ctx *ss, const ss_shard *s)
{
    for (int k = 0; k < ss->nshards; k++) {
        ss_shard *o = &ss->shards[k];
        if (o == s || o->state != SH_READY || o->committing || o->frag != s->frag || o->version != s->version) continue;
        if (delta_has_round(o, o->version)) commit_start(ss, o);
    }
}

static void op_get(ss_ctx *ss, ss_req *req)
{
    req->waits_close = 0;
    ss_shard *s = own_shard(ss, req);
    if (s == NULL) return;
    int64_t v = req->h.version;
    if (s->version >= v && fault_late_need(ss, req, s->k, s->version)) return;
    if (s->version == v && reply_wants_update(ss, req, &s->upd)) {
        reply_update(ss, s, req, &s->upd, 0);
        return;
    }
    if (s->version >= v && ss->rc.download_update) { /* (we have no update for it: a new owner, a gap) */
        reply_params_momentum(ss, s, req);
        return;
    }
    if (s->version >= v) {
        reply_current(ss, s, req);
        return;
    }
    if (s->committing) {
        if (!commit_log_reply_tentative(ss, s, req)) park_add(ss, s, req);
        return;
    }
    if (ss->rc.async) {
        /* async: versions are applied in submission order; drive the next one (its submitter may be
         * another worker: then this get waits for it) */
        park_add(ss, s, req);
        commit_start(ss, s);
        return;
    }
    if (s->version == v - 1 && closes_known_open(ss, s->frag, s->version)) {
        req->waits_close = 1; /* (sent while its worker arrives) the close starts the commit: subscribe.c */
        park_add(ss, s, req);
        return;
    }
    if (s->version == v - 1) {
        park_add(ss, s, req);
        commit_start(ss, s);
        commit_siblings(ss, s);
        return;
    }
    if (req->reloads > 0) {
        req_reply_simple(req, "wait", "the shard is behind the version asked for");
        return;
    }
    reload_if_stale(ss, s, req, "a get for a version more than one ahead of the cached version");
}

void ops_dispatch(ss_ctx *ss, ss_req *req)
{
    if (strcmp(req->h.op, "push") == 0)
        op_push(ss, req);
    else if (strcmp(req->h.op, "get") == 0)
        op_get(ss, req);
    else
        req_reject(ss, req, DP_BADOP, "unknown operation '%s' (expected hello, push or get)", req->h.op);
}
