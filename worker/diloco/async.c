/* async.c: one async DiLoCo submission from the worker's side (coordinator init --async).
 *
 * There is no barrier. For the shards of a fragment:
 *   1. dl_submit gives our submission its place s_k in each shard's order (atomic: all shards or
 *      none; refused with STALE when it would be older than --max-staleness);
 *   2. the pseudo-gradient of shard k goes to its owner as a push for round s_k;
 *   3. a get for version s_k+1 returns once the owner has applied every submission up to ours (it may
 *      return a later version: others kept submitting);
 * and the versions we got become our base (they may differ per shard: each shard moves on its own). Redis
 * is then asked whether the places are still ours: a failover can lose a dl_submit, and a lost submission is
 * placed again (deliver_placed).
 * As in sync mode, Δ is kept until every get returned, and resent to whoever says it lacks it. A
 * submission that got its places and then failed (DL_FAIL: training goes on) is completed before the
 * fragment's next Δ, never redone (async_complete): its Δ may have been applied already; one still pending
 * when the session closes is completed by the close (async_complete_closing).
 *
 * A process group's rank moves only its part of a fragment's shards (dl_first_shard). In a blocking round
 * its rank 0 places the group's submission for the whole fragment (async_place_shards) and every rank
 * delivers its part (async_deliver), group.c making the collectives around them; in Streaming every rank's
 * thread places the same submission, the ranks after the first getting the places it got, and delivers its
 * part (async_place_deliver), so the training threads never wait for Redis. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"
#include "redis/fcall.h"
#include "redis/rconn.h"

#define SUBMIT_HEAD 8 /* FCALL dl_submit 1 config worker incarnation fragment submission */
#define NUM_LEN 24    /* a number's text */

/* The i-th shard a submission names: ids[i], or without ids the run's shard first + i (a whole fragment's
 * shards are consecutive in the run's numbering; a sharded rank's own are listed). */
static int listed_shard(int first, const int *ids, int i)
{
    return ids ? ids[i] : first + i;
}

/* dl_submit of submission d->submission for the n shards first/ids (listed_shard: the run's numbers) of
 * fragment f from the base versions bases[]; seqs[] takes their places. Sent again (here or by
 * dl_command_argv after a reconnect) when no reply came: a try that ran answers the same places again
 * (lua/40_barriers.lua, repeated_submission). The ranks of a group call it at once from their threads
 * (async_place_deliver): the command's text is this call's own. */
static int submit(diloco *d, int f, int first, const int *ids, int n, const int64_t *bases, int64_t *seqs, char *err,
                  size_t errlen)
{
    int argc = 0;
    const char **argv = malloc((size_t)(SUBMIT_HEAD + 2 * n) * sizeof *argv);
    char *nums = malloc((size_t)(3 + 2 * n) * NUM_LEN); /* incarnation, fragment, submission, the pairs */
    if (!argv || !nums) {
        free(argv);
        free(nums);
        err_set(err, errlen, "out of memory");
        return DL_FAIL;
    }
    snprintf(nums, NUM_LEN, "%" PRId64, dl_inc(d));
    snprintf(nums + NUM_LEN, NUM_LEN, "%d", f);
    snprintf(nums + 2 * NUM_LEN, NUM_LEN, "%" PRId64, d->submission);
    argv[argc++] = "FCALL";
    argv[argc++] = "dl_submit";
    argv[argc++] = "1";
    argv[argc++] = d->config_key;
    argv[argc++] = d->worker_id;
    for (int i = 0; i < 3; i++) argv[argc++] = nums + i * NUM_LEN;
    for (int i = 0; i < n; i++) {
        char *id = nums + (size_t)(3 + 2 * i) * NUM_LEN, *base = id + NUM_LEN;
        snprintf(id, NUM_LEN, "%d", listed_shard(first, ids, i));
        snprintf(base, NUM_LEN, "%" PRId64, bases[i]);
        argv[argc++] = id;
        argv[argc++] = base;
    }
    redisReply *r = dl_command_argv(d, argc, argv, NULL, err, errlen);
    int rc = DL_OK;
    if (dl_reply_failed(r)) {
        rc = !r                                           ? DL_RETRY
             : strncmp(r->str, "STALE", 5) == 0           ? DL_STALE
             : strncmp(r->str, "UNKNOWN_WORKER", 14) == 0 ? DL_EVICTED
                                                          : DL_FAIL;
    } else if (r->type != REDIS_REPLY_ARRAY || (int)r->elements != n) {
        err_set(err, errlen, "unexpected reply to dl_submit");
        rc = DL_FAIL;
    } else {
        for (int i = 0; i < n; i++) seqs[i] = r->element[i]->integer;
    }
    if (r) freeReplyObject(r);
    free(argv);
    free(nums);
    return rc;
}

