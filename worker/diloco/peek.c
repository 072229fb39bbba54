/* peek.c: a run's size and tensor layout read without joining it (diloco_peek_run, diloco.h).
 *
 * diloco_open registers the worker before it hands back diloco_run_layout: a host that finds its model
 * is not the run's would then have joined (a join event, an incarnation) and had the run's values
 * written into its buffer. This reads the same dl:{R}:config with a short-lived connection and the
 * read-only calls runconf_load makes (FCALL dl_version, HGETALL), so the host can refuse first. It
 * stands apart from the session files: it calls only common/ (rconn, runconf), never a session. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "diloco.h"
#include "format/runconf.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"
#include "redis/url.h"

static int64_t peek(const diloco_options *o, uint64_t *numel, char *layout, size_t cap, int *nfragments, char *err,
                    size_t errlen)
{
    if (!o->redis_url || !o->run) {
        err_set(err, errlen, "a Redis URL and a run name are required");
        return -1;
    }
    redis_url u;
    if (redis_url_parse(o->redis_url, &u, err, errlen) < 0) return -1;
    rconn *c = rconn_connect_retry(&u, 5000, o->connect_timeout_ms, o->stop, NULL, err, errlen);
    if (!c) return -1;
    runconf rc;
    int r = runconf_load(c, o->run, &rc, err, errlen);
    rconn_free(c);
    if (r < 0) return -1;
    *numel = rc.numel;
    *nfragments = rc.nfragments;
    size_t n = rc.layout ? strlen(rc.layout) : 0;
    if (n < cap) snprintf(layout, cap, "%s", rc.layout ? rc.layout : "");
    runconf_free(&rc);
    return (int64_t)n;
}

/* peek with the caller's log sink (diloco_options.log_callback) for what the connection logs. */
static int64_t peek_logged(const diloco_options *o, uint64_t *numel, char *layout, size_t cap, int *nfragments,
                           char *err, size_t errlen)
{
    log_sink sink;
    log_sink_init(&sink, o->log_callback, o->log_ctx, o->log_level);
    log_sink *prev = log_use_sink(&sink);
    int64_t n = peek(o, numel, layout, cap, nfragments, err, errlen);
    log_use_sink(prev);
    log_sink_destroy(&sink);
    return n;
}

int64_t diloco_peek_run(const diloco_options *o, uint64_t *numel, char *layout, size_t cap, char *err, size_t errlen)
{
    int nfragments;
    return peek_logged(o, numel, layout, cap, &nfragments, err, errlen);
}

int diloco_peek_fragments(const diloco_options *o, char *err, size_t errlen)
{
    uint64_t numel;
    char layout[1];
    int nfragments;
    return peek_logged(o, &numel, layout, sizeof layout, &nfragments, err, errlen) < 0 ? -1 : nfragments;
}
