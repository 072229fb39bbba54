/* fcall.h: calls of the run's Redis Functions library (lua/, docs/PROTOCOL.md "Functions").
 *
 * Every function of the library takes one key, the run's dl:{R}:config (so that a Redis Cluster routes
 * the call to the master of the run's hash tag), then its arguments: "FCALL fn 1 dl:{R}:config args...".
 * fcall_argv builds that vector for any transport (the shard-server's asynchronous links use it);
 * fcall_run sends it on a synchronous rconn (the coordinator). */
#ifndef DILOCO_FCALL_H
#define DILOCO_FCALL_H

#include <hiredis/hiredis.h>

#include "redis/rconn.h"

/* Fill argv[0 .. 4 + nargs) with FCALL, fn, 1, config_key, args. -1 when cap is too small. */
int fcall_argv(const char **argv, int cap, const char *fn, const char *config_key, int nargs, const char **args);

/* FCALL fn 1 config_key args... on c: the reply (NULL: connection error, see rconn_reply_error). */
redisReply *fcall_run(rconn *c, const char *config_key, const char *fn, int nargs, const char **args);

#endif
