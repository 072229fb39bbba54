/* streaming.c: Streaming DiLoCo's schedule (F fragments, from the run): every H/F steps one fragment,
 * in turn, is sent while training goes on. At each fragment boundary:
 *   1. once D fragments are in flight (--fragments-in-flight D, default 1), the oldest (sent D intervals
 *      ago) is waited for and applied:
 *      params[f] = alpha*params[f] + (1-alpha)*global[f]  (alpha 0: take the global values);
 *   2. the next fragment's pseudo-gradient is computed here (we own params) and its network round
 *      (push, barrier, get) runs on a background thread that touches only base[f].
 * So at most D fragments are in flight, each applied D intervals after it was sent (D = 1 is torchft's
 * fragment_sync_delay = H/F), and compute waits only if a round takes longer than D intervals. A round
 * slower than one interval (a distant link: about 2 RTT plus its bytes) stalls every boundary at D = 1;
 * D = 2 hides it (docs/compression.md, "What a user feels").
 * While every worker keeps pace the schedule is a pure function of the step count, which is what makes a
 * Streaming run exactly reproducible (tests/it_stream_exactness.sh, it_stream_in_flight.sh for D > 1); a
 * worker that joins or registers again mid-run takes the run's order from the fragments' rounds
 * (stream_next_fragment). after_step.c calls stream_step at each interval; the round's preparation and
 * settling are round.c's.
 *
 * The rounds in flight are a FIFO of slots (d->inflight). In a sync run (dl_stream_overlap; D > 1 only there:
 * async submissions share the session's submission number), rounds of different fragments, or a round and
 * the tail of the one before it (below), run at once, which the layers
 * below allow: each round touches only its fragment's shards (base, Δ, tentative state, versions), counts
 * its bytes and stamps in its slot's info (dl_round_info), sends its Redis commands on its lane's own
 * control connection (dl_round_ctl_use: on the shared one, rounds took turns, a round trip each), waits at
 * its barrier through the session's one listener on the wake list (wake.c's hub), and, finding us evicted,
 * only says so: registering again and fetching everything (round_settle) run on this thread once every
 * other round in flight has ended (settle_alone), so they never overlap a round. A fragment in flight is
 * never sent again before it is settled, and its version (written by its thread) is not read meanwhile.
 * The boundary settles a round as soon as its thread says the round is over (net_done); the thread goes on
 * with the look at the commit (round_confirm_early) as the fragment's tail, joined before the fragment is
 * sent again or anything fetches every fragment: one RTT off every boundary, D = 1 included. bench/wan_training
 * at RTT 300 ms, H = 40, 4 fragments: D = 1 50% with the look on the round's path and 67% without it, D = 2
 * 94-97%, D = 3 99-100% of the speed kept (docs/compression.md). An async run keeps the plain path: one
 * round at a time, joined at the boundary (its rounds have no look at the commit).
 *
 * A process group's sync Streaming rounds use the same slots, threads and lanes (stream_ready,
 * stream_launch, stream_take_oldest, stream_drop_inflight), but not the settling here: its ranks agree on
 * each round's outcome and apply it together, at the boundaries (group.c). */

#include "base/log.h"
#include "base/util.h"
#include "internal.h"

#define STREAM_WAIT_TELL_MS 60000 /* how often a round longer than an interval is said (tell_round_longer) */

