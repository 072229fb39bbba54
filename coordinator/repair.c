/* repair.c: `coordinator repair`, which brings a run whose durable state is corrupt back into service.
 *
 * A shard-server that cannot load a shard (a snapshot or log entry fails its checksum, is missing or
 * malformed, or the replay does not give k:digest) marks it corrupt in dl:{R}:shards and answers
 * `err CORRUPT`; workers wait, and no round closes. repair:
 *   1. verifies every shard the way a load does (common/format/replay.c: each blob's checksum, the replay in
 *      order, k:digest at the end) and finds each shard's newest version that verifies; a shard cannot
 *      go back past its snapshot (the log entries before it are trimmed);
 *   2. picks what to restore: every shard's parameters and outer momentum at the newest version t that
 *      all shards reach (one common version: the model stays consistent), or, with --from-checkpoint
 *      FILE, the checkpoint's;
 *   3. writes them as snapshot blobs of a NEW version V, above every shard's version and every open
 *      round, and installs them with one dl_repair call (it re-checks that nothing moved since step 1,
 *      revokes every lease, moves every fragment's open round to V with a fresh barrier, clears the
 *      marks, records a 'repair' event);
 *   4. deletes the blobs nothing names any more (everything of the old state, and the blobs crashed
 *      shard-servers left unnamed), and waits for the shard-servers to take the shards again.
 * Versions never go backwards: every worker and server holds an older version than V, so the checks
 * that already exist move them to it (a push or arrival for an old round is STALE and the worker
 * fetches the current version; a worker waiting on CORRUPT fetches again once the marks are gone; a
 * server whose lease was revoked drops its cache). A healthy run is left alone: when every shard
 * verifies, repair only clears marks that are no longer true (dl_unmark_corrupt), says so, and waits as
 * after a repair for those shards to be leased again.
 * Async runs are refused: their submissions in flight are numbered by version. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/opts.h"
#include "base/util.h"
#include "base/version.h"
#include "checkpoint.h"
#include "coordinator.h"
#include "format/keys.h"
#include "format/replay.h"
#include "format/runconf.h"
#include "math/outer.h"
#include "redis/fcall.h"
#include "redis/rconn.h"
#include "redis/replay_load.h"
#include "redis/runconf_load.h"
#include "snapshot.h"

#define WAIT_DEFAULT_S 30
#define VERIFY_ATTEMPTS 5
#define REPAIR_EPOCH 0 /* repair's snapshots: servers write under lease epochs >= 1, init only version 0 */

typedef struct shard_state {
    /* as dl:{R}:shards has it */
    int64_t version;
    char snap[64]; /* "v.e" */
    char *log;     /* "v.e,v.e,..." */
    char digest[17];
    char *digests;  /* k:digests: "v:digest,..." as each commit recorded it ("" for a run made before it) */
    char mark[256]; /* k:corrupt ("" when not marked) */
    char mark_reason[512];
    /* what verification found */
    int64_t snapv;     /* the snapshot's version */
    int64_t newest;    /* newest version that verifies: its blobs check and its replay gives the digest its
                          commit recorded (-1: none) */
    char problem[600]; /* why `version` does not verify ("" when it does) */
    /* what is installed */
    char new_snap[64];
    char new_digest[17];
    int written; /* its new snapshot blob exists (delete it if the install fails) */
} shard_state;

