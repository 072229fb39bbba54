/* group.c: process groups: several processes (ranks, e.g. one per GPU of a node, data-parallel inside)
 * that are ONE worker of the run (diloco.h "Process groups", docs/PROTOCOL.md "Process groups").
 *
 * The ranks talk to each other only through the host's two collectives (o.group.allgather, .broadcast).
 * Every step below that involves more than one rank is one allgather of a fixed-size group_msg (group_msg.c;
 * in an async round followed by a number per shard of the fragment: gmsg_gather_with), made by every rank
 * whatever its own outcome, so the ranks always decide the same thing from the same facts (and the same
 * error reaches every rank):
 *
 *   open:     HELLO (each rank's options and whether it could read the run: they must agree), REGISTER
 *             (rank 0 registers the group; the others take its worker id and incarnation), JOIN (the
 *             others dl_group_join), READY (each rank's owners, heartbeat and joiner's wait), then FETCH
 *             until every rank's part is at one version, and the exchange: rank r broadcasts params of its
 *             part, so every rank holds all of them (group_open.c; the registration is group_member.c's);
 *   a round:  PREPARE (each rank's Δ of its part: all fine, or the group fetches instead), the network
 *             round of its part (sync.c: push, arrive as its rank, wait, get), NET (all fine: the
 *             exchange; else RECOVER: rank 0 says whether the group is still a member, it registers
 *             again if not (then every rank waits, as a joiner, for the open round to close), and FETCH
 *             as at open);
 *   async:    the same, with a submission for the round: PREPARE also gives every rank's base versions of
 *             its shards, rank 0 places the group's submission for the whole fragment (async_place_shards)
 *             and PLACES hands the places to every rank, which delivers its part (async_deliver); a part
 *             that failed gets one more try (COMPLETE), after which the group leaves the run rather than
 *             carry a half-delivered submission (async_settle);
 *   Streaming (F fragments): at each fragment boundary the round sent D boundaries before is taken (NET:
 *             every rank's outcome of it) and applied (its exchange), then the next fragment's PREPARE, and
 *             each rank's network round of its part goes in flight on a thread of its own (streaming.c's
 *             stream_launch, sync.c's round as a worker of one process sends a fragment) while the ranks
 *             train: the collectives stay on the training thread, at the boundaries, and a worker of one
 *             process applies a fragment in flight D intervals after it sent it, as the group does. In an
 *             async run every rank's thread places the same submission (the ranks number them together:
 *             PREPARE hands out rank 0's count; dl_submit answers the calls after the first with the
 *             places, or refusal, the first got) and delivers its part (async.c async_place_deliver); at
 *             the next boundary NET also says whether any rank's call got the places, and a rank whose call
 *             failed then places it again (async_settle);
 *   between:  CHECK every grp_check_every inner steps (a number rank 0 sets at each CHECK from its pace: about
 *             two per heartbeat interval, at least one a second): whether any rank's heartbeat found the
 *             group evicted, or its host asked it to stop (agree_stop); if evicted, every
 *             rank stops the interval at that same step, and the group registers again and fetches as in
 *             RECOVER (a worker of one process does that at its next inner step, after_step.c; the ranks
 *             learn of an eviction each from its own heartbeat, at different steps, and can act on it only
 *             together: at a collective made at a step they all know in advance).
 *
 * A rank moves a part of every fragment (a contiguous range of its shards, balanced by elements: grp_parts,
 * group_part.c), which dl_first_shard / dl_last_shard give every per-fragment loop of sync.c, delta.c and
 * fetch.c: the pseudo-gradient of a shard is computed from the same bytes as in a process of its own, so a
 * group's contribution is bit-identical to one process's. The group arrives at the barrier only when every rank
 * arrived (after its own pushes, lua/15_groups.lua), so a group whose rank died never contributes half.
 * A rank that fails before its pushes are acknowledged leaves the run (dl_deregister), so the other
 * ranks waiting at the barrier for the group's arrival see the eviction instead of waiting forever. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "internal.h"

/* ---- parameters: one version on every rank, then the exchange -------------------------------------- */

/* This rank's part of the run's shards digest, for v[1] of a gather: of a sharded rank's own shards after
 * an outcome `status`; 0 otherwise, and while a later round's thread may write base (Streaming with several
 * fragments in flight: no digest then, as a worker of one process records none). */
static int64_t part_digest(diloco *d, int status)
{
    return status == DL_OK && d->shard_ids && !stream_base_busy(d) ? (int64_t)part_shards_digest(d) : 0;
}

/* The run's shards digest from the ranks' parts of it (v[1] of each: part_digest); 0 when a rank had none. */
static uint64_t shards_digest_sum(const group_msg *all, int size)
{
    uint64_t sum = 0;
    for (int r = 0; r < size; r++) {
        if (all[r].v[1] == 0) return 0;
        sum += (uint64_t)all[r].v[1];
    }
    return sum;
}

/* round_record, with a sharded group's digest of the whole run (its rank alone knows only its part's). */
static void record(diloco *d, int f, int64_t round, uint64_t t0, int stale)
{
    round_record(d, f, round, t0, stale);
    if (d->shard_ids) d->last.shards_digest = d->grp_digest;
}

/* Fragment f: every rank's part of it in base is the new global version: params take it, each rank
 * broadcasts its part of params to the others, and base takes the others' parts (so base holds the whole
 * fragment everywhere). With device hooks libdiloco holds no params: the ranks broadcast their parts of
 * base itself, and exchange's load gives the device the whole fragment. A sharded rank holds only its
 * part: params take it (with device hooks, exchange's load), nothing is exchanged. */
