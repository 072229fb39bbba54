/* run_state.c: a run's committed global state read from Redis (see run_state.h). */
#include "redis/run_state.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "format/replay.h"
#include "redis/replay_load.h"
#include "redis/runconf_load.h"

/* The refs of a shard in dl:{R}:shards; k:digests only for a read that may take a shard below its version. */
static const char *const REF_FIELDS[5] = {"version", "snap", "log", "digest", "digests"};
enum { REF_VERSION, REF_SNAP, REF_LOG, REF_DIGEST, REF_DIGESTS };

int run_state_alloc(run_state *st, const runconf *rc, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    st->params = malloc(rc->numel * sizeof(float) + 1);
    st->mom = calloc(rc->numel + 1, sizeof(float));
    st->digests = calloc((size_t)rc->nshards, sizeof *st->digests);
    st->versions = calloc((size_t)rc->nshards, sizeof *st->versions);
    if (rc->dn_buffer > 0) st->dnbuf = calloc(rc->numel + 1, sizeof(float));
    if (!st->params || !st->mom || !st->digests || !st->versions || (rc->dn_buffer > 0 && !st->dnbuf)) {
        run_state_free(st);
        err_set(err, errlen, "out of memory for %" PRIu64 " parameters", rc->numel);
        return -1;
    }
    return 0;
}

void run_state_free(run_state *st)
{
    free(st->params);
    free(st->mom);
    free(st->dnbuf);
    free(st->digests);
    free(st->versions);
    memset(st, 0, sizeof *st);
}

/* HMGET dl:{R}:shards with `nf` fields of REF_FIELDS per shard; the reply has nf*S elements. */
static redisReply *shard_refs(rconn *c, const runconf *rc, int nf, char *err, size_t errlen)
{
    int S = rc->nshards;
    size_t argc = 2 + (size_t)nf * (size_t)S;
    const char **argv = calloc(argc, sizeof *argv);
    char(*fields)[32] = calloc((size_t)nf * (size_t)S, sizeof *fields);
    char key[KEY_MAX];
    redisReply *r = NULL;
    if (!argv || !fields) {
        err_set(err, errlen, "out of memory");
        goto done;
    }
    argv[0] = "HMGET";
    argv[1] = key_run(key, sizeof key, rc->run, "shards");
    for (int k = 0; k < S; k++)
        for (int j = 0; j < nf; j++) {
            snprintf(fields[nf * k + j], sizeof fields[0], "%d:%s", k, REF_FIELDS[j]);
            argv[2 + nf * k + j] = fields[nf * k + j];
        }
    r = rconn_command_argv(c, (int)argc, argv, NULL);
    if (rconn_reply_error(c, r, err, errlen) < 0) {
        if (r) freeReplyObject(r);
        r = NULL;
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)nf * (size_t)S) {
        err_set(err, errlen, "unexpected reply to HMGET %s", key);
        freeReplyObject(r);
        r = NULL;
    }
done:
    free(argv);
    free(fields);
    return r;
}

/* Shard k's version from its refs, or -1 with err when the entry is incomplete. */
static long long ref_version(const runconf *rc, redisReply **e, int nf, int k, char *err, size_t errlen)
{
    long long v;
    int ok = e[0]->type == REDIS_REPLY_STRING && parse_int(e[0]->str, 0, INT64_MAX, &v) == 0;
    for (int j = 1; j < nf && j <= REF_DIGEST; j++)
        if (j != REF_LOG && e[j]->type != REDIS_REPLY_STRING) ok = 0; /* the log may be empty */
    if (!ok) {
        err_set(err, errlen, "shard %d: its entry in dl:{%s}:shards is incomplete (was the run initialised?)", k,
                rc->run);
        return -1;
    }
    return v;
}

