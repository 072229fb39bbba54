/* group_open.c: diloco_open of a process group's rank (group.c): HELLO (each rank's options and whether it
 * could read the run: they must agree, check_hello), the registration (group_member.c), READY (each rank's
 * owners, heartbeat and joiner's wait), then the first fetch and exchange of every fragment (group.c's
 * group_fetch). Above group.c, which never calls it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"

static int check_hooks(const diloco_options *o, char *err, size_t errlen)
{
    const diloco_group_ops *g = &o->group;
    if (g->rank < 0 || g->rank >= g->size) {
        err_set(err, errlen, "group rank %d is not in 0 .. %d (group size %d)", g->rank, g->size - 1, g->size);
        return -1;
    }
    if (!g->allgather || (!g->broadcast && !g->slices && g->nslices == 0)) {
        err_set(err, errlen, "a process group needs both collectives (group.allgather and group.broadcast; a sharded "
                             "one, with group.slices, only allgather)");
        return -1;
    }
    return 0;
}

/* A sharded group: the ranks' slices (their shards, as each told in HELLO) cover the run's shards exactly
 * once. This rank moves all of its own (its view, part.c). */
static int sharded_cover(diloco *d, const group_msg *all, char *err, size_t errlen)
{
    int size = d->o.group.size;
    for (int k = 0; k < d->run_nshards; k++) {
        int holder = -1;
        for (int r = 0; r < size; r++) {
            if (!(all[r].held[k / 64] >> (k % 64) & 1)) continue;
            if (holder >= 0) {
                err_set(err, errlen,
                        "ranks %d and %d both hold shard %d of run '%s': the ranks' slices must not overlap (each "
                        "rank passes its own dim-0 chunk of every tensor)",
                        holder, r, k, d->run);
                return -1;
            }
            holder = r;
        }
        if (holder < 0) {
            err_set(err, errlen,
                    "no rank holds shard %d of run '%s': the ranks' slices must cover the run (is the group size the "
                    "--fsdp-ranks the run was made for?)",
                    k, d->run);
            return -1;
        }
    }
    return 0;
}

/* What every rank must agree on, then what groups support (the same verdict on every rank). */
static int check_hello(diloco *d, const group_msg *all, char *err, size_t errlen)
{
    int size = d->o.group.size;
    static const char *what[] = {"the parameter count", "sync_every",   "bf16",
                                 "error_feedback",      "dylu",         "device hooks",
                                 "sharded parameters (group.slices given or not)"};
    for (int r = 1; r < size; r++) {
        if (strcmp(all[r].run, all[0].run) != 0) {
            err_set(err, errlen, "the ranks of the group disagree on the run: rank 0 has '%s', rank %d '%s'",
                    all[0].run, r, all[r].run);
            return -1;
        }
        for (int i = 0; i < 7; i++)
            if (all[r].v[i] != all[0].v[i]) {
                err_set(err, errlen, "the ranks of the group disagree on %s: rank 0 has %" PRId64 ", rank %d %" PRId64,
                        what[i], all[0].v[i], r, all[r].v[i]);
                return -1;
            }
        if (all[r].v[7] != all[0].v[7]) {
            double a0, ar;
            memcpy(&a0, &all[0].v[7], sizeof a0);
            memcpy(&ar, &all[r].v[7], sizeof ar);
            err_set(err, errlen, "the ranks of the group disagree on the fragment alpha: rank 0 has %g, rank %d %g", a0,
                    r, ar);
            return -1;
        }
        if (all[r].worker[0] && strcmp(all[r].worker, all[0].worker) != 0) {
            err_set(err, errlen, "rank %d was given worker id '%s' but rank 0 '%s': a group has one (rank 0's)", r,
                    all[r].worker, all[0].worker);
            return -1;
        }
    }
    if (d->shard_ids) return sharded_cover(d, all, err, errlen);
    if (size > d->rc.nshards) {
        err_set(err, errlen,
                "a group of %d processes needs a run of at least %d shards (each rank moves whole shards) and run "
                "'%s' has %d: init it with --shards %d or more, or use fewer ranks",
                size, size, d->run, d->rc.nshards, size);
        return -1;
    }
    return gpart_bounds(d, err, errlen);
}

