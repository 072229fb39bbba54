/*
 * test_outer_step.c: the outer optimizer (common/math/outer.c): averaging of pseudo-gradients, the SGD
 * step with and without (Nesterov) momentum against hand-computed values, the bf16 accumulation
 * path, the finite checks, that the vectorised kernels give the same bits as the scalar formula, and
 * that every build of the step rounds exactly where torch's SGD does (common/math/outer_fma.h): once for
 * g + mu*b and theta - lr*d, twice for mu*b + g.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "base/util.h"
#include "math/bf16.h"
#include "math/outer.h"

static void two_workers_averaged_with_lr1_mu0_give_exact_result(void **state)
{
    (void)state;
    float acc[1];
    float theta[1] = {0.0f};
    const float w1[1] = {0.2f};
    const float w2[1] = {0.4f};
    outer_sum_zero(acc, 1);
    outer_sum_add_f32(acc, w1, 1);
    outer_sum_add_f32(acc, w2, 1);
    outer_mean_finish(acc, 1, 2);
    outer_sgd_step(theta, NULL, 1, acc, 1, 1.0f, 0.0f, 1);
    assert_true(theta[0] == -0.3f);
}

static void nesterov_three_steps_match_torch(void **state)
{
    (void)state;
    float theta[3] = {0, 0, 0};
    float b[3] = {99, 99, 99}; /* garbage: the first step must overwrite it */
    const float g[3] = {1, 1, 1};
    const double want[3] = {-0.19, -0.461, -0.8049};
    for (int step = 0; step < 3; step++) {
        outer_sgd_step(theta, b, step == 0, g, 3, 0.1f, 0.9f, 1);
        for (int i = 0; i < 3; i++) assert_true(fabs(theta[i] - want[step]) < 1e-6);
    }
}

static void plain_momentum_matches_hand_computation(void **state)
{
    (void)state;
    /* lr 0.5, mu 0.5, g = 2, 4, -1:
     * step1: b = 2,           theta = -1
     * step2: b = 1 + 4 = 5,   theta = -1 - 2.5 = -3.5
     * step3: b = 2.5 - 1 = 1.5, theta = -3.5 - 0.75 = -4.25   (all exact in binary) */
    float theta[1] = {0};
    float b[1] = {0};
    const float gs[3] = {2, 4, -1};
    const float want_theta[3] = {-1.0f, -3.5f, -4.25f};
    const float want_b[3] = {2.0f, 5.0f, 1.5f};
    for (int step = 0; step < 3; step++) {
        outer_sgd_step(theta, b, step == 0, &gs[step], 1, 0.5f, 0.5f, 0);
        assert_true(theta[0] == want_theta[step]);
        assert_true(b[0] == want_b[step]);
    }
}

static void mu_zero_leaves_momentum_untouched(void **state)
{
    (void)state;
    float theta[2] = {1, 1};
    float b[2] = {7, 7};
    const float g[2] = {0.5f, -0.5f};
    outer_sgd_step(theta, b, 0, g, 2, 2.0f, 0.0f, 1);
    assert_true(theta[0] == 0.0f && theta[1] == 2.0f);
    assert_true(b[0] == 7.0f && b[1] == 7.0f);
}

static void bf16_accumulate_path_matches_widened_f32(void **state)
{
    (void)state;
    enum { N = 1000 };
    float src[N], widened[N], acc_a[N], acc_b[N];
    uint16_t packed[N];
    uint64_t seed = 42;
    for (size_t i = 0; i < N; i++) src[i] = rng_uniform(&seed) * 2.0f - 1.0f;
    bf16_encode(src, packed, N);
    bf16_decode(packed, widened, N);
    outer_sum_zero(acc_a, N);
    outer_sum_zero(acc_b, N);
    outer_sum_add_bf16(acc_a, packed, N);
    outer_sum_add_bf16(acc_a, packed, N);
    outer_sum_add_f32(acc_b, widened, N);
    outer_sum_add_f32(acc_b, widened, N);
    assert_memory_equal(acc_a, acc_b, sizeof acc_a);
    /* A value exactly representable in bf16 accumulates exactly. */
    uint16_t one_and_half = bf16_from_f32(1.5f);
    float acc[1] = {0.25f};
    outer_sum_add_bf16(acc, &one_and_half, 1);
    assert_true(acc[0] == 1.75f);
}

