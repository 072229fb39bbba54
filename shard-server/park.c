/*
 * park.c: requests that wait on a shard (loading, committing, a round not open yet), in arrival order,
 * judged again through ss->dispatch when the shard's state changes, and answered when they have waited
 * too long (`wait` for a get, NOTREADY for a push). Calls the transport only (server.c).
 */
#include "ss.h"

#include <string.h>

#include "base/util.h"

/* A parked push holds its Δ (a frame the size of the shard), so how many may wait is bounded by the rounds
 * a server holds at once. A parked get holds only its header, and every worker's early get waits here for
 * the close of its round (one per worker and shard): bounded far higher, so that a run of many workers
 * keeps the early get. */
#define MAX_PARKED_PUSHES_PER_ROUND 64
#define MAX_PARKED_GETS 16384

static int is_get(const ss_req *req)
{
    return strcmp(req->h.op, "get") == 0;
}

void park_add(ss_ctx *ss, ss_shard *s, ss_req *req)
{
    int get = is_get(req);
    int push_cap = MAX_PARKED_PUSHES_PER_ROUND * (ss->opts.max_pending_rounds > 0 ? ss->opts.max_pending_rounds : 1);
    if (get ? s->nparked_gets >= MAX_PARKED_GETS : s->nparked - s->nparked_gets >= push_cap) {
        req_reply_err(req, DP_BUSY, "shard %d has %d %s waiting; retry", s->k,
                      get ? s->nparked_gets : s->nparked - s->nparked_gets, get ? "gets" : "requests with a payload");
        return;
    }
    if (req->parked_ms == 0) req->parked_ms = now_ms();
    req->next = NULL;
    if (s->parked_tail != NULL)
        s->parked_tail->next = req;
    else
        s->parked = req;
    s->parked_tail = req;
    s->nparked++;
    s->nparked_gets += get;
}

ss_req *park_take(ss_shard *s)
{
    ss_req *list = s->parked;
    s->parked = s->parked_tail = NULL;
    s->nparked = s->nparked_gets = 0;
    return list;
}

/* Re-dispatch every parked request (each is judged again against the shard's new state). */
void park_redispatch(ss_ctx *ss, ss_shard *s)
{
    ss_req *list = park_take(s);
    while (list != NULL) {
        ss_req *req = list;
        list = req->next;
        req->next = NULL;
        ss->dispatch(ss, req);
    }
}

/* Answer requests that waited longer than max_age_ms: the worker will retry. */
void park_expire(ss_ctx *ss, uint64_t max_age_ms)
{
    uint64_t now = now_ms();
    for (int k = 0; k < ss->nshards; k++) {
        ss_shard *s = &ss->shards[k];
        ss_req **pp = &s->parked;
        ss_req *prev = NULL;
        while (*pp != NULL) {
            ss_req *req = *pp;
            if (now - req->parked_ms < max_age_ms) {
                prev = req;
                pp = &req->next;
                continue;
            }
            *pp = req->next;
            if (s->parked_tail == req) s->parked_tail = prev;
            s->nparked--;
            if (is_get(req)) {
                s->nparked_gets--;
                req_reply_simple(req, "wait", "the shard is still loading or committing");
            } else {
                req_reply_err(req, DP_NOTREADY, "shard %d is not loaded yet; retry", k);
            }
        }
    }
}
