/* round.c: one fragment's round as the schedule sees it, whatever the mode: compute Δ (or reset to the
 * global parameters when ours diverged), run the round blocking, and settle its outcome (apply the new
 * global parameters, count failures and register again after too many, wait for a repair of corrupt
 * durable state, adopt the H that DyLU assigned).
 *
 * after_step.c decides when a fragment syncs; plain DiLoCo runs round_blocking there, Streaming DiLoCo
 * (streaming.c) runs round_prepare_delta, the network part (round_net) on a thread, then round_settle.
 * round_net is the switch between the modes: sync.c's barrier round or async.c's submission, and what
 * a lost round means in both (stale: fetch the current parameters; evicted: register again). */

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"
#include "math/outer.h"

void round_begin(diloco *d)
{
    memset(&d->cur, 0, sizeof d->cur);
}

void round_record(diloco *d, int f, int64_t round, uint64_t t0, int stale)
{
    diloco_sync_info s = d->cur; /* what this sync sent and received, and when */
    s.fragment = f;
    s.round = round;
    s.version = d->frag_version[f];
    s.seconds = (double)(now_ms() - t0) / 1000.0;
    /* (not while other rounds in flight receive into base: the vector is theirs to write, and half-way) */
    s.digest = d->base_busy ? 0 : digest_f32(d->base, d->numel);
    /* a sharded group's rank knows only its part's: group.c's record writes the sum over the ranks */
    s.shards_digest = d->shard_ids || d->base_busy ? 0 : part_shards_digest(d);
    s.stale = stale;
    d->last = s;
    d->have_last = 1;
}

/* ---- the network part: sync.c or async.c, by mode ----------------------------------------------------- */

#define REGISTERING "; registering again" /* register_if_evicted's warning, at a sync */

/* The heartbeat thread learnt we were evicted (a long stop, a network cut): register again before
 * sending anything, instead of pushing as a dead incarnation. then: what the warning says we do now.
 * defer (a round on a background thread: Streaming, round_in_background): only say DL_EVICTED; the
 * training thread registers at the round's settling (round_settle), once, where it also fetches every
 * fragment: the registration records the steps trained until the parameters were taken (dl_register). */
static int register_if_evicted_as(diloco *d, const char *then, int defer, char *err, size_t errlen)
{
    if (!dl_evicted(d) && dl_still_member(d)) return DL_OK;
    char why[sizeof d->evicted_why];
    dl_evicted_why(d, why, sizeof why);
    log_warn("we were evicted (%s)%s", why, then);
    if (!defer && dl_register(d, err, errlen) < 0) return DL_FAIL;
    err_set(err, errlen, "evicted (%s)", why); /* a group's recover says it */
    if (!defer) d->refetch_all = 1;
    return DL_EVICTED;
}

static int register_if_evicted(diloco *d, const char *then, char *err, size_t errlen)
{
    return register_if_evicted_as(d, then, 0, err, errlen);
}

#define REGISTERING_LATER "; registering again once the rounds in flight have ended"

/* A Streaming round runs on a background thread while training goes on (streaming.c): sync rounds beside
 * others or their tails (dl_stream_overlap), an async submission alone. */
static int round_in_background(const diloco *d)
{
    return dl_stream_overlap(d) || (d->rc.async && d->rc.nfragments > 1);
}

void round_warn_stale(const diloco *d, int f, int64_t round, const char *why)
{
    if (d->rc.async) /* no rounds: round is the version the submission was based on */
        log_warn("submission of fragment %d based on version %" PRId64 " refused as stale: %s; continuing from the "
                 "current global parameters",
                 f, round, why);
    else
        log_warn("round %" PRId64 " of fragment %d lost (stale): %s; continuing from the current global parameters",
                 round, f, why);
}

