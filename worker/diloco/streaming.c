/* streaming.c: Streaming DiLoCo's schedule (F fragments, from the run): every H/F steps one fragment,
 * in turn, is sent while training goes on. At each fragment boundary:
 *   1. the fragment in flight (sent one interval ago) is waited for and applied:
 *      params[f] = alpha*params[f] + (1-alpha)*global[f]  (alpha 0: take the global values);
 *   2. the next fragment's pseudo-gradient is computed here (we own params) and its network round
 *      (push, barrier, get) runs on a background thread that touches only base[f].
 * So at most one fragment is in flight, its result is applied after one interval (torchft's
 * fragment_sync_delay = H/F), and compute waits only if a transfer takes longer than an interval.
 * While every worker keeps pace the schedule is a pure function of the step count, which is what makes a
 * Streaming run exactly reproducible (tests/it_stream_exactness.sh); a worker that joins or registers again
 * mid-run takes the run's order from the fragments' rounds (stream_next_fragment). after_step.c calls
 * stream_step at each interval; the round's preparation and settling are round.c's. */

#include "base/log.h"
#include "base/util.h"
#include "internal.h"

#define STREAM_WAIT_TELL_MS 60000 /* how often a round longer than an interval is said (tell_round_longer) */

static void *inflight_main(void *p)
{
    diloco *d = p;
    log_sink *prev = log_use_sink(&d->log); /* also run in line, on the caller's thread */
    d->inflight_rc = round_net(d, d->inflight, d->inflight_err, sizeof d->inflight_err);
    /* here, in the background: otherwise the fragment's next boundary asks Redis on the training thread,
     * one round trip of the WAN per interval (bench/wan_training, RTT 100 ms, intervals of 10 CPU GPT
     * steps: 96.7% and 82.0% of the speed kept before, 103.6% and 94.4% after, in two pairs of runs) */
    if (d->inflight_rc == DL_OK) round_confirm_early(d, d->inflight);
    log_use_sink(prev);
    return NULL;
}

/* 1 when params changed (reset to the global ones, a repair waited for), -1 unrecoverable, else 0. A
 * fragment whose Δ could not be prepared is a failed sync, as in round_blocking: it counts toward
 * --max-sync-retries (it used to be dropped, so a worker cut off from every shard-server never got there). */
static int begin_fragment(diloco *d, int f, char *err, size_t errlen)
{
    uint64_t t0 = now_ms();
    int64_t round = d->frag_version[f];
    round_begin(d);
    prep_outcome p = round_prepare_delta(d, f, err, errlen);
    if (p != PREP_SEND) return round_unsent(d, f, round, p, t0, err, errlen);
    d->inflight = f;
    d->inflight_t0 = now_ms();
    d->inflight_round = d->frag_version[f];
    d->inflight_err[0] = '\0';
    d->inflight_threaded = pthread_create(&d->inflight_thread, NULL, inflight_main, d) == 0;
    if (!d->inflight_threaded) inflight_main(d); /* no thread: sync in line, correct but not overlapped */
    return 0;
}

/* Training waited `waited` ms at a boundary for fragment f's round, sent `trained` ms earlier: the round is
 * longer than an interval, and compute stalls at every boundary. Say so, with what hides it, at most once a
 * minute (a short wait is noise: a tenth of the interval and 50 ms). */
static void tell_round_longer(diloco *d, int f, uint64_t trained, uint64_t waited)
{
    uint64_t now = now_ms();
    if (waited < 50 || waited * 10 < trained) return;
    if (d->stream_wait_told_ms != 0 && now - d->stream_wait_told_ms < STREAM_WAIT_TELL_MS) return;
    d->stream_wait_told_ms = now;
    log_warn("fragment %d's round took %.2f s, longer than the interval of %d steps (%.2f s): training waited "
             "%.2f s for it. Over a slow or distant link, fewer fragments (coordinator init --fragments) or a "
             "larger --sync-every make an interval long enough to hide a round (docs/compression.md, \"What a "
             "user feels\")",
             f, (double)(trained + waited) / 1000.0, stream_interval(d), (double)trained / 1000.0,
             (double)waited / 1000.0);
}

/* Wait for the fragment in flight and apply its result. at_boundary: the schedule's own wait (stream_step),
 * where a wait means the round outlasts an interval; not a force sync's or the session's end. */
static int finish_fragment(diloco *d, int at_boundary, char *err, size_t errlen)
{
    if (d->inflight < 0) return 0;
    uint64_t t_join = now_ms();
    if (d->inflight_threaded) pthread_join(d->inflight_thread, NULL);
    if (d->inflight_threaded && at_boundary)
        tell_round_longer(d, d->inflight, t_join - d->inflight_t0, now_ms() - t_join);
    int f = d->inflight;
    d->inflight = -1;
    return round_settle(d, f, d->inflight_round, d->inflight_rc, d->inflight_err, d->inflight_t0, d->o.fragment_alpha,
                        err, errlen);
}

int stream_finish_fragment(diloco *d, char *err, size_t errlen)
{
    return finish_fragment(d, 0, err, errlen);
}

void stream_finish_inflight(diloco *d)
{
    char err[256];
    if (d->inflight >= 0) stream_finish_fragment(d, err, sizeof err);
}

int stream_interval(const diloco *d)
{
    int i = d->sync_every / d->rc.nfragments;
    return i < 1 ? 1 : i;
}

/* The fragment this boundary sends. A sync run's fragments take their rounds in turn (0, 1, ..., F-1, 0,
 * ...), so the one the run syncs next is the first whose round is the lowest: the same as counting in
 * turn while we keep pace, and the run's own order again after anything moved one of ours (a round lost
 * as stale, a new registration, a joiner's first fetch). Counting alone would keep such a worker one
 * fragment out of phase: its fragment in flight would wait at a barrier for the others, whose own
 * fragment in flight waits for it, for ever. After a round that failed (its version unknown to us) the
 * same fragment goes again: its round is found committed (stale) or still open, and the next boundary
 * is in phase again. Async fragments have no common round, and go in turn. */
int stream_next_fragment(const diloco *d)
{
    if (d->rc.async) return d->frag_next;
    int next = 0;
    for (int f = 1; f < d->rc.nfragments; f++)
        if (d->frag_version[f] < d->frag_version[next]) next = f;
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

int stream_step(diloco *d, char *err, size_t errlen)
{
    int changed = finish_fragment(d, 1, err, errlen);
    if (changed < 0) return -1;
    int f = stream_next_fragment(d);
    int began = begin_fragment(d, f, err, errlen);
    if (began < 0) return -1;
    d->frag_next = (f + 1) % d->rc.nfragments;
    return changed | began;
}
