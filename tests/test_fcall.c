/*
 * test_fcall.c: common/redis/fcall.c, the one place that lays out a call of the run's function library
 * ("FCALL fn 1 dl:{R}:config args..."), for the shard-server's asynchronous links and the coordinator's
 * synchronous connection alike (issue 25: the coordinator had its own copy, named like the
 * shard-server's).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "redis/fcall.h"

static void lays_out_the_call(void **state)
{
    (void)state;
    const char *args[2] = {"w1", "7"}, *argv[6];
    assert_int_equal(fcall_argv(argv, 6, "dl_kick", "dl:{R}:config", 2, args), 6);
    const char *want[6] = {"FCALL", "dl_kick", "1", "dl:{R}:config", "w1", "7"};
    for (int i = 0; i < 6; i++) assert_string_equal(argv[i], want[i]);
    assert_int_equal(fcall_argv(argv, 4, "dl_version", "dl:{R}:config", 0, NULL), 4);
}

static void refuses_a_vector_too_small(void **state)
{
    (void)state;
    const char *args[3] = {"a", "b", "c"}, *argv[6];
    assert_int_equal(fcall_argv(argv, 6, "dl_set", "dl:{R}:config", 3, args), -1);
    assert_int_equal(fcall_argv(argv, 3, "dl_version", "dl:{R}:config", 0, NULL), -1);
    assert_int_equal(fcall_argv(argv, 6, "dl_set", "dl:{R}:config", -1, args), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lays_out_the_call),
        cmocka_unit_test(refuses_a_vector_too_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