static int exchange_fragment(diloco *d, int f, char *err, size_t errlen)
{
    if (d->shard_ids) {
        size_t lo = dl_frag_start(d, f);
        if (!d->dev) memcpy(d->params + lo, d->base + lo, (dl_frag_start(d, f + 1) - lo) * sizeof(float));
        return 0;
    }
    float *via = d->dev ? d->base : d->params; /* the buffer the ranks' parts travel in */
    int first, last;
    gpart_rank_shards(d, d->grp_rank, f, &first, &last);
    size_t off = (size_t)d->rc.shard_bounds[first], n = (size_t)d->rc.shard_bounds[last] - off;
    if (via != d->base) memcpy(via + off, d->base + off, n * sizeof(float));
    for (int r = 0; r < d->o.group.size; r++) {
        gpart_rank_shards(d, r, f, &first, &last);
        off = (size_t)d->rc.shard_bounds[first];
        n = (size_t)d->rc.shard_bounds[last] - off;
        char herr[256] = "";
        if (d->o.group.broadcast(d->o.group.ctx, via, off, n, r, herr, sizeof herr) < 0) {
            err_set(err, errlen, "the group's broadcast of rank %d's parameters failed (%s)", r,
                    herr[0] ? herr : "no message");
            return -1;
        }
        if (r != d->grp_rank && via != d->base) memcpy(d->base + off, via + off, n * sizeof(float));
    }
    return 0;
}

/* exchange with device hooks: the fragments' exchanges of base, then each fragment loaded into the device
 * (a copy, or with alpha above 0 the device's mix of its own parameters and the new global values: the
 * arithmetic of params_mix, diloco.h DILOCO_LOAD_MIX). */
static int exchange_device(diloco *d, int first, int end, double alpha, char *err, size_t errlen)
{
    for (int g = first; g < end; g++) {
        if (exchange_fragment(d, g, err, errlen) < 0) return -1;
        if (d->la_on) d->la_on[g] = 0;
        if (params_load_fragment(d, g, alpha, err, errlen) < 0) return -1;
    }
    d->grp_dirty = 0;
    return 0;
}

/* The exchange of fragment f, or of every fragment (f < 0), then the trainer told. With alpha above 0 the
 * parameters of f become the mix of the ranks' own (the same on every rank: their data-parallel training
 * keeps them equal) and the new global values, which the exchange itself overwrites: kept aside first. */
static int exchange(diloco *d, int f, double alpha, char *err, size_t errlen)
{
    int first = f < 0 ? 0 : f, end = f < 0 ? d->rc.nfragments : f + 1; /* the fragments exchanged */
    if (d->dev) return exchange_device(d, first, end, alpha, err, errlen);
    size_t lo = dl_frag_start(d, first), hi = dl_frag_start(d, end);
    float *local = NULL;
    if (alpha > 0) {
        local = malloc((hi - lo) * sizeof(float));
        if (!local) {
            err_set(err, errlen, "out of memory");
            return -1;
        }
        memcpy(local, d->params + lo, (hi - lo) * sizeof(float));
    }
    for (int g = first; g < end; g++) {
        if (exchange_fragment(d, g, err, errlen) < 0) {
            free(local);
            return -1;
        }
        if (d->la_on) d->la_on[g] = 0; /* (--async-lookahead: from base again, unless take_round aims it) */
    }
    d->grp_dirty = 0;
    if (local) params_mix(d, lo, hi, local, alpha); /* params_apply's arithmetic: as a single worker mixes */
    free(local);
    return params_changed(d, lo, hi - lo, err, errlen);
}

/* A round of fragment f completed on every rank: its exchange (mixed by alpha), and with --async-lookahead
 * the start ahead of the new versions, which every rank aims for the whole fragment from the same bases and
 * versions (lookahead.c) and the trainer takes instead of base, as a worker of one process does. */
static int take_round(diloco *d, int f, double alpha, char *err, size_t errlen)
{
    if (exchange(d, f, alpha, err, errlen) < 0) return -1;
    if (d->la == NULL) return 0;
    lookahead_aim(d, f);
    return lookahead_enter(d, f, err, errlen);
}

/* How long the ranks wait for a repair between two of their collectives there: a rank's stop ends every
 * rank's wait within about this (and a look at the marks in Redis, rank 0's, comes as often). */
#define REPAIR_TOGETHER_MS 1000

/* The ranks wait for `coordinator repair` together: a collective every REPAIR_TOGETHER_MS carries each
 * rank's stop (and the run's shutdown, as every collective does) and rank 0's look at the marks, so a stop
 * asked of any rank, the shutdown or the repair ends every rank's wait at the same collective. Waiting
 * apart (each rank in repair_wait), a stopped rank left its wait alone, and the others, whose group had
 * already left the run at the corrupt round, waited on for the repair and met it only after. 0: repaired;
 * -1 + err: stopped, shut down, or the transport failed. */
static int repair_wait_together(diloco *d, const char *why, char *err, size_t errlen)
{
    group_msg me, *all = gmsg_alloc(d, err, errlen);
    if (!all) return -1;
    int rc = -1;
    for (;;) {
        (void)repair_pause(d, REPAIR_TOGETHER_MS); /* (ends early on a stop: the next message carries it) */
        memset(&me, 0, sizeof me);
        if (d->grp_rank == 0) me.v[0] = repair_look(d, why, REPAIR_TOGETHER_MS);
        if (gmsg_gather(d, GRP_REPAIR, &me, all, err, errlen) < 0) break;
        if (d->grp_stop || diloco_stop_requested(d)) {
            err_set(err, errlen, "%s while waiting for a repair of the corrupt state (%s)",
                    d->grp_stop ? "stopped" : dl_run_end(d), why);
            break;
        }
        if (all[0].v[0]) {
            repair_over(d);
            rc = 0;
            break;
        }
    }
    free(all);
    return rc;
}

