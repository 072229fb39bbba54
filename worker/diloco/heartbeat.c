/* heartbeat.c: the heartbeat thread of a libdiloco session.
 *
 * Every heartbeat_interval_ms it calls dl_heartbeat with our speed (inner steps per second of
 * training time, over the last beats with decaying weights: time spent syncing or waiting at a barrier is not counted, so
 * DyLU sees how fast this machine trains, not how long it waited for others), loss and tokens, on its own Redis connection so a blocked training thread never delays
 * it, naming the making of the run we joined (its created_ms: a run made again under its name since is refused
 * RECREATED, and the session stops as at a shutdown). The reply tells us if we were evicted (the training thread registers again at its next inner
 * step, after_step.c, or for a process group or a Streaming worker at its next sync; no beats until
 * then), whether the run was shut down, and the H that DyLU computed for us.
 *
 * A lost connection (Redis restarted, or a Sentinel failover) is opened again at once, not an
 * interval later; while that fails, the thread watches the Sentinels' failover announcements
 * (sentinel_watch, as rconn_connect_retry does for the training thread) and tries again the moment a
 * new master is named, else every RETRY_MS: the first beat on a new master comes as soon as the
 * training thread's first command, so the reaper's failover grace can stay short. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"
#include "redis/sentinel.h"

/* Each past heartbeat's share of the speed is SPEED_DECAY times the next one's: about ten beats count.
 * DyLU gives every worker H in proportion to its speed against the fastest member's, so the speed of
 * one interval (2 s), noisy on a shared machine, made the fastest at that moment everyone's reference
 * and every H too short (bench/quality's DyLU runs: 39-40 instead of 50, docs/quality.md). */
#define SPEED_DECAY 0.8

/* The speed we report: steps over seconds of inner steps, both summed with decaying weights (a ratio of
 * sums, so the first beat already gives the first interval's speed). Called under hb_mu. */
static void speed_update(diloco *d)
{
    d->speed_steps = SPEED_DECAY * d->speed_steps + (double)d->compute_steps;
    d->speed_us = SPEED_DECAY * d->speed_us + (double)d->compute_us;
    if (d->speed_us > 0) d->speed = d->speed_steps / (d->speed_us / 1e6);
    d->compute_us = d->compute_steps = 0;
}

static void beat_once(diloco *d, rconn *c)
{
    pthread_mutex_lock(&d->hb_mu);
    if (d->evicted) { /* until the training thread registers again, a beat would only be refused (and
                         recorded as a rejection of a stale worker) */
        pthread_mutex_unlock(&d->hb_mu);
        return;
    }
    uint64_t steps = d->total_steps;
    speed_update(d);
    long long inc = d->inc;
    double speed = d->speed, loss = d->loss;
    unsigned long long tokens = d->tokens;
    pthread_mutex_unlock(&d->hb_mu);

    redisReply *r =
        rconn_command(c, "FCALL dl_heartbeat 1 %s %s %lld %.6f %.6f %llu %llu %d %s", d->config_key, d->worker_id, inc,
                      speed, loss, (unsigned long long)steps, tokens, d->grp_rank, d->made_at);
    if (!r) return;
    int newly_evicted = 0, group_gone = 0, ended = 0;
    int end = r->type == REDIS_REPLY_ERROR ? dl_reply_end(d, r->str) : 0;
    pthread_mutex_lock(&d->hb_mu);
    if (end && d->inc == inc) {
        ended = !d->run_end;
        dl_end_told_locked(d, end);
    } else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "UNKNOWN_WORKER", 14) == 0 && d->inc == inc) {
        newly_evicted = !d->evicted;
        d->evicted = 1;
        snprintf(d->evicted_why, sizeof d->evicted_why, "%s",
                 strstr(r->str, " was kicked by the operator") ? "kicked by the operator"
                                                               : "heartbeats missed for longer than the timeout");
    } else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "GONE", 4) == 0 && d->inc == inc) {
        /* our group was ended by another of its ranks (not counted as a rejection): no more beats; the
         * training thread finds the group gone at its next sync, as after an eviction */
        group_gone = !d->evicted;
        d->evicted = 1;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2) {
        if (r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "shutdown") == 0)
            dl_shutdown_told_locked(d);
        if (r->element[1]->type == REDIS_REPLY_INTEGER) d->dylu_h = (int)r->element[1]->integer;
    }
    pthread_mutex_unlock(&d->hb_mu);
    /* not under hb_mu: the host's log callback must never hold up the training thread's calls */
    const char *gone = r->type == REDIS_REPLY_ERROR ? runconf_error_gone(r->str) : NULL;
    if (gone) {
        if (d->hb_gone_told_ms == 0 || now_ms() - d->hb_gone_told_ms >= RUN_GONE_LOG_EVERY_MS) {
            log_error("heartbeat failed: run '%s' is gone from this Redis (%s): " RUN_GONE_HINT, d->run, gone);
            d->hb_gone_told_ms = now_ms();
        }
    } else {
        d->hb_gone_told_ms = 0;
    }
    if (newly_evicted) log_warn("heartbeat: %s", r->str);
    if (ended && end == DILOCO_STOP_RECREATED)
        log_error("heartbeat: %s: the run this worker joined is gone; it stops (start it again to join the new run)",
                  r->str + 10);
    if (ended && end == DILOCO_STOP_REPLACED)
        log_error("heartbeat: %s: this process stops and leaves the id to the other (give each worker its own "
                  "--worker-id)",
                  r->str + 15);
    if (group_gone) log_info("heartbeat: %s; heartbeats stop", r->str + 5);
    freeReplyObject(r);
}

