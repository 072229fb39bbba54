/* wake.c: the barrier's wake-up, listened for while we arrive, so that learning of the close costs no
 * round trip of its own (issue 28, docs/compression.md "Latency").
 *
 * A barrier's close pushes the token "f:r" to the wake list of every participant (lua/20_membership.lua,
 * barrier_try_close). The wait used to start after dl_arrive's reply, and after each BLPOP it read
 * dl_barrier: with Redis an RTT away, a worker that was not the last to arrive paid one RTT for the
 * arrive, one for the BLPOP and one for the read. Now barrier.c starts the BLPOP (on the blocking
 * connection, from a thread) before it sends dl_arrive on the control connection: the token of the
 * close reaches us half an RTT after the last arrival reaches Redis, in parallel with our own arrive,
 * and a token "f:r" for the round we wait on is proof of the close (the only writer of that token is the
 * close of round r of fragment f, in the same Lua call). Any other outcome (a timeout, a token of another
 * fragment, a repair token) leaves the decision to barrier.c's usual wait, which reads dl_barrier as before.
 * Tokens of our own earlier rounds of the fragment (the last arriver's, which nobody used to pop) are
 * dropped on the way.
 *
 * With rounds of several fragments in flight (--fragments-in-flight D > 1), two barriers may be waited at
 * once: one blocking connection cannot serve two threads, and each would pop, and lose, the other's token.
 * Then the session keeps one listener (the hub) on the list for its whole life: it pops every token and
 * records, per fragment, the highest round whose close it popped; a barrier wait (barrier.c) asks it with
 * wake_hub_wait instead of popping itself. The list and its tokens are the same: other workers of the run
 * see no difference. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "format/runconf.h"
#include "internal.h"
#include "wake.h"

void wake_key(const struct diloco *d, char *key, size_t cap)
{
    char name[112];
    int n = snprintf(name, sizeof name, "wake:%s", d->worker_id);
    if (d->grp && d->grp_rank > 0 && n > 0 && (size_t)n < sizeof name)
        snprintf(name + n, sizeof name - (size_t)n, ":%d", d->grp_rank); /* a group's rank: its own list */
    key_run(key, cap, d->o.run, name);
}

/* How long opening the blocking connection may take. Short: a Redis that is frozen or whose packets are
 * dropped may accept a connection and answer nothing, and whoever waits for the thread that connects (a
 * barrier's wait, the hub's stop) would wait as long; the BLPOPs then get their own, longer timeout. */
#define BLK_CONNECT_MS 2000

rconn *wake_blk_open(diloco *d, rconn_stop_fn *stopped, void *arg)
{
    char err[256];
    rconn *c = rconn_connect_watched(&d->url, BLK_CONNECT_MS, 0, stopped, arg, NULL, err, sizeof err);
    if (c != NULL && rconn_set_timeout(c, d->o.wait_poll_ms + 10000) < 0) {
        rconn_free(c);
        return NULL;
    }
    if (c != NULL) dl_watch_stop(d, c); /* (a stop ends a BLPOP that the training thread may be waiting for) */
    return c;
}

static void *wake_main(void *p)
{
    wake_wait *w = p;
    diloco *d = w->d;
    char key[KEY_MAX];
    wake_key(d, key, sizeof key);
    if (!d->blk || rconn_broken(d->blk)) {
        if (d->blk) rconn_free(d->blk);
        d->blk = wake_blk_open(d, dl_stop_seen, d);
    }
    while (d->blk) {
        redisReply *r = rconn_command(d->blk, "BLPOP %s %.3f", key, d->o.wait_poll_ms / 1000.0);
        int f = -1, n = 0;
        long long round = -1;
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING)
            n = sscanf(r->element[1]->str, "%d:%lld", &f, &round);
        int cancel = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                     r->element[1]->type == REDIS_REPLY_STRING && strcmp(r->element[1]->str, WAKE_CANCEL) == 0;
        if (r) freeReplyObject(r);
        if (cancel || n != 2 || f != w->frag) break;
        if (round == w->round) {
            w->closed = 1;
            break;
        }
        if (round > w->round) break; /* (not ours to decide: barrier.c's wait reads the barrier) */
    }
    return NULL;
}

int wake_start(diloco *d, int f, int64_t round, wake_wait *w)
{
    *w = (wake_wait){.d = d, .frag = f, .round = round};
    w->started = pthread_create(&w->thread, NULL, wake_main, w) == 0;
    return w->started ? 0 : -1;
}

int wake_finish(wake_wait *w)
{
    if (!w->started) return 0;
    pthread_join(w->thread, NULL);
    w->started = 0;
    return w->closed;
}

void wake_cancel(wake_wait *w)
{
    if (!w->started) return;
    diloco *d = w->d;
    char key[KEY_MAX];
    wake_key(d, key, sizeof key);
    redisReply *r = dl_command(d, NULL, 0, "RPUSH %s %s", key, WAKE_CANCEL);
    if (r) freeReplyObject(r);
    wake_finish(w);
}

/* ---- the hub: one listener per session, for rounds in flight at once ------------------------------------ */

struct wake_hub {
    struct diloco *d;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC: broadcast at each token popped and at stop */
    int stop;          /* under mu; written atomically: the hub's connect also reads it (hub_connect) */
    int64_t closed[RUNCONF_MAX_FRAGMENTS]; /* per fragment: the highest round whose close we popped (-1: none) */
};

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static int hub_stopping(struct wake_hub *h)
{
    pthread_mutex_lock(&h->mu);
    int stop = h->stop;
    pthread_mutex_unlock(&h->mu);
    return stop;
}