/* Every rank fetches its part of fragment f at version >= the fragment's round, again at the highest
 * version any rank got until all agree. A corrupt shard in any rank's part makes every rank wait for the
 * repair together (repair_wait_together), then fetch again: a rank waiting alone (fetch_fragment's own wait)
 * held the others in their next collective, deaf to their stops, until the repair. 0; -1 (the same on every
 * rank) when a rank could not fetch, or a stop or the shutdown ended the wait. */
static int fetch_agreed(diloco *d, int f, group_msg *all, char *err, size_t errlen)
{
    int size = d->o.group.size;
    int64_t want = d->frag_version[f];
    for (;;) {
        group_msg me = {0};
        me.status = fetch_fragment_once(d, f, want, 0, me.err, sizeof me.err);
        me.v[0] = d->frag_version[f];
        me.v[1] = part_digest(d, me.status);
        if (gmsg_gather(d, GRP_FETCH, &me, all, err, errlen) < 0) return -1;
        int worst = gmsg_worst_failure(all, size, err, errlen);
        if (worst == DL_CORRUPT) {
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            if (repair_wait_together(d, why, err, errlen) < 0) return -1;
            continue; /* (the repaired version is above want: the same fetch gets it) */
        }
        if (worst != DL_OK) return -1;
        int64_t lo = all[0].v[0], hi = lo;
        for (int r = 1; r < size; r++) {
            if (all[r].v[0] < lo) lo = all[r].v[0];
            if (all[r].v[0] > hi) hi = all[r].v[0];
        }
        if (lo == hi) {
            d->grp_digest = shards_digest_sum(all, size);
            return 0;
        }
        want = hi; /* a round committed between the ranks' fetches */
    }
}

/* Every fragment at one version on every rank (fetch_agreed), then the exchange of them all: params are the
 * global ones everywhere, and no fragment waits to be applied. -1 (the same on every rank) when a rank could
 * not fetch. */
int group_fetch(diloco *d, char *err, size_t errlen)
{
    group_msg *all = gmsg_alloc(d, err, errlen);
    int rc = all ? 0 : -1;
    for (int f = 0; rc == 0 && f < d->rc.nfragments; f++) rc = fetch_agreed(d, f, all, err, errlen);
    free(all);
    if (rc == 0) rc = exchange(d, -1, 0.0, err, errlen);
    if (rc < 0) d->grp_dirty = 1;
    return rc;
}

/* The ranks agreed (open, a sync, a CHECK): the steps to the next CHECK count from here. */
void group_check_restart(diloco *d)
{
    d->grp_since_check = 0;
    d->grp_check_ms = now_ms();
}

/* ---- after a round: DyLU, a stop, recovery, the fragments that wait ------------------------------------ */

/* DyLU: the run assigns the group one H, told to rank 0's heartbeat (lua/30_workers.lua dl_heartbeat: a
 * group's speed is rank 0's, its ranks step together). Rank 0 offers it in the last collective of a round
 * (NET, or RECOVER) and every rank takes all[0]'s, so the ranks change H at the same sync; each taking the
 * H of its own heartbeat would put them at different steps. 0: nothing to offer (keep H). */
static int64_t dylu_offer(diloco *d)
{
    if (!d->o.dylu || d->grp_rank != 0) return 0;
    pthread_mutex_lock(&d->hb_mu);
    int64_t h = d->dylu_h;
    pthread_mutex_unlock(&d->hb_mu);
    return h;
}

static void dylu_adopt(diloco *d, int64_t h)
{
    if (!d->o.dylu || h <= 0 || h > INT32_MAX) return;
    pthread_mutex_lock(&d->hb_mu);
    d->sync_every = (int)h;
    pthread_mutex_unlock(&d->hb_mu);
}

/* A stop was asked for and agreed (grp_stop): the group leaves the run, every rank at the same collective. */
static int stopped(diloco *d, const char *why, char *err, size_t errlen)
{
    char msg[512];
    if (d->grp_stop && d->grp_stop_rank != d->grp_rank)
        snprintf(msg, sizeof msg, "stopped: rank %d of the group was asked to stop", d->grp_stop_rank);
    else
        snprintf(msg, sizeof msg, "%s", why[0] ? why : "stopped");
    dl_group_leave(d);
    gmember_set_incarnation(d, 0);
    err_set(err, errlen, "%s", msg);
    return -1;
}

/* Every rank: register the group again unless it is still a member, and continue from the current global
 * parameters (the round's record, at round and t0, says stale). Registered again, the group's tokens count
 * anew, as a single worker's (round.c, refetch_everything): the steps trained before are dropped, and no
 * fragment's next Δ may weigh them (--weight-by tokens). 1; 0 when that failed (the next sync tries again);
 * -1 when stopping. */
static int rejoin(diloco *d, int member, int f, int64_t round, uint64_t t0, char *err, size_t errlen)
{
    int rc = 0;
    if (!member && gmember_register(d, err, errlen) < 0) rc = -1;
    if (rc == 0 && !member) dl_delta_forget_tokens(d);
    /* Registered again: a joiner of the next round waits for the open one to close, as at open. The open
     * round does not wait for the group, so training for it would be lost as STALE unless the group
     * happened to arrive before it closed. A failed wait (only when stopping) is not acted on by this rank
     * alone: every rank goes on to group_fetch, whose collective gathers every rank's outcome. */
    if (rc == 0 && !member) (void)fetch_wait_joined(d, 0, err, errlen);
    if (rc == 0 && group_fetch(d, err, errlen) < 0) rc = -1;
    if (rc < 0) {
        if (d->grp_stop) return stopped(d, err, err, errlen);
        if (dl_shutdown_seen(d)) /* not a failure: the run is over (the next collective agrees on the stop) */
            log_info("%s; the group does not register again (%s)", dl_run_end(d), err);
        else
            log_error("the group could not recover: %s (the next sync tries again)", err);
        return 0;
    }
    record(d, f, round, t0, 1);
    return 1;
}

