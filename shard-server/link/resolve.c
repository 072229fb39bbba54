/*
 * resolve.c: where a link should connect now, found without blocking the event loop (internal.h): the
 * master behind the Sentinels of a redis+sentinel:// URL, or a live seed of a Redis Cluster URL.
 *
 * The steps are those of the blocking redis_url_resolve() (common/redis/sentinel.h), on hiredis
 * asynchronous connections attached to the loop:
 *   1. every Sentinel is asked at once (SENTINEL get-master-addr-by-name). The asking ends when all
 *      have answered or failed, when one master is named by a majority of the URL's Sentinels, or
 *      after QUERY_TIMEOUT_MS: a Sentinel that accepts connections and never answers costs the query
 *      at most that, and the loop nothing (it serves workers meanwhile);
 *   2. the masters named are checked with ROLE one after the other, most named first, each given
 *      QUERY_TIMEOUT_MS (a stopped old master never answers); a seed list gets a PING per seed, in order.
 * A query given the link's current server (a check: does that server still lead?) stops with
 * RL_QUERY_SAME when the candidates reach it: a master named by more Sentinels than ours is the news
 * we look for, ours is not asked (it is the one that stopped answering).
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libevent.h>

#include "redis/sentinel.h"

#define QUERY_TIMEOUT_MS 500 /* per step: the Sentinels together, then each server checked */

struct rl_query {
    struct event_base *base;
    const redis_url *url;
    int check; /* stop at stop_host:stop_port */
    char stop_host[256];
    int stop_port;
    rl_query_done_fn *done;
    void *arg;
    int checking;                               /* step 2 */
    redisAsyncContext *ac[REDIS_URL_MAX_HOSTS]; /* step 1: one per Sentinel; step 2: ac[0] */
    int waiting;                                /* step 1: answers still awaited */
    sentinel_named named[REDIS_URL_MAX_HOSTS];
    int nnamed;
    int next; /* step 2: the candidate checked now */
    struct event *timer;
    char why[512];
};

static void on_reply(redisAsyncContext *ac, void *reply, void *arg);

static int slot_of(const rl_query *q, const redisAsyncContext *ac)
{
    for (int i = 0; i < REDIS_URL_MAX_HOSTS; i++)
        if (q->ac[i] == ac) return i;
    return -1;
}

/* Close connection i; its pending callbacks (NULL replies) find no slot and do nothing. */
static void close_slot(rl_query *q, int i)
{
    redisAsyncContext *ac = q->ac[i];
    q->ac[i] = NULL;
    if (ac != NULL) redisAsyncFree(ac); /* inside its own callback hiredis frees it when that returns */
}

static void close_all(rl_query *q)
{
    for (int i = 0; i < REDIS_URL_MAX_HOSTS; i++) close_slot(q, i);
}

/* Connect to host:port into slot i, log in as user/pass, send argv: its reply comes to on_reply. */
static int open_slot(rl_query *q, int i, const char *host, int port, const char *user, const char *pass, int argc,
                     const char **argv)
{
    redisAsyncContext *ac = redisAsyncConnect(host, port);
    if (ac == NULL || ac->err) {
        snprintf(q->why, sizeof q->why, "%s:%d: %s", host, port, ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL) redisAsyncFree(ac);
        return -1;
    }
    if (redisLibeventAttach(ac, q->base) != REDIS_OK) {
        redisAsyncFree(ac);
        return -1;
    }
    q->ac[i] = ac;
    if (pass[0] != '\0') { /* a refusal shows as the command's NOAUTH error */
        const char *auth[3] = {"AUTH", user[0] != '\0' ? user : pass, pass};
        redisAsyncCommandArgv(ac, NULL, NULL, user[0] != '\0' ? 3 : 2, auth, NULL);
    }
    if (redisAsyncCommandArgv(ac, on_reply, q, argc, argv, NULL) != REDIS_OK) {
        close_slot(q, i);
        return -1;
    }
    return 0;
}

static void arm(rl_query *q)
{
    struct timeval tv = {.tv_sec = QUERY_TIMEOUT_MS / 1000, .tv_usec = (QUERY_TIMEOUT_MS % 1000) * 1000};
    evtimer_add(q->timer, &tv);
}

/* The query is over: free it, then tell its owner. */
static void finish(rl_query *q, int end, const redis_url *found)
{
    char why[sizeof q->why];
    snprintf(why, sizeof why, "%s", q->why);
    rl_query_done_fn *done = q->done;
    void *arg = q->arg;
    rl_resolve_cancel(q);
    done(arg, end, found, why);
}

static int candidates(const rl_query *q)
{
    return q->url->sentinel_master[0] != '\0' ? q->nnamed : q->url->nhosts;
}

static const char *candidate(const rl_query *q, int i, int *port)
{
    if (q->url->sentinel_master[0] != '\0') {
        *port = q->named[i].port;
        return q->named[i].host;
    }
    *port = q->url->hosts[i].port;
    return q->url->hosts[i].host;
}

