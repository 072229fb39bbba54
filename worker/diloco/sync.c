/* sync.c: one DiLoCo round from the worker's side (docs/PROTOCOL.md, "A sync round").
 *
 *   1. pseudo-gradient Δ = base - params (the global parameters we started from minus ours), in the run's codec
 *      (delta.c; with device hooks the trainer's device computes it, device.c)
 *   2. push every shard's Δ to its owner (fanout.c: one thread per shard-server, so bandwidth adds up)
 *   3. arrive at the barrier and wait for its close (barrier.c); the gets of step 4 go out at the same
 *      time (fanout_get_start): each owner holds them until the close, which it hears itself
 *      (shard-server/subscribe.c), and answers at once; we read the answers only once the barrier says
 *      we are in the round (issue 28: no round trip of its own for the get after the close)
 *   4. get every shard at version round+1; resend Δ to whoever says it lacks it (a new owner)
 *   5. the new global parameters become both base and params
 *
 * Δ is kept until step 4 has every shard, so a shard-server may die at any moment. If the round was
 * lost to us (STALE: it closed without us; EVICTED: we were declared dead), Δ is dropped and we
 * continue from the current global parameters: a pseudo-gradient is only ever sent for the round
 * whose parameters it was computed against. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "internal.h"
#include "redis/rconn.h"

/* ---- tentative parameters: confirming the previous round -------------------------------------- */

/* Whether Redis (c, shard k's commit) has version v of shard k with the digest we hold for it, durably: with
 * min_replicas, once dl_replicated recorded it (the commit is on that many replicas); until then it is on
 * its way, like an uncommitted one. */
static int digest_is_ours(const diloco *d, int k, const committed_shard *c)
{
    char mine[17];
    snprintf(mine, sizeof mine, "%016" PRIx64, d->tent_xxh[k]);
    return strcmp(c->digest, mine) == 0;
}

static int committed_as_ours(const diloco *d, int k, const committed_shard *c, int64_t v)
{
    return c->version == v && digest_is_ours(d, k, c) && (d->rc.min_replicas <= 0 || c->replicated >= v);
}

/* What the confirm does with each shard of the fragment (confirm_from_redis says, fetch_round_result
 * acts): send our kept Δ again and get the shard (its lease moved, or Redis could not say; also a shard
 * whose run moved past the version we hold: tent_version 0 too, but its get must happen, it says STALE),
 * leave it (we hold it at its committed version, with its digest: received after its commit, or
 * confirmed now or by an earlier look), or wait for it (not committed yet, but still leased under the
 * epoch that served it: its commit is on its way, and that owner has our Δ). */
enum { CONFIRM_FETCH, CONFIRM_HELD, CONFIRM_ON_WAY };

/* Look up in Redis the commits of the shards of fragment f that hold tentative parameters: those
 * committed with the digest we hold are confirmed (tent_version 0). Returns 0 when none is left, 1 when
 * the rest are not committed yet but still leased to the server that sent them (its commit is on the
 * way), 2 when some lease moved (or Redis could not say): a new owner needs our Δ again. *conflict is
 * set if one was committed with another digest. what (one per shard of the fragment): CONFIRM_* of each. */
static int confirm_from_redis(diloco *d, int f, int *conflict, char *what, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f), n = last - first, pending = 2;
    committed_shard *c = calloc((size_t)n, sizeof *c);
    memset(what, CONFIRM_FETCH, (size_t)n);
    if (c && fetch_committed(d, first, last, c, err, errlen) == 0) {
        pending = 0;
        for (int i = 0; i < n; i++) {
            int k = first + i;
            if (d->tent_version[k] == 0 && committed_as_ours(d, k, &c[i], d->shard_version[k])) what[i] = CONFIRM_HELD;
            if (d->tent_version[k] <= 0) continue;
            int same_epoch = c[i].epoch == d->tent_epoch[k];
            if (committed_as_ours(d, k, &c[i], d->tent_version[k])) {
                d->tent_version[k] = 0; /* durable */
                if (d->shard_version[k] == c[i].version) what[i] = CONFIRM_HELD;
            } else if (c[i].version > d->tent_version[k]) {
                d->tent_version[k] = 0; /* the run moved on: our next push is STALE and re-fetches */
            } else if (c[i].version == d->tent_version[k] && !digest_is_ours(d, k, &c[i])) {
                *conflict = 1;
            } else if (same_epoch) { /* (committed as ours but not on the replicas yet, or not committed) */
                what[i] = CONFIRM_ON_WAY;
                if (pending < 1) pending = 1;
            } else {
                pending = 2;
            }
        }
    }
    free(c);
    return pending;
}

