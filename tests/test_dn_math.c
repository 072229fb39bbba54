/* test_dn_math.c: Delayed Nesterov (common/math/outer_dn.h) on one parameter against hand-computed values:
 * theta0 = 0, submissions g_t = t for t = 1..7, N = 3, lr 0.1, mu 0.9 (expected values computed by
 * hand from the formulas in outer_dn.h, double precision); and bit for bit, on many random elements,
 * against the documented formulas written out here in C with their roundings: theta - lr*x and
 * g/N + mu*m once (fmaf, the C library's correctly rounded fused multiply-add), every other operation
 * once each. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "base/util.h"
#include "math/outer_dn.h"

static void run(int variant, const double *want_theta, const double *want_m)
{
    float theta = 0, m = 0, buf = 0;
    for (int t = 1; t <= 7; t++) {
        float g = (float)t;
        outer_dn_step(variant, &theta, &m, &buf, &g, 1, (uint64_t)t, 3, 0.1f, 0.9f, 1);
        assert_true(fabs(theta - want_theta[t - 1]) < 1e-5);
        if (want_m) assert_true(fabs(m - want_m[t - 1]) < 1e-5);
        assert_true(t % 3 != 0 || buf == 0.0f); /* the buffer empties at every N-th submission */
    }
}

static void test_paper_algorithm3(void **state)
{
    (void)state;
    const double theta[7] = {-0.0333333333, -0.1, -0.38, -0.5133333333, -0.68, -1.492, -1.7253333333};
    const double m[7] = {0, 0, 2.0, 2.0, 2.0, 6.8, 6.8};
    run(DN_PAPER, theta, m);
}

static void test_forgather_variant(void **state)
{
    (void)state;
    const double theta[7] = {-0.1, -0.3, -0.68, -1.08, -1.58, -2.692, -3.392};
    run(DN_FORGATHER, theta, NULL);
}

/* Vector and scalar paths agree bit for bit (the step is element-wise). */
static void test_elementwise(void **state)
{
    (void)state;
    float th[37], m[37] = {0}, b[37] = {0}, g[37];
    for (int i = 0; i < 37; i++) th[i] = 0.01f * (float)i;
    for (int t = 1; t <= 6; t++) {
        for (int i = 0; i < 37; i++) g[i] = 0.001f * (float)(i * t);
        outer_dn_step(DN_PAPER, th, m, b, g, 37, (uint64_t)t, 3, 0.5f, 0.9f, 1);
    }
    for (int i = 0; i < 37; i++) {
        float t1 = 0.01f * (float)i, m1 = 0, b1 = 0;
        for (int t = 1; t <= 6; t++) {
            float g1 = 0.001f * (float)(i * t);
            outer_dn_step(DN_PAPER, &t1, &m1, &b1, &g1, 1, (uint64_t)t, 3, 0.5f, 0.9f, 1);
        }
        assert_memory_equal(&t1, &th[i], sizeof(float));
    }
}

/* One submission t of the documented formulas (docs/async.md) on one element. fused = 0 rounds every
 * product on its own (what the kernels did before they matched torch): the test checks it differs. */
static void dn_reference(int variant, float *theta, float *m, float *buf, float g, uint64_t t, uint32_t N, float lr,
                         float mu, int fused)
{
    volatile float fN = (float)N;
#define ADD_ALPHA(a, b, alpha) (fused ? fmaf((alpha), (b), (a)) : (a) + (volatile float){(alpha) * (b)})
    volatile float sum = *buf + g;
    int flush = t % N == 0;
    if (variant == DN_PAPER) {
        volatile float gN = g / fN;
        if (flush) {
            volatile float mm = mu * *m, bN = sum / fN;
            *m = mm + bN;
            *theta = ADD_ALPHA(*theta, ADD_ALPHA(gN, *m, mu), -lr);
            *buf = 0.0f;
        } else {
            *buf = sum;
            *theta = ADD_ALPHA(*theta, gN, -lr);
        }
    } else if (!flush) { /* forgather */
        *buf = sum;
        *theta = ADD_ALPHA(*theta, g, -lr);
    } else { /* forgather: torch's SGD(nesterov) step with the window mean; the first one starts m */
        volatile float gbar = sum / fN, mm = mu * *m;
        *m = t == N ? gbar : mm + gbar;
        *theta = ADD_ALPHA(*theta, ADD_ALPHA(gbar, *m, mu), -lr);
        *buf = 0.0f;
    }
#undef ADD_ALPHA
}

/* Both variants, 3 windows of N = 3, 1031 random elements (vector body and tail): every bit of theta,
 * m and buf after every submission equals the formula's. */
static void test_bitwise_against_the_documented_formula(void **state)
{
    (void)state;
    enum { E = 1031, N = 3, T = 9 };
    static float th[E], m[E], buf[E], g[E], rth[E], rm[E], rbuf[E], uth[E], um[E], ubuf[E];
    const float lr = 0.7f, mu = 0.9f;
    for (int variant = DN_PAPER; variant <= DN_FORGATHER; variant++) {
        uint64_t seed = 23;
        for (size_t i = 0; i < E; i++) {
            th[i] = rth[i] = uth[i] = rng_uniform(&seed) - 0.5f;
            m[i] = rm[i] = um[i] = buf[i] = rbuf[i] = ubuf[i] = 0.0f;
        }
        size_t differ = 0;
        for (uint64_t t = 1; t <= T; t++) {
            for (size_t i = 0; i < E; i++) g[i] = rng_uniform(&seed) - 0.5f;
            outer_dn_step(variant, th, m, buf, g, E, t, N, lr, mu, 1);
            for (size_t i = 0; i < E; i++) {
                dn_reference(variant, &rth[i], &rm[i], &rbuf[i], g[i], t, N, lr, mu, 1);
                dn_reference(variant, &uth[i], &um[i], &ubuf[i], g[i], t, N, lr, mu, 0);
            }
            assert_memory_equal(th, rth, sizeof th);
            assert_memory_equal(m, rm, sizeof m);
            assert_memory_equal(buf, rbuf, sizeof buf);
        }
        for (size_t i = 0; i < E; i++) differ += memcmp(&rth[i], &uth[i], sizeof(float)) != 0;
        print_message("variant %d: %zu of %d elements differ when rounded twice\n", variant, differ, E);
        assert_true(differ > E / 10);
    }
}