/* Step 2: check the next candidate that can be asked; finish when none is left. */
static void check_next(rl_query *q)
{
    int sentinel = q->url->sentinel_master[0] != '\0';
    for (; q->next < candidates(q); q->next++) {
        int port;
        const char *host = candidate(q, q->next, &port);
        if (q->check && port == q->stop_port && strcmp(host, q->stop_host) == 0) {
            finish(q, RL_QUERY_SAME, NULL);
            return;
        }
        const char *argv[1] = {sentinel ? "ROLE" : "PING"};
        /* a seed only has to be alive (NOAUTH is an answer too): no login */
        if (open_slot(q, 0, host, port, sentinel ? q->url->user : "", sentinel ? q->url->pass : "", 1, argv) == 0) {
            arm(q);
            return;
        }
    }
    char last[sizeof q->why];
    snprintf(last, sizeof last, "%s", q->why);
    if (sentinel)
        snprintf(q->why, sizeof q->why, "no master '%s' found through %d Sentinel(s) (last: %.300s)",
                 q->url->sentinel_master, q->url->nhosts, last);
    else
        snprintf(q->why, sizeof q->why, "none of the %d Redis nodes of the URL answers (last: %.300s)", q->url->nhosts,
                 last);
    finish(q, RL_QUERY_NONE, NULL);
}

static void start_checking(rl_query *q)
{
    close_all(q);
    evtimer_del(q->timer);
    q->checking = 1;
    q->next = 0;
    check_next(q);
}

/* Step 2: candidate q->next answered (reply) or failed (NULL). */
static void on_checked(rl_query *q, const redisReply *r)
{
    int port;
    const char *host = candidate(q, q->next, &port);
    int sentinel = q->url->sentinel_master[0] != '\0';
    if (r == NULL) {
        snprintf(q->why, sizeof q->why, "%s:%d: %s", host, port, q->ac[0] != NULL ? q->ac[0]->errstr : "closed");
    } else if (!sentinel || sentinel_reply_is_master(r, host, port, q->why, sizeof q->why)) {
        redis_url found;
        redis_url_at(q->url, host, port, &found);
        finish(q, RL_QUERY_FOUND, &found);
        return;
    }
    close_slot(q, 0);
    q->next++;
    check_next(q);
}

/* Step 1: Sentinel i answered (reply) or failed (NULL). */
static void on_asked(rl_query *q, int i, const redisReply *r)
{
    const redis_host *s = &q->url->hosts[i];
    char host[256];
    int port;
    if (r == NULL)
        snprintf(q->why, sizeof q->why, "Sentinel %s:%d: %s", s->host, s->port, q->ac[i]->errstr);
    else if (sentinel_reply_addr(q->url, s, r, host, sizeof host, &port, q->why, sizeof q->why) == 0)
        q->nnamed = sentinel_vote(q->named, q->nnamed, host, port);
    close_slot(q, i);
    q->waiting--;
    if (q->waiting == 0 || (q->nnamed > 0 && 2 * q->named[0].votes > q->url->nhosts)) start_checking(q);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *arg)
{
    rl_query *q = arg;
    int i = slot_of(q, ac);
    if (i < 0) return; /* a connection we closed */
    /* reply NULL: hiredis is freeing ac (connection refused or lost); redisAsyncFree in its callback
     * only marks it, so close_slot is safe here too */
    if (q->checking)
        on_checked(q, reply);
    else
        on_asked(q, i, reply);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rl_query *q = arg;
    if (!q->checking) {
        if (q->waiting > 0) /* else every Sentinel failed at once: q->why says how */
            snprintf(q->why, sizeof q->why, "%d Sentinel(s) gave no answer within %d ms", q->waiting, QUERY_TIMEOUT_MS);
        start_checking(q);
        return;
    }
    int port;
    const char *host = candidate(q, q->next, &port);
    snprintf(q->why, sizeof q->why, "%s:%d: no answer within %d ms", host, port, QUERY_TIMEOUT_MS);
    close_slot(q, 0);
    q->next++;
    check_next(q);
}

rl_query *rl_resolve_start(struct event_base *base, const redis_url *url, const redis_url *current,
                           rl_query_done_fn *done, void *arg)
{
    rl_query *q = calloc(1, sizeof *q);
    if (q == NULL) return NULL;
    *q = (rl_query){.base = base, .url = url, .done = done, .arg = arg};
    if (current != NULL) {
        q->check = 1;
        snprintf(q->stop_host, sizeof q->stop_host, "%s", current->host);
        q->stop_port = current->port;
    }
    q->timer = evtimer_new(base, on_timeout, q);
    if (q->timer == NULL) {
        free(q);
        return NULL;
    }
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", url->sentinel_master};
    for (int i = 0; url->sentinel_master[0] != '\0' && i < url->nhosts; i++) {
        const redis_host *s = &url->hosts[i];
        if (open_slot(q, i, s->host, s->port, url->sentinel_user, url->sentinel_pass, 3, argv) == 0) q->waiting++;
    }
    /* nothing to wait for (a seed list, or no Sentinel reachable): step 2 from the loop, never from
     * here (the caller gets q before done can run) */
    static const struct timeval now = {0, 0};
    if (q->waiting > 0)
        arm(q);
    else
        evtimer_add(q->timer, &now);
    return q;
}

void rl_resolve_cancel(rl_query *q)
{
    if (q == NULL) return;
    close_all(q);
    event_free(q->timer);
    free(q);
}