/* Fragment f's previous round cannot be completed as we hold it (it was committed with other
 * parameters, e.g. without a participant that died with the server, or closed without us): take the
 * fragment at the run's current version and drop our local progress on it. */
static int confirm_reset(diloco *d, int f, const char *why, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f);
    log_warn("fragment %d: %s; continuing from the committed global parameters", f, why);
    if (fetch_current(d, f, err, errlen) < 0) return DL_FAIL; /* state unchanged: tried again next time */
    if (params_take(d, first, last, err, errlen) < 0) return DL_FAIL;
    return DL_STALE;
}

static int get_round(diloco *d, int first, int last, const fanout_get_arg *ga, fanout_early *early, const char *what,
                     char *err, size_t errlen);

/* How long sync_confirm_durable waits for a commit that the lease says is on its way before it sends
 * its Δ again and asks: longer than a commit takes, even when Redis is slow. */
#define CONFIRM_PATIENCE_MS 5000

/* Whether the confirm leaves shard k alone (what: confirm_from_redis's, NULL: none is left): we hold it
 * at version want as committed, or its commit at want is on its way. */
static int confirm_leaves(const diloco *d, int k, int first, const char *what, int64_t want)
{
    return what && what[k - first] != CONFIRM_FETCH && d->shard_version[k] == want;
}

/* Fragment f's shards at version want, durably. Our kept Δ of round want-1 goes to every owner first
 * (a new owner needs it; one push saves the round trip of a `need`), then get_round's passes, which
 * resend it wherever an owner still asks and never wait on one shard while others are missing. A shard
 * the confirm leaves (confirm_leaves) is neither sent our Δ (an owner that committed it would count a
 * duplicate; one whose commit is on its way has it) nor fetched again: its parameters are in base. */
static int fetch_round_result(diloco *d, int f, int64_t want, const char *what, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f);
    diloco_sync_info *info = dl_round_info(d);
    for (int k = first; k < last; k++) {
        if (confirm_leaves(d, k, first, what, want)) continue;
        info->confirm_shards++;
        int rc = conn_push(d, k, want - 1, err, errlen);
        /* STALE: committed already; CORRUPT: the others first (CORRUPT_OTHERS_MS); the get tells how */
        if (rc == DL_EVICTED || rc == DL_FAIL) return rc;
    }
    fanout_get_arg ga = {.want = want, .may_push = 1, .once = 1};
    return get_round(d, first, last, &ga, NULL, what, err, errlen);
}

/* While the server that sent them still holds the lease with the same epoch, its commit is on its way:
 * wait for it (its lease expires if it is frozen or dead, and a restarted server takes it with a new
 * epoch). Patience is bounded all the same: a server whose commit failed keeps its lease, and then only
 * our Δ and a get make it commit again. Returns what confirm_from_redis last said (0: all confirmed). */
static int wait_for_commit(diloco *d, int f, uint64_t t0, int *conflict, char *what, char *err, size_t errlen)
{
    uint64_t patience =
        d->o.sync_timeout_ms < CONFIRM_PATIENCE_MS ? (uint64_t)d->o.sync_timeout_ms : CONFIRM_PATIENCE_MS;
    uint64_t deadline = t0 + patience;
    int pending;
    for (unsigned attempt = 0;; attempt++) {
        pending = confirm_from_redis(d, f, conflict, what, err, errlen);
        if (*conflict || pending != 1 || now_ms() > deadline || dl_stopping(d)) break;
        sleep_ms(backoff_ms(attempt, 2, 100));
    }
    dl_round_info(d)->confirm_seconds = (double)(now_ms() - t0) / 1000.0;
    return pending;
}

/* Every shard of f at version want, durably, resending our kept Δ where asked (fetch_round_result). A
 * slice received now that differs from the tentative one we trained from is a conflict (unless the
 * round broke off before we took its parameters: then there is nothing to compare with). The get's
 * status. */
