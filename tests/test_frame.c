/*
 * test_frame.c: socket framing (common/net/frame.c) over socketpairs and loopback TCP: a small and a
 * multi-megabyte frame arrive intact, an oversize frame is refused without being read, a stream cut
 * mid-frame and a corrupted payload are errors, and both directions honour their timeouts.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "base/util.h"
#include "net/frame.h"

static void make_pair(int fds[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
}

static void small_frame_round_trip(void **state)
{
    (void)state;
    int fds[2];
    make_pair(fds);
    float x[3] = {1.0f, 2.5f, -3.0f};
    blob_header h, d;
    blob_header_init(&h, "push");
    h.dtype = BLOB_F32;
    h.count = 3;
    h.shard = 7;
    snprintf(h.worker, sizeof h.worker, "w1");
    char err[256] = "";
    assert_int_equal(frame_send(fds[0], &h, x, sizeof x, 1000, err, sizeof err), 0);
    uint8_t buf[4096];
    const uint8_t *p;
    size_t plen;
    assert_int_equal(frame_recv(fds[1], buf, sizeof buf, &d, &p, &plen, 1000, err, sizeof err), 0);
    assert_string_equal(d.op, "push");
    assert_int_equal(d.shard, 7);
    assert_string_equal(d.worker, "w1");
    assert_int_equal(plen, sizeof x);
    assert_memory_equal(p, x, sizeof x);
    /* A frame without payload. */
    blob_header_init(&h, "ack");
    h.version = 12;
    assert_int_equal(frame_send(fds[1], &h, NULL, 0, 1000, err, sizeof err), 0);
    assert_int_equal(frame_recv(fds[0], buf, sizeof buf, &d, &p, &plen, 1000, err, sizeof err), 0);
    assert_string_equal(d.op, "ack");
    assert_int_equal(d.version, 12);
    assert_int_equal(plen, 0);
    close(fds[0]);
    close(fds[1]);
}

struct sender {
    int fd;
    const float *data;
    size_t n;
    int rc;
    char err[256];
};

static void *send_thread(void *arg)
{
    struct sender *s = arg;
    blob_header h;
    blob_header_init(&h, "params");
    h.dtype = BLOB_F32;
    h.count = s->n;
    s->rc = frame_send(s->fd, &h, s->data, s->n * sizeof *s->data, 5000, s->err, sizeof s->err);
    return NULL;
}

static void large_frame_round_trip_with_partial_writes(void **state)
{
    (void)state;
    enum { N = 2 * 1024 * 1024 }; /* 8 MB: far more than a socket buffer */
    float *x = malloc(N * sizeof *x);
    uint8_t *buf = malloc(N * sizeof *x + BLOB_HEADER_MAX);
    assert_true(x && buf);
    uint64_t seed = 3;
    for (size_t i = 0; i < N; i++) x[i] = rng_uniform(&seed);
    int fds[2];
    make_pair(fds);
    struct sender s = {.fd = fds[0], .data = x, .n = N};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, send_thread, &s), 0);
    blob_header d;
    const uint8_t *p;
    size_t plen;
    char err[256] = "";
    int rc = frame_recv(fds[1], buf, N * sizeof *x + BLOB_HEADER_MAX, &d, &p, &plen, 5000, err, sizeof err);
    pthread_join(t, NULL);
    assert_int_equal(s.rc, 0);
    if (rc != 0) fail_msg("frame_recv: %s", err);
    assert_int_equal(d.count, N);
    assert_int_equal(plen, N * sizeof *x);
    assert_memory_equal(p, x, plen);
    close(fds[0]);
    close(fds[1]);
    free(x);
    free(buf);
}

static void oversize_frame_is_rejected_without_reading(void **state)
{
    (void)state;
    int fds[2];
    make_pair(fds);
    float x[64] = {0};
    blob_header h, d;
    blob_header_init(&h, "push");
    h.dtype = BLOB_F32;
    h.count = 64;
    char err[256] = "";
    assert_int_equal(frame_send(fds[0], &h, x, sizeof x, 1000, err, sizeof err), 0);
    uint8_t buf[128];
    const uint8_t *p;
    size_t plen;
    assert_int_equal(frame_recv(fds[1], buf, sizeof buf, &d, &p, &plen, 1000, err, sizeof err), -1);
    assert_true(strncmp(err, "oversize", 8) == 0);
    /* Only the 4-byte prefix was consumed: the blob itself is still in the socket. */
    uint8_t rest[1024];
    ssize_t n = recv(fds[1], rest, sizeof rest, MSG_DONTWAIT);
    assert_true(n > (ssize_t)sizeof x);
    close(fds[0]);
    close(fds[1]);
}