typedef struct repair {
    const char *run;
    runconf rc;
    shard_state *sh;
    int64_t max_version, max_round;
    int64_t target;     /* rollback: the version whose parameters every shard gets */
    int64_t version;    /* V: the version the restored state is installed as */
    int bad, marked;    /* shards that do not verify; shards marked corrupt */
    float *theta, *mom; /* one shard's worth */
    float *dnbuf;       /* one shard's Delayed Nesterov buffer (async runs with one, so that their
                           shards verify: repair then refuses the run, but says the truth first) */
} repair;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bin/coordinator repair --redis URL --run NAME [--from-checkpoint FILE] [--dry-run] [--wait S]\n"
            "\n"
            "Brings back a run whose durable state in Redis is corrupt (a shard-server found a snapshot or log\n"
            "entry failing its checksum, missing, in the wrong place, or not replaying to the recorded digest:\n"
            "`coordinator status` shows the shard CORRUPT, dl:{R}:events has a 'corrupt' event, workers wait).\n"
            "\n"
            "It verifies every shard as a shard-server's load does, then:\n"
            "  - by default rolls every shard back to the parameters (and outer momentum) of the newest version\n"
            "    that all shards still verify at: its replay gives the digest recorded when it was committed\n"
            "    (one common version, so the model stays consistent; a shard cannot go back past its latest\n"
            "    snapshot);\n"
            "  - with --from-checkpoint FILE restores a `coordinator checkpoint save` file of this run's layout.\n"
            "The restored state becomes a new version above every version and round of the run (versions never\n"
            "go backwards): workers drop the rounds in flight and continue from it, shard-servers reload. The\n"
            "rounds since the restored version are lost. What was done goes to dl:{R}:events ('repair').\n"
            "A run whose shards all verify is left as it is (a stale corrupt mark is cleared).\n"
            "\n" COORD_HELP
            "  --from-checkpoint FILE    restore FILE instead of rolling back (needed when a snapshot is corrupt:\n"
            "                            older state has been trimmed; `coordinator serve --save-every N` keeps some)\n"
            "  --dry-run                 verify and print the plan; change nothing (the viewer user of\n"
            "                            deploy/redis/users.acl suffices; a repair needs operator)\n"
            "  --wait S                  after the repair (or after clearing stale marks), wait up to S seconds\n"
            "                            for the shard-servers to take every shard again (default %d; 0: do not\n"
            "                            wait)\n"
            "\n"
            "Sync runs only (Streaming included: every fragment goes to the new version); an async run is\n"
            "verified, but to bring a corrupt one back start a new run from a checkpoint (`coordinator init\n"
            "--from-checkpoint`).\n"
            "Exit status: 0 repaired or nothing to repair, 1 repair impossible or failed, 2 usage.\n",
            WAIT_DEFAULT_S);
}

static void repair_free(repair *rp)
{
    for (int k = 0; rp->sh && k < rp->rc.nshards; k++) {
        free(rp->sh[k].log);
        free(rp->sh[k].digests);
    }
    free(rp->sh);
    free(rp->theta);
    free(rp->mom);
    free(rp->dnbuf);
    runconf_free(&rp->rc);
}

/* ---- reading the run ------------------------------------------------------------------------------ */

static const char *reply_str(redisReply *e)
{
    return e->type == REDIS_REPLY_STRING ? e->str : "";
}

/* One field "k:name" of dl:{R}:shards into shard k's state; 1 if it is one of ours. */
static int take_field(repair *rp, const char *field, const char *value)
{
    char *end;
    long k = strtol(field, &end, 10);
    if (end == field || *end != ':' || k < 0 || k >= rp->rc.nshards) return 0;
    shard_state *s = &rp->sh[k];
    const char *name = end + 1;
    if (!strcmp(name, "version"))
        s->version = strtoll(value, NULL, 10);
    else if (!strcmp(name, "snap"))
        snprintf(s->snap, sizeof s->snap, "%s", value);
    else if (!strcmp(name, "digest"))
        snprintf(s->digest, sizeof s->digest, "%s", value);
    else if (!strcmp(name, "corrupt"))
        snprintf(s->mark, sizeof s->mark, "%s", value);
    else if (!strcmp(name, "corrupt_reason"))
        snprintf(s->mark_reason, sizeof s->mark_reason, "%s", value);
    else if (!strcmp(name, "log")) {
        free(s->log);
        s->log = strdup(value);
    } else if (!strcmp(name, "digests")) {
        free(s->digests);
        s->digests = strdup(value);
    } else
        return 0;
    return 1;
}

