/*
 * sentinel.h: from a Redis URL that names several servers to the one server to talk to now.
 *
 * Two URL forms name more than one server (url.h):
 *   - redis+sentinel://s1,s2,s3/master: the Sentinels watching a master and its replicas. The master
 *     is asked of every Sentinel at once (SENTINEL get-master-addr-by-name master), and the node
 *     they name is checked with ROLE: a Sentinel that has not yet seen a failover (or one cut off from the
 *     others) may name a node that is a replica now, and writes there would be refused (READONLY);
 *   - redis://h1,h2,h3: seeds of a Redis Cluster, pinged at once; the first that answers is used (any node of a
 *     cluster routes us to the others with MOVED, so the one we start from only has to be alive).
 * Every Redis user of the project (common/redis/rconn.c for the synchronous connections, the shard-server's
 * links) resolves through redis_url_resolve() each time it (re)connects, so following a failover is
 * the same as reconnecting after a lost connection: retry with the backoff the caller already has.
 * Every Sentinel is asked and the master most of them name is checked first: right after a failover
 * some still name the old master, which may be dead or stopped (a ROLE to it would wait the timeout).
 *
 * Two helpers make following a failover fast rather than a matter of backoff steps:
 *   - sentinel_master_changed(): a command without a reply for a while asks whether the Sentinels
 *     name another master now (a stopped or partitioned master keeps the connection open);
 *   - sentinel_watch: a client that lost its master subscribes to the Sentinels' announcements
 *     (+promoted-slave from the Sentinel that led the failover, the moment it answers with the new
 *     master; +switch-master from each of the others as it learns) and retries as one arrives.
 * These calls block (the servers asked together get timeout_ms, then each ROLE check): they are for
 * threads that may wait; a Sentinel that accepts and never answers costs them nothing while a
 * majority of the others answer (asked one after the other, it cost every reconnect timeout_ms). A client on
 * an event loop does the same asking without blocking (the shard-server: shard-server/link/resolve.c)
 * and shares the pieces at the end of this file: counting the Sentinels' answers, reading the replies.
 */
#ifndef DILOCO_SENTINEL_H
#define DILOCO_SENTINEL_H

#include <stddef.h>

#include "redis/url.h"

/* Whether u names more than one server and must go through redis_url_resolve(). */
int redis_url_needs_resolve(const redis_url *u);

/* The URL of the one server to connect to now: u itself for a single server; the current master for
 * a Sentinel URL; the first live seed for a list. out keeps u's credentials and database. Each server
 * asked gets timeout_ms to connect and answer. 0, or -1 with err saying what every server answered. */
int redis_url_resolve(const redis_url *u, int timeout_ms, redis_url *out, char *err, size_t errlen);

struct redisReply;

/* A command (printf-style, as redisCommand) sent to all of u's Sentinels at once: the first reply;
 * NULL + err when none answers within timeout_ms. For status displays (SENTINEL MASTER name). */
struct redisReply *sentinel_command(const redis_url *u, int timeout_ms, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Whether the Sentinels of u name a master other than host:port now, one that ROLE confirms: 1 and
 * *out = its URL (as redis_url_resolve); else 0 (the same master, none confirmed, no Sentinel in u).
 * The Sentinels together get timeout_ms, then each ROLE check. */
int sentinel_master_changed(const redis_url *u, const char *host, int port, int timeout_ms, redis_url *out);

/* Subscriptions to the failover announcements of every Sentinel of u that takes the connection and
 * the SUBSCRIBE within timeout_ms (all connected at once, no reply waited for: a refused login breaks
 * its subscription when sentinel_watch_wait reads it); NULL if u names no Sentinel or none takes it. */
typedef struct sentinel_watch sentinel_watch;
sentinel_watch *sentinel_watch_open(const redis_url *u, int timeout_ms);
/* Wait up to ms for an announcement of a new master for u's master name: 1 when one came, 0 after ms
 * without one, -1 when every subscription broke (sleep instead). */
int sentinel_watch_wait(sentinel_watch *w, int ms);
void sentinel_watch_close(sentinel_watch *w);

/* ---------------------------------------------------------------------------------------------- */
/* The pieces an asynchronous client shares with the calls above */

/* out = u turned into the URL of the one server host:port, with u's credentials and database. */
void redis_url_at(const redis_url *u, const char *host, int port, redis_url *out);
/* What the Sentinels name: each distinct master with the number of Sentinels naming it. */
typedef struct sentinel_named {
    char host[256];
    int port;
    int votes;
} sentinel_named;
/* Count one Sentinel's answer host:port in named[0..n) (room for REDIS_URL_MAX_HOSTS), keeping the
 * most named first (ties in the order of the answers); the new n. */
int sentinel_vote(sentinel_named *named, int n, const char *host, int port);
/* The master named by Sentinel s's reply r to SENTINEL get-master-addr-by-name: 0 and host/port, or
 * -1 with why (an error, or a master name it does not know). */
int sentinel_reply_addr(const redis_url *u, const redis_host *s, const struct redisReply *r, char *host, size_t hostcap,
                        int *port, char *why, size_t whylen);
/* Whether r, host:port's reply to ROLE, says it is a master; 0 with why if not. */
int sentinel_reply_is_master(const struct redisReply *r, const char *host, int port, char *why, size_t whylen);
/* Whether r, a pub/sub message of a subscription to +switch-master and +promoted-slave, announces a
 * new master for the master named `master`: 1 and its host/port, else 0. */
int sentinel_announcement(const struct redisReply *r, const char *master, char *host, size_t hostcap, int *port);

#endif