static int get_and_compare(diloco *d, int f, int64_t want, int incomplete, const char *what, uint64_t t0,
                           int *conflict, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f);
    uint64_t *trained = malloc((size_t)(last - first) * sizeof *trained); /* the digests we trained from */
    if (!trained) {
        err_set(err, errlen, "out of memory");
        return DL_FAIL;
    }
    for (int k = first; k < last; k++) trained[k - first] = d->tent_xxh[k];
    int rc = fetch_round_result(d, f, want, what, err, errlen);
    for (int k = first; !incomplete && k < last; k++)
        if (d->tent_version[k] == 0 && d->shard_version[k] == want && d->tent_xxh[k] != trained[k - first])
            *conflict = 1;
    free(trained);
    dl_round_info(d)->confirm_seconds = (double)(now_ms() - t0) / 1000.0;
    return rc;
}

/* The first shard of [first, last) not at version want (a get for at least want may bring a later one), or -1. */
static int first_not_at(const diloco *d, int first, int last, int64_t want)
{
    for (int k = first; k < last; k++)
        if (d->shard_version[k] != want) return k;
    return -1;
}

static int all_at(const diloco *d, int first, int last, int64_t want)
{
    return first_not_at(d, first, last, want) < 0;
}

/* After a round's get: DL_OK when every shard of [first, last) came at the round's result, version want;
 * else DL_STALE, the run moved on past the round meanwhile, with the first shard that did not in err (what
 * the round's loss is logged with: round.c) */
static int got_round(const diloco *d, int first, int last, int64_t want, char *err, size_t errlen)
{
    int k = first_not_at(d, first, last, want);
    if (k < 0) return DL_OK;
    err_set(err, errlen, "shard %d came at version %lld, not at the round's result, version %lld: the run moved on "
            "past the round meanwhile",
            dl_shard_id(d, k), (long long)d->shard_version[k], (long long)want);
    return DL_STALE;
}

/* The round that broke off completed after all: take its result, as the sync would have had it not
 * failed. */
static int take_late_round(diloco *d, int f, int64_t want, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f);
    dl_set_frag_version(d, f, want);
    d->frag_incomplete[f] = 0;
    if (params_take(d, first, last, err, errlen) < 0) return DL_FAIL;
    log_warn("fragment %d: round %" PRId64 " completed late; continuing from its parameters", f, want - 1);
    d->fail_streak = 0; /* the sync that failed succeeded after all: no longer failures in a row (round.c) */
    return DL_STALE;
}

/* What the get of get_and_compare (status rc) makes of the round: confirmed with every shard at want
 * (a round that broke off, incomplete, is taken now), lost to us (we continue from the committed
 * parameters), or a failure to try again. */
static int settle_confirm(diloco *d, int f, int64_t want, int incomplete, int rc, char *err, size_t errlen)
{
    if (rc == DL_OK && !all_at(d, dl_first_shard(d, f), dl_last_shard(d, f), want)) rc = DL_STALE;
    if (rc == DL_STALE || rc == DL_EVICTED)
        return confirm_reset(d, f, "the previous round closed without our pseudo-gradient", err, errlen);
    if (rc == DL_CORRUPT) return rc;
    if (rc != DL_OK) return DL_FAIL; /* per-shard state is accurate (-1 where a receive broke): again next time */
    return incomplete ? take_late_round(d, f, want, err, errlen) : DL_OK;
}

/* Confirm fragment f's previous round (not broken off) from Redis, resending our kept Δ only where a lease
 * moved: those shards are sent it and fetched (the new owner recomputes them), the others are left as they
 * are, committed or on their way, and those on their way are then looked at in Redis again (a shard fetched
 * here is durable: the get asks for no tentative version; a failed read of Redis fetches every shard, as
 * before, and ends there). DL_OK: all confirmed; DL_NEED: a commit that was on its way did not come within
 * the patience (what then says which shards the caller fetches); anything else: settled (a conflict's or
 * a get's outcome). */
