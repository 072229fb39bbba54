/* update.c: --download update on the worker (docs/compression.md).
 *
 * In a run with --download update a shard-server answers the get of version v from a worker that holds
 * version v-1 with the update of v: the round's averaged pseudo-gradient in the run's codec and the
 * outer step's settings. We keep our own copy of the outer momentum, apply the same step
 * (outer_sgd_step, as the server and the replay of its log do) to base and momentum, and check the
 * digest of the result against the committed one. Whenever we do not hold v-1 with its momentum (we
 * joined, restarted, missed a round, or a digest differed), the get asks for the parameters with the
 * momentum instead (BLOB_GET_MOMENTUM), which puts us back in step. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "internal.h"
#include "math/codec.h"
#include "math/codec_sparse.h"
#include "math/hash.h"
#include "math/outer.h"

/* An update is applied in chunks of this many elements (whole codec blocks), each decoded (on the stack:
 * the shards of different servers are applied in parallel threads), stepped and hashed while it is in
 * the cache. */
#define UPDATE_CHUNK 4096
_Static_assert(UPDATE_CHUNK % CODEC_BLOCK == 0, "a chunk holds whole codec blocks");
_Static_assert(UPDATE_CHUNK % TOPK_CHUNK == 0, "a chunk holds whole top-k chunks");

int dl_update_alloc(diloco *d, char *err, size_t errlen)
{
    if (!d->rc.download_update) return 0;
    size_t n = d->numel;
    int ns = d->rc.nshards;
    d->mom = calloc(n, sizeof(float));
    d->mom_version = malloc((size_t)ns * sizeof(int64_t));
    d->upd_off = calloc((size_t)ns + 1, sizeof(size_t));
    d->upd_both = malloc(2 * n * sizeof(float) + 1);
    if (!d->mom || !d->mom_version || !d->upd_off || !d->upd_both) goto oom;
    int topk = d->rc.compress == BLOB_TOPK; /* its updates are kept per shard (upd_sparse) */
    for (int k = 0; k < ns; k++) {
        d->mom_version[k] = -1;
        d->upd_off[k + 1] = d->upd_off[k] + (topk ? 0 : codec_bytes(d->rc.compress, runconf_shard_numel(&d->rc, k)));
    }
    if (topk && (!(d->upd_sparse = calloc((size_t)ns, sizeof *d->upd_sparse)) ||
                 !(d->upd_sparse_cap = calloc((size_t)ns, sizeof *d->upd_sparse_cap))))
        goto oom;
    if (!(d->upd_q = malloc(d->upd_off[ns] + 1))) goto oom;
    return 0;
oom:
    err_set(err, errlen, "out of memory for the outer momentum of %zu parameters (--download update)", n);
    return -1;
}

void dl_update_free(diloco *d)
{
    free(d->mom);
    free(d->mom_version);
    free(d->upd_off);
    free(d->upd_both);
    free(d->upd_q);
    for (int k = 0; d->upd_sparse && k < d->rc.nshards; k++) free(d->upd_sparse[k]);
    free(d->upd_sparse);
    free(d->upd_sparse_cap);
}

int dl_update_fits(const diloco *d, size_t n, const blob_header *h, const uint8_t *payload, size_t plen)
{
    uint32_t w;
    if (h->dtype != d->rc.compress) return 0;
    if (h->dtype == BLOB_TOPK) /* (the shard-server checked what it averaged; this guards our reads) */
        return h->count == plen && sparse_update_check(payload, plen, n, &w) == 0;
    return h->count == n && plen == codec_bytes(h->dtype, n);
}

/* topk: shard's update buffer, grown to plen (each shard is received by one thread at a time). */
static void *sparse_place(diloco *d, int shard, size_t plen)
{
    if (plen > d->upd_sparse_cap[shard]) {
        uint8_t *p = realloc(d->upd_sparse[shard], plen);
        if (p == NULL) return NULL;
        d->upd_sparse[shard] = p;
        d->upd_sparse_cap[shard] = plen;
    }
    return d->upd_sparse[shard] ? d->upd_sparse[shard] : (d->upd_sparse[shard] = malloc(1));
}

int dl_update_get_flags(const diloco *d, int shard, int64_t min_version, int flags)
{
    if (!d->rc.download_update) return flags;
    if (d->mom_version[shard] >= 0 && d->mom_version[shard] == min_version - 1 && d->tent_version[shard] >= 0)
        return flags | BLOB_GET_UPDATE_OK;
    return flags | BLOB_GET_MOMENTUM;
}

