/*
 * test_sigpipe.c: no SIGPIPE out of our code in a process that keeps SIGPIPE's default action (which
 * ends the process), as a program embedding libdiloco may: the guard of common/base/sigpipe.c itself (the
 * write fails with EPIPE, nothing is left pending, the mask is restored, a SIGPIPE pending before is
 * left alone), a Redis connection (common/redis/rconn.c) whose server closed it, and a log line to a closed
 * stderr pipe (common/base/log.c). Without the guard the test process dies of SIGPIPE.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/log.h"
#include "base/sigpipe.h"
#include "redis/rconn.h"

static int sigpipe_is_pending(void)
{
    sigset_t pending;
    assert_int_equal(sigpending(&pending), 0);
    return sigismember(&pending, SIGPIPE);
}

static int sigpipe_is_blocked(void)
{
    sigset_t mask;
    pthread_sigmask(SIG_SETMASK, NULL, &mask);
    return sigismember(&mask, SIGPIPE);
}

static int default_action(void **state)
{
    (void)state;
    return signal(SIGPIPE, SIG_DFL) == SIG_ERR ? -1 : 0;
}

static void write_to_closed_pipe_fails_quietly(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(p[0]);
    sigpipe_guard g;
    sigpipe_hold(&g);
    errno = 0;
    assert_int_equal(write(p[1], "x", 1), -1);
    int err = errno;
    sigpipe_release(&g);
    assert_int_equal(err, EPIPE);
    assert_false(sigpipe_is_pending());
    assert_false(sigpipe_is_blocked());
    close(p[1]);
}

static void earlier_pending_sigpipe_is_left_alone(void **state)
{
    (void)state;
    sigset_t pipe_only, before;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &before);
    pthread_kill(pthread_self(), SIGPIPE); /* the program's own, pending while it blocks SIGPIPE */
    assert_true(sigpipe_is_pending());
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(p[0]);
    sigpipe_guard g;
    sigpipe_hold(&g);
    assert_int_equal(write(p[1], "x", 1), -1);
    sigpipe_release(&g);
    assert_true(sigpipe_is_pending());
    assert_true(sigpipe_is_blocked());
    struct timespec now = {0, 0};
    assert_int_equal(sigtimedwait(&pipe_only, NULL, &now), SIGPIPE);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    close(p[1]);
}

/* A "Redis" on a unix socket that answers the PING rconn_connect sends on a connection without a password
 * (it asks whether the server wants one) and then closes it: the next command's write hits a closed
 * socket (EPIPE on a unix socket, every time). */
static void *answer_ping_then_close(void *arg)
{
    int lfd = *(int *)arg, afd = accept(lfd, NULL, NULL);
    if (afd < 0) return NULL;
    char buf[256];
    ssize_t got = read(afd, buf, sizeof buf); /* "*1\r\n$4\r\nPING\r\n" */
    if (got > 0 && write(afd, "+PONG\r\n", 7) != 7) got = -1;
    close(afd);
    return got > 0 ? arg : NULL;
}

static void command_on_connection_the_server_closed(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_sigpipe_XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/redis.sock", dir);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(lfd >= 0);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(lfd, 1), 0);
    pthread_t server;
    assert_int_equal(pthread_create(&server, NULL, answer_ping_then_close, &lfd), 0);
    char url[200], err[256];
    snprintf(url, sizeof url, "unix://%s", sa.sun_path);
    redis_url u;
    assert_int_equal(redis_url_parse(url, &u, err, sizeof err), 0);
    rconn *c = rconn_connect(&u, 1000, err, sizeof err); /* no password: one PING, answered */
    assert_non_null(c);
    void *served = NULL;
    assert_int_equal(pthread_join(server, &served), 0);
    assert_non_null(served); /* the server read the PING, answered it and closed the connection */
    redisReply *r = rconn_command(c, "PING");
    assert_null(r);
    assert_true(rconn_broken(c));
    assert_false(sigpipe_is_pending());
    assert_false(sigpipe_is_blocked());
    rconn_free(c);
    close(lfd);
    unlink(sa.sun_path);
    rmdir(dir);
}

static void log_line_to_closed_stderr_pipe(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(p[0]);
    int saved = dup(STDERR_FILENO);
    dup2(p[1], STDERR_FILENO);
    log_error("nobody reads this");
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(p[1]);
    assert_false(sigpipe_is_pending());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(write_to_closed_pipe_fails_quietly, default_action),
        cmocka_unit_test_setup(earlier_pending_sigpipe_is_left_alone, default_action),
        cmocka_unit_test_setup(command_on_connection_the_server_closed, default_action),
        cmocka_unit_test_setup(log_line_to_closed_stderr_pipe, default_action),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
