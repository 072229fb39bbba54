/* http_save.c: checkpoint export off the event loop, for POST /control/save_state and
 * `serve --save-every N`.
 *
 * checkpoint_save_dir() (coordinator/checkpoint.c) is synchronous: it reads every shard from Redis
 * and writes the file. Here it runs on its own thread with its own Redis connection, and the result
 * comes back to the loop through a pipe, so /status, /metrics and the reaper keep answering while a
 * large model is exported. One save runs at a time; a request that arrives during a save waits for
 * that save's result (it is the newest state anyway). */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "checkpoint.h"
#include "http.h"
#include "redis/rconn.h"

#define MAX_WAITERS 64

struct saver {
    struct event_base *base;
    redis_url url;
    char run[80];
    char dir[4096];
    int keep;
    int pipefd[2];
    struct event *ev;
    pthread_t th;
    int busy;
    struct {
        saver_done_fn fn;
        void *arg;
    } waiters[MAX_WAITERS];
    int nwaiters;
    /* result, written by the thread before it signals */
    int ok;
    int64_t version;
    char path[4200];
    char err[600];
    uint64_t ms;
};

static void *save_thread(void *arg)
{
    saver *s = arg;
    uint64_t t0 = now_ms();
    s->ok = 0;
    s->version = -1;
    s->path[0] = s->err[0] = 0;
    rconn *rc = rconn_connect(&s->url, 5000, s->err, sizeof s->err);
    if (rc) {
        s->ok = checkpoint_save_dir(rc, s->run, s->dir, s->keep, 60000, s->path, sizeof s->path, &s->version, s->err,
                                    sizeof s->err) == 0;
        rconn_free(rc);
    }
    s->ms = now_ms() - t0;
    char b = 1;
    while (write(s->pipefd[1], &b, 1) < 0 && errno == EINTR) {}
    return NULL;
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    saver *s = arg;
    char buf[16];
    while (read(fd, buf, sizeof buf) > 0) {}
    if (!s->busy) return;
    pthread_join(s->th, NULL);
    s->busy = 0;
    if (s->ok)
        log_info("checkpoint: wrote %s (version %lld) in %llu ms", s->path, (long long)s->version,
                 (unsigned long long)s->ms);
    else
        log_warn("checkpoint: save failed: %s", s->err);
    int n = s->nwaiters;
    s->nwaiters = 0;
    for (int i = 0; i < n; i++)
        if (s->waiters[i].fn) s->waiters[i].fn(s->waiters[i].arg, s->ok, s->path, s->version, s->err);
}

saver *saver_new(struct event_base *base, const redis_url *url, const char *run, const char *dir, int keep)
{
    saver *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->base = base;
    s->url = *url;
    snprintf(s->run, sizeof s->run, "%s", run);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->keep = keep;
    if (pipe2(s->pipefd, O_NONBLOCK | O_CLOEXEC) < 0) {
        free(s);
        return NULL;
    }
    s->ev = event_new(base, s->pipefd[0], EV_READ | EV_PERSIST, on_done, s);
    event_add(s->ev, NULL);
    return s;
}

int saver_request(saver *s, saver_done_fn fn, void *arg)
{
    if (s->nwaiters >= MAX_WAITERS) return -1;
    s->waiters[s->nwaiters].fn = fn;
    s->waiters[s->nwaiters].arg = arg;
    s->nwaiters++;
    if (s->busy) return 1;
    s->busy = 1;
    if (pthread_create(&s->th, NULL, save_thread, s) != 0) {
        s->busy = 0;
        s->nwaiters--;
        return -1;
    }
    return 0;
}

void saver_cancel(saver *s, void *arg)
{
    for (int i = 0; i < s->nwaiters; i++)
        if (s->waiters[i].arg == arg) s->waiters[i].fn = NULL;
}

int saver_busy(const saver *s)
{
    return s->busy;
}

void saver_free(saver *s)
{
    if (!s) return;
    if (s->busy) pthread_join(s->th, NULL); /* let a save in progress finish its file */
    event_free(s->ev);
    close(s->pipefd[0]);
    close(s->pipefd[1]);
    free(s);
}
