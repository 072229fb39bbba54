/* device.c: device-resident parameters, libdiloco's side of diloco_device_ops (diloco.h).
 *
 * Without hooks libdiloco touches the trainer's params buffer in exactly three ways: the pseudo-
 * gradient reads it (delta.c, dl_delta_compute), taking the global parameters writes base into it
 * (params.c, params_adopt, always followed by params_changed), and Streaming's mixing reads and
 * writes it (params.c, params_apply). With hooks each of them becomes one hook call at the same
 * place, through the functions below, and nothing else changes: the same bytes go on the wire.
 *
 * The device keeps its own copy of the global parameters (the snapshot). Every load puts base into it
 * (or, for --async-lookahead's plain rule, the start ahead that Δ is measured from: lookahead.c), and
 * libdiloco's base normally changes only just before a load. It can also change without one (a
 * stale round re-fetched into base before the trainer takes it, a sync that failed half-way through
 * its gets): so that the device never takes Δ against other values than the host path would, every
 * write into base (conn.c, one place) marks its fragment's snapshot out of date, a load of the whole
 * fragment marks it current, and the pseudo-gradient first reloads a snapshot that is out of date. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "format/blob.h"
#include "internal.h"

int dl_dev_init(diloco *d, const float *params, char *err, size_t errlen)
{
    const diloco_device_ops *o = &d->o.device;
    d->dev = o->delta != NULL;
    if ((o->delta == NULL) != (o->load == NULL) || (o->host_alloc == NULL) != (o->host_free == NULL)) {
        err_set(err, errlen, "device hooks: set delta and load together (and host_alloc with host_free)");
        return -1;
    }
    if (!d->dev && o->host_alloc) {
        err_set(err, errlen, "device hooks: host_alloc without delta and load");
        return -1;
    }
    if (!d->dev && !params) {
        err_set(err, errlen, "no parameter buffer (params is NULL and there are no device hooks)");
        return -1;
    }
    if (!d->dev) return 0;
    d->dev_snap_ok = calloc((size_t)d->rc.nfragments, sizeof *d->dev_snap_ok);
    if (!d->dev_snap_ok) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

void dl_dev_free(diloco *d)
{
    free(d->dev_snap_ok);
    d->dev_snap_ok = NULL;
}

void *dl_host_alloc(diloco *d, size_t bytes)
{
    const diloco_device_ops *o = &d->o.device;
    return o->host_alloc ? o->host_alloc(o->ctx, bytes) : malloc(bytes);
}

void dl_host_free(diloco *d, void *p)
{
    const diloco_device_ops *o = &d->o.device;
    if (!p) return;
    if (o->host_free)
        o->host_free(o->ctx, p);
    else
        free(p);
}

int dl_dev_load(diloco *d, const float *src, size_t off, size_t n, int mode, double alpha, char *err, size_t errlen)
{
    const diloco_device_ops *o = &d->o.device;
    int rc = o->load(o->ctx, src + off, off, n, mode, alpha, err, errlen) < 0 ? -1 : 0;
    /* which fragments' snapshots now hold what their Δ is measured from (a load of exactly one
     * fragment, the only kind libdiloco makes, from the buffer its caller says is that origin) and which
     * are unknown (a partial or failed load: reloaded before their Δ) */
    for (int f = 0; f < d->rc.nfragments; f++) {
        size_t lo = dl_frag_start(d, f), hi = dl_frag_start(d, f + 1);
        if (hi <= off || lo >= off + n) continue;
        d->dev_snap_ok[f] = rc == 0 && lo == off && hi == off + n;
    }
    return rc;
}

/* Called by the get threads: the shards of one fragment may come from several owners at once, each on its
 * own thread, so the flag is cleared with an atomic store (the training thread reads it after joining them). */
void dl_dev_base_written(diloco *d, int shard)
{
    if (!d->dev) return;
    for (int f = 0; f < d->rc.nfragments; f++)
        if (shard >= d->rc.frag_bounds[f] && shard < d->rc.frag_bounds[f + 1])
            __atomic_store_n(&d->dev_snap_ok[f], 0, __ATOMIC_RELAXED);
}

void dl_dev_origin_written(diloco *d, int f)
{
    if (d->dev) d->dev_snap_ok[f] = 0;
}

int dl_dev_delta(diloco *d, int f, const float *origin, size_t *bad, char *err, size_t errlen)
{
    const diloco_device_ops *o = &d->o.device;
    size_t flo = dl_frag_start(d, f), fhi = dl_frag_start(d, f + 1);
    if (!d->dev_snap_ok[f])
        if (dl_dev_load(d, origin, flo, fhi - flo, DILOCO_LOAD_SNAPSHOT, 0.0, err, errlen) < 0) return -1;
    /* the shards this session sends: the fragment's, or a process group rank's part of them */
    size_t lo = (size_t)d->rc.shard_bounds[dl_first_shard(d, f)], hi = (size_t)d->rc.shard_bounds[dl_last_shard(d, f)];
    int bf16 = d->push_dtype == BLOB_BF16;
    void *out = bf16 ? (void *)(d->delta_bf16 + lo) : (void *)(d->delta_f32 + lo);
    *bad = 0;
    int rc = o->delta(o->ctx, lo, hi - lo, bf16, out, bad, err, errlen);
    if (rc < 0) return -1;
    if (rc > 0 && *bad >= hi - lo) *bad = 0; /* a hook that did not say where: report the part's start */
    return rc > 0 ? 1 : 0;
}
