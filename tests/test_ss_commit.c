/*
 * test_ss_commit.c: the commit state machine of one shard (shard-server/commit*.c, ops.c) against a real
 * redis-server.
 *
 * One shard-server holds the run's only shard; two workers are members. Round 0: gets of version 1
 * while the barrier is open wait parked (the server subscribed to the barrier closes), more of them than
 * the 64 pushes a shard may park per pending round (a run of many workers sends one early get each), and
 * the close, announced on dl:{R}:closes, answers every one: w2's Δ is missing, `need w2`; the same get from a server that
 * does not hear closes is answered `wait`; with both Δ,
 * the commit is computed, its log entry written and dl_commit applied: the reply, the shard's version
 * and digest in Redis are version 1 with the bits that common/math/outer.c gives from the v0 snapshot.
 * Round 1: w2 dies (deregisters) without pushing: it is dropped and version 2 is w1's step alone, its
 * momentum carried from round 0, again checked bit for bit. A resend of round 0 after its commit is
 * answered STALE and counted as a duplicate (dl:{R}:state duplicates), not as a rejection.
 * Exits 77 (skipped) when redis-server is not installed.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "format/keys.h"
#include "math/outer.h"
#include "ss_harness.h"

#define RUN "sscommit"
#define NUMEL 300
#define LR 0.7f
#define MU 0.9f

static struct event_base *g_base;
static ss_ctx *g_server;

static int setup(void **state)
{
    (void)state;
    g_server = ssh_setup_one_server(RUN,
                                    "-n 2 --shards 1 --trainer quadratic --numel 300 --compress fp32 --outer-lr 0.7 "
                                    "--outer-momentum 0.9 --seed 3",
                                    &g_base);
    return g_server != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ssh_teardown_one_server(g_server, g_base);
    g_server = NULL;
    g_base = NULL;
    return 0;
}

static void do_push(const char *w, long long inc, int round, const float *d)
{
    ssh_reply rep;
    assert_int_equal(ssh_push(g_server, 0, round, w, inc, d, NUMEL, &rep), 0);
    assert_string_equal(rep.h.op, "ack");
}

static int subscribed(void *ss)
{
    return ((ss_ctx *)ss)->closes.subscribed;
}

static int replied(void *rep)
{
    return ((ssh_reply *)rep)->done;
}

/* gets parked at once in round 0: more than a shard parks pushes (64 per pending round, 4 rounds) */
#define NGETS 300

/* A get of version v of shard 0 sent now, waiting up to wait_ms; its reply comes into *rep whenever it comes. */
static int get_sent_within(long long v, ssh_reply *rep, int wait_ms)
{
    blob_header h;
    blob_header_init(&h, "get");
    h.shard = 0;
    h.version = v;
    snprintf(h.worker, sizeof h.worker, "tester");
    return ssh_request(g_server, &h, NULL, 0, rep, wait_ms);
}

static int get_sent(long long v, ssh_reply *rep)
{
    return get_sent_within(v, rep, 300);
}

static int get_sent_now(long long v, ssh_reply *rep)
{
    return get_sent_within(v, rep, 0);
}

static void fill_delta(float *d, int seed)
{
    for (int i = 0; i < NUMEL; i++) d[i] = 0.001f * (float)((i * 37 + seed * 11) % 23) - 0.011f;
}

/* The commit's reply, the shard in Redis and the log entry are version v with parameters theta. */
static void check_committed(const ssh_reply *rep, long long v, const float *theta)
{
    char digest[32], got[32], key[KEY_MAX], suffix[64];
    assert_string_equal(rep->h.op, "params");
    assert_int_equal(rep->h.version, v);
    assert_int_equal(rep->n, NUMEL);
    assert_memory_equal(rep->params, theta, NUMEL * sizeof(float));
    assert_int_equal(ssh_shard_int(RUN, 0, "version"), v);
    snprintf(digest, sizeof digest, "%016" PRIx64, digest_f32(theta, NUMEL));
    ssh_shard_str(RUN, 0, "digest", got, sizeof got);
    assert_string_equal(got, digest);
    snprintf(suffix, sizeof suffix, "log:%lld:%lld", v, (long long)g_server->shards[0].epoch);
    redisReply *r = ssh_cmd("EXISTS %s", key_shard(key, sizeof key, RUN, 0, suffix));
    assert_non_null(r);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
}

