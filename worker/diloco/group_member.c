/* group_member.c: a process group's membership (group.c): rank 0 registers the group and the other ranks
 * join it (REGISTER, JOIN), a rank's incarnation, and the wait of a rank closing normally until the group's
 * last round is committed on every shard before it ends the group. Below group.c and group_open.c; calls the
 * messages (group_msg.c), the parts (group_part.c) and the control connection. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "internal.h"

void gmember_set_incarnation(diloco *d, int64_t inc)
{
    pthread_mutex_lock(&d->hb_mu);
    d->inc = inc;
    d->evicted = 0;
    pthread_mutex_unlock(&d->hb_mu);
}

/* A rank closing normally waits (at most LAST_ROUND_PATIENCE_MS, or the sync timeout if shorter) until
 * every shard of the group's last round is committed, the other ranks' parts too, before it ends the
 * group: a rank that must resend its part to a shard's new owner (a lease moved before the commit) would
 * otherwise find its group gone, and the round would be committed without the group's pseudo-gradient on
 * that shard. A stopping rank leaves at once, and so does one whose run was shut down or whose group was
 * evicted or left. */
#define LAST_ROUND_PATIENCE_MS 15000

/* The version of shard k (the run's numbering) the group's last round of its fragment made; in async
 * Streaming, the version its last placed submission makes once applied (place + 1), which another rank's
 * thread may still be delivering. */
static int64_t last_round_of(const diloco *d, int k)
{
    const int *fb = gpart_run_frag_bounds(d);
    int f = 0;
    while (f + 1 < d->rc.nfragments && k >= fb[f + 1]) f++;
    int64_t v = d->frag_version[f];
    return d->grp_placed && d->grp_placed[k] + 1 > v ? d->grp_placed[k] + 1 : v;
}

/* The first of the run's shards (the other ranks' too) whose committed version is below the group's last
 * round of its fragment, read in one HMGET (a sharded run may have thousands); -1 when none is, 0 when Redis
 * could not say. */
static int first_behind(diloco *d, const char *key)
{
    int n = d->run_nshards, behind = 0;
    const char **argv = calloc((size_t)n + 2, sizeof *argv);
    char(*fields)[24] = calloc((size_t)n, sizeof *fields);
    if (argv && fields) {
        argv[0] = "HMGET";
        argv[1] = key;
        for (int k = 0; k < n; k++) {
            snprintf(fields[k], sizeof fields[k], "%d:version", k);
            argv[2 + k] = fields[k];
        }
        redisReply *r = dl_command_argv(d, n + 2, argv, NULL, NULL, 0);
        if (!dl_reply_failed(r) && r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)n) {
            behind = -1;
            for (int k = 0; k < n && behind < 0; k++) {
                const redisReply *e = r->element[k];
                if (e->type != REDIS_REPLY_STRING || strtoll(e->str, NULL, 10) < last_round_of(d, k)) behind = k;
            }
        }
        if (r) freeReplyObject(r);
    }
    free(argv);
    free(fields);
    return behind;
}

void gmember_wait_committed(diloco *d)
{
    /* (a run shut down, or a group no longer a member, commits nothing more of ours: a submission it placed
     * and could not deliver is a no-op, and waiting for it cost a shut-down group's close the whole
     * patience: it_group_shutdown's async Streaming run, once in CI) */
    if (!d->grp || dl_stopping(d) || dl_inc(d) <= 0 || !d->frag_version || dl_shutdown_seen(d) || dl_evicted(d)) return;
    uint64_t patience =
        d->o.sync_timeout_ms < LAST_ROUND_PATIENCE_MS ? (uint64_t)d->o.sync_timeout_ms : LAST_ROUND_PATIENCE_MS;
    uint64_t deadline = now_ms() + patience;
    char key[KEY_MAX];
    key_run(key, sizeof key, d->o.run, "shards");
    for (unsigned attempt = 0;; attempt++) {
        int behind = first_behind(d, key);
        if (behind < 0) return;
        if (now_ms() > deadline || dl_stopping(d)) {
            log_warn("rank %d leaves before shard %d reached version %" PRId64 " (the group's last round)", d->grp_rank,
                     behind, last_round_of(d, behind));
            return;
        }
        sleep_ms(backoff_ms(attempt, 2, 100));
    }
}

/* The group's held versions, by the run's shard ids, into held (run_nshards): a sharded group's ranks each
 * hold only their own shards, so they gather theirs and rank 0 registers with every shard's (the
 * registration records them for a replay of the run, which needs all: tests/tools/ref_async); the ranks of
 * an unsharded group each hold every shard. 0, or -1 + err. */
