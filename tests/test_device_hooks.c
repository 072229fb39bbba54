/* test_device_hooks.c: libdiloco's device path (worker/diloco/device.c) against its host path, in
 * process, without Redis: two sessions are built by hand over the same layout (1000 parameters, 4
 * shards, 2 fragments), one working on a params buffer (the host path), the other with no params pointer
 * and the hooks of the host-memory stand-in device (worker/trainers/host_device.c). Both go through
 * libdiloco's own functions (params_adopt + params_changed, dl_delta_compute,
 * params_apply), and must give the same bytes:
 *   - the pseudo-gradient, bf16 and fp32, including a round-to-even tie, a denormal and -0;
 *   - a non-finite parameter: the same error message (first bad index) from both;
 *   - base changed without a load (a re-fetched round): the device snapshot is reloaded first, once;
 *   - Streaming mixing with alpha 0.3;
 *   - a failing load surfaces through params_changed; bad hook combinations are refused.
 * The same comparison over a real run (Redis, shard-servers, bin/worker) is tests/it_device_hooks.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "diloco/internal.h"
#include "math/hash.h"
#include "trainers/host_device.h"

#define N 1000

typedef struct pair {
    diloco *host, *dev;
    float *params_host, *params_dev; /* the host session's buffer, the device's "device memory" */
    host_device *hd;
} pair;

static uint64_t shard_bounds[5] = {0, 200, 450, 700, 1000};
static int frag_bounds[3] = {0, 2, 4}; /* fragment 0 = [0, 450), fragment 1 = [450, 1000) */

static diloco *session(float *params, const diloco_device_ops *ops, int bf16)
{
    diloco *d = calloc(1, sizeof *d);
    assert_non_null(d);
    diloco_options_default(&d->o);
    d->o.bf16 = bf16;
    d->rc.compress = BLOB_BF16; /* a bf16 run: o.bf16 = 0 pushes fp32 */
    d->push_dtype = dl_delta_dtype(d);
    if (ops) d->o.device = *ops;
    d->params = params;
    d->numel = N;
    d->rc.numel = N;
    d->rc.nshards = 4;
    d->rc.shard_bounds = shard_bounds;
    d->rc.nfragments = 2;
    d->rc.frag_bounds = frag_bounds;
    pthread_mutex_init(&d->hb_mu, NULL);
    char err[256] = "";
    assert_int_equal(dl_dev_init(d, params, err, sizeof err), 0);
    d->base = dl_host_alloc(d, N * sizeof(float));
    d->delta_bf16 = dl_host_alloc(d, N * sizeof(uint16_t));
    d->delta_f32 = dl_host_alloc(d, N * sizeof(float));
    d->push_tokens = calloc(2, sizeof(uint64_t));
    d->tokens_at_send = calloc(2, sizeof(uint64_t));
    d->tokens_before = calloc(2, sizeof(uint64_t));
    d->delta_xxh = calloc(4, sizeof(uint64_t));
    d->counted_round = calloc(2, sizeof(int64_t));
    assert_true(d->base && d->delta_bf16 && d->delta_f32 && d->push_tokens && d->tokens_at_send && d->tokens_before &&
                d->delta_xxh && d->counted_round);
    return d;
}

static void session_free(diloco *d)
{
    dl_host_free(d, d->base);
    dl_host_free(d, d->delta_bf16);
    dl_host_free(d, d->delta_f32);
    dl_dev_free(d);
    free(d->push_tokens);
    free(d->tokens_at_send);
    free(d->tokens_before);
    free(d->delta_xxh);
    free(d->counted_round);
    pthread_mutex_destroy(&d->hb_mu);
    free(d);
}

/* Both sessions hold the same global parameters (base) and have taken them, like diloco_open. */
static void pair_open(pair *p, int bf16)
{
    char err[256] = "";
    p->params_host = calloc(N, sizeof(float));
    p->params_dev = calloc(N, sizeof(float));
    p->hd = host_device_create(p->params_dev, N, err, sizeof err);
    assert_non_null(p->hd);
    diloco_device_ops ops;
    host_device_ops(p->hd, &ops);
    p->host = session(p->params_host, NULL, bf16);
    p->dev = session(NULL, &ops, bf16);
    assert_int_equal(p->dev->dev, 1);
    assert_int_equal(p->host->dev, 0);
    uint64_t s = 99;
    for (size_t i = 0; i < N; i++) p->host->base[i] = p->dev->base[i] = 2.0f * rng_uniform(&s) - 1.0f;
    /* for the edge cases of the cast (see train) */
    p->host->base[3] = p->dev->base[3] = 1.00390625f;
    p->host->base[5] = p->dev->base[5] = 1e-39f;
    p->host->base[9] = p->dev->base[9] = -0.0f;
    for (int f = 0; f < 2; f++) {
        diloco *ds[2] = {p->host, p->dev};
        for (int k = 0; k < 2; k++) {
            params_adopt(ds[k], frag_bounds[f], frag_bounds[f + 1]);
            size_t off = shard_bounds[frag_bounds[f]], n = shard_bounds[frag_bounds[f + 1]] - off;
            assert_int_equal(params_changed(ds[k], off, n, err, sizeof err), 0);
        }
    }
    assert_memory_equal(p->params_host, p->params_dev, N * sizeof(float));
}

