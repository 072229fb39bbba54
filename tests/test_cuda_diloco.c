/* test_cuda_diloco: DiLoCo on the device (worker/cuda/diloco_cuda.cu, libdiloco's device hooks)
 * against the host code libdiloco runs without them, on the same inputs:
 *   - the pseudo-gradient kernel, bf16: bit for bit equal to common/math/bf16.c's bf16_encode_diff
 *     (snapshot - params, round to nearest even) on random values and on NaN (quiet and signalling
 *     payloads, one whose truncation would be Inf, in either operand or both: the GPU's canonical NaN
 *     must come out as x86's), Inf - Inf, +-Inf, ties both ways, denormals, values that round up to
 *     Inf, -0; the first non-finite index equal to bf16_encode_diff's; sub-ranges;
 *   - the same in fp32 against the host subtraction and outer_check_finite;
 *   - loads: snapshot only (params untouched), copy (params = snapshot = base, bit for bit), the
 *     Streaming mix against libdiloco's expression (a*params + b*base in fp32, no FMA), neighbouring
 *     ranges untouched; dl_cuda_host_alloc gives page-locked memory;
 *   - the trainer path: a CUDA GPT trainer's hooks (gpt_trainer_device_ops): a load is seen by the
 *     next step (the training stream waits for the sync stream), two steps, then Δ (the sync stream
 *     waits for the training stream) equals bf16_encode_diff(base, the parameters after the steps).
 *
 * Exits 77 (skipped) without a CUDA device or without the CUDA build. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.h"
#include "diloco.h"
#include "gpt/gpt.h"
#include "math/bf16.h"
#include "math/outer.h"

#ifdef DILOCO_HAVE_CUDA
#include "cuda/diloco_cuda.h"

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* snapshot and params with every edge case of the cast at the front, random values after */
static void make_inputs(float *snap, float *params, size_t n)
{
    uint64_t s = 4242;
    for (size_t i = 0; i < n; i++) {
        snap[i] = tc_normal(&s);
        params[i] = snap[i] - 0.01f * tc_normal(&s);
    }
    size_t k = 100; /* the edge cases start at 100 so that index 0..99 are finite */
    const uint32_t nan_bits[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u, 0xff800001u};
    for (size_t j = 0; j < sizeof nan_bits / sizeof nan_bits[0]; j++, k++) {
        snap[k] = from_bits(nan_bits[j]);
        params[k] = 0;
    }
    snap[k] = INFINITY;
    params[k++] = 1.0f;
    snap[k] = 1.0f;
    params[k++] = INFINITY; /* -Inf */
    snap[k] = INFINITY;
    params[k++] = INFINITY; /* NaN */
    snap[k] = 1.00390625f;
    params[k++] = 0.0f; /* 1 + 2^-8: tie, even is down */
    snap[k] = 1.01171875f;
    params[k++] = 0.0f; /* 1 + 3*2^-8: tie, even is up */
    snap[k] = -1.00390625f;
    params[k++] = 0.0f;
    snap[k] = from_bits(0x3f808001u);
    params[k++] = 0.0f; /* just above a tie: up */
    snap[k] = from_bits(0x00000001u);
    params[k++] = 0.0f; /* smallest denormal */
    snap[k] = from_bits(0x007fffffu);
    params[k++] = 0.0f; /* largest denormal: rounds to the smallest normal */
    snap[k] = from_bits(0x80018000u);
    params[k++] = 0.0f; /* negative denormal tie */
    snap[k] = from_bits(0x7f7fffffu);
    params[k++] = 0.0f; /* FLT_MAX: rounds up to Inf */
    snap[k] = from_bits(0x7f7f7fffu);
    params[k++] = 0.0f; /* just below: stays finite */
    snap[k] = -0.0f;
    params[k++] = 0.0f; /* -0 */
    snap[k] = 3e38f;
    params[k++] = -3e38f; /* the difference overflows to Inf */
    snap[k] = 1e-39f;
    params[k++] = 2e-39f; /* denormal difference */
    snap[k] = 1.0f;
    params[k++] = from_bits(0x7fa00000u); /* NaN parameter (signalling) */
    snap[k] = from_bits(0x7fa00001u);
    params[k++] = from_bits(0xffc00002u); /* both NaN: the first wins */
}