/* The round did not complete on every rank (why: the worst outcome's rank and message, worst_failure): wait
 * out a repair if that was it, register the group again if it is no longer a member, and continue from the
 * current global parameters on every rank. 1; 0 when that failed too (the next sync tries again); -1 when
 * stopping. */
static int recover(diloco *d, int worst, const char *why, int f, int64_t round, uint64_t t0, char *err,
                   size_t errlen)
{
    d->refetch_all = 0;
    d->grp_dirty = 1;
    char reason[512];
    snprintf(reason, sizeof reason, "%s", why);
    log_warn("round %" PRId64 " of fragment %d did not complete for the group (%s); continuing from the global "
             "parameters",
             round, f, reason);
    /* The ranks wait for the repair together; a wait that a stop or a shutdown ended is acted on at RECOVER,
     * where every rank sees it (grp_stop, diloco_stop_requested). */
    if (worst == DL_CORRUPT) (void)repair_wait_together(d, reason, err, errlen);
    group_msg me = {0}, *all = gmsg_alloc(d, err, errlen);
    if (!all) return -1;
    if (d->grp_rank == 0) { /* is the group still a member, with this incarnation? */
        redisReply *r = dl_command(d, NULL, 0, "FCALL dl_member 1 %s %s", d->config_key, d->worker_id);
        me.v[0] = r && r->type == REDIS_REPLY_INTEGER && r->integer == dl_inc(d) && dl_inc(d) > 0;
        if (r) freeReplyObject(r);
    }
    me.v[1] = dylu_offer(d);
    int rc = gmsg_gather(d, GRP_RECOVER, &me, all, err, errlen);
    int member = rc == 0 && all[0].v[0];
    if (rc == 0) dylu_adopt(d, all[0].v[1]);
    free(all);
    if (rc < 0) return -1;
    if (d->grp_stop) return stopped(d, reason, err, errlen);
    return rejoin(d, member, f, round, t0, err, errlen);
}

/* ---- async: the group's submission ------------------------------------------------------------------ */

/* An async round's versions of fragment f's shards, which move on their own: rank 0 submits for all of them
 * and so needs the base version of every shard, which only the rank moving it knows, and every rank reports
 * the fragment's lowest. The fragment's shards are the run's [first, first + n) (of a sharded group too, whose
 * ranks each see only their own shards of it). mine[i] (shard first + i) is this rank's version of
 * it or -1 (not its shard); vals[r * n + i] is rank r's after a gather; whole[i] every shard's version (the
 * one rank that moves it gave it: take_versions); seqs[i] rank 0's places. n is 0 in a sync round (a
 * fragment's shards are at one version there). */
typedef struct frag_versions {
    int first, n;
    int64_t *mine, *vals, *whole, *seqs;
} frag_versions;

static int versions_alloc(diloco *d, int f, frag_versions *v, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    if (!d->rc.async) return 0;
    v->first = gpart_run_frag_bounds(d)[f];
    v->n = gpart_run_frag_bounds(d)[f + 1] - v->first;
    v->mine = calloc((size_t)v->n, sizeof(int64_t));
    v->vals = calloc((size_t)v->n * (size_t)d->o.group.size, sizeof(int64_t));
    v->whole = calloc((size_t)v->n, sizeof(int64_t));
    v->seqs = calloc((size_t)v->n, sizeof(int64_t));
    if (v->mine && v->vals && v->whole && v->seqs) return 0;
    err_set(err, errlen, "out of memory");
    return -1;
}

static void versions_free(frag_versions *v)
{
    free(v->mine);
    free(v->vals);
    free(v->whole);
    free(v->seqs);
}

/* A round's buffers: the slots of its gathers (returned) and its versions (v). NULL when out of memory. */
static group_msg *round_alloc(diloco *d, int f, frag_versions *v, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    group_msg *all = calloc((size_t)d->o.group.size, sizeof *all);
    if (all && versions_alloc(d, f, v, err, errlen) == 0) return all;
    free(all);
    versions_free(v);
    err_set(err, errlen, "out of memory");
    return NULL;
}

static void round_free(group_msg *all, frag_versions *v)
{
    free(all);
    versions_free(v);
}

/* gather, with this rank's versions of its shards of f (async rounds) */
static int gather_versions(diloco *d, int f, int what, group_msg *me, frag_versions *v, group_msg *all, char *err,
                           size_t errlen)
{
    for (int i = 0; i < v->n; i++) v->mine[i] = -1;
    for (int k = dl_first_shard(d, f); v->n > 0 && k < dl_last_shard(d, f); k++)
        v->mine[dl_shard_id(d, k) - v->first] = d->shard_version[k];
    return gmsg_gather_with(d, what, me, v->mine, v->n, all, v->vals, err, errlen);
}

/* After gather_versions: every shard's version is the one its rank gave (whole; on every rank of a group
 * that exchanges, also shard_version: each holds every shard after the exchange), and the fragment's
 * version their lowest (a round's record and the group's messages say the same on every rank). */
static void take_versions(diloco *d, int f, frag_versions *v)
{
    if (v->n == 0) return;
    int64_t lo = INT64_MAX;
    for (int i = 0; i < v->n; i++) {
        v->whole[i] = -1;
        for (int r = 0; r < d->o.group.size; r++)
            if (v->vals[(size_t)r * (size_t)v->n + (size_t)i] > v->whole[i])
                v->whole[i] = v->vals[(size_t)r * (size_t)v->n + (size_t)i];
        if (!d->shard_ids) d->shard_version[v->first + i] = v->whole[i];
        if (v->whole[i] < lo) lo = v->whole[i];
    }
    dl_set_frag_version(d, f, lo);
}