/* A popped token: "f:r" is the close of round r of fragment f (anything else, "repair" or "cancel", only
 * wakes the hub, which looks at its stop flag). */
static void hub_record(struct wake_hub *h, const redisReply *r)
{
    int f = -1;
    long long round = -1;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_STRING ||
        sscanf(r->element[1]->str, "%d:%lld", &f, &round) != 2 || f < 0 || f >= h->d->rc.nfragments)
        return;
    pthread_mutex_lock(&h->mu);
    if (round > h->closed[f]) h->closed[f] = round;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* What ends the hub's connect: wake_hub_stop, or the session's stop (its BLPOPs end then anyway). */
static int hub_stopped(void *arg)
{
    struct wake_hub *h = arg;
    return __atomic_load_n(&h->stop, __ATOMIC_RELAXED) || dl_stopping(h->d);
}

/* Open the blocking connection again (it broke, or none yet). It is published in d->blk under mu, where
 * wake_hub_stop interrupts it: either the stop sees it and interrupts it, or the hub sees the stop. 1: a
 * connection, go on; 0: none (Redis away: the barrier waits poll dl_barrier meanwhile), or stopping. Not
 * while the session stops (dl_stopping: the stop ended its BLPOP, and the barrier waits end too): a Redis
 * that does not answer would hold wake_hub_stop for the connect's limit; and a connect under way when
 * wake_hub_stop or the session's stop comes ends with it (the handshake watches both: hub_stopped). */
/* With mu held: wait a poll interval before the next try, or until wake_hub_stop. */
static void hub_pause_locked(struct wake_hub *h)
{
    struct timespec ts;
    deadline_in(&ts, h->d->o.wait_poll_ms);
    pthread_cond_timedwait(&h->cv, &h->mu, &ts);
}

static int hub_connect(struct wake_hub *h)
{
    diloco *d = h->d;
    pthread_mutex_lock(&h->mu);
    rconn *old = d->blk;
    d->blk = NULL;
    pthread_mutex_unlock(&h->mu);
    if (old) rconn_free(old);
    rconn *c = dl_stopping(d) ? NULL : wake_blk_open(d, hub_stopped, h);
    pthread_mutex_lock(&h->mu);
    d->blk = c;
    int stop = h->stop;
    if (c == NULL && !stop) hub_pause_locked(h); /* wait before the next try */
    pthread_mutex_unlock(&h->mu);
    return c != NULL && !stop;
}

/* After a BLPOP that a Redis not leading refused (READONLY: the URL names a replica, or a master demoted under it):
 * the reconnect succeeds and the next BLPOP is refused again, so wait a poll interval first (the thread reconnected
 * some 4,600 times a second; the barrier waits poll dl_barrier meanwhile). */
static void hub_refused(struct wake_hub *h)
{
    pthread_mutex_lock(&h->mu);
    if (!h->stop) hub_pause_locked(h);
    pthread_mutex_unlock(&h->mu);
}

static void *hub_main(void *p)
{
    struct wake_hub *h = p;
    diloco *d = h->d;
    log_sink *prev = log_use_sink(&d->log);
    char key[KEY_MAX];
    wake_key(d, key, sizeof key);
    while (!hub_stopping(h)) {
        if ((!d->blk || rconn_broken(d->blk)) && !hub_connect(h)) continue;
        redisReply *r = rconn_command(d->blk, "BLPOP %s %.3f", key, d->o.wait_poll_ms / 1000.0);
        hub_record(h, r);
        if (r) freeReplyObject(r);
        if (r == NULL && rconn_broken_not_master(d->blk)) hub_refused(h);
    }
    log_use_sink(prev);
    return NULL;
}

int wake_hub_start(diloco *d, char *err, size_t errlen)
{
    struct wake_hub *h = calloc(1, sizeof *h);
    if (!h) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    h->d = d;
    for (int f = 0; f < RUNCONF_MAX_FRAGMENTS; f++) h->closed[f] = -1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->mu, NULL);
    if (pthread_create(&h->thread, NULL, hub_main, h) != 0) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        free(h);
        err_set(err, errlen, "cannot start the thread that listens for barrier closes");
        return -1;
    }
    d->hub = h;
    return 0;
}

void wake_hub_stop(diloco *d)
{
    struct wake_hub *h = d->hub;
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    __atomic_store_n(&h->stop, 1, __ATOMIC_RELAXED); /* (read without mu by the hub's connect: hub_connect) */
    /* end its BLPOP now rather than at its timeout, without a command to Redis: a Redis that does not answer
     * (frozen, packets dropped) would hold the stop for a command timeout, then the BLPOP's */
    if (d->blk) rconn_interrupt(d->blk);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
    d->hub = NULL;
}

int wake_hub_wait(diloco *d, int f, int64_t round, int ms)
{
    struct wake_hub *h = d->hub;
    struct timespec ts;
    deadline_in(&ts, ms);
    pthread_mutex_lock(&h->mu);
    /* a token of a later round is no proof about this one (left by an earlier process of the same id?): the
     * caller reads the barrier, after the wait a BLPOP would have made */
    int later = h->closed[f] > round;
    while (!h->stop && (later || h->closed[f] < round))
        if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) == ETIMEDOUT) break;
    int closed = h->closed[f] == round;
    pthread_mutex_unlock(&h->mu);
    return closed;
}
