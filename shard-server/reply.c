/*
 * reply.c: the answers a get receives, in one place: the parameters (the cache's or a running commit's
 * tentative ones), the parameters with the momentum, the update of a version, or `need` (a Δ the commit
 * lacks). Called by the dispatcher (ops.c), by a commit serving its tentative version (commit_log.c) or
 * answering its parked gets (commit_obj.c), and by fault.c; calls the transport only.
 *
 * --download update (docs/compression.md):
 * A commit of a run with --download update quantizes the round's averaged pseudo-gradient with the
 * run's codec, steps with exactly the decoded values and logs the encoded bytes (commit_compute.c,
 * commit_log.c). Those bytes are the update of the version: a get from a worker that holds the
 * version before (flag BLOB_GET_UPDATE_OK) is answered with them and the step's settings, and the
 * worker applies the same outer step to its own parameters and momentum. Any other get of such a run
 * asks for the momentum with the parameters (BLOB_GET_MOMENTUM), which is how a worker falls back.
 */
#include "ss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

void reply_params(ss_ctx *ss, ss_shard *s, ss_req *req, float *theta, int64_t version, uint64_t xxh, int tentative)
{
    blob_header h;
    ss_blob_header(s, "params", version, BLOB_F32, s->n, &h);
    h.flags = tentative ? BLOB_PARAMS_TENTATIVE : 0;
    h.xxh = xxh;
    ss->m.gets++;
    ss->m.tentative_gets += tentative != 0;
    req_reply_buf(req, &h, theta, s->n * sizeof(float));
}

void reply_update_clear(ss_update *u)
{
    server_buf_release(u->buf); /* replies may still be sending it */
    memset(u, 0, sizeof *u);
}

int reply_wants_update(const ss_ctx *ss, const ss_req *req, const ss_update *u)
{
    return ss->rc.download_update && (req->h.flags & BLOB_GET_UPDATE_OK) && u->buf != NULL &&
           u->version == req->h.version && strcmp(req->h.op, "get") == 0;
}

void reply_update(ss_ctx *ss, ss_shard *s, ss_req *req, const ss_update *u, int tentative)
{
    blob_header h;
    ss_blob_header(s, "update", u->version, ss->rc.compress, ss->rc.compress == BLOB_TOPK ? u->len : s->n, &h);
    h.lr = (double)u->lr;
    h.mu = (double)u->mu;
    h.flags = u->flags | (tentative ? BLOB_UPDATE_TENTATIVE : 0);
    h.aux = u->aux;
    h.xxh = u->xxh;
    snprintf(h.text, sizeof h.text, "%s", u->digest);
    ss->m.gets++;
    ss->m.tentative_gets += tentative != 0;
    req_reply_buf(req, &h, u->buf, u->len);
}

/* The parameters with the momentum (θ then momentum; zeros before the first step), for a worker that
 * does not have the version before the one it wants (a joiner, a restart, a gap, a digest mismatch). */
void reply_params_momentum(ss_ctx *ss, ss_shard *s, ss_req *req)
{
    size_t n = s->n;
    float *both = malloc(2 * n * sizeof(float) + 1);
    if (both == NULL) {
        req_reply_err(req, DP_BUSY, "out of memory for the parameters and momentum of shard %d; retry", s->k);
        return;
    }
    memcpy(both, s->theta, n * sizeof(float));
    if (s->has_mom && s->mom != NULL)
        memcpy(both + n, s->mom, n * sizeof(float));
    else
        memset(both + n, 0, n * sizeof(float));
    blob_header h;
    ss_blob_header(s, "params", s->version, BLOB_F32, 2 * n, &h);
    h.flags = BLOB_PARAMS_MOMENTUM;
    snprintf(h.text, sizeof h.text, "%s", s->digest);
    ss->m.gets++;
    req_reply(req, &h, both, 2 * n * sizeof(float));
    free(both);
}

void reply_need(ss_req *req, int64_t round, const char *ids)
{
    blob_header h;
    blob_header_init(&h, "need");
    h.shard = req->h.shard;
    h.round = round;
    snprintf(h.text, sizeof h.text, "%s", ids);
    req_reply(req, &h, NULL, 0);
}