static void scaled_add_and_mean_use_the_scalar_formula(void **state)
{
    (void)state;
    enum { N = 37 }; /* not a multiple of the vector width: tail included */
    float acc[N], x[N], want[N];
    uint64_t seed = 7;
    for (size_t i = 0; i < N; i++) {
        x[i] = rng_uniform(&seed);
        acc[i] = rng_uniform(&seed);
        volatile float prod = 0.3f * x[i];
        volatile float sum = acc[i] + prod;
        volatile float mean = sum / 3.0f;
        want[i] = mean;
    }
    outer_sum_add_scaled_f32(acc, x, 0.3f, N);
    outer_mean_finish(acc, N, 3);
    assert_memory_equal(acc, want, sizeof acc);
}

static void vectorised_nesterov_is_bit_identical_to_scalar(void **state)
{
    (void)state;
    enum { N = 1031 };
    float *theta = malloc(N * sizeof *theta), *b = malloc(N * sizeof *b), *g = malloc(N * sizeof *g);
    float *ts = malloc(N * sizeof *ts), *bs = malloc(N * sizeof *bs);
    assert_true(theta && b && g && ts && bs);
    uint64_t seed = 1;
    for (size_t i = 0; i < N; i++) {
        theta[i] = ts[i] = rng_uniform(&seed) - 0.5f;
        b[i] = bs[i] = rng_uniform(&seed) - 0.5f;
        g[i] = rng_uniform(&seed) - 0.5f;
    }
    const float lr = 0.7f, mu = 0.9f;
    outer_sgd_step(theta, b, 0, g, N, lr, mu, 1);
    for (size_t i = 0; i < N; i++) {
        /* volatile forces one rounding per operation in the momentum; fmaf rounds d and theta once */
        volatile float mb = mu * bs[i];
        volatile float nb = mb + g[i];
        float d = fmaf(mu, nb, g[i]);
        bs[i] = nb;
        ts[i] = fmaf(-lr, d, ts[i]);
    }
    assert_memory_equal(theta, ts, N * sizeof *ts);
    assert_memory_equal(b, bs, N * sizeof *bs);
    assert_int_equal(digest_f32(theta, N), digest_f32(ts, N));
    theta[3] = nextafterf(theta[3], 1.0f);
    assert_int_not_equal(digest_f32(theta, N), digest_f32(ts, N));
    free(theta);
    free(b);
    free(g);
    free(ts);
    free(bs);
}

/* Where the step rounds, on numbers whose exact result is known: x = 1 + 2^-12, so x*x = 1 + 2^-11 +
 * 2^-24, which rounds (a tie, to even) to 1 + 2^-11. theta - lr*d rounds once (torch's
 * theta.add_(d, alpha=-lr)): -1 + x*x is exactly 2^-11 + 2^-24, where rounding x*x first would give
 * 2^-11. The momentum mu*b + g rounds twice (torch's b.mul_(mu).add_(g)): 2^-11, not 2^-11 + 2^-24. */
static void single_rounding_exactly_where_torch_has_one(void **state)
{
    (void)state;
    const float x = 1.0f + 0x1p-12f;
    float theta[1] = {-1.0f}, g[1] = {-x};
    outer_sgd_step(theta, NULL, 0, g, 1, x, 0.0f, 1);
    assert_true(theta[0] == 0x1p-11f + 0x1p-24f);
    float theta2[1] = {0.0f}, b[1] = {x}, g2[1] = {-1.0f};
    outer_sgd_step(theta2, b, 0, g2, 1, 1.0f, x, 0);
    assert_true(b[0] == 0x1p-11f);
    assert_true(theta2[0] == -0x1p-11f);
}

/* torch.optim.SGD's step on one element, the fused operations computed exactly in double and rounded
 * once (inputs in [0.5, 1) and mu, lr in [0.5, 1): every product and sum below fits 53 bits), the
 * momentum with one rounding per operation. fused = 0 rounds everything twice (the baseline build of
 * torch): the test checks it is a different answer. */
