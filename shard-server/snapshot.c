/*
 * snapshot.c: snapshots of a shard (docs/PROTOCOL.md, "Snapshots").
 *
 * Every snapshot_every versions a snapshot blob (θ then momentum, then the Delayed Nesterov buffer when
 * there is one) is written from a copy, once this server has no commit running, recorded with
 * dl_snapshot, and the blobs it makes obsolete are deleted (with those of the snapshot before, which stay
 * when a dl_snapshot ran but its reply was lost). A snapshot written whose dl_snapshot got no answer at
 * all (the connection broke before or after it ran, or it was refused) is remembered and deleted once a
 * later snapshot of the shard is recorded: whether it was recorded or not, it is obsolete then.
 * A run with --async-rule rebase prepares the snapshot when its version is committed and writes it once
 * the shard is rebase_window versions past it, so the durable state can rebuild every version a pending
 * submission may be based on (past.c).
 */
#include "ss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "format/keys.h"

typedef struct ss_snap {
    ss_ctx *ss;
    int k;
    int64_t version;
    int64_t epoch;
    char ref[48]; /* "version.epoch": the blob's reference in dl_snapshot and in snap_unsure */
    float *both;  /* θ, momentum, then the DN buffer when there is one: the payload, sent from here */
    uint8_t head[BLOB_HEADER_MAX];
    size_t hlen, plen;
} ss_snap;

/* DEL the blobs of refs {snapshot ref, log refs...} (dl_snapshot's reply). */
static void del_obsolete(ss_ctx *ss, int k, redisReply **refs, size_t n)
{
    if (n == 0) return;
    store_del_refs(ss, k, "snap", refs, 1);
    store_del_refs(ss, k, "log", refs + 1, n - 1);
}

/* Remember the ref of a written snapshot whose dl_snapshot has no answer (the oldest is dropped, and
 * then stays in Redis, after SNAP_UNSURE_MAX failures in a row). */
static void unsure_add(ss_shard *s, const char *ref)
{
    memmove(s->snap_unsure[0], s->snap_unsure[1], (SNAP_UNSURE_MAX - 1) * sizeof s->snap_unsure[0]);
    snprintf(s->snap_unsure[SNAP_UNSURE_MAX - 1], sizeof s->snap_unsure[0], "%s", ref);
}

/* DEL the unsure snapshots other than `ref` (the one just recorded). */
static void unsure_del(ss_ctx *ss, ss_shard *s, const char *ref)
{
    for (int i = 0; i < SNAP_UNSURE_MAX; i++) {
        char *u = s->snap_unsure[i];
        if (u[0] == '\0' || strcmp(u, ref) == 0) continue;
        log_info("shard %d: deleting snapshot %s, written before a dl_snapshot that had no answer", s->k, u);
        store_del_ref(ss, s->k, "snap", u);
        u[0] = '\0';
    }
}

static void snap_on_recorded(redisReply *r, void *priv)
{
    ss_snap *sn = priv;
    ss_ctx *ss = sn->ss;
    ss->shards[sn->k].snapshotting = 0;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        log_warn("shard %d: dl_snapshot of version %lld failed: %s", sn->k, (long long)sn->version,
                 r == NULL                      ? "connection lost"
                 : r->type == REDIS_REPLY_ERROR ? r->str
                                                : "bad reply");
        if (r != NULL && r->type == REDIS_REPLY_ERROR) ss->m.conflicts++;
        unsure_add(&ss->shards[sn->k], sn->ref);
        free(sn);
        return;
    }
    ss->m.snapshots++;
    size_t n = r->elements;
    redisReply *again = n > 0 && r->element[n - 1]->type == REDIS_REPLY_ARRAY ? r->element[--n] : NULL;
    log_info("shard %d: snapshot of version %lld recorded; deleting %zu obsolete blobs", sn->k, (long long)sn->version,
             n);
    del_obsolete(ss, sn->k, r->element, n);
    if (again) del_obsolete(ss, sn->k, again->element, again->elements); /* the previous snapshot's, again */
    unsure_del(ss, &ss->shards[sn->k], sn->ref);
    free(sn);
}

/* The snapshot's blob was not written (r NULL: the link closed; or Redis's error): the shard goes on without it
 * (the log entries since the last snapshot still make its version) and snapshots again later. */
static void snap_write_failed(ss_ctx *ss, ss_snap *sn, redisReply *r)
{
    if (r == NULL && ss->stopping) /* (a stop closes the links under a write: nothing failed) */
        log_info("shard %d: the snapshot of version %lld was left unwritten: this server is stopping", sn->k,
                 (long long)sn->version);
    else
        log_warn("shard %d: writing the snapshot of version %lld failed: %s", sn->k, (long long)sn->version,
                 r ? r->str : "connection lost");
    ss->shards[sn->k].snapshotting = 0;
    free(sn);
}

