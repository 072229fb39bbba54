/* fetch.c: the global parameters fetched without a pseudo-gradient to offer: at open, when a worker
 * catches up (registered again, repaired, its round lost), and by a joiner, which first waits for the
 * open round to close. Every shard of a fragment at one version, into base (and params when asked).
 *
 * A shard whose parameters base holds already, at the version Redis has committed (the digest of our slice
 * is its k:digest), is not asked of its owner: a worker that registers again after a stop used to fetch
 * every shard, though a round that could not close without it, or a Streaming fragment whose round did not
 * close meanwhile, had left them as they were (bench/rejoin_fetch; tests/it_rejoin_held.sh). The same read
 * of the shards' commits (fetch_committed) serves sync.c's confirmation; it also brings the leases' epochs, and
 * where one moved the owner map is read again before any request goes to the shard's old owner (owners_follow). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "internal.h"
#include "math/outer.h"

/* ---- what Redis has committed of each shard, and the shards we hold at that version ---------------------- */

#define COMMIT_FIELDS 4 /* version, digest, epoch, replicated */

int fetch_committed(diloco *d, int first, int last, committed_shard *out, char *err, size_t errlen)
{
    int n = last - first, nf = COMMIT_FIELDS * n;
    const char **argv = calloc((size_t)(2 + nf), sizeof *argv);
    size_t *lens = calloc((size_t)(2 + nf), sizeof *lens);
    char(*fields)[40] = calloc((size_t)nf, sizeof *fields);
    char key[KEY_MAX];
    if (!argv || !lens || !fields) {
        free(argv);
        free(lens);
        free(fields);
        err_set(err, errlen, "out of memory");
        return -1;
    }
    argv[0] = "HMGET";
    argv[1] = key_run(key, sizeof key, d->o.run, "shards");
    const char *names[COMMIT_FIELDS] = {"version", "digest", "epoch", "replicated"};
    for (int i = 0; i < nf; i++) {
        snprintf(fields[i], sizeof fields[0], "%d:%s", dl_shard_id(d, first + i / COMMIT_FIELDS),
                 names[i % COMMIT_FIELDS]);
        argv[2 + i] = fields[i];
    }
    for (int i = 0; i < 2 + nf; i++) lens[i] = strlen(argv[i]);
    redisReply *r = dl_command_argv_once(d, 2 + nf, argv, lens, err, errlen); /* (no waiting for Redis here) */
    int failed = dl_reply_failed(r);
    free(argv);
    free(lens);
    free(fields);
    int rc = -1;
    if (!failed && r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)nf) {
        rc = 0;
        for (int i = 0; i < n; i++) {
            redisReply **e = r->element + COMMIT_FIELDS * i;
            out[i].version = e[0]->type == REDIS_REPLY_STRING ? atoll(e[0]->str) : -1;
            snprintf(out[i].digest, sizeof out[i].digest, "%s", e[1]->type == REDIS_REPLY_STRING ? e[1]->str : "");
            out[i].epoch = e[2]->type == REDIS_REPLY_STRING ? atoll(e[2]->str) : -1;
            out[i].replicated = e[3]->type == REDIS_REPLY_STRING ? atoll(e[3]->str) : 0;
        }
    } else if (r) {
        err_set(err, errlen, "unexpected reply reading the shard versions");
    }
    if (r) freeReplyObject(r);
    char ignore[256]; /* (a failed read of the owners is retried where a request fails) */
    if (rc == 0) (void)owners_follow(d, first, last, out, ignore, sizeof ignore);
    return rc;
}

/* Whether base holds shard k as Redis has it committed (c): the digest of our slice is its k:digest, so these
 * are the bytes of version c->version (the identity the confirm relies on too: sync.c); with min_replicas
 * only once that version is on that many replicas (a get without the tentative flag waits for as much); in a
 * --download update run our copy of the momentum must be of that version too. A slice whose receive broke
 * off (tent_version -1) is garbage: not even hashed. */
static int holds_committed(diloco *d, int k, const committed_shard *c)
{
    if (d->tent_version[k] < 0 || c->version < 0 || c->digest[0] == '\0') return 0;
    if (d->rc.min_replicas > 0 && c->replicated < c->version) return 0;
    if (d->rc.download_update && d->mom_version[k] != c->version) return 0;
    size_t off = (size_t)d->rc.shard_bounds[k];
    char mine[17];
    snprintf(mine, sizeof mine, "%016" PRIx64, digest_f32(d->base + off, (size_t)runconf_shard_numel(&d->rc, k)));
    return strcmp(mine, c->digest) == 0;
}

/* The shards of [first, last) that base holds at a committed version >= min_version (holds_committed): have[k]
 * = 1 (the others 0), their version and tentative state set as a durable get of them sets them (conn.c,
 * took_version). The count; 0 when base holds nothing yet (at open) or Redis could not say: every shard is
 * fetched, as before. One HMGET and one hash pass over the fragment, against a transfer of it. */