/* The whole of dl:{R}:shards in one HGETALL (one instant), and the highest open round. */
static int read_shards(rconn *c, repair *rp, char *err, size_t errlen)
{
    char key[KEY_MAX];
    for (int k = 0; k < rp->rc.nshards; k++) {
        shard_state *s = &rp->sh[k];
        free(s->log);
        free(s->digests);
        memset(s, 0, sizeof *s);
        s->version = -1;
    }
    redisReply *r = rconn_command(c, "HGETALL %s", key_run(key, sizeof key, rp->run, "shards"));
    if (rconn_reply_error(c, r, err, errlen) < 0 || r->type != REDIS_REPLY_ARRAY) {
        if (r && r->type != REDIS_REPLY_ERROR) err_set(err, errlen, "unexpected reply to HGETALL %s", key);
        if (r) freeReplyObject(r);
        return -1;
    }
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        take_field(rp, reply_str(r->element[i]), reply_str(r->element[i + 1]));
    freeReplyObject(r);
    rp->max_version = 0;
    for (int k = 0; k < rp->rc.nshards; k++) {
        shard_state *s = &rp->sh[k];
        if (s->version < 0 || !s->snap[0] || !s->digest[0]) {
            err_set(err, errlen, "shard %d: its entry in %s is incomplete (was the run initialised?)", k, key);
            return -1;
        }
        if ((!s->log && !(s->log = strdup(""))) || (!s->digests && !(s->digests = strdup("")))) {
            err_set(err, errlen, "out of memory");
            return -1;
        }
        if (replay_ref_version(s->snap, &s->snapv) < 0) s->snapv = -1; /* verification reports it */
        if (s->version > rp->max_version) rp->max_version = s->version;
    }
    r = rconn_command(c, "HGETALL %s", key_run(key, sizeof key, rp->run, "state"));
    if (rconn_reply_error(c, r, err, errlen) < 0 || r->type != REDIS_REPLY_ARRAY) {
        if (r) freeReplyObject(r);
        return -1;
    }
    rp->max_round = 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (!strncmp(reply_str(r->element[i]), "round:", 6)) {
            long long x = strtoll(reply_str(r->element[i + 1]), NULL, 10);
            if (x > rp->max_round) rp->max_round = x;
        }
    freeReplyObject(r);
    return 0;
}

/* ---- verification --------------------------------------------------------------------------------- */

/* Replay shard k from its snapshot through the log entries up to version `upto` (INT64_MAX: all) into
 * rp->theta/mom. 0 ok, REPLAY_GONE a blob vanished, -1 it does not verify (err) or Redis failed. */
static int replay_upto(rconn *c, repair *rp, int k, int64_t upto, replay_state *st, char *err, size_t errlen)
{
    /* st first: the callers read its version and verified after a failure too */
    *st = (replay_state){.theta = rp->theta,
                         .mom = rp->mom,
                         .dnbuf = rp->dnbuf,
                         .dn_buffer = (uint32_t)rp->rc.dn_buffer,
                         .dn_variant = rp->rc.dn_variant,
                         .dn_t0 = runconf_dn_t0(&rp->rc, k),
                         .digests = rp->sh[k].digests,
                         .verified = -1};
    char *logs = replay_log_upto(rp->sh[k].log, upto);
    if (!logs) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    int rc = replay_refs_state(c, rp->run, k, (size_t)runconf_shard_numel(&rp->rc, k), rp->sh[k].snap, logs, st, err,
                               errlen);
    free(logs);
    return rc;
}

/* Shard k verifies at its version, or how far it does: the newest version whose blobs all check (each
 * is the blob its key names, with its checksum) and whose replay gives the digest its commit recorded
 * (k:digests; k:digest for the current version). A version with no recorded digest is not trusted: a
 * replay that runs without an error can still hold a valid blob in the wrong place or a forged one. 0
 * done, 1 a blob vanished (a live server trimmed it: read the refs again), -1 Redis failed. */
static int verify_shard(rconn *c, repair *rp, int k, char *err, size_t errlen)
{
    shard_state *s = &rp->sh[k];
    replay_state st;
    char why[600];
    int rc = replay_upto(c, rp, k, INT64_MAX, &st, why, sizeof why);
    if (rconn_broken(c)) {
        err_set(err, errlen, "redis: %s", rconn_errstr(c));
        return -1;
    }
    if (rc == REPLAY_GONE) {
        snprintf(s->problem, sizeof s->problem, "%s", why);
        s->newest = st.verified;
        return 1;
    }
    s->problem[0] = '\0';
    s->newest = s->version;
    if (rc < 0) {
        snprintf(s->problem, sizeof s->problem, "%s", why);
    } else if (st.version != s->version) {
        snprintf(s->problem, sizeof s->problem,
                 "its snapshot and log entries reach version %" PRId64 ", "
                 "dl:{R}:shards says %" PRId64,
                 st.version, s->version);
    } else {
        char got[17];
        snprintf(got, sizeof got, "%016" PRIx64, digest_f32(rp->theta, (size_t)runconf_shard_numel(&rp->rc, k)));
        if (strcmp(got, s->digest))
            snprintf(s->problem, sizeof s->problem,
                     "digest mismatch at version %" PRId64 ": the replay gives %s, "
                     "dl:{R}:shards says %s",
                     s->version, got, s->digest);
    }
    if (s->problem[0]) s->newest = st.verified < s->version ? st.verified : -1;
    if (s->newest < s->snapv) s->newest = -1;
    return 0;
}

/* Verify every shard against one reading of the refs; a blob trimmed under us means the run moved on:
 * read again (a blob missing from refs that stay put is reported as it is). */