/* Rank 0's submission of the group for every shard of fragment f (the run's ids, from the versions every
 * rank gave at PREPARE) into v->seqs; again: the same submission, whose places a failover lost. */
static int place_all(diloco *d, int f, frag_versions *v, int again, char *err, size_t errlen)
{
    return async_place_shards(d, f, again, v->first, NULL, v->n, v->whole, v->seqs, err, errlen);
}

/* Async Streaming: fragment f's submission (the versions every rank gave at PREPARE) kept for the ranks'
 * threads, which place it (async_place_deliver), and for a second try (async_settle). */
static int plan_keep(diloco *d, const frag_versions *v, char *err, size_t errlen)
{
    if (!d->grp_plan.bases && !(d->grp_plan.bases = malloc((size_t)d->run_nshards * sizeof(int64_t)))) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    if (!d->grp_placed) { /* (here, on the training thread: before any thread could place) */
        if (!(d->grp_placed = malloc((size_t)d->run_nshards * sizeof(int64_t)))) {
            err_set(err, errlen, "out of memory");
            return -1;
        }
        for (int k = 0; k < d->run_nshards; k++) d->grp_placed[k] = -1;
    }
    d->grp_plan.first = v->first;
    d->grp_plan.n = v->n;
    memcpy(d->grp_plan.bases, v->whole, (size_t)v->n * sizeof(int64_t));
    return 0;
}

/* Async, instead of a barrier round's arrival: rank 0 places the group's submission for the whole fragment
 * (place_all, from the base versions every rank gave at PREPARE) and PLACES hands the places to every rank;
 * again: the same submission once more, its places lost in a failover (async_settle). me->status: rank 0's
 * (STALE, EVICTED, FAIL: nothing placed) on every rank. -1 when the collective failed. */
static int async_places(diloco *d, int f, int again, group_msg *me, frag_versions *v, group_msg *all, char *err,
                        size_t errlen)
{
    memset(me, 0, sizeof *me);
    if (!again) lookahead_keep(d, f); /* (the bases and versions the next start is aimed from: all ranks') */
    if (d->grp_rank == 0) {
        me->status = dl_evicted(d) ? DL_EVICTED : place_all(d, f, v, again, me->err, sizeof me->err);
        if (me->status == DL_EVICTED && !me->err[0])
            snprintf(me->err, sizeof me->err, "evicted (heartbeats missed for longer than the timeout)");
    }
    if (gmsg_gather_with(d, GRP_PLACES, me, v->seqs, v->n, all, v->vals, err, errlen) < 0) return -1;
    me->status = all[0].status;
    snprintf(me->err, sizeof me->err, "%s", all[0].err);
    if (me->status != DL_OK) return 0;
    /* rank 0's places: of every shard of the fragment (the lookahead aims them all: take_round), or of a
     * sharded rank's own */
    for (int i = 0; !d->shard_ids && i < v->n; i++) d->seq[v->first + i] = v->vals[i];
    for (int k = dl_first_shard(d, f); d->shard_ids && k < dl_last_shard(d, f); k++)
        d->seq[k] = v->vals[dl_shard_id(d, k) - v->first];
    /* From here the submission has its places: completed or abandoned together (async_settle), never
     * sent again as part of another one. */
    d->frag_incomplete[f] = 1;
    return 0;
}

/* In NET's message: this rank found the group's places lost in a failover (async_deliver's lost). */
#define NET_PLACES_LOST 4

/* The places (async_places), then each rank delivers its part (async_deliver): me->status this rank's
 * delivery, or rank 0's refusal. -1 when the collective failed. */
static int async_net(diloco *d, int f, group_msg *me, frag_versions *v, group_msg *all, char *err, size_t errlen)
{
    if (async_places(d, f, 0, me, v, all, err, errlen) < 0) return -1;
    int lost = 0;
    if (me->status == DL_OK) me->status = async_deliver(d, f, &lost, me->err, sizeof me->err);
    me->v[NET_PLACES_LOST] = lost;
    return 0;
}

/* Whether a rank said at NET that the group's places were lost (a failover loses a dl_submit whole, but a
 * rank whose get waits for a place nobody was given learns it only when its get gives up). */
static int places_lost(const group_msg *all, int size)
{
    for (int r = 0; r < size; r++)
        if (all[r].v[NET_PLACES_LOST]) return 1;
    return 0;
}

/* Async, after NET: the group's submission has its places but a rank's part was not applied. Each such rank
 * tries once more (its Δ kept: async_deliver); when a rank found the places lost in a failover, rank 0 first
 * places the same submission again for every rank (async_places, again), and every rank delivers its part
 * there. When every part is then applied, the round succeeded. When
 * not, the group leaves the run, so that no owner waits for a place of ours (an async place of a dead
 * incarnation becomes a no-op: shard-server/commit.c), and recover registers it again: a group does not
 * carry a half-delivered submission into its next interval, where every rank would have to agree on its
 * completion. *worst: the worst status of the ranks (DL_OK: applied); -1 when the collective failed. */
