/*
 * test_rconn.c: Redis connections (common/rconn.c) against a private redis-server started on a unix
 * socket in a temporary directory: password and ACL-user authentication, wrong credentials, database
 * selection, error replies, and bounded/stoppable retries to an address where nothing listens.
 * Exits 77 (skipped) when redis-server is not installed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "rconn.h"
#include "util.h"

static pid_t redis_pid = -1;
static char tmpdir[] = "/tmp/test_rconn_XXXXXX";
static char sock_path[256];

static int start_redis(void **state)
{
    (void)state;
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    snprintf(sock_path, sizeof sock_path, "%s/redis.sock", tmpdir);
    redis_pid = fork();
    if (redis_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a crashed test */
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", sock_path, "--requirepass", "pw",
               "--save", "", "--appendonly", "no", "--dir", tmpdir, "--loglevel", "warning", (char *)NULL);
        _exit(127);
    }
    /* Wait until it accepts connections. */
    redis_url u;
    char url[300], err[256];
    snprintf(url, sizeof url, "unix://:pw@%s", sock_path);
    if (redis_url_parse(url, &u, err, sizeof err) != 0)
        return -1;
    for (int i = 0; i < 100; i++) {
        rconn *c = rconn_connect(&u, 500, err, sizeof err);
        if (c != NULL) {
            rconn_free(c);
            return 0;
        }
        sleep_ms(50);
    }
    fprintf(stderr, "redis-server did not start: %s\n", err);
    return -1;
}

static int stop_redis(void **state)
{
    (void)state;
    if (redis_pid > 0) {
        kill(redis_pid, SIGTERM);
        waitpid(redis_pid, NULL, 0);
    }
    unlink(sock_path);
    rmdir(tmpdir);
    return 0;
}

static rconn *connect_url(const char *fmt, char *err, size_t errlen)
{
    char url[400];
    redis_url u;
    snprintf(url, sizeof url, fmt, sock_path);
    assert_int_equal(redis_url_parse(url, &u, err, errlen), 0);
    return rconn_connect(&u, 1000, err, errlen);
}

static void password_auth_and_db_selection(void **state)
{
    (void)state;
    char err[512] = "";
    rconn *c3 = connect_url("unix://:pw@%s?db=3", err, sizeof err);
    if (c3 == NULL)
        fail_msg("connect: %s", err);
    redisReply *r = rconn_command(c3, "SET only_in_db3 yes");
    assert_int_equal(rconn_reply_error(c3, r, err, sizeof err), 0);
    freeReplyObject(r);
    rconn *c0 = connect_url("unix://:pw@%s", err, sizeof err);
    assert_non_null(c0);
    r = rconn_command(c0, "EXISTS only_in_db3");
    assert_int_equal(rconn_reply_error(c0, r, err, sizeof err), 0);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    r = rconn_command(c3, "EXISTS only_in_db3");
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    rconn_free(c0);
    rconn_free(c3);
}

static void acl_user_auth(void **state)
{
    (void)state;
    char err[512] = "";
    rconn *admin = connect_url("unix://:pw@%s", err, sizeof err);
    assert_non_null(admin);
    redisReply *r = rconn_command(admin, "ACL SETUSER alice on >s3cret ~* &* +@all");
    assert_int_equal(rconn_reply_error(admin, r, err, sizeof err), 0);
    freeReplyObject(r);
    rconn_free(admin);
    rconn *c = connect_url("unix://alice:s3cret@%s", err, sizeof err);
    if (c == NULL)
        fail_msg("alice: %s", err);
    r = rconn_command(c, "ACL WHOAMI");
    assert_int_equal(rconn_reply_error(c, r, err, sizeof err), 0);
    assert_string_equal(r->str, "alice");
    freeReplyObject(r);
    rconn_free(c);
}

static void wrong_credentials_and_bad_db_fail_clearly(void **state)
{
    (void)state;
    char err[512] = "";
    assert_null(connect_url("unix://:wrong@%s", err, sizeof err));
    assert_non_null(strstr(err, "AUTH"));
    assert_null(connect_url("unix://alice:nope@%s", err, sizeof err));
    assert_non_null(strstr(err, "AUTH"));
    assert_null(connect_url("unix://:pw@%s?db=100000", err, sizeof err));
    assert_non_null(strstr(err, "SELECT"));
    /* No password at all: the first real command is refused. */
    rconn *c = connect_url("unix://%s", err, sizeof err);
    assert_non_null(c);
    redisReply *r = rconn_command(c, "GET x");
    assert_int_equal(rconn_reply_error(c, r, err, sizeof err), -1);
    assert_non_null(strstr(err, "NOAUTH"));
    freeReplyObject(r);
    rconn_free(c);
}

static void reply_error_reports_connection_loss(void **state)
{
    (void)state;
    char err[512] = "";
    rconn *c = connect_url("unix://:pw@%s", err, sizeof err);
    assert_non_null(c);
    redisReply *r = rconn_command(c, "QUIT"); /* the server closes the connection after replying */
    freeReplyObject(r);
    r = rconn_command(c, "PING");
    assert_null(r);
    assert_int_equal(rconn_reply_error(c, r, err, sizeof err), -1);
    assert_non_null(strstr(err, "connection"));
    rconn_free(c);
}

static void retry_gives_up_after_max_attempts(void **state)
{
    (void)state;
    char err[512] = "";
    redis_url u;
    char url[400];
    snprintf(url, sizeof url, "unix://%s/nobody-here.sock", tmpdir);
    assert_int_equal(redis_url_parse(url, &u, err, sizeof err), 0);
    uint64_t t0 = now_ms();
    assert_null(rconn_connect_retry(&u, 200, 3, NULL, err, sizeof err));
    uint64_t took = now_ms() - t0;
    assert_non_null(strstr(err, "after 3 attempts"));
    /* Two waits between three attempts: at least 75 + 150 ms, well under the 5 s cap. */
    assert_true(took >= 200 && took < 3000);
    volatile int stop = 1;
    t0 = now_ms();
    assert_null(rconn_connect_retry(&u, 200, 0, &stop, err, sizeof err));
    assert_non_null(strstr(err, "stopped"));
    assert_true(now_ms() - t0 < 500);
}

int main(void)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0) {
        printf("redis-server not installed\n");
        return 77;
    }
    /* hiredis writes with write(): every binary ignores SIGPIPE, so must this test (see rconn.h). */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(password_auth_and_db_selection),
        cmocka_unit_test(acl_user_auth),
        cmocka_unit_test(wrong_credentials_and_bad_db_fail_clearly),
        cmocka_unit_test(reply_error_reports_connection_loss),
        cmocka_unit_test(retry_gives_up_after_max_attempts),
    };
    return cmocka_run_group_tests(tests, start_redis, stop_redis);
}