static int verify_all(rconn *c, repair *rp, char *err, size_t errlen)
{
    for (int attempt = 1;; attempt++) {
        if (read_shards(c, rp, err, errlen) < 0) return -1;
        int moved = 0;
        rp->bad = rp->marked = 0;
        for (int k = 0; k < rp->rc.nshards; k++) {
            int rc = verify_shard(c, rp, k, err, errlen);
            if (rc < 0) return -1;
            moved |= rc;
            rp->bad += rp->sh[k].newest != rp->sh[k].version;
            rp->marked += rp->sh[k].mark[0] != '\0';
        }
        if (!moved || attempt == VERIFY_ATTEMPTS) return 0;
        sleep_ms(200);
    }
}

static void print_verification(const repair *rp)
{
    for (int k = 0; k < rp->rc.nshards; k++) {
        const shard_state *s = &rp->sh[k];
        if (s->problem[0] == '\0') {
            printf("shard %d: verifies at version %" PRId64 "%s%s%s\n", k, s->version,
                   s->mark[0] ? " (marked corrupt: " : "", s->mark, s->mark[0] ? ")" : "");
        } else if (s->newest >= 0) {
            printf("shard %d: CORRUPT at version %" PRId64 ": %s; verifies up to version %" PRId64 "\n", k, s->version,
                   s->problem, s->newest);
        } else {
            printf("shard %d: CORRUPT at version %" PRId64 ": %s; no version verifies against a digest its commit "
                   "recorded (its snapshot %s is the oldest state kept%s)\n",
                   k, s->version, s->problem, s->snap,
                   s->digests[0] ? "" : "; dl:{R}:shards keeps no digests for it: a run made before they were kept");
        }
    }
}

/* ---- the plan ------------------------------------------------------------------------------------- */

/* Rollback: the newest version every shard verifies at and can still represent (>= its snapshot). */
static int choose_target(repair *rp, char *err, size_t errlen)
{
    int S = rp->rc.nshards, low = 0, old = 0;
    rp->target = INT64_MAX;
    for (int k = 0; k < S; k++)
        if (rp->sh[k].newest < rp->target) {
            rp->target = rp->sh[k].newest;
            low = k;
        }
    for (int k = 0; k < S; k++)
        if (rp->sh[k].snapv > rp->sh[old].snapv) old = k;
    if (rp->target < 0) {
        err_set(err, errlen,
                "shard %d has no version that verifies against a digest recorded when it was committed (its snapshot "
                "is the oldest state Redis keeps); restore a checkpoint: coordinator repair --from-checkpoint FILE",
                low);
        return -1;
    }
    if (rp->target < rp->sh[old].snapv) {
        err_set(err, errlen,
                "shard %d verifies only up to version %" PRId64 ", but shard %d keeps nothing older than its "
                "snapshot of version %" PRId64 " (older log entries are trimmed), so no common version can be rebuilt; "
                "restore a checkpoint: coordinator repair --from-checkpoint FILE",
                low, rp->target, old, rp->sh[old].snapv);
        return -1;
    }
    return 0;
}

/* The checkpoint must hold this run's model cut the same way. */
static int check_checkpoint(const repair *rp, const checkpoint *ck, const char *path, char *err, size_t errlen)
{
    const runconf *rc = &rp->rc;
    int same = ck->numel == rc->numel && ck->nshards == rc->nshards && !strcmp(ck->trainer, rc->trainer) &&
               !strcmp(ck->model, rc->model) && ck->shard_bounds != NULL && rc->shard_bounds != NULL;
    for (int k = 0; same && k <= rc->nshards; k++) same = ck->shard_bounds[k] == rc->shard_bounds[k];
    if (!same) {
        err_set(err, errlen,
                "%s holds a %s model (%s, %" PRIu64 " parameters in %d shards) that is not cut like run "
                "'%s' (%s, %s, %" PRIu64 " parameters in %d shards); start a new run from it with coordinator init "
                "--from-checkpoint",
                path, ck->trainer, ck->model, ck->numel, ck->nshards, rp->run, rc->trainer, rc->model, rc->numel,
                rc->nshards);
        return -1;
    }
    if (ck->dn_buffer > 0) {
        err_set(err, errlen, "%s comes from an async run with Delayed Nesterov; this run is sync", path);
        return -1;
    }
    return 0;
}

/* ---- writing and installing ----------------------------------------------------------------------- */

