/*
 * rlink.c: the life of a Redis link, whatever its transport (rlink.h): start, reconnect with jittered
 * backoff, the stall watchdog, the bookkeeping of commands in flight, the login commands, close.
 * The transports (cmd.c, set.c) only open, drop and carry bytes; they call back here on every change.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "redis/rconn.h"
#include "redis/sentinel.h"

#define RL_BACKOFF_BASE_MS 100
#define RL_BACKOFF_CAP_MS 5000
#define RL_WATCH_MS 500
#define RL_RESOLVE_RETRY_CAP_MS 500
#define RL_PROBE_MS 1000          /* no reply for this long behind Sentinel: has the master changed? */

static const rlink_transport *transport(const rlink *l)
{
    return l->kind == RLINK_SET ? &rl_set_transport : &rl_cmd_transport;
}

static int left_behind(rlink *l);
static void leave(rlink *l, const char *why);

static void schedule_retry(rlink *l)
{
    if (l->stopping) return;
    /* Sentinels that still name a dead master are in the middle of a failover: ask them again soon
     * (a question to a Sentinel is cheap), so the new master is used within a fraction of a second */
    unsigned cap = redis_url_needs_resolve(l->url) ? RL_RESOLVE_RETRY_CAP_MS : RL_BACKOFF_CAP_MS;
    unsigned wait = backoff_ms(l->attempt++, RL_BACKOFF_BASE_MS, cap);
    struct timeval tv = {.tv_sec = wait / 1000, .tv_usec = (wait % 1000) * 1000};
    evtimer_add(l->retry_timer, &tv);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rlink *l = arg;
    if (!l->stopping && !transport(l)->is_open(l)) transport(l)->open(l);
}

/* Drop a connection that stopped answering (commands pending, no reply for stall_ms). */
static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rlink *l = arg;
    if (l->route != NULL && l->route->via == l) rl_watch_open(l->route, l->url, rl_announced); /* if it broke */
    if (transport(l)->is_open(l) && left_behind(l)) {
        char why[320];
        snprintf(why, sizeof why, "the master is now %s:%d", l->route->master_host, l->route->master_port);
        redis_url_at(l->url, l->route->master_host, l->route->master_port, &l->target);
        l->resolved = 1; /* go there, without asking the Sentinels again */
        leave(l, why);
        return;
    }
    if (!transport(l)->is_open(l) || l->pending <= 0) return;
    uint64_t idle = now_ms() - l->last_activity;
    if (idle >= RL_PROBE_MS && idle < (uint64_t)l->stall_ms) rl_check_master(l); /* answers later */
    if (idle < (uint64_t)l->stall_ms) return;
    char why[96];
    snprintf(why, sizeof why, "no reply for %llu ms with %d commands pending", (unsigned long long)idle, l->pending);
    transport(l)->drop(l, why);
}

void rl_connected(rlink *l)
{
    log_info("redis %s connection established", l->name);
    l->ready = 1;
    l->attempt = 0;
    if (l->was_up) l->reconnects++;
    l->was_up = 1;
    l->last_activity = now_ms(); /* a twin may have commands queued while connecting */
    if (l->on_ready != NULL) l->on_ready(l->on_ready_arg);
}

/* The group's master changed: its links waiting to reconnect try now instead of after their backoff,
 * and its open ones look at once whether they are left behind on the old master (on_watch). */
static void wake_group(rlink_route *rt, const rlink *self)
{
    static const struct timeval now = {0, 0};
    for (int i = 0; rt != NULL && i < rt->nlinks; i++) {
        rlink *l = rt->links[i];
        if (l == self || l->stopping) continue;
        if (transport(l)->is_open(l)) {
            event_active(l->watch_timer, EV_TIMEOUT, 1);
        } else {
            l->attempt = 0;
            evtimer_add(l->retry_timer, &now); /* replaces the pending backoff */
        }
    }
}

/* Record host:port as the group's master; 1 if that is news. */
static int route_master(rlink_route *rt, const char *host, int port)
{
    if (rt == NULL || (strcmp(rt->master_host, host) == 0 && rt->master_port == port)) return 0;
    snprintf(rt->master_host, sizeof rt->master_host, "%s", host);
    rt->master_port = port;
    rt->master_gen++;
    return 1;
}

void rl_announced(rlink_route *rt, const char *host, int port)
{
    if (!route_master(rt, host, port)) return;
    log_info("redis: the Sentinels announce a new master, %s:%d", host, port);
    for (int i = 0; i < rt->nlinks; i++) { /* a query under way, or one just done, may name the old one */
        rlink *l = rt->links[i];
        rl_query_cancel(l->query);
        l->query = NULL;
        l->opening = 0;
        l->resolved = 0;
    }
    wake_group(rt, NULL); /* rl_resolve takes the announced master */
}

/* Drop the connection and reconnect at once (the group knows the master to go to). */
static void leave(rlink *l, const char *why)
{
    static const struct timeval now = {0, 0};
    transport(l)->drop(l, why);
    l->attempt = 0;
    if (!l->stopping) evtimer_add(l->retry_timer, &now);
}

/* The server the group's master is on now, from a query of this link. */
static void use_master(rlink *l, const redis_url *found)
{
    if (strcmp(found->host, l->target.host) != 0 || found->port != l->target.port)
        log_info("redis %s connection: %s %s:%d", l->name, l->url->sentinel_master[0] ? "the master is" : "using node",
                 found->host, found->port);
    l->target = *found;
    rlink_route *rt = l->route;
    if (route_master(rt, found->host, found->port)) wake_group(rt, l);
    l->master_seen = rt != NULL ? rt->master_gen : 0;
}

