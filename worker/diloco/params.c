/* params.c: the trainer's parameters take the global ones: base into params (a copy, or Streaming
 * DiLoCo's mix), in host memory or through the device hooks (device.c), and the trainer is told.
 *
 * base holds the global parameters as received (conn.c writes them there); params is the trainer's
 * buffer. Every path that changes params calls params_changed afterwards, once. */
#include <string.h>

#include "base/util.h"
#include "internal.h"

/* conn_get wrote each fetched shard into base; the trainer's buffer takes the same values. */
void params_adopt(diloco *d, int first_shard, int last_shard)
{
    size_t off = (size_t)d->rc.shard_bounds[first_shard];
    size_t n = (size_t)d->rc.shard_bounds[last_shard] - off;
    for (int f = 0; d->la_on != NULL && f < d->rc.nfragments; f++) /* these fragments start from base again */
        if (dl_first_shard(d, f) < last_shard && dl_last_shard(d, f) > first_shard) d->la_on[f] = 0;
    if (!d->dev) {
        memcpy(d->params + off, d->base + off, n * sizeof(float));
    } else if (dl_dev_load(d, d->base, off, n, DILOCO_LOAD_COPY, 0.0, d->dev_err, sizeof d->dev_err) < 0) {
        d->dev_failed = 1;
    }
}

void params_mix(diloco *d, size_t lo, size_t hi, const float *own, double alpha)
{
    float a = (float)alpha, b = (float)(1.0 - alpha);
    for (size_t i = lo; i < hi; i++) d->params[i] = a * own[i - lo] + b * d->base[i];
}

/* params[f] = base[f], or params[f] = alpha*params[f] + (1-alpha)*base[f] (Streaming DiLoCo). */
int params_apply(diloco *d, int f, double alpha, char *err, size_t errlen)
{
    size_t lo = (size_t)d->rc.shard_bounds[dl_first_shard(d, f)];
    size_t hi = (size_t)d->rc.shard_bounds[dl_last_shard(d, f)];
    if (alpha == 0) {
        params_adopt(d, dl_first_shard(d, f), dl_last_shard(d, f));
    } else if (d->dev) {
        if (dl_dev_load(d, d->base, lo, hi - lo, DILOCO_LOAD_MIX, alpha, err, errlen) < 0) return -1;
    } else {
        params_mix(d, lo, hi, d->params + lo, alpha);
    }
    return params_changed(d, lo, hi - lo, err, errlen);
}

int params_changed(diloco *d, size_t off, size_t n, char *err, size_t errlen)
{
    if (d->dev) { /* the load in params_adopt (or the mix) was the change and its notification */
        if (!d->dev_failed) return 0;
        d->dev_failed = 0;
        err_set(err, errlen, "%s", d->dev_err);
        return -1;
    }
    if (!d->o.on_params) return 0;
    return d->o.on_params(d->o.on_params_ctx, off, n, err, errlen) < 0 ? -1 : 0;
}

int params_take(diloco *d, int first_shard, int last_shard, char *err, size_t errlen)
{
    params_adopt(d, first_shard, last_shard);
    size_t off = (size_t)d->rc.shard_bounds[first_shard];
    return params_changed(d, off, (size_t)d->rc.shard_bounds[last_shard] - off, err, errlen);
}

/* One load of exactly the fragment, which marks its snapshot current (device.c). */
int params_load_fragment(diloco *d, int f, double alpha, char *err, size_t errlen)
{
    size_t lo = dl_frag_start(d, f), n = dl_frag_start(d, f + 1) - lo;
    return dl_dev_load(d, d->base, lo, n, alpha > 0 ? DILOCO_LOAD_MIX : DILOCO_LOAD_COPY, alpha, err, errlen);
}
