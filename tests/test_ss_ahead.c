/*
 * test_ss_ahead.c: a sync round's compute started before its barrier closes (shard-server/commit_ahead.c),
 * against a real redis-server.
 *
 * One shard-server holds the run's only shard; w1 and w2 are members. Every round's reply, the shard's
 * version and digest in Redis are checked bit for bit against common/math/outer.c's step from the v0
 * snapshot, whichever way the server got there:
 *   round 0: nobody is guessed yet (no earlier commit): no compute ahead;
 *   round 1: both Δ here -> computed ahead before anyone arrives; the commit takes it over, done;
 *   round 2: the compute ahead is still queued when the barrier closes: the commit takes its place in
 *            the queue and finishes it;
 *   round 3: w2 sends its Δ again, with other values, after the compute ahead started: it is dropped and
 *            computed again from the Δ now stored;
 *   round 4: the outer lr changes in Redis after the compute ahead: dropped, the commit computes with
 *            the new lr;
 *   round 5: with --compute-ahead off, nothing is computed before the barrier.
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

#include "commit.h"
#include "format/keys.h"
#include "math/outer.h"
#include "ss_harness.h"

#define RUN "ssahead"
#define NUMEL 300
#define MU 0.9f

static struct event_base *g_base;
static ss_ctx *g_server;
static float g_theta[NUMEL], g_mom[NUMEL];
static int g_first = 1;
static long long g_i1, g_i2;

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

static void do_push(const char *w, long long inc, long long round, const float *d)
{
    ssh_reply rep;
    assert_int_equal(ssh_push(g_server, 0, round, w, inc, d, NUMEL, &rep), 0);
    assert_string_equal(rep.h.op, "ack");
}

static void fill_delta(float *d, int seed)
{
    for (int i = 0; i < NUMEL; i++) d[i] = 0.001f * (float)((i * 37 + seed * 11) % 23) - 0.011f;
}

static ss_commit *ahead(void)
{
    return g_server->shards[0].ahead;
}

static int ahead_is_done(void *arg)
{
    (void)arg;
    return ahead() != NULL && ahead()->ahead_done;
}

static int reply_done(void *arg)
{
    return ((ssh_reply *)arg)->done;
}

/* Both arrive at round; get version round+1 and check it is the outer step (lr) of the mean of d1, d2. */
static void close_and_check(long long round, const float *d1, const float *d2, float lr)
{
    static float g[NUMEL];
    char digest[32], got[32];
    ssh_reply rep;
    ssh_arrive(RUN, "w1", g_i1, round, "open");
    ssh_arrive(RUN, "w2", g_i2, round, "closed");
    assert_int_equal(ssh_get(g_server, 0, round + 1, &rep), 0);
    outer_sum_zero(g, NUMEL);
    outer_sum_add_f32(g, d1, NUMEL);
    outer_sum_add_f32(g, d2, NUMEL);
    outer_mean_finish(g, NUMEL, 2);
    outer_sgd_step(g_theta, g_mom, g_first, g, NUMEL, lr, MU, 1);
    g_first = 0;
    assert_string_equal(rep.h.op, "params");
    assert_int_equal(rep.h.version, round + 1);
    assert_int_equal(rep.n, NUMEL);
    assert_memory_equal(rep.params, g_theta, NUMEL * sizeof(float));
    free(rep.params);
    assert_int_equal(ssh_shard_int(RUN, 0, "version"), round + 1);
    snprintf(digest, sizeof digest, "%016" PRIx64, digest_f32(g_theta, NUMEL));
    ssh_shard_str(RUN, 0, "digest", got, sizeof got);
    assert_string_equal(got, digest);
    assert_null(ahead()); /* taken over or dropped: nothing waits */
}