static dl_cuda *make_dl(size_t n)
{
    char err[512] = "";
    dl_cuda *c = dl_cuda_create(NULL, n, NULL, err, sizeof err);
    if (!c) fprintf(stderr, "%s\n", err);
    assert_non_null(c);
    return c;
}

static void check_delta_bf16(dl_cuda *c, const float *snap, const float *params, size_t off, size_t n)
{
    char err[512] = "";
    uint16_t *got = dl_cuda_host_alloc(c, n * 2), *want = malloc(n * 2);
    memset(got, 0xab, n * 2);
    size_t bad_got = 12345678, bad_want = 87654321;
    int rc = dl_cuda_delta(c, off, n, 1, got, &bad_got, err, sizeof err);
    if (rc < 0) fprintf(stderr, "%s\n", err);
    int rw = bf16_encode_diff(snap + off, params + off, want, n, &bad_want);
    size_t differ = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            if (first == n) first = i;
            differ++;
        }
    printf("  bf16 [%zu, %zu): %zu differ from bf16_encode_diff (limit 0)%s", off, off + n, differ,
           rw < 0 ? "" : ", all finite\n");
    if (rw < 0) printf(", first non-finite %zu (host %zu)\n", bad_got, bad_want);
    if (differ) printf("    first at %zu: got %04x want %04x\n", off + first, got[first], want[first]);
    assert_int_equal(differ, 0);
    assert_int_equal(rc, rw < 0 ? 1 : 0);
    if (rw < 0) assert_int_equal(bad_got, bad_want);
    dl_cuda_host_free(c, got);
    free(want);
}

static void check_delta_f32(dl_cuda *c, const float *snap, const float *params, size_t off, size_t n)
{
    char err[512] = "";
    float *got = malloc(n * 4), *want = malloc(n * 4); /* pageable on purpose: must work too */
    size_t bad_got = 0, bad_want = 0;
    int rc = dl_cuda_delta(c, off, n, 0, got, &bad_got, err, sizeof err);
    if (rc < 0) fprintf(stderr, "%s\n", err);
    for (size_t i = 0; i < n; i++) want[i] = snap[off + i] - params[off + i];
    int rw = outer_check_finite(want, n, &bad_want);
    printf("  fp32 [%zu, %zu): bitwise %s\n", off, off + n, memcmp(got, want, n * 4) ? "DIFFERENT" : "equal");
    assert_memory_equal(got, want, n * 4);
    assert_int_equal(rc, rw < 0 ? 1 : 0);
    if (rw < 0) assert_int_equal(bad_got, bad_want);
    free(got);
    free(want);
}

static void test_delta(void **state)
{
    (void)state;
    size_t n = 70001;
    char err[512] = "";
    dl_cuda *c = make_dl(n);
    float *snap = dl_cuda_host_alloc(c, n * 4), *params = malloc(n * 4);
    assert_true(dl_cuda_is_pinned(snap));
    make_inputs(snap, params, n);
    assert_int_equal(dl_cuda_params_upload(c, params, 0, n, err, sizeof err), 0);
    assert_int_equal(dl_cuda_load(c, snap, 0, n, DILOCO_LOAD_SNAPSHOT, 0.0, err, sizeof err), 0);
    check_delta_bf16(c, snap, params, 0, n);         /* everything: non-finite at 100 */
    check_delta_bf16(c, snap, params, 0, 100);       /* finite */
    check_delta_bf16(c, snap, params, 108, 20);      /* the ties, denormals, rounding to Inf; Δ overflows at 118 */
    check_delta_bf16(c, snap, params, 200, n - 200); /* a large finite range at an odd offset */
    check_delta_bf16(c, snap, params, n - 1, 1);
    check_delta_f32(c, snap, params, 0, n);
    check_delta_f32(c, snap, params, 200, n - 200);
    /* the snapshot was not changed by any of it */
    float *back = malloc(n * 4);
    assert_int_equal(dl_cuda_snapshot_download(c, back, 0, n, err, sizeof err), 0);
    assert_memory_equal(back, snap, n * 4);
    free(back);
    dl_cuda_host_free(c, snap);
    free(params);
    dl_cuda_free(c);
}