static int hello(diloco *d, const diloco_options *o, float *params, size_t numel, char *err, size_t errlen)
{
    int size = o->group.size, rc = -1;
    group_msg me = {0}, *all = calloc((size_t)size, sizeof *all); /* (d->o is state_init's, below) */
    if (!all) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    me.status = state_init(d, o, params, numel, me.err, sizeof me.err) < 0 ? DL_FAIL : DL_OK;
    int sharded = o->group.slices != NULL || o->group.nslices > 0;
    int64_t v[7] = {sharded ? (int64_t)d->run_numel : (int64_t)numel, o->sync_every, o->bf16, o->error_feedback,
                    o->dylu, o->device.delta != NULL, sharded};
    memcpy(me.v, v, sizeof v);
    memcpy(&me.v[7], &o->fragment_alpha, sizeof(double)); /* compared as its bits: check_hello */
    for (int k = 0; me.status == DL_OK && d->shard_ids && k < d->rc.nshards; k++)
        me.held[d->shard_ids[k] / 64] |= 1ull << (d->shard_ids[k] % 64);
    snprintf(me.run, sizeof me.run, "%s", o->run ? o->run : "");
    const char *id = d->grp_rank == 0 ? d->worker_id : o->worker_id ? o->worker_id : ""; /* "": rank 0's */
    snprintf(me.worker, sizeof me.worker, "%s", id);
    if (gmsg_gather(d, GRP_HELLO, &me, all, err, errlen) == 0 && gmsg_first_failure(all, size, err, errlen) == DL_OK)
        rc = check_hello(d, all, err, errlen);
    free(all);
    return rc;
}

/* Each rank's own steps of open after the registration (its shards' owners, its heartbeat, a joiner's wait
 * for the open round to close), their outcomes gathered (READY): a rank that failed there, or was stopped,
 * fails the open on every rank instead of leaving the others waiting at the first FETCH. A rank whose wait a
 * stop ended leaves the run first, which ends the others' waits (they find the group gone). */
static int ready(diloco *d, char *err, size_t errlen)
{
    int size = d->o.group.size;
    group_msg me = {0}, *all = gmsg_alloc(d, err, errlen);
    if (!all) return -1;
    if (owners_refresh(d, me.err, sizeof me.err) < 0 || heartbeat_start(d, me.err, sizeof me.err) < 0 ||
        fetch_wait_joined(d, 0, me.err, sizeof me.err) < 0)
        me.status = DL_FAIL;
    if (me.status != DL_OK && dl_stopping(d)) dl_group_leave(d);
    int rc = gmsg_gather(d, GRP_READY, &me, all, err, errlen);
    if (rc == 0 && gmsg_first_failure(all, size, err, errlen) != DL_OK) rc = -1;
    free(all);
    return rc;
}

/* open failed on every rank, or they agreed on a stop (err then says so). -1. */
static int open_failed(diloco *d, char *err, size_t errlen)
{
    if (d->grp_stop)
        err_set(err, errlen, "stopped while the group joined the run (rank %d was asked to stop)", d->grp_stop_rank);
    return -1;
}

int group_open(diloco *d, const diloco_options *o, float *params, size_t numel, char *err, size_t errlen)
{
    if (check_hooks(o, err, errlen) < 0) return -1;
    d->grp = 1;
    d->grp_rank = o->group.rank;
    /* (a stop agreed at a collective: every rank gives up there, the same step on each) */
    if (hello(d, o, params, numel, err, errlen) < 0 || d->grp_stop) return open_failed(d, err, errlen);
    if (gmember_register(d, err, errlen) < 0 || d->grp_stop) return open_failed(d, err, errlen);
    if (ready(d, err, errlen) < 0 || group_fetch(d, err, errlen) < 0) return open_failed(d, err, errlen);
    log_info("rank %d of group %s joined run %s at version %" PRId64 " (%zu parameters, %s %d of %d shards)",
             d->grp_rank, d->worker_id, d->run, d->frag_version[0], numel, d->shard_ids ? "sharded:" : "moves",
             gpart_count(d), d->run_nshards);
    d->grp_check_every = 1; /* rank 0 sets the pace at the first CHECK */
    group_check_restart(d);
    return 0;
}