/* While Redis is away: how often a reconnect is tried (at most; the heartbeat interval if shorter),
 * so a stop request waits at most this long too. */
#define RETRY_MS 500

#define CONNECT_MS 5000    /* a connection attempt's limit */
#define WARN_EVERY_MS 5000 /* while Redis is away: one warning per this long */

/* The thread's connection, published in d->hb_conn under hb_mu, where heartbeat_stop interrupts it: the
 * stop sees it (and ends a beat that Redis does not answer), or the thread, which looks at the stop after
 * this, sees the stop. */
static void hb_publish(diloco *d, rconn *c)
{
    pthread_mutex_lock(&d->hb_mu);
    d->hb_conn = c;
    pthread_mutex_unlock(&d->hb_mu);
}

/* The connection for the next beat: c itself while it works, else a new one (NULL while Redis is
 * away; *warned rate-limits the warning to one per WARN_EVERY_MS). */
static rconn *beat_conn(diloco *d, rconn *c, uint64_t *warned)
{
    if (c && !rconn_broken(c)) return c;
    char err[256];
    if (c) {
        hb_publish(d, NULL);
        rconn_free(c);
    }
    /* (one attempt, whose handshake heartbeat_stop ends: a frozen Redis accepts the connection and answers
     * nothing, and the stop would wait for CONNECT_MS) */
    c = rconn_connect_retry(&d->url, CONNECT_MS, 0, (const volatile int *)&d->hb_stop, NULL, err, sizeof err);
    hb_publish(d, c);
    if (!c && now_ms() - *warned >= WARN_EVERY_MS) {
        log_warn("heartbeat: cannot reach Redis: %s", err);
        *warned = now_ms();
    }
    if (c && *warned != 0) {
        char where[300];
        log_info("heartbeat: Redis at %s answers again", rconn_server(c, where, sizeof where));
        *warned = 0;
    }
    return c;
}

/* Whether heartbeat_stop was called. */
static int stopping(diloco *d)
{
    pthread_mutex_lock(&d->hb_mu);
    int stop = d->hb_stop;
    pthread_mutex_unlock(&d->hb_mu);
    return stop;
}

/* Wait ms for the next beat: 1 when heartbeat_stop was called. Ends early (0) when the server closes c
 * (a killed or restarted master: reconnect now, not at the next beat). Waits in slices of SLICE_MS,
 * so a stop waits at most that long. */
