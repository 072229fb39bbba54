/*
 * test_rconn.c: Redis connections (common/redis/rconn.c) against a private redis-server started on a unix
 * socket in a temporary directory: password and ACL-user authentication, wrong credentials, database
 * selection, error replies, bounded/stoppable retries to an address where nothing listens, a stop function
 * ending retries and a frozen Redis's handshake, and a refused password or database ending the retries at once.
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
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "base/util.h"
#include "redis/rconn.h"
#include "fd_limit.h"

static pid_t redis_pid = -1;
static char tmpdir[] = "/tmp/test_rconn_XXXXXX";
static char sock_path[256];

static int start_redis(void **state)
{
    (void)state;
    if (mkdtemp(tmpdir) == NULL) return -1;
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
    if (redis_url_parse(url, &u, err, sizeof err) != 0) return -1;
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

/* A URL of a socket nobody listens on (in our temporary folder): every connect to it fails at once. */
static void nobody_url(redis_url *u)
{
    char url[400], err[256];
    snprintf(url, sizeof url, "unix://%s/nobody-here.sock", tmpdir);
    assert_int_equal(redis_url_parse(url, u, err, sizeof err), 0);
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
    if (c3 == NULL) fail_msg("connect: %s", err);
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
    if (c == NULL) fail_msg("alice: %s", err);
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
    /* No password at all: the connection is refused with NOAUTH at once (a PING), before any caller's
     * first command (a large FUNCTION LOAD would be cut off with "Protocol error"). */
    assert_null(connect_url("unix://%s", err, sizeof err));
    assert_non_null(strstr(err, "NOAUTH"));
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

/* A process at its descriptor limit cannot make a socket: the error says so and what to raise, not "is
 * redis-server running, and is the URL right?" (a worker at `ulimit -n 4` was told that; failed before). */
static void out_of_descriptors_says_so(void **state)
{
    (void)state;
    char err[512] = "";
    redis_url u;
    nobody_url(&u);
    fd_limit lim;
    assert_int_equal(fd_limit_exhaust(&lim), 0);
    rconn *c = rconn_connect_retry(&u, 200, 0, NULL, NULL, err, sizeof err);
    assert_int_equal(fd_limit_restore(&lim), 0);
    assert_null(c);
    assert_non_null(strstr(err, "out of descriptors"));
    assert_null(strstr(err, "is redis-server running"));
}

static void retry_gives_up_after_its_wait(void **state)
{
    (void)state;
    char err[512] = "";
    redis_url u;
    nobody_url(&u);
    int refused = -1;
    uint64_t t0 = now_ms();
    assert_null(rconn_connect_retry(&u, 200, 1500, NULL, &refused, err, sizeof err));
    uint64_t took = now_ms() - t0;
    assert_non_null(strstr(err, "gave up after"));
    assert_int_equal(refused, 0); /* nobody there: not a refusal */
    /* retried until the wait was over (the last attempt at the deadline), not a moment longer */
    assert_true(took >= 1500 && took < 2500);
    t0 = now_ms();
    assert_null(rconn_connect_retry(&u, 200, 0, NULL, NULL, err, sizeof err)); /* one attempt */
    assert_true(now_ms() - t0 < 500);
    assert_non_null(strstr(err, "is redis-server running")); /* says what to check */
    volatile int stop = 1;
    t0 = now_ms();
    assert_null(rconn_connect_retry(&u, 200, -1, &stop, NULL, err, sizeof err));
    assert_non_null(strstr(err, "stopped"));
    assert_true(now_ms() - t0 < 500);
}

/* A stop given as a function (rconn_connect_watched: libdiloco's o.stop or diloco_request_stop) ends the
 * retries to an address where nothing listens, and the handshake of a Redis that accepts the connection and
 * answers nothing (frozen: SIGSTOP), within about 100 ms of the stop instead of the connect's 5 s limit. */
static uint64_t stop_at_ms; /* stop_after's moment (now_ms) */

static int stop_after(void *arg)
{
    int *calls = arg;
    (*calls)++;
    return now_ms() >= stop_at_ms;
}

static void watched_stop_ends_retries_and_a_frozen_handshake(void **state)
{
    (void)state;
    char url[400], err[512] = "";
    redis_url u;
    nobody_url(&u);
    int calls = 0;
    uint64_t t0 = now_ms();
    stop_at_ms = t0 + 300;
    assert_null(rconn_connect_watched(&u, 200, -1, stop_after, &calls, NULL, err, sizeof err));
    uint64_t took = now_ms() - t0;
    assert_non_null(strstr(err, "stopped while connecting"));
    assert_true(calls > 1);
    if (took < 300 || took > 800)
        fail_msg("retries ended %llu ms after the start, the stop at 300", (unsigned long long)took);

    snprintf(url, sizeof url, "unix://:pw@%s", sock_path);
    assert_int_equal(redis_url_parse(url, &u, err, sizeof err), 0);
    assert_int_equal(kill(redis_pid, SIGSTOP), 0);
    t0 = now_ms();
    stop_at_ms = t0 + 300;
    rconn *c = rconn_connect_watched(&u, 5000, 0, stop_after, &calls, NULL, err, sizeof err);
    took = now_ms() - t0;
    assert_int_equal(kill(redis_pid, SIGCONT), 0);
    assert_null(c);
    printf("  frozen Redis: %s (%llu ms)\n", err, (unsigned long long)took);
    assert_non_null(strstr(err, "stopped while Redis did not answer"));
    if (took < 300 || took > 800)
        fail_msg("the handshake ended %llu ms after the start, the stop at 300", (unsigned long long)took);
    c = rconn_connect_watched(&u, 5000, 0, NULL, NULL, NULL, err, sizeof err); /* no stop: as rconn_connect */
    assert_non_null(c);
    rconn_free(c);
}

/* A wrong password, user or database is final: no retry for the whole wait. */
static void refusal_ends_retries_at_once(void **state)
{
    (void)state;
    const char *urls[] = {"unix://:wrong@%s", "unix://nobody:pw@%s", "unix://:pw@%s?db=100000"};
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        char url[400], err[512] = "";
        redis_url u;
        snprintf(url, sizeof url, urls[i], sock_path);
        assert_int_equal(redis_url_parse(url, &u, err, sizeof err), 0);
        int refused = 0;
        uint64_t t0 = now_ms();
        assert_null(rconn_connect_retry(&u, 1000, 30000, NULL, &refused, err, sizeof err));
        if (now_ms() - t0 > 1000)
            fail_msg("%s: retried for %llu ms: %s", urls[i], (unsigned long long)(now_ms() - t0), err);
        assert_int_equal(refused, 1);
        assert_non_null(strstr(err, i < 2 ? "WRONGPASS" : "SELECT"));
    }
}

