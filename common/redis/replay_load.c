/* replay_load.c: the blobs of a shard read out of Redis and replayed (see replay_load.h); the replay is
 * format/replay.c's. */
#include "redis/replay_load.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "format/keys.h"
#include "math/outer.h"
#include "redis/runconf_load.h"

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

/* (below INT64_MAX, so that v + 1, the next entry, exists) */
int replay_ref_version(const char *ref, int64_t *v)
{
    char *end;
    if (*ref < '0' || *ref > '9') return -1;
    errno = 0;
    long long x = strtoll(ref, &end, 10);
    if (*end != '.' || errno == ERANGE || x == INT64_MAX) return -1;
    *v = x;
    return 0;
}

char *replay_log_upto(const char *log_refs, int64_t upto)
{
    const char *log = log_refs ? log_refs : "";
    char *out = calloc(strlen(log) + 1, 1), *copy = strdup(log), *save = NULL;
    if (!out || !copy) {
        free(out);
        free(copy);
        return NULL;
    }
    size_t used = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int64_t v;
        if (replay_ref_version(tok, &v) == 0 && v <= upto)
            used += (size_t)sprintf(out + used, "%s%s", used ? "," : "", tok); /* (never longer than log) */
    }
    free(copy);
    return out;
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
    if (key_shard_ref(key, sizeof key, run, shard, "snap", snap_ref) != 0 || replay_ref_version(snap_ref, &snapv) < 0) {
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
        if (key_shard_ref(key, sizeof key, run, shard, "log", tok) != 0 || replay_ref_version(tok, &lv) < 0) {
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
