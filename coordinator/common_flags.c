/* common_flags.c: what every coordinator subcommand shares: connecting (the --redis/--redis-file/--run
 * values, parsed through COORD_COMMON_OPTS in coordinator.h) and the status document. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "coordinator.h"
#include "evals.h"
#include "format/keys.h"
#include "format/runconf.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"

int coord_connect(coord_common *c, rconn **out)
{
    char err[512], text[REDIS_URL_MAX];
    *out = NULL;
    if (redis_url_pick(c->redis_url, c->redis_file, text, sizeof text, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator: %s (see --help)\n", err);
        return 2;
    }
    if (!c->run) {
        fprintf(stderr, "coordinator: --run NAME is required (see --help)\n");
        return 2;
    }
    if (key_check_run_name(c->run, err, sizeof err) < 0 || redis_url_parse(text, &c->url, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator: %s (see --help)\n", err);
        return 2;
    }
    *out = rconn_connect_retry(&c->url, 10000, c->connect_timeout_ms, c->stop, NULL, err, sizeof err);
    if (!*out) fprintf(stderr, "coordinator: %s\n", err);
    return *out ? 0 : 1;
}

json_t *coord_fetch_status(rconn *rc, const char *run)
{
    char err[512], key[KEY_MAX];
    if (runconf_check_library(rc, run, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator: %s\n", err);
        return NULL;
    }
    redisReply *r = rconn_command(rc, "FCALL dl_status 1 %s", key_run(key, sizeof key, run, "config"));
    if (rconn_reply_error(rc, r, err, sizeof err) < 0 || r->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "coordinator: status of run '%s': %s\n", run, err);
        if (r) freeReplyObject(r);
        return NULL;
    }
    json_error_t jerr;
    json_t *doc = json_loadb(r->str, r->len, 0, &jerr);
    freeReplyObject(r);
    if (!doc) {
        fprintf(stderr, "coordinator: malformed status document: %s\n", jerr.text);
        return NULL;
    }
    if (evals_attach(rc, run, doc, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator: validation losses of run '%s': %s\n", run, err);
        json_decref(doc);
        return NULL;
    }
    return doc;
}