static void *inflight_main(void *p)
{
    stream_slot *s = p;
    diloco *d = s->d;
    int f = s->frag, many = dl_stream_overlap(d);
    const int *stop = s->tail_stop;         /* (read now: s may be settled, and reused, once net_done is said) */
    log_sink *prev = log_use_sink(&d->log); /* also run in line, on the caller's thread */
    diloco_sync_info *prev_info = dl_round_info_use(&s->info);
    /* sync: its own control connection (the rounds' arrivals and reads, and a tail's look, would take turns on ctl) */
    rconn **prev_ctl = dl_round_ctl_use(many ? &d->lane_ctl[d->tails[f].lane] : NULL);
    s->rc = s->plan ? async_place_deliver(d, f, s->plan, 0, s->err, sizeof s->err)
                    : round_net(d, f, s->fresh, s->err, sizeof s->err);
    int ok = s->rc == DL_OK;
    diloco_sync_info after = {0}; /* what the look counts (nothing today) must not go to s, settled meanwhile */
    if (many) {                   /* the boundary may settle it now (s is not touched after this) */
        dl_round_info_use(&after);
        pthread_mutex_lock(&d->stream_mu);
        s->net_done = 1;
        pthread_cond_broadcast(&d->stream_cv);
        pthread_mutex_unlock(&d->stream_mu);
    }
    /* here, in the background: otherwise the fragment's next boundary asks Redis on the training thread,
     * one round trip of the WAN per interval (bench/wan_training, RTT 100 ms, intervals of 10 CPU GPT
     * steps: 96.7% and 82.0% of the speed kept before, 103.6% and 94.4% after, in two pairs of runs). In a
     * sync run after the boundary's wait: it touches only f's tentative state, which nothing reads before
     * this thread is joined (streaming.c's tails), and a round trip less in the round's D intervals. As f's
     * tail it goes on looking while a shard is pending, until joined: our Δ may be needed again meanwhile
     * (sync_confirm_watch) */
    if (ok) round_confirm_early(d, f, stop);
    dl_round_ctl_use(prev_ctl);
    dl_round_info_use(prev_info);
    log_use_sink(prev);
    if (many) __atomic_store_n(&d->tails[f].done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Sync: join fragment f's thread (its round settled; it may still be looking at the commit). */
static void join_tail(diloco *d, int f)
{
    stream_tail *t = &d->tails[f];
    __atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE); /* its look at the commit ends now */
    if (t->running) pthread_join(t->thread, NULL);
    t->running = 0;
}

/* Every fragment's (before anything that fetches every fragment, and at the end). */
static void join_tails(diloco *d)
{
    for (int f = 0; f < d->rc.nfragments; f++) join_tail(d, f);
}

/* Those that have ended, so that their lanes are free again. */
static void reap_tails(diloco *d)
{
    for (int f = 0; f < d->rc.nfragments; f++)
        if (d->tails[f].running && __atomic_load_n(&d->tails[f].done, __ATOMIC_ACQUIRE)) join_tail(d, f);
}

static stream_slot *slot_at(const diloco *d, int i) /* the i-th oldest in flight */
{
    return &d->inflight[(d->inflight_head + i) % d->inflight_max];
}

/* Whether a round's thread may be writing base now (then the record of a sync leaves its digests 0). */
static int base_busy(diloco *d)
{
    for (int i = 0; i < d->inflight_count; i++)
        if (slot_at(d, i)->threaded) return 1;
    return 0;
}

/* The lowest lane no running thread uses (each fragment has at most one: fewer than F lanes). */
static int free_lane(diloco *d)
{
    for (int lane = 0;; lane++) {
        int used = 0;
        for (int f = 0; f < d->rc.nfragments && !used; f++) used = d->tails[f].running && d->tails[f].lane == lane;
        if (!used) return lane;
    }
}

static int finish_all(diloco *d, int at_boundary, char *err, size_t errlen);

/* Fragment f's Δ was not sent (p): settle that. In a sync run, what it does may register again or fetch
 * everything: the other rounds in flight and the fragments' threads end first; if that fetched everything,
 * f is done too. */
static int settle_unsent(diloco *d, int f, int64_t round, prep_outcome p, uint64_t t0, char *err, size_t errlen)
{
    if (dl_stream_overlap(d)) {
        int fetched = d->fetched_all, changed = finish_all(d, 0, err, errlen);
        if (changed < 0) return -1;
        if (d->fetched_all != fetched) return 1;
    }
    return round_unsent(d, f, round, p, t0, err, errlen);
}

void stream_ready(diloco *d, int f)
{
    if (dl_stream_overlap(d)) { /* f's previous thread first: it may still write f's tentative state */
        join_tail(d, f);
        reap_tails(d);
    }
}

/* Fragment f's network round (its Δ prepared) in flight on a thread of its own. */
static void launch(diloco *d, int f, int fresh, const async_plan *plan)
{
    stream_slot *s = slot_at(d, d->inflight_count);
    /* (info starts as cur: what preparing counted, the confirm of f's previous round) */
    *s = (stream_slot){
        .d = d, .frag = f, .round = d->frag_version[f], .t0 = now_ms(), .info = d->cur, .fresh = fresh, .plan = plan};
    d->inflight_count++;
    if (!dl_stream_overlap(d)) {
        s->threaded = pthread_create(&s->thread, NULL, inflight_main, s) == 0;
    } else { /* the thread is f's tail: joined before f goes again */
        stream_tail *t = &d->tails[f];
        *t = (stream_tail){.lane = free_lane(d)};
        s->tail_stop = &t->stop;
        t->running = s->threaded = pthread_create(&t->thread, NULL, inflight_main, s) == 0;
        if (!s->threaded) s->tail_stop = NULL; /* in line below: one look, not a watch */
    }
    if (!s->threaded) inflight_main(s); /* no thread: sync in line, correct but not overlapped */
}

/* 1 when params changed (reset to the global ones, a repair waited for), -1 unrecoverable, else 0. A
 * fragment whose Δ could not be prepared is a failed sync, as in round_blocking: it counts toward
 * --max-sync-retries (it used to be dropped, so a worker cut off from every shard-server never got there).
 * fresh: every fragment was fetched at this boundary (round_net). */
static int begin_fragment(diloco *d, int f, int fresh, char *err, size_t errlen)
{
    uint64_t t0 = now_ms();
    int64_t round = d->frag_version[f];
    round_begin(d);
    stream_ready(d, f);
    d->base_busy = base_busy(d);
    prep_outcome p = round_prepare_delta(d, f, err, errlen);
    d->base_busy = 0;
    if (p != PREP_SEND) return settle_unsent(d, f, round, p, t0, err, errlen);
    launch(d, f, fresh, NULL);
    return 0;
}

/* What hides a round that outlasts its intervals: more of them in flight only where more are allowed. */
static void round_hiders(const diloco *d, char *out, size_t cap)
{
    int most = d->o.fragment_alpha == 0 ? d->rc.nfragments - 1 : d->rc.nfragments;
    char more[112] = "";
    if (most > d->inflight_max)
        snprintf(more, sizeof more, "more fragments in flight (--fragments-in-flight, at most %d here), ", most);
    snprintf(out, cap, "%sfewer fragments (coordinator init --fragments) or a larger --sync-every", more);
}

/* Training waited `waited` ms at a boundary for fragment f's round, sent `trained` ms earlier, `barrier` ms
 * of the round spent waiting at its barrier for the other workers: the rest of the round is longer than
 * the D intervals it had, and compute stalls at every boundary. Say so, with what hides it, at most once a
 * minute (a short wait is noise: a tenth of the intervals and 50 ms). A wait for the others (late or
 * missing workers, a worker stopped while it waited) is no slow link: not counted. */
static void tell_round_longer(diloco *d, int f, uint64_t trained, uint64_t waited, uint64_t barrier)
{
    uint64_t now = now_ms(), link = waited > barrier ? waited - barrier : 0;
    if (link < 50 || link * 10 < trained) return;
    if (d->stream_wait_told_ms != 0 && now - d->stream_wait_told_ms < STREAM_WAIT_TELL_MS) return;
    d->stream_wait_told_ms = now;
    char had[96], hiders[200];
    if (d->inflight_max == 1)
        snprintf(had, sizeof had, "the interval of %d steps", stream_interval(d));
    else
        snprintf(had, sizeof had, "the %d intervals of %d steps it had in flight", d->inflight_max, stream_interval(d));
    round_hiders(d, hiders, sizeof hiders);
    log_warn("fragment %d's round took %.2f s, longer than %s (%.2f s): training waited %.2f s for it. Over a slow "
             "or distant link, %s hide a round (docs/compression.md, \"What a user feels\")",
             f, (double)(trained + link) / 1000.0, had, (double)trained / 1000.0, (double)link / 1000.0, hiders);
}

/* Wait until s's round is over: its thread ended (async), or said so (sync: it goes on as f's tail). */
static void join_slot(diloco *d, stream_slot *s)
{
    if (!s->threaded) return;
    if (!dl_stream_overlap(d)) {
        pthread_join(s->thread, NULL);
    } else {
        pthread_mutex_lock(&d->stream_mu);
        while (!s->net_done) pthread_cond_wait(&d->stream_cv, &d->stream_mu);
        pthread_mutex_unlock(&d->stream_mu);
    }
    s->threaded = 0;
}

static int settle_slot(diloco *d, stream_slot *s, char *err, size_t errlen)
{
    d->cur = s->info; /* what the round counted, for its record */
    d->base_busy = base_busy(d);
    int rc = round_settle(d, s->frag, s->round, s->rc, s->err, s->t0, d->o.fragment_alpha, err, errlen);
    d->base_busy = 0;
    return rc;
}

/* Settle s, whose outcome may register again or fetch everything, with no other thread of ours touching a
 * fragment: the others in flight and the fragments' threads (D > 1) are waited for first (the outcomes of
 * those in flight kept, settled after it, unless everything was fetched again meanwhile: then they are
 * dropped, as superseded). */
static int settle_alone(diloco *d, stream_slot *s, char *err, size_t errlen)
{
    for (int i = 0; i < d->inflight_count; i++) join_slot(d, slot_at(d, i));
    join_tails(d);
    int fetched = d->fetched_all, changed = settle_slot(d, s, err, errlen);
    if (d->inflight_count > 0 && (changed < 0 || d->fetched_all != fetched)) {
        log_info("fragment %d's round: dropping the outcome of the %d later round(s) in flight (%s)", s->frag,
                 d->inflight_count, changed < 0 ? "an unrecoverable error" : "every fragment was fetched again");
        d->inflight_count = 0;
    }
    return changed;
}

/* Wait for the oldest fragment in flight and apply its result. at_boundary: the schedule's own wait
 * (stream_step), where a wait means the round outlasts the intervals in flight; not a force sync's or the
 * session's end. */
static stream_slot *take_oldest(diloco *d, int at_boundary)
{
    stream_slot *s = slot_at(d, 0);
    uint64_t t_join = now_ms();
    int threaded = s->threaded;
    join_slot(d, s);
    if (threaded && at_boundary)
        tell_round_longer(d, s->frag, t_join - s->t0, now_ms() - t_join, (uint64_t)(s->info.wait_seconds * 1000.0));
    d->inflight_head = (d->inflight_head + 1) % d->inflight_max;
    d->inflight_count--;
    return s; /* (its slot is free: valid until the next launch) */
}

static int finish_oldest(diloco *d, int at_boundary, char *err, size_t errlen)
{
    stream_slot *s = take_oldest(d, at_boundary);
    if (dl_stream_overlap(d) && round_settle_refetches(d, s->rc)) return settle_alone(d, s, err, errlen);
    return settle_slot(d, s, err, errlen);
}

/* Every fragment in flight, oldest first: 1 when params changed, -1 at the first unrecoverable outcome
 * (the rest stay in flight). */
static int finish_all(diloco *d, int at_boundary, char *err, size_t errlen)
{
    int changed = 0;
    while (d->inflight_count > 0) {
        int rc = finish_oldest(d, at_boundary, err, errlen);
        if (rc < 0) return -1;
        changed |= rc;
    }
    join_tails(d); /* what follows (a force sync, a registration, the end) may touch every fragment */
    return changed;
}

int stream_finish_fragment(diloco *d, char *err, size_t errlen)
{
    return finish_all(d, 0, err, errlen);
}

void stream_finish_inflight(diloco *d)
{
    if (!d->inflight || !d->tails) return; /* an open that failed before its buffers: nothing ran */
    if (d->grp) { /* a group's rounds are settled by its ranks together (group.c): at the end, only ended */
        stream_drop_inflight(d);
        return;
    }
    char err[256];
    while (d->inflight_count > 0) stream_finish_fragment(d, err, sizeof err);
    join_tails(d);
}

/* ---- a process group's rounds in flight (group.c settles them, its ranks together) ------------------- */

void stream_launch(diloco *d, int f, const async_plan *plan)
{
    launch(d, f, 0, plan);
}

void stream_take_oldest(diloco *d, stream_slot *out)
{
    *out = *take_oldest(d, 1);
}

void stream_drop_inflight(diloco *d)
{
    for (int i = 0; i < d->inflight_count; i++) join_slot(d, slot_at(d, i));
    d->inflight_count = 0;
    join_tails(d);
}

int stream_base_busy(diloco *d)
{
    return base_busy(d);
}

int stream_interval(const diloco *d)
{
    int i = d->sync_every / d->rc.nfragments;
    return i < 1 ? 1 : i;
}

/* Whether fragment f's round is in flight (its version is its thread's until it is settled). */
static int fragment_in_flight(const diloco *d, int f)
{
    for (int i = 0; i < d->inflight_count; i++)
        if (slot_at(d, i)->frag == f) return 1;
    return 0;
}

/* The fragment this boundary sends. A sync run's fragments take their rounds in turn (0, 1, ..., F-1, 0,
 * ...), so the one the run syncs next is the first whose round is the lowest: the same as counting in
 * turn while we keep pace, and the run's own order again after anything moved one of ours (a round lost
 * as stale, a new registration, a joiner's first fetch). Counting alone would keep such a worker one
 * fragment out of phase: its fragment in flight would wait at a barrier for the others, whose own
 * fragment in flight waits for it, for ever. After a round that failed (its version unknown to us) the
 * same fragment goes again: its round is found committed (stale) or still open, and the next boundary
 * is in phase again. Fragments in flight are not candidates (D > 1: the others are). Async fragments have no
 * common round, and go in turn: taking one moves the turn on. */
int stream_next_fragment(diloco *d)
{
    if (d->rc.async) {
        int f = d->frag_next;
        d->frag_next = (f + 1) % d->rc.nfragments;
        return f;
    }
    int next = -1;
    for (int f = 0; f < d->rc.nfragments; f++)
        if (!fragment_in_flight(d, f) && (next < 0 || d->frag_version[f] < d->frag_version[next])) next = f;
    return next;
}

void stream_force_order(const diloco *d, int *order)
{
    for (int i = 0; i < d->rc.nfragments; i++) { /* insertion by (round, index) in a sync run: F is small */
        int j = i;
        if (!d->rc.async)
            for (; j > 0 && d->frag_version[order[j - 1]] > d->frag_version[i]; j--) order[j] = order[j - 1];
        order[j] = i;
    }
}

/* A boundary whose settling registered again and fetched every fragment has, for the next fragment, a Δ
 * of zero, trained over no step. Async, it sends nothing: the Δ would still take a place in its order and
 * an outer step (its momentum alone); the next boundary comes a whole interval later and sends that
 * fragment, as after a registration between two boundaries (after_step.c, rejoin_now). Sync, the fragment's
 * round goes on in turn, fresh: where it does not expect us we take its result without arriving, so that
 * the zero Δ is not averaged in (round.c, sync_round). (Skipping the boundary would put each of our next
 * rounds one interval behind the others' and lose it as stale, until a round that waits for us.) */
int stream_step(diloco *d, char *err, size_t errlen)
{
    int changed = 0, fetched = d->fetched_all;
    while (d->inflight_count >= d->inflight_max) {
        int rc = finish_oldest(d, 1, err, errlen);
        if (rc < 0) return -1;
        changed |= rc;
    }
    int fresh = d->fetched_all != fetched;
    if (d->rc.async && fresh) return changed;
    int f = stream_next_fragment(d);
    int began = begin_fragment(d, f, fresh, err, errlen);
    return began < 0 ? -1 : changed | began;
}
