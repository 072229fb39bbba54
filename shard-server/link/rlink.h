/*
 * rlink.h: the shard-server's link to Redis: one asynchronous connection that never gives up.
 *
 * Every Redis command the shard-server sends goes through an rlink. There are two kinds of traffic,
 * with one behaviour around them:
 *   RLINK_CMD  any command, through hiredis' asynchronous API (control FCALLs, blob GET/DEL);
 *   RLINK_SET  SET of a big blob sent straight from the caller's memory with writev() (hiredis copies
 *              a command into a buffer it then memmoves after every partial write: a 12.5 MB SET costs
 *              hundreds of moves of megabytes), parsing the only replies SET gives (+status/-error).
 * What every link does, whatever its kind (rlink.c, state.c):
 *   - a lost connection is re-opened with exponential backoff (100 ms .. 5 s, jittered); every command
 *     in flight gets a NULL reply, so its owner treats the outcome as unknown;
 *   - a stall watchdog drops the connection when commands are pending and nothing has come back for
 *     stall_ms (a SIGSTOPped Redis, a silent partition: hiredis 0.14 has no command timeout); behind
 *     Sentinel it asks them after a second without a reply whether the master changed, and drops the
 *     connection at once if so (a stopped or partitioned master);
 *   - a URL that names several servers (Sentinels, cluster seeds: common/redis/sentinel.h) is resolved to the
 *     current master at every (re)connect, and a reply saying the node is no longer that master
 *     (rconn_error_failover: READONLY, CLUSTERDOWN, ...) drops the connection like an I/O error, so
 *     following a failover is reconnecting. The Sentinels are asked from the loop, never waited for
 *     (resolve.c: a Sentinel that does not answer delays no request the shard-server serves), and the
 *     group of links subscribes to their announcements (watch.c): a +switch-master or +promoted-slave
 *     names the new master, and every link of the group goes there at once;
 *   - AUTH and SELECT go first on every connection; a final refusal (rconn_error_final: the password
 *     or user changed under us) is reported to on_refused;
 *   - Redis Cluster (route.c): once a MOVED or ASK reply shows Redis is a cluster, a command goes to
 *     this link's twin on the master of its key (a link of the same kind, opened on first use, that
 *     accepts commands while it connects), and redirections are followed inside the link, so callers
 *     only ever see the final reply.
 * Contract: a command is accepted only while the link is connected (else -1 and the callback is not
 * called); its callback then runs exactly once, with the reply or NULL (connection lost). Replies come
 * in the order the commands were sent on one node.
 */
#ifndef SHARD_SERVER_RLINK_H
#define SHARD_SERVER_RLINK_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "redis/cluster.h"
#include "redis/url.h"

typedef void rlink_cb(redisReply *reply, void *priv); /* reply NULL: connection lost, outcome unknown */
/* Redis refused the login of link `name` for good; why = its reply. */
typedef void rlink_refused_fn(const char *name, const char *why);

enum rlink_kind { RLINK_CMD = 0, RLINK_SET = 1 };

struct rlink_route;
struct rlink_item;
struct rlink_transport;
typedef struct rl_query rl_query;

typedef struct rlink {
    const char *name;
    const redis_url *url;       /* as given (may name Sentinels or several seeds) */
    redis_url target;           /* the one server of the current connection (state.c) */
    uint64_t moved_checked_ms;  /* last time a NOREPLICAS reply made us ask where the master is */
    uint64_t resolve_logged_ms; /* last "no master found" warning (one every 5 s at most) */
    unsigned master_seen;       /* the route's master_gen this link last compared its target with */
    rl_query *query;            /* asking the Sentinels or seeds (resolve.c), or NULL */
    int opening;                /* open waits for query's answer */
    int resolved;               /* query just set target: the next open connects there */
    struct event_base *base;
    int kind;     /* enum rlink_kind */
    int stall_ms; /* no reply for this long while commands are pending: drop the connection */
    /* the kind's transport table (cmd.c's or set.c's), chosen once by rlink_init */
    const struct rlink_transport *transport;
    rlink_refused_fn *on_refused;
    void (*on_ready)(void *arg); /* called each time the connection is (re-)established */
    void *on_ready_arg;
    int ready; /* connected (the login commands are queued first) */
    int was_up;          /* a connection was established before */
    uint64_t reconnects; /* connections established after the first (the shard-server's metrics) */
    int stopping;
    unsigned attempt;       /* reconnect attempts since the last success */
    unsigned up_attempt;    /* attempt when the connection came up (state.c: a short-lived one is no success) */
    uint64_t up_ms;         /* now_ms() when it came up */
    int answered;           /* a reply came on it since */
    int pending;            /* commands sent, reply not yet received */
    uint64_t last_activity; /* now_ms() of the last reply, or of the first send after idle */
    struct event *retry_timer, *watch_timer;
    /* Redis Cluster (route.c): twins on the other masters, opened on first use (never this link: the
     * node it is on changes when it moves, so route.c asks each time) */
    struct rlink_route *route;
    struct rlink *twin[CLUSTER_MAX_NODES];
    int is_twin;
    /* RLINK_CMD transport (cmd.c) */
    redisAsyncContext *ac;
    rlink_cb *sub_cb; /* rlink_cmd_subscribe's: each message of the subscription */
    void *sub_priv;
    /* RLINK_SET transport (set.c) */
    int fd; /* -1 when down */
    int connecting;
    struct rlink_item *head, *tail; /* in send order; replies pop head */
    struct rlink_item *send;        /* first command with bytes left to write */
    struct event *ev_read, *ev_write;
    char rbuf[1024];
    size_t rlen;
} rlink;

