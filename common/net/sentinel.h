/*
 * sentinel.h: from a Redis URL that names several servers to the one server to talk to now.
 *
 * Two URL forms name more than one server (url.h):
 *   - redis+sentinel://s1,s2,s3/master: the Sentinels watching a master and its replicas. The master
 *     is asked of each Sentinel in turn (SENTINEL get-master-addr-by-name master), and the node it
 *     names is checked with ROLE: a Sentinel that has not yet seen a failover (or one cut off from the
 *     others) may name a node that is a replica now, and writes there would be refused (READONLY);
 *   - redis://h1,h2,h3: seeds of a Redis Cluster; the first that answers PING is used (any node of a
 *     cluster routes us to the others with MOVED, so the one we start from only has to be alive).
 * Every Redis user of the project (common/net/rconn.c for the synchronous connections, the shard-server's
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
 */
#ifndef DILOCO_SENTINEL_H
#define DILOCO_SENTINEL_H

#include <stddef.h>

#include "url.h"

/* Whether u names more than one server and must go through redis_url_resolve(). */
int redis_url_needs_resolve(const redis_url *u);

/* The URL of the one server to connect to now: u itself for a single server; the current master for
 * a Sentinel URL; the first live seed for a list. out keeps u's credentials and database. Each server
 * asked gets timeout_ms to connect and answer. 0, or -1 with err saying what every server answered. */
int redis_url_resolve(const redis_url *u, int timeout_ms, redis_url *out, char *err, size_t errlen);

/* A command (printf-style, as redisCommand) on the first of u's Sentinels that answers; NULL + err
 * when none does. For status displays (SENTINEL MASTER name). */
struct redisReply;
struct redisReply *sentinel_command(const redis_url *u, int timeout_ms, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Whether the Sentinels of u name a master other than host:port now, one that ROLE confirms: 1 and
 * *out = its URL (as redis_url_resolve); else 0 (the same master, none confirmed, no Sentinel in u).
 * Each server asked gets timeout_ms. */
int sentinel_master_changed(const redis_url *u, const char *host, int port, int timeout_ms, redis_url *out);

/* Subscriptions to the failover announcements of every Sentinel of u that answers within timeout_ms;
 * NULL if u names no Sentinel or none answers. */
typedef struct sentinel_watch sentinel_watch;
sentinel_watch *sentinel_watch_open(const redis_url *u, int timeout_ms);
/* Wait up to ms for an announcement of a new master for u's master name: 1 when one came, 0 after ms
 * without one, -1 when every subscription broke (sleep instead). */
int sentinel_watch_wait(sentinel_watch *w, int ms);
void sentinel_watch_close(sentinel_watch *w);
/* The sockets of the subscriptions still open (for an event loop: when one is readable, call
 * sentinel_watch_wait(w, 0)); their number, at most cap. */
int sentinel_watch_fds(const sentinel_watch *w, int *fds, int cap);

#endif
