/*
 * commit.c: the commit chain of a round of one shard (docs/PROTOCOL.md, "Commit").
 *
 * Driven by a `get(k, r+1)` while the shard is at version r:
 *   dl_barrier(f, r): open -> `wait`; closed -> participants (sorted id:inc) minus dropped;
 *   each participant without a stored Δ: dl_member; gone (or another incarnation) -> dl_drop; alive -> `need`
 *   (unless its Δ came while the checks were out: all_deltas_here);
 *   all present -> g = mean of the Δ in participant order (fp32, fixed order, no FMA), outer_sgd_step
 *   on copies of θ and momentum, SET dl:{R:k}:log:<r+1>:<epoch> (bulk), dl_commit (fenced by epoch and
 *   version); success -> the copies become the cache and every waiting get is answered.
 * Zero participants left: a no-op step (θ and momentum unchanged; log entry with aux 0) so the run
 * never wedges. FENCED/VERSION/unknown outcome: the cache is rebuilt from Redis (shard_reload), which
 * also drops the shard if the lease is gone. Only one commit per shard runs at a time.
 * The compute runs in commit_compute.c, the log entry in commit_log.c, snapshots in snapshot.c; the
 * commit object (made, freed, ended: its parked gets answered) is commit_obj.c's. This file is the top
 * of the commit's files: it calls them, they reach what follows their step through the commit's steps,
 * which this file chooses for a round's commits (round_steps).
 */
#include "commit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"

static void commit_on_commit(redisReply *r, void *priv)
{
    ss_commit *c = priv;
    ss_ctx *ss = c->ss;
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    if (r == NULL) {
        commit_fail(c, "connection lost during dl_commit (outcome unknown)", 1);
        return;
    }
    if (r->type != REDIS_REPLY_INTEGER) {
        ss->m.conflicts++;
        commit_fail(c, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected dl_commit reply", 1);
        return;
    }
    if (runconf_rebase(&ss->rc)) /* the replaced version: a later submission may be based on it */
        past_keep(s, ss->rc.rebase_window, s->theta, s->version);
    else
        server_buf_release(s->theta);
    free(s->mom);
    s->tent_theta = NULL;
    s->theta = c->theta;
    s->mom = c->mom;
    s->has_mom = c->has_mom;
    c->theta = c->mom = NULL;
    if (c->dnbuf != NULL) {
        free(s->dnbuf);
        s->dnbuf = c->dnbuf;
        c->dnbuf = NULL;
    }
    if (c->gq != NULL) { /* --download update: the update of the new version, for the gets that follow */
        reply_update_clear(&s->upd);
        commit_log_update_of(c, &s->upd);
        c->gq = NULL;
    }
    s->version = c->round + 1;
    snprintf(s->digest, sizeof s->digest, "%s", c->digest);
    s->theta_xxh = c->theta_xxh;
    delta_free(s, s->version, 0);
    ahead_note_participants(c, s);
    double secs = (double)(now_ms() - c->t0) / 1000.0;
    ss->m.rounds_committed++;
    if (c->used == 0) ss->m.noop_commits++;
    ss->m.commit_seconds += secs;
    if (secs > ss->m.commit_seconds_max) ss->m.commit_seconds_max = secs;
    log_info("shard %d: committed version %lld (%d participants, %.3f s, digest %s)", s->k, (long long)s->version,
             c->used, secs, s->digest);
    if (ss->rc.snapshot_every > 0 && s->version % ss->rc.snapshot_every == 0 && runconf_rebase(&ss->rc))
        snapshot_prepare_lagged(ss, s); /* written once it is rebase_window versions old */
    else if (ss->rc.snapshot_every > 0 && s->version % ss->rc.snapshot_every == 0)
        s->snap_wanted = s->version; /* written once no commit is running: never ahead of a log entry */
    store_mark_replicated(ss, s->k, c->epoch, s->version);
    commit_finish(c, OUT_DONE);
}

/* The log entry is written (or not): dl_commit. */
static void commit_on_log_written(redisReply *r, void *priv)
{
    ss_commit *c = priv;
    ss_ctx *ss = c->ss;
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        commit_fail(c, r ? r->str : "connection lost writing the log blob", 0);
        return;
    }
    log_debug("shard %d round %lld: log written at +%llu ms", c->k, (long long)c->round,
              (unsigned long long)(now_ms() - c->t0));
    if (!ss_lease_valid(ss)) {
        commit_fail(c, "the lease may have expired before dl_commit", 1);
        return;
    }
    /* fault injection (fault.c): die in the worst place, with the pseudo-gradients received and the log
     * entry written but the version not committed */
    if (fault_before_commit(ss, c->k, c->round)) return; /* c stays: the process exits soon */
    char ep[24], shard[16], from[24], ref[64], parts[16], frag[16], round[24];
    snprintf(ep, sizeof ep, "%lld", (long long)c->epoch);
    snprintf(shard, sizeof shard, "%d", c->k);
    snprintf(from, sizeof from, "%lld", (long long)c->round);
    snprintf(ref, sizeof ref, "%lld.%lld", (long long)(c->round + 1), (long long)c->epoch);
    snprintf(parts, sizeof parts, "%d", c->used);
    snprintf(frag, sizeof frag, "%d", s->frag);
    snprintf(round, sizeof round, "%lld", (long long)c->round);
    const char *args[9] = {ss->id, ep, shard, from, c->digest, ref, parts, frag, round};
    if (store_fcall_durable(ss, commit_on_commit, c, "dl_commit", 9, args) != 0)
        commit_fail(c, "Redis is unavailable", 0);
}