/* Start connecting (in the background: the loop does the rest). -1 if the timers cannot be made. */
int rlink_init(rlink *l, const char *name, int kind, const redis_url *url, struct event_base *base, int stall_ms,
               rlink_refused_fn *on_refused);
/* RLINK_CMD: send a command; argvlen NULL = NUL-terminated arguments. */
int rlink_cmd(rlink *l, rlink_cb *cb, void *priv, int argc, const char **argv, const size_t *argvlen);
int rlink_cmds(rlink *l, rlink_cb *cb, void *priv, int argc, const char **argv);
/* RLINK_CMD: the same, but cb gets the reply only once WAIT (on the connection that ran the command)
 * says `replicas` replicas have it, and everything written before it (wait.c). An error reply comes at
 * once; a connection lost first gives NULL (outcome unknown, as for every command). */
int rlink_cmd_replicated(rlink *l, int replicas, rlink_cb *cb, void *priv, int argc, const char **argv,
                         const size_t *argvlen);
/* RLINK_CMD: subscribe the link's connection (not routed: a PUBLISH reaches every node of a Cluster) to
 * channel. cb gets the confirmation and every message (the reply array: kind, channel, payload), then NULL
 * once the connection is lost; the connection carries nothing else from then on. A reconnect does not
 * subscribe again: the caller does, from on_ready. -1 when the link is not connected. */
int rlink_cmd_subscribe(rlink *l, const char *channel, rlink_cb *cb, void *priv);
/* RLINK_SET: SET key to head||payload; payload must stay valid until cb runs. */
int rlink_set(rlink *l, const char *key, const uint8_t *head, size_t hlen, const void *payload, size_t plen,
              rlink_cb *cb, void *priv);
/* Close the link and its twins and free what they hold; pending callbacks get NULL. The rlink itself
 * is the caller's: it may be freed afterwards, not used again. */
void rlink_close(rlink *l);

/* ---------------------------------------------------------------------------------------------- */
/* A group of links: Redis Cluster routing (route.c) and the master they follow; attached and freed by rlink.c */

#define RLINK_ROUTE_MAX 8
/* What a redirection that cannot be followed means to an operator (cmd.c, set.c log it after the reply). */
#define RLINK_CANNOT_FOLLOW_HINT                                                                        \
    "the Redis Cluster node it names cannot be reached (down, or too many redirections): is it up? "   \
    "redis-cli --cluster check HOST:PORT shows the cluster's state"

typedef struct rlink_route {
    cluster_map *map; /* NULL until a MOVED/ASK reply shows Redis is a cluster */
    rlink *via;       /* an RLINK_CMD link: where CLUSTER SLOTS is sent */
    int refreshing;
    uint64_t refreshed_ms;
    /* the master a link of the group last resolved (Sentinel URLs): when one link finds a new master,
     * the others leave the old one at their next watchdog tick (a stopped old master would otherwise
     * hold their pending commands until the stall watchdog, a minute for the bulk links) */
    char master_host[256];
    int master_port;
    unsigned master_gen;
    /* the group's links: when one finds a new master, those waiting to reconnect retry at once */
    rlink *links[RLINK_ROUTE_MAX];
    int nlinks;
    /* Sentinel URLs: the subscription to the Sentinels' failover announcements (watch.c) */
    struct rl_watch *watch;
    /* route.c's calls upward, set by rlink_route_attach (rlink.c) only: a twin of l on url (a link of
     * l's kind, routed like l; NULL if it cannot be made), and a command sent on via (rlink_cmds) */
    struct rlink *(*open_twin)(struct rlink *l, const redis_url *url);
    int (*send)(struct rlink *via, rlink_cb *cb, void *priv, int argc, const char **argv);
} rlink_route;

/* Route the links (of any kind, at most RLINK_ROUTE_MAX) by rt; CLUSTER SLOTS goes on `via` (rlink.c). */
void rlink_route_attach(rlink_route *rt, rlink *via, rlink **links, int nlinks);
/* Free the slot map and close the Sentinel subscriptions (after the links are closed). */
void rlink_route_free(rlink_route *rt);

#endif
