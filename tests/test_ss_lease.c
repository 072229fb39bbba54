/*
 * test_ss_lease.c: the shard-server's lease logic (shard-server/lease.c) against a real redis-server.
 *
 * Two servers of one run, A and B, on one event base the test drives. A takes the run's only shard,
 * loads it and keeps it across renewals without a new epoch. Then A stops beating (as if SIGSTOPped)
 * while still trusting its lease (its bound pinned ahead: the worst case the fence exists for), B takes
 * the shard over after the ttl with a higher epoch, and A's commit of a round (started when A hears the
 * round's barrier close, shard-server/subscribe.c) is refused by dl_commit (FENCED): the version in Redis
 * does not move and A gives the shard up, so a get finds it moved. Last, B's own bound passes
 * without a renewal: lease_check_expiry drops the shard and a get is answered `moved`.
 * Exits 77 (skipped) when redis-server is not installed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/util.h"
#include "ss_harness.h"

#define RUN "sslease"
#define TTL_MS 1000
#define NUMEL 256

static struct event_base *g_base;

static int setup(void **state)
{
    (void)state;
    return ssh_setup(RUN, "-n 1 --shards 1 --trainer quadratic --numel 256 --compress fp32", &g_base);
}

static int teardown(void **state)
{
    (void)state;
    ssh_teardown(g_base);
    g_base = NULL;
    return 0;
}

static int owner_is(void *id)
{
    char o[128];
    ssh_shard_str(RUN, 0, "owner", o, sizeof o);
    return strcmp(o, id) == 0;
}

/* A worker w that has pushed d to ss for round 0 (its incarnation; it arrives later). */
static long long join_push(ss_ctx *ss, const char *w, const float *d)
{
    long long inc = ssh_register(RUN, w);
    ssh_reply rep;
    assert_int_equal(ssh_push(ss, 0, 0, w, inc, d, NUMEL, &rep), 0);
    assert_string_equal(rep.h.op, "ack");
    return inc;
}

static void test_lease_takeover_fence_expiry(void **state)
{
    (void)state;
    ss_ctx *a = ssh_server(g_base, RUN, "A", TTL_MS);
    assert_non_null(a);
    assert_int_equal(ssh_pump_until(g_base, ssh_shard_ready, &a->shards[0], 5000), 0);
    assert_true(owner_is("A"));
    long long e1 = ssh_shard_int(RUN, 0, "epoch");
    assert_true(e1 >= 1);
    assert_int_equal(a->shards[0].epoch, e1);

    /* renewals keep the lease and its epoch */
    uint64_t valid_before = a->lease_valid_until;
    ssh_pump_for(g_base, 3 * TTL_MS);
    assert_true(ss_lease_valid(a));
    assert_true(a->lease_valid_until > valid_before);
    assert_int_equal(ssh_shard_int(RUN, 0, "epoch"), e1);
    assert_int_equal(a->shards[0].state, SH_READY);

    /* a pseudo-gradient for round 0 reaches A; then A stops renewing but still trusts its lease */
    float d[NUMEL];
    for (int i = 0; i < NUMEL; i++) d[i] = 0.01f * (float)(i % 7) - 0.02f;
    long long inc = join_push(a, "w1", d);
    event_del(a->beat_timer);
    a->lease_valid_until = now_ms() + 60000;

    ss_ctx *b = ssh_server(g_base, RUN, "B", TTL_MS);
    assert_non_null(b);
    assert_int_equal(ssh_pump_until(g_base, owner_is, "B", 5 * TTL_MS), 0);
    assert_int_equal(ssh_pump_until(g_base, ssh_shard_ready, &b->shards[0], 5000), 0);
    long long e2 = ssh_shard_int(RUN, 0, "epoch");
    assert_true(e2 > e1);
    assert_int_equal(b->shards[0].epoch, e2);
    assert_int_equal(a->shards[0].state, SH_READY); /* A has not noticed */

    /* w1 arrives, closing the barrier: A commits round 0 under epoch e1: dl_commit is fenced, Redis stays
     * at version 0 */
    char digest0[32], digest_after[32];
    ssh_shard_str(RUN, 0, "digest", digest0, sizeof digest0);
    ssh_arrive(RUN, "w1", inc, 0, "closed");
    ssh_reply rep;
    assert_int_equal(ssh_get(a, 0, 1, &rep), 0);
    assert_int_equal(a->m.conflicts, 1);
    assert_int_equal(a->m.rounds_committed, 0);
    assert_int_equal(ssh_shard_int(RUN, 0, "version"), 0);
    ssh_shard_str(RUN, 0, "digest", digest_after, sizeof digest_after);
    assert_string_equal(digest_after, digest0);
    assert_string_equal(rep.h.op, "moved");
    assert_int_equal(a->shards[0].state, SH_FREE);
    free(rep.params);

    /* B's bound passes without a renewal: the shard is dropped, requests are redirected */
    event_del(b->beat_timer);
    b->lease_valid_until = now_ms() - 1;
    assert_false(ss_lease_valid(b));
    assert_int_equal(b->shards[0].state, SH_READY);
    lease_check_expiry(b);
    assert_int_equal(b->shards[0].state, SH_FREE);
    assert_int_equal(ssh_get(b, 0, 0, &rep), 0);
    assert_string_equal(rep.h.op, "moved");
    ssh_server_free(a);
    ssh_server_free(b);
}

int main(void)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0) return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lease_takeover_fence_expiry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
