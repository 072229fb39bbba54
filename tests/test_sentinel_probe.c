/*
 * test_sentinel_probe.c: following a Sentinel failover without waiting for timeouts (common/redis/rconn.c,
 * common/redis/sentinel.c), against real processes on loopback: a redis-server master, one replica and
 * one redis-sentinel (quorum 1, down-after 1 s) in a temporary directory.
 *   - a command slower than the probe interval (DEBUG SLEEP 1.6 s) on a healthy master gets its reply:
 *     asking the Sentinels between slices does not break slow commands;
 *   - a command to a master that was SIGSTOPped (a partition: the connection stays open) comes back as
 *     a broken connection once the Sentinels name the promoted replica, well before the connection's
 *     timeout, and the reconnect reaches the new master;
 *   - a subscription opened before the failover (sentinel_watch) hears it announced;
 *   - subscriptions open at once when a Sentinel named first never answers, with a Sentinel login.
 * Exits 77 (skipped) when redis-server or redis-sentinel is not installed.
 */
/* test: light (it waits more than it computes: 0 s of CPU in 10 s, tests/run.sh) */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "base/util.h"
#include "redis/rconn.h"
#include "redis/sentinel.h"

#define COMMAND_TIMEOUT_MS 20000

static char tmpdir[] = "/tmp/test_sentinel_probe_XXXXXX";
static pid_t master_pid = -1, replica_pid = -1, sentinel_pid = -1;
static int master_port, replica_port, sentinel_port;
static redis_url sentinel_url;

/* n (at most 8) distinct free loopback ports into ports: every socket stays bound until all are picked (ports
 * picked one by one, each closed before the next, can repeat). 0, or -1. */
static int free_ports(int *ports, int n)
{
    int fds[8], rc = n <= 8 ? 0 : -1;
    for (int i = 0; i < n && i < 8; i++) fds[i] = -1;
    for (int i = 0; i < n && rc == 0; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof a;
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&a, sizeof a) != 0 ||
            getsockname(fds[i], (struct sockaddr *)&a, &len) != 0)
            rc = -1;
        else
            ports[i] = ntohs(a.sin_port);
    }
    for (int i = 0; i < n && i < 8; i++)
        if (fds[i] >= 0) close(fds[i]);
    return rc;
}

static pid_t spawn(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a crashed test */
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static pid_t start_node(int port, int replica_of)
{
    char p[16], m[16], dir[300];
    snprintf(p, sizeof p, "%d", port);
    snprintf(m, sizeof m, "%d", replica_of);
    snprintf(dir, sizeof dir, "%s/%d", tmpdir, port);
    if (mkdir(dir, 0700) != 0) return -1;
    char *argv[] = {"redis-server", "--port", p, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--dir", dir, "--loglevel", "warning", "--enable-debug-command", "yes",
                    replica_of ? "--replicaof" : NULL, "127.0.0.1", m, NULL};
    return spawn(argv);
}

/* A reply to `cmd` on 127.0.0.1:port contains `want` (a bulk or status string). */
static int node_says(int port, const char *cmd, const char *want)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) {
        if (c) redisFree(c);
        return 0;
    }
    redisSetTimeout(c, tv);
    redisReply *r = redisCommand(c, cmd);
    int ok = 0;
    if (r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS))
        ok = strstr(r->str, want) != NULL;
    else if (r != NULL && r->type == REDIS_REPLY_ARRAY) /* SENTINEL REPLICAS: a flat key/value list per replica */
        for (size_t i = 0; i < r->elements && !ok; i++)
            for (size_t j = 0; r->element[i]->type == REDIS_REPLY_ARRAY && j < r->element[i]->elements; j++)
                ok |= r->element[i]->element[j]->type == REDIS_REPLY_STRING &&
                      strcmp(r->element[i]->element[j]->str, want) == 0;
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok;
}

static int wait_for(int port, const char *cmd, const char *want)
{
    for (int i = 0; i < 200; i++) {
        if (node_says(port, cmd, want)) return 0;
        sleep_ms(50);
    }
    fprintf(stderr, "127.0.0.1:%d never answered '%s' with '%s'\n", port, cmd, want);
    return -1;
}