void *dl_update_place(diloco *d, int shard, const blob_header *h, size_t plen)
{
    size_t off = (size_t)d->rc.shard_bounds[shard], n = (size_t)runconf_shard_numel(&d->rc, shard);
    if (!d->rc.download_update || h->shard != dl_shard_id(d, shard)) return NULL;
    if (strcmp(h->op, "update") == 0 && h->dtype == BLOB_TOPK && d->rc.compress == BLOB_TOPK && h->count == plen)
        return sparse_place(d, shard, plen);
    if (strcmp(h->op, "update") == 0 && h->dtype == d->rc.compress && h->count == n &&
        plen == d->upd_off[shard + 1] - d->upd_off[shard])
        return d->upd_q + d->upd_off[shard];
    if (strcmp(h->op, "params") == 0 && (h->flags & BLOB_PARAMS_MOMENTUM) && h->dtype == BLOB_F32 &&
        h->count == 2 * n && plen == 2 * n * sizeof(float)) {
        d->mom_version[shard] = -1; /* until dl_update_take_momentum */
        return d->upd_both + 2 * off;
    }
    return NULL;
}

void dl_update_take_momentum(diloco *d, int shard, int64_t version, const uint8_t *payload)
{
    size_t off = (size_t)d->rc.shard_bounds[shard], n = (size_t)runconf_shard_numel(&d->rc, shard);
    dl_dev_base_written(d, shard);
    memcpy(d->base + off, payload, n * sizeof(float));
    memcpy(d->mom + off, payload + n * sizeof(float), n * sizeof(float));
    d->mom_version[shard] = version;
}

/* The step of an update on base[off, off+n) and its momentum, and the digest of the result, chunk by
 * chunk: each chunk is decoded, stepped and hashed while it is in the cache (the step and the hash are
 * elementwise and streaming, so the bits are those of whole-shard passes). aux 0 is a no-op round:
 * only the digest. -1: out of memory. */
static int apply_chunks(diloco *d, size_t off, size_t n, const blob_header *h, const uint8_t *payload, uint64_t *digest)
{
    XXH3_state_t *xs = XXH3_createState();
    if (xs == NULL) return -1;
    XXH3_64bits_reset(xs);
    float g[UPDATE_CHUNK];
    for (size_t c = 0; c < n; c += UPDATE_CHUNK) {
        size_t len = n - c < UPDATE_CHUNK ? n - c : UPDATE_CHUNK;
        float *theta = d->base + off + c;
        if (h->aux != 0) {
            if (h->dtype == BLOB_TOPK)
                sparse_update_mean(payload, n, c, len, g);
            else
                codec_decode(h->dtype, payload + codec_offset(h->dtype, c), len, g);
            outer_sgd_step(theta, d->mom + off + c, (h->flags & 2) != 0, g, len, (float)h->lr, (float)h->mu,
                           (h->flags & 1) != 0);
        }
        hash_update(xs, theta, len * sizeof(float));
    }
    *digest = XXH3_64bits_digest(xs);
    XXH3_freeState(xs);
    return 0;
}

int dl_update_apply(diloco *d, int shard, const blob_header *h, const uint8_t *payload, uint64_t *digest, char *err,
                    size_t errlen)
{
    size_t off = (size_t)d->rc.shard_bounds[shard], n = (size_t)runconf_shard_numel(&d->rc, shard);
    char *end = NULL;
    uint64_t want = strtoull(h->text, &end, 16);
    if (d->mom_version[shard] != h->version - 1 || end == h->text) {
        d->mom_version[shard] = -1;
        err_set(err, errlen, "update of shard %d to version %" PRId64 " does not follow what we hold", shard,
                h->version);
        return DL_RETRY;
    }
    dl_dev_base_written(d, shard);
    if (apply_chunks(d, off, n, h, payload, digest) != 0) {
        err_set(err, errlen, "out of memory");
        return DL_FAIL;
    }
    if (*digest != want) {
        d->mom_version[shard] = -1;
        d->tent_version[shard] = -1; /* base[shard] is wrong: fetched again before it is used */
        log_warn("shard %d: our parameters after the update to version %" PRId64 " have digest %016" PRIx64
                 ", the committed ones %s: fetching parameters and momentum",
                 shard, h->version, *digest, h->text);
        err_set(err, errlen, "digest mismatch after the update of shard %d", shard);
        return DL_RETRY;
    }
    d->mom_version[shard] = h->version;
    return DL_OK;
}
