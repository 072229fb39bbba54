/* runconf_load.c: a run's configuration read from Redis (see runconf_load.h); the parsing and every
 * check of the values are format/runconf.c's. */
#include "redis/runconf_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "base/version.h"
#include "format/keys.h"

extern const char lua_library[]; /* build/gen/lua_library.c: the library this binary loads and speaks */

const char *runconf_own_build(void)
{
    static char build[17];
    if (build[0] == '\0') {
        const char *p = strstr(lua_library, "local LIB_BUILD = '");
        if (p != NULL) snprintf(build, sizeof build, "%.16s", p + strlen("local LIB_BUILD = '"));
    }
    return build;
}

char *runconf_redis_build(rconn *c, const char *run)
{
    char key[KEY_MAX];
    redisReply *r = rconn_command(c, "FCALL dl_build 1 %s", key_run(key, sizeof key, run, "config"));
    char *out = NULL;
    if (r != NULL && r->type == REDIS_REPLY_STRING)
        out = strdup(r->str);
    else if (r != NULL && r->type == REDIS_REPLY_ERROR && runconf_error_gone(r->str) != NULL)
        out = strdup(""); /* (a library of this version from before dl_build) */
    if (r) freeReplyObject(r);
    return out;
}

/* Once a process, after the version matched: the build Redis holds against ours. Another build of the same
 * version works (its callers' newer arguments are optional), without this build's fixes and checks, until
 * `coordinator load-library` loads ours: said as a warning, never an error. */
static int build_checked;

void runconf_skip_build_check(void)
{
    __atomic_store_n(&build_checked, 1, __ATOMIC_RELAXED);
}

static void check_build(rconn *c, const char *run)
{
    if (__atomic_exchange_n(&build_checked, 1, __ATOMIC_RELAXED)) return;
    char *theirs = runconf_redis_build(c, run);
    if (theirs != NULL && strcmp(theirs, runconf_own_build()) != 0)
        log_warn("Redis holds another build of the ReDiLoCo function library (%s; this binary's is %s), of the same "
                 "version %s: it works, without this build's fixes, until an operator loads this build's: "
                 "`coordinator load-library --redis URL --run %s` (no process needs to stop)",
                 theirs[0] ? theirs : "one from before builds were named", runconf_own_build(), DL_LIB_VERSION, run);
    free(theirs);
}

/* When the server is a replica (ROLE: "slave", master host, port, link state), what to say about a library it
 * lacks: its master may have one it has not copied yet (the link down, or the first sync under way), into out;
 * "" otherwise. "Run `coordinator init` first" alone sent an operator to init a run that existed. */
static void replica_note(rconn *c, char *out, size_t cap)
{
    out[0] = '\0';
    redisReply *r = rconn_command(c, "ROLE");
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 4 && r->element[0]->type == REDIS_REPLY_STRING &&
        strcmp(r->element[0]->str, "slave") == 0 && r->element[1]->type == REDIS_REPLY_STRING &&
        r->element[2]->type == REDIS_REPLY_INTEGER && r->element[3]->type == REDIS_REPLY_STRING)
        snprintf(out, cap,
                 ": this Redis is a replica of %s:%lld, its link to it '%s' (not in sync yet?); point the URL at the "
                 "master, or wait for the replica to sync",
                 r->element[1]->str, (long long)r->element[2]->integer, r->element[3]->str);
    if (r != NULL) freeReplyObject(r);
}

int runconf_check_library(rconn *c, const char *run, char *err, size_t errlen)
{
    char key[KEY_MAX];
    key_run(key, sizeof key, run, "config");
    redisReply *r = rconn_command(c, "FCALL dl_version 1 %s", key);
    if (r == NULL) {
        err_set(err, errlen, "redis: %s", rconn_errstr(c));
        return -1;
    }
    int rc = -1;
    if (r->type == REDIS_REPLY_ERROR && rconn_error_final(r->str)) {
        err_set(err, errlen,
                "Redis refuses this user: %s (check the user and password in the Redis URL and the "
                "user's ACL, e.g. deploy/redis/users.acl)",
                r->str);
    } else if (r->type == REDIS_REPLY_ERROR && rconn_sentinel_error(c, r->str, err, errlen)) {
        /* (a Sentinel: err says which URL to give) */
    } else if (r->type == REDIS_REPLY_ERROR) {
        char replica[400];
        replica_note(c, replica, sizeof replica);
        err_set(err, errlen, "the ReDiLoCo function library is not loaded in this Redis (%s)%s", r->str,
                replica[0] ? replica : "; run `coordinator init` first");
        if (runconf_error_gone(r->str) != NULL) rc = RUNCONF_ABSENT;
    } else if (r->type != REDIS_REPLY_STRING || strcmp(r->str, DL_LIB_VERSION) != 0) {
        err_set(err, errlen,
                "Redis has function library version '%s' but this build speaks version '%s'; "
                "use binaries of the same release as the coordinator that ran init",
                r->type == REDIS_REPLY_STRING ? r->str : "?", DL_LIB_VERSION);
    } else {
        rc = 0;
    }
    freeReplyObject(r);
    if (rc == 0) check_build(c, run);
    return rc;
}

int runconf_from_reply(const redisReply *r, runconf *rc, char *err, size_t errlen)
{
    if (r->type != REDIS_REPLY_ARRAY) {
        err_set(err, errlen, "run config is not a hash");
        return -1;
    }
    size_t pairs = r->elements / 2;
    const char **name = calloc(pairs ? pairs : 1, sizeof *name), **value = calloc(pairs ? pairs : 1, sizeof *value);
    if (!name || !value) {
        free(name);
        free(value);
        err_set(err, errlen, "out of memory for the run config's %zu fields", pairs);
        return -1;
    }
    runconf_fields f = {name, value, 0};
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && r->element[i + 1]->type == REDIS_REPLY_STRING) {
            name[f.n] = r->element[i]->str;
            value[f.n++] = r->element[i + 1]->str;
        }
    int ret = runconf_parse(&f, rc, err, errlen);
    free(name);
    free(value);
    return ret;
}

int runconf_load(rconn *c, const char *run, runconf *rc, char *err, size_t errlen)
{
    memset(rc, 0, sizeof *rc);
    if (key_check_run_name(run, err, errlen) < 0) return -1;
    snprintf(rc->run, sizeof rc->run, "%s", run);
    int lib = runconf_check_library(c, run, err, errlen);
    if (lib < 0) return lib;
    char key[KEY_MAX];
    int ret = -1;
    redisReply *r = rconn_command(c, "HGETALL %s", key_run(key, sizeof key, run, "config"));
    if (rconn_reply_error(c, r, err, errlen) < 0) goto error;
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        err_set(err, errlen, "run '%s' does not exist in this Redis; run `coordinator init --run %s` first", run, run);
        ret = r->type == REDIS_REPLY_ARRAY ? RUNCONF_ABSENT : -1;
        goto error;
    }
    if (runconf_from_reply(r, rc, err, errlen) < 0) goto error;
    freeReplyObject(r);
    return 0;
error:
    if (r) freeReplyObject(r);
    runconf_free(rc);
    return ret;
}

const char *runconf_error_gone(const char *e)
{
    if (e != NULL && strncmp(e, "ERR Function not found", 22) == 0) return "no ReDiLoCo function library";
    if (e != NULL && strncmp(e, "NORUN", 5) == 0) return "no config of the run";
    if (e != NULL && strncmp(e, "LOST ", 5) == 0) return e + 5; /* (which keys, and why: lua/10_helpers.lua) */
    return NULL;
}