static void truncated_stream_is_an_error(void **state)
{
    (void)state;
    int fds[2];
    make_pair(fds);
    /* Prefix announces 100 bytes, only 10 arrive, then the peer closes. */
    uint8_t partial[14] = {100, 0, 0, 0, 0x8a};
    assert_int_equal(write(fds[0], partial, sizeof partial), (ssize_t)sizeof partial);
    close(fds[0]);
    uint8_t buf[256];
    blob_header d;
    const uint8_t *p;
    size_t plen;
    char err[256] = "";
    assert_int_equal(frame_recv(fds[1], buf, sizeof buf, &d, &p, &plen, 1000, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated frame"));
    /* A clean close between frames says so. */
    assert_int_equal(frame_recv(fds[1], buf, sizeof buf, &d, &p, &plen, 1000, err, sizeof err), -1);
    assert_non_null(strstr(err, "closed"));
    close(fds[1]);
}

static void corrupted_payload_fails_the_checksum(void **state)
{
    (void)state;
    int fds[2], mid[2];
    make_pair(fds);
    make_pair(mid);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    blob_header h, d;
    blob_header_init(&h, "push");
    h.dtype = BLOB_F32;
    h.count = 8;
    char err[256] = "";
    assert_int_equal(frame_send(fds[0], &h, x, sizeof x, 1000, err, sizeof err), 0);
    uint8_t raw[2048];
    ssize_t n = recv(fds[1], raw, sizeof raw, 0);
    assert_true(n > (ssize_t)sizeof x);
    raw[n - 5] ^= 0x01; /* one payload bit flipped in transit */
    assert_int_equal(write(mid[0], raw, (size_t)n), n);
    uint8_t buf[2048];
    const uint8_t *p;
    size_t plen;
    assert_int_equal(frame_recv(mid[1], buf, sizeof buf, &d, &p, &plen, 1000, err, sizeof err), -1);
    assert_non_null(strstr(err, "checksum"));
    close(fds[0]);
    close(fds[1]);
    close(mid[0]);
    close(mid[1]);
}

static void receive_times_out(void **state)
{
    (void)state;
    int fds[2];
    make_pair(fds);
    uint8_t buf[256];
    blob_header d;
    const uint8_t *p;
    size_t plen;
    char err[256] = "";
    uint64_t t0 = now_ms();
    assert_int_equal(frame_recv(fds[1], buf, sizeof buf, &d, &p, &plen, 150, err, sizeof err), -1);
    uint64_t took = now_ms() - t0;
    assert_non_null(strstr(err, "timeout"));
    assert_true(took >= 140 && took < 2000);
    close(fds[0]);
    close(fds[1]);
}

static void send_times_out_when_peer_does_not_read(void **state)
{
    (void)state;
    int fds[2];
    make_pair(fds);
    int small = 4096;
    setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    enum { N = 1024 * 1024 };
    float *x = calloc(N, sizeof *x);
    assert_non_null(x);
    blob_header h;
    blob_header_init(&h, "push");
    h.dtype = BLOB_F32;
    h.count = N;
    char err[256] = "";
    uint64_t t0 = now_ms();
    assert_int_equal(frame_send(fds[0], &h, x, N * sizeof *x, 150, err, sizeof err), -1);
    assert_non_null(strstr(err, "timeout"));
    assert_true(now_ms() - t0 < 2000);
    /* A peer that has gone away is an error, not a SIGPIPE that kills the process. */
    close(fds[1]);
    assert_int_equal(frame_send(fds[0], &h, x, N * sizeof *x, 150, err, sizeof err), -1);
    assert_non_null(strstr(err, "send failed"));
    close(fds[0]);
    free(x);
}

static void tcp_connect_to_listener_and_refusal(void **state)
{
    (void)state;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(ls >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(ls, 4), 0);
    socklen_t al = sizeof a;
    assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &al), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(a.sin_port));
    char err[256] = "";
    int fd = tcp_connect(addr, 1000, err, sizeof err);
    if (fd < 0) fail_msg("tcp_connect %s: %s", addr, err);
    int peer = accept(ls, NULL, NULL);
    assert_true(peer >= 0);
    blob_header h, d;
    blob_header_init(&h, "hello");
    assert_int_equal(frame_send(fd, &h, NULL, 0, 1000, err, sizeof err), 0);
    uint8_t buf[256];
    const uint8_t *p;
    size_t plen;
    assert_int_equal(frame_recv(peer, buf, sizeof buf, &d, &p, &plen, 1000, err, sizeof err), 0);
    assert_string_equal(d.op, "hello");
    close(fd);
    close(peer);
    close(ls); /* now nobody listens on that port */
    assert_int_equal(tcp_connect(addr, 1000, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot connect"));
    assert_int_equal(tcp_connect("no-port-here", 1000, err, sizeof err), -1);
    assert_non_null(strstr(err, "bad address"));
    assert_int_equal(tcp_connect("127.0.0.1:70000", 1000, err, sizeof err), -1);
    assert_non_null(strstr(err, "bad address"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_frame_round_trip),
        cmocka_unit_test(large_frame_round_trip_with_partial_writes),
        cmocka_unit_test(oversize_frame_is_rejected_without_reading),
        cmocka_unit_test(truncated_stream_is_an_error),
        cmocka_unit_test(corrupted_payload_fails_the_checksum),
        cmocka_unit_test(receive_times_out),
        cmocka_unit_test(send_times_out_when_peer_does_not_read),
        cmocka_unit_test(tcp_connect_to_listener_and_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