static int confirm_moved(diloco *d, int f, int64_t want, uint64_t t0, char *what, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f), conflict = 0;
    for (;;) {
        int pending = wait_for_commit(d, f, t0, &conflict, what, err, errlen);
        if (conflict) return confirm_reset(d, f, "the previous round was committed with other parameters", err, errlen);
        if (pending == 0) return DL_OK;
        if (pending == 1) { /* a commit that failed keeps its lease: our Δ and a get make it commit again */
            for (int i = 0; i < last - first; i++)
                if (what[i] == CONFIRM_ON_WAY) what[i] = CONFIRM_FETCH;
            return DL_NEED;
        }
        int rc = get_and_compare(d, f, want, 0, what, t0, &conflict, err, errlen);
        if (conflict) return confirm_reset(d, f, "the previous round was committed with other parameters", err, errlen);
        if (rc != DL_OK || !all_at(d, first, last, want) || !memchr(what, CONFIRM_ON_WAY, (size_t)(last - first)))
            return settle_confirm(d, f, want, 0, rc, err, errlen); /* (every shard fetched durably is confirmed) */
    }
}

int sync_confirm_durable(diloco *d, int f, char *err, size_t errlen)
{
    int incomplete = d->frag_incomplete[f], garbage = 0, pending = 0, conflict = 0;
    char what[RUNCONF_MAX_SHARDS] = {0}; /* CONFIRM_* per shard of f (all CONFIRM_FETCH unless Redis said) */
    for (int k = dl_first_shard(d, f); k < dl_last_shard(d, f); k++) {
        garbage |= d->tent_version[k] < 0;
        pending |= d->tent_version[k] > 0;
    }
    if (!incomplete && !garbage && !pending) return DL_OK;
    uint64_t t0 = now_ms();
    int64_t want = d->tent_round[f] + 1;
    if (!incomplete && !garbage) {
        int rc = confirm_moved(d, f, want, t0, what, err, errlen);
        if (rc != DL_NEED) return rc;
    }
    /* A commit that did not come, or the round broke off: every shard of f at round+1, durably, resending our
     * kept Δ where asked (but to the shards Redis said we hold as committed). */
    int rc = get_and_compare(d, f, want, incomplete, what, t0, &conflict, err, errlen);
    if (conflict) return confirm_reset(d, f, "the previous round was committed with other parameters", err, errlen);
    return settle_confirm(d, f, want, incomplete, rc, err, errlen);
}

/* While a get waits: after RESEND_TENTATIVE_AFTER_MS, and every RESEND_TENTATIVE_EVERY_MS after, the shards
 * we already took from this round tentatively are looked at in Redis. */
#define RESEND_TENTATIVE_AFTER_MS 1000
#define RESEND_TENTATIVE_EVERY_MS 2000

/* A shard we took tentatively (served before its commit) whose server then died before committing it has
 * a new owner that needs our Δ again, and we do not ask that owner anything: we hold the shard. Another
 * worker may be waiting for exactly that commit while it holds, tentatively, the shard whose new owner
 * waits for ours: each waits for the other until the sync timeout (seen in it_codec_crash under its kill
 * storm). So a get that keeps waiting reads those shards' commits and leases (one HMGET): where the shard
 * is not at our version and its lease has another epoch than the one that served us (that server is
 * gone), our kept Δ of round want-1 goes to the new owner. Nothing is sent while the commit is merely slow.
 * tests/it_tentative_crossing.sh makes the crossing happen (shard-server --fault-tentative-to). sent (one per
 * shard of [first, last), or NULL: every look resends): the epoch each shard's Δ last went to, which is not
 * sent to again. */
static void resend_tentative(diloco *d, int first, int last, int64_t want, int64_t *sent)
{
    int n = last - first, held = 0;
    for (int k = first; k < last; k++) held |= d->shard_version[k] == want && d->tent_version[k] == want;
    if (!held) return;
    committed_shard *c = calloc((size_t)n, sizeof *c);
    char err[256];
    if (c && fetch_committed(d, first, last, c, err, sizeof err) == 0)
        for (int k = first; k < last; k++) {
            const committed_shard *ck = &c[k - first];
            if (d->shard_version[k] != want || d->tent_version[k] != want || ck->version >= want ||
                ck->epoch == d->tent_epoch[k] || (sent && sent[k - first] == ck->epoch))
                continue;
            log_info("shard %d: the server that served version %" PRId64 " before committing it is gone (lease "
                     "epoch %" PRId64 ", now %" PRId64 "): our pseudo-gradient goes to the new owner",
                     dl_shard_id(d, k), want, d->tent_epoch[k], ck->epoch);
            if (conn_push(d, k, want - 1, err, sizeof err) == DL_OK && sent) sent[k - first] = ck->epoch;
        }
    free(c);
}

