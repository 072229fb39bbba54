/*
 * test_runconf.c: the parsing half of a run's configuration (common/format/runconf.c): the bounds lists
 * of dl:{R}:config (digits only, in order, no overflow) and runconf_from_reply on HGETALL replies as a
 * Redis sends them (RESP read with hiredis' own reader), including fields that are not strings, and the
 * codec settings (compress, download) and an async run's rules (staleness weight, rebase and its fraction),
 * and a resumed run's Delayed Nesterov schedule per shard (dn_t0_shards: one count per shard, digits only).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "format/blob.h"
#include "format/runconf.h"
#include "redis/runconf_load.h"

static void bounds_lists(void **state)
{
    (void)state;
    uint64_t *b;
    int n;
    char err[256];
    assert_int_equal(runconf_parse_bounds_u64("0,5,10", &b, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_true(b[0] == 0 && b[1] == 5 && b[2] == 10);
    free(b);
    assert_int_equal(runconf_parse_bounds_u64("0,18446744073709551615", &b, &n, err, sizeof err), 0);
    free(b);
    static const char *const bad[] = {
        "", "0,", ",1", "0,,1", "-1", "0,-1", " 1", "0, 1", "+1", "0,5,3", "0,18446744073709551616", "0,1x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (runconf_parse_bounds_u64(bad[i], &b, &n, err, sizeof err) == 0) fail_msg("accepted '%s'", bad[i]);
        assert_non_null(strstr(err, "malformed bounds"));
    }
}

/* the reply hiredis makes of resp (one complete reply) */
static redisReply *reply(const char *resp)
{
    redisReader *rd = redisReaderCreate();
    void *r = NULL;
    redisReaderFeed(rd, resp, strlen(resp));
    assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
    assert_non_null(r);
    redisReaderFree(rd);
    return r;
}

static int from(const char *resp, runconf *rc, char *err, size_t errlen)
{
    redisReply *r = reply(resp);
    memset(rc, 0, sizeof *rc);
    int ret = runconf_from_reply(r, rc, err, errlen);
    freeReplyObject(r);
    return ret;
}

