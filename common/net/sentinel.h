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

#endif