static void torch_sgd_one(float *theta, float *b, float theta_in, float b_in, float g, int first, float lr, float mu,
                          int nesterov, int fused)
{
    float d = g;
    if (mu != 0.0f) {
        volatile float mb = mu * b_in;
        *b = first ? g : mb + g;
        volatile float mnb = mu * *b;
        d = !nesterov ? *b : fused ? (float)((double)g + (double)mu * (double)*b) : g + mnb;
    }
    volatile float step = lr * d;
    *theta = fused ? (float)((double)theta_in - (double)lr * (double)d) : theta_in - step;
}

/* Every build of the step (in place, out of place, the one-pass commit kernel dispatched to AVX2 and FMA
 * here and its portable build) gives torch's bits on random inputs, every variant, 1 to 3 bf16
 * participants, a length with a scalar tail; and the check is not vacuous: rounding everything twice
 * gives other bits. */
static void every_build_rounds_where_torch_does(void **state)
{
    (void)state;
    enum { N = 1037, K = 3 };
    static float t0[N], b0[N], g[N], want_t[N], want_b[N], two_t[N], two_b[N], got_t[N], got_b[N];
    static uint16_t d[K][N];
    const uint16_t *dp[K] = {d[0], d[1], d[2]};
    const float lr = 0.7f;
    uint64_t seed = 17;
    for (size_t i = 0; i < N; i++) {
        t0[i] = (0.5f + 0.5f * rng_uniform(&seed)) * (i % 3 == 0 ? -1.0f : 1.0f);
        b0[i] = 0.5f + 0.5f * rng_uniform(&seed);
        for (int p = 0; p < K; p++)
            d[p][i] = bf16_from_f32(0.5f + 0.5f * rng_uniform(&seed)); /* the mean stays in [0.5, 1) */
    }
    const struct {
        int first;
        float mu;
        int nesterov;
    } cases[] = {{1, 0.9f, 1}, {0, 0.9f, 1}, {0, 0.8f, 0}, {1, 0.8f, 0}, {0, 0.0f, 1}};
    for (uint32_t k = 1; k <= K; k++) {
        outer_mean_bf16(g, dp, k, N);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const int first = cases[c].first, nesterov = cases[c].nesterov;
            const float mu = cases[c].mu;
            size_t differ = 0;
            for (size_t i = 0; i < N; i++) {
                want_b[i] = two_b[i] = b0[i];
                torch_sgd_one(&want_t[i], &want_b[i], t0[i], b0[i], g[i], first, lr, mu, nesterov, 1);
                torch_sgd_one(&two_t[i], &two_b[i], t0[i], b0[i], g[i], first, lr, mu, nesterov, 0);
                differ += memcmp(&want_t[i], &two_t[i], sizeof(float)) != 0;
            }
            assert_true(differ > N / 20);
            for (int build = 0; build < 4; build++) {
                memcpy(got_t, t0, sizeof got_t);
                memcpy(got_b, b0, sizeof got_b);
                if (build == 0)
                    outer_sgd_step(got_t, got_b, first, g, N, lr, mu, nesterov);
                else if (build == 1)
                    outer_sgd_step_to(got_t, got_b, t0, b0, first, g, N, lr, mu, nesterov);
                else
                    (build == 2 ? outer_mean_step_bf16_to : outer_mean_step_bf16_to_generic)(
                        got_t, got_b, t0, b0, first, dp, k, N, lr, mu, nesterov);
                assert_memory_equal(got_t, want_t, sizeof got_t);
                assert_memory_equal(got_b, want_b, sizeof got_b);
            }
        }
    }
}

/* The out-of-place step (the shard-server's commit) leaves exactly what copy + in-place step leaves, for
 * every variant: first step, Nesterov, plain momentum, mu 0. */
