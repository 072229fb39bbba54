/*
 * commit_obj.c: the commit object (ss_commit, commit.h): made, freed, still current or not, its
 * participants, and its end, whichever file ends it.
 *
 * Every file of the commit (commit.c, commit_ahead.c, commit_compute.c, commit_log.c) makes, checks and
 * ends its commits with these. Ending one means answering the gets parked on its round with the outcome
 * (done: judged again through ss->dispatch; wait, need, error: answered here), or, when the outcome of a
 * dl_commit is unknown, rebuilding the shard's cache through ss->reload. A compute ahead of the barrier
 * has nobody waiting on it: it is dropped instead. What follows a commit's end is the steps' (commit.h),
 * which its maker chose: this file calls no other file of the commit, it is the bottom of the commit's
 * layers (docs/architecture.md, "Layers").
 */
#include "commit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

ss_commit *commit_new(ss_ctx *ss, ss_shard *s, const commit_steps *steps)
{
    ss_commit *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->ss = ss;
    c->steps = steps;
    c->k = s->k;
    c->gen = s->gen;
    c->round = s->version;
    c->epoch = s->epoch;
    c->t0 = now_ms();
    return c;
}

void commit_free(ss_commit *c)
{
    ss_shard *s = &c->ss->shards[c->k];
    if (c->theta != NULL && s->tent_theta == c->theta) s->tent_theta = NULL;
    if (s->ahead == c) s->ahead = NULL;
    for (int i = 0; i < c->np; i++) free(c->ids[i]);
    if (c->xs != NULL) XXH3_freeState(c->xs);
    free(c->g);
    server_buf_release(c->gq);    /* update replies may still be sending it */
    server_buf_release(c->theta); /* tentative replies may still be sending it */
    free(c->mom);
    free(c->dnbuf);
    free(c);
}

/* Is this commit still the shard's current operation? */
ss_shard *commit_shard(ss_commit *c)
{
    ss_shard *s = &c->ss->shards[c->k];
    if (c->ahead) /* a compute ahead is current while it is the shard's and the version is unchanged */
        return s->ahead == c && s->gen == c->gen && s->state == SH_READY && s->version == c->round ? s : NULL;
    if (s->gen != c->gen || s->state != SH_READY || !s->committing) return NULL;
    return s;
}

int commit_parse_participants(ss_commit *c, const char *parts, const char *dropped)
{
    char *copy = strdup(parts);
    if (copy == NULL) return -1;
    int rc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        if (colon == NULL || c->np >= MAX_PARTICIPANTS) {
            rc = -1;
            break;
        }
        *colon = '\0';
        c->ids[c->np] = strdup(tok);
        c->incs[c->np] = strtoll(colon + 1, NULL, 10);
        c->dropped[c->np] = 0;
        size_t idlen = strlen(tok);
        for (const char *p = dropped; p != NULL && *p;) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            if (len == idlen && strncmp(p, tok, len) == 0) c->dropped[c->np] = 1;
            p = end ? end + 1 : p + len;
        }
        c->np++;
    }
    free(copy);
    return rc;
}

/* A compute ahead (not in the queue) failed or lost a Δ: nobody waits on it; it is dropped and its commit
 * computes as usual. */
static void abandon_ahead(ss_commit *c, const char *why)
{
    ss_shard *s = &c->ss->shards[c->k];
    if (s->ahead == c) {
        c->ss->m.ahead_discarded++;
        log_debug("shard %d round %lld: compute ahead of the barrier dropped: %s", c->k, (long long)c->round, why);
    }
    commit_free(c);
}

/* Answer the gets waiting for this round with the outcome; everything else is judged again. */
void commit_finish(ss_commit *c, int outcome)
{
    ss_ctx *ss = c->ss;
    if (c->ahead) {
        abandon_ahead(c, c->errmsg);
        return;
    }
    ss_shard *s = commit_shard(c);
    if (s == NULL) {
        commit_free(c);
        return;
    }
    s->committing = 0;
    ss_req *list = park_take(s);
    const commit_steps *steps = c->steps;
    int64_t round = c->round;
    char need[512], errmsg[256];
    snprintf(need, sizeof need, "%s", c->need);
    snprintf(errmsg, sizeof errmsg, "%s", c->errmsg);
    commit_free(c);
    while (list != NULL) {
        ss_req *req = list;
        list = req->next;
        req->next = NULL;
        /* async: a get for a later version waits on this one too (re-dispatching it would spin) */
        int waiting_for_it = strcmp(req->h.op, "get") == 0 &&
                             (req->h.version == round + 1 || (ss->rc.async && req->h.version > round + 1));
        if (outcome == OUT_DONE || outcome == OUT_AGAIN || !waiting_for_it || s->state != SH_READY ||
            s->version != round) {
            ss->dispatch(ss, req);
        } else if (outcome == OUT_OPEN) {
            req->waits_close = 1; /* until the close is heard, or the barrier is read again (subscribe.c) */
            park_add(ss, s, req);
        } else if (outcome == OUT_WAIT)
            req_reply_simple(req, "wait",
                             ss->rc.async ? "an earlier submission has not arrived yet"
                                          : "the round's barrier is not closed yet");
        else if (outcome == OUT_NEED)
            reply_need(req, round, need);
        else
            req_reply_err(req, DP_REDIS, "commit of shard %d round %lld failed: %s; retry", s->k, (long long)round,
                          errmsg);
    }
    if (steps->ended != NULL) /* the Δ of the next round (or of this one, after a wait) may all be here */
        steps->ended(ss, s);
    snapshot_idle_work(ss);
}

void commit_fail(ss_commit *c, const char *why, int reload)
{
    ss_ctx *ss = c->ss;
    if (c->ahead) {
        abandon_ahead(c, why);
        return;
    }
    ss_shard *s = commit_shard(c);
    log_warn("shard %d: commit of round %lld failed: %s", c->k, (long long)c->round, why);
    snprintf(c->errmsg, sizeof c->errmsg, "%s", why);
    if (s != NULL && reload) {
        commit_free(c);
        ss->reload(ss, s, why); /* shard.c, above: parked gets wait for the reload, then are judged again */
        return;
    }
    commit_finish(c, OUT_ERR);
}
