/* session.c: a libdiloco session's life: open (connect, read the run, register, fetch the global
 * parameters) and close. Commands to Redis and registration are control.c's. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "internal.h"
#include "keys.h"
#include "log.h"
#include "rconn.h"
#include "util.h"

/* Fetch the shards of fragment f at version >= min_version into base (and params when adopt).
 * Shards commit one by one, so a fetch may see some shards one version ahead: fetch again at the
 * highest version seen until all of the fragment's shards agree. */
int dl_fetch_fragment(diloco *d, int f, int64_t min_version, int adopt, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f);
    uint64_t deadline = now_ms() + (uint64_t)d->o.sync_timeout_ms;
    for (;;) {
        int rc = dl_fetch_shards(d, first, last, min_version, err, errlen);
        if (rc == DL_CORRUPT) { /* the repaired version is above min_version: the same fetch gets it */
            if (repair_wait(d, err, err, errlen) < 0) return -1;
            deadline = now_ms() + (uint64_t)d->o.sync_timeout_ms;
            continue;
        }
        if (rc == DL_FAIL) return -1;
        if (rc == DL_OK) {
            int64_t lo = d->shard_version[first], hi = lo;
            for (int k = first + 1; k < last; k++) {
                if (d->shard_version[k] < lo) lo = d->shard_version[k];
                if (d->shard_version[k] > hi) hi = d->shard_version[k];
            }
            if (lo == hi) {
                d->frag_version[f] = hi;
                d->frag_incomplete[f] = 0; /* base is one consistent version: no earlier round to finish */
                if (!adopt) return 0;
                params_adopt(d, first, last);
                size_t off = (size_t)d->rc.shard_bounds[first];
                return params_changed(d, off, (size_t)d->rc.shard_bounds[last] - off, err, errlen);
            }
            min_version = hi;
        }
        if (dl_stopping(d)) {
            err_set(err, errlen, "stopped while fetching the global parameters");
            return -1;
        }
        if (now_ms() > deadline) {
            char last[256];
            snprintf(last, sizeof last, "%s", err && err[0] ? err : "no answer"); /* err is written below */
            err_set(err, errlen, "could not fetch the global parameters within %d ms (last: %s)", d->o.sync_timeout_ms,
                    last);
            return -1;
        }
        sleep_ms(50);
    }
}

/* A sync-mode joiner the open round does not wait for (dl_register put it at the next one) waits for
 * that round to close and starts from its result, together with the workers that close it. Training
 * from the open round's parameters instead would almost never make it in time (the others are already
 * part-way through the round): that work is lost as STALE, and the joiner then starts the next round,
 * where the barrier does wait for it, late by the same amount, stalling every worker. Idling costs this
 * worker alone. One fragment only: Streaming DiLoCo's schedule is a function of the step count. */
int dl_wait_joined_round(diloco *d, int f, char *err, size_t errlen)
{
    if (d->rc.async || d->rc.nfragments != 1 || d->frag_joined[f] <= d->frag_version[f]) return 0;
    int rc = barrier_wait_closed(d, f, d->frag_version[f], err, errlen);
    if (rc == DL_FAIL) return -1;
    if (rc == DL_OK) d->frag_version[f] = d->frag_joined[f];
    /* DL_NEED (every member it waited for is gone: it needs our arrival to close), DL_STALE,
     * DL_EVICTED: the fetch below takes the version registration gave us and we train for the open
     * round (an eviction shows at the first arrival, which registers again) */
    return 0;
}

/* Every fragment at the version registration gave us (or, for a joiner of the next round, at that
 * round's start), into base and params. */
int dl_fetch_all(diloco *d, char *err, size_t errlen)
{
    for (int f = 0; f < d->rc.nfragments; f++) {
        if (dl_wait_joined_round(d, f, err, errlen) < 0) return -1;
        if (dl_fetch_fragment(d, f, d->frag_version[f], 1, err, errlen) < 0) return -1;
    }
    return 0;
}

static int session_open(diloco *d, const diloco_options *o, float *params, size_t numel, char *err, size_t errlen)
{
    if (o->group.size > 1) return group_open(d, o, params, numel, err, errlen);
    if (state_init(d, o, params, numel, err, errlen) < 0) return -1;
    if (dl_register(d, err, errlen) < 0) return -1;
    if (owners_refresh(d, err, errlen) < 0) return -1;
    /* beating before the first fetch: with a short heartbeat timeout, a fetch that waits for a round to
     * close or for a shard-server to come back would otherwise get us evicted before we trained */
    if (heartbeat_start(d, err, errlen) < 0) return -1;
    if (dl_fetch_all(d, err, errlen) < 0) return -1;
    log_info("worker %s joined run %s at version %" PRId64 " (%zu parameters, %d shards, %d fragment(s), H=%d, %s%s)",
             d->worker_id, d->run, d->frag_version[0], numel, d->rc.nshards, d->rc.nfragments, d->sync_every,
             codec_name(d->push_dtype), d->ef ? " with error feedback" : "");
    return 0;
}

int diloco_open(const diloco_options *o, float *params, size_t numel, diloco **out, char *err, size_t errlen)
{
    diloco *d = calloc(1, sizeof *d);
    if (!d) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    log_sink_init(&d->log, o->log_callback, o->log_ctx, o->log_level);
    log_sink *prev = log_use_sink(&d->log);
    int rc = session_open(d, o, params, numel, err, errlen);
    log_use_sink(prev);
    if (rc < 0) {
        diloco_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

static void session_close(diloco *d)
{
    stream_finish_inflight(d);
    /* our last Δ must not vanish with us while its round is not durable (a server that died before its
     * commit needs it again); best effort, within the sync timeout */
    for (int f = 0; !d->rc.async && d->base && f < d->rc.nfragments; f++) {
        char err[256];
        if (dl_inc(d) > 0 && sync_confirm_durable(d, f, err, sizeof err) == DL_FAIL)
            log_warn("closing before fragment %d's last round was confirmed durable: %s", f, err);
    }
    group_wait_committed(d); /* still beating: the other ranks' parts of the last round too */
    heartbeat_stop(d);
    int64_t inc = dl_inc(d);
    if (inc > 0 && d->ctl && !rconn_broken(d->ctl)) { /* a group's rank: the group leaves (GONE if it has) */
        redisReply *r = d->grp ? rconn_command(d->ctl, "FCALL dl_deregister 1 %s %s %lld %d", d->config_key,
                                               d->worker_id, (long long)inc, d->grp_rank)
                               : rconn_command(d->ctl, "FCALL dl_deregister 1 %s %s %lld", d->config_key, d->worker_id,
                                               (long long)inc);
        if (r) freeReplyObject(r);
    }
    conn_close_all(d);
    state_free(d);
}

void diloco_close(diloco *d)
{
    if (!d) return;
    log_sink *prev = log_use_sink(&d->log);
    session_close(d);
    log_use_sink(prev);
    log_sink_destroy(&d->log);
    free(d);
}

void diloco_report(diloco *d, double loss, uint64_t tokens)
{
    pthread_mutex_lock(&d->hb_mu);
    d->loss = loss;
    d->tokens = tokens;
    pthread_mutex_unlock(&d->hb_mu);
}
