/* replay.c: snapshot + log replay of a shard (see replay.h): the one implementation, used by the
 * shard-server when it loads a shard and by the checkpoint export. */
#include "replay.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "codec_sparse.h"
#include "keys.h"
#include "outer.h"
#include "outer_dn.h"
#include "rconn.h"
#include "runconf.h"
#include "util.h"

/* The digest k:digests recorded for `version` into out (17 bytes); 0 when it records none. */
static int recorded_digest(const char *digests, int64_t version, char *out)
{
    for (const char *p = digests; p && *p;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - end) : strlen(end);
        if (end != p && *end == ':' && v == version && len == 17) {
            memcpy(out, end + 1, 16);
            out[16] = '\0';
            return 1;
        }
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* After a step: θ against the digest recorded for st->version, if any. */
static int check_recorded(replay_state *st, size_t n, char *err, size_t errlen)
{
    char want[17], got[17];
    if (!st->digests || !recorded_digest(st->digests, st->version, want)) return 0;
    snprintf(got, sizeof got, "%016" PRIx64, digest_f32(st->theta, n));
    if (strcmp(got, want) != 0) {
        err_set(err, errlen, "version %" PRId64 " replays to digest %s, but its commit recorded %s", st->version, got,
                want);
        return -1;
    }
    st->verified = st->version;
    return 0;
}

int replay_state_snapshot(replay_state *st, const blob_header *h, const uint8_t *payload, size_t len, size_t n,
                          char *err, size_t errlen)
{
    int with_mom = (h->flags & 1) != 0, with_buf = (h->flags & 2) != 0;
    uint64_t want = (uint64_t)(1 + with_mom + with_buf) * n;
    if (strcmp(h->op, "snap") != 0 || h->dtype != BLOB_F32 || h->count != want || len != h->count * sizeof(float)) {
        err_set(err, errlen,
                "snapshot blob has the wrong op, dtype or count (op '%s', dtype %d, count %" PRIu64 ", want %" PRIu64
                " fp32)",
                h->op, h->dtype, h->count, want);
        return -1;
    }
    if (with_buf && st->dnbuf == NULL) {
        err_set(err, errlen,
                "snapshot of version %" PRId64 " holds a Delayed Nesterov buffer but this reader has "
                "none (the run was made with --dn-buffer-size)",
                h->version);
        return -1;
    }
    memcpy(st->theta, payload, n * sizeof(float));
    if (with_mom)
        memcpy(st->mom, payload + n * sizeof(float), n * sizeof(float));
    else
        memset(st->mom, 0, n * sizeof(float));
    /* the buffer follows θ and, when present, the momentum */
    if (st->dnbuf && with_buf)
        memcpy(st->dnbuf, payload + (size_t)(1 + with_mom) * n * sizeof(float), n * sizeof(float));
    else if (st->dnbuf)
        memset(st->dnbuf, 0, n * sizeof(float));
    st->has_mom = with_mom;
    st->version = h->version;
    st->verified = -1;
    return check_recorded(st, n, err, errlen);
}

int replay_state_log(replay_state *st, const blob_header *h, const uint8_t *payload, size_t len, size_t n, char *err,
                     size_t errlen)
{
    size_t want = codec_bytes(h->dtype, n); /* fp32, or the run's codec with --download update */
    uint32_t w;
    int sparse = h->dtype == BLOB_TOPK; /* the round's sparse update, counted in bytes (codec_sparse.h) */
    if (sparse ? strcmp(h->op, "log") != 0 || h->count != (uint64_t)len || sparse_update_check(payload, len, n, &w) != 0
               : strcmp(h->op, "log") != 0 || want == 0 || h->count != (uint64_t)n || len != want) {
        err_set(err, errlen,
                "log blob has the wrong op, dtype or count (op '%s', dtype %d, count %" PRIu64 ", want %zu elements)",
                h->op, h->dtype, h->count, n);
        return -1;
    }
    if ((h->flags & 4) && (st->dnbuf == NULL || st->dn_buffer == 0)) {
        err_set(err, errlen,
                "version %" PRId64 " is an async Delayed Nesterov step, but this reader has no DN "
                "buffer (the run's config has no dn_buffer?)",
                h->version);
        return -1;
    }
    if (st->version == INT64_MAX) {
        err_set(err, errlen, "log entry after version %" PRId64 ": the version would overflow", st->version);
        return -1;
    }
    if (h->aux != 0) {                            /* aux 0: a no-op round (every participant dropped) */
        float *g = malloc(n * sizeof(float) + 1); /* the payload may be unaligned */
        if (!g) {
            err_set(err, errlen, "out of memory replaying %zu parameters", n);
            return -1;
        }
        if (sparse)
            sparse_update_mean(payload, n, 0, n, g);
        else
            codec_decode(h->dtype, payload, n, g);
        float mu = (float)h->mu;
        if (h->flags & 4) {
            outer_dn_step(st->dn_variant, st->theta, st->mom, st->dnbuf, g, n, st->dn_t0 + (uint64_t)h->version,
                          st->dn_buffer, (float)h->lr, mu, (h->flags & 1) != 0);
            st->has_mom = 1;
        } else {
            outer_sgd_step(st->theta, st->mom, (h->flags & 2) != 0, g, n, (float)h->lr, mu, (h->flags & 1) != 0);
            if (mu != 0.0f) st->has_mom = 1;
        }
        free(g);
    }
    st->version++;
    return check_recorded(st, n, err, errlen);
}

int replay_snapshot(const blob_header *h, const uint8_t *payload, size_t len, size_t n, float *theta, float *mom,
                    int *has_mom, int64_t *version, char *err, size_t errlen)
{
    replay_state st = {.theta = theta, .mom = mom};
    if (replay_state_snapshot(&st, h, payload, len, n, err, errlen) < 0) return -1;
    *has_mom = st.has_mom;
    *version = st.version;
    return 0;
}

int replay_log(const blob_header *h, const uint8_t *payload, size_t len, size_t n, float *theta, float *mom,
               int *has_mom, int64_t *version, char *err, size_t errlen)
{
    replay_state st = {.theta = theta, .mom = mom, .has_mom = *has_mom, .version = *version};
    if (replay_state_log(&st, h, payload, len, n, err, errlen) < 0) return -1;
    *has_mom = st.has_mom;
    *version = st.version;
    return 0;
}

int replay_shard(const replay_blob *snap, const replay_blob *logs, int nlogs, size_t n, float *theta, float *mom,
                 int *has_mom, int64_t *version, char *err, size_t errlen)
{
    if (replay_snapshot(&snap->h, snap->payload, snap->len, n, theta, mom, has_mom, version, err, errlen) < 0)
        return -1;
    for (int i = 0; i < nlogs; i++)
        if (replay_log(&logs[i].h, logs[i].payload, logs[i].len, n, theta, mom, has_mom, version, err, errlen) < 0)
            return -1;
    return 0;
}

/* ---- Redis -------------------------------------------------------------------------------------- */

/* GET a blob and decode it; REPLAY_GONE when the key does not exist. *r holds the bytes. */
static int get_blob(rconn *c, const char *key, redisReply **r, replay_blob *b, char *err, size_t errlen)
{
    *r = rconn_command(c, "GET %s", key);
    if (rconn_reply_error(c, *r, err, errlen) < 0) return -1;
    if ((*r)->type == REDIS_REPLY_NIL) {
        err_set(err, errlen, "%s is missing (trimmed by a newer snapshot?)", key);
        return REPLAY_GONE;
    }
    if ((*r)->type != REDIS_REPLY_STRING) {
        err_set(err, errlen, "%s is not a string", key);
        return -1;
    }
    char derr[256];
    if (blob_decode((const uint8_t *)(*r)->str, (size_t)(*r)->len, &b->h, &b->payload, &b->len, derr, sizeof derr) <
        0) {
        err_set(err, errlen, "corrupt blob %s: %s", key, derr);
        return -1;
    }
    return blob_check_key(&b->h, key, err, errlen);
}

/* the version v of a ref "v.e"; below INT64_MAX, so that v + 1 (the next entry) exists */
static int ref_version(const char *ref, int64_t *v)
{
    char *end;
    if (*ref < '0' || *ref > '9') return -1;
    errno = 0;
    long long x = strtoll(ref, &end, 10);
    if (*end != '.' || errno == ERANGE || x == INT64_MAX) return -1;
    *v = x;
    return 0;
}

/* Apply blob b (a snapshot or log entry, as its op says: blob_check_key matched it to key); a failure names key. */
static int replay_step(replay_state *st, const char *key, const replay_blob *b, size_t n, char *err, size_t errlen)
{
    char why[600];
    int rc = !strcmp(b->h.op, "snap") ? replay_state_snapshot(st, &b->h, b->payload, b->len, n, why, sizeof why)
                                      : replay_state_log(st, &b->h, b->payload, b->len, n, why, sizeof why);
    if (rc < 0) err_set(err, errlen, "%s: %s", key, why);
    return rc;
}

int replay_refs_state(rconn *c, const char *run, int shard, size_t n, const char *snap_ref, const char *log_refs,
                      replay_state *st, char *err, size_t errlen)
{
    char key[KEY_MAX];
    int64_t snapv, version = -1;
    st->version = -1;
    if (key_shard_ref(key, sizeof key, run, shard, "snap", snap_ref) != 0 || ref_version(snap_ref, &snapv) < 0) {
        err_set(err, errlen, "shard %d: malformed snapshot ref '%s'", shard, snap_ref);
        return -1;
    }
    redisReply *r;
    replay_blob b;
    int rc = get_blob(c, key, &r, &b, err, errlen);
    if (rc == 0) {
        rc = replay_step(st, key, &b, n, err, errlen);
        version = st->version;
        if (rc == 0 && version < 0) version = st->version = snapv; /* a writer that left out "v" */
        if (rc == 0 && version != snapv) {
            err_set(err, errlen, "shard %d: snapshot %s says version %" PRId64, shard, key, version);
            st->version = -1;
            rc = -1;
        }
    }
    if (r) freeReplyObject(r);
    if (rc < 0) return rc;
    char *logs = strdup(log_refs ? log_refs : "");
    if (!logs) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    char *save = NULL;
    for (char *tok = strtok_r(logs, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
        int64_t lv;
        if (key_shard_ref(key, sizeof key, run, shard, "log", tok) != 0 || ref_version(tok, &lv) < 0) {
            err_set(err, errlen, "shard %d: malformed log ref '%s'", shard, tok);
            rc = -1;
            break;
        }
        if (lv != version + 1) {
            err_set(err, errlen, "shard %d: log entry %s does not follow version %" PRId64, shard, tok, version);
            rc = -1;
            break;
        }
        rc = get_blob(c, key, &r, &b, err, errlen);
        if (rc == 0) rc = replay_step(st, key, &b, n, err, errlen);
        version = st->version;
        if (r) freeReplyObject(r);
    }
    free(logs);
    return rc;
}

int replay_load_refs_state(rconn *c, const char *run, int shard, size_t n, int64_t want_version, const char *snap_ref,
                           const char *log_refs, const char *digest, replay_state *st, char *err, size_t errlen)
{
    int rc = replay_refs_state(c, run, shard, n, snap_ref, log_refs, st, err, errlen);
    if (rc < 0) return rc;
    int64_t version = st->version;
    if (version != want_version) {
        err_set(err, errlen, "shard %d: snapshot + log give version %" PRId64 ", the shards hash says %" PRId64, shard,
                version, want_version);
        return -1;
    }
    char got[17];
    snprintf(got, sizeof got, "%016" PRIx64, digest_f32(st->theta, n));
    if (strcmp(got, digest) != 0) {
        err_set(err, errlen, "shard %d: digest mismatch at version %" PRId64 ": replay gives %s, Redis says %s", shard,
                version, got, digest);
        return -1;
    }
    return 0;
}

int replay_load_refs(rconn *c, const char *run, int shard, size_t n, int64_t want_version, const char *snap_ref,
                     const char *log_refs, const char *digest, float *theta, float *mom, int *has_mom, char *err,
                     size_t errlen)
{
    replay_state st = {.theta = theta, .mom = mom};
    int rc = replay_load_refs_state(c, run, shard, n, want_version, snap_ref, log_refs, digest, &st, err, errlen);
    if (rc == 0) *has_mom = st.has_mom;
    return rc;
}

int replay_load_shard(rconn *c, const char *run, int shard, float *theta, float *mom, int *has_mom, int64_t *version,
                      char *err, size_t errlen)
{
    runconf rc;
    if (runconf_load(c, run, &rc, err, errlen) < 0) return -1;
    int ret = -1;
    if (shard < 0 || shard >= rc.nshards) {
        err_set(err, errlen, "run '%s' has %d shards, no shard %d", run, rc.nshards, shard);
        goto done;
    }
    size_t n = (size_t)runconf_shard_numel(&rc, shard);
    for (int attempt = 0; attempt < 20; attempt++) {
        char key[KEY_MAX], f[4][32];
        snprintf(f[0], sizeof f[0], "%d:version", shard);
        snprintf(f[1], sizeof f[1], "%d:snap", shard);
        snprintf(f[2], sizeof f[2], "%d:log", shard);
        snprintf(f[3], sizeof f[3], "%d:digest", shard);
        redisReply *r =
            rconn_command(c, "HMGET %s %s %s %s %s", key_run(key, sizeof key, run, "shards"), f[0], f[1], f[2], f[3]);
        if (rconn_reply_error(c, r, err, errlen) < 0) {
            if (r) freeReplyObject(r);
            goto done;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_STRING || r->element[3]->type != REDIS_REPLY_STRING) {
            err_set(err, errlen, "shard %d: its entry in %s is incomplete (was the run initialised?)", shard, key);
            freeReplyObject(r);
            goto done;
        }
        long long v = 0;
        if (parse_int(r->element[0]->str, 0, INT64_MAX, &v) < 0) {
            err_set(err, errlen, "shard %d: bad version '%s'", shard, r->element[0]->str);
            freeReplyObject(r);
            goto done;
        }
        const char *logs = r->element[2]->type == REDIS_REPLY_STRING ? r->element[2]->str : "";
        int lrc = replay_load_refs(c, run, shard, n, v, r->element[1]->str, logs, r->element[3]->str, theta, mom,
                                   has_mom, err, errlen);
        freeReplyObject(r);
        if (lrc == 0) {
            *version = v;
            ret = 0;
            goto done;
        }
        if (lrc != REPLAY_GONE) goto done;
        sleep_ms(20); /* trimmed under us: the refs moved on */
    }
done:
    runconf_free(&rc);
    return ret;
}