/* ---- places lost in a failover --------------------------------------------------------------------- */

/* deliver's outcome when Redis says our places were lost (never returned out of this file). */
#define PLACES_LOST 100
/* How long a get waits for earlier submissions before it asks whether our place is still ours: when every
 * worker's place was lost together, each get waits for a submission that nobody will make, and would
 * wait the whole sync timeout (120 s by default) before it asks. */
#define PLACE_ASK_MS 3000

enum { HELD_OURS, HELD_LOST, HELD_UNSURE, HELD_NOT_ASKED };

/* One FCALL dl_places for the places d->seq of shards [first, last) (this session's numbering): dl_places's
 * answer per shard in got[] (1 ours, 0 another's or nobody's, -1 unknown). 0, or -1 + err when Redis gave
 * no answer; an error reply (a library without dl_places: binaries of two releases) sets every got[] to -1. */
static int ask_places(diloco *d, int first, int last, int *got, char *err, size_t errlen)
{
    int n = last - first, nargs = 2 + 2 * n, rc = -1;
    const char **args = malloc((size_t)nargs * sizeof *args), **argv = malloc((size_t)(4 + nargs) * sizeof *argv);
    char *nums = malloc((size_t)(1 + 2 * n) * NUM_LEN); /* incarnation, the pairs */
    if (!args || !argv || !nums) {
        err_set(err, errlen, "out of memory");
        goto out;
    }
    snprintf(nums, NUM_LEN, "%" PRId64, dl_inc(d));
    args[0] = d->worker_id;
    args[1] = nums;
    for (int i = 0; i < n; i++) {
        char *id = nums + (size_t)(1 + 2 * i) * NUM_LEN, *seq = id + NUM_LEN;
        snprintf(id, NUM_LEN, "%d", dl_shard_id(d, first + i));
        snprintf(seq, NUM_LEN, "%" PRId64, d->seq[first + i]);
        args[2 + 2 * i] = id;
        args[3 + 2 * i] = seq;
    }
    int argc = fcall_argv(argv, 4 + nargs, "dl_places", d->config_key, nargs, args);
    redisReply *r = dl_command_argv(d, argc, argv, NULL, err, errlen);
    if (r && r->type == REDIS_REPLY_ARRAY && (int)r->elements == n) {
        for (int i = 0; i < n; i++) got[i] = (int)r->element[i]->integer;
        rc = 0;
    } else if (r) {
        log_warn("cannot ask Redis whether our places are still ours (%s): taken as ours",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply to dl_places");
        for (int i = 0; i < n; i++) got[i] = -1;
        rc = 0;
    }
    if (r) freeReplyObject(r);
out:
    free(args);
    free(argv);
    free(nums);
    return rc;
}

/* Whether the places d->seq of shards [first, last) are still ours in Redis: HELD_LOST when none is and
 * one at least is another submission's or nobody's (a failover loses a dl_submit whole, so its places go
 * together); HELD_OURS, or HELD_UNSURE when Redis no longer knows or the answers disagree. -1 + err when
 * Redis did not answer (asked again while it does not, as dl_submit is). */
static int places_held(diloco *d, int f, int first, int last, char *err, size_t errlen)
{
    int n = last - first, ours = 0, lost = 0, rc = -1, lost_shard = -1;
    if (n <= 0) return HELD_OURS; /* (a sharded rank with no shard of f: nothing to ask) */
    int *got = malloc((size_t)n * sizeof *got);
    if (!got) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    for (unsigned attempt = 0; rc < 0 && attempt < 5 && !dl_stopping(d); attempt++) {
        if (attempt) sleep_ms(backoff_ms(attempt - 1, 50, 1000));
        rc = ask_places(d, first, last, got, err, errlen);
    }
    for (int i = 0; rc == 0 && i < n; i++) {
        ours += got[i] == 1;
        if (got[i] == 0 && lost++ == 0) lost_shard = first + i;
    }
    free(got);
    if (rc < 0) return -1;
    if (lost && !ours) {
        err_set(err, errlen,
                "Redis no longer records our place %" PRId64 " in shard %d's order (a failover lost it: the shard "
                "applied another submission there, or will give the place anew)",
                d->seq[lost_shard], dl_shard_id(d, lost_shard));
        return HELD_LOST;
    }
    if (lost)
        log_error("fragment %d: Redis records %d of our places as ours and %d not: taken as ours (a dl_submit is "
                  "kept or lost whole)",
                  f, ours, lost);
    return ours == n ? HELD_OURS : HELD_UNSURE;
}

/* Push fragment f's Δ (this rank's part) to its places and get each shard once it is applied. Then ask Redis
 * whether the places were ours: a dl_submit that a replica acknowledged can still be lost in a failover
 * (docs/PROTOCOL.md, "Durable means replicated"), and then our get returned once the shard was past another
 * submission's Δ, or waits for a submission that never comes (a place lost and not given anew).
 * PLACES_LOST then. Asked once a get has waited PLACE_ASK_MS, after a get that gave up, and, with
 * min_replicas (a run that counts on surviving failovers; one more Redis round trip a submission, as the
 * WAIT before the push), after every get. */
static int deliver(diloco *d, int f, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f); /* (a group's rank: its part of f) */
    int rc = fanout_push_each(d, first, last, d->seq, err, errlen);
    /* a get told to wait PLACE_ASK_MS for earlier places asks whether ours is still ours, then waits on */
    fanout_get_arg ga = {.may_push = 1, .after = d->seq, .ask_ms = PLACE_ASK_MS};
    if (rc == DL_OK) rc = fanout_get(d, first, last, &ga, err, errlen);
    char why[256];
    int held = HELD_NOT_ASKED;
    if (rc == DL_RETRY && (held = places_held(d, f, first, last, why, sizeof why)) != HELD_LOST) {
        ga.ask_ms = 0;
        rc = fanout_get(d, first, last, &ga, err, errlen);
        held = HELD_NOT_ASKED;
    }
    if (held == HELD_NOT_ASKED && ((rc == DL_OK && d->rc.min_replicas > 0) || rc == DL_FAIL))
        held = places_held(d, f, first, last, why, sizeof why);
    if (held == HELD_LOST || (held < 0 && rc == DL_OK)) { /* (no answer: async_complete asks again) */
        err_set(err, errlen, "%s", why);
        return held == HELD_LOST ? PLACES_LOST : DL_FAIL;
    }
    if (rc != DL_OK) return rc;
    d->frag_incomplete[f] = 0;
    /* a group's rank got only its part: the ranks agree on f's version (group.c take_versions), which its
     * part's own lowest could exceed, and diloco_version would go down */
    if (d->grp) return DL_OK;
    int64_t lo = d->shard_version[first];
    for (int k = first + 1; k < last; k++)
        if (d->shard_version[k] < lo) lo = d->shard_version[k];
    dl_set_frag_version(d, f, lo);
    return DL_OK;
}

