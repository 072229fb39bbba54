/*
 * watch.c: a group of links (rlink_route) listening to its Sentinels' failover announcements, so that
 * a new master is used the moment it is announced rather than at each link's next backoff step, and a
 * stopped old master is left at once (its connections stay open: without the announcement the links
 * would notice only when a command goes unanswered).
 *
 * One hiredis asynchronous connection per Sentinel of the URL, on the loop, subscribed to
 * +switch-master and +promoted-slave (the leader's +promoted-slave comes first, the others'
 * +switch-master as each learns); both name the new master, which goes to the group's `announced`
 * callback (state.c's rl_state_announced, handed down by the opener: watch.c calls nothing above it).
 * Nothing here waits: a Sentinel that is down or never answers only leaves its subscription closed or silent. A
 * subscription that closed (a Sentinel restarted) is opened again by the group's watchdog tick, at
 * most every WATCH_RETRY_MS.
 */
#include "internal.h"

#include <stdlib.h>

#include <hiredis/adapters/libevent.h>

#include "base/log.h"
#include "base/util.h"
#include "redis/sentinel.h"

#define WATCH_RETRY_MS 5000

typedef struct rl_watch {
    rlink_route *rt;
    const redis_url *url;
    rl_announced_fn *announced; /* a new master was announced */
    redisAsyncContext *ac[REDIS_URL_MAX_HOSTS]; /* one per Sentinel of the URL; NULL: closed */
    uint64_t tried_ms[REDIS_URL_MAX_HOSTS];
} rl_watch;

/* The slot of ac, or -1 (a subscription being closed). */
static int slot_of(const rl_watch *w, const redisAsyncContext *ac)
{
    for (int i = 0; i < REDIS_URL_MAX_HOSTS; i++)
        if (w->ac[i] == ac) return i;
    return -1;
}

/* hiredis frees ac after these two: forget it, the next tick opens it again */
static void on_connect(const redisAsyncContext *ac, int status)
{
    rl_watch *w = ac->data;
    int i = slot_of(w, ac);
    if (status != REDIS_OK && i >= 0) w->ac[i] = NULL;
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    rl_watch *w = ac->data;
    int i = slot_of(w, ac);
    if (i >= 0) w->ac[i] = NULL;
}

static void on_message(redisAsyncContext *ac, void *reply, void *arg)
{
    rl_watch *w = arg;
    char host[256];
    int port;
    if (reply == NULL || slot_of(w, ac) < 0) return;
    if (sentinel_announcement(reply, w->url->sentinel_master, host, sizeof host, &port))
        w->announced(w->rt, host, port);
}

static void subscribe(rl_watch *w, int i)
{
    const redis_host *s = &w->url->hosts[i];
    w->tried_ms[i] = now_ms();
    redisAsyncContext *ac = redisAsyncConnect(s->host, s->port);
    if (ac == NULL || ac->err || redisLibeventAttach(ac, w->rt->via->base) != REDIS_OK) {
        if (ac != NULL) redisAsyncFree(ac);
        return;
    }
    ac->data = w;
    w->ac[i] = ac;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    if (w->url->sentinel_pass[0] != '\0') {
        int named = w->url->sentinel_user[0] != '\0';
        const char *auth[3] = {"AUTH", named ? w->url->sentinel_user : w->url->sentinel_pass, w->url->sentinel_pass};
        redisAsyncCommandArgv(ac, NULL, NULL, named ? 3 : 2, auth, NULL);
    }
    const char *argv[3] = {"SUBSCRIBE", "+switch-master", "+promoted-slave"};
    if (redisAsyncCommandArgv(ac, on_message, w, 3, argv, NULL) != REDIS_OK) {
        w->ac[i] = NULL;
        redisAsyncFree(ac);
    }
}

void rl_watch_open(rlink_route *rt, const redis_url *url, rl_announced_fn *announced)
{
    if (rt == NULL || rt->via == NULL || url->sentinel_master[0] == '\0') return;
    if (rt->watch == NULL) {
        rt->watch = calloc(1, sizeof *rt->watch);
        if (rt->watch == NULL) return;
        rt->watch->rt = rt;
        rt->watch->url = url;
        rt->watch->announced = announced;
    }
    rl_watch *w = rt->watch;
    uint64_t now = now_ms();
    for (int i = 0; i < url->nhosts && i < REDIS_URL_MAX_HOSTS; i++)
        if (w->ac[i] == NULL && (w->tried_ms[i] == 0 || now - w->tried_ms[i] >= WATCH_RETRY_MS)) subscribe(w, i);
}

void rl_watch_close(rlink_route *rt)
{
    rl_watch *w = rt->watch;
    if (w == NULL) return;
    for (int i = 0; i < REDIS_URL_MAX_HOSTS; i++) {
        redisAsyncContext *ac = w->ac[i];
        w->ac[i] = NULL; /* its callbacks, run by the free, find no slot */
        if (ac != NULL) redisAsyncFree(ac);
    }
    free(w);
    rt->watch = NULL;
}
