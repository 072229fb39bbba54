/*
 * test_tsan_ctl.c: libdiloco's control connection under ThreadSanitizer (built by the Makefile with
 * -fsanitize=thread into build/tests/test_tsan_ctl, with libdiloco and common/ compiled the same way).
 *
 * Several threads of one session run commands on its control connection (d->ctl) at once, as the
 * training thread, a Streaming fragment's thread and the per-owner push/get threads do, while another
 * connection keeps killing every client of a private redis-server: commands fail (error replies and
 * lost connections) and every thread's next command reconnects, freeing the old connection and
 * putting a new one in d->ctl. A caller that read d->ctl after dl_command released ctl_mu (to explain
 * a failure with rconn_reply_error, as eight call sites did) races with that reconnect: a
 * use-after-free of the connection's error string. ThreadSanitizer reports the unlocked read of
 * d->ctl, whichever thread comes first, and the program exits 66.
 *
 * What it calls is the library's own: dl_register (an error reply: no Functions are loaded) and
 * owners_refresh (two HGETALLs, lost connections) on a session set up by hand (no run is needed).
 * Exits 77 (skipped) when redis-server is not installed.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "diloco/internal.h"
#include "format/keys.h"
#include "redis/rconn.h"

#define THREADS 3
#define RUN_MS 1500

static char tmpdir[] = "/tmp/test_tsan_ctl_XXXXXX";
static char sock_path[256];
static atomic_int done;
static int failures_seen[THREADS];

static pid_t start_redis(redis_url *u)
{
    if (mkdtemp(tmpdir) == NULL) return -1;
    snprintf(sock_path, sizeof sock_path, "%s/redis.sock", tmpdir);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a crashed test */
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", sock_path, "--save", "", "--appendonly",
               "no", "--dir", tmpdir, "--loglevel", "warning", "--logfile", "redis.log", (char *)NULL);
        _exit(127);
    }
    char url[300], err[256];
    snprintf(url, sizeof url, "unix://%s", sock_path);
    if (redis_url_parse(url, u, err, sizeof err) != 0) return -1;
    for (int i = 0; i < 100; i++) {
        rconn *c = rconn_connect(u, 500, err, sizeof err);
        if (c != NULL) {
            rconn_free(c);
            return pid;
        }
        sleep_ms(50);
    }
    fprintf(stderr, "redis-server did not start: %s\n", err);
    return -1;
}

typedef struct worker_arg {
    diloco *d;
    int id;
} worker_arg;

/* Commands that fail, again and again: each failure's text is read (strlen) so that a freed one is used. */
static void *commands(void *p)
{
    worker_arg *a = p;
    char err[256];
    while (!done) {
        err[0] = '\0';
        int rc = a->id % 2 ? dl_register(a->d, err, sizeof err) : owners_refresh(a->d, err, sizeof err);
        if (rc < 0 && strlen(err) > 0) failures_seen[a->id]++;
    }
    return NULL;
}

/* Kill every other client, over and over: each session thread's next command reconnects. */
static void *killer(void *p)
{
    const redis_url *u = p;
    char err[256];
    rconn *c = rconn_connect(u, 1000, err, sizeof err);
    while (c != NULL && !done) {
        redisReply *r = rconn_command(c, "CLIENT KILL TYPE normal SKIPME yes");
        if (r) freeReplyObject(r);
        sleep_ms(2);
    }
    if (c) rconn_free(c);
    return NULL;
}

int main(void)
{
    if (system("command -v redis-server >/dev/null 2>&1") != 0) {
        printf("redis-server not installed\n");
        return 77;
    }
    signal(SIGPIPE, SIG_IGN); /* as every binary does (rconn.h) */
    static diloco d;
    pid_t redis = start_redis(&d.url);
    if (redis < 0) return 1;
    /* the part of a session dl_command, dl_register and owners_refresh use (session_init sets it so) */
    pthread_mutex_init(&d.ctl_mu, NULL);
    pthread_mutex_init(&d.owners_mu, NULL);
    pthread_mutex_init(&d.hb_mu, NULL);
    d.o.run = "tsan";
    d.o.stop = &d.stop_flag;
    d.sync_every = 10;
    snprintf(d.worker_id, sizeof d.worker_id, "w");
    snprintf(d.host, sizeof d.host, "localhost");
    key_run(d.config_key, sizeof d.config_key, d.o.run, "config");
    log_set_level(LOG_ERROR + 1); /* the reconnects' complaints are expected */

    pthread_t kt, wt[THREADS];
    worker_arg args[THREADS];
    pthread_create(&kt, NULL, killer, &d.url);
    for (int i = 0; i < THREADS; i++) {
        args[i] = (worker_arg){&d, i};
        pthread_create(&wt[i], NULL, commands, &args[i]);
    }
    sleep_ms(RUN_MS);
    done = 1;
    for (int i = 0; i < THREADS; i++) pthread_join(wt[i], NULL);
    pthread_join(kt, NULL);
    if (d.ctl) rconn_free(d.ctl);
    kill(redis, SIGTERM);
    waitpid(redis, NULL, 0);
    char log[300];
    snprintf(log, sizeof log, "%s/redis.log", tmpdir);
    unlink(log);
    unlink(sock_path);
    rmdir(tmpdir);

    int seen = 0;
    for (int i = 0; i < THREADS; i++) seen += failures_seen[i];
    printf("%d failed commands explained while the connection was killed under them\n", seen);
    if (seen == 0) { /* the test proves nothing unless commands failed and reconnected */
        fprintf(stderr, "no command failed: the killer connection did not work\n");
        return 1;
    }
    return 0;
}