static int start_all(void **state)
{
    (void)state;
    if (system("command -v redis-server >/dev/null && command -v redis-sentinel >/dev/null") != 0) {
        fprintf(stderr, "redis-server or redis-sentinel not installed\n");
        exit(77);
    }
    if (mkdtemp(tmpdir) == NULL) return -1;
    int ports[3];
    if (free_ports(ports, 3) != 0) return -1;
    master_port = ports[0], replica_port = ports[1], sentinel_port = ports[2];
    master_pid = start_node(master_port, 0);
    replica_pid = start_node(replica_port, master_port);
    if (wait_for(replica_port, "INFO replication", "master_link_status:up") != 0) return -1;
    char conf[300];
    snprintf(conf, sizeof conf, "%s/sentinel.conf", tmpdir);
    FILE *f = fopen(conf, "w");
    if (f == NULL) return -1;
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndir %s\nlogfile \"\"\nloglevel warning\n"
            "sentinel monitor m 127.0.0.1 %d 1\nsentinel down-after-milliseconds m 1000\n"
            "sentinel failover-timeout m 10000\n",
            sentinel_port, tmpdir, master_port);
    fclose(f);
    char *argv[] = {"redis-sentinel", conf, NULL};
    sentinel_pid = spawn(argv);
    /* a failover needs the Sentinel to know the replica (from the master's INFO) */
    if (wait_for(sentinel_port, "SENTINEL REPLICAS m", "slave") != 0) return -1;
    char url[200], err[256];
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/m", sentinel_port);
    return redis_url_parse(url, &sentinel_url, err, sizeof err);
}

static int stop_all(void **state)
{
    (void)state;
    pid_t pids[] = {sentinel_pid, replica_pid, master_pid};
    for (int i = 0; i < 3; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL); /* also ends a stopped process */
            waitpid(pids[i], NULL, 0);
        }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static int port_of(const rconn *c)
{
    char buf[300];
    const char *colon = strrchr(rconn_server(c, buf, sizeof buf), ':');
    return colon ? atoi(colon + 1) : -1;
}

static void slow_command_on_a_healthy_master_gets_its_reply(void **state)
{
    (void)state;
    char err[300];
    rconn *c = rconn_connect(&sentinel_url, COMMAND_TIMEOUT_MS, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(port_of(c), master_port);
    redisReply *r = rconn_command(c, "DEBUG SLEEP 1.6"); /* longer than a probe slice */
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    assert_false(rconn_broken(c));
    freeReplyObject(r);
    r = rconn_command(c, "SET after-sleep 1"); /* and the connection is still in step */
    assert_non_null(r);
    assert_string_equal(r->str, "OK");
    freeReplyObject(r);
    rconn_free(c);
}

/* A Sentinel that accepts connections and never answers (a listening socket nobody accepts from),
 * named first, with a Sentinel login in the URL: the subscriptions are opened without waiting for any
 * login's reply (asked one after the other, the silent one cost its 1000 ms on AUTH first). The real
 * Sentinel has no password, so its login is refused: that subscription breaks when read, the silent
 * one stays, and nothing is announced. */
static void a_watch_opens_without_waiting_for_a_silent_sentinel(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_true(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                getsockname(fd, (struct sockaddr *)&a, &len) == 0 && listen(fd, 16) == 0);
    char url[300], err[256];
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/m?sentinel_password=pw", ntohs(a.sin_port),
             sentinel_port);
    redis_url u;
    assert_int_equal(redis_url_parse(url, &u, err, sizeof err), 0);
    uint64_t t0 = now_ms();
    sentinel_watch *w = sentinel_watch_open(&u, 1000);
    uint64_t took = now_ms() - t0;
    fprintf(stderr, "the watch opened in %.3f s with the silent Sentinel first\n", (double)took / 1000.0);
    assert_non_null(w);
    assert_true(took < 500);
    assert_int_equal(sentinel_watch_wait(w, 300), 0); /* the silent one is still watched */
    sentinel_watch_close(w);
    close(fd);
}

static void command_to_a_stopped_master_follows_the_failover(void **state)
{
    (void)state;
    char err[300];
    sentinel_watch *w = sentinel_watch_open(&sentinel_url, 1000);
    assert_non_null(w);
    assert_int_equal(sentinel_watch_wait(w, 100), 0); /* nothing announced yet */
    rconn *c = rconn_connect(&sentinel_url, COMMAND_TIMEOUT_MS, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(port_of(c), master_port);
    kill(master_pid, SIGSTOP);
    uint64_t t0 = now_ms();
    redisReply *r = rconn_command(c, "SET during-stop 1");
    uint64_t took = now_ms() - t0;
    fprintf(stderr, "the command to the stopped master came back after %.1f s: %s\n", (double)took / 1000.0,
            rconn_errstr(c));
    assert_null(r);
    assert_true(rconn_broken(c));
    assert_non_null(strstr(rconn_errstr(c), "Sentinels name another master"));
    assert_true(took < COMMAND_TIMEOUT_MS / 2);
    rconn_free(c);
    assert_int_equal(sentinel_watch_wait(w, 2000), 1); /* the announcement is there (or comes) */
    sentinel_watch_close(w);
    c = rconn_connect(&sentinel_url, COMMAND_TIMEOUT_MS, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(port_of(c), replica_port);
    rconn_free(c);
    kill(master_pid, SIGCONT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(slow_command_on_a_healthy_master_gets_its_reply),
        cmocka_unit_test(a_watch_opens_without_waiting_for_a_silent_sentinel),
        cmocka_unit_test(command_to_a_stopped_master_follows_the_failover),
    };
    return cmocka_run_group_tests(tests, start_all, stop_all);
}
