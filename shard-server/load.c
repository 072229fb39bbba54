/*
 * load.c: rebuilding a shard's cache from its durable state in Redis (docs/PROTOCOL.md, "Durable state").
 *
 * Loading reads k:version, k:snap, k:log and k:digest from dl:{R}:shards, GETs the snapshot blob and every
 * log blob on the bulk connection (pipelined: replies arrive in order, so each log entry is replayed as
 * soon as it arrives, without copying it), checks each blob against its key (blob_check_key), replays
 * them with common/format/replay.c exactly as recorded, and checks the XXH3 digest of the result against
 * k:digest before the shard serves anything. A failure of the durable state itself makes the shard
 * CORRUPT (load_set_corrupt) with the first bad key named; a failure to reach it is retried.
 * A run with --async-rule rebase keeps a copy of each of the last rebase_window versions the replay
 * passes through: the shard's past (past.c).
 */
#include "ss.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "format/replay.h"
#include "math/outer.h"

struct ss_load;
/* One GET of the load: its reply knows which blob it is. */
typedef struct load_get {
    struct ss_load *ld;
    int idx; /* in keys */
} load_get;

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
    load_get *gets;        /* the privdata of each GET */
    int nkeys;
    int corrupt; /* the failure is in the durable state, not in reaching it: no retry helps */
    char bad_key[256];
    char reason[512];
    float *theta;
    float *mom;
    int has_mom;
    float *dnbuf;  /* Delayed Nesterov buffer (async runs with --dn-buffer-size) */
    float **past;  /* --async-rule rebase: copies of θ at versions version-K .. version-1 (slot i: version-K+i) */
    char *digests; /* k:digests: each version's digest as its commit recorded it (NULL: none kept) */
} ss_load;

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

void load_mark_corrupt(ss_ctx *ss, ss_shard *s)
{
    mark_q *q = malloc(sizeof *q);
    if (q == NULL) return;
    *q = (mark_q){ss, s->k, s->gen};
    char ep[24], shard[16], version[24];
    snprintf(ep, sizeof ep, "%lld", (long long)s->epoch);
    snprintf(shard, sizeof shard, "%d", s->k);
    snprintf(version, sizeof version, "%lld", (long long)s->version);
    const char *args[6] = {ss->id, ep, shard, version, s->corrupt_key, s->corrupt_reason};
    if (store_fcall(ss, mark_on_reply, q, "dl_mark_corrupt", 6, args) != 0)
        free(q); /* not connected: the next beat tries again */
}

/* Nothing can be served from this shard and no load will succeed until an operator repairs it: drop the
 * cache, answer every waiting request (`err CORRUPT`) and, unless Redis has the mark already, record it. */
static void load_set_corrupt(ss_ctx *ss, ss_shard *s, int64_t version, const char *key, const char *reason, int record)
{
    ss->m.corrupt_loads += record;
    ahead_discard(s, "the shard is corrupt");
    s->gen++;
    s->state = SH_CORRUPT;
    s->committing = 0;
    s->tent_theta = NULL;
    server_buf_release(s->theta); /* replies may still be sending it */
    free(s->mom);
    free(s->dnbuf);
    s->theta = s->mom = s->dnbuf = NULL;
    past_clear(s);
    snapshot_drop_pending(s);
    reply_update_clear(&s->upd);
    s->has_mom = 0;
    s->version = version;
    s->digest[0] = '\0';
    snprintf(s->corrupt_key, sizeof s->corrupt_key, "%s", key);
    snprintf(s->corrupt_reason, sizeof s->corrupt_reason, "%s", reason);
    s->corrupt_recorded = !record;
    delta_free(s, 0, 1);
    log_error("shard %d: durable state of version %lld is corrupt (key %s: %s); serving `err CORRUPT` until "
              "`coordinator repair`",
              s->k, (long long)version, key, reason);
    if (record) load_mark_corrupt(ss, s);
    park_redispatch(ss, s);
}

/* ---------------------------------------------------------------------------------------------- */
/* loading */

static void load_free_past(ss_load *ld)
{
    int64_t K = ld->ss->rc.rebase_window;
    for (int64_t i = 0; ld->past != NULL && i < K; i++) free(ld->past[i]);
    free(ld->past);
    ld->past = NULL;
}