int run_state_versions(rconn *c, const runconf *rc, int64_t *min_version, int64_t *max_version, char *err,
                       size_t errlen)
{
    redisReply *r = shard_refs(c, rc, 1, err, errlen);
    if (!r) return -1;
    int64_t lo = INT64_MAX, hi = -1;
    for (int k = 0; k < rc->nshards; k++) {
        long long v = ref_version(rc, r->element + k, 1, k, err, errlen);
        if (v < 0) {
            freeReplyObject(r);
            return -1;
        }
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    freeReplyObject(r);
    *min_version = lo;
    *max_version = hi;
    return 0;
}

/* Whether the shard versions v are what `versions` (RUN_STATE_*) takes; why says what is not. */
static int versions_taken(const runconf *rc, int versions, const int64_t *v, int64_t lo, int64_t hi, char *why,
                          size_t whylen)
{
    if (versions == RUN_STATE_ANY || versions == RUN_STATE_FRAGMENTS_LOWEST || lo == hi) return 1;
    if (versions == RUN_STATE_ONE_VERSION) {
        err_set(why, whylen, "the shards are at versions %" PRId64 " to %" PRId64, lo, hi);
        return 0;
    }
    for (int k = 1; k < rc->nshards; k++)
        if (runconf_fragment_of_shard(rc, k) == runconf_fragment_of_shard(rc, k - 1) && v[k] != v[k - 1]) {
            err_set(why, whylen, "shards %d and %d of fragment %d are at versions %" PRId64 " and %" PRId64, k - 1, k,
                    runconf_fragment_of_shard(rc, k), v[k - 1], v[k]);
            return 0;
        }
    return 1;
}

static const char *ref_str(const redisReply *e)
{
    return e->type == REDIS_REPLY_STRING ? e->str : "";
}

/* The lowest version of shard k's fragment among versions v. */
static int64_t fragment_lowest(const runconf *rc, const int64_t *v, int k)
{
    int f = runconf_fragment_of_shard(rc, k);
    int64_t lo = v[k];
    for (int j = 0; j < rc->nshards; j++)
        if (runconf_fragment_of_shard(rc, j) == f && v[j] < lo) lo = v[j];
    return lo;
}

/* The version at which shard k (at version v, refs e) is taken under `versions`, and the digest it must give
 * there (17 bytes). Below v only for RUN_STATE_FRAGMENTS_LOWEST, and only where the durable state still
 * reaches back (a snapshot at or before it) and the commit recorded its digest; else v, with a warning. */
static int64_t shard_target(const runconf *rc, int versions, const int64_t *v, int k, redisReply **e, char *digest)
{
    snprintf(digest, 17, "%s", ref_str(e[REF_DIGEST])); /* (replay_recorded_digest overwrites it) */
    if (versions != RUN_STATE_FRAGMENTS_LOWEST) return v[k];
    int64_t want = fragment_lowest(rc, v, k), snapv;
    if (want == v[k]) return v[k];
    int f = runconf_fragment_of_shard(rc, k);
    int reaches = replay_ref_version(ref_str(e[REF_SNAP]), &snapv) == 0 && snapv <= want;
    if (reaches && replay_recorded_digest(ref_str(e[REF_DIGESTS]), want, digest)) {
        log_info("shard %d of fragment %d: taken at version %" PRId64 ", the fragment's lowest, not at its %" PRId64
                 " (the run stopped between the commits of that round's shards)",
                 k, f, want, v[k]);
        return want;
    }
    char why[96];
    if (!reaches)
        snprintf(why, sizeof why, "its snapshot %s is newer", ref_str(e[REF_SNAP]));
    else
        snprintf(why, sizeof why, "no digest of version %" PRId64 " is recorded to check it against", want);
    log_warn("shard %d of fragment %d: taken at its version %" PRId64 ", not at the fragment's lowest %" PRId64
             " (%s): the state read mixes the two versions",
             k, f, v[k], want, why);
    return v[k];
}

/* Rebuild shard k (refs e) into st's buffers at version `want` from its snapshot and the log entries up to
 * it, which must give `digest`: 0, REPLAY_GONE (a blob was trimmed meanwhile) or -1. */
static int load_shard(rconn *c, const runconf *rc, int k, redisReply **e, int64_t want, const char *digest,
                      run_state *st, char *err, size_t errlen)
{
    uint64_t off = rc->shard_bounds[k];
    char *log = replay_log_upto(ref_str(e[REF_LOG]), want);
    if (!log) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    /* the same replay as a shard-server's load, with the DN buffer and the run's DN schedule */
    replay_state rs = {.theta = st->params + off,
                       .mom = st->mom + off,
                       .dnbuf = st->dnbuf ? st->dnbuf + off : NULL,
                       .dn_buffer = (uint32_t)rc->dn_buffer,
                       .dn_variant = rc->dn_variant,
                       .dn_t0 = runconf_dn_t0(rc, k)};
    int lrc = replay_load_refs_state(c, rc->run, k, (size_t)runconf_shard_numel(rc, k), want, ref_str(e[REF_SNAP]), log,
                                     digest, &rs, err, errlen);
    free(log);
    st->has_mom |= lrc == 0 && rs.has_mom;
    return lrc;
}

int run_state_read_once(rconn *c, const runconf *rc, int versions, run_state *st, char *why, size_t whylen, char *err,
                        size_t errlen)
{
    int nf = versions == RUN_STATE_FRAGMENTS_LOWEST ? 5 : 4;
    redisReply *r = shard_refs(c, rc, nf, err, errlen);
    if (!r) return -1;
    int ret = -1;
    int64_t lo = INT64_MAX, hi = -1, *want = NULL;
    for (int k = 0; k < rc->nshards; k++) {
        long long v = ref_version(rc, r->element + nf * k, nf, k, err, errlen);
        if (v < 0) goto done;
        st->versions[k] = v;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    if (!versions_taken(rc, versions, st->versions, lo, hi, why, whylen)) {
        ret = 1;
        goto done;
    }
    if (!(want = malloc((size_t)rc->nshards * sizeof *want))) {
        err_set(err, errlen, "out of memory");
        goto done;
    }
    for (int k = 0; k < rc->nshards; k++)
        want[k] = shard_target(rc, versions, st->versions, k, r->element + nf * k, st->digests[k]);
    st->has_mom = 0;
    for (int k = 0; k < rc->nshards; k++) {
        int lrc = load_shard(c, rc, k, r->element + nf * k, want[k], st->digests[k], st, err, errlen);
        if (lrc == REPLAY_GONE) {
            err_set(why, whylen, "%s", err);
            ret = 1;
        }
        if (lrc < 0) goto done;
    }
    st->rolled_back = 0;
    st->version = INT64_MAX;
    for (int k = 0; k < rc->nshards; k++) {
        st->rolled_back += want[k] < st->versions[k];
        st->versions[k] = want[k];
        if (want[k] < st->version) st->version = want[k];
    }
    st->max_version = hi;
    ret = 0;
done:
    free(want);
    freeReplyObject(r);
    return ret;
}

int run_state_read(rconn *c, const runconf *conf, int versions, int timeout_ms, run_state *st, char *err, size_t errlen)
{
    uint64_t deadline = now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    char why[512] = "";
    for (unsigned attempt = 0;; attempt++) {
        int rc = run_state_read_once(c, conf, versions, st, why, sizeof why, err, errlen);
        if (rc <= 0) return rc;
        if (now_ms() >= deadline) {
            err_set(err, errlen,
                    "no consistent version of run '%s' after %d ms (%s): a round is being committed "
                    "or a fragment lags behind; try again or give a longer --timeout",
                    conf->run, timeout_ms, why);
            return -1;
        }
        if (attempt == 0) log_info("waiting for one consistent version of run '%s' (%s)", conf->run, why);
        sleep_ms(attempt < 10 ? 50 : 200);
    }
}