static void out_of_place_step_matches_in_place(void **state)
{
    (void)state;
    enum { N = 1037 };
    float *t0 = malloc(N * sizeof *t0), *b0 = malloc(N * sizeof *b0), *g = malloc(N * sizeof *g);
    float *ti = malloc(N * sizeof *ti), *bi = malloc(N * sizeof *bi), *to = malloc(N * sizeof *to),
          *bo = malloc(N * sizeof *bo);
    assert_true(t0 && b0 && g && ti && bi && to && bo);
    uint64_t seed = 5;
    for (size_t i = 0; i < N; i++) {
        t0[i] = rng_uniform(&seed) - 0.5f;
        b0[i] = rng_uniform(&seed) - 0.5f;
        g[i] = rng_uniform(&seed) - 0.5f;
    }
    const struct {
        int first;
        float mu;
        int nesterov;
    } cases[] = {{1, 0.9f, 1}, {0, 0.9f, 1}, {0, 0.8f, 0}, {1, 0.8f, 0}, {0, 0.0f, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(ti, t0, N * sizeof *ti);
        memcpy(bi, b0, N * sizeof *bi);
        outer_sgd_step(ti, bi, cases[c].first, g, N, 0.7f, cases[c].mu, cases[c].nesterov);
        outer_sgd_step_to(to, bo, t0, b0, cases[c].first, g, N, 0.7f, cases[c].mu, cases[c].nesterov);
        assert_memory_equal(to, ti, N * sizeof *ti);
        assert_memory_equal(bo, bi, N * sizeof *bi);
    }
    free(t0);
    free(b0);
    free(g);
    free(ti);
    free(bi);
    free(to);
    free(bo);
}

/* The commit's one-pass kernel (mean of k bf16 Δ in registers, then the out-of-place step) and the
 * g it recomputes for the log entry give exactly what the multi-pass kernels give: every variant,
 * 1 to 5 participants, a length with a scalar tail, and signed zeros (+0 + -0 is +0 either way). */
static void one_pass_mean_and_step_match_the_multi_pass_kernels(void **state)
{
    (void)state;
    enum { N = 1037, K = 5 };
    float *t0 = malloc(N * sizeof *t0), *b0 = malloc(N * sizeof *b0), *g = malloc(N * sizeof *g);
    float *tm = malloc(N * sizeof *tm), *bm = malloc(N * sizeof *bm), *to = malloc(N * sizeof *to),
          *bo = malloc(N * sizeof *bo), *g1 = malloc(N * sizeof *g1);
    uint16_t *d[K];
    for (int p = 0; p < K; p++) d[p] = malloc(N * sizeof *d[p]);
    assert_true(t0 && b0 && g && tm && bm && to && bo && g1 && d[K - 1]);
    uint64_t seed = 11;
    for (size_t i = 0; i < N; i++) {
        t0[i] = rng_uniform(&seed) - 0.5f;
        b0[i] = rng_uniform(&seed) - 0.5f;
        for (int p = 0; p < K; p++) d[p][i] = bf16_from_f32((rng_uniform(&seed) - 0.5f) * 1e-3f);
    }
    d[0][7] = bf16_from_f32(-0.0f); /* a lone -0 */
    d[0][8] = bf16_from_f32(-0.0f);
    d[1][8] = bf16_from_f32(-0.0f);
    const struct {
        int first;
        float mu;
        int nesterov;
    } cases[] = {{1, 0.9f, 1}, {0, 0.9f, 1}, {0, 0.8f, 0}, {1, 0.8f, 0}, {0, 0.0f, 1}};
    const uint16_t *dplus1[K];
    for (int p = 0; p < K; p++) dplus1[p] = d[p] + 1;
    for (uint32_t k = 1; k <= K; k++) {
        outer_sum_zero(g, N);
        for (uint32_t p = 0; p < k; p++) outer_sum_add_bf16(g, d[p], N);
        outer_mean_finish(g, N, k);
        outer_mean_bf16(g1, (const uint16_t *const *)d, k, N);
        assert_memory_equal(g1, g, N * sizeof *g);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            outer_sgd_step_to(tm, bm, t0, b0, cases[c].first, g, N, 0.7f, cases[c].mu, cases[c].nesterov);
            for (int build = 0; build < 2; build++) { /* the dispatched build (AVX2 here or not), the portable one */
                memset(to, 0xff, N * sizeof *to);
                memset(bo, 0xff, N * sizeof *bo);
                (build ? outer_mean_step_bf16_to_generic
                       : outer_mean_step_bf16_to)(to, bo, t0, b0, cases[c].first, (const uint16_t *const *)d, k, N,
                                                  0.7f, cases[c].mu, cases[c].nesterov);
                assert_memory_equal(to, tm, N * sizeof *to);
                assert_memory_equal(bo, bm, N * sizeof *bo);
            }
            /* an unaligned momentum (the scalar head of the AVX2 build) */
            outer_mean_step_bf16_to(to + 1, bo + 1, t0 + 1, b0 + 1, cases[c].first, (const uint16_t *const *)dplus1, k,
                                    N - 1, 0.7f, cases[c].mu, cases[c].nesterov);
            assert_memory_equal(to + 1, tm + 1, (N - 1) * sizeof *to);
            assert_memory_equal(bo + 1, bm + 1, (N - 1) * sizeof *bo);
        }
    }
    /* and it is not vacuous: another participant order or count changes the bits */
    outer_mean_bf16(g1, (const uint16_t *const *)d, 2, N);
    outer_mean_bf16(g, (const uint16_t *const *)d, 3, N);
    assert_int_not_equal(digest_f32(g1, N), digest_f32(g, N));
    for (int p = 0; p < K; p++) free(d[p]);
    free(t0);
    free(b0);
    free(g);
    free(tm);
    free(bm);
    free(to);
    free(bo);
    free(g1);
}

