/*
 * commit_ahead.c: a sync round's compute, started before its barrier closes.
 *
 * A sync commit (commit.c) starts when a get finds the round's barrier closed: the barrier names the
 * participants, and only then are the mean and the outer step computed (commit_compute.c). The barrier
 * closes when the last worker has pushed every shard, so the servers' compute would follow the whole
 * push instead of overlapping it; on a fast link the round would be the push, then the compute, then
 * the download. But a shard's Δ arrive during the push, and in a steady run a round's participants are
 * the last round's. So when every Δ of the last commit's participants (and no other) is here, the
 * commit is computed at once, from the same queue with the same kernels, on copies: a compute ahead.
 * It is never served, logged or committed by itself. When the real commit knows its participants
 * (barrier, drops and membership checks done), it takes the compute over if it was made from the same
 * Δ in the same order, at the same version, cache generation and tunables, so the bits are the ones it
 * would compute itself; otherwise the compute ahead is dropped and the commit computes as before. A Δ
 * stored meanwhile (a resend, a worker outside the guess), a reload or a lost lease drops it too.
 *
 * This file sits above the compute (it queues computes, and hands one's place in the queue to the
 * commit that takes it over) and below commit.c, which asks it (ahead_take) before computing; a compute
 * ahead that finishes comes back through its steps (ahead_steps), not a call.
 *
 * Costs: one commit's copies (θ', momentum', the encoded mean) per shard while they wait for the
 * barrier, and the CPU of a wrong guess (a worker joined, left or restarted: one round each).
 * `shard-server --compute-ahead off` turns it off.
 */
#include "commit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

static int count_parts(const char *parts)
{
    int n = 1;
    for (const char *p = parts; *p != '\0'; p++) n += *p == ',';
    return n;
}

/* Every participant of c has its Δ of round c->round here. */
static int all_deltas_here(ss_shard *s, const ss_commit *c)
{
    for (int i = 0; i < c->np; i++)
        if (delta_find(s, c->round, c->ids[i], c->incs[i]) == NULL) return 0;
    return 1;
}

/* A compute ahead finished its last slice: it waits for its commit. */
static void ahead_computed(ss_commit *c, ss_shard *s)
{
    c->ahead_done = 1;
    log_debug("shard %d round %lld: step computed ahead of the barrier in %llu ms", s->k, (long long)c->round,
              (unsigned long long)(now_ms() - c->t0));
}

/* What follows a compute ahead's compute (commit.h): nothing else, it is never logged and nobody
 * waits on its end. */
static const commit_steps ahead_steps = {.computed = ahead_computed};

void ahead_consider(ss_ctx *ss, ss_shard *s)
{
    if (s->ahead != NULL && commit_shard(s->ahead) == NULL) ahead_discard(s, "the shard changed under it");
    if (ss->opts.compute_ahead_off || ss->rc.async || s->state != SH_READY || s->committing || s->ahead != NULL ||
        s->last_parts == NULL)
        return;
    int stored = 0;
    for (ss_delta *d = s->deltas; d != NULL; d = d->next) stored += d->round == s->version;
    if (stored != count_parts(s->last_parts)) return; /* cheap test first: a commit is a big struct */
    ss_commit *c = commit_new(ss, s, &ahead_steps);
    if (c == NULL) return; /* the commit computes at its barrier */
    c->ahead = 1;
    if (commit_parse_participants(c, s->last_parts, "") != 0 || !all_deltas_here(s, c)) {
        commit_free(c);
        return;
    }
    s->ahead = c;
    commit_compute(c, s); /* queued (or abandoned: out of memory) */
}

/* Was a made for what commit c would compute? */
static int ahead_fits(const ss_commit *a, const ss_commit *c, const ss_shard *s)
{
    const ss_tunables *t = &c->ss->tun;
    if (a->gen != s->gen || c->gen != s->gen || a->round != c->round || s->version != c->round) return 0;
    if (a->t.lr != t->lr || a->t.mu != t->mu || a->t.nesterov != t->nesterov) return 0;
    int j = 0;
    for (int i = 0; i < c->np; i++) {
        if (c->dropped[i]) continue;
        if (j >= a->np || strcmp(c->ids[i], a->ids[j]) != 0 || c->incs[i] != a->incs[j]) return 0;
        j++;
    }
    return j == a->np;
}

/* The compute's state (buffers, position, digest state) moves from a to c. */
static void ahead_move(ss_commit *c, ss_commit *a)
{
    c->pos = a->pos;
    c->first = a->first;
    c->t = a->t;
    c->xs = a->xs;
    c->g = a->g;
    c->gq = a->gq;
    c->gq_len = a->gq_len;
    c->g_bad = a->g_bad;
    c->theta = a->theta;
    c->mom = a->mom;
    c->has_mom = a->has_mom;
    c->dnbuf = a->dnbuf;
    c->used = a->used;
    c->g_deferred = a->g_deferred;
    a->xs = NULL;
    a->g = a->theta = a->mom = a->dnbuf = NULL;
    a->gq = NULL;
}

int ahead_take(ss_commit *c, ss_shard *s)
{
    ss_commit *a = s->ahead;
    if (c->ahead || a == NULL) return AHEAD_NONE;
    if (!ahead_fits(a, c, s)) {
        ahead_discard(s, "the round's participants or tunables are not the ones guessed");
        return AHEAD_NONE;
    }
    s->ahead = NULL;
    ahead_move(c, a);
    commit_compute_weights(c, s); /* c's own, in its order of participants (a's had no dropped ones) */
    c->ss->m.ahead_used++;
    int done = a->ahead_done;
    log_debug("shard %d round %lld: barrier closed at +%llu ms; the compute ahead of it is %s", s->k,
              (long long)c->round, (unsigned long long)(now_ms() - c->t0), done ? "done" : "running");
    if (!done) cq_replace(c->ss, a, c); /* c computes the rest, from where a is */
    commit_free(a);
    return done ? AHEAD_COMPUTED : AHEAD_QUEUED;
}

void ahead_discard(ss_shard *s, const char *why)
{
    ss_commit *a = s->ahead;
    if (a == NULL) return;
    s->ahead = NULL;
    a->ss->m.ahead_discarded++;
    log_debug("shard %d round %lld: compute ahead of the barrier dropped: %s", s->k, (long long)a->round, why);
    if (a->ahead_done) commit_free(a); /* a queued one is freed on its turn: commit_shard no longer has it */
}

void ahead_note_participants(const ss_commit *c, ss_shard *s)
{
    free(s->last_parts);
    s->last_parts = NULL;
    if (c->ss->rc.async || c->used == 0) return;
    size_t cap = 1, len = 0;
    for (int i = 0; i < c->np; i++) cap += c->dropped[i] ? 0 : strlen(c->ids[i]) + 24;
    char *parts = malloc(cap);
    if (parts == NULL) return; /* no compute ahead next round */
    for (int i = 0; i < c->np; i++)
        if (!c->dropped[i])
            len += (size_t)snprintf(parts + len, cap - len, "%s%s:%lld", len ? "," : "", c->ids[i],
                                    (long long)c->incs[i]);
    s->last_parts = parts;
}
