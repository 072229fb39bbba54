/* fetch.c: the global parameters fetched without a pseudo-gradient to offer: at open, when a worker
 * catches up (registered again, repaired, its round lost), and by a joiner, which first waits for the
 * open round to close. Every shard of a fragment at one version, into base (and params when asked). */
#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "internal.h"

/* Registration and catching up use the same get, with no Δ to offer. */
static int fetch_shards(diloco *d, int first, int last, int64_t min_version, char *err, size_t errlen)
{
    fanout_get_arg ga = {.want = min_version};
    return fanout_get(d, first, last, &ga, err, errlen);
}

/* Fetch the shards of fragment f at version >= min_version into base (and params when adopt).
 * Shards commit one by one, so a fetch may see some shards one version ahead: fetch again at the
 * highest version seen until all of the fragment's shards agree. */
int fetch_fragment(diloco *d, int f, int64_t min_version, int adopt, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f);
    uint64_t deadline = now_ms() + (uint64_t)d->o.sync_timeout_ms;
    for (;;) {
        int rc = fetch_shards(d, first, last, min_version, err, errlen);
        if (rc == DL_CORRUPT) { /* the repaired version is above min_version: the same fetch gets it */
            if (repair_wait(d, err, err, errlen) < 0) return -1;
            deadline = now_ms() + (uint64_t)d->o.sync_timeout_ms;
            continue;
        }
        if (rc == DL_FAIL) return -1;
        if (rc == DL_OK) {
            int64_t lo = d->shard_version[first], hi = lo;
            for (int k = first + 1; k < last; k++) {
                if (d->shard_version[k] < lo) lo = d->shard_version[k];
                if (d->shard_version[k] > hi) hi = d->shard_version[k];
            }
            if (lo == hi) {
                dl_set_frag_version(d, f, hi);
                d->frag_incomplete[f] = 0; /* base is one consistent version: no earlier round to finish */
                if (!adopt) return 0;
                return params_take(d, first, last, err, errlen);
            }
            min_version = hi;
        }
        if (dl_stopping(d)) {
            err_set(err, errlen, "stopped while fetching the global parameters");
            return -1;
        }
        if (now_ms() > deadline) {
            char last[256];
            snprintf(last, sizeof last, "%s", err && err[0] ? err : "no answer"); /* err is written below */
            err_set(err, errlen, "could not fetch the global parameters within %d ms (last: %s)", d->o.sync_timeout_ms,
                    last);
            return -1;
        }
        sleep_ms(50);
    }
}

/* A sync-mode joiner the open round does not wait for (dl_register put it at the next one) waits for
 * that round to close and starts from its result, together with the workers that close it. Training
 * from the open round's parameters instead would almost never make it in time (the others are already
 * part-way through the round): that work is lost as STALE, and the joiner then starts the next round,
 * where the barrier does wait for it, late by the same amount, stalling every worker. Idling costs this
 * worker alone. One fragment only: Streaming DiLoCo's schedule is a function of the step count. */
int fetch_wait_joined(diloco *d, int f, char *err, size_t errlen)
{
    if (d->rc.async || d->rc.nfragments != 1 || d->frag_joined[f] <= d->frag_version[f]) return 0;
    int rc = barrier_wait_closed(d, f, d->frag_version[f], err, errlen);
    if (rc == DL_FAIL) return -1;
    if (rc == DL_OK) dl_set_frag_version(d, f, d->frag_joined[f]);
    /* DL_NEED (every member it waited for is gone: it needs our arrival to close), DL_STALE,
     * DL_EVICTED: the fetch below takes the version registration gave us and we train for the open
     * round (an eviction shows at the first arrival, which registers again) */
    return 0;
}

/* Every fragment at the version registration gave us (or, for a joiner of the next round, at that
 * round's start), into base and params. */
int fetch_all(diloco *d, char *err, size_t errlen)
{
    d->fetched_all++;
    for (int f = 0; f < d->rc.nfragments; f++) {
        if (fetch_wait_joined(d, f, err, errlen) < 0) return -1;
        if (fetch_fragment(d, f, d->frag_version[f], 1, err, errlen) < 0) return -1;
    }
    return 0;
}

/* Our round of fragment f is gone: base[f] takes the current global version (params untouched). */
int fetch_current(diloco *d, int f, char *err, size_t errlen)
{
    char key[KEY_MAX], field[32];
    snprintf(field, sizeof field, "round:%d", f);
    redisReply *r = dl_command(d, err, errlen, "HGET %s %s", key_run(key, sizeof key, d->o.run, "state"), field);
    if (dl_reply_failed(r) || r->type != REDIS_REPLY_STRING) {
        if (r) freeReplyObject(r);
        return -1;
    }
    int64_t want = atoll(r->str);
    freeReplyObject(r);
    owners_refresh(d, err, errlen);
    return fetch_fragment(d, f, want, 0, err, errlen);
}