/* dl_submit of the session's current submission, retried while Redis does not answer. */
static int submit_answered(diloco *d, int f, int first, const int *ids, int n, const int64_t *bases, int64_t *seqs,
                           char *err, size_t errlen)
{
    int rc = DL_RETRY;
    for (unsigned attempt = 0; rc == DL_RETRY && attempt < 5; attempt++) {
        rc = submit(d, f, first, ids, n, bases, seqs, err, errlen);
        if (rc != DL_RETRY || dl_stopping(d)) break; /* (a stop: not sent again, as after the 5th) */
        sleep_ms(backoff_ms(attempt, 50, 1000));
    }
    return rc == DL_RETRY ? DL_FAIL : rc;
}

/* submit_answered; with min_replicas, only once our places are on that many replicas. Places lost in a
 * failover (the old master answered dl_submit, its replicas never had it) would be handed to others on the
 * new master; an owner stores our push for such a place unused (or, past it, acks it as applied already)
 * and our get returns once the shard is past it: our window lost (deliver asks Redis afterwards, for what
 * a WAIT cannot prevent: deliver_placed). If the
 * connection breaks during the WAIT (the failover itself), the same submission is placed again on the new
 * master: it answers the places it has (repeated_submission), or new ones if ours were lost. When it cannot
 * be made durable, the submission failed without places (DL_FAIL): the next Δ covers its window, and a place
 * that did survive is one nobody fills, which the owner's `need` shows (docs/async.md, "Async mode": places
 * given, but no reply came). */