/* Whether every participant not dropped has its Δ stored: one may have come while the membership checks were
 * out (its push's own check went to Redis before ours), and a `need` for it would only bring it again, told
 * STALE once the next commit took the first (tests/test_ss_commit.c, test_delta_during_checks). */
static int all_deltas_here(const ss_commit *c, ss_shard *s)
{
    for (int i = 0; i < c->np; i++)
        if (!c->dropped[i] && delta_find(s, c->round, c->ids[i], c->incs[i]) == NULL) return 0;
    return 1;
}

/* All membership checks are back: need, drop or compute. */
static void commit_after_checks(ss_commit *c)
{
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    if (c->need[0] != '\0' && !c->failed && all_deltas_here(c, s)) {
        log_debug("shard %d round %lld: the pseudo-gradients of %s came during the checks", c->k, (long long)c->round,
                  c->need);
        c->need[0] = '\0';
    }
    if (c->need[0] != '\0') {
        log_debug("shard %d round %lld: waiting for the pseudo-gradients of %s", c->k, (long long)c->round, c->need);
        commit_finish(c, OUT_NEED);
        return;
    }
    if (c->failed) {
        commit_finish(c, OUT_ERR);
        return;
    }
    switch (ahead_take(c, s)) { /* a compute ahead of the barrier may have made it with the same Δ */
    case AHEAD_COMPUTED: commit_log_write(c, s); return;
    case AHEAD_QUEUED: return; /* c took its place in the compute queue */
    default: commit_compute(c, s);
    }
}

static void need_add(ss_commit *c, const char *id)
{
    size_t used = strlen(c->need);
    snprintf(c->need + used, sizeof c->need - used, "%s%s", used ? "," : "", id);
}

typedef struct member_q {
    ss_commit *c;
    int i;
} member_q;

static void commit_on_drop(redisReply *r, void *priv)
{
    member_q *q = priv;
    ss_commit *c = q->c;
    int i = q->i;
    free(q);
    if (r == NULL) {
        c->failed = 1;
        snprintf(c->errmsg, sizeof c->errmsg, "connection lost during dl_drop");
    } else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ALIVE", 5) == 0) {
        need_add(c, c->ids[i]);
    } else if (r->type == REDIS_REPLY_ERROR) {
        c->failed = 1;
        snprintf(c->errmsg, sizeof c->errmsg, "dl_drop: %s", r->str);
    } else {
        c->dropped[i] = 1;
        log_info("shard %d round %lld: dropped %s:%lld (no longer a member)", c->k, (long long)c->round, c->ids[i],
                 (long long)c->incs[i]);
    }
    if (--c->outstanding == 0) commit_after_checks(c);
}

