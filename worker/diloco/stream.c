/* stream.c: when a worker syncs, and the public entry points diloco_after_step / diloco_force_sync.
 *
 * Plain DiLoCo (one fragment): every H inner steps the whole parameter vector syncs, blocking.
 *
 * Streaming DiLoCo (F fragments, from the run): every H/F steps one fragment, in turn, is sent while
 * training goes on. At each fragment boundary:
 *   1. the fragment in flight (sent one interval ago) is waited for and applied:
 *      params[f] = alpha*params[f] + (1-alpha)*global[f]  (alpha 0: take the global values);
 *   2. the next fragment's pseudo-gradient is computed here (we own params) and its network round
 *      (push, barrier, get) runs on a background thread that touches only base[f].
 * So at most one fragment is in flight, its result is applied after one interval (torchft's
 * fragment_sync_delay = H/F), and compute waits only if a transfer takes longer than an interval.
 * The schedule is a pure function of the step count, which is what makes a Streaming run exactly
 * reproducible (tests/it_stream_*.sh). */
#include <inttypes.h>
#include <string.h>

#include "internal.h"
#include "log.h"
#include "util.h"

/* DyLU: take the H the run assigned us, at a sync boundary. */
static void adopt_dylu(diloco *d) {
    pthread_mutex_lock(&d->hb_mu);
    if (d->o.dylu && d->dylu_h > 0) d->sync_every = d->dylu_h;
    pthread_mutex_unlock(&d->hb_mu);
}

/* A sync failed for good: count it; too many in a row and we register again from scratch. */
static int on_failure(diloco *d, const char *why, char *err, size_t errlen) {
    if (dl_stopping(d)) {
        if (why != err) err_set(err, errlen, "%s", why); /* callers often pass err itself as why */
        return -1;
    }
    d->fail_streak++;
    log_error("sync failed (%d in a row, limit %d): %s", d->fail_streak, d->o.max_sync_retries, why);
    if (d->fail_streak <= d->o.max_sync_retries) return 0; /* training goes on; the next sync tries again */
    d->fail_streak = 0;
    log_warn("registering again after %d failed syncs", d->o.max_sync_retries + 1);
    if (dl_register(d, err, errlen) < 0 || dl_fetch_all(d, err, errlen) < 0) return -1;
    return 1;
}

/* A shard's durable state is corrupt: wait for `coordinator repair`, then continue from the repaired
 * global parameters (a version above every one we hold), dropping the local progress of every fragment. */
static int after_repair(diloco *d, int f, int64_t round, const char *why, uint64_t t0, char *err, size_t errlen) {
    if (dl_wait_repaired(d, why, err, errlen) < 0)
        return dl_stopping(d) ? -1 : 0; /* shut down meanwhile: the trainer sees diloco_stop_requested */
    d->fail_streak = 0;
    d->refetch_all = 0;
    if (dl_fetch_all(d, err, errlen) < 0) return on_failure(d, err, err, errlen);
    sync_record(d, f, round, t0, 1);
    return 1;
}

/* Apply the outcome of fragment f's round. 1: params changed; 0: not; -1: unrecoverable. */
static int settle(diloco *d, int f, int64_t round, int rc, const char *why, uint64_t t0, double alpha, char *err,
                  size_t errlen) {
    if (rc == DL_CORRUPT) return after_repair(d, f, round, why, t0, err, errlen);
    if (rc == DL_FAIL) return on_failure(d, why, err, errlen);
    d->fail_streak = 0;
    if (d->refetch_all) { /* evicted: everything comes from the run again */
        d->refetch_all = 0;
        if (dl_fetch_all(d, err, errlen) < 0) return on_failure(d, err, err, errlen);
        sync_record(d, f, round, t0, 1);
        return 1;
    }
    if (sync_apply_fragment(d, f, rc == DL_OK ? alpha : 0.0, err, errlen) < 0) return -1;
    sync_record(d, f, round, t0, rc != DL_OK);
    adopt_dylu(d);
    return 1;
}

/* Fragment f's Δ from params; if our own parameters diverged, take the global ones instead. Sync mode
 * first settles the previous round (whose parameters we took before they were durable), because Δ is
 * about to overwrite the pseudo-gradient kept for it. 0: send Δ; 1: params reset instead; -1: error;
 * DL_CORRUPT: a shard's durable state is corrupt (err says which). */
static int prepare_delta(diloco *d, int f, char *err, size_t errlen) {
    uint64_t t0 = now_ms();
    if (!d->rc.async) {
        int c = sync_confirm_durable(d, f, err, errlen);
        if (c == DL_STALE) {
            sync_record(d, f, d->frag_version[f] - 1, t0, 1); /* params changed: report the version taken */
            return 1;
        }
        if (c == DL_CORRUPT) return DL_CORRUPT;
        if (c != DL_OK) return -1;
    }
    if (sync_compute_delta(d, f, err, errlen) == 0) return 0;
    log_error("%s; resetting to the global parameters", err);
    if (dl_fetch_fragment(d, f, d->frag_version[f], 1, err, errlen) < 0) return -1;
    sync_record(d, f, d->frag_version[f] - 1, t0, 1);
    return 1;
}

