/*
 * test_replay.c: common/format/replay.c, the snapshot + log replay that restores a shard's durable state,
 * checked bit for bit against applying outer_sgd_step directly (no Redis): first step, Nesterov and
 * plain momentum, no-op rounds (aux 0), momentum carried by a snapshot, mu 0, Delayed Nesterov
 * steps counted from a run's dn_t0 (a run resumed from a checkpoint), and rejection of blobs of the
 * wrong op, dtype or size.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/util.h"
#include "format/blob.h"
#include "format/replay.h"
#include "redis/replay_load.h"
#include "math/outer.h"
#include "math/outer_dn.h"

#define N 1003 /* odd: payloads after the msgpack header are unaligned, vector loops have tails */

typedef struct enc {
    uint8_t *buf;
    size_t len;
    replay_blob b;
} enc;

static void fill(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(&seed) * 2.0f - 1.0f;
}

static void encode(enc *e, blob_header *h, const float *payload, size_t count)
{
    char err[256];
    h->dtype = BLOB_F32;
    h->count = count;
    assert_int_equal(blob_encode(h, payload, count * sizeof(float), &e->buf, &e->len, err, sizeof err), 0);
    assert_int_equal(blob_decode(e->buf, e->len, &e->b.h, &e->b.payload, &e->b.len, err, sizeof err), 0);
}

static void snap_blob(enc *e, const float *theta, const float *mom, int64_t version)
{
    float *both = malloc(2 * N * sizeof(float));
    memcpy(both, theta, N * sizeof(float));
    if (mom) memcpy(both + N, mom, N * sizeof(float));
    blob_header h;
    blob_header_init(&h, "snap");
    h.shard = 3;
    h.version = version;
    h.flags = mom ? 1 : 0;
    encode(e, &h, both, mom ? 2 * N : N);
    free(both);
}

static void log_blob(enc *e, const float *g, int64_t version, float lr, float mu, int nesterov, int first, int aux)
{
    blob_header h;
    blob_header_init(&h, "log");
    h.shard = 3;
    h.version = version;
    h.lr = lr;
    h.mu = mu;
    h.flags = (nesterov ? 1 : 0) | (first ? 2 : 0);
    h.aux = aux;
    encode(e, &h, g, N);
}

typedef struct step {
    float lr, mu;
    int nesterov, aux;
    uint64_t seed;
} step;

/* Apply the steps directly (as a shard-server's commits did) and by replay; compare the bits. */
static void check_steps(const step *steps, int nsteps, int snap_has_mom)
{
    float *theta0 = malloc(N * sizeof(float)), *mom0 = malloc(N * sizeof(float));
    float *theta = malloc(N * sizeof(float)), *mom = calloc(N, sizeof(float));
    float *g = malloc(N * sizeof(float));
    fill(theta0, N, 1);
    fill(mom0, N, 2);
    memcpy(theta, theta0, N * sizeof(float));
    int has_mom = snap_has_mom;
    if (snap_has_mom) memcpy(mom, mom0, N * sizeof(float));
    enc snap, *logs = calloc((size_t)nsteps, sizeof *logs);
    snap_blob(&snap, theta0, snap_has_mom ? mom0 : NULL, 10);
    for (int i = 0; i < nsteps; i++) {
        fill(g, N, steps[i].seed);
        int first = !has_mom;
        if (steps[i].aux) {
            outer_sgd_step(theta, mom, first, g, N, steps[i].lr, steps[i].mu, steps[i].nesterov);
            if (steps[i].mu != 0.0f) has_mom = 1;
        }
        log_blob(&logs[i], g, 11 + i, steps[i].lr, steps[i].mu, steps[i].nesterov, first, steps[i].aux);
    }
    replay_blob *lb = calloc((size_t)nsteps + 1, sizeof *lb);
    for (int i = 0; i < nsteps; i++) lb[i] = logs[i].b;
    float *rt = malloc(N * sizeof(float)), *rm = malloc(N * sizeof(float));
    memset(rm, 0x7f, N * sizeof(float)); /* garbage: replay must overwrite or zero it */
    int rhas = -1;
    int64_t v = -1;
    char err[256];
    assert_int_equal(replay_shard(&snap.b, lb, nsteps, N, rt, rm, &rhas, &v, err, sizeof err), 0);
    assert_int_equal(v, 10 + nsteps);
    assert_int_equal(rhas, has_mom);
    assert_memory_equal(rt, theta, N * sizeof(float));
    if (has_mom)
        assert_memory_equal(rm, mom, N * sizeof(float));
    else
        for (size_t i = 0; i < N; i++) assert_true(rm[i] == 0.0f);
    assert_int_equal(digest_f32(rt, N), digest_f32(theta, N));
    free(snap.buf);
    for (int i = 0; i < nsteps; i++) free(logs[i].buf);
    free(logs);
    free(lb);
    free(theta0);
    free(mom0);
    free(theta);
    free(mom);
    free(g);
    free(rt);
    free(rm);
}