#define SLICE_MS 100
static int wait_interval(diloco *d, rconn *c, int ms)
{
    for (uint64_t end = now_ms() + (uint64_t)ms;;) {
        if (stopping(d)) return 1;
        uint64_t now = now_ms();
        if (now >= end) return 0;
        int slice = end - now < SLICE_MS ? (int)(end - now) : SLICE_MS;
        if (c == NULL)
            sleep_ms((unsigned)slice);
        else if (rconn_wait_closed(c, slice))
            return stopping(d);
    }
}

/* Wait before the next reconnect: until the Sentinels announce a new master, or RETRY_MS. The
 * subscriptions are opened at the first failure (then tried again at once: an announcement made
 * before would be missed) and kept until connected. */
static int wait_reconnect(diloco *d, sentinel_watch **watch)
{
    int ms = d->o.heartbeat_interval_ms < RETRY_MS ? d->o.heartbeat_interval_ms : RETRY_MS;
    if (*watch == NULL && d->url.sentinel_master[0] != '\0') {
        *watch = sentinel_watch_open(&d->url, ms);
        if (*watch != NULL) return 0;
    }
    if (*watch == NULL || sentinel_watch_wait(*watch, ms) < 0) return wait_interval(d, NULL, ms);
    return stopping(d);
}

/* A beat refused by a Redis that does not lead (READONLY: the URL names a replica, a demoted master) broke c, and
 * so will every beat until it leads again: said once per WARN_EVERY_MS, with what to do (the barrier's note named
 * this very worker as the one whose heartbeat was late, and nothing else said why). */
static void tell_refused(const rconn *c, uint64_t *told)
{
    if (*told != 0 && now_ms() - *told < WARN_EVERY_MS) return;
    log_warn("heartbeat refused: %s; trying again", rconn_errstr(c));
    *told = now_ms();
}

static void *heartbeat_main(void *p)
{
    diloco *d = p;
    log_use_sink(&d->log);
    rconn *c = NULL;
    sentinel_watch *watch = NULL;
    uint64_t warned = 0; /* when we last warned that Redis is away (0: not since it last answered) */
    uint64_t refused_told = 0; /* when we last said that Redis refused a beat as a replica (tell_refused) */
    int again = 0;       /* the last beat broke a working connection and is being sent again */
    for (int stop = 0; !stop;) {
        c = beat_conn(d, c, &warned);
        if (c && !stopping(d)) {
            sentinel_watch_close(watch);
            watch = NULL;
            beat_once(d, c);
        }
        if (c && rconn_broken(c) && !again && !stopping(d)) { /* lost during the beat: reconnect (and beat) at
                                                               once, once; not when heartbeat_stop broke it */
            again = 1;
            continue;
        }
        again = 0;
        if (c && rconn_broken_not_master(c)) tell_refused(c, &refused_told);
        /* (a broken c, beaten twice: wait_interval would return at once, and a Redis that answers every beat
         * READONLY, a master demoted under a plain URL, had the thread reconnect 4,600 times a second) */
        stop = c && !rconn_broken(c) ? wait_interval(d, c, d->o.heartbeat_interval_ms) : wait_reconnect(d, &watch);
    }
    sentinel_watch_close(watch);
    hb_publish(d, NULL);
    if (c) rconn_free(c);
    return NULL;
}

int heartbeat_start(diloco *d, char *err, size_t errlen)
{
    if (d->o.heartbeat_interval_ms <= 0) return 0;
    if (pthread_create(&d->hb_thread, NULL, heartbeat_main, d) != 0) {
        err_set(err, errlen, "cannot start the heartbeat thread: %s", strerror(errno));
        return -1;
    }
    d->hb_running = 1;
    return 0;
}

void heartbeat_stop(diloco *d)
{
    pthread_mutex_lock(&d->hb_mu);
    __atomic_store_n(&d->hb_stop, 1, __ATOMIC_RELAXED); /* (read without hb_mu by a connect's handshake) */
    /* a beat Redis does not answer (frozen, packets dropped) ends now, not at its timeout */
    if (d->hb_conn) rconn_interrupt(d->hb_conn);
    pthread_cond_broadcast(&d->hb_cond);
    pthread_mutex_unlock(&d->hb_mu);
    if (d->hb_running) pthread_join(d->hb_thread, NULL);
    d->hb_running = 0;
}
