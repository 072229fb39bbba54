/*
 * internal.h: what the files of shard-server/link/ share, and nothing else sees.
 *
 * From the top down (each file calls only files below it; docs/architecture.md "Layers"):
 *   rlink.c   a link made and closed (its transport chosen), its timers (retry, stall watchdog), the
 *             group of links (rlink_route_attach), twins opened and closed
 *   cmd.c     RLINK_CMD transport: hiredis asynchronous connection
 *   set.c     RLINK_SET transport: writev() of SET commands from the caller's memory
 *   state.c   what the transports report (connected, lost, sent, replied, login refused), where to
 *             connect (the master the Sentinels name or the group learnt of), when (backoff), login
 *   route.c   Redis Cluster: the slot map, twins, following MOVED/ASK
 *   wait.c    replies held back until WAIT says enough replicas have the command
 *   watch.c   a group's subscription to the Sentinels' failover announcements
 *   resolve.c the master behind the Sentinels (or a live seed) found without blocking the loop
 * A transport opens and drops its connection; state.c decides when. The calls that go up do so
 * through pointers set in one place each: a link's transport table (l->transport, rlink_init),
 * route.c's twin opener and sender (rlink_route_attach), and the callbacks handed to watch.c
 * (rl_state_announced) and wait.c (cmd.c's sender on the command's own connection).
 */
#ifndef SHARD_SERVER_LINK_INTERNAL_H
#define SHARD_SERVER_LINK_INTERNAL_H

#include "rlink.h"

typedef struct rlink_transport {
    void (*open)(rlink *l);                  /* start a connection; on failure call rl_state_lost */
    void (*drop)(rlink *l, const char *why); /* close it now: callbacks get NULL, then rl_state_lost */
    int (*is_open)(const rlink *l);          /* connecting or connected */
    int (*accepting)(const rlink *l);        /* a command may be queued now */
} rlink_transport;

/* Each kind's table; rlink_init alone names them, setting l->transport once. */
extern const rlink_transport rl_cmd_transport;
extern const rlink_transport rl_set_transport;

/* state.c: the bookkeeping every transport calls (and rlink.c's timers) */
/* At the start of open: 0 when l->target is the server to connect to now (the URL's one server, the
 * master a query just found, or the one the group learnt of since this link last looked); 1 when it is
 * being looked for (the Sentinels or seeds are asked from the loop, resolve.c): the transport returns,
 * and open is called again when the answer comes (or rl_state_lost when none does); -1 when no query
 * can be started (the transport calls rl_state_lost). */
int rl_state_resolve(rlink *l);
/* Does the server of l still lead, or do the Sentinels name another master now (a stopped master, one
 * cut off from its replicas while another took over)? Asked from the loop at most twice a second; if
 * another master is found, l leaves the old one (its pending commands get NULL) and the group follows.
 * A no-op for a URL without Sentinels. */
void rl_state_check_master(rlink *l);
/* Whether an error reply means the node is no longer the master: the transport drops the connection
 * and hands NULL to the caller (outcome unknown). Logs it. */
int rl_state_failover_reply(rlink *l, const redisReply *r);
void rl_state_connected(rlink *l); /* the connection is up (login queued first) */
void rl_state_lost(rlink *l);      /* it is gone: reset, retry after backoff */
void rl_state_sent(rlink *l);      /* one more command awaits its reply */
void rl_state_replied(rlink *l);   /* one reply came back */
/* Redis refused the connection itself for now (maxclients reached, rconn_error_maxclients: its first line, before
 * or in place of any reply): says what is wrong and what to do (rconn_explain_error), and has the next try wait the
 * backoff's cap (the TCP connect had reset the backoff: each link reconnected ten times a second, saying
 * "connection lost (unexpected reply)" and the like each time). 1 if it was such a refusal, else 0. */
int rl_state_refused(rlink *l, const char *reply);
/* A login command (AUTH, SELECT) failed: a refusal rl_state_refused explains is said so, a final refusal goes
 * to on_refused, else logged. */
