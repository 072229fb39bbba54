/* replay.c: snapshot + log replay of a shard (see replay.h): the one implementation, used by the
 * shard-server when it loads a shard and by the checkpoint export. */
#include "format/replay.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "math/codec.h"
#include "math/codec_sparse.h"
#include "math/outer.h"
#include "math/outer_dn.h"

int replay_recorded_digest(const char *digests, int64_t version, char *out)
{
    for (const char *p = digests; p && *p;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - end) : strlen(end);
        if (end != p && *end == ':' && v == version && len == 17) {
            memcpy(out, end + 1, 16);
            out[16] = '\0';
            return 1;
        }
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* After a step: θ against the digest recorded for st->version, if any. */
static int check_recorded(replay_state *st, size_t n, char *err, size_t errlen)
{
    char want[17], got[17];
    if (!st->digests || !replay_recorded_digest(st->digests, st->version, want)) return 0;
    snprintf(got, sizeof got, "%016" PRIx64, digest_f32(st->theta, n));
    if (strcmp(got, want) != 0) {
        err_set(err, errlen, "version %" PRId64 " replays to digest %s, but its commit recorded %s", st->version, got,
                want);
        return -1;
    }
    st->verified = st->version;
    return 0;
}

int replay_state_snapshot(replay_state *st, const blob_header *h, const uint8_t *payload, size_t len, size_t n,
                          char *err, size_t errlen)
{
    int with_mom = (h->flags & 1) != 0, with_buf = (h->flags & 2) != 0;
    uint64_t want = (uint64_t)(1 + with_mom + with_buf) * n;
    if (strcmp(h->op, "snap") != 0 || h->dtype != BLOB_F32 || h->count != want || len != h->count * sizeof(float)) {
        err_set(err, errlen,
                "snapshot blob has the wrong op, dtype or count (op '%s', dtype %d, count %" PRIu64 ", want %" PRIu64
                " fp32)",
                h->op, h->dtype, h->count, want);
        return -1;
    }
    if (with_buf && st->dnbuf == NULL) {
        err_set(err, errlen,
                "snapshot of version %" PRId64 " holds a Delayed Nesterov buffer but this reader has "
                "none (the run was made with --dn-buffer-size)",
                h->version);
        return -1;
    }
    memcpy(st->theta, payload, n * sizeof(float));
    if (with_mom)
        memcpy(st->mom, payload + n * sizeof(float), n * sizeof(float));
    else
        memset(st->mom, 0, n * sizeof(float));
    /* the buffer follows θ and, when present, the momentum */
    if (st->dnbuf && with_buf)
        memcpy(st->dnbuf, payload + (size_t)(1 + with_mom) * n * sizeof(float), n * sizeof(float));
    else if (st->dnbuf)
        memset(st->dnbuf, 0, n * sizeof(float));
    st->has_mom = with_mom;
    st->version = h->version;
    st->verified = -1;
    return check_recorded(st, n, err, errlen);
}

int replay_state_log(replay_state *st, const blob_header *h, const uint8_t *payload, size_t len, size_t n, char *err,
                     size_t errlen)
{
    size_t want = codec_bytes(h->dtype, n); /* fp32, or the run's codec with --download update */
    uint32_t w;
    int sparse = h->dtype == BLOB_TOPK; /* the round's sparse update, counted in bytes (codec_sparse.h) */
    if (sparse ? strcmp(h->op, "log") != 0 || h->count != (uint64_t)len || sparse_update_check(payload, len, n, &w) != 0
               : strcmp(h->op, "log") != 0 || want == 0 || h->count != (uint64_t)n || len != want) {
        err_set(err, errlen,
                "log blob has the wrong op, dtype or count (op '%s', dtype %d, count %" PRIu64 ", want %zu elements)",
                h->op, h->dtype, h->count, n);
        return -1;
    }
    if ((h->flags & 4) && (st->dnbuf == NULL || st->dn_buffer == 0)) {
        err_set(err, errlen,
                "version %" PRId64 " is an async Delayed Nesterov step, but this reader has no DN "
                "buffer (the run's config has no dn_buffer?)",
                h->version);
        return -1;
    }
    if (st->version == INT64_MAX) {
        err_set(err, errlen, "log entry after version %" PRId64 ": the version would overflow", st->version);
        return -1;
    }
    if (h->aux != 0) {                            /* aux 0: a no-op round (every participant dropped) */
        float *g = malloc(n * sizeof(float) + 1); /* the payload may be unaligned */
        if (!g) {
            err_set(err, errlen, "out of memory replaying %zu parameters", n);
            return -1;
        }
        if (sparse)
            sparse_update_mean(payload, n, 0, n, g);
        else
            codec_decode(h->dtype, payload, n, g);
        float mu = (float)h->mu;
        if (h->flags & 4) {
            outer_dn_step(st->dn_variant, st->theta, st->mom, st->dnbuf, g, n, st->dn_t0 + (uint64_t)h->version,
                          st->dn_buffer, (float)h->lr, mu, (h->flags & 1) != 0);
            st->has_mom = 1;
        } else {
            outer_sgd_step(st->theta, st->mom, (h->flags & 2) != 0, g, n, (float)h->lr, mu, (h->flags & 1) != 0);
            if (mu != 0.0f) st->has_mom = 1;
        }
        free(g);
    }
    st->version++;
    return check_recorded(st, n, err, errlen);
}

int replay_snapshot(const blob_header *h, const uint8_t *payload, size_t len, size_t n, float *theta, float *mom,
                    int *has_mom, int64_t *version, char *err, size_t errlen)
{
    replay_state st = {.theta = theta, .mom = mom};
    if (replay_state_snapshot(&st, h, payload, len, n, err, errlen) < 0) return -1;
    *has_mom = st.has_mom;
    *version = st.version;
    return 0;
}

int replay_log(const blob_header *h, const uint8_t *payload, size_t len, size_t n, float *theta, float *mom,
               int *has_mom, int64_t *version, char *err, size_t errlen)
{
    replay_state st = {.theta = theta, .mom = mom, .has_mom = *has_mom, .version = *version};
    if (replay_state_log(&st, h, payload, len, n, err, errlen) < 0) return -1;
    *has_mom = st.has_mom;
    *version = st.version;
    return 0;
}

int replay_shard(const replay_blob *snap, const replay_blob *logs, int nlogs, size_t n, float *theta, float *mom,
                 int *has_mom, int64_t *version, char *err, size_t errlen)
{
    if (replay_snapshot(&snap->h, snap->payload, snap->len, n, theta, mom, has_mom, version, err, errlen) < 0)
        return -1;
    for (int i = 0; i < nlogs; i++)
        if (replay_log(&logs[i].h, logs[i].payload, logs[i].len, n, theta, mom, has_mom, version, err, errlen) < 0)
            return -1;
    return 0;
}