static int async_settle(diloco *d, int f, int unplaced, frag_versions *v, group_msg *all, int *worst, char *err,
                        size_t errlen)
{
    if (d->grp_rank == 0)
        log_warn("fragment %d: the group's submission was not applied on every rank (%s); trying once more", f, err);
    group_msg me = {0};
    if (unplaced) { /* (the same submission: dl_submit answers with the places another rank's call got) */
        me.status = async_place_deliver(d, f, &d->grp_plan, 1, me.err, sizeof me.err);
    } else if (places_lost(all, d->o.group.size)) { /* (all: NET's) */
        if (async_places(d, f, 1, &me, v, all, err, errlen) < 0) return -1;
        if (me.status == DL_OK) me.status = async_deliver(d, f, NULL, me.err, sizeof me.err);
    } else {
        me.status = d->frag_incomplete[f] ? async_deliver(d, f, NULL, me.err, sizeof me.err) : DL_OK;
    }
    me.v[1] = part_digest(d, me.status); /* (as NET's) */
    me.v[2] = dylu_offer(d); /* (this gather is the round's last, as NET's would have been) */
    if (gather_versions(d, f, GRP_COMPLETE, &me, v, all, err, errlen) < 0) return -1;
    *worst = gmsg_worst_status(all, d->o.group.size);
    if (*worst == DL_OK) {
        if (d->grp_rank == 0) log_info("fragment %d: the group's submission was applied at a second try", f);
        return 0;
    }
    gmsg_first_failure(all, d->o.group.size, err, errlen);
    if (d->grp_rank == 0) {
        log_warn("fragment %d: the group's submission could not be delivered (%s); the group leaves the run and "
                 "registers again (its places become no-ops)",
                 f, err);
        dl_group_leave(d);
    }
    d->frag_incomplete[f] = 0; /* its places are no-ops once the incarnation is over */
    return 0;
}

/* ---- a round ----------------------------------------------------------------------------------------- */

/* A round's collective agreed on a stop (grp_stop): 1, err this rank's message if it had one. */
static int stop_agreed(const group_msg *me, char *err, size_t errlen)
{
    err_set(err, errlen, "%s", me->err[0] ? me->err : "stopped");
    return 1;
}

/* The round's network part on every rank (NET): sync.c's round of this rank's part, or the group's async
 * submission. The worst status of the ranks in *worst; -1 when a collective failed, 1 when a stop was
 * agreed (every rank). */
static int net(diloco *d, int f, frag_versions *v, group_msg *all, int *worst, char *err, size_t errlen)
{
    group_msg me = {0};
    if (d->rc.async) {
        if (async_net(d, f, &me, v, all, err, errlen) < 0) return -1;
    } else {
        me.status = round_net(d, f, 0, me.err, sizeof me.err); /* (a rank that never arrived left the run) */
    }
    me.v[1] = part_digest(d, me.status); /* of the new part */
    me.v[2] = dylu_offer(d);
    int placed = d->rc.async && all[0].status == DL_OK; /* (all: the PLACES gather's) */
    if (gather_versions(d, f, GRP_NET, &me, v, all, err, errlen) < 0) return -1;
    if (d->grp_stop) return stop_agreed(&me, err, errlen);
    *worst = gmsg_worst_failure(all, d->o.group.size, err, errlen);
    if (*worst != DL_OK && placed && async_settle(d, f, 0, v, all, worst, err, errlen) < 0) return -1;
    if (*worst != DL_OK) return 0;
    take_versions(d, f, v);
    d->grp_digest = shards_digest_sum(all, d->o.group.size);
    dylu_adopt(d, all[0].v[2]);
    return 0;
}

/* PREPARE: each rank's Δ of its part, the group's tokens, and (async) every shard's base version. The worst
 * status of the ranks in *worst (err: the first failure's); -1 when the collective failed, 1 when a stop was
 * agreed (every rank). */
static int prepare(diloco *d, int f, frag_versions *v, group_msg *all, int *worst, char *err, size_t errlen)
{
    group_msg me = {0};
    prep_outcome p = round_prepare_delta(d, f, me.err, sizeof me.err);
    me.status = p == PREP_SEND ? DL_OK : p == PREP_CORRUPT ? DL_CORRUPT : p == PREP_RESET ? DL_STALE : DL_FAIL;
    me.v[0] = (int64_t)d->push_tokens[f];
    me.v[3] = d->submission;
    if (gather_versions(d, f, GRP_PREPARE, &me, v, all, err, errlen) < 0) return -1;
    if (d->grp_stop) return stop_agreed(&me, err, errlen);
    *worst = gmsg_worst_failure(all, d->o.group.size, err, errlen);
    if (*worst != DL_OK) return 0;
    d->submission = all[0].v[3]; /* (async: the ranks number the submissions they all place as rank 0 does) */
    uint64_t tokens = 0; /* the group's pseudo-gradient weighs all its ranks' tokens */
    for (int r = 0; r < d->o.group.size; r++) tokens += (uint64_t)all[r].v[0];
    d->push_tokens[f] = tokens;
    take_versions(d, f, v);
    return 0;
}

/* A round that completed on every rank: its exchange (take_round) and its record. 1 (params changed), -1. */
static int completed(diloco *d, int f, double alpha, int64_t round, uint64_t t0, char *err, size_t errlen)
{
    d->base_busy = stream_base_busy(d); /* (Streaming: the later rounds' threads write base: no digest of it) */
    int rc = take_round(d, f, alpha, err, errlen);
    if (rc == 0) record(d, f, round, t0, 0);
    d->base_busy = 0;
    return rc < 0 ? -1 : 1;
}

/* ---- Streaming: rounds in flight on threads while the ranks train -------------------------------------- */

/* Async: the group's submission of fragment f was refused as STALE (Streaming: every rank's call; plain: rank
 * 0's, the one that places; the group is still a member: dl_submit looks at that first). As a worker of one
 * process does (round.c's round_net: fetch_current), only f continues from the current global parameters:
 * each rank fetches its part at the versions the run has now, the ranks exchange their versions and parts,
 * and every other fragment keeps what the ranks trained. 1 (params changed), -1 (a collective failed, or a
 * stop agreed), or 0 when a rank could not fetch (or met a corrupt shard): *worst says how, and the group
 * recovers as after any other failure. */
