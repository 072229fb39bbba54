/*
 * past.c: the past versions of a shard that an async rebase needs (coordinator init --async-rule rebase).
 *
 * The rebase rule turns a submission computed from version base into g + (θ_now - θ_base) (outer_rebase,
 * common/math/outer_dn.h), so the commit of version v+1 needs θ of every version a pending submission may
 * be based on: dl_submit refuses one more than K = rebase_window versions stale, so versions v-K .. v.
 * The shard keeps the last K versions before its current one in a ring (slot = version mod K), each the
 * θ buffer the commit replaced (no copy: a commit hands its old θ over instead of releasing it); a load
 * fills the ring as it replays the log. Memory: K x the shard's θ (4 bytes per parameter each).
 *
 * Durably, every version of the window must be rebuildable after a crash: a load starts from the
 * snapshot and replays the log, so the snapshot must be at least K versions old. A rebase run therefore
 * prepares the snapshot of version v (θ, momentum, DN buffer: a copy) when v is committed, and writes and
 * records it (dl_snapshot, which trims the log up to v) only once the shard has reached v + K (snapshot.c):
 * Redis then holds that snapshot and the log after it, K + snapshot_every entries at most,
 * instead of snapshot_every. A pending snapshot is lost with the cache (a reload, a lost lease): the log
 * then covers more until the next one, and nothing is lost.
 */
#include "ss.h"

#include <stdlib.h>

void past_clear(ss_shard *s)
{
    for (int i = 0; i < s->past_cap; i++) server_buf_release(s->past[i]); /* replies may still be sending one */
    free(s->past);
    free(s->past_v);
    s->past = NULL;
    s->past_v = NULL;
    s->past_cap = 0;
}

int past_keep(ss_shard *s, int64_t window, float *theta, int64_t version)
{
    if (s->past_cap != window) {
        past_clear(s);
        s->past = calloc((size_t)window, sizeof *s->past);
        s->past_v = malloc((size_t)window * sizeof *s->past_v);
        if (s->past == NULL || s->past_v == NULL) {
            past_clear(s);
            server_buf_release(theta);
            return -1;
        }
        s->past_cap = (int)window;
        for (int i = 0; i < s->past_cap; i++) s->past_v[i] = -1;
    }
    int slot = (int)(version % window);
    server_buf_release(s->past[slot]); /* version - window: no submission may be based on it any more */
    s->past[slot] = theta;
    s->past_v[slot] = version;
    return 0;
}

const float *past_theta(const ss_shard *s, int64_t version)
{
    if (version == s->version) return s->theta;
    if (s->past_cap == 0 || version < 0 || version > s->version) return NULL;
    int slot = (int)(version % s->past_cap);
    return s->past_v[slot] == version ? s->past[slot] : NULL;
}