static void commit_on_member(redisReply *r, void *priv)
{
    member_q *q = priv;
    ss_commit *c = q->c;
    ss_ctx *ss = c->ss;
    int i = q->i;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        c->failed = 1;
        snprintf(c->errmsg, sizeof c->errmsg, "dl_member: %s", r ? r->str : "connection lost");
    } else if (r->type == REDIS_REPLY_INTEGER && r->integer == c->incs[i]) {
        need_add(c, c->ids[i]);
    } else if (ss->rc.async) {
        /* async: the submitter of this version is gone and can never push it (its incarnation is dead):
         * the version becomes a no-op, so the shard's order never wedges */
        c->dropped[i] = 1;
        log_info("shard %d: submission %lld of %s:%lld dropped (no longer a member)", c->k, (long long)c->round,
                 c->ids[i], (long long)c->incs[i]);
    } else {
        char f[16], round[24];
        snprintf(f, sizeof f, "%d", ss->shards[c->k].frag);
        snprintf(round, sizeof round, "%lld", (long long)c->round);
        const char *args[3] = {f, round, c->ids[i]};
        if (store_fcall(ss, commit_on_drop, q, "dl_drop", 3, args) == 0) return; /* still outstanding */
        c->failed = 1;
        snprintf(c->errmsg, sizeof c->errmsg, "Redis is unavailable");
    }
    free(q);
    if (--c->outstanding == 0) commit_after_checks(c);
}

static void commit_check_deltas(ss_commit *c, ss_shard *s);

static void commit_on_barrier(redisReply *r, void *priv)
{
    ss_commit *c = priv;
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 3) {
        snprintf(c->errmsg, sizeof c->errmsg, "dl_barrier: %s",
                 r == NULL                      ? "connection lost"
                 : r->type == REDIS_REPLY_ERROR ? r->str
                                                : "bad reply");
        commit_finish(c, OUT_ERR);
        return;
    }
    const char *state = r->element[0]->str ? r->element[0]->str : "";
    if (strcmp(state, "open") == 0) {
        /* the gets wait parked for the close (subscribe.c hears it), unless it was heard while we asked */
        if (closes_heard_since(c->ss, s->frag, c->round, c->closes_seen)) {
            commit_finish(c, OUT_AGAIN);
        } else if (closes_parking(c->ss)) {
            closes_found_open(c->ss, s->frag, c->round);
            commit_finish(c, OUT_OPEN);
        } else {
            commit_finish(c, OUT_WAIT);
        }
        return;
    }
    if (strcmp(state, "closed") != 0) {
        if (strcmp(state, "expired") == 0)
            log_warn("shard %d: the barrier of round %lld has expired; cannot commit", c->k, (long long)c->round);
        commit_finish(c, OUT_WAIT);
        return;
    }
    closes_found_closed(c->ss, s->frag, c->round);
    const char *parts = r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "";
    const char *dropped = r->element[2]->type == REDIS_REPLY_STRING ? r->element[2]->str : "";
    if (commit_parse_participants(c, parts, dropped) != 0) {
        snprintf(c->errmsg, sizeof c->errmsg, "malformed participants '%s'", parts);
        commit_finish(c, OUT_ERR);
        return;
    }
    commit_check_deltas(c, s);
}

/* Every participant without a stored Δ: is it still a live member (then we need its Δ) or gone (then
 * it is dropped from this round)? */
static void commit_check_deltas(ss_commit *c, ss_shard *s)
{
    ss_ctx *ss = c->ss;
    c->outstanding = 1; /* guard while issuing */
    for (int i = 0; i < c->np; i++) {
        if (c->dropped[i] || delta_find(s, c->round, c->ids[i], c->incs[i]) != NULL) continue;
        member_q *q = malloc(sizeof *q);
        if (q == NULL) {
            c->failed = 1;
            break;
        }
        q->c = c;
        q->i = i;
        const char *args[1] = {c->ids[i]};
        c->outstanding++;
        if (store_fcall(ss, commit_on_member, q, "dl_member", 1, args) != 0) {
            c->outstanding--;
            free(q);
            c->failed = 1;
            snprintf(c->errmsg, sizeof c->errmsg, "Redis is unavailable");
            break;
        }
    }
    if (--c->outstanding == 0) commit_after_checks(c);
}

