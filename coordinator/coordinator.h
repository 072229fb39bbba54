/* coordinator.h: the subcommands of bin/coordinator and what they share.
 *
 *   init    create a run: load the function library, cut the parameters into shards, write version 0
 *   status  print the run (rounds, workers, shards, leases) as a table or JSON
 *   serve   the long-running operator process: reaps dead members (HTTP dashboard: later)
 *
 * The coordinator holds no state: everything it does is one Redis Function call or a read. */
#ifndef DILOCO_COORDINATOR_H
#define DILOCO_COORDINATOR_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "rconn.h"

#include "url.h"

typedef struct coord_common {
    const char *redis_url;         /* --redis (NULL: --redis-file or $DL_REDIS_URL, see url.h) */
    const char *redis_file;        /* --redis-file */
    const char *run;
    redis_url url;
    int connect_timeout_ms;        /* how long coord_connect waits for an unreachable Redis: serve's
                                      --connect-timeout; 0 (the one-shot commands): one attempt */
} coord_common;

int cmd_init(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_control(int argc, char **argv); /* control.c */

/* Parse --redis/--redis-file/--run at argv[*i] (advancing *i); 1 if consumed, 0 if not ours, -1 on error. */
int coord_common_flag(coord_common *c, int argc, char **argv, int *i);
/* Pick the URL (redis_url_pick: --redis, --redis-file or $DL_REDIS_URL), check --run was given, parse
 * the URL and connect (retrying for up to connect_timeout_ms; a refused password fails at once). NULL +
 * message on stderr. */
rconn *coord_connect(coord_common *c);
/* FUNCTION LOAD REPLACE of lua/diloco.lua on every master (init.c). */
int coord_load_library(rconn *rc, char *err, size_t errlen);
int cmd_repair(int argc, char **argv); /* repair.c */
/* The status document (dl_status) parsed; NULL + message on stderr. */
struct json_t *coord_fetch_status(rconn *rc, const char *run);

/* topology.c: Redis itself (master, replicas, lag; failovers behind Sentinel). A watch (serve) also
 * remembers the master it last saw, so a change is logged and reported as the last failover. */
typedef struct topology_watch {
    char master[300];
    char last_from[300], last_to[300];
    uint64_t last_ms;   /* wall clock */
    int seen;           /* failovers seen by this process */
} topology_watch;
struct json_t *topology_read(rconn *rc, const redis_url *url, topology_watch *w); /* w may be NULL */
void topology_print(struct json_t *topology);
/* Note the master a connection leads to now; a change is logged and kept as the last failover. */
void topology_watch_master(topology_watch *w, const char *master);
#endif