static void finite_checks_find_the_first_bad_index(void **state)
{
    (void)state;
    enum { N = 5000 };
    float *x = calloc(N, sizeof *x);
    uint16_t *h = calloc(N, sizeof *h);
    assert_true(x && h);
    size_t bad = 12345;
    assert_int_equal(outer_check_finite(x, N, &bad), 0);
    assert_int_equal(outer_check_finite_bf16(h, N, &bad), 0);
    assert_int_equal(outer_check_finite(x, 0, &bad), 0);
    x[4097] = INFINITY;
    x[4500] = NAN;
    assert_int_equal(outer_check_finite(x, N, &bad), -1);
    assert_int_equal(bad, 4097);
    x[3] = -NAN;
    assert_int_equal(outer_check_finite(x, N, &bad), -1);
    assert_int_equal(bad, 3);
    assert_int_equal(outer_check_finite(x, N, NULL), -1);
    x[2] = 3.4e38f; /* large but finite */
    assert_int_equal(outer_check_finite(x, 3, &bad), 0);
    h[1500] = bf16_from_f32(-INFINITY);
    h[4999] = bf16_from_f32(NAN);
    assert_int_equal(outer_check_finite_bf16(h, N, &bad), -1);
    assert_int_equal(bad, 1500);
    assert_int_equal(outer_check_finite_bf16(h + 1501, N - 1501, &bad), -1);
    assert_int_equal(bad, 4999 - 1501);
    h[0] = 0x7f7f; /* largest finite bf16 */
    assert_int_equal(outer_check_finite_bf16(h, 1500, &bad), 0);
    free(x);
    free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_workers_averaged_with_lr1_mu0_give_exact_result),
        cmocka_unit_test(nesterov_three_steps_match_torch),
        cmocka_unit_test(plain_momentum_matches_hand_computation),
        cmocka_unit_test(mu_zero_leaves_momentum_untouched),
        cmocka_unit_test(bf16_accumulate_path_matches_widened_f32),
        cmocka_unit_test(scaled_add_and_mean_use_the_scalar_formula),
        cmocka_unit_test(vectorised_nesterov_is_bit_identical_to_scalar),
        cmocka_unit_test(single_rounding_exactly_where_torch_has_one),
        cmocka_unit_test(every_build_rounds_where_torch_does),
        cmocka_unit_test(finite_checks_find_the_first_bad_index),
        cmocka_unit_test(out_of_place_step_matches_in_place),
        cmocka_unit_test(one_pass_mean_and_step_match_the_multi_pass_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
