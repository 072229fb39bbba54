/*
 * test_util.c: the helpers of common/base/util.c: strict number parsing, backoff bounds and jitter,
 * the deterministic PRNG, clocks, err_set's truncation and NULL safety, and csv_has's whole entries.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "base/util.h"

static void parse_int_is_strict(void **state)
{
    (void)state;
    long long v = 0;
    assert_int_equal(parse_int("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(parse_int("-7", -10, 10, &v), 0);
    assert_int_equal(v, -7);
    assert_int_equal(parse_int("", 0, 100, &v), -1);
    assert_int_equal(parse_int(NULL, 0, 100, &v), -1);
    assert_int_equal(parse_int("42x", 0, 100, &v), -1);
    assert_int_equal(parse_int("4 2", 0, 100, &v), -1);
    assert_int_equal(parse_int("abc", 0, 100, &v), -1);
    assert_int_equal(parse_int("101", 0, 100, &v), -1);
    assert_int_equal(parse_int("-1", 0, 100, &v), -1);
    assert_int_equal(parse_int("99999999999999999999999", 0, 100, &v), -1);
    assert_int_equal(v, -7); /* untouched on failure */
}

static void parse_double_is_strict(void **state)
{
    (void)state;
    double d = 0;
    assert_int_equal(parse_double("0.7", &d), 0);
    assert_true(d == 0.7);
    assert_int_equal(parse_double("-1e-3", &d), 0);
    assert_true(d == -1e-3);
    assert_int_equal(parse_double("", &d), -1);
    assert_int_equal(parse_double("0.7s", &d), -1);
    assert_int_equal(parse_double("x", &d), -1);
    assert_int_equal(parse_double("1e999", &d), -1);
    assert_int_equal(parse_double("inf", &d), -1);
    assert_int_equal(parse_double("-Infinity", &d), -1);
    assert_int_equal(parse_double("nan", &d), -1);
}

static void backoff_grows_caps_and_jitters_within_25_percent(void **state)
{
    (void)state;
    for (int k = 0; k < 200; k++) {
        unsigned b0 = backoff_ms(0, 100, 5000);
        unsigned b3 = backoff_ms(3, 100, 5000);
        unsigned b20 = backoff_ms(20, 100, 5000);
        unsigned b_huge = backoff_ms(4000000000u, 100, 5000);
        assert_true(b0 >= 75 && b0 <= 125);
        assert_true(b3 >= 600 && b3 <= 1000);
        assert_true(b20 >= 3750 && b20 <= 6250);
        assert_true(b_huge >= 3750 && b_huge <= 6250);
    }
    /* Jitter actually varies. */
    unsigned first = backoff_ms(5, 100, 100000);
    int varied = 0;
    for (int k = 0; k < 50 && !varied; k++) varied = backoff_ms(5, 100, 100000) != first;
    assert_true(varied);
}

static void prng_is_deterministic_and_uniform_in_unit_interval(void **state)
{
    (void)state;
    uint64_t a = 123, b = 123;
    for (int i = 0; i < 100; i++) assert_int_equal(splitmix64(&a), splitmix64(&b));
    /* Reference value of SplitMix64 with seed 0 (from the published algorithm). */
    uint64_t z = 0;
    assert_int_equal(splitmix64(&z), 0xe220a8397b1dcdafull);
    uint64_t s = 9;
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        float u = rng_uniform(&s);
        assert_true(u >= 0.0f && u < 1.0f);
        sum += u;
    }
    assert_true(sum / 100000 > 0.49 && sum / 100000 < 0.51);
}

static void clocks_advance(void **state)
{
    (void)state;
    uint64_t t0 = now_ms();
    sleep_ms(30);
    uint64_t t1 = now_ms();
    assert_true(t1 - t0 >= 29 && t1 - t0 < 1000);
    assert_true(wall_ms() > 1600000000000ull); /* after 2020 */
}

static void err_set_truncates_and_is_null_safe(void **state)
{
    (void)state;
    char err[8];
    err_set(err, sizeof err, "value %d is too large", 12345);
    assert_string_equal(err, "value 1");
    err_set(NULL, 100, "x");
    err_set(err, 0, "y");
    assert_string_equal(err, "value 1");
}

static void csv_has_matches_whole_entries(void **state)
{
    (void)state;
    assert_true(csv_has("w1:1,w2:3,w3:2", "w1:1"));
    assert_true(csv_has("w1:1,w2:3,w3:2", "w2:3"));
    assert_true(csv_has("w1:1,w2:3,w3:2", "w3:2"));
    assert_false(csv_has("w1:1,w2:3,w3:2", "w2:1"));  /* another incarnation */
    assert_false(csv_has("w1:1,w2:3,w3:2", "w1"));    /* a prefix of an entry */
    assert_false(csv_has("w1:1,w2:3,w3:2", "w3:2,")); /* more than an entry */
    assert_false(csv_has("w11:1", "w1:1"));
    assert_false(csv_has("", "w1"));
    assert_true(csv_has("w1", "w1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_int_is_strict),
        cmocka_unit_test(parse_double_is_strict),
        cmocka_unit_test(backoff_grows_caps_and_jitters_within_25_percent),
        cmocka_unit_test(prng_is_deterministic_and_uniform_in_unit_interval),
        cmocka_unit_test(clocks_advance),
        cmocka_unit_test(err_set_truncates_and_is_null_safe),
        cmocka_unit_test(csv_has_matches_whole_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
