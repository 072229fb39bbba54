/* delta_topk.c: the worker's side of --compress topk (SparseLoCo; common/math/codec_sparse.h,
 * docs/compression.md "The sparse codec").
 *
 * The worker keeps an accumulator e, one fp32 per parameter (d->ef, the buffer error feedback uses for
 * the block codecs). Each round, chunk by chunk of every shard: e = beta * e + Δ, the chunk's top k
 * entries of e go out at 2 bits (delta_q), and e keeps what they did not carry. e is updated once per
 * round, when Δ is made (a resend is the same bytes), and lives only in this process: a restarted
 * worker starts again from e = 0 and loses what its accumulator held (up to 1/(1-beta) rounds of
 * unsent pseudo-gradient). delta.c calls these; they call only the codec. */
#include <stdlib.h>

#include "base/util.h"
#include "internal.h"
#include "math/codec_sparse.h"

int dl_delta_topk_alloc(diloco *d, char *err, size_t errlen)
{
    d->delta_qoff = calloc((size_t)d->rc.nshards + 1, sizeof(size_t));
    d->ef = calloc(d->numel ? d->numel : 1, sizeof(float));
    if (!d->delta_qoff || !d->ef) goto oom;
    for (int k = 0; k < d->rc.nshards; k++)
        d->delta_qoff[k + 1] =
            d->delta_qoff[k] + sparse_shard_bytes(d->rc.topk_density, (size_t)runconf_shard_numel(&d->rc, k));
    d->delta_q = malloc(d->delta_qoff[d->rc.nshards] + 1);
    if (!d->delta_q) goto oom;
    return 0;
oom:
    err_set(err, errlen, "out of memory for the top-k accumulator of %zu parameters", d->numel);
    return -1;
}

const uint8_t *dl_delta_topk_encode(diloco *d, int k, size_t c, size_t len, int from_device, size_t *bad, size_t *qlen)
{
    size_t lo = (size_t)d->rc.shard_bounds[k];
    double density = d->rc.topk_density;
    size_t full = topk_chunk_bytes(topk_count(density, TOPK_CHUNK), TOPK_CHUNK);
    uint8_t *q0 = d->delta_q + d->delta_qoff[k] + (c - lo) / TOPK_CHUNK * full, *q = q0;
    for (size_t i = c; i < c + len; i += TOPK_CHUNK) {
        size_t m = c + len - i < TOPK_CHUNK ? c + len - i : TOPK_CHUNK;
        uint32_t kk = topk_count(density, m); /* (len ends at the shard's end, or is whole chunks) */
        const float *a = from_device ? d->delta_f32 + i : d->base + i, *b = from_device ? NULL : d->params + i;
        size_t where = 0;
        if (sparse_accumulate_encode(d->ef + i, a, b, m, d->rc.topk_beta, kk, q, &where) != 0) {
            *bad = i - c + (where < m ? where : 0);
            return NULL;
        }
        q += topk_chunk_bytes(kk, m);
    }
    *qlen = (size_t)(q - q0);
    return q0;
}
