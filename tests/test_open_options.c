/*
 * test_open_options.c: diloco_open refuses timing options that cannot work, before it connects to anything,
 * naming the field as diloco_options names it. A zero sync or request timeout made every sync fail at once,
 * a zero wait_poll_ms spun on Redis, a negative interval or retry count wrapped into nonsense; the CLI
 * checked its own flags, but a program calling libdiloco (or the Python package) got none of it. The URL
 * points at a closed port: an option that passed the checks would show as a connection error instead.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "diloco.h"

static void refused(const char *field, void (*set)(diloco_options *))
{
    diloco_options o;
    diloco_options_default(&o);
    o.redis_url = "redis://127.0.0.1:1";
    o.run = "opts";
    o.connect_timeout_ms = 0; /* one attempt: a check that let it through fails fast, with another message */
    set(&o);
    diloco *d = NULL;
    char err[256] = "";
    assert_int_equal(diloco_open(&o, NULL, 0, &d, err, sizeof err), -1);
    assert_null(d);
    printf("  %s\n", err);
    assert_non_null(strstr(err, field));
}

static void zero_sync_timeout(diloco_options *o)
{
    o->sync_timeout_ms = 0;
}
static void zero_net_timeout(diloco_options *o)
{
    o->net_timeout_ms = 0;
}
static void zero_wait_poll(diloco_options *o)
{
    o->wait_poll_ms = 0;
}
static void negative_heartbeat(diloco_options *o)
{
    o->heartbeat_interval_ms = -1;
}
static void negative_connect(diloco_options *o)
{
    o->connect_timeout_ms = -5;
}
static void negative_retries(diloco_options *o)
{
    o->max_sync_retries = -1;
}

static void negative_in_flight(diloco_options *o)
{
    o->fragments_in_flight = -2;
}

static void test_refused(void **state)
{
    (void)state;
    refused("diloco_options.sync_timeout_ms must be at least 1, got 0", zero_sync_timeout);
    refused("diloco_options.net_timeout_ms must be at least 1, got 0", zero_net_timeout);
    refused("diloco_options.wait_poll_ms must be at least 1, got 0", zero_wait_poll);
    refused("diloco_options.heartbeat_interval_ms must be at least 0, got -1", negative_heartbeat);
    refused("diloco_options.connect_timeout_ms must be at least 0, got -5", negative_connect);
    refused("diloco_options.max_sync_retries must be at least 0, got -1", negative_retries);
    refused("diloco_options.fragments_in_flight must be at least 0, got -2", negative_in_flight);
}

static void keep_defaults(diloco_options *o)
{
    (void)o;
}

/* The defaults pass the checks: what fails then is the connection to the closed port. */
static void test_defaults_pass(void **state)
{
    (void)state;
    refused("127.0.0.1:1", keep_defaults);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_refused), cmocka_unit_test(test_defaults_pass)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