/* A sync round of fragment f. fresh: every fragment was just fetched (we registered again at this boundary's
 * settling: streaming.c, stream_step), so our Δ is zero, trained over no step. Arriving with it in a round
 * that does not expect us (dl_register joined us to the next one) would still count it among the
 * participants: the mean of N pseudo-gradients of which ours is zero, the fragment's outer step shrunk by
 * (N-1)/N. So we wait for that round to close as a joiner does and take its result, with nothing sent: the
 * others never waited for us there. A round that expects us (a barrier short of members at our
 * registration, or one that closed between the registration and the fetch), or one that nobody else is
 * left to close (DL_NEED), gets the zero Δ: it waits for our arrival. */
static int sync_round(diloco *d, int f, int64_t round, int fresh, char *err, size_t errlen)
{
    if (!fresh || round >= d->frag_joined[f]) return sync_run_round(d, f, round, err, errlen);
    int rc = sync_join_round(d, f, round, err, errlen);
    if (rc == DL_OK)
        log_info("round %" PRId64 " of fragment %d: registered again just before it, with no step trained for it: "
                 "took its result without arriving (it did not expect us)",
                 round, f);
    if (rc != DL_NEED) return rc;
    log_info("round %" PRId64 " of fragment %d waits for nobody else: arriving, with nothing trained for it", round, f);
    return sync_run_round(d, f, round, err, errlen);
}

int round_net(diloco *d, int f, int fresh, char *err, size_t errlen)
{
    int64_t round = d->frag_version[f];
    int defer = round_in_background(d);
    const char *then = defer ? REGISTERING_LATER : REGISTERING;
    if (dl_evicted(d)) return register_if_evicted_as(d, then, defer, err, errlen);
    if (d->o.simulate_latency_ms > 0) sleep_ms((unsigned)d->o.simulate_latency_ms);
    int rc;
    if (d->rc.async) { /* (it sets frag_version from the versions it got) */
        lookahead_keep(d, f);
        rc = async_submit_net(d, f, err, errlen);
        if (rc == DL_OK) lookahead_aim(d, f);
    } else {
        rc = sync_round(d, f, round, fresh, err, errlen);
        if (rc == DL_OK) dl_set_frag_version(d, f, round + 1);
        /* a rank that never arrived: its group's other ranks would wait for it forever. A stopped rank cannot
         * tell whether it did, and its group stops at its next collective: it leaves, ending their waits. */
        if ((rc == DL_FAIL || rc == DL_CORRUPT) && d->grp && (dl_round_info(d)->t_pushed_us == 0 || dl_stopping(d)))
            dl_group_leave(d);
    }
    if (rc == DL_OK) return DL_OK;
    if (rc == DL_STALE) { /* stale: evicted? */
        int member = register_if_evicted_as(d, then, defer, err, errlen);
        if (member != DL_OK) return member;
    }
    if (rc == DL_STALE) {
        /* a joiner that volunteered for a round which did not wait for it: expected, not a loss */
        if (!d->rc.async && round < d->frag_joined[f])
            log_info("round %" PRId64 " of fragment %d closed without us (we joined for round %" PRId64
                     " of it); continuing from its result",
                     round, f, d->frag_joined[f]);
        else
            round_warn_stale(d, f, round, err);
        return fetch_current(d, f, err, errlen) < 0 ? DL_FAIL : DL_STALE;
    }
    if (rc == DL_EVICTED) {
        log_warn("round %" PRId64 " of fragment %d lost: we were evicted (%s)%s", round, f, err, then);
        if (defer) return DL_EVICTED;
        if (dl_register(d, err, errlen) < 0) return DL_FAIL;
        d->refetch_all = 1;
        return DL_EVICTED;
    }
    return rc == DL_CORRUPT ? rc : DL_FAIL;
}

/* ---- settling ---------------------------------------------------------------------------------------- */

/* DyLU: take the H the run assigned us, at a sync boundary. */
static void adopt_dylu(diloco *d)
{
    pthread_mutex_lock(&d->hb_mu);
    if (d->o.dylu && d->dylu_h > 0) d->sync_every = d->dylu_h;
    pthread_mutex_unlock(&d->hb_mu);
}