static void delete_ref(rconn *c, const char *run, int k, const char *kind, const char *ref)
{
    char key[KEY_MAX];
    if (key_shard_ref(key, sizeof key, run, k, kind, ref) != 0) return;
    redisReply *r = rconn_command(c, "DEL %s", key);
    if (r) freeReplyObject(r);
}

static void delete_new(rconn *c, repair *rp)
{
    for (int k = 0; k < rp->rc.nshards; k++)
        if (rp->sh[k].written) delete_ref(c, rp->run, k, "snap", rp->sh[k].new_snap);
}

/* Shard k's restored parameters and momentum as the snapshot of version V (SET NX: nothing existing is
 * overwritten, and a concurrent repair loses cleanly). */
static int write_shard(rconn *c, repair *rp, int k, const float *theta, const float *mom, char *err, size_t errlen)
{
    shard_state *s = &rp->sh[k];
    snprintf(s->new_snap, sizeof s->new_snap, "%" PRId64 ".%d", rp->version, REPAIR_EPOCH);
    if (coord_write_snapshot(c, rp->run, k, rp->version, REPAIR_EPOCH, theta, mom, NULL,
                             runconf_shard_numel(&rp->rc, k), 1, s->new_digest, err, errlen) < 0)
        return -1;
    s->written = 1;
    return 0;
}

/* Rollback: every shard replayed to the target version, each blob verified again on the way, and the
 * result checked against the digest recorded when the target version was committed. */
static int write_rollback(rconn *c, repair *rp, char *err, size_t errlen)
{
    for (int k = 0; k < rp->rc.nshards; k++) {
        replay_state st;
        char why[600] = "";
        if (replay_upto(c, rp, k, rp->target, &st, why, sizeof why) != 0 || st.version != rp->target) {
            err_set(err, errlen, "shard %d: replaying it to version %" PRId64 " failed: %s", k, rp->target,
                    st.version != rp->target && why[0] == '\0' ? "the log does not reach it" : why);
            return -1;
        }
        if (st.verified != rp->target) {
            err_set(err, errlen,
                    "shard %d: no digest was recorded when version %" PRId64 " was committed, so its parameters "
                    "cannot be verified; restore a checkpoint: coordinator repair --from-checkpoint FILE",
                    k, rp->target);
            return -1;
        }
        if (write_shard(c, rp, k, rp->theta, st.has_mom ? rp->mom : NULL, err, errlen) < 0) return -1;
    }
    return 0;
}

static int write_checkpoint(rconn *c, repair *rp, const checkpoint *ck, char *err, size_t errlen)
{
    for (int k = 0; k < rp->rc.nshards; k++) {
        uint64_t off = rp->rc.shard_bounds[k];
        if (write_shard(c, rp, k, ck->params + off, ck->has_mom ? ck->mom + off : NULL, err, errlen) < 0) return -1;
    }
    return 0;
}

/* dl_repair: what every shard was (checked again inside, atomically) and what it becomes. */
static int install(rconn *c, repair *rp, const char *how, const char *source, char *err, size_t errlen)
{
    int S = rp->rc.nshards, argc = 4 + 5 * S;
    const char **argv = calloc((size_t)argc, sizeof *argv);
    char(*nums)[24] = calloc((size_t)S + 2, sizeof *nums);
    char key[KEY_MAX];
    int ret = -1;
    if (!argv || !nums) {
        err_set(err, errlen, "out of memory");
        goto done;
    }
    snprintf(nums[S], sizeof nums[S], "%" PRId64, rp->version);
    snprintf(nums[S + 1], sizeof nums[S + 1], "%d", S);
    int a = 0;
    argv[a++] = how;
    argv[a++] = source;
    argv[a++] = nums[S];
    argv[a++] = nums[S + 1];
    for (int k = 0; k < S; k++) {
        snprintf(nums[k], sizeof nums[k], "%" PRId64, rp->sh[k].version);
        argv[a++] = nums[k];
        argv[a++] = rp->sh[k].snap;
        argv[a++] = rp->sh[k].log;
        argv[a++] = rp->sh[k].new_snap;
        argv[a++] = rp->sh[k].new_digest;
    }
    redisReply *r = fcall_run(c, key_run(key, sizeof key, rp->run, "config"), "dl_repair", a, argv);
    if (rconn_reply_error(c, r, err, errlen) == 0) ret = 0;
    if (r) freeReplyObject(r);
done:
    free(argv);
    free(nums);
    return ret;
}

