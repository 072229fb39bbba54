/* after_step.c: when a worker syncs: the public entry points diloco_after_step, diloco_force_sync and
 * diloco_steps_to_sync, dispatching by the run's mode.
 *
 *   plain DiLoCo (one fragment): every H inner steps the whole parameter vector syncs, blocking
 *     (round_blocking, round.c);
 *   Streaming DiLoCo (F fragments): every H/F steps one fragment is sent while training goes on
 *     (streaming.c);
 *   async DiLoCo (either of the above in an async run): the same schedule; the network part of a round
 *     is async.c's submission instead of sync.c's barrier round. */

#include "base/log.h"
#include "base/util.h"
#include "internal.h"

/* Count the step and the time it took (since the previous call returned): DyLU's speed, on the monotonic clock
 * (on the wall clock, one that jumped an hour forward counted an hour of compute for a step: the speed reported
 * fell to ~0 for some 40 beats, tests/it_wall_clock_jump.sh). Returns whether the
 * heartbeat thread found us evicted: read under the lock taken here anyway, so checking it at every step
 * costs nothing. */
static int count_step(diloco *d)
{
    uint64_t now = now_us();
    pthread_mutex_lock(&d->hb_mu);
    d->total_steps++;
    if (d->step_end_us && now > d->step_end_us) {
        d->compute_us += now - d->step_end_us;
        d->compute_steps++;
    }
    int evicted = d->evicted;
    pthread_mutex_unlock(&d->hb_mu);
    return evicted;
}

static int after_step(diloco *d, int evicted, char *err, size_t errlen);

int diloco_after_step(diloco *d, char *err, size_t errlen)
{
    int evicted = count_step(d);
    log_sink *prev = log_use_sink(&d->log);
    int rc = after_step(d, evicted, err, errlen);
    log_use_sink(prev);
    pthread_mutex_lock(&d->hb_mu);
    d->step_end_us = now_us();
    pthread_mutex_unlock(&d->hb_mu);
    return rc;
}

/* Evicted mid-interval (the heartbeat thread learnt it): stop training the interval as a dead incarnation
 * at once, and start a new one from the parameters fetched on registering again (round_rejoin). A Streaming
 * worker first settles its fragment in flight (that round may have registered us again already: then only
 * the interval starts over). Not a process group: its ranks must all stop at the same step, and each rank's
 * heartbeat learns of the eviction at its own time, so they agree at collectives made every few steps
 * (group_step, group.c's CHECK). */
static int rejoin_now(diloco *d, char *err, size_t errlen)
{
    int stream = d->rc.nfragments > 1;
    int interval = stream ? stream_interval(d) : d->sync_every;
    int step = stream ? (d->steps - 1) % interval + 1 : d->steps;
    d->steps = 0; /* the next sync (boundary) comes a whole interval after the parameters we are about to take */
    int changed = stream ? stream_finish_fragment(d, err, errlen) : 0;
    if (changed < 0) return -1;
    if (stream && !dl_evicted(d)) return changed;
    return round_rejoin(d, step, interval, err, errlen) | changed;
}

static int after_step(diloco *d, int evicted, char *err, size_t errlen)
{
    d->steps++;
    if (evicted && !d->grp) return rejoin_now(d, err, errlen);
    if (d->rc.nfragments == 1) {
        if (d->steps < d->sync_every) return d->grp ? group_step(d, err, errlen) : 0;
        d->steps = 0;
        return d->grp ? group_round(d, 0, err, errlen) : round_blocking(d, 0, 0.0, err, errlen);
    }
    if (d->steps % stream_interval(d) != 0) return d->grp ? group_step(d, err, errlen) : 0;
    return d->grp ? group_stream_step(d, err, errlen) : stream_step(d, err, errlen);
}

static int force_sync(diloco *d, char *err, size_t errlen);

int diloco_force_sync(diloco *d, char *err, size_t errlen)
{
    log_sink *prev = log_use_sink(&d->log);
    int rc = force_sync(d, err, errlen);
    log_use_sink(prev);
    return rc;
}

static int force_sync(diloco *d, char *err, size_t errlen)
{
    int changed = d->grp ? group_settle_all(d, err, errlen) : stream_finish_fragment(d, err, errlen);
    if (changed < 0) return -1;
    int order[RUNCONF_MAX_FRAGMENTS];
    stream_force_order(d, order);
    for (int i = 0; i < d->rc.nfragments; i++) {
        int f = order[i];
        int rc = d->grp ? group_round(d, f, err, errlen) : round_blocking(d, f, 0.0, err, errlen);
        if (rc < 0) return -1;
        changed |= rc;
    }
    d->steps = 0;
    return changed;
}

int diloco_steps_to_sync(const diloco *d)
{
    if (d->rc.nfragments == 1) return d->sync_every - d->steps;
    return stream_interval(d) - d->steps % stream_interval(d);
}