/* How often the fetch after a registration is told to be still waiting for a shard-server (and the least time
 * between two tries, when a try fails at once). */
#define REFETCH_TELL_MS 60000
#define REFETCH_MIN_MS 1000

/* Every fragment from the run, after we registered again. Where the run moved past what we hold (a round closed
 * whose commit no shard-server made: its owner died, or we pushed to the only one before it died) the fetch
 * needs a shard-server, and while none answers it fails. That is an outage, not the worker's end: it tries
 * again (each try waits up to the sync timeout) until a server answers, the run is shut down or we are
 * stopped; heartbeats go on meanwhile, so we stay a member. Training on would be wasted: the fetch replaces
 * the parameters trained since. Every failure is tried again, a lasting one too (said once a minute). 0
 * fetched, -1 (err) once stopped or told the run ended. */
static int fetch_after_register(diloco *d, char *err, size_t errlen)
{
    uint64_t since = now_ms(), told = 0;
    for (int tries = 1;; tries++) {
        uint64_t t0 = now_ms();
        if (fetch_all(d, err, errlen) == 0) {
            if (tries > 1)
                log_info("registered again: the run's parameters came after %.0f s and %d tries; continuing from them",
                         (double)(now_ms() - since) / 1000.0, tries);
            return 0;
        }
        if (dl_stopping(d) || dl_shutdown_seen(d)) return -1;
        if (told == 0 || now_ms() - told >= REFETCH_TELL_MS) {
            log_warn("registered again, but no shard-server gave us the run's parameters for %.0f s (%s): trying "
                     "again until one does (a stop or the run's shutdown ends the wait)",
                     (double)(now_ms() - since) / 1000.0, err);
            told = now_ms();
        }
        uint64_t took = now_ms() - t0;
        if (took < REFETCH_MIN_MS) sleep_ms((unsigned)(REFETCH_MIN_MS - took));
    }
}

/* A sync of fragment f (at round, started at t0) failed for good: count it; too many in a row and we register
 * again from scratch, which the sync's record then says (stale: every fragment taken from the run). */
static int on_failure(diloco *d, int f, int64_t round, uint64_t t0, const char *why, char *err, size_t errlen)
{
    if (dl_stopping(d)) {
        if (why != err) err_set(err, errlen, "%s", why); /* callers often pass err itself as why */
        return -1;
    }
    if (dl_shutdown_seen(d)) { /* not a failure: the run is over (the host sees diloco_stop_requested) */
        log_info("%s; this sync was not made (%s)", dl_run_end(d), why);
        return 0;
    }
    d->fail_streak++;
    log_error("sync failed (%d in a row, limit %d): %s", d->fail_streak, d->o.max_sync_retries, why);
    int lost = __atomic_exchange_n(&d->place_lost, 0, __ATOMIC_ACQ_REL);
    if (d->fail_streak <= d->o.max_sync_retries && !lost) return 0; /* training goes on; the next sync tries again */
    d->fail_streak = 0;
    if (lost) /* an owner waits for a place of ours we cannot fill (fanout.c, get_job): end this incarnation now */
        log_warn("registering again now: a shard's order waits for a place of ours that no Δ will fill, and only "
                 "a new incarnation makes it a no-op");
    else
        log_warn("registering again after %d failed syncs", d->o.max_sync_retries + 1);
    if (dl_register(d, err, errlen) < 0 || fetch_after_register(d, err, errlen) < 0) {
        if (!dl_shutdown_seen(d)) return -1;
        /* refused SHUTDOWN: the operator ended the run while our syncs failed (its servers stopped first, say),
         * and the heartbeat that would have told us was not due yet. An end, not an error. */
        log_info("%s; the worker does not register again (%s)", dl_run_end(d), err);
        return 0;
    }
    dl_delta_forget_tokens(d);
    round_record(d, f, round, t0, 1); /* (else diloco_last_sync would still give the previous sync's) */
    return 1;
}