static void test_load(void **state)
{
    (void)state;
    size_t n = 50000, off = 1234, len = 30001;
    char err[512] = "";
    dl_cuda *c = make_dl(n);
    float *p0 = tc_randn(n, 1.0f, 7), *base = dl_cuda_host_alloc(c, n * 4), *got = malloc(n * 4);
    float *snap0 = tc_randn(n, 1.0f, 9);
    for (size_t i = 0; i < n; i++) base[i] = p0[i] + 0.1f * (float)((int)(i % 13) - 6);
    assert_int_equal(dl_cuda_params_upload(c, p0, 0, n, err, sizeof err), 0);
    assert_int_equal(dl_cuda_load(c, snap0, 0, n, DILOCO_LOAD_SNAPSHOT, 0.0, err, sizeof err), 0);

    /* snapshot only: params untouched, snapshot = base on the range only */
    assert_int_equal(dl_cuda_load(c, base + off, off, len, DILOCO_LOAD_SNAPSHOT, 0.0, err, sizeof err), 0);
    assert_int_equal(dl_cuda_params_download(c, got, 0, n, err, sizeof err), 0);
    assert_memory_equal(got, p0, n * 4);
    assert_int_equal(dl_cuda_snapshot_download(c, got, 0, n, err, sizeof err), 0);
    assert_memory_equal(got, snap0, off * 4);
    assert_memory_equal(got + off, base + off, len * 4);
    assert_memory_equal(got + off + len, snap0 + off + len, (n - off - len) * 4);

    /* mix: a*params + b*base on the range, as libdiloco's params_apply */
    double alpha = 0.3;
    float a = (float)alpha, b = (float)(1.0 - alpha);
    float *want = malloc(n * 4);
    memcpy(want, p0, n * 4);
    for (size_t i = off; i < off + len; i++) want[i] = a * p0[i] + b * base[i];
    assert_int_equal(dl_cuda_load(c, base + off, off, len, DILOCO_LOAD_MIX, alpha, err, sizeof err), 0);
    assert_int_equal(dl_cuda_params_download(c, got, 0, n, err, sizeof err), 0);
    printf("  load mix alpha 0.3: %s\n", memcmp(got, want, n * 4) ? "DIFFERENT" : "bit-identical to the host");
    assert_memory_equal(got, want, n * 4);

    /* copy: params = snapshot = base on the range */
    for (size_t i = off; i < off + len; i++) base[i] += 1.0f;
    memcpy(want + off, base + off, len * 4);
    assert_int_equal(dl_cuda_load(c, base + off, off, len, DILOCO_LOAD_COPY, 0.0, err, sizeof err), 0);
    assert_int_equal(dl_cuda_params_download(c, got, 0, n, err, sizeof err), 0);
    assert_memory_equal(got, want, n * 4);
    assert_int_equal(dl_cuda_snapshot_download(c, got, 0, n, err, sizeof err), 0);
    assert_memory_equal(got + off, base + off, len * 4);
    printf("  load snapshot / copy: exact, neighbours untouched\n");

    /* refused: a range outside, a bad mode */
    assert_int_equal(dl_cuda_load(c, base, n - 10, 11, DILOCO_LOAD_COPY, 0.0, err, sizeof err), -1);
    printf("  %s\n", err);
    assert_int_equal(dl_cuda_load(c, base, 0, 10, 7, 0.0, err, sizeof err), -1);
    size_t bad;
    assert_int_equal(dl_cuda_delta(c, n, 1, 1, got, &bad, err, sizeof err), -1);
    free(p0);
    free(snap0);
    free(got);
    free(want);
    dl_cuda_host_free(c, base);
    dl_cuda_free(c);
}

