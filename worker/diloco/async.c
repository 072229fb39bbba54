/* async.c: one async DiLoCo submission from the worker's side (coordinator init --async).
 *
 * There is no barrier. For the shards of a fragment:
 *   1. dl_submit gives our submission its place s_k in each shard's order (atomic: all shards or
 *      none; refused with STALE when it would be older than --max-staleness);
 *   2. the pseudo-gradient of shard k goes to its owner as a push for round s_k;
 *   3. a get for version s_k+1 returns once the owner has applied every submission up to ours (it may
 *      return a later version: others kept submitting);
 * and the versions we got become our base (they may differ per shard: each shard moves on its own).
 * As in sync mode, Δ is kept until every get returned, and resent to whoever says it lacks it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"
#include "redis/rconn.h"

#define SUBMIT_ARGS_MAX (2 * RUNCONF_MAX_SHARDS + 8)

/* dl_submit of submission d->submission for shards [first, last) from their current base versions;
 * fills d->seq. Sent again (here or by dl_command_argv after a reconnect) when no reply came: a try that
 * ran answers the same places again (lua/40_barriers.lua, repeated_submission). */
static int submit(diloco *d, int f, int first, int last, char *err, size_t errlen)
{
    static const char *argv[SUBMIT_ARGS_MAX];
    static char nums[SUBMIT_ARGS_MAX][24];
    int argc = 0;
    char inc[24], frag[16], no[24];
    snprintf(inc, sizeof inc, "%" PRId64, dl_inc(d));
    snprintf(frag, sizeof frag, "%d", f);
    snprintf(no, sizeof no, "%" PRId64, d->submission);
    argv[argc++] = "FCALL";
    argv[argc++] = "dl_submit";
    argv[argc++] = "1";
    argv[argc++] = d->config_key;
    argv[argc++] = d->worker_id;
    argv[argc++] = inc;
    argv[argc++] = frag;
    argv[argc++] = no;
    for (int k = first; k < last; k++) {
        snprintf(nums[argc], sizeof nums[argc], "%d", k);
        argv[argc] = nums[argc];
        argc++;
        snprintf(nums[argc], sizeof nums[argc], "%" PRId64, d->shard_version[k]);
        argv[argc] = nums[argc];
        argc++;
    }
    redisReply *r = dl_command_argv(d, argc, argv, NULL, err, errlen);
    int rc = DL_OK;
    if (dl_reply_failed(r)) {
        rc = !r                                           ? DL_RETRY
             : strncmp(r->str, "STALE", 5) == 0           ? DL_STALE
             : strncmp(r->str, "UNKNOWN_WORKER", 14) == 0 ? DL_EVICTED
                                                          : DL_FAIL;
    } else if (r->type != REDIS_REPLY_ARRAY || (int)r->elements != last - first) {
        err_set(err, errlen, "unexpected reply to dl_submit");
        rc = DL_FAIL;
    } else {
        for (int k = first; k < last; k++) d->seq[k] = r->element[k - first]->integer;
    }
    if (r) freeReplyObject(r);
    return rc;
}

int async_submit_net(diloco *d, int f, char *err, size_t errlen)
{
    int first = d->rc.frag_bounds[f], last = d->rc.frag_bounds[f + 1];
    int rc = DL_RETRY;
    d->submission++;
    for (unsigned attempt = 0; rc == DL_RETRY && attempt < 5; attempt++) {
        rc = submit(d, f, first, last, err, errlen);
        if (rc == DL_RETRY) sleep_ms(backoff_ms(attempt, 50, 1000));
    }
    if (rc != DL_OK) return rc == DL_RETRY ? DL_FAIL : rc;
    /* each shard's Δ for its place in that shard's order; then each shard once our submission is
     * applied (resent to an owner that lacks it) */
    rc = fanout_push_each(d, first, last, d->seq, err, errlen);
    fanout_get_arg ga = {.may_push = 1, .after = d->seq};
    if (rc == DL_OK) rc = fanout_get(d, first, last, &ga, err, errlen);
    if (rc != DL_OK) return rc;
    int64_t lo = d->shard_version[first];
    for (int k = first + 1; k < last; k++)
        if (d->shard_version[k] < lo) lo = d->shard_version[k];
    dl_set_frag_version(d, f, lo);
    log_debug("fragment %d: submission applied at version %" PRId64 " (got up to %" PRId64 ")", f, d->seq[first] + 1,
              d->shard_version[first]);
    return DL_OK;
}