static void load_free(ss_load *ld)
{
    load_free_past(ld);
    free(ld->keys);
    free(ld->gets);
    free(ld->digests);
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

/* "dl:{R}:shards k:<field>": where a malformed entry of the shards hash is reported. */
static const char *shards_field(const ss_ctx *ss, int k, const char *field, char *buf, size_t cap)
{
    char key[KEY_MAX];
    snprintf(buf, cap, "%s %d:%s", key_run(key, sizeof key, ss->opts.run, "shards"), k, field);
    return buf;
}

/* --async-rule rebase: the versions before the loaded one that the replay passed through become the
 * shard's past (past.c). */
static void load_hand_past(ss_load *ld, ss_shard *s)
{
    past_clear(s);
    int64_t K = ld->ss->rc.rebase_window;
    for (int64_t i = 0; ld->past != NULL && i < K; i++) {
        if (ld->past[i] != NULL) past_keep(s, K, ld->past[i], ld->version - K + i);
        ld->past[i] = NULL;
    }
}

/* --async-rule rebase: a copy of θ at `version` if it is one of the K before the version loaded. */
static void load_keep_past(ss_load *ld, int64_t version, size_t n)
{
    int64_t K = ld->ss->rc.rebase_window, i = version - (ld->version - K);
    if (ld->past == NULL || i < 0 || i >= K) return;
    free(ld->past[i]);
    ld->past[i] = malloc(n * sizeof(float));
    if (ld->past[i] != NULL) memcpy(ld->past[i], ld->theta, n * sizeof(float));
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
        if (ld->corrupt) load_set_corrupt(ss, s, ld->version, ld->bad_key, ld->reason, 1);
        load_free(ld); /* otherwise the state stays LOADING; the next beat retries */
        return;
    }
    server_buf_release(s->theta); /* replies may still be sending it */
    free(s->mom);
    free(s->dnbuf);
    s->theta = ld->theta;
    s->mom = ld->mom;
    s->has_mom = ld->has_mom;
    s->dnbuf = ld->dnbuf;
    ld->dnbuf = NULL;
    s->version = ld->version;
    load_hand_past(ld, s);
    snprintf(s->digest, sizeof s->digest, "%s", digest);
    s->theta_xxh = theta_xxh;
    s->state = SH_READY;
    s->load = NULL;
    ld->theta = ld->mom = NULL;
    load_free(ld);
    delta_free(s, s->version, 0);
    ss->m.loads++;
    log_info("shard %d: loaded version %lld (epoch %lld, digest %s), serving", s->k, (long long)s->version,
             (long long)s->epoch, s->digest);
    park_redispatch(ss, s);
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

/* The load's state as common/format/replay.c sees it (the one replay implementation). */
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
                       .dn_t0 = runconf_dn_t0(rc, ld->k),
                       .digests = ld->digests};
    return st;
}

/* The snapshot, then each log entry (the step that turned version v-1 into v), in the order the GETs
 * were issued on the bulk connection: the first reply is always the snapshot. On a Redis Cluster, a
 * reply redirected by a slot migration comes after the ones that were not: such a reply (each knows its
 * GET) fails the load, which is retried. A blob that is not the one its key names (blob_check_key: a
 * valid blob copied to the wrong place) is corruption, reported with that key. */