/* A shard found corrupt ends a get only once every other shard is in, or after this long: passes go on
 * asking the others, and send our Δ to an owner that asks for it. Another worker's round of such a shard may
 * wait for our Δ while we wait for the repair (it_group_repair: a group's get of shard 2 waited for w2's Δ
 * until its sync timeout, w2 having met shard 1 corrupt in the same pass as shard 2's owner was loading).
 * Bounded: a corrupt shard's outcome masks the others' in a pass (a stale or failed one would be asked
 * until the sync timeout). */
#define CORRUPT_OTHERS_MS 10000

/* Whether every shard of [first, last) but the corrupt ones is at version want or later. */
static int others_in(const diloco *d, int first, int last, int64_t want)
{
    for (int k = first; k < last; k++)
        if (!d->shard_corrupt[k] && d->shard_version[k] < want) return 0;
    return 1;
}

/* Every shard of [first, last) at version ga->want (but those the confirm leaves: what): passes over all
 * the shards still missing, each asked once (and sent our Δ again where an owner asks for it), until none
 * is missing or the sync timeout. Never waiting on one shard while others are missing matters after an
 * owner changed: other workers may be waiting for our Δ of a shard later in our list before they can send
 * theirs of this one; so a corrupt shard ends the get (DL_CORRUPT) only once the others are in, or after
 * CORRUPT_OTHERS_MS. The first pass is early's when given (its requests were sent with the arrival). */
static int get_round(diloco *d, int first, int last, const fanout_get_arg *ga, fanout_early *early, const char *what,
                     char *err, size_t errlen)
{
    uint64_t start = now_ms(), deadline = start + (uint64_t)d->o.sync_timeout_ms;
    uint64_t resend_at = start + RESEND_TENTATIVE_AFTER_MS;
    unsigned attempt = 0;
    char corrupt[256] = ""; /* a shard's corrupt state: the outcome, once the others are in (or time is up) */
    uint64_t corrupt_until = 0;
    /* (an early pass's threads have judged their shards on the versions they found, and may still read
     * them: both those and -1 are below want, so the early pass keeps them; a shard the confirm leaves keeps
     * its version want, and the passes, which ask once, skip it) */
    if (early == NULL)
        for (int k = first; k < last; k++)
            if (!confirm_leaves(d, k, first, what, ga->want)) d->shard_version[k] = -1;
    for (;;) {
        int was_early = early != NULL;
        int rc = early ? fanout_get_finish(early, 1, err, errlen) : fanout_get(d, first, last, ga, err, errlen);
        early = NULL;
        if (rc == DL_CORRUPT && !corrupt[0]) {
            snprintf(corrupt, sizeof corrupt, "%s", err);
            corrupt_until = now_ms() + CORRUPT_OTHERS_MS;
        }
        if (rc == DL_CORRUPT && !others_in(d, first, last, ga->want) && now_ms() < corrupt_until)
            rc = DL_RETRY; /* the others first, for a while: another worker's round of one may wait for our Δ */
        if (rc == DL_CORRUPT) err_set(err, errlen, "%s", corrupt);
        if (rc != DL_RETRY && rc != DL_NEED) return rc;
        if (ga->may_push && now_ms() >= resend_at) {
            resend_tentative(d, first, last, ga->want, NULL);
            resend_at = now_ms() + RESEND_TENTATIVE_EVERY_MS;
        }
        /* an early get answered `wait` was answered before the close (an owner that does not hear closes):
         * the barrier is closed now, so ask again at once, as the get used to go after the close */
        if (was_early) continue;
        if (owners_retry_pause(d, &attempt, deadline, first, "get", err, errlen) != DL_OK) {
            if (!corrupt[0]) return DL_FAIL;
            err_set(err, errlen, "%s", corrupt); /* (the corrupt shard is what the caller must act on) */
            return DL_CORRUPT;
        }
    }
}

/* ---- fragment f's tail: the round we hold tentatively, watched until it is durable ------------------- */

/* How often the tail looks at a round still pending, and how often it looks whether it was told to stop. */
#define WATCH_EVERY_MS RESEND_TENTATIVE_EVERY_MS
#define WATCH_STOP_POLL_MS 20