static int gather_held(diloco *d, int64_t *held, char *err, size_t errlen)
{
    dl_held_by_run(d, held);
    if (!d->shard_ids) return 0;
    int n = d->run_nshards, size = d->o.group.size, rc = -1;
    int64_t *vals = malloc((size_t)n * (size_t)size * sizeof *vals);
    group_msg me = {0}, *all = calloc((size_t)size, sizeof *all);
    if (!vals || !all) {
        err_set(err, errlen, "out of memory");
        goto out;
    }
    if (gmsg_gather_with(d, GRP_HELD, &me, held, n, all, vals, err, errlen) < 0) goto out;
    for (int r = 0; r < size; r++) {
        const int64_t *theirs = vals + (size_t)r * (size_t)n;
        for (int k = 0; k < n; k++)
            if (theirs[k] >= 0) held[k] = theirs[k];
    }
    rc = 0;
out:
    free(vals);
    free(all);
    return rc;
}

/* Rank 0 registers the group, hands its registration (with the round of each fragment) to the others, and
 * they join it. */
int gmember_register(diloco *d, char *err, size_t errlen)
{
    int size = d->o.group.size, nf = d->rc.nfragments, rc = -1;
    group_msg me = {0}, *all = calloc((size_t)size, sizeof *all);
    int64_t *fv = calloc((size_t)nf, sizeof *fv), *fvs = calloc((size_t)nf * (size_t)size, sizeof *fvs);
    int64_t *held = malloc((size_t)d->run_nshards * sizeof *held);
    if (!all || !fv || !fvs || !held) {
        err_set(err, errlen, "out of memory");
        goto out;
    }
    if (gather_held(d, held, err, errlen) < 0) goto out;
    if (d->grp_rank == 0) {
        me.status = dl_register_now(d, held, me.err, sizeof me.err) < 0 ? DL_FAIL : DL_OK;
        me.v[0] = dl_inc(d);
        me.v[2] = d->frag_joined[0];
        for (int f = 0; f < nf; f++) fv[f] = d->frag_version[f];
        snprintf(me.worker, sizeof me.worker, "%s", d->worker_id);
    }
    if (gmsg_gather_with(d, GRP_REGISTER, &me, fv, nf, all, fvs, err, errlen) < 0) goto out; /* (fvs: rank 0's first) */
    if (all[0].status != DL_OK) {
        err_set(err, errlen, "rank 0 could not register the group: %s", all[0].err);
        goto out;
    }
    memset(&me, 0, sizeof me);
    if (d->grp_rank > 0) {
        snprintf(d->worker_id, sizeof d->worker_id, "%s", all[0].worker);
        gmember_set_incarnation(d, all[0].v[0]);
        for (int f = 0; f < nf; f++) dl_set_frag_version(d, f, fvs[f]);
        d->frag_joined[0] = all[0].v[2];
        redisReply *r = dl_command(d, me.err, sizeof me.err, "FCALL dl_group_join 1 %s %s %lld %d %d", d->config_key,
                                   d->worker_id, (long long)all[0].v[0], d->grp_rank, size);
        me.status = dl_reply_failed(r) ? DL_FAIL : DL_OK;
        if (r) freeReplyObject(r);
    }
    if (gmsg_gather(d, GRP_JOIN, &me, all, err, errlen) < 0) goto out;
    if (gmsg_first_failure(all, size, err, errlen) != DL_OK) {
        if (d->grp_rank == 0) dl_group_leave(d); /* nothing of this group may stay behind */
        gmember_set_incarnation(d, 0);
        goto out;
    }
    if (d->shard_ids)
        log_info("group of %d: rank %d of worker %s (incarnation %" PRId64 "), sharded: %d of the run's %d shards",
                 size, d->grp_rank, d->worker_id, dl_inc(d), d->rc.nshards, d->run_nshards);
    else if (d->rc.nfragments > 1)
        log_info("group of %d: rank %d of worker %s (incarnation %" PRId64 "), %d of the run's %d shards (a part "
                 "of each of its %d fragments)",
                 size, d->grp_rank, d->worker_id, dl_inc(d), gpart_count(d), d->rc.nshards, d->rc.nfragments);
    else
        log_info("group of %d: rank %d of worker %s (incarnation %" PRId64 "), shards [%d, %d) of %d", size,
                 d->grp_rank, d->worker_id, dl_inc(d), dl_first_shard(d, 0), dl_last_shard(d, 0), d->rc.nshards);
    rc = 0;
out:
    free(all);
    free(fv);
    free(fvs);
    free(held);
    return rc;
}