/* Everything of the old state: no key of dl:{R}:shards names it any more. */
static void delete_old(rconn *c, repair *rp)
{
    for (int k = 0; k < rp->rc.nshards; k++) {
        delete_ref(c, rp->run, k, "snap", rp->sh[k].snap);
        char *copy = strdup(rp->sh[k].log), *save = NULL;
        for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save))
            delete_ref(c, rp->run, k, "log", tok);
        free(copy);
    }
}

/* Blobs no record ever named or names any more: a shard-server killed between writing a blob and
 * recording it, or between recording a snapshot and deleting what it made obsolete, leaves one behind,
 * and nobody else would delete it. Every shard's record starts at V now and every later commit writes
 * a version above V, so a blob of the run below V, or of V but not repair's snapshot, is garbage. */
typedef struct orphan_scan {
    const repair *rp;
    long deleted;
} orphan_scan;

static int delete_if_orphan(redisContext *node, const char *key, void *arg)
{
    orphan_scan *os = arg;
    key_blob_name b;
    if (key_parse_blob(key, &b) < 0 || strcmp(b.run, os->rp->run) != 0 || b.shard >= os->rp->rc.nshards) return 0;
    int ours = b.version == os->rp->version && b.epoch == REPAIR_EPOCH && strcmp(b.kind, "snap") == 0;
    if (b.version > os->rp->version || ours) return 0;
    redisReply *r = redisCommand(node, "DEL %s", key);
    if (r) {
        os->deleted += r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
        freeReplyObject(r);
    }
    return 0;
}

static int orphans_on_node(redisContext *node, const char *addr, void *arg, char *err, size_t errlen)
{
    char pattern[160];
    snprintf(pattern, sizeof pattern, "dl:{%s:*", ((orphan_scan *)arg)->rp->run);
    return rconn_scan_node(node, addr, pattern, delete_if_orphan, arg, err, errlen);
}

static void delete_orphans(rconn *c, const repair *rp)
{
    orphan_scan os = {rp, 0};
    char err[512];
    if (rconn_each_master(c, orphans_on_node, &os, err, sizeof err) < 0)
        printf("could not look for blobs left by crashed shard-servers (%s): they stay, harmless\n", err);
    else if (os.deleted > 0)
        printf("deleted %ld blob(s) left behind by crashed shard-servers (named by no record)\n", os.deleted);
}

/* Shards without an owner after waiting up to `seconds` for the servers to take them back. */
static int wait_leased(rconn *c, repair *rp, int seconds)
{
    char key[KEY_MAX];
    key_run(key, sizeof key, rp->run, "shards");
    uint64_t deadline = now_ms() + (uint64_t)seconds * 1000;
    for (;;) {
        int missing = 0;
        for (int k = 0; k < rp->rc.nshards; k++) {
            redisReply *r = rconn_command(c, "HGET %s %d:owner", key, k);
            missing += !r || r->type != REDIS_REPLY_STRING || r->len == 0;
            if (r) freeReplyObject(r);
        }
        if (missing == 0 || now_ms() >= deadline) return missing;
        sleep_ms(100);
    }
}

/* After leases were revoked: wait up to wait_s (0: not at all) for the shard-servers to take every shard
 * again and say how it went; `then` ends the good news. None up in time is not a failure. */
static void report_leased(rconn *c, repair *rp, int wait_s, const char *then)
{
    if (wait_s <= 0) return;
    int missing = wait_leased(c, rp, wait_s);
    if (missing)
        printf("%d shard(s) have no shard-server yet after %d s: are shard-servers running?\n", missing, wait_s);
    else
        printf("every shard is leased again; %s\n", then);
}

/* Shards marked corrupt that verify now: clear the marks, revoke their leases so they load again. */
static int unmark(rconn *c, repair *rp, char *err, size_t errlen)
{
    int S = rp->rc.nshards, a = 0;
    const char **argv = calloc(1 + 2 * (size_t)S, sizeof *argv);
    char(*nums)[16] = calloc((size_t)S, sizeof *nums);
    char key[KEY_MAX];
    int ret = -1;
    if (argv && nums) {
        for (int k = 0; k < S; k++)
            if (rp->sh[k].mark[0]) {
                snprintf(nums[k], sizeof nums[k], "%d", k);
                argv[a++] = nums[k];
                argv[a++] = rp->sh[k].mark;
            }
        redisReply *r = fcall_run(c, key_run(key, sizeof key, rp->run, "config"), "dl_unmark_corrupt", a, argv);
        if (rconn_reply_error(c, r, err, errlen) == 0) ret = 0;
        if (r) freeReplyObject(r);
    } else {
        err_set(err, errlen, "out of memory");
    }
    free(argv);
    free(nums);
    return ret;
}