#define PLACE_ATTEMPTS 3
static int place(diloco *d, int f, int first, const int *ids, int n, const int64_t *bases, int64_t *seqs, char *err,
                 size_t errlen)
{
    for (int attempt = 0; attempt < PLACE_ATTEMPTS; attempt++) {
        int rc = submit_answered(d, f, first, ids, n, bases, seqs, err, errlen);
        if (rc != DL_OK || dl_wait_replicas(d, err, errlen) == 0) return rc;
        if (dl_stopping(d)) return DL_FAIL;
        log_warn("fragment %d: submission %" PRId64 ": %s; placing it again", f, d->submission, err);
    }
    return DL_FAIL;
}

int async_place_shards(diloco *d, int f, int again, int first, const int *ids, int n, const int64_t *bases,
                       int64_t *seqs, char *err, size_t errlen)
{
    if (!again) d->submission++;
    return place(d, f, first, ids, n, bases, seqs, err, errlen);
}

/* A process group's Streaming submission p placed (each rank's thread makes the same call: dl_submit answers
 * the later ones with the places the first got), the places noted. */
static int place_plan(diloco *d, int f, const async_plan *p, char *err, size_t errlen)
{
    int64_t *seqs = malloc((size_t)p->n * sizeof *seqs);
    if (!seqs) {
        err_set(err, errlen, "out of memory");
        return DL_FAIL;
    }
    int rc = place(d, f, p->first, NULL, p->n, p->bases, seqs, err, errlen);
    /* the places of f's shards in this session's view: every shard of the fragment (the lookahead aims
     * them all), or a sharded rank's own */
    for (int k = d->rc.frag_bounds[f]; rc == DL_OK && k < d->rc.frag_bounds[f + 1]; k++)
        d->seq[k] = seqs[dl_shard_id(d, k) - p->first];
    /* and of every shard of the fragment, the other ranks' parts too: what this rank's close waits for */
    for (int i = 0; rc == DL_OK && d->grp_placed && i < p->n; i++) d->grp_placed[p->first + i] = seqs[i];
    free(seqs);
    return rc;
}

/* A worker alone's submission of fragment f placed, from the bases kept in sub_base. */
static int place_alone(diloco *d, int f, char *err, size_t errlen)
{
    int first = d->rc.frag_bounds[f], n = d->rc.frag_bounds[f + 1] - first;
    /* (the session's shard k is the run's dl_shard_id(d, k)) */
    const int *ids = d->shard_ids ? d->shard_ids + first : NULL;
    return place(d, f, first, ids, n, d->sub_base + first, d->seq + first, err, errlen);
}

/* deliver; when Redis says the places were lost in a failover, the same submission is placed again (its
 * number unchanged: the new master gives new places, or answers those it has if it has the submission
 * after all) and delivered there. The window's Δ is the same, and so are its bases: to the run, one
 * submission that got its places late. p: a group's Streaming submission (place_plan), NULL for a worker
 * alone (place_alone); a rank of a group's blocking round cannot place again (rank 0 placed for every rank):
 * DL_FAIL with *lost set, and group.c's async_settle has rank 0 place it again for the group. */
static int deliver_placed(diloco *d, int f, const async_plan *p, int *lost, char *err, size_t errlen)
{
    int rc = deliver(d, f, err, errlen);
    for (int attempt = 0; rc == PLACES_LOST && attempt < PLACE_ATTEMPTS && (p || !d->grp); attempt++) {
        log_warn("fragment %d: %s; placing submission %" PRId64 " again", f, err, d->submission);
        rc = p ? place_plan(d, f, p, err, errlen) : place_alone(d, f, err, errlen);
        if (rc == DL_OK) rc = deliver(d, f, err, errlen);
    }
    if (lost) *lost = rc == PLACES_LOST;
    return rc == PLACES_LOST ? DL_FAIL : rc; /* (still pending: async_complete delivers it again) */
}

int async_deliver(diloco *d, int f, int *lost, char *err, size_t errlen)
{
    return deliver_placed(d, f, NULL, lost, err, errlen);
}