static void nesterov_from_fresh_snapshot(void **state)
{
    (void)state;
    step s[] = {{0.7f, 0.9f, 1, 3, 100}, {0.7f, 0.9f, 1, 3, 101}, {0.7f, 0.9f, 1, 2, 102}, {0.7f, 0.9f, 1, 3, 103}};
    check_steps(s, 4, 0);
}

static void plain_momentum_and_changed_tunables(void **state)
{
    (void)state;
    step s[] = {{0.5f, 0.8f, 0, 1, 7}, {0.25f, 0.95f, 0, 2, 8}, {0.7f, 0.9f, 1, 2, 9}};
    check_steps(s, 3, 0);
}

static void noop_rounds_change_nothing_but_the_version(void **state)
{
    (void)state;
    step s[] = {{0.7f, 0.9f, 1, 0, 1}, {0.7f, 0.9f, 1, 3, 2}, {0.7f, 0.9f, 1, 0, 3}, {0.7f, 0.9f, 1, 3, 4}};
    check_steps(s, 4, 0);
    step only_noops[] = {{0.7f, 0.9f, 1, 0, 5}, {0.7f, 0.9f, 1, 0, 6}};
    check_steps(only_noops, 2, 0); /* no momentum yet afterwards */
}

static void snapshot_with_momentum_continues_it(void **state)
{
    (void)state;
    step s[] = {{0.7f, 0.9f, 1, 3, 11}, {0.7f, 0.9f, 1, 3, 12}};
    check_steps(s, 2, 1);
    check_steps(s, 0, 1); /* the snapshot alone */
}

static void zero_momentum_never_creates_a_buffer(void **state)
{
    (void)state;
    step s[] = {{1.0f, 0.0f, 1, 2, 21}, {0.3f, 0.0f, 0, 2, 22}};
    check_steps(s, 2, 0);
}

static void wrong_blobs_are_rejected(void **state)
{
    (void)state;
    float *theta = malloc(2 * N * sizeof(float)), *mom = malloc(N * sizeof(float));
    fill(theta, 2 * N, 5);
    int has = 0;
    int64_t v = 0;
    char err[256];
    enc e;
    snap_blob(&e, theta, NULL, 0);
    assert_int_equal(replay_snapshot(&e.b.h, e.b.payload, e.b.len, N - 1, theta, mom, &has, &v, err, sizeof err), -1);
    assert_non_null(strstr(err, "count"));
    assert_int_equal(replay_log(&e.b.h, e.b.payload, e.b.len, N, theta, mom, &has, &v, err, sizeof err), -1);
    assert_non_null(strstr(err, "op"));
    free(e.buf);
    blob_header h;
    blob_header_init(&h, "snap");
    h.flags = 1; /* claims momentum but carries only θ */
    encode(&e, &h, theta, N);
    assert_int_equal(replay_snapshot(&e.b.h, e.b.payload, e.b.len, N, theta, mom, &has, &v, err, sizeof err), -1);
    free(e.buf);
    log_blob(&e, theta, 1, 0.7f, 0.9f, 1, 1, 2);
    assert_int_equal(replay_snapshot(&e.b.h, e.b.payload, e.b.len, N, theta, mom, &has, &v, err, sizeof err), -1);
    assert_int_equal(replay_log(&e.b.h, e.b.payload, e.b.len, N + 1, theta, mom, &has, &v, err, sizeof err), -1);
    free(e.buf);
    free(theta);
    free(mom);
}

