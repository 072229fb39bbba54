/*
 * rlink.c: a Redis link made and closed, whatever its transport (rlink.h), at the top of link/: it
 * chooses the link's transport table once (l->transport: cmd.c's or set.c's), runs its timers (the
 * retry after backoff, the stall watchdog), and makes the group (rlink_route_attach): its links, and
 * the pointers through which route.c opens a twin and sends CLUSTER SLOTS. Twins are opened and closed
 * here.
 * The transports only open, drop and carry bytes, and report each change to state.c, which decides
 * where and when to connect; neither calls back up here.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#define RL_WATCH_MS 500
#define RL_PROBE_MS 1000 /* no reply for this long behind Sentinel: has the master changed? */

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rlink *l = arg;
    if (!l->stopping && !l->transport->is_open(l)) l->transport->open(l);
}

/* Drop a connection that stopped answering (commands pending, no reply for stall_ms). */
static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rlink *l = arg;
    if (l->route != NULL && l->route->via == l) rl_watch_open(l->route, l->url, rl_state_announced); /* if it broke */
    if (rl_state_follow_group(l)) return;
    if (!l->transport->is_open(l) || l->pending <= 0) return;
    uint64_t idle = now_ms() - l->last_activity;
    if (idle >= RL_PROBE_MS && idle < (uint64_t)l->stall_ms) rl_state_check_master(l); /* answers later */
    if (idle < (uint64_t)l->stall_ms) return;
    char why[96];
    snprintf(why, sizeof why, "no reply for %llu ms with %d commands pending", (unsigned long long)idle, l->pending);
    l->transport->drop(l, why);
}

/* A twin owns its URL and name. */
typedef struct twin_link {
    rlink l; /* first: a twin is freed through its rlink pointer */
    redis_url url;
    char name[300];
} twin_link;

/* l's twin on url (the route's open_twin, called by route.c): a link of l's kind, routed like l; NULL
 * if it cannot be made. */
static rlink *open_twin(rlink *l, const redis_url *url)
{
    twin_link *t = calloc(1, sizeof *t);
    if (t == NULL) return NULL;
    t->url = *url;
    snprintf(t->name, sizeof t->name, "%s@%s:%d", l->name, t->url.host, t->url.port);
    if (rlink_init(&t->l, t->name, l->kind, &t->url, l->base, l->stall_ms, l->on_refused) != 0) {
        free(t);
        return NULL;
    }
    t->l.is_twin = 1;
    t->l.route = l->route;
    return &t->l;
}

static void close_twins(rlink *l)
{
    for (int i = 0; i < CLUSTER_MAX_NODES; i++)
        if (l->twin[i] != NULL && l->twin[i] != l) {
            rlink_close(l->twin[i]);
            free(l->twin[i]);
            l->twin[i] = NULL;
        }
}

void rlink_route_attach(rlink_route *rt, rlink *via, rlink **links, int nlinks)
{
    rt->via = via;
    rt->open_twin = open_twin;
    rt->send = rlink_cmds;
    rt->nlinks = 0;
    for (int i = 0; i < nlinks && i < RLINK_ROUTE_MAX; i++) {
        links[i]->route = rt;
        rt->links[rt->nlinks++] = links[i];
    }
    rl_watch_open(rt, via->url, rl_state_announced);
}

void rlink_route_free(rlink_route *rt)
{
    rl_watch_close(rt);
    rl_route_free(rt);
}

static void free_event(struct event **ev)
{
    if (*ev != NULL) event_free(*ev);
    *ev = NULL;
}

static void free_events(rlink *l)
{
    free_event(&l->retry_timer);
    free_event(&l->watch_timer);
    free_event(&l->ev_read);
    free_event(&l->ev_write);
}

int rlink_init(rlink *l, const char *name, int kind, const redis_url *url, struct event_base *base, int stall_ms,
               rlink_refused_fn *on_refused)
{
    memset(l, 0, sizeof *l);
    l->name = name;
    l->kind = kind;
    l->url = url;
    l->base = base;
    l->stall_ms = stall_ms;
    l->on_refused = on_refused;
    l->fd = -1;
    l->transport = kind == RLINK_SET ? &rl_set_transport : &rl_cmd_transport; /* chosen here only */
    l->retry_timer = evtimer_new(base, on_retry, l);
    l->watch_timer = event_new(base, -1, EV_PERSIST, on_watch, l);
    if (kind == RLINK_SET) {
        l->ev_read = event_new(base, -1, 0, NULL, NULL);
        l->ev_write = event_new(base, -1, 0, NULL, NULL);
    }
    if (l->retry_timer == NULL || l->watch_timer == NULL || (kind == RLINK_SET && (!l->ev_read || !l->ev_write))) {
        free_events(l);
        return -1;
    }
    struct timeval tv = {.tv_sec = 0, .tv_usec = RL_WATCH_MS * 1000};
    evtimer_add(l->watch_timer, &tv);
    l->transport->open(l);
    return 0;
}

void rlink_close(rlink *l)
{
    close_twins(l);
    l->stopping = 1;
    rl_resolve_cancel(l->query);
    l->query = NULL;
    l->transport->drop(l, "closing");
    free_events(l);
}