/* One fragment, blocking. */
static int sync_now(diloco *d, int f, double alpha, char *err, size_t errlen) {
    sync_begin(d);
    uint64_t t0 = now_ms();
    int64_t round = d->frag_version[f];
    int p = prepare_delta(d, f, err, errlen);
    if (p == DL_CORRUPT) return after_repair(d, f, round, err, t0, err, errlen);
    if (p != 0) return p < 0 ? on_failure(d, err, err, errlen) : 1;
    int rc = sync_fragment_net(d, f, err, errlen);
    return settle(d, f, round, rc, err, t0, alpha, err, errlen);
}

static void *inflight_main(void *p) {
    diloco *d = p;
    log_sink *prev = log_use_sink(&d->log); /* also run in line, on the caller's thread */
    d->inflight_rc = sync_fragment_net(d, d->inflight, d->inflight_err, sizeof d->inflight_err);
    log_use_sink(prev);
    return NULL;
}

/* 1 when params changed (a repair was waited for), -1 unrecoverable, else 0. */
static int begin_fragment(diloco *d, int f, char *err, size_t errlen) {
    uint64_t t0 = now_ms();
    sync_begin(d);
    int p = prepare_delta(d, f, err, errlen);
    if (p == DL_CORRUPT) return after_repair(d, f, d->frag_version[f], err, t0, err, errlen);
    if (p != 0) return 0; /* reset to global (or failed to): nothing to send this time */
    d->inflight = f;
    d->inflight_t0 = now_ms();
    d->inflight_round = d->frag_version[f];
    d->inflight_err[0] = '\0';
    d->inflight_threaded = pthread_create(&d->inflight_thread, NULL, inflight_main, d) == 0;
    if (!d->inflight_threaded) inflight_main(d); /* no thread: sync in line, correct but not overlapped */
    return 0;
}

/* Wait for the fragment in flight and apply it. */
static int finish_fragment(diloco *d, char *err, size_t errlen) {
    if (d->inflight < 0) return 0;
    if (d->inflight_threaded) pthread_join(d->inflight_thread, NULL);
    int f = d->inflight;
    d->inflight = -1;
    return settle(d, f, d->inflight_round, d->inflight_rc, d->inflight_err, d->inflight_t0, d->o.fragment_alpha,
                  err, errlen);
}

void stream_finish_inflight(diloco *d) {
    char err[256];
    if (d->inflight >= 0) finish_fragment(d, err, sizeof err);
}

static int stream_interval(const diloco *d) {
    int i = d->sync_every / d->rc.nfragments;
    return i < 1 ? 1 : i;
}

/* Count the step and the time it took (since the previous call returned): DyLU's speed. */
static void count_step(diloco *d) {
    uint64_t now = dl_wall_us();
    pthread_mutex_lock(&d->hb_mu);
    d->total_steps++;
    if (d->step_end_us && now > d->step_end_us) {
        d->compute_us += now - d->step_end_us;
        d->compute_steps++;
    }
    pthread_mutex_unlock(&d->hb_mu);
}

static int after_step(diloco *d, char *err, size_t errlen);

int diloco_after_step(diloco *d, char *err, size_t errlen) {
    count_step(d);
    log_sink *prev = log_use_sink(&d->log);
    int rc = after_step(d, err, errlen);
    log_use_sink(prev);
    pthread_mutex_lock(&d->hb_mu);
    d->step_end_us = dl_wall_us();
    pthread_mutex_unlock(&d->hb_mu);
    return rc;
}

static int after_step(diloco *d, char *err, size_t errlen) {
    d->steps++;
    if (d->rc.nfragments == 1) {
        if (d->steps < d->sync_every) return 0;
        d->steps = 0;
        return sync_now(d, 0, 0.0, err, errlen);
    }
    if (d->steps % stream_interval(d) != 0) return 0;
    int changed = finish_fragment(d, err, errlen);
    if (changed < 0) return -1;
    int began = begin_fragment(d, d->frag_next, err, errlen);
    if (began < 0) return -1;
    d->frag_next = (d->frag_next + 1) % d->rc.nfragments;
    return changed | began;
}

static int force_sync(diloco *d, char *err, size_t errlen);

int diloco_force_sync(diloco *d, char *err, size_t errlen) {
    log_sink *prev = log_use_sink(&d->log);
    int rc = force_sync(d, err, errlen);
    log_use_sink(prev);
    return rc;
}

static int force_sync(diloco *d, char *err, size_t errlen) {
    int changed = finish_fragment(d, err, errlen);
    if (changed < 0) return -1;
    for (int f = 0; f < d->rc.nfragments; f++) {
        int rc = sync_now(d, f, 0.0, err, errlen);
        if (rc < 0) return -1;
        changed |= rc;
    }
    d->steps = 0;
    return changed;
}

int diloco_steps_to_sync(const diloco *d) {
    if (d->rc.nfragments == 1) return d->sync_every - d->steps;
    return stream_interval(d) - d->steps % stream_interval(d);
}