int commit_init(ss_ctx *ss)
{
    ss->cq_ev = evtimer_new(ss->base, cq_on_turn, ss);
    ss->lq_ev = evtimer_new(ss->base, lq_on_timer, ss);
    return ss->cq_ev != NULL && ss->lq_ev != NULL ? 0 : -1;
}

static void free_queue(ss_commit **head, ss_commit **tail)
{
    while (*head != NULL) {
        ss_commit *c = *head;
        *head = c->qnext;
        commit_free(c);
    }
    *tail = NULL;
}

void commit_free_all(ss_ctx *ss)
{
    free_queue(&ss->cq_head, &ss->cq_tail);
    free_queue(&ss->lq_head, &ss->lq_tail);
    if (ss->cq_ev != NULL) event_free(ss->cq_ev);
    if (ss->lq_ev != NULL) event_free(ss->lq_ev);
    ss->cq_ev = ss->lq_ev = NULL;
}

/* Async: the submission that turns version round into round+1, as dl_submit recorded it. */
static void commit_on_submission(redisReply *r, void *priv)
{
    ss_commit *c = priv;
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        snprintf(c->errmsg, sizeof c->errmsg, "reading submission %lld: %s", (long long)c->round,
                 r ? r->str : "connection lost");
        commit_finish(c, OUT_ERR);
        return;
    }
    if (r->type != REDIS_REPLY_STRING) { /* nobody has been given this place in the order yet */
        commit_finish(c, OUT_WAIT);
        return;
    }
    char rec[256];
    snprintf(rec, sizeof rec, "%s", r->str);
    char *base = strrchr(rec, ':'), *end = NULL; /* "worker:inc:base" -> participant "worker:inc" */
    if (base != NULL) {
        *base = '\0';
        c->base = strtoll(base + 1, &end, 10); /* the staleness weight's round - base */
    }
    if (base == NULL || end == base + 1 || *end != '\0' || c->base < 0 || c->base > c->round ||
        commit_parse_participants(c, rec, "") != 0 || c->np != 1) {
        snprintf(c->errmsg, sizeof c->errmsg, "malformed submission record '%s'", r->str);
        commit_finish(c, OUT_ERR);
        return;
    }
    commit_check_deltas(c, s);
}

/* What follows a round's commit's compute, log entry and end (commit.h). */
static const commit_steps round_steps = {
    .computed = commit_log_write,
    .logged = commit_on_log_written,
    .ended = ahead_consider,
};

void commit_start(ss_ctx *ss, ss_shard *s)
{
    if (s->committing || s->state != SH_READY) return;
    ss_commit *c = commit_new(ss, s, &round_steps);
    if (c == NULL) return;
    s->committing = 1;
    char f[16], round[24];
    snprintf(f, sizeof f, "%d", s->frag);
    snprintf(round, sizeof round, "%lld", (long long)c->round);
    if (ss->rc.async) {
        char key[KEY_MAX], name[32];
        snprintf(name, sizeof name, "subs:%d", s->k);
        key_run(key, sizeof key, ss->rc.run, name);
        const char *argv[3] = {"HGET", key, round};
        if (rlink_cmds(&ss->ctl, commit_on_submission, c, 3, argv) != 0) {
            snprintf(c->errmsg, sizeof c->errmsg, "Redis is unavailable");
            commit_finish(c, OUT_ERR);
        }
        return;
    }
    const char *args[2] = {f, round};
    c->closes_seen = ss->m.closes_heard; /* a close heard after this read makes its `open` out of date */
    if (store_fcall(ss, commit_on_barrier, c, "dl_barrier", 2, args) != 0) {
        snprintf(c->errmsg, sizeof c->errmsg, "Redis is unavailable");
        commit_finish(c, OUT_ERR);
    }
}
