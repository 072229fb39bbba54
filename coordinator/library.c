/* library.c: `coordinator load-library`, this build's function library loaded into a Redis that holds another.
 *
 * Every binary embeds the library it speaks (build/diloco.lua) and `coordinator init` loads it. Binaries
 * upgraded under a running run find an older build of the same version in Redis: it works (newer callers'
 * arguments are optional), without the newer build's fixes and checks, and each process says so once
 * (common/redis/runconf_load.c). This command loads this build's (FUNCTION LOAD REPLACE on every master) with
 * no process stopped: a function call runs whole under the old or the new library. It refuses a Redis whose
 * library is of another version (another key layout: runconf_check_library says what to do). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/opts.h"
#include "base/version.h"
#include "coordinator.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: bin/coordinator load-library --redis URL --run NAME\n\n" COORD_HELP
               "Loads this build's function library into Redis (every master of a Cluster) when Redis holds another\n"
               "build of the same version, as after an upgrade of the binaries: no process needs to stop. NAME is a\n"
               "run of that Redis, checked before and after.\n");
}

/* What Redis holds: 0 when a library of this version is loaded (its build into *held, "" for one from before
 * builds were named), 1 when none is (nothing to replace: `coordinator init` loads one), -1 + message. */
static int held_build(rconn *rc, const char *run, char **held)
{
    char err[1024];
    *held = NULL;
    int lib = runconf_check_library(rc, run, err, sizeof err);
    if (lib == RUNCONF_ABSENT) return 1;
    if (lib < 0) {
        fprintf(stderr, "coordinator load-library: %s\n", err);
        return -1;
    }
    *held = runconf_redis_build(rc, run);
    if (*held == NULL) {
        fprintf(stderr, "coordinator load-library: cannot read the build Redis holds: %s\n", rconn_errstr(rc));
        return -1;
    }
    return 0;
}

/* FUNCTION LOAD REPLACE of ours, then Redis asked which build it holds now: 0, or 1 after a message. */
static int load_own(rconn *rc, const char *run, const char *held)
{
    char err[1024];
    if (coord_load_library(rc, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator load-library: %s\n", err);
        return 1;
    }
    const char *own = runconf_own_build();
    char *now = runconf_redis_build(rc, run);
    int ok = now != NULL && strcmp(now, own) == 0;
    if (ok)
        printf("loaded build %s of function library version %s (Redis held %s)\n", own, DL_LIB_VERSION,
               held[0] ? held : "a build from before builds were named");
    else
        fprintf(stderr, "coordinator load-library: loaded, but Redis answers build %s, not %s\n", now ? now : "?", own);
    free(now);
    return ok ? 0 : 1;
}

int cmd_load_library(int argc, char **argv)
{
    coord_common c = {0};
    const opt_spec specs[] = {COORD_COMMON_OPTS(&c), {0}};
    int prc = opts_parse_cmd("coordinator load-library", usage, specs, argc, argv, 0, NULL, NULL);
    if (prc != 0) return opts_exit_status(prc);
    rconn *rc;
    int st = coord_connect(&c, &rc);
    if (st != 0) return st;
    char *held = NULL;
    const char *own = runconf_own_build();
    runconf_skip_build_check(); /* (what it would warn about is what this command mends) */
    int h = held_build(rc, c.run, &held);
    if (h == 1)
        fprintf(stderr, "coordinator load-library: no function library in this Redis: `coordinator init` a run (it "
                        "loads this build's)\n");
    if (h != 0)
        st = 1;
    else if (strcmp(held, own) == 0)
        printf("Redis holds this build of the function library already (version %s, build %s): nothing to do\n",
               DL_LIB_VERSION, own);
    else
        st = load_own(rc, c.run, held);
    free(held);
    rconn_free(rc);
    return st;
}