/* A shard's durable state is corrupt: wait for `coordinator repair`, then continue from the repaired
 * global parameters (a version above every one we hold), dropping the local progress of every fragment. */
static int round_after_repair(diloco *d, int f, int64_t round, const char *why, uint64_t t0, char *err, size_t errlen)
{
    if (repair_wait(d, why, err, errlen) < 0)
        return dl_stopping(d) ? -1 : 0; /* shut down meanwhile: the trainer sees diloco_stop_requested */
    d->fail_streak = 0;
    d->refetch_all = 0;
    if (fetch_all(d, err, errlen) < 0) return on_failure(d, f, round, t0, err, err, errlen);
    round_record(d, f, round, t0, 1);
    return 1;
}

/* Registered again (refetch_all): every fragment comes from the run again. */
static int refetch_everything(diloco *d, int f, int64_t round, uint64_t t0, char *err, size_t errlen)
{
    d->refetch_all = 0;
    if (fetch_all(d, err, errlen) < 0) return on_failure(d, f, round, t0, err, err, errlen);
    dl_delta_forget_tokens(d); /* the steps trained before are dropped */
    round_record(d, f, round, t0, 1);
    return 1;
}

int round_settle(diloco *d, int f, int64_t round, int rc, const char *why, uint64_t t0, double alpha, char *err,
                 size_t errlen)
{
    if (rc == DL_CORRUPT) return round_after_repair(d, f, round, why, t0, err, errlen);
    if (rc == DL_FAIL) {
        /* no server has our Δ (a round or submission under way has: frag_incomplete, completed later):
         * the next Δ covers its steps too, and weighs their tokens */
        if (!d->frag_incomplete[f]) dl_delta_untaken(d, f);
        return on_failure(d, f, round, t0, why, err, errlen);
    }
    if (rc == DL_EVICTED && !d->refetch_all) { /* a round in flight found us evicted and left registering to us */
        if (dl_register(d, err, errlen) < 0) return on_failure(d, f, round, t0, err, err, errlen);
        d->refetch_all = 1;
    }
    d->fail_streak = 0;
    if (d->refetch_all) return refetch_everything(d, f, round, t0, err, errlen); /* evicted */
    if (rc == DL_OK && d->la != NULL) { /* --async-lookahead: from the start ahead (alpha is 0 then) */
        if (lookahead_enter(d, f, err, errlen) < 0) return -1;
    } else if (params_apply(d, f, rc == DL_OK ? alpha : 0.0, err, errlen) < 0) {
        return -1;
    }
    round_record(d, f, round, t0, rc != DL_OK);
    adopt_dylu(d);
    return 1;
}

int round_settle_refetches(const diloco *d, int rc)
{
    if (rc == DL_CORRUPT || rc == DL_EVICTED || d->refetch_all) return 1;
    return rc == DL_FAIL && !dl_stopping(d) &&
           (d->fail_streak + 1 > d->o.max_sync_retries || __atomic_load_n(&d->place_lost, __ATOMIC_ACQUIRE));
}

/* Sync mode first settles the previous round (whose parameters we took before they were durable), async
 * mode completes a submission whose result did not come, because Δ is about to overwrite the pseudo-gradient
 * kept for it. A reset drops the steps trained since: their tokens weigh no Δ. */