static void pair_close(pair *p)
{
    session_free(p->host);
    session_free(p->dev);
    host_device_free(p->hd);
    free(p->params_host);
    free(p->params_dev);
}

/* "training": the same change to both parameter buffers */
static void train(pair *p, uint64_t seed)
{
    for (size_t i = 0; i < N; i++) {
        float step = 0.01f * (2.0f * rng_uniform(&seed) - 1.0f);
        p->params_host[i] -= step;
        p->params_dev[i] -= step;
    }
    /* edge cases of the cast: Δ = 1 + 2^-8 (a tie, rounds to even: 1), a denormal, +0 and -0 */
    p->params_host[3] = p->params_dev[3] = 0.0f;
    p->params_host[5] = p->params_dev[5] = 0.0f;
    p->params_host[7] = p->params_dev[7] = p->host->base[7];
    p->params_host[9] = p->params_dev[9] = 0.0f;
}

static void counts(const pair *p, unsigned long *delta, unsigned long load[3])
{
    host_device_counts(p->hd, delta, load);
}

static void compare_delta(pair *p, int bf16)
{
    char e1[256] = "", e2[256] = "";
    for (int f = 0; f < 2; f++) {
        assert_int_equal(dl_delta_compute(p->host, f, e1, sizeof e1), 0);
        assert_int_equal(dl_delta_compute(p->dev, f, e2, sizeof e2), 0);
    }
    if (bf16) {
        assert_memory_equal(p->host->delta_bf16, p->dev->delta_bf16, N * sizeof(uint16_t));
    } else {
        assert_memory_equal(p->host->delta_f32, p->dev->delta_f32, N * sizeof(float));
    }
    /* each shard's push checksum, made with Δ on the host path and after the device's Δ, is the
     * checksum of the bytes that are sent */
    for (int k = 0; k < 4; k++) {
        size_t off = shard_bounds[k], n = shard_bounds[k + 1] - shard_bounds[k];
        uint64_t want = bf16 ? hash64(p->host->delta_bf16 + off, n * sizeof(uint16_t))
                             : hash64(p->host->delta_f32 + off, n * sizeof(float));
        assert_int_equal(p->host->delta_xxh[k], want);
        assert_int_equal(p->dev->delta_xxh[k], want);
    }
}

static void test_delta_bf16(void **state)
{
    (void)state;
    pair p;
    pair_open(&p, 1);
    train(&p, 1);
    compare_delta(&p, 1);
    assert_int_equal(p.dev->delta_bf16[3], 0x3f80); /* the tie went to even */
    assert_int_equal(p.dev->delta_bf16[5], 0x000b); /* the denormal 1e-39 (0x000ae398) stays denormal */
    assert_int_equal(p.dev->delta_bf16[9], 0x8000); /* -0 kept */
    unsigned long nd, nl[3];
    counts(&p, &nd, nl);
    assert_int_equal(nd, 2);                       /* one per fragment */
    assert_int_equal(nl[DILOCO_LOAD_COPY], 2);     /* the join */
    assert_int_equal(nl[DILOCO_LOAD_SNAPSHOT], 0); /* base unchanged: no reload */
    pair_close(&p);
}

static void test_delta_fp32(void **state)
{
    (void)state;
    pair p;
    pair_open(&p, 0);
    train(&p, 2);
    compare_delta(&p, 0);
    pair_close(&p);
}

static void test_not_finite(void **state)
{
    (void)state;
    pair p;
    pair_open(&p, 1);
    train(&p, 3);
    p.params_host[700] = p.params_dev[700] = INFINITY;
    p.params_host[600] = p.params_dev[600] = NAN;
    char e1[256] = "", e2[256] = "";
    assert_int_equal(dl_delta_compute(p.host, 0, e1, sizeof e1), 0);
    assert_int_equal(dl_delta_compute(p.dev, 0, e2, sizeof e2), 0);
    assert_int_equal(dl_delta_compute(p.host, 1, e1, sizeof e1), -1);
    assert_int_equal(dl_delta_compute(p.dev, 1, e2, sizeof e2), -1);
    printf("  host:   %s\n  device: %s\n", e1, e2);
    assert_string_equal(e1, e2);
    assert_non_null(strstr(e1, "index 600"));
    pair_close(&p);
}