static void final_errors(void **state)
{
    (void)state;
    assert_true(rconn_error_final("WRONGPASS invalid username-password pair or user is disabled."));
    assert_true(rconn_error_final("NOAUTH Authentication required."));
    assert_true(rconn_error_final("NOPERM this user has no permissions to run the 'fcall' command"));
    assert_true(rconn_error_final("ERR invalid password"));
    assert_true(rconn_error_final("ERR AUTH <password> called without any password configured for the default user."));
    assert_false(rconn_error_final("LOADING Redis is loading the dataset in memory"));
    assert_false(rconn_error_final("ERR Function not found"));
    assert_false(rconn_error_final("MOVED 3999 127.0.0.1:6381"));
    assert_false(rconn_error_final(NULL));
    assert_true(rconn_error_loading("LOADING Redis is loading the dataset in memory"));
    assert_false(rconn_error_loading("ERR Function not found"));
    assert_false(rconn_error_loading(NULL));
}

/* A misbehaving Redis's refusals are explained (what is wrong, what to do) and tried again; our own error
 * codes and final refusals are neither. */
static void refusals_explained(void **state)
{
    (void)state;
    char out[1024];
    rconn_explain_error("OOM command not allowed when used memory > 'maxmemory'.", out, sizeof out);
    assert_non_null(strstr(out, "'maxmemory' (Redis is out of memory"));
    assert_non_null(strstr(out, "raise maxmemory"));
    /* MISCONF's 330 characters: its first sentence is kept, then what to do, on one short line */
    rconn_explain_error("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to "
                        "disk. Commands that may modify the data set are disabled, because this instance is configured "
                        "to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error "
                        "option). Please check the Redis logs for details about the RDB error.",
                        out, sizeof out);
    assert_string_equal(out, "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist "
                             "to disk (its last RDB save failed and stop-writes-on-bgsave-error is on: fix what its "
                             "log names (disk full, dir not writable), then BGSAVE; nothing was written; the run's "
                             "processes retry)");
    assert_true(strlen(out) < 300); /* (Redis's text and the hint were 510) */
    assert_true(rconn_error_transient("OOM command not allowed when used memory > 'maxmemory'."));
    assert_true(rconn_error_transient("MISCONF Redis is configured to save RDB snapshots, but ..."));
    assert_true(rconn_error_transient("BUSY Redis is busy running a script."));
    assert_true(rconn_error_transient("ERR max number of clients reached"));
    assert_true(rconn_error_transient("READONLY You can't write against a read only replica."));
    assert_true(rconn_error_transient("CLUSTERDOWN The cluster is down"));
    assert_false(rconn_error_transient("ERR Function not found"));
    assert_false(rconn_error_transient("NORUN run 'r' does not exist in this Redis"));
    assert_false(rconn_error_transient("WRONGPASS invalid username-password pair or user is disabled."));
    assert_false(rconn_error_transient(NULL));
    assert_null(rconn_error_hint("UNKNOWN_WORKER worker w1 (incarnation 1) is not a live member"));
    rconn_explain_error("STALE round 3 is closed", out, sizeof out);
    assert_string_equal(out, "STALE round 3 is closed");
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
        cmocka_unit_test(retry_gives_up_after_its_wait),
        cmocka_unit_test(out_of_descriptors_says_so),
        cmocka_unit_test(refusal_ends_retries_at_once),
        cmocka_unit_test(watched_stop_ends_retries_and_a_frozen_handshake),
        cmocka_unit_test(final_errors),
        cmocka_unit_test(refusals_explained),
    };
    return cmocka_run_group_tests(tests, start_redis, stop_redis);
}