/* ---- the command ---------------------------------------------------------------------------------- */

typedef struct repair_args {
    coord_common c;
    const char *checkpoint;
    int dry_run;
    long long wait_s;
} repair_args;

static int parse_args(int argc, char **argv, repair_args *a)
{
    memset(a, 0, sizeof *a);
    a->wait_s = WAIT_DEFAULT_S;
    const opt_spec specs[] = {
        COORD_COMMON_OPTS(&a->c),
        {.name = "dry-run", .kind = OPT_FLAG, .dest = &a->dry_run},
        {.name = "from-checkpoint", .kind = OPT_STRING, .dest = &a->checkpoint},
        {.name = "wait", .kind = OPT_LLONG, .dest = &a->wait_s, .lo = 0, .hi = 86400, .wants = "seconds in [0, 86400]"},
        {0},
    };
    return opts_parse_cmd("coordinator repair", usage, specs, argc, argv, 0, NULL, NULL);
}

/* This release's functions (dl_repair, dl_unmark_corrupt): loaded (FUNCTION LOAD REPLACE), except by a dry run
 * that finds them loaded already: a verification changes nothing, and its user (the shipped viewer) may not load
 * a library. A user that may not load one is told which may. */
static int ensure_library(rconn *c, const repair *rp, int dry_run, char *err, size_t errlen)
{
    if (dry_run && runconf_check_library(c, rp->run, err, errlen) == 0) return 0;
    if (coord_load_library(c, err, errlen) == 0) return 0;
    if (strstr(err, "NOPERM") == NULL) return -1;
    char why[1024];
    snprintf(why, sizeof why, "%.600s", err);
    err_set(err, errlen,
            "%s needs this release's function library (version %s) loaded, and this Redis user may not load it (%s): "
            "run it as a user that may FUNCTION LOAD (deploy/redis/users.acl: operator)%s",
            dry_run ? "repair --dry-run (Redis has another library or none)" : "repair", DL_LIB_VERSION, why,
            dry_run ? "" : "; to only verify, `coordinator repair --dry-run` needs no more than the viewer user");
    return -1;
}

