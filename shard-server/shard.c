/*
 * shard.c: the per-shard cache's lease transitions: acquire, release, reload, and the teardown. What a
 * shard holds besides its parameters is below it: its parked requests (park.c), pseudo-gradients
 * (delta.c), past versions (past.c), pending snapshot (snapshot.c), compute ahead (commit_ahead.c).
 *
 * A shard is FREE (not ours), LOADING (ours, being rebuilt from Redis by load.c) or READY (ours and
 * served).
 *
 * A load that fails because the durable state itself is bad (a blob fails its checksum, is missing or
 * malformed, or the replay does not give k:digest) is not retried: the shard becomes CORRUPT (load.c),
 * is marked in dl:{R}:shards with dl_mark_corrupt (one 'corrupt' event with the key and the reason) and
 * answers `err CORRUPT` until `coordinator repair` revokes the lease. A shard found already marked is
 * not loaded at all. Failures to reach the state (Redis down, the lease moved) are retried at the next beat.
 *
 * Every drop or reload bumps the shard's generation; callbacks of older operations see the mismatch
 * and discard their work. Requests that need a loading or committing shard are parked on it and
 * judged again (ss->dispatch) when it is ready, or answered when they have waited too long (park.c).
 */
#include "ss.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "format/replay.h"
#include "math/outer.h"

int shards_init(ss_ctx *ss, char *err, size_t errlen)
{
    ss->nshards = ss->rc.nshards;
    ss->shards = calloc((size_t)ss->nshards, sizeof *ss->shards);
    ss->owner_addr = calloc((size_t)ss->nshards, sizeof *ss->owner_addr);
    if (ss->shards == NULL || ss->owner_addr == NULL) {
        err_set(err, errlen, "out of memory for %d shards", ss->nshards);
        return -1;
    }
    size_t largest = 0;
    for (int k = 0; k < ss->nshards; k++) {
        ss_shard *s = &ss->shards[k];
        s->k = k;
        s->n = (size_t)runconf_shard_numel(&ss->rc, k);
        s->frag = runconf_fragment_of_shard(&ss->rc, k);
        s->version = -1;
        if (s->n > largest) largest = s->n;
    }
    ss->max_frame = largest * sizeof(float) + BLOB_HEADER_MAX;
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* lease transitions */

/* We hold the lease with this epoch: (re)load unless the cache already is of this epoch. */
void shard_acquire(ss_ctx *ss, ss_shard *s, int64_t epoch)
{
    if (s->state != SH_FREE && s->epoch == epoch) {
        if (s->state == SH_LOADING && s->load == NULL) load_start(ss, s); /* an earlier attempt failed: retry */
        if (s->state == SH_CORRUPT && !s->corrupt_recorded) load_mark_corrupt(ss, s);
        return;
    }
    if (s->state != SH_FREE) shard_release(ss, s, "the lease epoch changed");
    log_info("shard %d: lease acquired (epoch %lld); loading", s->k, (long long)epoch);
    ss->m.lease_changes++;
    s->epoch = epoch;
    s->gen++;
    s->state = SH_LOADING;
    s->committing = 0;
    s->tent_theta = NULL; /* the commit's buffer is its own; it frees it when its callback comes */
    load_start(ss, s);
}

/* Drop the cache: callbacks still in flight find the shard's generation changed. Parked requests stay. */
static void shard_forget(ss_shard *s)
{
    ahead_discard(s, "the shard is dropped");
    free(s->last_parts);
    s->last_parts = NULL;
    s->gen++;
    s->state = SH_FREE;
    s->committing = 0;
    s->tent_theta = NULL; /* the commit's buffer is its own; it frees it when its callback comes */
    load_abandon(s);
    server_buf_release(s->theta); /* replies may still be sending it */
    free(s->mom);
    free(s->dnbuf);
    s->dnbuf = NULL;
    s->theta = s->mom = NULL;
    past_clear(s);
    snapshot_drop_pending(s);
    reply_update_clear(&s->upd);
    s->has_mom = 0;
    s->version = -1;
    s->digest[0] = '\0';
    s->corrupt_key[0] = s->corrupt_reason[0] = '\0';
    delta_free(s, 0, 1);
}

/* No longer ours: free everything; parked requests are judged again (and get `moved`). */
void shard_release(ss_ctx *ss, ss_shard *s, const char *why)
{
    if (s->state == SH_FREE) return;
    log_info("shard %d: lease lost (%s); dropping version %lld from memory", s->k, why, (long long)s->version);
    ss->m.lease_changes++;
    shard_forget(s);
    park_redispatch(ss, s);
}

void shards_stop(ss_ctx *ss)
{
    for (int k = 0; k < ss->nshards; k++) {
        ss_shard *s = &ss->shards[k];
        shard_forget(s);
        for (ss_req *req = park_take(s), *next; req != NULL; req = next) {
            next = req->next;
            req_free(req);
        }
    }
}

void shards_free(ss_ctx *ss)
{
    for (int k = 0; ss->owner_addr != NULL && k < ss->nshards; k++) free(ss->owner_addr[k]);
    free(ss->owner_addr);
    free(ss->shards);
    ss->owner_addr = NULL;
    ss->shards = NULL;
    ss->nshards = 0;
}

/* Still ours but the cache may be wrong: rebuild from Redis; deltas and parked requests are kept. */
void shard_reload(ss_ctx *ss, ss_shard *s, const char *why)
{
    if (s->state == SH_FREE || s->state == SH_CORRUPT) /* a corrupt shard loads again after a repair only */
        return;
    log_info("shard %d: reloading from Redis (%s)", s->k, why);
    ahead_discard(s, "the shard reloads");
    s->gen++;
    s->state = SH_LOADING;
    s->committing = 0;
    s->tent_theta = NULL;     /* the commit's buffer is its own; it frees it when its callback comes */
    snapshot_drop_pending(s); /* the load rebuilds the past versions too */
    load_abandon(s);
    load_start(ss, s);
}