prep_outcome round_prepare_delta(diloco *d, int f, char *err, size_t errlen)
{
    uint64_t t0 = now_ms();
    int c = d->rc.async ? async_complete(d, f, err, errlen) : sync_confirm_durable(d, f, err, errlen);
    if (c == DL_STALE) {
        dl_delta_restart_tokens(d, f);
        round_record(d, f, d->frag_version[f] - 1, t0, 1); /* params changed: report the version taken */
        return PREP_RESET;
    }
    if (c == DL_CORRUPT) return PREP_CORRUPT;
    if (c != DL_OK) return PREP_FAILED;
    if (dl_delta_compute(d, f, err, errlen) == 0) return PREP_SEND;
    log_error("%s; resetting to the global parameters", err);
    if (fetch_fragment(d, f, d->frag_version[f], 1, err, errlen) < 0) return PREP_FAILED;
    dl_delta_restart_tokens(d, f);
    round_record(d, f, d->frag_version[f] - 1, t0, 1);
    return PREP_RESET;
}

/* Fragment f was reset to the global parameters instead of sending a Δ, most often because the confirm
 * found its previous round committed without our pseudo-gradient. The usual reason for that is that we
 * were dropped: evicted (a long stop, a network cut) while a shard's new owner needed our Δ again, so the
 * owner dropped us from the round (dl_drop). Training the next round as that dead incarnation would be H
 * steps for nothing (its push and arrival are refused at the next sync, and only then would we register):
 * if we are no longer a member, register again now and take every fragment from the run, waiting as a
 * joiner for the open round to close. (A group's ranks decide this together in group.c's recover.) */
static int rejoin_if_dropped(diloco *d, int f, int64_t round, uint64_t t0, char *err, size_t errlen)
{
    int rc = register_if_evicted(d, REGISTERING, err, errlen);
    if (rc == DL_OK) return 1;
    if (rc == DL_FAIL) return on_failure(d, f, round, t0, err, err, errlen);
    return refetch_everything(d, f, round, t0, err, errlen);
}

/* The heartbeat thread found us evicted between two syncs (stopped or cut off mid-interval for longer than the
 * heartbeat timeout). The rest of the interval would be trained as a dead incarnation, its Δ refused at the
 * sync: register again now and take every fragment from the run, as a joiner, as a sync that finds us evicted
 * does. The interval's steps are dropped, and so are its tokens, which would otherwise weigh the next Δ
 * (there, they went with the Δ computed before the eviction showed). The trainer's inner optimizer state is
 * kept, as at every sync. */
int round_rejoin(diloco *d, int step, int interval, char *err, size_t errlen)
{
    round_begin(d);
    uint64_t t0 = now_ms();
    int64_t round = d->frag_version[0];
    char then[200];
    snprintf(then, sizeof then,
             " during inner step %d of %d; registering again now instead of training the rest of "
             "the interval as a dead incarnation (its steps are dropped)",
             step, interval);
    int rc = register_if_evicted(d, then, err, errlen);
    if (rc == DL_OK) return 0; /* (not reached: the flag stays set until we register) */
    if (rc == DL_FAIL) return on_failure(d, 0, round, t0, err, err, errlen);
    return refetch_everything(d, 0, round, t0, err, errlen); /* (its tokens too: dl_delta_forget_tokens) */
}

int round_unsent(diloco *d, int f, int64_t round, prep_outcome p, uint64_t t0, char *err, size_t errlen)
{
    if (p == PREP_CORRUPT) return round_after_repair(d, f, round, err, t0, err, errlen);
    if (p == PREP_FAILED) return on_failure(d, f, round, t0, err, err, errlen);
    if (p == PREP_RESET) return rejoin_if_dropped(d, f, round, t0, err, errlen);
    return 1;
}

void round_confirm_early(diloco *d, int f, const int *stop)
{
    if (!d->rc.async) sync_confirm_watch(d, f, stop);
}

int round_blocking(diloco *d, int f, double alpha, char *err, size_t errlen)
{
    round_begin(d);
    uint64_t t0 = now_ms();
    int64_t round = d->frag_version[f];
    prep_outcome p = round_prepare_delta(d, f, err, errlen);
    if (p != PREP_SEND) return round_unsent(d, f, round, p, t0, err, errlen);
    int rc = round_net(d, f, 0, err, errlen);
    return round_settle(d, f, round, rc, err, t0, alpha, err, errlen);
}