int async_place_deliver(diloco *d, int f, const async_plan *p, int again, char *err, size_t errlen)
{
    if (!again) d->submission++;
    int rc = place_plan(d, f, p, err, errlen);
    if (rc != DL_OK) return rc;
    /* from here the submission has its places: completed or abandoned with the other ranks (group.c's
     * async_settle), never sent again as part of another one */
    d->frag_incomplete[f] = 1;
    return deliver_placed(d, f, p, NULL, err, errlen);
}

/* A worker alone's next submission for the shards of fragment f, from shard_version (kept in sub_base) into
 * seq. */
static int async_place(diloco *d, int f, char *err, size_t errlen)
{
    int first = d->rc.frag_bounds[f], n = d->rc.frag_bounds[f + 1] - first;
    memcpy(d->sub_base + first, d->shard_version + first, (size_t)n * sizeof *d->sub_base);
    d->submission++;
    return place_alone(d, f, err, errlen);
}

int async_submit_net(diloco *d, int f, char *err, size_t errlen)
{
    int first = d->rc.frag_bounds[f];
    int rc = async_place(d, f, err, errlen);
    if (rc != DL_OK) return rc;
    /* From here the submission has its places: if it fails now, it is completed later (async_complete),
     * never sent again as part of another one. */
    d->frag_incomplete[f] = 1;
    if ((rc = async_deliver(d, f, NULL, err, errlen)) != DL_OK) return rc;
    log_debug("fragment %d: submission applied at version %" PRId64 " (got up to %" PRId64 ")", f, d->seq[first] + 1,
              d->shard_version[first]);
    return DL_OK;
}

/* Fragment f's submission got its places but not its result: its push or get failed (DL_FAIL) and training
 * went on from the same parameters. Its Δ may well have been applied (an owner acknowledged the push and
 * applied it in turn; an acknowledgement or get lost on the way says nothing), so the next Δ must not cover
 * its window again: that would apply it twice. Instead it is completed, as it is: the kept Δ goes to its
 * places again (an owner that has it or applied it already says so, and a place belongs to one submission:
 * lua/40_barriers.lua, dl_submit) and each shard is fetched once it is applied. The steps trained since it
 * went out started from parameters that never were a version: they are dropped, and the fragment continues
 * from the versions got, as a sync round completed late does (sync.c). DL_STALE then (params changed);
 * DL_OK when nothing was pending. When we are no longer a member (evicted) or a place moved out of reach,
 * the fragment takes the current parameters instead (DL_STALE). DL_FAIL, DL_CORRUPT: as they say, the
 * submission is still pending. */
int async_complete(diloco *d, int f, char *err, size_t errlen)
{
    if (!d->frag_incomplete[f]) return DL_OK;
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f);
    int rc = async_deliver(d, f, NULL, err, errlen);
    if (rc == DL_STALE || rc == DL_EVICTED) {
        log_warn("fragment %d: the submission whose result did not come cannot be completed (%s); continuing from "
                 "the current global parameters",
                 f, err);
        if (fetch_current(d, f, err, errlen) < 0) return DL_FAIL;
    } else if (rc != DL_OK) {
        return rc;
    } else {
        log_warn("fragment %d: the submission whose result did not come is applied (version %" PRId64
                 " of shard %d); continuing from the parameters it got, the steps trained meanwhile are dropped",
                 f, d->seq[first] + 1, dl_shard_id(d, first));
        d->fail_streak = 0; /* the sync that failed succeeded after all: no longer failures in a row (round.c) */
    }
    if (params_take(d, first, last, err, errlen) < 0) return DL_FAIL;
    return DL_STALE;
}

/* At close, the same completion without adopting anything (the session ends): without it, the window of the
 * pending submission would be lost, its places left to become no-ops (an owner applies place s only with
 * its Δ and on a get of s+1, and nobody else asks for our places). Best effort, bounded like sync's confirm
 * at close: a normal close waits up to the sync timeout for the owners; after a stop, every wait for a
 * shard-server ends within 100 ms of silence (conn.c) and every Redis command within the closing timeout
 * (control.c), so a stop adds at most what answering servers take. */
int async_complete_closing(diloco *d, int f, char *err, size_t errlen)
{
    if (!d->frag_incomplete[f]) return DL_OK;
    int first = dl_first_shard(d, f);
    int rc = async_deliver(d, f, NULL, err, errlen);
    if (rc == DL_OK)
        log_info("fragment %d: the submission whose result did not come is applied (version %" PRId64
                 " of shard %d) before closing",
                 f, d->seq[first] + 1, dl_shard_id(d, first));
    return rc;
}