/* Sleep ms, in steps, unless *stop is set (or the session stops) first: 1 if it was. */
static int nap_unless_stopped(diloco *d, const int *stop, unsigned ms)
{
    for (unsigned slept = 0; slept < ms; slept += WATCH_STOP_POLL_MS) {
        if (__atomic_load_n(stop, __ATOMIC_ACQUIRE) || dl_stopping(d)) return 1;
        sleep_ms(WATCH_STOP_POLL_MS);
    }
    return 0;
}

/* Whether a shard of fragment f still holds a version taken tentatively (its commit not seen yet). */
static int tentative_pending(const diloco *d, int f)
{
    for (int k = dl_first_shard(d, f); k < dl_last_shard(d, f); k++)
        if (d->tent_version[k] > 0) return 1;
    return 0;
}

/* The tentative crossing (resend_tentative) across fragments: in a Streaming run a worker that took f's round
 * tentatively goes on to the next fragment's round, and may wait at its barrier for a worker whose get of f
 * waits for our Δ at a new owner (the server that served us died before committing): no get of f of ours
 * would come before f's next boundary, which comes after that barrier. So f's tail, until f is sent again,
 * keeps looking at the shards it holds tentatively and resends our kept Δ to a new owner, once per epoch
 * (tests/it_stream_lost_tentative.sh). A conflict is left to the boundary's confirm. */
void sync_confirm_watch(diloco *d, int f, const int *stop)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f), conflict = 0;
    int64_t want = d->tent_round[f] + 1, *sent = calloc((size_t)(last - first), sizeof *sent);
    char err[256], what[RUNCONF_MAX_SHARDS];
    while (tentative_pending(d, f)) {
        int pending = confirm_from_redis(d, f, &conflict, what, err, sizeof err);
        if (pending == 0 || conflict || !stop) break;
        if (pending == 2 && sent) resend_tentative(d, first, last, want, sent);
        if (nap_unless_stopped(d, stop, WATCH_EVERY_MS)) break;
    }
    free(sent);
}

/* Push, arrive (the gets sent meanwhile), wait, get, for the shards of fragment f. */
int sync_run_round(diloco *d, int f, int64_t round, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f);
    int rc = fanout_push(d, first, last, round, err, errlen);
    if (rc != DL_OK) return rc;
    dl_round_info(d)->t_pushed_us = wall_us();
    fanout_get_arg ga = {.want = round + 1, .may_push = 1, .flags = BLOB_GET_TENTATIVE_OK, .once = 1};
    /* The gets leave now, with the arrival (after every push's ack: an arrival promises the owners hold our
     * Δ). Their answers are read only once the barrier says we are in the round: any other outcome drops
     * them unread, and the round goes on exactly as if they had never been sent. (NULL: no threads; the
     * gets go after the barrier, as before.) */
    fanout_early *early = fanout_get_start(d, first, last, &ga);
    rc = barrier_pass(d, f, round, err, errlen);
    if (rc != DL_OK) {
        if (early) fanout_get_finish(early, 0, NULL, 0);
        return rc;
    }
    /* until every shard's parameters are in, the round is incomplete for us: sync_confirm_durable
     * finishes it (with the Δ we keep) before fragment f computes another Δ */
    d->frag_incomplete[f] = 1;
    d->tent_round[f] = round;
    d->counted_round[f] = round;
    dl_round_info(d)->t_get_us = wall_us();
    rc = get_round(d, first, last, &ga, early, NULL, err, errlen);
    if (rc != DL_OK) return rc;
    d->frag_incomplete[f] = 0;
    return got_round(d, first, last, ga.want, err, errlen);
}

/* Take part in fragment f's round with nothing: wait as a joiner (no push, no arrival) for it to close,
 * then get its result, durably (a tentative version would be confirmed later with a Δ of ours that the
 * round never had). round.c's sync_round: a round that does not expect us, right after we registered again. */
int sync_join_round(diloco *d, int f, int64_t round, char *err, size_t errlen)
{
    int rc = barrier_wait_closed(d, f, round, err, errlen);
    if (rc != DL_OK) return rc;
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f);
    fanout_get_arg ga = {.want = round + 1, .once = 1};
    rc = get_round(d, first, last, &ga, NULL, NULL, err, errlen);
    if (rc != DL_OK) return rc;
    return got_round(d, first, last, ga.want, err, errlen);
}