static void load_on_blob(redisReply *r, void *priv)
{
    load_get *g = priv;
    ss_load *ld = g->ld;
    int idx = g->idx, is_snap = idx == 0, in_order = idx == ld->next_blob++;
    if (load_settle(ld)) return;
    if (ld->abandoned || ld->failed) goto done;
    blob_header h;
    const uint8_t *payload;
    size_t plen;
    char err[sizeof ld->reason];
    const char *key = ld->keys[idx];
    if (!in_order) {
        load_fail(ld, "the reply for %s came out of order (a Redis Cluster redirect?)", key);
        goto done;
    }
    if (load_decode(ld, r, key, is_snap ? "snapshot" : "log", &h, &payload, &plen) != 0) goto done;
    if (blob_check_key(&h, key, err, sizeof err) != 0) {
        load_corrupt(ld, key, err);
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
    load_keep_past(ld, st.version, n);
done:
    if (ld->outstanding == 0) load_finish(ld);
}

static int split_refs(char *csv, char **out, int cap)
{
    int n = 0;
    for (char *tok = strtok(csv, ","); tok != NULL && n < cap; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

/* The shards hash answered with the 9 fields asked, the first 6 of them strings: 1; else the load has
 * failed (and is finished): 0. */
static int meta_complete(ss_load *ld, redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 9) {
        load_fail(ld, "cannot read dl:{R}:shards: %s", r == NULL ? "Redis connection lost" : "bad reply");
        load_finish(ld);
        return 0;
    }
    for (size_t i = 0; i < 6; i++)
        if (r->element[i]->type != REDIS_REPLY_STRING) {
            load_fail(ld, "%s", "the shard's entry in dl:{R}:shards is incomplete (was the run initialised?)");
            load_finish(ld);
            return 0;
        }
    return 1;
}

/* The lease went to another server (or epoch) while the HMGET was out: the load is dropped and the
 * shard released (1). 0: it is still ours. */
static int meta_lease_moved(ss_load *ld, ss_shard *s, redisReply *r)
{
    ss_ctx *ss = ld->ss;
    const char *owner = r->element[4]->str;
    long long epoch = strtoll(r->element[5]->str, NULL, 10);
    if (strcmp(owner, ss->id) == 0 && epoch == s->epoch) return 0;
    log_info("shard %d: owned by '%s' epoch %lld now, not by us (epoch %lld): dropping", s->k, owner, epoch,
             (long long)s->epoch);
    s->load = NULL;
    load_free(ld);
    ss->release(ss, s, "the lease moved while loading"); /* shard.c, above */
    return 1;
}

/* The shard is marked corrupt in Redis: it becomes CORRUPT without a load, and the load is freed (1).
 * 0: no mark. */
static int meta_marked_corrupt(ss_load *ld, ss_shard *s, redisReply *r)
{
    if (r->element[6]->type != REDIS_REPLY_STRING) return 0;
    const char *reason = r->element[7]->type == REDIS_REPLY_STRING ? r->element[7]->str : "";
    log_error("shard %d: marked corrupt in Redis (key %s: %s); not loading it (see coordinator repair)", s->k,
              r->element[6]->str, reason);
    ss_ctx *ss = ld->ss;
    int64_t version = ld->version;
    s->load = NULL;
    load_free(ld);
    load_set_corrupt(ss, s, version, r->element[6]->str, reason, 0);
    return 1;
}

/* The snapshot's GET, the first on the bulk connection: 0, or -1 when the load has failed. */
static int load_get_snapshot(ss_load *ld, ss_shard *s, const char *snap)
{
    ss_ctx *ss = ld->ss;
    char field[256];
    ld->nkeys = 1;
    ld->gets[0] = (load_get){ld, 0};
    if (key_shard_ref(ld->keys[0], sizeof ld->keys[0], ss->opts.run, s->k, "snap", snap) != 0) {
        load_corrupt(ld, shards_field(ss, s->k, "snap", field, sizeof field), "malformed snapshot ref");
        return -1;
    }
    ld->outstanding++;
    if (store_get(ss, ld->keys[0], load_on_blob, &ld->gets[0]) != 0) {
        ld->outstanding--;
        load_fail(ld, "%s", "the bulk Redis connection is down");
        return -1;
    }
    return 0;
}

/* A GET for each log entry, after the snapshot's. A malformed ref or a GET that cannot go out fails the
 * load and stops there: the replies to the GETs sent finish it. */
static void load_get_logs(ss_load *ld, ss_shard *s, char **refs, int nrefs)
{
    ss_ctx *ss = ld->ss;
    char field[256];
    for (int i = 0; i < nrefs; i++) {
        char *logkey = ld->keys[1 + i];
        if (key_shard_ref(logkey, sizeof ld->keys[0], ss->opts.run, s->k, "log", refs[i]) != 0) {
            load_corrupt(ld, shards_field(ss, s->k, "log", field, sizeof field), "malformed log ref");
            break;
        }
        ld->gets[ld->nkeys] = (load_get){ld, ld->nkeys};
        ld->outstanding++;
        if (store_get(ss, logkey, load_on_blob, &ld->gets[ld->nkeys++]) != 0) {
            ld->outstanding--;
            load_fail(ld, "%s", "the bulk Redis connection is down");
            break;
        }
    }
}

/* The GETs of the snapshot (ref snap) and of each log entry (the comma list log_csv), in that order. */
static void load_issue_gets(ss_load *ld, ss_shard *s, const char *snap, const char *log_csv)
{
    char *logs = strdup(log_csv);
    char *refs[4096];
    int nrefs = logs ? split_refs(logs, refs, 4096) : 0;
    ld->keys = calloc((size_t)nrefs + 1, sizeof *ld->keys);
    ld->gets = calloc((size_t)nrefs + 1, sizeof *ld->gets);
    if (ld->keys == NULL || ld->gets == NULL) {
        free(logs);
        load_fail(ld, "%s", "out of memory");
        load_finish(ld);
        return;
    }
    if (load_get_snapshot(ld, s, snap) != 0) {
        free(logs);
        load_finish(ld);
        return;
    }
    load_get_logs(ld, s, refs, nrefs);
    ld->nlogs = nrefs;
    free(logs);
    log_debug("shard %d: loading version %lld from snapshot %s + %d log entries", s->k, (long long)ld->version, snap,
              nrefs);
}

/* The shards hash told us what to read: issue every GET in order on the bulk connection. */
static void load_on_meta(redisReply *r, void *priv)
{
    ss_load *ld = priv;
    if (load_settle(ld)) return;
    ss_shard *s = &ld->ss->shards[ld->k];
    if (ld->abandoned || !meta_complete(ld, r) || meta_lease_moved(ld, s, r)) return;
    ld->version = strtoll(r->element[0]->str, NULL, 10);
    snprintf(ld->digest, sizeof ld->digest, "%s", r->element[3]->str);
    if (r->element[8]->type == REDIS_REPLY_STRING) ld->digests = strdup(r->element[8]->str);
    if (meta_marked_corrupt(ld, s, r)) return;
    load_issue_gets(ld, s, r->element[1]->str, r->element[2]->str);
}

void load_start(ss_ctx *ss, ss_shard *s)
{
    ss_load *ld = calloc(1, sizeof *ld);
    if (ld != NULL) {
        ld->theta = malloc(s->n * sizeof(float));
        ld->mom = calloc(s->n, sizeof(float));
        if (ss->rc.dn_buffer > 0) ld->dnbuf = calloc(s->n, sizeof(float));
        if (runconf_rebase(&ss->rc)) ld->past = calloc((size_t)ss->rc.rebase_window, sizeof *ld->past);
    }
    if (ld == NULL || ld->theta == NULL || ld->mom == NULL || (ss->rc.dn_buffer > 0 && ld->dnbuf == NULL) ||
        (runconf_rebase(&ss->rc) && ld->past == NULL)) {
        log_error("shard %d: out of memory loading %zu parameters", s->k, s->n);
        if (ld != NULL) load_free(ld);
        return;
    }
    ld->ss = ss;
    ld->k = s->k;
    ld->gen = s->gen;
    ld->version = -1;
    char key[KEY_MAX], f[9][32];
    const char *names[9] = {"version", "snap",           "log",    "digest", "owner", "epoch",
                            "corrupt", "corrupt_reason", "digests"};
    const char *argv[11] = {"HMGET", key_run(key, sizeof key, ss->opts.run, "shards")};
    for (int i = 0; i < 9; i++) {
        snprintf(f[i], sizeof f[i], "%d:%s", s->k, names[i]);
        argv[2 + i] = f[i];
    }
    ld->outstanding = 1;
    if (rlink_cmds(&ss->ctl, load_on_meta, ld, 11, argv) != 0) {
        log_warn("shard %d: cannot load now (Redis not connected); will retry", s->k);
        load_free(ld);
        return;
    }
    s->load = ld;
}

/* Forget any in-progress load (its callbacks free it). */
void load_abandon(ss_shard *s)
{
    if (s->load != NULL) {
        s->load->abandoned = 1;
        if (s->load->outstanding <= 0) load_free(s->load);
        s->load = NULL;
    }
}