static void snap_on_written(redisReply *r, void *priv)
{
    ss_snap *sn = priv;
    ss_ctx *ss = sn->ss;
    free(sn->both);
    sn->both = NULL;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        snap_write_failed(ss, sn, r);
        return;
    }
    char ver[24], ep[24], shard[16];
    snprintf(ver, sizeof ver, "%lld", (long long)sn->version);
    snprintf(ep, sizeof ep, "%lld", (long long)sn->epoch);
    snprintf(shard, sizeof shard, "%d", sn->k);
    const char *args[5] = {ss->id, ep, shard, ver, sn->ref};
    if (store_fcall(ss, snap_on_recorded, sn, "dl_snapshot", 5, args) != 0) {
        ss->shards[sn->k].snapshotting = 0;
        unsure_add(&ss->shards[sn->k], sn->ref);
        free(sn);
    }
}

/* The snapshot of the shard's current version, from a copy (the blob buffer, header encoded); NULL when
 * out of memory. */
static ss_snap *snapshot_prepare(ss_ctx *ss, ss_shard *s)
{
    size_t n = s->n;
    int with_buf = s->dnbuf != NULL, with_mom = s->has_mom || with_buf;
    float *both = malloc((size_t)(1 + with_mom + with_buf) * n * sizeof(float));
    ss_snap *sn = malloc(sizeof *sn);
    if (both == NULL || sn == NULL) {
        free(both);
        free(sn);
        return NULL;
    }
    memcpy(both, s->theta, n * sizeof(float));
    if (with_mom) memcpy(both + n, s->mom, n * sizeof(float));
    if (with_buf) memcpy(both + 2 * n, s->dnbuf, n * sizeof(float));
    sn->both = both;
    blob_header h;
    ss_blob_header(s, "snap", s->version, BLOB_F32, (size_t)(1 + with_mom + with_buf) * n, &h);
    h.flags = (with_mom ? 1 : 0) | (with_buf ? 2 : 0);
    snprintf(h.run, sizeof h.run, "%s", ss->opts.run);
    char err[256];
    int hl = blob_encode_header(&h, both, h.count * sizeof(float), sn->head, sizeof sn->head, err, sizeof err);
    if (hl < 0) {
        log_error("shard %d: cannot encode a snapshot: %s", s->k, err);
        free(both);
        free(sn);
        return NULL;
    }
    sn->ss = ss;
    sn->k = s->k;
    sn->version = s->version;
    sn->epoch = s->epoch;
    sn->hlen = (size_t)hl;
    sn->plen = h.count * sizeof(float);
    snprintf(sn->ref, sizeof sn->ref, "%lld.%lld", (long long)s->version, (long long)s->epoch);
    return sn;
}

/* Write a prepared snapshot (the callbacks own sn then). */
static void snapshot_write(ss_ctx *ss, ss_shard *s, ss_snap *sn)
{
    char key[KEY_MAX];
    store_blob_key(ss, key, sizeof key, s->k, "snap", sn->version, sn->epoch);
    if (store_set(ss, key, sn->head, sn->hlen, sn->both, sn->plen, snap_on_written, sn) != 0) {
        free(sn->both);
        free(sn);
    } else {
        s->snapshotting = 1;
    }
}

/* Write a snapshot of the shard's current version from a copy (the blob buffer). */
static void snapshot_start(ss_ctx *ss, ss_shard *s)
{
    if (s->snapshotting) return;
    ss_snap *sn = snapshot_prepare(ss, s);
    if (sn != NULL) snapshot_write(ss, s, sn);
}

void snapshot_prepare_lagged(ss_ctx *ss, ss_shard *s)
{
    if (s->snap_pend == NULL) s->snap_pend = snapshot_prepare(ss, s); /* one at a time: a later one waits */
}

void snapshot_drop_pending(ss_shard *s)
{
    if (s->snap_pend == NULL) return;
    free(s->snap_pend->both);
    free(s->snap_pend);
    s->snap_pend = NULL;
}

/* A rebase run's prepared snapshot, once the shard is rebase_window versions past it: every version a
 * submission may still be based on is then after it, so a load from it rebuilds them all (past.c). */
static void snapshot_lagged_due(ss_ctx *ss, ss_shard *s)
{
    ss_snap *sn = s->snap_pend;
    if (sn == NULL || s->snapshotting || s->state != SH_READY) return;
    if (sn->epoch != s->epoch) {
        snapshot_drop_pending(s);
        return;
    }
    if (s->version - sn->version < ss->rc.rebase_window) return;
    s->snap_pend = NULL;
    snapshot_write(ss, s, sn);
}

/* Start the snapshots commits asked for, once this server has no commit running (a snapshot is up to 12
 * bytes per parameter, θ, momentum and a Delayed Nesterov buffer, on the bulk connection: it must not
 * delay the log entries of a round). */
void snapshot_idle_work(ss_ctx *ss)
{
    if (ss->cq_head != NULL) return;
    for (int k = 0; k < ss->nshards; k++)
        if (ss->shards[k].committing) return;
    for (int k = 0; k < ss->nshards; k++) {
        ss_shard *s = &ss->shards[k];
        snapshot_lagged_due(ss, s);
        if (s->snap_wanted == 0) continue;
        if (s->state == SH_READY && s->version == s->snap_wanted) snapshot_start(ss, s);
        s->snap_wanted = 0;
    }
}