/* A snapshot that claims version INT64_MAX: the next log entry is refused (its version would
 * overflow), not replayed into a negative version. */
static void version_overflow_is_refused(void **state)
{
    (void)state;
    float *theta = malloc(N * sizeof(float)), *mom = malloc(N * sizeof(float));
    fill(theta, N, 9);
    int has = 0;
    int64_t v = 0;
    char err[256];
    enc e;
    snap_blob(&e, theta, NULL, INT64_MAX);
    assert_int_equal(replay_snapshot(&e.b.h, e.b.payload, e.b.len, N, theta, mom, &has, &v, err, sizeof err), 0);
    assert_true(v == INT64_MAX);
    free(e.buf);
    log_blob(&e, theta, INT64_MAX, 0.7f, 0.9f, 1, 1, 2);
    assert_int_equal(replay_log(&e.b.h, e.b.payload, e.b.len, N, theta, mom, &has, &v, err, sizeof err), -1);
    assert_non_null(strstr(err, "overflow"));
    assert_true(v == INT64_MAX);
    free(e.buf);
    free(theta);
    free(mom);
}

/* A DN snapshot (θ, m, buf) at version 5 of a run with dn_t0 = 7 and N = 3, then DN log entries for
 * versions 6..10: the replay applies submission t = dn_t0 + version (13, 14, 15 = a momentum step,
 * 16, 17), exactly as the shard-server's commits did. A snapshot with the buffer but no momentum
 * carries the buffer right after θ. */
static void delayed_nesterov_counts_from_dn_t0(void **state)
{
    (void)state;
    const uint64_t t0 = 7;
    const uint32_t NB = 3;
    float *theta = malloc(N * sizeof(float)), *m = malloc(N * sizeof(float)), *buf = malloc(N * sizeof(float));
    float *g = malloc(N * sizeof(float)), *three = malloc(3 * N * sizeof(float));
    fill(theta, N, 21);
    fill(m, N, 22);
    fill(buf, N, 23);
    memcpy(three, theta, N * sizeof(float));
    memcpy(three + N, m, N * sizeof(float));
    memcpy(three + 2 * N, buf, N * sizeof(float));
    enc snap;
    blob_header h;
    blob_header_init(&h, "snap");
    h.version = 5;
    h.flags = 1 | 2;
    encode(&snap, &h, three, 3 * N);
    float *rt = malloc(N * sizeof(float)), *rm = malloc(N * sizeof(float)), *rb = malloc(N * sizeof(float));
    replay_state st = {.theta = rt, .mom = rm, .dnbuf = rb, .dn_buffer = NB, .dn_variant = DN_PAPER, .dn_t0 = t0};
    char err[256];
    assert_int_equal(replay_state_snapshot(&st, &snap.b.h, snap.b.payload, snap.b.len, N, err, sizeof err), 0);
    for (int64_t v = 6; v <= 10; v++) {
        fill(g, N, 300 + (uint64_t)v);
        outer_dn_step(DN_PAPER, theta, m, buf, g, N, t0 + (uint64_t)v, NB, 0.7f, 0.9f, 1);
        enc e;
        blob_header lh;
        blob_header_init(&lh, "log");
        lh.version = v;
        lh.lr = 0.7f;
        lh.mu = 0.9f;
        lh.flags = 1 | 4;
        lh.aux = 1;
        encode(&e, &lh, g, N);
        assert_int_equal(replay_state_log(&st, &e.b.h, e.b.payload, e.b.len, N, err, sizeof err), 0);
        free(e.buf);
    }
    assert_int_equal(st.version, 10);
    assert_memory_equal(rt, theta, N * sizeof(float));
    assert_memory_equal(rm, m, N * sizeof(float));
    assert_memory_equal(rb, buf, N * sizeof(float));
    /* the same entries counted from 0 would flush at other submissions: the offset matters */
    replay_state st0 = st;
    float *zt = malloc(N * sizeof(float)), *zm = malloc(N * sizeof(float)), *zb = malloc(N * sizeof(float));
    st0.theta = zt, st0.mom = zm, st0.dnbuf = zb, st0.dn_t0 = 0;
    assert_int_equal(replay_state_snapshot(&st0, &snap.b.h, snap.b.payload, snap.b.len, N, err, sizeof err), 0);
    for (int64_t v = 6; v <= 10; v++) {
        fill(g, N, 300 + (uint64_t)v);
        enc e;
        blob_header lh;
        blob_header_init(&lh, "log");
        lh.version = v;
        lh.lr = 0.7f;
        lh.mu = 0.9f;
        lh.flags = 1 | 4;
        lh.aux = 1;
        encode(&e, &lh, g, N);
        assert_int_equal(replay_state_log(&st0, &e.b.h, e.b.payload, e.b.len, N, err, sizeof err), 0);
        free(e.buf);
    }
    assert_true(memcmp(zt, theta, N * sizeof(float)) != 0);
    free(snap.buf);
    /* buffer without momentum: θ then the buffer */
    memcpy(three + N, buf, N * sizeof(float));
    blob_header_init(&h, "snap");
    h.version = 5;
    h.flags = 2;
    encode(&snap, &h, three, 2 * N);
    memset(rb, 0, N * sizeof(float));
    assert_int_equal(replay_state_snapshot(&st, &snap.b.h, snap.b.payload, snap.b.len, N, err, sizeof err), 0);
    assert_memory_equal(rb, buf, N * sizeof(float));
    assert_int_equal(st.has_mom, 0);
    free(snap.buf);
    free(theta);
    free(m);
    free(buf);
    free(g);
    free(three);
    free(rt);
    free(rm);
    free(rb);
    free(zt);
    free(zm);
    free(zb);
}