/* base[fragment 1] re-fetched (another version) without the trainer taking it: Δ must be taken
 * against the new base, as on the host, so the device snapshot is reloaded first (once). */
static void test_stale_snapshot(void **state)
{
    (void)state;
    pair p;
    pair_open(&p, 1);
    train(&p, 4);
    /* base changes the way a re-fetch changes it: conn.c marks the shard's snapshot out of date */
    for (size_t i = 500; i < 520; i++) {
        p.host->base[i] += 0.125f;
        p.dev->base[i] += 0.125f;
        for (int k = 0; k < p.dev->rc.nshards; k++)
            if ((size_t)p.dev->rc.shard_bounds[k] <= i && i < (size_t)p.dev->rc.shard_bounds[k + 1])
                dl_dev_base_written(p.dev, k);
    }
    compare_delta(&p, 1);
    unsigned long nd, nl[3];
    counts(&p, &nd, nl);
    assert_int_equal(nl[DILOCO_LOAD_SNAPSHOT], 1);
    compare_delta(&p, 1);
    counts(&p, &nd, nl);
    assert_int_equal(nl[DILOCO_LOAD_SNAPSHOT], 1); /* now current: not again */
    assert_int_equal(nd, 4);
    pair_close(&p);
}

static void test_mix(void **state)
{
    (void)state;
    pair p;
    pair_open(&p, 1);
    train(&p, 5);
    compare_delta(&p, 1);
    for (size_t i = 0; i < N; i++) { /* the round's new global parameters */
        float g = p.host->base[i] + 0.01f * (float)((int)(i % 7) - 3);
        p.host->base[i] = p.dev->base[i] = g;
    }
    char e1[256] = "", e2[256] = "";
    assert_int_equal(params_apply(p.host, 1, 0.3, e1, sizeof e1), 0);
    assert_int_equal(params_apply(p.dev, 1, 0.3, e2, sizeof e2), 0);
    assert_int_equal(params_apply(p.host, 0, 0.0, e1, sizeof e1), 0);
    assert_int_equal(params_apply(p.dev, 0, 0.0, e2, sizeof e2), 0);
    assert_memory_equal(p.params_host, p.params_dev, N * sizeof(float));
    unsigned long nd, nl[3];
    counts(&p, &nd, nl);
    assert_int_equal(nl[DILOCO_LOAD_MIX], 1);
    assert_int_equal(nl[DILOCO_LOAD_COPY], 3);
    /* and the next Δ is taken against the mixed-in global parameters, with no reload */
    train(&p, 6);
    compare_delta(&p, 1);
    counts(&p, &nd, nl);
    assert_int_equal(nl[DILOCO_LOAD_SNAPSHOT], 0);
    pair_close(&p);
}

static int failing_load(void *ctx, const float *base, size_t off, size_t n, int mode, double alpha, char *err,
                        size_t errlen)
{
    (void)ctx;
    (void)base;
    (void)off;
    (void)n;
    (void)mode;
    (void)alpha;
    err_set(err, errlen, "device lost");
    return -1;
}
static int unused_delta(void *ctx, size_t off, size_t n, int bf16, void *out, size_t *bad, char *err, size_t errlen)
{
    (void)ctx;
    (void)off;
    (void)n;
    (void)bf16;
    (void)out;
    (void)bad;
    (void)err;
    (void)errlen;
    return 0;
}

static void test_errors(void **state)
{
    (void)state;
    char err[256] = "";
    diloco_device_ops ops = {.delta = unused_delta, .load = failing_load};
    diloco *d = session(NULL, &ops, 1);
    params_adopt(d, 0, 2);
    assert_int_equal(params_changed(d, 0, 450, err, sizeof err), -1);
    assert_string_equal(err, "device lost");
    session_free(d);

    diloco bad;
    memset(&bad, 0, sizeof bad);
    diloco_options_default(&bad.o);
    bad.rc.nfragments = 2;
    bad.o.device.delta = unused_delta; /* no load */
    assert_int_equal(dl_dev_init(&bad, NULL, err, sizeof err), -1);
    printf("  %s\n", err);
    memset(&bad.o.device, 0, sizeof bad.o.device);
    assert_int_equal(dl_dev_init(&bad, NULL, err, sizeof err), -1); /* no hooks and no params */
    printf("  %s\n", err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delta_bf16),     cmocka_unit_test(test_delta_fp32), cmocka_unit_test(test_not_finite),
        cmocka_unit_test(test_stale_snapshot), cmocka_unit_test(test_mix),        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
