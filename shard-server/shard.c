/*
 * shard.c: the per-shard cache and how it is (re)built from Redis.
 *
 * A shard is FREE (not ours), LOADING (ours, being rebuilt) or READY (ours and served). Loading reads
 * k:version, k:snap, k:log and k:digest from dl:{R}:shards, GETs the snapshot blob and every log blob
 * on the bulk connection (pipelined: replies arrive in order, so each log entry is replayed as soon as
 * it arrives, without copying it), replays them with outer_sgd_step exactly as recorded, and checks
 * the XXH3 digest of the result against k:digest before the shard serves anything.
 *
 * A load that fails because the durable state itself is bad (a blob fails its checksum, is missing or
 * malformed, or the replay does not give k:digest) is not retried: the shard becomes CORRUPT, is marked
 * in dl:{R}:shards with dl_mark_corrupt (one 'corrupt' event with the key and the reason) and answers
 * `err CORRUPT` until `coordinator repair` revokes the lease. A shard found already marked is not
 * loaded at all. Failures to reach the state (Redis down, the lease moved) are retried at the next beat.
 *
 * Every drop or reload bumps the shard's generation; callbacks of older operations see the mismatch
 * and discard their work. Requests that need a loading or committing shard are parked on it and
 * re-dispatched when it is ready (or answered when they have waited too long).
 */
#include "ss.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "log.h"
#include "outer.h"
#include "replay.h"
#include "util.h"

#define MAX_PARKED_PER_ROUND 64

typedef struct ss_load {
    ss_ctx *ss;
    int k;
    uint64_t gen;
    int outstanding; /* GETs not yet answered */
    int failed;
    int abandoned;
    int64_t version;
    char digest[17];
    int nlogs;
    int next_blob;         /* index in keys of the next reply (replies arrive in GET order) */
    char (*keys)[KEY_MAX]; /* the blobs in GET order: the snapshot, then each log entry */
    int64_t *vers;         /* the version each of them names */
    int nkeys;
    int corrupt; /* the failure is in the durable state, not in reaching it: no retry helps */
    char bad_key[256];
    char reason[512];
    float *theta;
    float *mom;
    int has_mom;
    float *dnbuf; /* Delayed Nesterov buffer (async runs with --dn-buffer-size) */
} ss_load;