static int mark_held(diloco *d, int first, int last, int64_t min_version, char *have)
{
    memset(have + first, 0, (size_t)(last - first));
    if (!__atomic_load_n(&d->base_taken, __ATOMIC_RELAXED)) return 0;
    committed_shard *c = calloc((size_t)(last - first), sizeof *c);
    char err[256];
    int held = 0;
    if (c && fetch_committed(d, first, last, c, err, sizeof err) == 0)
        for (int k = first; k < last; k++) {
            const committed_shard *ck = &c[k - first];
            if (ck->version < min_version || !holds_committed(d, k, ck)) continue;
            have[k] = 1;
            d->shard_version[k] = ck->version;
            d->tent_version[k] = 0; /* durable */
            d->tent_xxh[k] = strtoull(ck->digest, NULL, 16);
            d->tent_epoch[k] = ck->epoch;
            held++;
        }
    free(c);
    return held;
}

/* ---- fetching -------------------------------------------------------------------------------------------- */

/* Registration and catching up use the same get, with no Δ to offer; the shards we hold (have) are not asked. */
static int fetch_shards(diloco *d, int first, int last, int64_t min_version, const char *have, char *err, size_t errlen)
{
    fanout_get_arg ga = {.want = min_version, .have = have};
    return fanout_get(d, first, last, &ga, err, errlen);
}

/* Fetch the shards of fragment f at version >= min_version into base (and params when adopt).
 * Shards commit one by one, so a fetch may see some shards one version ahead: fetch again at the
 * highest version seen until all of the fragment's shards agree. A corrupt shard ends it: DL_CORRUPT, and
 * the caller waits for the repair (fetch_fragment alone; a process group's ranks together: group.c). */
int fetch_fragment_once(diloco *d, int f, int64_t min_version, int adopt, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f);
    uint64_t deadline = now_ms() + (uint64_t)d->o.sync_timeout_ms;
    char have[RUNCONF_MAX_SHARDS];
    for (;;) {
        int held = mark_held(d, first, last, min_version, have);
        if (held > 0)
            log_info("fragment %d: %d of its %d shard(s) held at their committed version already (digest equal): "
                     "not fetched",
                     f, held, last - first);
        int rc = fetch_shards(d, first, last, min_version, have, err, errlen);
        if (rc == DL_CORRUPT || rc == DL_FAIL) return rc;
        if (rc == DL_OK) {
            int64_t lo = d->shard_version[first], hi = lo;
            for (int k = first + 1; k < last; k++) {
                if (d->shard_version[k] < lo) lo = d->shard_version[k];
                if (d->shard_version[k] > hi) hi = d->shard_version[k];
            }
            if (lo == hi) {
                dl_set_frag_version(d, f, hi);
                d->frag_incomplete[f] = 0; /* base is one consistent version: no earlier round to finish */
                __atomic_store_n(&d->base_taken, 1, __ATOMIC_RELAXED); /* (a Streaming round's thread too) */
                if (!adopt) return DL_OK;
                return params_take(d, first, last, err, errlen) < 0 ? DL_FAIL : DL_OK;
            }
            min_version = hi;
        }
        if (dl_stopping(d)) {
            err_set(err, errlen, "stopped while fetching the global parameters");
            return DL_FAIL;
        }
        if (now_ms() > deadline) {
            char last[256];
            snprintf(last, sizeof last, "%s", err && err[0] ? err : "no answer"); /* err is written below */
            err_set(err, errlen, "could not fetch the global parameters within %d ms (last: %s)", d->o.sync_timeout_ms,
                    last);
            return DL_FAIL;
        }
        sleep_ms(50);
    }
}

/* fetch_fragment_once, waiting out a corrupt shard: the repair installs a version above min_version, so the
 * same fetch then gets it. 0, or -1 + err. */
int fetch_fragment(diloco *d, int f, int64_t min_version, int adopt, char *err, size_t errlen)
{
    for (;;) {
        int rc = fetch_fragment_once(d, f, min_version, adopt, err, errlen);
        if (rc != DL_CORRUPT) return rc == DL_OK ? 0 : -1;
        if (repair_wait(d, err, err, errlen) < 0) return -1;
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

int fetch_current_once(diloco *d, int f, char *err, size_t errlen)
{
    char key[KEY_MAX], field[32];
    snprintf(field, sizeof field, "round:%d", f);
    redisReply *r = dl_command(d, err, errlen, "HGET %s %s", key_run(key, sizeof key, d->o.run, "state"), field);
    if (dl_reply_failed(r) || r->type != REDIS_REPLY_STRING) {
        if (r) freeReplyObject(r);
        return DL_FAIL;
    }
    int64_t want = atoll(r->str);
    freeReplyObject(r);
    owners_refresh(d, err, errlen);
    return fetch_fragment_once(d, f, want, 0, err, errlen);
}

int fetch_current(diloco *d, int f, char *err, size_t errlen)
{
    for (;;) {
        int rc = fetch_current_once(d, f, err, errlen);
        if (rc != DL_CORRUPT) return rc == DL_OK ? 0 : -1;
        if (repair_wait(d, err, err, errlen) < 0) return -1;
    }
}