static int refused(diloco *d, int f, int64_t round, uint64_t t0, const char *why, int *worst, char *err, size_t errlen)
{
    if (d->grp_rank == 0) round_warn_stale(d, f, round, why);
    frag_versions v;
    group_msg me = {0}, *all = round_alloc(d, f, &v, err, errlen);
    if (!all) return -1;
    me.status = fetch_current_once(d, f, me.err, sizeof me.err);
    me.v[1] = part_digest(d, me.status);
    int rc = gather_versions(d, f, GRP_FETCH, &me, &v, all, err, errlen);
    if (rc == 0 && !d->grp_stop && (*worst = gmsg_worst_failure(all, d->o.group.size, err, errlen)) == DL_OK) {
        take_versions(d, f, &v);
        d->grp_digest = shards_digest_sum(all, d->o.group.size);
    }
    round_free(all, &v);
    if (rc < 0) return -1;
    if (d->grp_stop) return stopped(d, me.err, err, errlen);
    if (*worst != DL_OK) return 0;
    if (exchange(d, f, 0.0, err, errlen) < 0) return -1;
    record(d, f, round, t0, 1);
    return 1;
}

/* A round taken out of flight (s) on every rank: its outcome agreed (NET; async: with the versions got, and a
 * part not applied tried once more, async_settle), then its exchange, mixed by the fragment alpha; one that
 * did not complete everywhere drops the others in flight (every rank does: the same outcome) and the group
 * recovers (*recovered). 1 params changed, 0 not (a recovery that failed: the next sync tries again), -1. */
static int settle_taken(diloco *d, const stream_slot *s, int *recovered, char *err, size_t errlen)
{
    int size = d->o.group.size, f = s->frag, worst = DL_FAIL, refusal = 0;
    frag_versions v;
    group_msg me = {0}, *all = round_alloc(d, f, &v, err, errlen);
    if (!all) return -1;
    me.status = s->rc;
    snprintf(me.err, sizeof me.err, "%s", s->err);
    me.v[1] = part_digest(d, me.status); /* (its thread is joined: base holds the round's new values) */
    me.v[2] = dylu_offer(d);
    int placed = s->rc == DL_OK || (d->rc.async && d->frag_incomplete[f]); /* (async: got its places) */
    me.v[3] = placed;
    d->cur = s->info; /* what the round counted, for its record */
    int rc = gather_versions(d, f, GRP_NET, &me, &v, all, err, errlen);
    if (rc == 0 && d->grp_stop) {
        round_free(all, &v);
        stream_drop_inflight(d); /* (their threads saw the stop flag: they end too) */
        *recovered = 1;
        return stopped(d, me.err, err, errlen);
    }
    if (rc == 0) {
        worst = gmsg_worst_failure(all, size, err, errlen);
        int any_placed = 0; /* (none: every rank's dl_submit was refused or failed, nothing to complete) */
        for (int r = 0; r < size; r++) any_placed |= all[r].v[3] != 0;
        if (worst != DL_OK && d->rc.async && any_placed) rc = async_settle(d, f, !placed, &v, all, &worst, err, errlen);
        refusal = d->rc.async && !any_placed && worst == DL_STALE; /* (all refused: dl_submit's one answer) */
    }
    if (rc == 0 && worst == DL_OK) {
        take_versions(d, f, &v);
        d->grp_digest = shards_digest_sum(all, size);
        dylu_adopt(d, all[0].v[2]);
    }
    round_free(all, &v);
    if (rc < 0) return -1;
    if (worst == DL_OK) return completed(d, f, d->o.fragment_alpha, s->round, s->t0, err, errlen);
    if (worst == DL_STALE && refusal) { /* (only f: a worker of one process's way, unless its fetch failed) */
        int taken = refused(d, f, s->round, s->t0, err, &worst, err, errlen);
        if (taken != 0) return taken;
    }
    stream_drop_inflight(d); /* recover fetches every fragment */
    *recovered = 1;
    return recover(d, worst, err, f, s->round, s->t0, err, errlen);
}

/* The rounds in flight, oldest first, until `keep` remain (a boundary keeps D - 1: a round is applied D
 * boundaries after it was sent); stops at a recovery (*recovered), which dropped the rest. 1 params
 * changed, 0 not, -1. */
static int take_inflight(diloco *d, int keep, int *recovered, char *err, size_t errlen)
{
    int changed = 0;
    while (d->inflight_count > keep && !*recovered) {
        stream_slot s;
        stream_take_oldest(d, &s);
        int rc = settle_taken(d, &s, recovered, err, errlen);
        if (rc < 0) return -1;
        changed |= rc;
    }
    return changed;
}

/* The group's round of fragment f: each rank's Δ of its part (PREPARE: all fine, or the group fetches
 * instead), then either (in_flight: Streaming) its network round in flight on a thread of each rank
 * (stream_launch: sync.c's round of the rank's part, or an async submission's delivery once PLACES gave its
 * places here, as a worker of one process sends a fragment), taken at a later boundary (take_inflight); or,
 * blocking, the network round of each rank's part (NET) and the exchange (completed). 1 params changed, 0
 * not (launched; a recovery that failed), -1 fatal. */