static void on_query_done(void *arg, int end, const redis_url *found, const char *why)
{
    rlink *l = arg;
    l->query = NULL;
    if (l->opening) { /* open waits: connect, or try again after backoff */
        l->opening = 0;
        if (end == RL_QUERY_NONE) {
            if (now_ms() - l->resolve_logged_ms >= 5000) {
                log_warn("redis %s connection: %s; retrying", l->name, why);
                l->resolve_logged_ms = now_ms();
            }
            rl_lost(l);
            return;
        }
        l->resolve_logged_ms = 0;
        if (end == RL_QUERY_FOUND) use_master(l, found);
        if (transport(l)->is_open(l)) return;
        l->resolved = 1;
        transport(l)->open(l);
        return;
    }
    if (end != RL_QUERY_FOUND || !transport(l)->is_open(l)) return; /* a check: ours still leads */
    log_warn("redis %s connection: %s:%d does not answer or refuses writes, and the master is now %s:%d; reconnecting",
             l->name, l->target.host, l->target.port, found->host, found->port);
    l->target = *found;
    if (route_master(l->route, found->host, found->port)) wake_group(l->route, l); /* the others leave it too */
    l->master_seen = l->route != NULL ? l->route->master_gen : 0;
    l->resolved = 1;
    leave(l, "the Sentinels name another master");
}

int rl_resolve(rlink *l)
{
    if (!redis_url_needs_resolve(l->url)) {
        l->target = *l->url;
        return 0;
    }
    if (l->resolved) {
        l->resolved = 0;
        return 0;
    }
    rlink_route *rt = l->route;
    if (rt != NULL && rt->master_port != 0 && rt->master_gen != l->master_seen) {
        /* announced, or found by another link since this one last looked: no need to ask */
        rl_query_cancel(l->query);
        l->query = NULL;
        l->opening = 0;
        redis_url_at(l->url, rt->master_host, rt->master_port, &l->target);
        l->master_seen = rt->master_gen;
        log_info("redis %s connection: the master is %s:%d", l->name, rt->master_host, rt->master_port);
        return 0;
    }
    l->opening = 1;
    if (l->query == NULL) l->query = rl_query_start(l->base, l->url, NULL, on_query_done, l);
    if (l->query == NULL) l->opening = 0;
    return l->query != NULL ? 1 : -1;
}

/* Another link of the group found a new master: is this one still on the old? */
static int left_behind(rlink *l)
{
    rlink_route *rt = l->route;
    if (rt == NULL || rt->master_gen == l->master_seen || !redis_url_needs_resolve(l->url)) return 0;
    l->master_seen = rt->master_gen;
    return strcmp(rt->master_host, l->target.host) != 0 || rt->master_port != l->target.port;
}

void rl_check_master(rlink *l)
{
    uint64_t now = now_ms();
    if (l->url->sentinel_master[0] == '\0' || l->query != NULL || now - l->moved_checked_ms < 500) return;
    l->moved_checked_ms = now;
    l->query = rl_query_start(l->base, l->url, &l->target, on_query_done, l);
}

int rl_failover_reply(rlink *l, const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ERROR || !rconn_error_failover(r->str)) return 0;
    log_warn("redis %s connection: %s; finding the master again", l->name, r->str);
    return 1;
}

void rl_lost(rlink *l)
{
    if (l->ready && l->route != NULL) rl_route_forget(l->route);
    l->ready = 0;
    l->pending = 0;
    schedule_retry(l);
}

void rl_sent(rlink *l)
{
    if (l->pending == 0) l->last_activity = now_ms();
    l->pending++;
}

void rl_replied(rlink *l)
{
    l->pending--;
    l->last_activity = now_ms();
}

void rl_login_failed(rlink *l, const char *what, const char *reply)
{
    if (rconn_error_final(reply)) {
        if (l->on_refused != NULL) l->on_refused(l->name, reply);
    } else {
        log_error("redis %s connection: %s failed: %s (check the Redis URL)", l->name, what, reply);
    }
}

void rl_login_commands(const redis_url *u, rl_login *out)
{
    memset(out, 0, sizeof *out);
    if (u->user[0] != '\0') {
        out->argc[out->n] = 3;
        out->argv[out->n][0] = "AUTH";
        out->argv[out->n][1] = u->user;
        out->argv[out->n][2] = u->pass;
        out->what[out->n++] = "AUTH";
    } else if (u->pass[0] != '\0') {
        out->argc[out->n] = 2;
        out->argv[out->n][0] = "AUTH";
        out->argv[out->n][1] = u->pass;
        out->what[out->n++] = "AUTH";
    }
    if (u->db != 0) {
        snprintf(out->db, sizeof out->db, "%d", u->db);
        out->argc[out->n] = 2;
        out->argv[out->n][0] = "SELECT";
        out->argv[out->n][1] = out->db;
        out->what[out->n++] = "SELECT";
    }
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
    transport(l)->open(l);
    return 0;
}

void rlink_close(rlink *l)
{
    rl_close_twins(l);
    l->stopping = 1;
    rl_query_cancel(l->query);
    l->query = NULL;
    transport(l)->drop(l, "closing");
    free_events(l);
}
