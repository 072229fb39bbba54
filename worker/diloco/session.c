/* session.c: a libdiloco session's life: open (connect, read the run, register, fetch the global
 * parameters) and close. Commands to Redis and registration are control.c's. */
#include <inttypes.h>
#include <stdlib.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"
#include "math/codec.h"
#include "redis/rconn.h"
#include "wake.h"

/* Streaming: a fragment goes every H / F steps (rounded down, at least 1), so each fragment syncs every
 * F x that many steps: an H that F does not divide, or below F, is silently another H (H = 6 and H = 2 with
 * 4 fragments both sync each fragment every 4 steps, measured). Legal, so said once, with the H to use. */
static void warn_stream_interval(const diloco *d)
{
    int f = d->rc.nfragments, h = d->sync_every;
    if (f < 2 || h % f == 0 || d->o.dylu) return; /* (DyLU assigns H at every round) */
    int every = stream_interval(d) * f, near = (h + f / 2) / f * f;
    log_warn("--sync-every %d (diloco_options.sync_every) is %s the %d fragments of run '%s': a fragment is sent "
             "every %d step(s), so each fragment syncs every %d steps, not %d; use a multiple of %d (e.g. %d) for "
             "the H you meant",
             h, h < f ? "below" : "not a multiple of", f, d->run, stream_interval(d), every, h, f, near < f ? f : near);
}

/* The H in effect, for the join line: a Streaming run's F x floor(H/F) (warn_stream_interval), with the one
 * asked for beside it where they differ. */
static void effective_h(const diloco *d, char *out, size_t cap)
{
    int f = d->rc.nfragments, h = d->sync_every;
    if (f < 2 || h % f == 0 || d->o.dylu) {
        snprintf(out, cap, "H=%d", h);
        return;
    }
    snprintf(out, cap, "H=%d, not the %d asked for", stream_interval(d) * f, h);
}

static int session_open(diloco *d, const diloco_options *o, float *params, size_t numel, char *err, size_t errlen)
{
    if (o->group.size > 1) { /* (a group's sync Streaming rounds are in flight on threads too: the listener) */
        if (group_open(d, o, params, numel, err, errlen) < 0) return -1;
        return dl_stream_overlap(d) && wake_hub_start(d, err, errlen) < 0 ? -1 : 0;
    }
    if (state_init(d, o, params, numel, err, errlen) < 0) return -1;
    warn_stream_interval(d);
    if (dl_register(d, err, errlen) < 0) return -1;
    /* rounds of several fragments at their barriers at once: one listener pops our wake list (wake.c) */
    if (dl_stream_overlap(d) && wake_hub_start(d, err, errlen) < 0) return -1;
    if (owners_refresh(d, err, errlen) < 0) return -1;
    /* beating before the first fetch: with a short heartbeat timeout, a fetch that waits for a round to
     * close or for a shard-server to come back would otherwise get us evicted before we trained */
    if (heartbeat_start(d, err, errlen) < 0) return -1;
    if (fetch_all(d, err, errlen) < 0) return -1;
    char h[64];
    effective_h(d, h, sizeof h);
    log_info("worker %s joined run %s at version %" PRId64 " (%zu parameters, %d shards, %d fragment(s), %s, %s%s)",
             d->worker_id, d->run, d->frag_version[0], numel, d->rc.nshards, d->rc.nfragments, h,
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
    for (int i = 0; i < MAX_CONNS; i++) d->conns[i].fd = -1; /* and no connection (not fd 0) */
    /* -1: none yet. The first heartbeat comes before any step (heartbeat.c), and a 0 there would show as
     * a speed and a loss the run reported (dl_heartbeat keeps -1 as "no report": status shows "-") */
    d->loss = d->speed = -1;
    log_sink_init(&d->log, o->log_callback, o->log_ctx, o->log_level);
    log_sink *prev = log_use_sink(&d->log);
    int rc = session_open(d, o, params, numel, err, errlen);
    log_use_sink(prev);
    if (rc < 0) {
        int stopped = dl_stopping(d); /* (a group's ranks: every one, once they agreed on a stop) */
        diloco_close(d);
        return stopped ? DILOCO_STOPPED : -1;
    }
    *out = d;
    return 0;
}

/* Our last Δ of each fragment must not vanish with us: in sync mode while its round is not durable (a
 * server that died before its commit needs it again), in async mode while its submission is pending (its
 * places wait for it). Best effort, within the sync timeout; asked to stop, a Redis that does not answer
 * gets CLOSING_REDIS_TIMEOUT_MS a command (control.c) and a silent shard-server 100 ms (conn.c). */
static void settle_last_rounds(diloco *d)
{
    for (int f = 0; d->base && dl_inc(d) > 0 && f < d->rc.nfragments; f++) {
        char err[256];
        if (!d->rc.async && sync_confirm_durable(d, f, err, sizeof err) == DL_FAIL)
            log_warn("closing before fragment %d's last round was confirmed durable: %s", f, err);
        if (d->rc.async && async_complete_closing(d, f, err, sizeof err) != DL_OK)
            log_warn("closing with fragment %d's last submission not completed: %s (its window may be lost; it is "
                     "never applied twice)",
                     f, err);
    }
}

/* Leave the run (a group's rank: the group leaves, GONE if it has). Best effort: a worker that cannot
 * say so is counted out when its heartbeats stop (the run's heartbeat timeout), and the log says which. */
static void deregister(diloco *d)
{
    int64_t inc = dl_inc(d);
    if (inc <= 0 || !d->ctl || rconn_broken(d->ctl)) return;
    redisReply *r = d->grp ? rconn_command(d->ctl, "FCALL dl_deregister 1 %s %s %lld %d", d->config_key, d->worker_id,
                                           (long long)inc, d->grp_rank)
                           : rconn_command(d->ctl, "FCALL dl_deregister 1 %s %s %lld", d->config_key, d->worker_id,
                                           (long long)inc);
    char why[256];
    if (r == NULL || r->type == REDIS_REPLY_ERROR) rconn_reply_error(d->ctl, r, why, sizeof why);
    if (r == NULL)
        log_warn("leaving run %s without deregistering (%s): the run counts us out when our heartbeats time out",
                 d->run, why);
    else if (r->type == REDIS_REPLY_ERROR) /* (counted out already: evicted, or the run was reset) */
        log_info("leaving run %s: %s", d->run, why);
    if (r) freeReplyObject(r);
}

static void session_close(diloco *d)
{
    dl_closing(d);
    stream_finish_inflight(d);
    settle_last_rounds(d);
    wake_hub_stop(d);
    gmember_wait_committed(d); /* still beating: the other ranks' parts of the last round too */
    heartbeat_stop(d);
    deregister(d);
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