void rl_state_login_failed(rlink *l, const char *what, const char *reply);
/* Another link of the group found a new master and l, open, is still on the old one: l leaves it for
 * the new one (1), without asking the Sentinels again; else 0 (the watchdog's first question). */
int rl_state_follow_group(rlink *l);

/* The login commands for url (AUTH, SELECT: 0 to 2 of them) as argument vectors. db is storage for
 * SELECT's argument. */
typedef struct rl_login {
    int n;
    int argc[2];
    const char *argv[2][3];
    const char *what[2];
    char db[16];
} rl_login;
void rl_state_login_commands(const redis_url *u, rl_login *out);

/* A Sentinel announced host:port as the new master (watch.c, through the pointer its opener hands it):
 * the group's links waiting to reconnect connect there now, and those on another server leave it at once. */
typedef void rl_announced_fn(rlink_route *rt, const char *host, int port);
void rl_state_announced(rlink_route *rt, const char *host, int port);

/* watch.c: subscribe rt to the announcements of each Sentinel of url not subscribed yet (each at most
 * every few seconds; a no-op for a URL without Sentinels), each announcement going to announced (the
 * first opener's; rl_state_announced), and close the subscriptions. */
void rl_watch_open(rlink_route *rt, const redis_url *url, rl_announced_fn *announced);
void rl_watch_close(rlink_route *rt);

/* resolve.c: a query of the Sentinels (or seeds) of url, run by the loop; done gets its end once,
 * after the query is freed: RL_QUERY_FOUND with the server to use, RL_QUERY_SAME (a check, current
 * given: the Sentinels name current first), RL_QUERY_NONE with why. NULL if it cannot start. */
enum rl_query_end { RL_QUERY_FOUND, RL_QUERY_SAME, RL_QUERY_NONE };
typedef void rl_query_done_fn(void *arg, int end, const redis_url *found, const char *why);
rl_query *rl_resolve_start(struct event_base *base, const redis_url *url, const redis_url *current,
                           rl_query_done_fn *done, void *arg);
void rl_resolve_cancel(rl_query *q); /* done is not called */

/* wait.c: reply (a copy is kept) goes to cb once WAIT on conn says `replicas` replicas have it. The
 * WAITs go out through send, cmd.c's send on this very connection (no routing: WAIT must follow its
 * command), handed down so that wait.c calls nothing above it. */
typedef int rl_send_here_fn(rlink *conn, rlink_cb *cb, void *priv, int argc, const char **argv);
void rl_wait_replicas(rlink *conn, int replicas, const redisReply *reply, rlink_cb *cb, void *priv,
                      rl_send_here_fn *send);

/* route.c */
/* Node index of the master of slot, or -1: the URL's server (no cluster, unknown slot, no key). */
int rl_route_node(const rlink_route *rt, int slot);
/* l's twin on cluster node `node` (-1: l itself), opened now if needed; NULL if it cannot be. A twin
 * that is down (its node died: a cluster failover under way) is not used: the command goes to l, whose
 * node answers MOVED with the slot's master now, so the map learns the new master instead of waiting
 * for the dead one to come back. */
rlink *rl_route_twin(rlink *l, int node);
/* If reply is a MOVED/ASK redirection to follow (owner routes, fewer than CLUSTER_MAX_HOPS hops), 1
 * with *to = the twin to resend on (NULL: cannot follow) and *ask; else 0. MOVED re-reads the map. */
int rl_route_redirect(rlink *owner, const redisReply *reply, const char *host_asked, int hops, rlink **to, int *ask);
/* The cluster's slot owners are unknown again (a node went away): commands go to the seed link until
 * MOVED replies and CLUSTER SLOTS teach the new masters. */
void rl_route_forget(rlink_route *rt);
/* Free the slot map (rlink_route_free). */
void rl_route_free(rlink_route *rt);

#endif