int shards_init(ss_ctx *ss, char *err, size_t errlen)
{
    ss->nshards = ss->rc.nshards;
    ss->shards = calloc((size_t)ss->nshards, sizeof *ss->shards);
    ss->owner_addr = calloc((size_t)ss->nshards, sizeof *ss->owner_addr);
    if (ss->shards == NULL || ss->owner_addr == NULL) {
        err_set(err, errlen, "out of memory for %d shards", ss->nshards);
        return -1;
    }
    size_t largest = 0;
    for (int k = 0; k < ss->nshards; k++) {
        ss_shard *s = &ss->shards[k];
        s->k = k;
        s->n = (size_t)runconf_shard_numel(&ss->rc, k);
        s->frag = runconf_fragment_of_shard(&ss->rc, k);
        s->version = -1;
        if (s->n > largest) largest = s->n;
    }
    ss->max_frame = largest * sizeof(float) + BLOB_HEADER_MAX;
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* pseudo-gradients */

ss_delta *shard_find_delta(ss_shard *s, int64_t round, const char *worker, int64_t inc)
{
    for (ss_delta *d = s->deltas; d != NULL; d = d->next)
        if (d->round == round && d->inc == inc && strcmp(d->worker, worker) == 0) return d;
    return NULL;
}

/* Keep the request's payload (the frame moves into the delta); replaces an earlier push of the same key. */
void shard_store_delta(ss_shard *s, ss_req *req)
{
    ss_delta *d = shard_find_delta(s, req->h.round, req->h.worker, req->h.inc);
    if (d == NULL) {
        d = calloc(1, sizeof *d);
        if (d == NULL) return;
        snprintf(d->worker, sizeof d->worker, "%s", req->h.worker);
        d->round = req->h.round;
        d->inc = req->h.inc;
        d->next = s->deltas;
        s->deltas = d;
    } else {
        free(d->frame);
    }
    d->dtype = req->h.dtype;
    d->tokens = req->h.aux;
    d->frame = req->frame;
    d->payload = req->payload;
    req->frame = NULL;
    req->payload = NULL;
}

/* Free the deltas of rounds < below_round (or all of them). */
void shard_free_deltas(ss_shard *s, int64_t below_round, int all)
{
    ss_delta **pp = &s->deltas;
    while (*pp != NULL) {
        ss_delta *d = *pp;
        if (all || d->round < below_round) {
            *pp = d->next;
            free(d->frame);
            free(d);
        } else {
            pp = &d->next;
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* parked requests */

void shard_park(ss_ctx *ss, ss_shard *s, ss_req *req)
{
    int cap = MAX_PARKED_PER_ROUND * (ss->opts.max_pending_rounds > 0 ? ss->opts.max_pending_rounds : 1);
    if (s->nparked >= cap) {
        req_reply_err(req, DP_BUSY, "shard %d has %d requests waiting; retry", s->k, s->nparked);
        return;
    }
    if (req->parked_ms == 0) req->parked_ms = now_ms();
    req->next = NULL;
    if (s->parked_tail != NULL)
        s->parked_tail->next = req;
    else
        s->parked = req;
    s->parked_tail = req;
    s->nparked++;
}

ss_req *shard_take_parked(ss_shard *s)
{
    ss_req *list = s->parked;
    s->parked = s->parked_tail = NULL;
    s->nparked = 0;
    return list;
}

/* Re-dispatch every parked request (each is judged again against the shard's new state). */
void shard_unpark_all(ss_ctx *ss, ss_shard *s)
{
    ss_req *list = shard_take_parked(s);
    while (list != NULL) {
        ss_req *req = list;
        list = req->next;
        req->next = NULL;
        ops_dispatch(ss, req);
    }
}

/* Answer requests that waited longer than max_age_ms: the worker will retry. */
void shard_expire_parked(ss_ctx *ss, uint64_t max_age_ms)
{
    uint64_t now = now_ms();
    for (int k = 0; k < ss->nshards; k++) {
        ss_shard *s = &ss->shards[k];
        ss_req **pp = &s->parked;
        ss_req *prev = NULL;
        while (*pp != NULL) {
            ss_req *req = *pp;
            if (now - req->parked_ms < max_age_ms) {
                prev = req;
                pp = &req->next;
                continue;
            }
            *pp = req->next;
            if (s->parked_tail == req) s->parked_tail = prev;
            s->nparked--;
            if (strcmp(req->h.op, "get") == 0)
                req_reply_simple(req, "wait", "the shard is still loading or committing");
            else
                req_reply_err(req, DP_NOTREADY, "shard %d is not loaded yet; retry", k);
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* loading */

static void load_free(ss_load *ld)
{
    free(ld->keys);
    free(ld->vers);
    free(ld->theta);
    free(ld->mom);
    free(ld->dnbuf);
    free(ld);
}

/* Account for one answered GET; frees an abandoned load once nothing refers to it any more. */
static int load_settle(ss_load *ld)
{
    ld->outstanding--;
    if (ld->abandoned && ld->outstanding <= 0) {
        load_free(ld);
        return 1;
    }
    return 0;
}

static void load_fail(ss_load *ld, const char *fmt, const char *detail)
{
    ss_ctx *ss = ld->ss;
    if (!ld->failed) {
        char msg[600];
        snprintf(msg, sizeof msg, fmt, detail);
        log_error("shard %d: load of version %lld failed: %s%s", ld->k, (long long)ld->version, msg,
                  ld->corrupt ? "" : "; will retry");
        ss->m.load_failures++;
    }
    ld->failed = 1;
}

/* The durable state itself is bad (key names the blob, or the shards hash field, at fault). */
static void load_corrupt(ss_load *ld, const char *key, const char *reason)
{
    if (!ld->failed) {
        ld->corrupt = 1;
        snprintf(ld->bad_key, sizeof ld->bad_key, "%s", key);
        snprintf(ld->reason, sizeof ld->reason, "%s", reason);
    }
    load_fail(ld, "%s", reason);
}

static void shard_set_corrupt(ss_ctx *ss, ss_shard *s, int64_t version, const char *key, const char *reason,
                              int record);

/* "dl:{R}:shards k:<field>": where a malformed entry of the shards hash is reported. */
static const char *shards_field(const ss_ctx *ss, int k, const char *field, char *buf, size_t cap)
{
    char key[KEY_MAX];
    snprintf(buf, cap, "%s %d:%s", key_run(key, sizeof key, ss->opts.run, "shards"), k, field);
    return buf;
}

/* Everything has arrived: check the digest and make the shard READY. */
static void load_finish(ss_load *ld)
{
    ss_ctx *ss = ld->ss;
    ss_shard *s = &ss->shards[ld->k];
    char digest[17];
    uint64_t theta_xxh = ld->failed ? 0 : digest_f32(ld->theta, s->n);
    snprintf(digest, sizeof digest, "%016" PRIx64, theta_xxh);
    if (!ld->failed && strcmp(digest, ld->digest) != 0) {
        char reason[256];
        snprintf(reason, sizeof reason,
                 "digest mismatch: the snapshot and %d log entries replay to %s, "
                 "dl:{R}:shards says %s",
                 ld->nlogs, digest, ld->digest);
        load_corrupt(ld, ld->nkeys > 0 ? ld->keys[ld->nkeys - 1] : "", reason);
    }
    if (ld->failed) {
        s->load = NULL;
        if (ld->corrupt) shard_set_corrupt(ss, s, ld->version, ld->bad_key, ld->reason, 1);
        load_free(ld); /* otherwise the state stays LOADING; the next beat retries */
        return;
    }
    ss_buf_release(s->theta); /* replies may still be sending it */
    free(s->mom);
    free(s->dnbuf);
    s->theta = ld->theta;
    s->mom = ld->mom;
    s->has_mom = ld->has_mom;
    s->dnbuf = ld->dnbuf;
    ld->dnbuf = NULL;
    s->version = ld->version;
    snprintf(s->digest, sizeof s->digest, "%s", digest);
    s->theta_xxh = theta_xxh;
    s->state = SH_READY;
    s->load = NULL;
    ld->theta = ld->mom = NULL;
    load_free(ld);
    shard_free_deltas(s, s->version, 0);
    ss->m.loads++;
    log_info("shard %d: loaded version %lld (epoch %lld, digest %s), serving", s->k, (long long)s->version,
             (long long)s->epoch, s->digest);
    shard_unpark_all(ss, s);
}

/* A snapshot or log blob as received: decoded, or the load failed (and the reason recorded). */
static int load_decode(ss_load *ld, redisReply *r, const char *key, const char *what, blob_header *h,
                       const uint8_t **payload, size_t *plen)
{
    char err[256];
    if (r != NULL && r->type == REDIS_REPLY_NIL) {
        snprintf(err, sizeof err, "the %s blob is missing (dl:{R}:shards names it)", what);
        load_corrupt(ld, key, err);
        return -1;
    }
    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        snprintf(err, sizeof err, "cannot read the %s blob: %s", what,
                 r == NULL                      ? "Redis connection lost"
                 : r->type == REDIS_REPLY_ERROR ? r->str
                                                : "not a string");
        load_fail(ld, "%s", err);
        return -1;
    }
    if (blob_decode((const uint8_t *)r->str, (size_t)r->len, h, payload, plen, err, sizeof err) != 0) {
        char reason[300];
        snprintf(reason, sizeof reason, "corrupt %s blob: %s", what, err);
        load_corrupt(ld, key, reason);
        return -1;
    }
    return 0;
}

/* The load's state as common/math/replay.c sees it (the one replay implementation). */
static replay_state load_state(ss_load *ld, int64_t version)
{
    const runconf *rc = &ld->ss->rc;
    replay_state st = {.theta = ld->theta,
                       .mom = ld->mom,
                       .dnbuf = ld->dnbuf,
                       .has_mom = ld->has_mom,
                       .version = version,
                       .dn_buffer = (uint32_t)rc->dn_buffer,
                       .dn_variant = rc->dn_variant,
                       .dn_t0 = rc->dn_t0};
    return st;
}

/* The snapshot, then each log entry (the step that turned version v-1 into v), in the order the GETs
 * were issued on the bulk connection: the first reply is always the snapshot. (On a Redis Cluster, a
 * reply redirected by a slot migration comes after the ones that were not: a blob whose op or version
 * is not the one expected next is taken for that, not for corruption, and the load is retried.) */
static void load_on_blob(redisReply *r, void *priv)
{
    ss_load *ld = priv;
    if (load_settle(ld)) return;
    int idx = ld->next_blob++, is_snap = idx == 0;
    if (ld->abandoned || ld->failed) goto done;
    blob_header h;
    const uint8_t *payload;
    size_t plen;
    char err[256];
    const char *key = idx < ld->nkeys ? ld->keys[idx] : "";
    if (load_decode(ld, r, key, is_snap ? "snapshot" : "log", &h, &payload, &plen) != 0) goto done;
    if (strcmp(h.op, is_snap ? "snap" : "log") != 0 ||
        (h.version >= 0 && idx < ld->nkeys && h.version != ld->vers[idx])) {
        snprintf(err, sizeof err, "reply %d is %s of version %lld, not %s (out of order: a Redis Cluster redirect?)",
                 idx, h.op, (long long)h.version, key);
        load_fail(ld, "%s", err);
        goto done;
    }
    replay_state st = load_state(ld, is_snap ? h.version : h.version - 1);
    size_t n = ld->ss->shards[ld->k].n;
    int rc = is_snap ? replay_state_snapshot(&st, &h, payload, plen, n, err, sizeof err)
                     : replay_state_log(&st, &h, payload, plen, n, err, sizeof err);
    if (rc != 0) {
        load_corrupt(ld, key, err);
        goto done;
    }
    ld->has_mom = st.has_mom;
done:
    if (ld->outstanding == 0) load_finish(ld);
}

static int split_refs(char *csv, char **out, int cap)
{
    int n = 0;
    for (char *tok = strtok(csv, ","); tok != NULL && n < cap; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

/* The shards hash told us what to read: issue every GET in order on the bulk connection. */
static void load_on_meta(redisReply *r, void *priv)
{
    ss_load *ld = priv;
    ss_ctx *ss = ld->ss;
    if (load_settle(ld)) return;
    ss_shard *s = &ss->shards[ld->k];
    if (ld->abandoned) return;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 8) {
        load_fail(ld, "cannot read dl:{R}:shards: %s", r == NULL ? "Redis connection lost" : "bad reply");
        load_finish(ld);
        return;
    }
    for (size_t i = 0; i < 6; i++)
        if (r->element[i]->type != REDIS_REPLY_STRING) {
            load_fail(ld, "%s", "the shard's entry in dl:{R}:shards is incomplete (was the run initialised?)");
            load_finish(ld);
            return;
        }
    const char *owner = r->element[4]->str;
    long long epoch = strtoll(r->element[5]->str, NULL, 10);
    if (strcmp(owner, ss->id) != 0 || epoch != s->epoch) {
        log_info("shard %d: owned by '%s' epoch %lld now, not by us (epoch %lld): dropping", s->k, owner, epoch,
                 (long long)s->epoch);
        s->load = NULL;
        load_free(ld);
        shard_release(ss, s, "the lease moved while loading");
        return;
    }
    ld->version = strtoll(r->element[0]->str, NULL, 10);
    snprintf(ld->digest, sizeof ld->digest, "%s", r->element[3]->str);
    if (r->element[6]->type == REDIS_REPLY_STRING) {
        const char *reason = r->element[7]->type == REDIS_REPLY_STRING ? r->element[7]->str : "";
        log_error("shard %d: marked corrupt in Redis (key %s: %s); not loading it (see coordinator repair)", s->k,
                  r->element[6]->str, reason);
        int64_t version = ld->version;
        s->load = NULL;
        load_free(ld);
        shard_set_corrupt(ss, s, version, r->element[6]->str, reason, 0);
        return;
    }
    char *logs = strdup(r->element[2]->str);
    char *refs[4096];
    int nrefs = logs ? split_refs(logs, refs, 4096) : 0;
    char field[256];
    ld->keys = calloc((size_t)nrefs + 1, sizeof *ld->keys);
    ld->vers = calloc((size_t)nrefs + 1, sizeof *ld->vers);
    if (ld->keys == NULL || ld->vers == NULL) {
        free(logs);
        load_fail(ld, "%s", "out of memory");
        load_finish(ld);
        return;
    }
    ld->nkeys = 1;
    ld->vers[0] = strtoll(r->element[1]->str, NULL, 10);
    if (key_shard_ref(ld->keys[0], sizeof ld->keys[0], ss->opts.run, s->k, "snap", r->element[1]->str) != 0) {
        free(logs);
        load_corrupt(ld, shards_field(ss, s->k, "snap", field, sizeof field), "malformed snapshot ref");
        load_finish(ld);
        return;
    }
    ld->outstanding++;
    if (store_get(ss, ld->keys[0], load_on_blob, ld) != 0) {
        ld->outstanding--;
        free(logs);
        load_fail(ld, "%s", "the bulk Redis connection is down");
        load_finish(ld);
        return;
    }
    for (int i = 0; i < nrefs; i++) {
        char *logkey = ld->keys[1 + i];
        if (key_shard_ref(logkey, sizeof ld->keys[0], ss->opts.run, s->k, "log", refs[i]) != 0) {
            load_corrupt(ld, shards_field(ss, s->k, "log", field, sizeof field), "malformed log ref");
            break;
        }
        ld->vers[ld->nkeys++] = strtoll(refs[i], NULL, 10);
        ld->outstanding++;
        if (store_get(ss, logkey, load_on_blob, ld) != 0) {
            ld->outstanding--;
            load_fail(ld, "%s", "the bulk Redis connection is down");
            break;
        }
    }
    ld->nlogs = nrefs;
    free(logs);
    log_debug("shard %d: loading version %lld from snapshot %s + %d log entries", s->k, (long long)ld->version,
              r->element[1]->str, nrefs);
}

static void load_start(ss_ctx *ss, ss_shard *s)
{
    ss_load *ld = calloc(1, sizeof *ld);
    if (ld != NULL) {
        ld->theta = malloc(s->n * sizeof(float));
        ld->mom = calloc(s->n, sizeof(float));
        if (ss->rc.dn_buffer > 0) ld->dnbuf = calloc(s->n, sizeof(float));
    }
    if (ld == NULL || ld->theta == NULL || ld->mom == NULL || (ss->rc.dn_buffer > 0 && ld->dnbuf == NULL)) {
        log_error("shard %d: out of memory loading %zu parameters", s->k, s->n);
        if (ld != NULL) load_free(ld);
        return;
    }
    ld->ss = ss;
    ld->k = s->k;
    ld->gen = s->gen;
    ld->version = -1;
    char key[KEY_MAX], f[8][32];
    const char *names[8] = {"version", "snap", "log", "digest", "owner", "epoch", "corrupt", "corrupt_reason"};
    const char *argv[10] = {"HMGET", key_run(key, sizeof key, ss->opts.run, "shards")};
    for (int i = 0; i < 8; i++) {
        snprintf(f[i], sizeof f[i], "%d:%s", s->k, names[i]);
        argv[2 + i] = f[i];
    }
    ld->outstanding = 1;
    if (rlink_cmds(&ss->ctl, load_on_meta, ld, 10, argv) != 0) {
        log_warn("shard %d: cannot load now (Redis not connected); will retry", s->k);
        load_free(ld);
        return;
    }
    s->load = ld;
}

/* Forget any in-progress load (its callbacks free it). */
static void load_abandon(ss_shard *s)
{
    if (s->load != NULL) {
        s->load->abandoned = 1;
        if (s->load->outstanding <= 0) load_free(s->load);
        s->load = NULL;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* corrupt durable state */

typedef struct mark_q {
    ss_ctx *ss;
    int k;
    uint64_t gen;
} mark_q;

static void mark_on_reply(redisReply *r, void *priv)
{
    mark_q *q = priv;
    ss_shard *s = &q->ss->shards[q->k];
    int current = s->gen == q->gen && s->state == SH_CORRUPT;
    free(q);
    if (r == NULL) {
        log_warn("shard %d: recording the corrupt state failed (connection lost); the next beat tries again", s->k);
        return;
    }
    if (current) s->corrupt_recorded = 1; /* an error (FENCED: the lease moved) is settled by the next beat too */
    if (r->type == REDIS_REPLY_ERROR)
        log_warn("shard %d: dl_mark_corrupt: %s", s->k, r->str);
    else if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
        log_info("shard %d: marked corrupt in dl:{R}:shards (a 'corrupt' event is in dl:{R}:events)", s->k);
}

/* dl_mark_corrupt with the shard's version, key and reason (fenced by our lease epoch). */
static void mark_send(ss_ctx *ss, ss_shard *s)
{
    mark_q *q = malloc(sizeof *q);
    if (q == NULL) return;
    *q = (mark_q){ss, s->k, s->gen};
    char ep[24], shard[16], version[24];
    snprintf(ep, sizeof ep, "%lld", (long long)s->epoch);
    snprintf(shard, sizeof shard, "%d", s->k);
    snprintf(version, sizeof version, "%lld", (long long)s->version);
    const char *args[6] = {ss->id, ep, shard, version, s->corrupt_key, s->corrupt_reason};
    if (fcall(ss, mark_on_reply, q, "dl_mark_corrupt", 6, args) != 0)
        free(q); /* not connected: the next beat tries again */
}

/* Nothing can be served from this shard and no load will succeed until an operator repairs it: drop the
 * cache, answer every waiting request (`err CORRUPT`) and, unless Redis has the mark already, record it. */
static void shard_set_corrupt(ss_ctx *ss, ss_shard *s, int64_t version, const char *key, const char *reason, int record)
{
    ss->m.corrupt_loads += record;
    ahead_discard(s, "the shard is corrupt");
    s->gen++;
    s->state = SH_CORRUPT;
    s->committing = 0;
    s->tent_theta = NULL;
    ss_buf_release(s->theta); /* replies may still be sending it */
    free(s->mom);
    free(s->dnbuf);
    s->theta = s->mom = s->dnbuf = NULL;
    update_clear(&s->upd);
    s->has_mom = 0;
    s->version = version;
    s->digest[0] = '\0';
    snprintf(s->corrupt_key, sizeof s->corrupt_key, "%s", key);
    snprintf(s->corrupt_reason, sizeof s->corrupt_reason, "%s", reason);
    s->corrupt_recorded = !record;
    shard_free_deltas(s, 0, 1);
    log_error("shard %d: durable state of version %lld is corrupt (key %s: %s); serving `err CORRUPT` until "
              "`coordinator repair`",
              s->k, (long long)version, key, reason);
    if (record) mark_send(ss, s);
    shard_unpark_all(ss, s);
}

/* ---------------------------------------------------------------------------------------------- */
/* lease transitions */

/* We hold the lease with this epoch: (re)load unless the cache already is of this epoch. */
void shard_blob_header(const ss_shard *s, const char *op, int64_t version, int dtype, uint64_t count, blob_header *h)
{
    blob_header_init(h, op);
    h->shard = s->k;
    h->version = version;
    h->epoch = s->epoch;
    h->frag = s->frag;
    h->dtype = dtype;
    h->count = count;
}

void shard_acquire(ss_ctx *ss, ss_shard *s, int64_t epoch)
{
    if (s->state != SH_FREE && s->epoch == epoch) {
        if (s->state == SH_LOADING && s->load == NULL) load_start(ss, s); /* an earlier attempt failed: retry */
        if (s->state == SH_CORRUPT && !s->corrupt_recorded) mark_send(ss, s);
        return;
    }
    if (s->state != SH_FREE) shard_release(ss, s, "the lease epoch changed");
    log_info("shard %d: lease acquired (epoch %lld); loading", s->k, (long long)epoch);
    ss->m.lease_changes++;
    s->epoch = epoch;
    s->gen++;
    s->state = SH_LOADING;
    s->committing = 0;
    s->tent_theta = NULL; /* the commit's buffer is its own; it frees it when its callback comes */
    load_start(ss, s);
}

/* No longer ours: free everything; parked requests get `moved`. */
/* Drop the cache: callbacks still in flight find the shard's generation changed. Parked requests stay. */
static void shard_forget(ss_shard *s)
{
    ahead_discard(s, "the shard is dropped");
    free(s->last_parts);
    s->last_parts = NULL;
    s->gen++;
    s->state = SH_FREE;
    s->committing = 0;
    s->tent_theta = NULL; /* the commit's buffer is its own; it frees it when its callback comes */
    load_abandon(s);
    ss_buf_release(s->theta); /* replies may still be sending it */
    free(s->mom);
    free(s->dnbuf);
    s->dnbuf = NULL;
    s->theta = s->mom = NULL;
    update_clear(&s->upd);
    s->has_mom = 0;
    s->version = -1;
    s->digest[0] = '\0';
    s->corrupt_key[0] = s->corrupt_reason[0] = '\0';
    shard_free_deltas(s, 0, 1);
}

void shard_release(ss_ctx *ss, ss_shard *s, const char *why)
{
    if (s->state == SH_FREE) return;
    log_info("shard %d: lease lost (%s); dropping version %lld from memory", s->k, why, (long long)s->version);
    ss->m.lease_changes++;
    shard_forget(s);
    shard_unpark_all(ss, s);
}

void shards_stop(ss_ctx *ss)
{
    for (int k = 0; k < ss->nshards; k++) {
        ss_shard *s = &ss->shards[k];
        shard_forget(s);
        for (ss_req *req = shard_take_parked(s), *next; req != NULL; req = next) {
            next = req->next;
            req_free(req);
        }
    }
}

void shards_free(ss_ctx *ss)
{
    for (int k = 0; ss->owner_addr != NULL && k < ss->nshards; k++) free(ss->owner_addr[k]);
    free(ss->owner_addr);
    free(ss->shards);
    ss->owner_addr = NULL;
    ss->shards = NULL;
    ss->nshards = 0;
}

/* Still ours but the cache may be wrong: rebuild from Redis; deltas and parked requests are kept. */
void shard_reload(ss_ctx *ss, ss_shard *s, const char *why)
{
    if (s->state == SH_FREE || s->state == SH_CORRUPT) /* a corrupt shard loads again after a repair only */
        return;
    log_info("shard %d: reloading from Redis (%s)", s->k, why);
    ahead_discard(s, "the shard reloads");
    s->gen++;
    s->state = SH_LOADING;
    s->committing = 0;
    s->tent_theta = NULL; /* the commit's buffer is its own; it frees it when its callback comes */
    load_abandon(s);
    load_start(ss, s);
}