static int open_run(rconn *c, repair *rp, int dry_run, char *err, size_t errlen)
{
    if (ensure_library(c, rp, dry_run, err, errlen) < 0) return -1;
    if (runconf_load(c, rp->run, &rp->rc, err, errlen) < 0) return -1;
    size_t largest = 0;
    for (int k = 0; k < rp->rc.nshards; k++)
        if (runconf_shard_numel(&rp->rc, k) > largest) largest = runconf_shard_numel(&rp->rc, k);
    rp->sh = calloc((size_t)rp->rc.nshards, sizeof *rp->sh);
    rp->theta = malloc(largest * sizeof(float) + 1);
    rp->mom = malloc(largest * sizeof(float) + 1);
    if (rp->rc.dn_buffer > 0) rp->dnbuf = malloc(largest * sizeof(float) + 1);
    if (!rp->sh || !rp->theta || !rp->mom || (rp->rc.dn_buffer > 0 && !rp->dnbuf)) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* Nothing is corrupt: say so, and clear marks that are no longer true. Clearing revokes those leases, so
 * --wait waits for the shards to be taken again as after a repair; with no mark nothing changed, and
 * there is nothing to wait for. */
static int settle_healthy(rconn *c, repair *rp, int dry_run, int wait_s)
{
    char err[1024];
    if (rp->marked == 0) {
        printf("nothing to repair: every shard of run '%s' verifies at its committed version (%" PRId64 ")\n", rp->run,
               rp->max_version);
        return 0;
    }
    if (dry_run) {
        printf("dry run: would clear %d corrupt mark(s) that no longer hold; nothing changed\n", rp->marked);
        return 0;
    }
    if (unmark(c, rp, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator repair: clearing the marks: %s\n", err);
        return 1;
    }
    printf("every shard verifies: cleared %d corrupt mark(s) and revoked those leases, so the shards load again\n",
           rp->marked);
    report_leased(c, rp, wait_s, "workers continue");
    return 0;
}

/* Write the restored state as version V, install it, clean up. */
static int restore(rconn *c, repair *rp, const checkpoint *ck, const char *source, int wait_s)
{
    char err[1024];
    const char *how = ck ? "checkpoint" : "rollback";
    int rc = ck ? write_checkpoint(c, rp, ck, err, sizeof err) : write_rollback(c, rp, err, sizeof err);
    if (rc == 0) rc = install(c, rp, how, source, err, sizeof err);
    if (rc < 0) {
        delete_new(c, rp);
        fprintf(stderr, "coordinator repair: %s (nothing changed)\n", err);
        return 1;
    }
    delete_old(c, rp);
    delete_orphans(c, rp);
    printf("repaired run '%s': every shard now holds the parameters of %s as version %" PRId64 " (the open round of "
           "every fragment); leases revoked; 'repair' event in dl:{%s}:events\n",
           rp->run, source, rp->version, rp->run);
    char then[64];
    snprintf(then, sizeof then, "workers continue from version %" PRId64, rp->version);
    report_leased(c, rp, wait_s, then);
    return 0;
}

/* --from-checkpoint FILE, read before anything is touched: a missing file is a usage error (exit 2), a
 * file that is not a valid checkpoint bad data (exit 1; docs/checkpoints.md). 0, or -1 with the status. */
static int load_checkpoint_arg(const repair_args *a, checkpoint *ck, int *status)
{
    char err[1024];
    memset(ck, 0, sizeof *ck);
    if (a->checkpoint && checkpoint_file_readable(a->checkpoint, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator repair: --from-checkpoint %s: %s\n", a->checkpoint, err);
        *status = OPTS_EXIT_USAGE;
        return -1;
    }
    if (a->checkpoint && checkpoint_read(a->checkpoint, 1, ck, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator repair: --from-checkpoint: %s\n", err);
        *status = 1;
        return -1;
    }
    return 0;
}

/* What to restore (the checkpoint, checked against the run, or the newest version every shard reaches)
 * and as which version V, printed as the plan. 0, or -1 + err (an async run is refused). */
static int make_plan(repair *rp, const repair_args *a, const checkpoint *ck, char *err, size_t errlen)
{
    if (rp->rc.async) {
        err_set(err, errlen,
                "run '%s' is async: its submissions in flight are numbered by version, so repair "
                "cannot move it; start a new run from a checkpoint: coordinator init --run NEW --from-checkpoint FILE",
                rp->run);
        return -1;
    }
    if (a->checkpoint ? check_checkpoint(rp, ck, a->checkpoint, err, errlen) < 0 : choose_target(rp, err, errlen) < 0)
        return -1;
    rp->version = (rp->max_version > rp->max_round ? rp->max_version : rp->max_round) + 1;
    if (a->checkpoint)
        printf("plan: restore %s (run '%s' at version %" PRId64 ") into every shard as version %" PRId64 "\n",
               a->checkpoint, ck->run, ck->version, rp->version);
    else
        printf("plan: roll every shard back to its parameters of version %" PRId64 ", installed as version %" PRId64
               "; the rounds after version %" PRId64 " are lost\n",
               rp->target, rp->version, rp->target);
    return 0;
}

/* Verify every shard, then leave a healthy run be (clearing stale marks) or plan and restore. The exit
 * status. */
static int repair_run(rconn *c, repair *rp, const repair_args *a, const checkpoint *ck)
{
    char err[1024], source[4200];
    if (open_run(c, rp, a->dry_run, err, sizeof err) < 0 || verify_all(c, rp, err, sizeof err) < 0) goto fail;
    print_verification(rp);
    if (rp->bad == 0 && !a->checkpoint) return settle_healthy(c, rp, a->dry_run, (int)a->wait_s);
    if (make_plan(rp, a, ck, err, sizeof err) < 0) goto fail;
    if (a->dry_run) {
        printf("dry run: nothing changed\n");
        return 0;
    }
    if (a->checkpoint)
        snprintf(source, sizeof source, "%s (version %" PRId64 ")", a->checkpoint, ck->version);
    else
        snprintf(source, sizeof source, "version %" PRId64, rp->target);
    return restore(c, rp, a->checkpoint ? ck : NULL, source, (int)a->wait_s);
fail:
    fprintf(stderr, "coordinator repair: %s\n", err);
    return 1;
}

int cmd_repair(int argc, char **argv)
{
    repair_args a;
    checkpoint ck;
    int status, prc = parse_args(argc, argv, &a);
    if (prc != 0) return opts_exit_status(prc);
    if (load_checkpoint_arg(&a, &ck, &status) < 0) return status;
    rconn *c;
    if ((status = coord_connect(&a.c, &c)) == 0) {
        repair rp = {.run = a.c.run};
        status = repair_run(c, &rp, &a, &ck);
        repair_free(&rp);
        rconn_free(c);
    }
    checkpoint_free(&ck);
    return status;
}
