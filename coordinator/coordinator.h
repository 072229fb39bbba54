/* coordinator.h: the subcommands of bin/coordinator and what they share; a map of the process.
 *
 *   init        init.c, init_options.c,        create a run: load the function library, cut the
 *               layout.c, snapshot.c,          parameters into shards and fragments, write version 0
 *               from_state.c                   (--from-state: a safetensors file's tensors)
 *   status      status.c, topology.c, evals.c  the run (rounds, workers, shards, leases, Redis itself,
 *                                              the evaluator's losses) as a table or JSON
 *   serve       serve.c, http_*.c, orphans.c   the operator's long-running process: reaps dead members on
 *                                              time, deletes blobs no shard names; --http adds the
 *                                              dashboard, /status, /metrics, /control
 *   control     control.c, http_control.c      kick a worker, set outer lr/momentum/workers, shut down
 *   checkpoint  checkpoint*.c                  export the run to a safetensors file, show one
 *   repair      repair.c                       bring back a run whose durable state is corrupt
 *
 * main.c dispatches; common_flags.c has what every subcommand shares (--redis/--redis-file/--run,
 * connecting, the status document). The coordinator holds no state: everything it does is one Redis
 * Function call or a read, so several may run and any may be killed. It links no trainer: what a run
 * needs to know about a model comes from model/. */
#ifndef DILOCO_COORDINATOR_H
#define DILOCO_COORDINATOR_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "redis/rconn.h"

#include "redis/url.h"

typedef struct coord_common {
    const char *redis_url;  /* --redis (NULL: --redis-file or $DL_REDIS_URL, see url.h) */
    const char *redis_file; /* --redis-file */
    const char *run;
    redis_url url;
    int connect_timeout_ms; /* how long coord_connect waits for an unreachable Redis: serve's
                                      --connect-timeout; 0 (the one-shot commands): one attempt */
    /* set (by a signal): coord_connect stops waiting; NULL: never */
    const volatile int *stop;
} coord_common;

int cmd_init(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_control(int argc, char **argv); /* control.c */

/* The usage lines of --redis, --redis-file and --run, which every subcommand takes. */
#define COORD_HELP REDIS_URL_HELP "  --run NAME                the run's name\n"
/* The entries of an option table (opts.h) for --redis, --redis-file and --run, filling *c. */
#define COORD_COMMON_OPTS(c)                                                  \
    {.name = "redis", .kind = OPT_STRING, .dest = &(c)->redis_url},           \
        {.name = "redis-file", .kind = OPT_STRING, .dest = &(c)->redis_file}, \
    {                                                                         \
        .name = "run", .kind = OPT_STRING, .dest = &(c)->run                  \
    }
/* Pick the URL (redis_url_pick: --redis, --redis-file or $DL_REDIS_URL), check --run was given, parse
 * the URL and connect (retrying for up to connect_timeout_ms; a refused password fails at once) into
 * *out. Returns the command's exit status so far: 0 connected, 2 a usage error (no URL, no or a bad
 * --run, a bad URL), 1 Redis unreachable or refusing; a message on stderr when not 0. */
int coord_connect(coord_common *c, rconn **out);
/* FUNCTION LOAD REPLACE of the Functions library (lua/, joined into build/diloco.lua) on every master (init.c). */
int coord_load_library(rconn *rc, char *err, size_t errlen);
int cmd_repair(int argc, char **argv); /* repair.c */
/* orphans.c: delete the blobs of run that no shard names and none ever can (written by a shard-server that was
 * killed, or fenced out, before it recorded them): *deleted of them. 0, or -1 with err (some may be gone). */
int orphans_collect(rconn *c, const char *run, long *deleted, char *err, size_t errlen);
int cmd_load_library(int argc, char **argv); /* library.c */

/* topology.c: Redis itself (master, replicas, lag; failovers behind Sentinel). A watch (serve) also
 * remembers the master it last saw, so a change is logged and reported as the last failover. */
typedef struct topology_watch {
    char master[300];
    char last_from[300], last_to[300];
    uint64_t last_ms; /* wall clock */
    int seen;         /* failovers seen by this process */
} topology_watch;
struct json_t *topology_read(rconn *rc, const redis_url *url, topology_watch *w); /* w may be NULL */
void topology_print(struct json_t *topology);
/* Note the master a connection leads to now; a change is logged and kept as the last failover. */
void topology_watch_master(topology_watch *w, const char *master);
#endif