/* --staleness-weight: min(1, (1+ref)/(1+tau)) and its square root, exactly (hand-computed values), and
 * the names coordinator init and runconf accept. */
static void test_stale_weight(void **state)
{
    (void)state;
    assert_true(outer_stale_weight(STALE_W_NONE, 100, 0) == 1.0);
    assert_true(outer_stale_weight(STALE_W_INVERSE, 3, 3) == 1.0);  /* no staler than the reference */
    assert_true(outer_stale_weight(STALE_W_INVERSE, 0, 3) == 1.0);  /* fresher: never above 1 */
    assert_true(outer_stale_weight(STALE_W_INVERSE, 7, 3) == 0.5);  /* 4 / 8 */
    assert_true(outer_stale_weight(STALE_W_INVERSE, 3, 0) == 0.25); /* 1 / 4 */
    assert_true(outer_stale_weight(STALE_W_SQRT, 15, 3) == 0.5);    /* sqrt(4 / 16) */
    assert_true(outer_stale_weight(STALE_W_SQRT, 1, 0) == sqrt(0.5));
    assert_true((float)outer_stale_weight(STALE_W_INVERSE, 2, 0) == 1.0f / 3.0f);
    assert_int_equal(outer_stale_rule_parse("none"), STALE_W_NONE);
    assert_int_equal(outer_stale_rule_parse("inverse"), STALE_W_INVERSE);
    assert_int_equal(outer_stale_rule_parse("sqrt"), STALE_W_SQRT);
    assert_int_equal(outer_stale_rule_parse("Sqrt"), -1);
    assert_int_equal(outer_stale_rule_parse(NULL), -1);
}

/* --async-rule rebase: g + (now - base), each difference and each sum rounded once (hand-computed values,
 * one where rounding the difference first matters), and the names coordinator init and runconf accept. */
static void test_rebase(void **state)
{
    (void)state;
    float g[4] = {0.5f, -1.0f, 1.0f, 0.0f};
    const float now[4] = {2.0f, 3.0f, 1.0f + 0x1p-23f, 7.0f};
    const float base[4] = {1.0f, 3.5f, 1.0f, 7.0f};
    outer_rebase(g, now, base, 1.0f, 4);
    assert_true(g[0] == 1.5f);                   /* 0.5 + (2 - 1) */
    assert_true(g[1] == -1.5f);                  /* -1 + (3 - 3.5) */
    assert_true(g[2] == 1.0f + 0x1p-23f);        /* 1 + 2^-23: exact because the difference is taken first */
    assert_true(g[3] == 0.0f && !signbit(g[3])); /* a fresh submission (base = now) keeps its g */
    float h[2] = {1.0f, 0.0f};
    const float hn[2] = {3.0f, 0.1f}, hb[2] = {1.0f, 0.0f};
    outer_rebase(h, hn, hb, 0.5f, 2); /* --rebase-fraction 0.5: g + 0.5 (now - base) */
    assert_true(h[0] == 2.0f);
    assert_true(h[1] == 0.5f * 0.1f);
    assert_int_equal(outer_async_rule_parse("plain"), ASYNC_RULE_PLAIN);
    assert_int_equal(outer_async_rule_parse("rebase"), ASYNC_RULE_REBASE);
    assert_int_equal(outer_async_rule_parse("Rebase"), -1);
    assert_int_equal(outer_async_rule_parse(NULL), -1);
}

/* --async-lookahead: c = G stale / moved (0 without a stretch to extrapolate from), and the start
 * got + c (got - prev), each operation rounded once, in place over prev as lookahead.c calls it. */
static void test_lookahead(void **state)
{
    (void)state;
    assert_true(outer_lookahead_coef(0.5, 3, 4) == 0.375f);
    assert_true(outer_lookahead_coef(1.0, 2, 3) == (float)(2.0 / 3.0));
    assert_true(outer_lookahead_coef(0.5, 0, 4) == 0.0f); /* nobody else moved it: no lookahead */
    assert_true(outer_lookahead_coef(0.5, 3, 0) == 0.0f);
    float prev[3] = {1.0f, 2.0f, 1.0f};
    const float got[3] = {2.0f, 1.0f, 1.0f + 0x1p-23f};
    outer_lookahead(prev, got, prev, 0.5f, 3);
    assert_true(prev[0] == 2.5f); /* 2 + 0.5 (2 - 1) */
    assert_true(prev[1] == 0.5f); /* 1 + 0.5 (1 - 2) */
    assert_true(prev[2] == 1.0f + 0x1p-22f); /* 1 + 2^-23 + 2^-24, a tie, rounds to even once */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paper_algorithm3),
        cmocka_unit_test(test_forgather_variant),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_bitwise_against_the_documented_formula),
        cmocka_unit_test(test_stale_weight),
        cmocka_unit_test(test_rebase),
        cmocka_unit_test(test_lookahead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
