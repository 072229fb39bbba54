/*
 * watch.c: a group of links (rlink_route) listening to its Sentinels' failover announcements
 * (sentinel_watch, common/net/sentinel.h), so that a new master is used the moment it is announced
 * rather than at each link's next backoff step, and a stopped old master is left at once (its
 * connections stay open: without the announcement the links would notice only when a command goes
 * unanswered). The subscriptions are opened when the group is attached, and again by the group's
 * watchdog tick when every one of them broke (a Sentinel restarted).
 */
#include "internal.h"

#include <stdlib.h>

#include "log.h"
#include "sentinel.h"
#include "util.h"

#define WATCH_RETRY_MS 5000
#define WATCH_OPEN_TIMEOUT_MS 500

typedef struct rl_watch {
    sentinel_watch *subs;
    struct event *ev[REDIS_URL_MAX_HOSTS];
    int nev;
} rl_watch;

static void on_readable(evutil_socket_t fd, short what, void *arg);

static void free_events(rl_watch *w)
{
    for (int i = 0; i < w->nev; i++) event_free(w->ev[i]);
    w->nev = 0;
}

static void watch_close(rlink_route *rt)
{
    if (rt->watch == NULL) return;
    free_events(rt->watch);
    sentinel_watch_close(rt->watch->subs);
    free(rt->watch);
    rt->watch = NULL;
}

/* One read event per open subscription; closes the watch when none is left. */
static void arm(rlink_route *rt)
{
    rl_watch *w = rt->watch;
    int fds[REDIS_URL_MAX_HOSTS];
    int n = sentinel_watch_fds(w->subs, fds, REDIS_URL_MAX_HOSTS);
    free_events(w);
    for (int i = 0; i < n; i++) {
        w->ev[w->nev] = event_new(rt->via->base, fds[i], EV_READ | EV_PERSIST, on_readable, rt);
        if (w->ev[w->nev] != NULL && event_add(w->ev[w->nev], NULL) == 0) w->nev++;
    }
    if (w->nev == 0) watch_close(rt); /* the next tick opens it again */
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rlink_route *rt = arg;
    rl_watch *w = rt->watch;
    int fds[REDIS_URL_MAX_HOSTS];
    int before = sentinel_watch_fds(w->subs, fds, REDIS_URL_MAX_HOSTS);
    int heard = sentinel_watch_wait(w->subs, 0);
    if (sentinel_watch_fds(w->subs, fds, REDIS_URL_MAX_HOSTS) != before) arm(rt); /* one broke */
    if (heard == 1) {
        log_debug("redis: the Sentinels announce a new master");
        rl_announced(rt);
    }
}

void rl_watch_open(rlink_route *rt, const redis_url *url)
{
    if (rt == NULL || rt->watch != NULL || rt->via == NULL || url->sentinel_master[0] == '\0') return;
    uint64_t now = now_ms();
    if (rt->watch_tried_ms != 0 && now - rt->watch_tried_ms < WATCH_RETRY_MS) return;
    rt->watch_tried_ms = now;
    sentinel_watch *subs = sentinel_watch_open(url, WATCH_OPEN_TIMEOUT_MS);
    rl_watch *w = subs != NULL ? calloc(1, sizeof *w) : NULL;
    if (w == NULL) {
        sentinel_watch_close(subs);
        return;
    }
    w->subs = subs;
    rt->watch = w;
    arm(rt);
}