/* What rebuilds a shard below its version (a shut-down sync run's torn fragment, a repair's rollback): the
 * log up to that version, and the digest its commit recorded. */
static void log_upto_and_recorded_digest(void **state)
{
    (void)state;
    const char *log = "5.1,6.1,7.2,8.2";
    const struct {
        int64_t upto;
        const char *want;
    } cases[] = {{4, ""}, {5, "5.1"}, {7, "5.1,6.1,7.2"}, {8, log}, {INT64_MAX, log}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = replay_log_upto(log, cases[i].upto);
        assert_non_null(got);
        assert_string_equal(got, cases[i].want);
        free(got);
    }
    char *none = replay_log_upto(NULL, 3);
    assert_string_equal(none, "");
    free(none);
    int64_t v;
    assert_int_equal(replay_ref_version("12.3", &v), 0);
    assert_int_equal(v, 12);
    assert_int_equal(replay_ref_version("x.3", &v), -1);
    assert_int_equal(replay_ref_version("12", &v), -1);

    const char *digests = "7:00000000000000aa,8:00000000000000bb,9:short";
    char d[17] = "untouched";
    assert_int_equal(replay_recorded_digest(digests, 8, d), 1);
    assert_string_equal(d, "00000000000000bb");
    assert_int_equal(replay_recorded_digest(digests, 9, d), 0); /* not 16 hex digits */
    assert_int_equal(replay_recorded_digest(digests, 6, d), 0);
    assert_int_equal(replay_recorded_digest(NULL, 8, d), 0);
    assert_string_equal(d, "00000000000000bb"); /* (left alone when none is recorded) */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nesterov_from_fresh_snapshot),
        cmocka_unit_test(plain_momentum_and_changed_tunables),
        cmocka_unit_test(noop_rounds_change_nothing_but_the_version),
        cmocka_unit_test(snapshot_with_momentum_continues_it),
        cmocka_unit_test(zero_momentum_never_creates_a_buffer),
        cmocka_unit_test(wrong_blobs_are_rejected),
        cmocka_unit_test(version_overflow_is_refused),
        cmocka_unit_test(delayed_nesterov_counts_from_dn_t0),
        cmocka_unit_test(log_upto_and_recorded_digest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