static int round_run(diloco *d, int f, int in_flight, char *err, size_t errlen)
{
    round_begin(d);
    uint64_t t0 = now_ms();
    int64_t round = d->frag_version[f];
    int worst = DL_STALE, rc = 0;
    frag_versions v;
    group_msg *all = round_alloc(d, f, &v, err, errlen);
    if (!all) return -1;
    snprintf(err, errlen, "a rank's parameters were out of step with the group's");
    stream_ready(d, f); /* (sync Streaming: f's last round's thread may still look at its commit) */
    d->base_busy = stream_base_busy(d);
    if (!d->grp_dirty) rc = prepare(d, f, &v, all, &worst, err, errlen);
    d->base_busy = 0;
    int go = rc == 0 && !d->grp_dirty && worst == DL_OK;
    if (go && in_flight && d->rc.async) { /* async: the submission every rank's thread places */
        lookahead_keep(d, f); /* (the bases and versions the next start is aimed from: every rank holds all) */
        rc = plan_keep(d, &v, err, errlen);
    } else if (go && !in_flight) {
        rc = net(d, f, &v, all, &worst, err, errlen);
    }
    round_free(all, &v);
    if (rc < 0) return -1;
    if (rc > 0) return stopped(d, err, err, errlen);
    if (worst == DL_OK && in_flight) {
        stream_launch(d, f, d->rc.async ? &d->grp_plan : NULL);
        return 0;
    }
    if (worst == DL_OK) return completed(d, f, 0.0, round, t0, err, errlen);
    /* plain async: rank 0's dl_submit refused as STALE (no places: nothing to complete) is f's alone, as in
     * Streaming (settle_taken) and as a worker of one process takes it */
    if (go && !in_flight && d->rc.async && worst == DL_STALE && !d->frag_incomplete[f]) {
        int taken = refused(d, f, round, t0, err, &worst, err, errlen);
        if (taken != 0) return taken;
    }
    stream_drop_inflight(d); /* recover fetches every fragment: no thread of ours may touch one */
    return recover(d, worst, err, f, round, t0, err, errlen);
}

int group_settle_all(diloco *d, char *err, size_t errlen)
{
    int recovered = 0;
    return take_inflight(d, 0, &recovered, err, errlen);
}

int group_round(diloco *d, int f, char *err, size_t errlen)
{
    int changed = group_settle_all(d, err, errlen);
    int rc = changed < 0 ? -1 : round_run(d, f, 0, err, errlen);
    group_check_restart(d);
    return rc < 0 ? -1 : rc | changed;
}

int group_stream_step(diloco *d, char *err, size_t errlen)
{
    int rc = 0, recovered = 0;
    int changed = take_inflight(d, d->inflight_max - 1, &recovered, err, errlen);
    if (changed >= 0 && !recovered) /* (after a recovery the next round goes at the next boundary) */
        rc = round_run(d, stream_next_fragment(d), 1, err, errlen);
    group_check_restart(d);
    return changed < 0 || rc < 0 ? -1 : rc | changed;
}

/* ---- between syncs ----------------------------------------------------------------------------------- */

/* A host's stop is agreed at the next CHECK: a node's Ctrl-C stops its ranks within about this long. */
#define CHECK_MAX_MS 1000.0

/* Rank 0's steps from one CHECK to the next: about half a heartbeat interval, and at most CHECK_MAX_MS (no
 * heartbeats: CHECK_MAX_MS), at the pace of the n steps since the last agreement (ms), so the group acts on
 * an eviction within about 1.5 heartbeat intervals (a worker of one process: 1) and on a stop within about a
 * second, for one small allgather per period; at least 1 step, at most the steps to the next round. */
static int64_t next_check(const diloco *d, int n, uint64_t ms)
{
    int sync = d->rc.nfragments > 1 ? stream_interval(d) : d->sync_every; /* steps between two rounds */
    double every = d->o.heartbeat_interval_ms > 0 ? d->o.heartbeat_interval_ms / 2.0 : CHECK_MAX_MS;
    if (every > CHECK_MAX_MS) every = CHECK_MAX_MS;
    double k = ms > 0 ? (double)n * every / (double)ms : sync;
    return k < 1 ? 1 : k > sync ? sync : (int64_t)k;
}

/* CHECK: whether any rank's heartbeat found the group evicted (and, as every collective, whether a rank was
 * asked to stop or told of a shutdown: agree_stop). If one was evicted, every rank (the same step on
 * each) drops the rest of the interval, and the group registers again and continues from the global
 * parameters as a joiner. 1 params changed, 0 not (or a failed rejoin: the next sync tries again), -1 when
 * the collective failed or we stop. */
static int check(diloco *d, char *err, size_t errlen)
{
    int size = d->o.group.size;
    group_msg me = {0}, *all = gmsg_alloc(d, err, errlen);
    if (!all) return -1;
    me.v[0] = dl_evicted(d);
    if (d->grp_rank == 0) me.v[1] = next_check(d, d->grp_since_check, now_ms() - d->grp_check_ms);
    int rc = gmsg_gather(d, GRP_CHECK, &me, all, err, errlen), saw = -1;
    for (int r = 0; rc == 0 && r < size && saw < 0; r++)
        if (all[r].v[0]) saw = r;
    int64_t every = all[0].v[1];
    free(all);
    if (rc < 0) return -1;
    d->grp_check_every = every >= 1 && every <= d->sync_every ? (int)every : 1;
    group_check_restart(d);
    /* stopped or shut down (agree_stop): no registering again. (A group's stop_requested is written only by
     * agree_stop, on this thread.) */
    if (saw < 0 || d->stop_requested) return 0;
    int stream = d->rc.nfragments > 1, interval = stream ? stream_interval(d) : d->sync_every;
    log_warn("the group was evicted (rank %d's heartbeat was told) during inner step %d of %d; registering it again "
             "now instead of training the rest of the interval as a dead incarnation (its steps are dropped)",
             saw, stream ? (d->steps - 1) % interval + 1 : d->steps, interval);
    d->steps = 0; /* the next sync comes a whole interval after the parameters we are about to take */
    stream_drop_inflight(d); /* (Streaming: the rounds in flight are the dead incarnation's) */
    round_begin(d);
    uint64_t t0 = now_ms();
    int64_t round = d->frag_version[0];
    d->grp_dirty = 1;
    d->refetch_all = 0;
    rc = rejoin(d, 0, 0, round, t0, err, errlen);
    group_check_restart(d);
    return rc;
}

int group_step(diloco *d, char *err, size_t errlen)
{
    if (++d->grp_since_check < d->grp_check_every) return 0;
    return check(d, err, errlen);
}
