/*
 * delta.c: the pseudo-gradients a shard holds for its open rounds (ss_shard.deltas), kept as received:
 * found by (round, worker, incarnation), stored from a push (the frame moves into the delta), freed by
 * round. Plain data: calls no other file of the shard-server.
 */
#include "ss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ss_delta *delta_find(ss_shard *s, int64_t round, const char *worker, int64_t inc)
{
    for (ss_delta *d = s->deltas; d != NULL; d = d->next)
        if (d->round == round && d->inc == inc && strcmp(d->worker, worker) == 0) return d;
    return NULL;
}

int delta_has_round(const ss_shard *s, int64_t round)
{
    for (const ss_delta *d = s->deltas; d != NULL; d = d->next)
        if (d->round == round) return 1;
    return 0;
}

/* Keep the request's payload (the frame moves into the delta); replaces an earlier push of the same key. */
void delta_store(ss_shard *s, ss_req *req)
{
    ss_delta *d = delta_find(s, req->h.round, req->h.worker, req->h.inc);
    if (d == NULL) {
        d = calloc(1, sizeof *d);
        if (d == NULL) return;
        snprintf(d->worker, sizeof d->worker, "%s", req->h.worker);
        d->round = req->h.round;
        d->inc = req->h.inc;
        d->next = s->deltas;
        s->deltas = d;
    } else {
        free(d->frame);
    }
    d->dtype = req->h.dtype;
    d->tokens = req->h.aux;
    d->frame = req->frame;
    d->payload = req->payload;
    req->frame = NULL;
    req->payload = NULL;
}

/* Free the deltas of rounds < below_round (or all of them). */
void delta_free(ss_shard *s, int64_t below_round, int all)
{
    ss_delta **pp = &s->deltas;
    while (*pp != NULL) {
        ss_delta *d = *pp;
        if (all || d->round < below_round) {
            *pp = d->next;
            free(d->frame);
            free(d);
        } else {
            pp = &d->next;
        }
    }
}
