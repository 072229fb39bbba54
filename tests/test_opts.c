/*
 * test_opts.c: the option parser of common/base/opts.c: every kind of option, bounds, both value
 * spellings, missing values, unknown options and positional arguments, --help, and the rest array a
 * second parser reads; opts_parse_cmd, the front every command's main uses, and its exit statuses.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <math.h>
#include <string.h>
#include <cmocka.h>

#include "base/opts.h"

typedef struct {
    int flag, on, count, level, count_given;
    long long big;
    double rate;
    const char *name;
    char buf[8];
    int port;
} vals;

static int parse_port(const char *v, void *dest)
{
    if (strcmp(v, "http") == 0) {
        *(int *)dest = 80;
        return 0;
    }
    return -1;
}

static void table(vals *v, opt_spec *s)
{
    memset(v, 0, sizeof *v);
    v->on = 1;
    v->count = 7;
    const opt_spec t[] = {
        {.name = "flag", .alias = 'f', .kind = OPT_FLAG, .dest = &v->flag},
        {.name = "no-on", .kind = OPT_CLEAR, .dest = &v->on},
        {.name = "count",
         .alias = 'n',
         .kind = OPT_INT,
         .dest = &v->count,
         .lo = 1,
         .hi = 10,
         .given = &v->count_given},
        {.name = "big", .kind = OPT_LLONG, .dest = &v->big, .lo = 0, .hi = INT64_MAX},
        {.name = "rate", .kind = OPT_DOUBLE, .dest = &v->rate, .min = 0, .max = 1},
        {.name = "name", .kind = OPT_STRING, .dest = &v->name},
        {.name = "buf", .kind = OPT_STRING, .dest = v->buf, .cap = sizeof v->buf},
        {.name = "gain", .kind = OPT_DOUBLE, .dest = &v->rate, .min = 0.5, .max = HUGE_VAL},
        {.name = "level", .kind = OPT_CHOICE, .dest = &v->level, .choices = "debug|info|warn"},
        {.name = "port", .kind = OPT_CUSTOM, .dest = &v->port, .parse = parse_port, .wants = "a port name"},
        {0},
    };
    memcpy(s, t, sizeof t);
}

#define NSPEC 11

static int run(vals *v, char *err, int argc, char **argv)
{
    opt_spec s[NSPEC];
    table(v, s);
    return opts_parse(s, argc, argv, 1, NULL, NULL, err, 256);
}

static void every_kind_both_spellings(void **state)
{
    (void)state;
    vals v;
    char err[256] = "";
    char *argv[] = {"prog", "-f",         "--no-on", "--count=3", "--big",   "123456789012", "--rate",
                    "0.25", "--name=x=y", "--buf",   "abc",       "--level", "warn",         "--port=http"};
    assert_int_equal(run(&v, err, 14, argv), 0);
    assert_int_equal(v.flag, 1);
    assert_int_equal(v.on, 0);
    assert_int_equal(v.count, 3);
    assert_int_equal(v.count_given, 1);
    assert_true(v.big == 123456789012LL);
    assert_true(v.rate == 0.25);
    assert_string_equal(v.name, "x=y");
    assert_string_equal(v.buf, "abc");
    assert_int_equal(v.level, 2);
    assert_int_equal(v.port, 80);
}

static void defaults_stay_when_absent(void **state)
{
    (void)state;
    vals v;
    char err[256] = "";
    char *argv[] = {"prog"};
    assert_int_equal(run(&v, err, 1, argv), 0);
    assert_int_equal(v.count, 7);
    assert_int_equal(v.count_given, 0);
    assert_int_equal(v.on, 1);
    assert_null(v.name);
}

static void expect_error(int argc, char **argv, const char *want)
{
    vals v;
    char err[256] = "";
    assert_int_equal(run(&v, err, argc, argv), -1);
    if (strstr(err, want) == NULL) fail_msg("error '%s' lacks '%s'", err, want);
    assert_non_null(strstr(err, "(see --help)"));
}

static void bad_values_name_the_option(void **state)
{
    (void)state;
    expect_error(3, (char *[]){"p", "--count", "11"}, "--count wants an integer in [1, 10], got '11'");
    expect_error(2, (char *[]){"p", "--count=0"}, "--count wants an integer in [1, 10], got '0'");
    expect_error(2, (char *[]){"p", "--count=3x"}, "got '3x'");
    expect_error(2, (char *[]){"p", "--big=-1"}, "--big wants an integer in [0, 9223372036854775807]");
    expect_error(2, (char *[]){"p", "--rate=1.5"}, "--rate wants a number in [0, 1], got '1.5'");
    expect_error(2, (char *[]){"p", "--rate="}, "--rate wants a number in [0, 1], got ''");
    expect_error(2, (char *[]){"p", "--gain=0.25"}, "--gain wants a number >= 0.5, got '0.25'");
    expect_error(2, (char *[]){"p", "--level=loud"}, "--level wants debug, info or warn, got 'loud'");
    expect_error(2, (char *[]){"p", "--buf=abcdefgh"}, "--buf wants a value of at most 7 characters");
    expect_error(2, (char *[]){"p", "--port=ftp"}, "--port wants a port name, got 'ftp'");
    expect_error(2, (char *[]){"p", "--flag=yes"}, "--flag wants nothing, 0 or 1, got 'yes'");
    expect_error(2, (char *[]){"p", "--no-on=1"}, "--no-on takes no value, got '1'");
}

static void a_flag_takes_an_optional_0_or_1(void **state)
{
    (void)state;
    vals v;
    char err[256];
    assert_int_equal(run(&v, err, 2, (char *[]){"p", "--flag=1"}), 0);
    assert_int_equal(v.flag, 1);
    assert_int_equal(run(&v, err, 3, (char *[]){"p", "--flag", "--flag=0"}), 0);
    assert_int_equal(v.flag, 0);
}

static void a_bad_value_leaves_the_default(void **state)
{
    (void)state;
    vals v;
    char err[256];
    assert_int_equal(run(&v, err, 2, (char *[]){"p", "--count=99"}), -1);
    assert_int_equal(v.count, 7);
    assert_int_equal(v.count_given, 0);
}

static void missing_values(void **state)
{
    (void)state;
    expect_error(2, (char *[]){"p", "--count"}, "--count wants an integer in [1, 10], got nothing");
    expect_error(2, (char *[]){"p", "-n"}, "--count wants");
    expect_error(2, (char *[]){"p", "--name"}, "--name wants a value, got nothing");
}

static void unknown_and_positional_fail_without_rest(void **state)
{
    (void)state;
    expect_error(2, (char *[]){"p", "--nope"}, "unknown option --nope");
    expect_error(2, (char *[]){"p", "-x"}, "unknown option -x");
    expect_error(2, (char *[]){"p", "stray"}, "unexpected argument 'stray'");
    expect_error(3, (char *[]){"p", "--", "--count"}, "unknown option --count");
}

static void help_is_reported(void **state)
{
    (void)state;
    vals v;
    char err[256];
    assert_int_equal(run(&v, err, 3, (char *[]){"p", "--count=2", "--help"}), 1);
    assert_int_equal(run(&v, err, 2, (char *[]){"p", "-h"}), 1);
}

static void rest_keeps_unknown_tokens_in_order(void **state)
{
    (void)state;
    vals v;
    opt_spec s[NSPEC];
    table(&v, s);
    char err[256] = "";
    char *argv[] = {"p",    "--lr",   "0.5", "--count", "4",  "--steps=9", "-q",
                    "file", "--seed", "-3",  "--flag",  "--", "--count",   "5"};
    char *rest[14];
    int nrest = -1;
    assert_int_equal(opts_parse(s, 14, argv, 1, rest, &nrest, err, sizeof err), 0);
    assert_int_equal(v.count, 4);
    assert_int_equal(v.flag, 1);
    const char *want[] = {"--lr", "0.5", "--steps=9", "-q", "file", "--seed", "-3", "--count", "5"};
    assert_int_equal(nrest, 9);
    for (int k = 0; k < nrest; k++) assert_string_equal(rest[k], want[k]);
}

static FILE *g_usage_to;
static int g_usage_calls;

static void record_usage(FILE *f)
{
    g_usage_to = f;
    g_usage_calls++;
}

/* --help prints the usage to stdout and exits 0; a bad option prints no usage and exits 2. */
static void a_command_answers_help_and_bad_options_alike(void **state)
{
    (void)state;
    vals v;
    opt_spec s[NSPEC];
    table(&v, s);
    char *help[] = {"p", "--count", "3", "--help"}, *bad[] = {"p", "--count", "x"}, *good[] = {"p", "--count", "3"};
    assert_int_equal(opts_parse_cmd("p", record_usage, s, 4, help, 1, NULL, NULL), 1);
    assert_int_equal(g_usage_calls, 1);
    assert_ptr_equal(g_usage_to, stdout);
    assert_int_equal(opts_exit_status(1), 0);
    assert_int_equal(opts_parse_cmd("p", record_usage, s, 3, bad, 1, NULL, NULL), -1);
    assert_int_equal(g_usage_calls, 1);
    assert_int_equal(opts_exit_status(-1), OPTS_EXIT_USAGE);
    assert_int_equal(OPTS_EXIT_USAGE, 2);
    assert_int_equal(opts_parse_cmd("p", record_usage, s, 3, good, 1, NULL, NULL), 0);
    assert_int_equal(v.count, 3);
    assert_int_equal(g_usage_calls, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_kind_both_spellings),
        cmocka_unit_test(defaults_stay_when_absent),
        cmocka_unit_test(bad_values_name_the_option),
        cmocka_unit_test(a_flag_takes_an_optional_0_or_1),
        cmocka_unit_test(a_bad_value_leaves_the_default),
        cmocka_unit_test(missing_values),
        cmocka_unit_test(unknown_and_positional_fail_without_rest),
        cmocka_unit_test(help_is_reported),
        cmocka_unit_test(rest_keeps_unknown_tokens_in_order),
        cmocka_unit_test(a_command_answers_help_and_bad_options_alike),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
