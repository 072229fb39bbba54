/*
 * internal.h: what the files of shard-server/link/ share, and nothing else sees.
 *
 *   rlink.c   the link's life: init, backoff and retry, stall watchdog, state bookkeeping, login, close
 *   route.c   Redis Cluster: the slot map, twins, following MOVED/ASK
 *   cmd.c     RLINK_CMD transport: hiredis asynchronous connection
 *   set.c     RLINK_SET transport: writev() of SET commands from the caller's memory
 *   wait.c    replies held back until WAIT says enough replicas have the command
 *   watch.c   a group's subscription to the Sentinels' failover announcements
 * A transport opens and drops its connection; rlink.c decides when.
 */
#ifndef SHARD_SERVER_LINK_INTERNAL_H
#define SHARD_SERVER_LINK_INTERNAL_H

#include "rlink.h"

typedef struct rlink_transport {
    void (*open)(rlink *l);                  /* start a connection; on failure call rl_lost */
    void (*drop)(rlink *l, const char *why); /* close it now: pending callbacks get NULL, then rl_lost */
    int (*is_open)(const rlink *l);          /* connecting or connected */
    int (*accepting)(const rlink *l);        /* a command may be queued now */
} rlink_transport;

extern const rlink_transport rl_cmd_transport;
extern const rlink_transport rl_set_transport;

/* rlink.c: bookkeeping every transport calls */
/* Set l->target to the server to connect to now (the master behind Sentinels, a live seed); -1 when
 * none can be found (the transport then calls rl_lost and tries again after backoff). */
int rl_resolve(rlink *l);
/* After a NOREPLICAS reply: do the Sentinels name another master now (an old master cut off from its
 * replicas, while a new one took over)? Asks at most twice a second; 0 for a URL naming one server. */
int rl_master_moved(rlink *l);
/* Whether an error reply means the node is no longer the master: the transport drops the connection
 * and hands NULL to the caller (outcome unknown). Logs it. */
int rl_failover_reply(rlink *l, const redisReply *r);
void rl_connected(rlink *l); /* the connection is up (login queued first) */
void rl_lost(rlink *l);      /* it is gone: reset, retry after backoff */
void rl_sent(rlink *l);      /* one more command awaits its reply */
void rl_replied(rlink *l);   /* one reply came back */
/* A login command (AUTH, SELECT) failed: a final refusal goes to on_refused, else logged. */
void rl_login_failed(rlink *l, const char *what, const char *reply);

/* The login commands for url (AUTH, SELECT: 0 to 2 of them) as argument vectors. db is storage for
 * SELECT's argument. */
typedef struct rl_login {
    int n;
    int argc[2];
    const char *argv[2][3];
    const char *what[2];
    char db[16];
} rl_login;
void rl_login_commands(const redis_url *u, rl_login *out);

/* A failover was announced (watch.c): the group's links waiting to reconnect try now, and those on a
 * master the Sentinels no longer name leave it at once. */
void rl_announced(rlink_route *rt);

/* watch.c: subscribe rt to the announcements of the Sentinels of url (at most every few seconds; a
 * no-op while subscribed or for a URL without Sentinels). */
void rl_watch_open(rlink_route *rt, const redis_url *url);

/* cmd.c: send on this very connection (no routing: WAIT must follow its command) */
int rl_cmd_here(rlink *conn, rlink_cb *cb, void *priv, int argc, const char **argv);

/* wait.c: reply (a copy is kept) goes to cb once WAIT on conn says `replicas` replicas have it */
void rl_wait_replicas(rlink *conn, int replicas, const redisReply *reply, rlink_cb *cb, void *priv);

/* route.c */
/* Node index of the master of slot, or -1: the URL's server (no cluster, unknown slot, no key). */
int rl_route_node(const rlink_route *rt, int slot);
/* l's twin on cluster node `node` (-1: l itself), opened now if needed; NULL if it cannot be. A twin
 * that is down (its node died: a cluster failover under way) is not used: the command goes to l, whose
 * node answers MOVED with the slot's master now, so the map learns the new master instead of waiting
 * for the dead one to come back. */
rlink *rl_twin(rlink *l, int node);
/* If reply is a MOVED/ASK redirection to follow (owner routes, fewer than CLUSTER_MAX_HOPS hops), 1
 * with *to = the twin to resend on (NULL: cannot follow) and *ask; else 0. MOVED re-reads the map. */
int rl_redirect(rlink *owner, const redisReply *reply, const char *host_asked, int hops, rlink **to, int *ask);
/* The cluster's slot owners are unknown again (a node went away): commands go to the seed link until
 * MOVED replies and CLUSTER SLOTS teach the new masters. */
void rl_route_forget(rlink_route *rt);
/* Close and free l's twins. */
void rl_close_twins(rlink *l);

#endif