static trainer *make_trainer(void)
{
    gpt_options o;
    gpt_options_default(&o);
    o.model = (gpt_config){.layers = 2, .heads = 4, .dim = 64, .ctx = 64, .vocab = 64};
    o.batch = 4;
    o.seq = 48;
    o.warmup_steps = 2;
    o.lr = 1e-3;
    o.eval_every = 0;
    o.threads = 1;
    o.device = GPT_DEVICE_CUDA;
    char err[512];
    trainer *t = gpt_trainer_create(&o, err, sizeof err);
    if (!t) fprintf(stderr, "%s\n", err);
    assert_non_null(t);
    return t;
}

static void test_trainer_path(void **state)
{
    (void)state;
    char err[512] = "";
    trainer *t = make_trainer();
    diloco_device_ops ops;
    assert_int_equal(gpt_trainer_device_ops(t, &ops, err, sizeof err), 1);
    assert_non_null(ops.delta);
    size_t n = t->numel;
    float *base = ops.host_alloc(ops.ctx, n * 4), *p = malloc(n * 4);
    uint16_t *d16 = ops.host_alloc(ops.ctx, n * 2), *want = malloc(n * 2);
    /* the "global parameters": the trainer's own init, moved a little */
    assert_int_equal(gpt_trainer_params_to_host(t, err, sizeof err), 0);
    uint64_t s = 5;
    for (size_t i = 0; i < n; i++) base[i] = t->params[i] + 0.001f * tc_normal(&s);
    assert_int_equal(ops.load(ops.ctx, base, 0, n, DILOCO_LOAD_COPY, 0.0, err, sizeof err), 0);
    assert_int_equal(gpt_trainer_params_to_host(t, err, sizeof err), 0); /* on the training stream */
    assert_memory_equal(t->params, base, n * 4);
    trainer_stats st;
    for (int k = 0; k < 2; k++) assert_int_equal(t->step(t, &st, err, sizeof err), 0);
    /* Δ right after the steps, before anything waited for them */
    size_t bad = 0;
    assert_int_equal(ops.delta(ops.ctx, 0, n, 1, d16, &bad, err, sizeof err), 0);
    assert_int_equal(gpt_trainer_params_to_host(t, err, sizeof err), 0);
    memcpy(p, t->params, n * 4);
    assert_int_equal(bf16_encode_diff(base, p, want, n, &bad), 0);
    size_t differ = 0, moved = 0;
    for (size_t i = 0; i < n; i++) {
        differ += d16[i] != want[i];
        moved += p[i] != base[i];
    }
    printf("  trainer: load seen by the step (exact), 2 steps moved %zu of %zu parameters, device Δ: %zu differ "
           "(limit 0)\n",
           moved, n, differ);
    assert_true(moved > n / 2);
    assert_int_equal(differ, 0);
    /* Streaming's mix through the trainer's hooks on a slice */
    size_t off = n / 3, len = n / 4;
    for (size_t i = 0; i < n; i++) want[i] = 0;
    float *mixed = malloc(n * 4);
    memcpy(mixed, p, n * 4);
    for (size_t i = off; i < off + len; i++) mixed[i] = 0.5f * p[i] + 0.5f * base[i];
    assert_int_equal(ops.load(ops.ctx, base + off, off, len, DILOCO_LOAD_MIX, 0.5, err, sizeof err), 0);
    assert_int_equal(gpt_trainer_params_to_host(t, err, sizeof err), 0);
    assert_memory_equal(t->params, mixed, n * 4);
    ops.host_free(ops.ctx, base);
    ops.host_free(ops.ctx, d16);
    free(p);
    free(want);
    free(mixed);
    t->destroy(t);
}

#endif

int main(void)
{
    cuda_test_require_device("test_cuda_diloco");
#ifdef DILOCO_HAVE_CUDA
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delta),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_trainer_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    return 77;
#endif
}
