/*
 * state.c: what happens to a link between rlink_init and rlink_close, whatever its transport: the
 * transports (cmd.c, set.c) report here each change (connected, lost, a command sent, a reply back, a
 * login refused, a reply saying the node no longer leads), and here it is decided where to connect
 * (the URL's server, the master the Sentinels name, the one the group learnt of) and when (after a
 * jittered backoff; at once when the group's master changes).
 * It reaches the transports only through l->transport, the table rlink_init chose: below cmd.c and
 * set.c, it calls neither. rlink.c's timers call it (rl_state_follow_group, rl_state_check_master).
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
#define RL_RESOLVE_RETRY_CAP_MS 500

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

void rl_state_connected(rlink *l)
{
    log_info("redis %s connection established", l->name);
    l->ready = 1;
    l->up_attempt = l->attempt;
    l->up_ms = now_ms();
    l->answered = 0;
    l->attempt = 0;
    if (l->was_up) l->reconnects++;
    l->was_up = 1;
    l->last_activity = now_ms(); /* a twin may have commands queued while connecting */
    if (l->on_ready != NULL) l->on_ready(l->on_ready_arg);
}

/* The group's master changed: its links waiting to reconnect try now instead of after their backoff,
 * and its open ones look at once whether they are left behind on the old master (rlink.c's watchdog
 * tick, rl_state_follow_group). */
static void wake_group(rlink_route *rt, const rlink *self)
{
    static const struct timeval now = {0, 0};
    for (int i = 0; rt != NULL && i < rt->nlinks; i++) {
        rlink *l = rt->links[i];
        if (l == self || l->stopping) continue;
        if (l->transport->is_open(l)) {
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

void rl_state_announced(rlink_route *rt, const char *host, int port)
{
    if (!route_master(rt, host, port)) return;
    log_info("redis: the Sentinels announce a new master, %s:%d", host, port);
    for (int i = 0; i < rt->nlinks; i++) { /* a query under way, or one just done, may name the old one */
        rlink *l = rt->links[i];
        rl_resolve_cancel(l->query);
        l->query = NULL;
        l->opening = 0;
        l->resolved = 0;
    }
    wake_group(rt, NULL); /* rl_state_resolve takes the announced master */
}

/* Drop the connection and reconnect at once (the group knows the master to go to). */
static void leave(rlink *l, const char *why)
{
    static const struct timeval now = {0, 0};
    l->transport->drop(l, why);
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
            rl_state_lost(l);
            return;
        }
        l->resolve_logged_ms = 0;
        if (end == RL_QUERY_FOUND) use_master(l, found);
        if (l->transport->is_open(l)) return;
        l->resolved = 1;
        l->transport->open(l);
        return;
    }
    if (end != RL_QUERY_FOUND || !l->transport->is_open(l)) return; /* a check: ours still leads */
    log_warn("redis %s connection: %s:%d does not answer or refuses writes, and the master is now %s:%d; reconnecting",
             l->name, l->target.host, l->target.port, found->host, found->port);
    l->target = *found;
    if (route_master(l->route, found->host, found->port)) wake_group(l->route, l); /* the others leave it too */
    l->master_seen = l->route != NULL ? l->route->master_gen : 0;
    l->resolved = 1;
    leave(l, "the Sentinels name another master");
}

int rl_state_resolve(rlink *l)
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
        rl_resolve_cancel(l->query);
        l->query = NULL;
        l->opening = 0;
        redis_url_at(l->url, rt->master_host, rt->master_port, &l->target);
        l->master_seen = rt->master_gen;
        log_info("redis %s connection: the master is %s:%d", l->name, rt->master_host, rt->master_port);
        return 0;
    }
    l->opening = 1;
    if (l->query == NULL) l->query = rl_resolve_start(l->base, l->url, NULL, on_query_done, l);
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

int rl_state_follow_group(rlink *l)
{
    if (!l->transport->is_open(l) || !left_behind(l)) return 0;
    char why[320];
    snprintf(why, sizeof why, "the master is now %s:%d", l->route->master_host, l->route->master_port);
    redis_url_at(l->url, l->route->master_host, l->route->master_port, &l->target);
    l->resolved = 1; /* go there, without asking the Sentinels again */
    leave(l, why);
    return 1;
}

void rl_state_check_master(rlink *l)
{
    uint64_t now = now_ms();
    if (l->url->sentinel_master[0] == '\0' || l->query != NULL || now - l->moved_checked_ms < 500) return;
    l->moved_checked_ms = now;
    l->query = rl_resolve_start(l->base, l->url, &l->target, on_query_done, l);
}

/* The attempt count that makes schedule_retry wait its cap (100 ms doubled 6 times passes 5 s). */
#define RL_STUCK_ATTEMPT 6

int rl_state_failover_reply(rlink *l, const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ERROR || !rconn_error_failover(r->str)) return 0;
    if (redis_url_needs_resolve(l->url)) {
        log_warn("redis %s connection: %s; finding the master again", l->name, r->str);
        return 1;
    }
    /* One server named, no Sentinels nor Cluster seeds to ask: the reconnect lands on the same replica. It
     * reconnected at once (the connect resets the backoff), and said so, ten times a second per link, for as
     * long as the URL named a replica; now it waits the backoff's cap, and says what to do. */
    char why[768];
    rconn_explain_error(r->str, why, sizeof why);
    log_warn("redis %s connection: %s; trying again in %d s", l->name, why, RL_BACKOFF_CAP_MS / 1000);
    l->attempt = RL_STUCK_ATTEMPT;
    return 1;
}

int rl_state_refused(rlink *l, const char *reply)
{
    if (!rconn_error_maxclients(reply)) return 0;
    char why[768];
    rconn_explain_error(reply, why, sizeof why);
    log_warn("redis %s connection refused: %s; trying again in %d s", l->name, why, RL_BACKOFF_CAP_MS / 1000);
    l->attempt = RL_STUCK_ATTEMPT;
    return 1;
}

/* A connection closed this soon after it came up, before any reply, was no success: its backoff goes on. */
#define RL_SHORT_LIVED_MS 1000

void rl_state_lost(rlink *l)
{
    /* (Redis at its maxclients accepts, says so or not, a reset can come first, and closes: the links that took
     * the connect for a success reconnected ten times a second each, two lines each time) */
    if (l->ready && !l->answered && now_ms() - l->up_ms < RL_SHORT_LIVED_MS && l->attempt < l->up_attempt)
        l->attempt = l->up_attempt;
    if (l->ready && l->route != NULL) rl_route_forget(l->route);
    l->ready = 0;
    l->pending = 0;
    schedule_retry(l);
}

void rl_state_sent(rlink *l)
{
    if (l->pending == 0) l->last_activity = now_ms();
    l->pending++;
}

void rl_state_replied(rlink *l)
{
    l->answered = 1;
    l->pending--;
    l->last_activity = now_ms();
}

void rl_state_login_failed(rlink *l, const char *what, const char *reply)
{
    if (rl_state_refused(l, reply))
        return; /* (maxclients reached answers whatever came first: not the login's fault) */
    if (rconn_error_final(reply)) {
        if (l->on_refused != NULL) l->on_refused(l->name, reply);
    } else {
        log_error("redis %s connection: %s failed: %s (check the Redis URL)", l->name, what, reply);
    }
}

void rl_state_login_commands(const redis_url *u, rl_login *out)
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