static void test_commit_rounds(void **state)
{
    (void)state;
    static float theta[NUMEL], mom[NUMEL], g[NUMEL], d1[NUMEL], d2[NUMEL], d3[NUMEL];
    ssh_read_v0(RUN, 0, theta, NUMEL);
    fill_delta(d1, 1);
    fill_delta(d2, 2);
    fill_delta(d3, 3);
    long long i1 = ssh_register(RUN, "w1"), i2 = ssh_register(RUN, "w2");
    ssh_reply rep;

    /* round 0, barrier open: the get waits parked for the close (no reply within 300 ms) */
    assert_int_equal(ssh_pump_until(g_base, subscribed, g_server, 5000), 0);
    ssh_arrive(RUN, "w1", i1, 0, "open");
    do_push("w1", i1, 0, d1);
    static ssh_reply parked, many[NGETS]; /* the harness writes each reply here when it comes */
    assert_int_not_equal(get_sent(1, &parked), 0);
    for (int i = 0; i < NGETS; i++) assert_int_not_equal(get_sent_now(1, &many[i]), 0);
    assert_int_equal(g_server->shards[0].nparked, 1 + NGETS);
    /* closed, w2's Δ missing: the close is heard and answers every parked get with need w2 */
    uint64_t heard = g_server->m.closes_heard;
    ssh_arrive(RUN, "w2", i2, 0, "closed");
    assert_int_equal(ssh_pump_until(g_base, replied, &parked, 5000), 0);
    assert_string_equal(parked.h.op, "need");
    assert_string_equal(parked.h.text, "w2");
    for (int i = 0; i < NGETS; i++) {
        assert_int_equal(ssh_pump_until(g_base, replied, &many[i], 5000), 0);
        assert_string_equal(many[i].h.op, "need");
    }
    assert_true(g_server->m.closes_heard > heard);
    assert_int_equal(ssh_shard_int(RUN, 0, "version"), 0);
    /* a server that does not hear the closes (its subscription lost) answers a get of an open barrier
     * `wait` at once: round 1's barrier is open once round 0 committed, below */
    assert_int_equal(ssh_shard_int(RUN, 0, "version"), 0);
    /* every Δ present: version 1 = outer step of the mean (w1, w2 in that order) */
    do_push("w2", i2, 0, d2);
    assert_int_equal(ssh_get(g_server, 0, 1, &rep), 0);
    outer_sum_zero(g, NUMEL);
    outer_sum_add_f32(g, d1, NUMEL);
    outer_sum_add_f32(g, d2, NUMEL);
    outer_mean_finish(g, NUMEL, 2);
    outer_sgd_step(theta, mom, 1, g, NUMEL, LR, MU, 1);
    check_committed(&rep, 1, theta);
    free(rep.params);
    /* w1 sends round 0 again (it did not see the commit): STALE, so it fetches version 1, but counted as a
     * duplicate, not a rejection (issue 25: a failover left "rejections 8" in status) */
    assert_int_equal(ssh_push(g_server, 0, 0, "w1", i1, d1, NUMEL, &rep), 0);
    assert_string_equal(rep.h.op, "err");
    assert_string_equal(rep.h.code, "STALE");
    assert_non_null(strstr(rep.h.text, "has committed already"));
    assert_int_equal(g_server->m.duplicates, 1);
    assert_int_equal(g_server->m.rejections, 0);

    /* round 1, open: not subscribed, `wait` */
    g_server->closes.subscribed = 0;
    assert_int_equal(ssh_get(g_server, 0, 2, &rep), 0);
    assert_string_equal(rep.h.op, "wait");
    g_server->closes.subscribed = 1;
    /* round 1: w2 dies before pushing: dropped, version 2 is w1's Δ alone */
    ssh_arrive(RUN, "w1", i1, 1, "open");
    ssh_arrive(RUN, "w2", i2, 1, "closed");
    do_push("w1", i1, 1, d3);
    char incs[24];
    snprintf(incs, sizeof incs, "%lld", i2);
    const char *args[2] = {"w2", incs};
    redisReply *r = ssh_fcall(RUN, "dl_deregister", 2, args);
    assert_non_null(r);
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    assert_int_equal(ssh_get(g_server, 0, 2, &rep), 0);
    outer_sum_zero(g, NUMEL);
    outer_sum_add_f32(g, d3, NUMEL);
    outer_mean_finish(g, NUMEL, 1);
    outer_sgd_step(theta, mom, 0, g, NUMEL, LR, MU, 1);
    check_committed(&rep, 2, theta);
    free(rep.params);
    const char *bargs[2] = {"0", "1"};
    r = ssh_fcall(RUN, "dl_barrier", 2, bargs);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[2]->str, "w2"); /* the round's dropped participants */
    freeReplyObject(r);
    assert_int_equal(g_server->m.rounds_committed, 2);
    char key[KEY_MAX];
    r = ssh_cmd("HMGET %s duplicates rejections", key_run(key, sizeof key, RUN, "state"));
    assert_non_null(r);
    assert_string_equal(r->element[0]->str, "1");
    assert_string_equal(r->element[1]->str, "0");
    freeReplyObject(r);
}