static void config_from_hgetall(void **state)
{
    (void)state;
    runconf rc;
    char err[256];
    assert_int_equal(from("*10\r\n$5\r\nnumel\r\n$2\r\n10\r\n$12\r\nshard_bounds\r\n$6\r\n0,4,10\r\n"
                          "$11\r\nfrag_bounds\r\n$3\r\n0,2\r\n$4\r\nmode\r\n$5\r\nasync\r\n"
                          "$9\r\ndn_buffer\r\n$1\r\n3\r\n",
                          &rc, err, sizeof err),
                     0);
    assert_int_equal(rc.numel, 10);
    assert_int_equal(rc.nshards, 2);
    assert_int_equal(runconf_shard_numel(&rc, 1), 6);
    assert_int_equal(rc.nfragments, 1);
    assert_int_equal(rc.async, 1);
    assert_int_equal(rc.dn_buffer, 3);
    assert_int_equal(rc.snapshot_every, 8);
    runconf_free(&rc);
    /* a field whose value is not a string (an integer reply) counts as absent, not as a NULL string */
    assert_int_equal(from("*6\r\n$5\r\nnumel\r\n:10\r\n$12\r\nshard_bounds\r\n$4\r\n0,10\r\n"
                          "$11\r\nfrag_bounds\r\n$3\r\n0,1\r\n",
                          &rc, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "lacks numel"));
    runconf_free(&rc);
    assert_int_equal(from("*6\r\n$5\r\nnumel\r\n$2\r\n10\r\n$12\r\nshard_bounds\r\n$3\r\n0,9\r\n"
                          "$11\r\nfrag_bounds\r\n$3\r\n0,1\r\n",
                          &rc, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "do not cover"));
    runconf_free(&rc);
    assert_int_equal(from("*6\r\n$5\r\nnumel\r\n$2\r\n10\r\n$12\r\nshard_bounds\r\n$4\r\n0,10\r\n"
                          "$11\r\nfrag_bounds\r\n$3\r\n0,2\r\n",
                          &rc, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "fragment bounds"));
    runconf_free(&rc);
    /* an integer where a field name goes: strcmp on its NULL string was a crash */
    assert_int_equal(from("*4\r\n:1\r\n$1\r\nx\r\n$5\r\nnumel\r\n$2\r\n10\r\n", &rc, err, sizeof err), -1);
    assert_non_null(strstr(err, "lacks numel"));
    runconf_free(&rc);
    assert_int_equal(from(":5\r\n", &rc, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a hash"));
}

/* the codec and download settings: defaults of runs made before them, and the combinations refused */
static void codec_settings(void **state)
{
    (void)state;
    runconf rc;
    char err[256];
#define BASE "$5\r\nnumel\r\n$2\r\n10\r\n$12\r\nshard_bounds\r\n$4\r\n0,10\r\n$11\r\nfrag_bounds\r\n$3\r\n0,1\r\n"
    assert_int_equal(from("*6\r\n" BASE, &rc, err, sizeof err), 0);
    assert_int_equal(rc.compress, BLOB_BF16);
    assert_int_equal(rc.download_update, 0);
    runconf_free(&rc);
    assert_int_equal(
        from("*10\r\n" BASE "$8\r\ncompress\r\n$4\r\nint4\r\n$8\r\ndownload\r\n$6\r\nupdate\r\n", &rc, err, sizeof err),
        0);
    assert_int_equal(rc.compress, BLOB_I4);
    assert_int_equal(rc.download_update, 1);
    assert_true(runconf_accepts_dtype(&rc, BLOB_I4) && !runconf_accepts_dtype(&rc, BLOB_BF16));
    runconf_free(&rc);
    assert_int_equal(from("*8\r\n" BASE "$8\r\ncompress\r\n$4\r\nint5\r\n", &rc, err, sizeof err), -1);
    assert_non_null(strstr(err, "codec 'int5'"));
    runconf_free(&rc);
    assert_int_equal(
        from("*10\r\n" BASE "$4\r\nmode\r\n$5\r\nasync\r\n$8\r\ndownload\r\n$6\r\nupdate\r\n", &rc, err, sizeof err),
        -1);
    assert_non_null(strstr(err, "not for async runs"));
    runconf_free(&rc);
    assert_int_equal(from("*8\r\n" BASE "$8\r\ndownload\r\n$4\r\nsome\r\n", &rc, err, sizeof err), -1);
    runconf_free(&rc);
    /* topk: its density, bits and beta, their defaults (a run made before --topk-bits: 2 bits), bits out of
     * range refused, and async refused */
    assert_int_equal(from("*14\r\n" BASE "$8\r\ncompress\r\n$4\r\ntopk\r\n$12\r\ntopk_density\r\n$4\r\n0.05\r\n"
                          "$9\r\ntopk_beta\r\n$3\r\n0.9\r\n$9\r\ntopk_bits\r\n$1\r\n4\r\n",
                          &rc, err, sizeof err),
                     0);
    assert_int_equal(rc.compress, BLOB_TOPK);
    assert_true(rc.topk_density == 0.05 && rc.topk_beta == 0.9f);
    assert_int_equal(rc.topk_bits, 4);
    runconf_free(&rc);
    assert_int_equal(from("*8\r\n" BASE "$8\r\ncompress\r\n$4\r\ntopk\r\n", &rc, err, sizeof err), 0);
    assert_true(rc.topk_density == 0.02 && rc.topk_beta == 0.95f);
    assert_int_equal(rc.topk_bits, 2);
    runconf_free(&rc);
    const char *bad_bits[] = {"1", "9", "4x", ""};
    for (size_t i = 0; i < sizeof bad_bits / sizeof bad_bits[0]; i++) {
        char reply[512];
        snprintf(reply, sizeof reply, "*10\r\n" BASE "$8\r\ncompress\r\n$4\r\ntopk\r\n$9\r\ntopk_bits\r\n$%zu\r\n%s\r\n",
                 strlen(bad_bits[i]), bad_bits[i]);
        assert_int_equal(from(reply, &rc, err, sizeof err), -1);
        assert_non_null(strstr(err, "topk_bits"));
        runconf_free(&rc);
    }
    assert_int_equal(from("*10\r\n" BASE "$8\r\ncompress\r\n$4\r\ntopk\r\n$12\r\ntopk_density\r\n$1\r\n0\r\n", &rc,
                          err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "topk_density"));
    runconf_free(&rc);
    assert_int_equal(
        from("*10\r\n" BASE "$8\r\ncompress\r\n$4\r\ntopk\r\n$4\r\nmode\r\n$5\r\nasync\r\n", &rc, err, sizeof err),
        -1);
    assert_non_null(strstr(err, "async"));
    runconf_free(&rc);
    /* --async-lookahead: off in runs made before it, read in an async run, refused out of [0, 2] or in a
     * sync run */
    assert_int_equal(from("*6\r\n" BASE, &rc, err, sizeof err), 0);
    assert_true(rc.async_lookahead == 0.0f);
    runconf_free(&rc);
    assert_int_equal(from("*10\r\n" BASE "$4\r\nmode\r\n$5\r\nasync\r\n$15\r\nasync_lookahead\r\n$3\r\n0.5\r\n", &rc, err,
                          sizeof err),
                     0);
    assert_true(rc.async_lookahead == 0.5f);
    runconf_free(&rc);
    const char *bad_ahead[] = {"-1", "2.5", "x", ""};
    for (size_t i = 0; i < sizeof bad_ahead / sizeof bad_ahead[0]; i++) {
        char reply[512];
        snprintf(reply, sizeof reply,
                 "*10\r\n" BASE "$4\r\nmode\r\n$5\r\nasync\r\n$15\r\nasync_lookahead\r\n$%zu\r\n%s\r\n",
                 strlen(bad_ahead[i]), bad_ahead[i]);
        assert_int_equal(from(reply, &rc, err, sizeof err), -1);
        assert_non_null(strstr(err, "async_lookahead"));
        runconf_free(&rc);
    }
    assert_int_equal(from("*8\r\n" BASE "$15\r\nasync_lookahead\r\n$3\r\n0.5\r\n", &rc, err, sizeof err), -1);
    assert_non_null(strstr(err, "needs an async run"));
    runconf_free(&rc);
#undef BASE
}

/* the config in resp is refused with a message that contains says */
static void refused(const char *resp, const char *says)
{
    runconf rc;
    char err[256];
    assert_int_equal(from(resp, &rc, err, sizeof err), -1);
    if (!strstr(err, says)) fail_msg("'%s' does not say '%s'", err, says);
    runconf_free(&rc);
}

/* an async run's staleness weight, rule, rebase window and fraction: read, refused when unknown or out of
 * range, and the first thing wrong is the one reported (the staleness weight before the rule) */
static void async_rules(void **state)
{
    (void)state;
    runconf rc;
    char err[256];
#define BASE "$5\r\nnumel\r\n$2\r\n10\r\n$12\r\nshard_bounds\r\n$4\r\n0,10\r\n$11\r\nfrag_bounds\r\n$3\r\n0,1\r\n"
#define ASYNC "$4\r\nmode\r\n$5\r\nasync\r\n"
    assert_int_equal(from("*14\r\n" BASE ASYNC
                          "$10\r\nasync_rule\r\n$6\r\nrebase\r\n$13\r\nrebase_window\r\n$1\r\n3\r\n"
                          "$15\r\nrebase_fraction\r\n$4\r\n0.25\r\n",
                          &rc, err, sizeof err),
                     0);
    assert_true(runconf_rebase(&rc) && rc.rebase_window == 3 && rc.rebase_fraction == 0.25f);
    runconf_free(&rc);
    const char *bad_frac[] = {"0", "1.5", "0.5x", "", "nan"};
    for (size_t i = 0; i < sizeof bad_frac / sizeof bad_frac[0]; i++) {
        char reply[512];
        snprintf(reply, sizeof reply, "*10\r\n" BASE ASYNC "$15\r\nrebase_fraction\r\n$%zu\r\n%s\r\n",
                 strlen(bad_frac[i]), bad_frac[i]);
        refused(reply, "rebase_fraction");
    }
    refused("*10\r\n" BASE ASYNC "$10\r\nasync_rule\r\n$6\r\nrebase\r\n", "rebase_window of 1 or more (got none)");
    refused("*12\r\n" BASE ASYNC "$10\r\nasync_rule\r\n$5\r\nnewer\r\n$12\r\nstale_weight\r\n$5\r\nnewer\r\n",
            "staleness weight 'newer'");
    refused("*10\r\n" BASE "$8\r\ncompress\r\n$4\r\ntopk\r\n$9\r\ntopk_beta\r\n$2\r\n-1\r\n", "topk_beta '-1'");
#undef ASYNC
#undef BASE
}

/* dn_t0_shards: each shard's DN count before version 0 (runconf_dn_t0), else dn_t0 for all; a list that is
 * not one count per shard is refused. runconf_format_counts writes what runconf_parse_counts reads. */
static void dn_schedule_per_shard(void **state)
{
    (void)state;
    runconf rc;
    char err[256];
#define BASE "$5\r\nnumel\r\n$2\r\n10\r\n$12\r\nshard_bounds\r\n$6\r\n0,4,10\r\n$11\r\nfrag_bounds\r\n$5\r\n0,1,2\r\n"
#define DN "$4\r\nmode\r\n$5\r\nasync\r\n$5\r\ndn_t0\r\n$1\r\n4\r\n"
    assert_int_equal(from("*10\r\n" BASE DN, &rc, err, sizeof err), 0);
    assert_null(rc.dn_t0_shard);
    assert_true(runconf_dn_t0(&rc, 0) == 4 && runconf_dn_t0(&rc, 1) == 4);
    runconf_free(&rc);
    assert_int_equal(from("*12\r\n" BASE DN "$12\r\ndn_t0_shards\r\n$3\r\n5,4\r\n", &rc, err, sizeof err), 0);
    assert_true(runconf_dn_t0(&rc, 0) == 5 && runconf_dn_t0(&rc, 1) == 4);
    runconf_free(&rc);
    static const char *const bad[] = {"5", "5,4,3", "5,", ",4", "5,-4", "5, 4", "5,4x", "", "5,9223372036854775808"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char reply[512];
        snprintf(reply, sizeof reply, "*12\r\n" BASE DN "$12\r\ndn_t0_shards\r\n$%zu\r\n%s\r\n", strlen(bad[i]),
                 bad[i]);
        refused(reply, "is not one count per shard (2 shards)");
    }
#undef DN
#undef BASE
    const uint64_t v[3] = {0, 9223372036854775807ull, 12};
    char *s = runconf_format_counts(v, 3);
    assert_string_equal(s, "0,9223372036854775807,12");
    uint64_t *back;
    assert_int_equal(runconf_parse_counts(s, 3, &back), 0);
    assert_memory_equal(back, v, sizeof v);
    free(back);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bounds_lists),
        cmocka_unit_test(config_from_hgetall),
        cmocka_unit_test(codec_settings),
        cmocka_unit_test(async_rules),
        cmocka_unit_test(dn_schedule_per_shard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