static void test_compute_ahead(void **state)
{
    (void)state;
    static float d[10][NUMEL];
    for (int i = 0; i < 10; i++) fill_delta(d[i], i + 1);
    ssh_read_v0(RUN, 0, g_theta, NUMEL);
    g_i1 = ssh_register(RUN, "w1");
    g_i2 = ssh_register(RUN, "w2");
    ss_metrics *m = &g_server->m;

    /* round 0: no earlier commit, so no guess */
    do_push("w1", g_i1, 0, d[0]);
    do_push("w2", g_i2, 0, d[1]);
    assert_null(ahead());
    close_and_check(0, d[0], d[1], 0.7f);
    assert_int_equal(m->ahead_used, 0);

    /* round 1: one Δ is not enough; with both, computed before anyone arrives */
    do_push("w1", g_i1, 1, d[2]);
    assert_null(ahead());
    do_push("w2", g_i2, 1, d[3]);
    assert_non_null(ahead());
    assert_int_equal(ssh_pump_until(g_base, ahead_is_done, NULL, 5000), 0);
    close_and_check(1, d[2], d[3], 0.7f);
    assert_int_equal(m->ahead_used, 1);
    assert_int_equal(m->ahead_discarded, 0);

    /* round 2: the compute queue is held (its event deleted once the compute ahead is queued), so the
     * commit finds the compute ahead still queued */
    do_push("w1", g_i1, 2, d[4]);
    do_push("w2", g_i2, 2, d[5]);
    event_del(g_server->cq_ev);
    assert_non_null(ahead());
    assert_false(ahead()->ahead_done);
    assert_ptr_equal(g_server->cq_head, ahead());
    ssh_arrive(RUN, "w1", g_i1, 2, "open");
    ssh_arrive(RUN, "w2", g_i2, 2, "closed");
    ssh_reply held;
    blob_header h;
    blob_header_init(&h, "get");
    h.shard = 0;
    h.version = 3;
    snprintf(h.worker, sizeof h.worker, "tester");
    /* the get stays parked: the barrier is read and the commit takes the queued compute over */
    assert_int_not_equal(ssh_request(g_server, &h, NULL, 0, &held, 500), 0);
    assert_null(ahead());
    assert_non_null(g_server->cq_head);
    assert_false(g_server->cq_head->ahead);
    assert_int_equal(g_server->cq_head->round, 2);
    assert_int_equal(m->ahead_used, 2);
    const struct timeval zero = {0, 0};
    evtimer_add(g_server->cq_ev, &zero); /* the queue runs again */
    assert_int_equal(ssh_pump_until(g_base, reply_done, &held, 5000), 0);
    static float g[NUMEL];
    outer_sum_zero(g, NUMEL);
    outer_sum_add_f32(g, d[4], NUMEL);
    outer_sum_add_f32(g, d[5], NUMEL);
    outer_mean_finish(g, NUMEL, 2);
    outer_sgd_step(g_theta, g_mom, 0, g, NUMEL, 0.7f, MU, 1);
    assert_string_equal(held.h.op, "params");
    assert_int_equal(held.h.version, 3);
    assert_memory_equal(held.params, g_theta, NUMEL * sizeof(float));
    free(held.params);
    assert_int_equal(ssh_shard_int(RUN, 0, "version"), 3);

    /* round 3: w2 resends other values after the compute ahead started: computed again from them */
    do_push("w1", g_i1, 3, d[6]);
    do_push("w2", g_i2, 3, d[7]);
    assert_int_equal(ssh_pump_until(g_base, ahead_is_done, NULL, 5000), 0);
    do_push("w2", g_i2, 3, d[8]);
    assert_int_equal(m->ahead_discarded, 1);
    close_and_check(3, d[6], d[8], 0.7f);
    assert_int_equal(m->ahead_used, 3);

    /* round 4: the outer lr changes after the compute ahead: dropped, the commit uses the new lr */
    do_push("w1", g_i1, 4, d[9]);
    do_push("w2", g_i2, 4, d[0]);
    assert_int_equal(ssh_pump_until(g_base, ahead_is_done, NULL, 5000), 0);
    char key[KEY_MAX];
    redisReply *r = ssh_cmd("HSET %s outer_lr 0.5", key_run(key, sizeof key, RUN, "tunables"));
    assert_non_null(r);
    freeReplyObject(r);
    for (int i = 0; i < 5000 && g_server->tun.lr != 0.5f; i++) ssh_pump_for(g_base, 1);
    assert_true(g_server->tun.lr == 0.5f);
    close_and_check(4, d[9], d[0], 0.5f);
    assert_int_equal(m->ahead_discarded, 2);
    assert_int_equal(m->ahead_used, 3);

    /* round 5, with --compute-ahead off: computed at the barrier only */
    g_server->opts.compute_ahead_off = 1;
    do_push("w1", g_i1, 5, d[1]);
    do_push("w2", g_i2, 5, d[2]);
    ssh_pump_for(g_base, 20);
    assert_null(ahead());
    close_and_check(5, d[1], d[2], 0.5f);
    assert_int_equal(m->ahead_used, 3);
    assert_int_equal(m->ahead_discarded, 2);
    assert_int_equal(m->rounds_committed, 6);
}

int main(void)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compute_ahead),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