/* A Δ that comes while the commit's membership checks are out is no missing Δ. The commit read the barrier
 * and found w3's Δ missing, asked Redis whether w3 is a member, and meanwhile w3's push (its own check sent
 * before the commit's) was stored: the commit answered its parked gets with `need w3` all the same, and w3,
 * told so, sent its Δ again, to be told STALE once the next commit had taken the first one (a worker then
 * took its round as lost: it_stale_need). Now the commit looks again once its checks are back and computes
 * when every participant's Δ is there. Made exact here: the get starts the commit (dl_barrier goes out), w3's
 * push goes out (its dl_member after it), then the loop runs: Redis answers in that order. */
static void test_delta_during_checks(void **state)
{
    (void)state;
    static float d1[NUMEL], d3[NUMEL];
    const char *a1[1] = {"w1"};
    redisReply *r = ssh_fcall(RUN, "dl_member", 1, a1);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long i1 = r->integer, i3 = ssh_register(RUN, "w3"), v = ssh_shard_int(RUN, 0, "version");
    freeReplyObject(r);
    fill_delta(d1, 4);
    fill_delta(d3, 5);
    /* w3 joined for the next round: w1 alone makes this one */
    ssh_arrive(RUN, "w1", i1, v, "closed");
    assert_int_equal(ssh_pump_until(g_base, subscribed, g_server, 5000), 0);
    do_push("w1", i1, (int)v, d1);
    static ssh_reply got, pushed;
    assert_int_equal(ssh_get(g_server, 0, v + 1, &got), 0);
    assert_string_equal(got.h.op, "params");
    free(got.params);
    v++;
    ssh_arrive(RUN, "w1", i1, v, "open");
    ssh_arrive(RUN, "w3", i3, v, "closed");
    assert_int_equal(ssh_pump_until(g_base, subscribed, g_server, 5000), 0);
    do_push("w1", i1, (int)v, d1);
    assert_int_not_equal(get_sent_now(v + 1, &got), 0);
    /* (sent, not waited for: its dl_member goes to Redis after the commit's dl_barrier, before its dl_member) */
    assert_int_not_equal(ssh_push_within(g_server, 0, v, "w3", i3, d3, NUMEL, &pushed, 0), 0);
    assert_int_equal(ssh_pump_until(g_base, replied, &got, 5000), 0);
    assert_int_equal(ssh_pump_until(g_base, replied, &pushed, 5000), 0);
    assert_string_equal(pushed.h.op, "ack");
    printf("get of version %lld answered %s %s\n", v + 1, got.h.op, got.h.op[0] == 'n' ? got.h.text : "");
    assert_string_equal(got.h.op, "params");
    assert_int_equal(got.h.version, v + 1);
    assert_int_equal(ssh_shard_int(RUN, 0, "version"), v + 1);
    free(got.params);
}

/* A payload starts where the sender's header ends, at any address; the commit reads it in place as
 * bf16 codes or floats, so req_take_frame moves it to an aligned one: every header length mod 8. */
static void test_payload_aligned(void **state)
{
    (void)state;
    const uint16_t codes[5] = {0x3f80, 0xbf80, 0x4000, 0x0001, 0x7f7f};
    int residues = 0;
    for (int name_len = 1; name_len <= 16; name_len++) {
        blob_header h;
        blob_header_init(&h, "push");
        h.dtype = BLOB_BF16;
        h.count = 5;
        memset(h.worker, 'w', (size_t)name_len);
        h.worker[name_len] = 0;
        uint8_t hdr[BLOB_HEADER_MAX];
        char err[256];
        int hlen = blob_encode_header(&h, codes, sizeof codes, hdr, sizeof hdr, err, sizeof err);
        assert_true(hlen > 0);
        residues |= 1 << (hlen % FRAME_PAYLOAD_ALIGN);
        uint8_t *frame = malloc((size_t)hlen + sizeof codes + FRAME_SLACK);
        assert_non_null(frame);
        memcpy(frame, hdr, (size_t)hlen);
        memcpy(frame + hlen, codes, sizeof codes);
        ss_req req = {0};
        assert_int_equal(req_take_frame(&req, frame, (size_t)hlen + sizeof codes, err, sizeof err), 0);
        assert_int_equal((uintptr_t)req.payload % FRAME_PAYLOAD_ALIGN, 0);
        assert_int_equal(req.payload_len, sizeof codes);
        assert_memory_equal(req.payload, codes, sizeof codes);
        assert_string_equal(req.h.worker, h.worker);
        free(frame);
    }
    assert_int_equal(residues, 0xff); /* the loop met every misalignment */
}

int main(void)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_payload_aligned),
        cmocka_unit_test(test_commit_rounds),
        cmocka_unit_test(test_delta_during_checks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
