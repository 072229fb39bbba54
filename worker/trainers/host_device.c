/* host_device.c: libdiloco's device hooks over host memory (see host_device.h). Written like the
 * kernels of worker/cuda/diloco_cuda.cu, element by element, rather than with the bulk helpers
 * libdiloco's host path uses, so a test run compares two implementations of the same contract.
 * Built with -ffp-contract=off (worker/trainers), like libdiloco. */
#include "host_device.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "math/bf16.h"

struct host_device {
    float *params; /* the trainer's */
    float *snap;   /* ours: the global parameters the next Δ is taken against */
    size_t numel;
    unsigned long ndelta, nload[3];
};

host_device *host_device_create(float *params, size_t numel, char *err, size_t errlen)
{
    host_device *h = calloc(1, sizeof *h);
    if (h) h->snap = malloc((numel ? numel : 1) * sizeof(float));
    if (!h || !h->snap) {
        if (h) free(h);
        err_set(err, errlen, "host device: out of memory for %zu parameters", numel);
        return NULL;
    }
    h->params = params;
    h->numel = numel;
    for (size_t i = 0; i < numel; i++) h->snap[i] = 0.0f;
    return h;
}

void host_device_free(host_device *h)
{
    if (!h) return;
    free(h->snap);
    free(h);
}

static int check_range(const host_device *h, size_t off, size_t n, char *err, size_t errlen)
{
    if (off > h->numel || n > h->numel - off) {
        err_set(err, errlen, "host device: range [%zu, %zu) outside [0, %zu)", off, off + n, h->numel);
        return -1;
    }
    return 0;
}

static int nonfinite(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return (b & 0x7f800000u) == 0x7f800000u;
}

static int hd_delta(void *ctx, size_t off, size_t n, int bf16, void *out, size_t *bad, char *err, size_t errlen)
{
    host_device *h = ctx;
    if (check_range(h, off, n, err, errlen) < 0) return -1;
    h->ndelta++;
    size_t first = n;
    for (size_t i = 0; i < n; i++) {
        float d = h->snap[off + i] - h->params[off + i];
        if (bf16)
            ((uint16_t *)out)[i] = bf16_from_f32(d);
        else
            ((float *)out)[i] = d;
        if (first == n && nonfinite(d)) first = i;
    }
    if (first == n) return 0;
    *bad = first;
    return 1;
}

static int hd_load(void *ctx, const float *base, size_t off, size_t n, int mode, double alpha, char *err, size_t errlen)
{
    host_device *h = ctx;
    if (check_range(h, off, n, err, errlen) < 0) return -1;
    if (mode < DILOCO_LOAD_SNAPSHOT || mode > DILOCO_LOAD_MIX) {
        err_set(err, errlen, "host device: bad load mode %d", mode);
        return -1;
    }
    h->nload[mode]++;
    memcpy(h->snap + off, base, n * sizeof(float));
    if (mode == DILOCO_LOAD_COPY) memcpy(h->params + off, base, n * sizeof(float));
    if (mode == DILOCO_LOAD_MIX) {
        float a = (float)alpha, b = (float)(1.0 - alpha);
        for (size_t i = 0; i < n; i++) h->params[off + i] = a * h->params[off + i] + b * h->snap[off + i];
    }
    return 0;
}

void host_device_ops(host_device *h, diloco_device_ops *ops)
{
    memset(ops, 0, sizeof *ops);
    ops->ctx = h;
    ops->delta = hd_delta;
    ops->load = hd_load;
}

void host_device_counts(const host_device *h, unsigned long *delta, unsigned long load[3])
{
    *delta = h->ndelta;
    for (int i = 0; i < 3; i++) load[i] = h->nload[i];
}
