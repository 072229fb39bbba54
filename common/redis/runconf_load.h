/* runconf_load.h: reading a run's configuration (dl:{R}:config) out of Redis.
 *
 * The Redis half of format/runconf.h: check that Redis runs the function library this build speaks,
 * HGETALL the config hash and hand its fields to runconf_parse. */
#ifndef DILOCO_RUNCONF_LOAD_H
#define DILOCO_RUNCONF_LOAD_H
#include <stddef.h>
#include <hiredis/hiredis.h>

#include "format/runconf.h"
#include "redis/rconn.h"

/* What runconf_check_library and runconf_load return when the run is not there (yet): no function library
 * in this Redis, or no config of the run. Other failures are -1. */
#define RUNCONF_ABSENT (-2)
/* Check `FCALL dl_version` against DL_LIB_VERSION: RUNCONF_ABSENT (no library) or -1 with a message that
 * says what to do otherwise. */
int runconf_check_library(rconn *c, const char *run, char *err, size_t errlen);
/* This binary's build of the function library (LIB_BUILD of the text it embeds: 16 hex digits), and the one
 * Redis holds (`FCALL dl_build`; "" from a build before dl_build, NULL on another error). A Redis can hold
 * another build of the same version: it works, without the other build's fixes. runconf_check_library says
 * so once a process, with what to do (`coordinator load-library`). */
const char *runconf_own_build(void);
char *runconf_redis_build(rconn *c, const char *run);
/* No build warning from runconf_check_library in this process (`coordinator load-library`, which loads ours). */
void runconf_skip_build_check(void);
/* Read and validate dl:{run}:config (after checking the library): 0, RUNCONF_ABSENT or -1 with a message.
 * Free with runconf_free. */
int runconf_load(rconn *c, const char *run, runconf *out, char *err, size_t errlen);
/* The parsing half of runconf_load: rc's fields from an HGETALL reply of dl:{R}:config (rc->run is left
 * as it is): its string pairs go to runconf_parse; pairs that are not two strings are skipped. On error
 * rc may hold allocations: runconf_free. */
int runconf_from_reply(const redisReply *r, runconf *rc, char *err, size_t errlen);

/* Whether a Redis error reply to a call on a run that existed says the run is gone from this Redis: NULL
 * if not, else what is missing: the function library ("ERR Function not found": a Redis restarted
 * without its data, or flushed), the run's config (NORUN), or another key every run has (LOST: the text of
 * the reply after its code, which names the keys and why: evicted, or deleted). Processes that were running the run say
 * "run 'R' is gone from this Redis (<what>): " RUN_GONE_HINT instead of repeating the raw error. */
const char *runconf_error_gone(const char *redis_error);
#define RUN_GONE_HINT                                                                                           \
    "Redis restarted without its data (a Redis without AOF keeps nothing; docs/deploy.md has the durable "      \
    "config) or was flushed, or the run's keys were evicted or deleted; this process cannot continue the run: " \
    "stop it, then `coordinator init` the run again (--from-checkpoint FILE resumes a checkpoint)"
#define RUN_GONE_LOG_EVERY_MS 60000 /* a process that keeps trying says it once a minute, not every try */
#endif
