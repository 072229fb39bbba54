/* heartbeat.c: the heartbeat thread of a libdiloco session.
 *
 * Every heartbeat_interval_ms it calls dl_heartbeat with our speed (inner steps per second of
 * training time since the last beat: time spent syncing or waiting at a barrier is not counted, so
 * DyLU sees how fast this machine trains, not how long it waited for others), loss and tokens, on its own Redis connection so a blocked training thread never delays
 * it. The reply tells us if we were evicted (the training thread registers again at its next sync;
 * no beats until then), whether the run was shut down, and the H that DyLU computed for us. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "log.h"
#include "rconn.h"
#include "util.h"

static void beat_once(diloco *d, rconn *c)
{
    pthread_mutex_lock(&d->hb_mu);
    if (d->evicted) { /* until the training thread registers again, a beat would only be refused (and
                         recorded as a rejection of a stale worker) */
        pthread_mutex_unlock(&d->hb_mu);
        return;
    }
    uint64_t steps = d->total_steps;
    if (d->compute_us > 0) d->speed = (double)d->compute_steps / ((double)d->compute_us / 1e6);
    d->compute_us = d->compute_steps = 0;
    long long inc = d->inc;
    double speed = d->speed, loss = d->loss;
    unsigned long long tokens = d->tokens;
    pthread_mutex_unlock(&d->hb_mu);

    redisReply *r = rconn_command(c, "FCALL dl_heartbeat 1 %s %s %lld %.6f %.6f %llu %llu %d", d->config_key,
                                  d->worker_id, inc, speed, loss, (unsigned long long)steps, tokens, d->grp_rank);
    if (!r) return;
    int newly_evicted = 0, group_gone = 0;
    pthread_mutex_lock(&d->hb_mu);
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "UNKNOWN_WORKER", 14) == 0 && d->inc == inc) {
        newly_evicted = !d->evicted;
        d->evicted = 1;
    } else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "GONE", 4) == 0 && d->inc == inc) {
        /* our group was ended by another of its ranks (not counted as a rejection): no more beats; the
         * training thread finds the group gone at its next sync, as after an eviction */
        group_gone = !d->evicted;
        d->evicted = 1;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2) {
        if (r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "shutdown") == 0)
            d->stop_requested = 1;
        if (r->element[1]->type == REDIS_REPLY_INTEGER) d->dylu_h = (int)r->element[1]->integer;
    }
    pthread_mutex_unlock(&d->hb_mu);
    /* not under hb_mu: the host's log callback must never hold up the training thread's calls */
    if (newly_evicted) log_warn("heartbeat: %s", r->str);
    if (group_gone) log_info("heartbeat: %s; heartbeats stop", r->str + 5);
    freeReplyObject(r);
}

static void *heartbeat_main(void *p)
{
    diloco *d = p;
    log_use_sink(&d->log);
    rconn *c = NULL;
    uint64_t warned = 0; /* one warning per 5 s while Redis is away: a beat is tried every interval */
    pthread_mutex_lock(&d->hb_mu);
    while (!d->hb_stop) {
        pthread_mutex_unlock(&d->hb_mu);
        if (!c || rconn_broken(c)) {
            char err[256];
            if (c) rconn_free(c);
            c = rconn_connect(&d->url, 5000, err, sizeof err);
            if (!c && now_ms() - warned >= 5000) {
                log_warn("heartbeat: cannot reach Redis: %s", err);
                warned = now_ms();
            }
            if (c) warned = 0;
        }
        if (c) beat_once(d, c);
        pthread_mutex_lock(&d->hb_mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)d->o.heartbeat_interval_ms * 1000000ull;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        while (!d->hb_stop && pthread_cond_timedwait(&d->hb_cond, &d->hb_mu, &ts) != ETIMEDOUT) {}
    }
    pthread_mutex_unlock(&d->hb_mu);
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
    d->hb_stop = 1;
    pthread_cond_broadcast(&d->hb_cond);
    pthread_mutex_unlock(&d->hb_mu);
    if (d->hb_running) pthread_join(d->hb_thread, NULL);
    d->hb_running = 0;
}
