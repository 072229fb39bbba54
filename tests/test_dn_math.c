/* test_dn_math.c: Delayed Nesterov (common/outer_dn.h) on one parameter against hand-computed values:
 * theta0 = 0, submissions g_t = t for t = 1..7, N = 3, lr 0.1, mu 0.9 (expected values computed by
 * hand from the formulas in outer_dn.h, double precision). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "outer_dn.h"

static void run(int variant, const double *want_theta, const double *want_m) {
    float theta = 0, m = 0, buf = 0;
    for (int t = 1; t <= 7; t++) {
        float g = (float)t;
        outer_dn_step(variant, &theta, &m, &buf, &g, 1, (uint64_t)t, 3, 0.1f, 0.9f, 1);
        assert_true(fabs(theta - want_theta[t - 1]) < 1e-5);
        if (want_m) assert_true(fabs(m - want_m[t - 1]) < 1e-5);
        assert_true(t % 3 != 0 || buf == 0.0f); /* the buffer empties at every N-th submission */
    }
}

static void test_paper_algorithm3(void **state) {
    (void)state;
    const double theta[7] = {-0.0333333333, -0.1, -0.38, -0.5133333333, -0.68, -1.492, -1.7253333333};
    const double m[7] = {0, 0, 2.0, 2.0, 2.0, 6.8, 6.8};
    run(DN_PAPER, theta, m);
}

static void test_forgather_variant(void **state) {
    (void)state;
    const double theta[7] = {-0.1, -0.3, -0.68, -1.08, -1.58, -2.692, -3.392};
    run(DN_FORGATHER, theta, NULL);
}

/* Vector and scalar paths agree bit for bit (the step is element-wise). */
static void test_elementwise(void **state) {
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paper_algorithm3),
        cmocka_unit_test(test_forgather_variant),
        cmocka_unit_test(test_elementwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
