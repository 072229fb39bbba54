/* accept_guard.c: accept_guard (accept_guard.h). The message counts the descriptors open and the limit,
 * since "Too many open files" alone does not say whether the limit is low or something holds many.
 * libevent hands the error callback the listener's own argument (the accept callback's: ours is not
 * there to take), so the guards are found by their listener in a list. */
#include "net/accept_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <event2/event.h>

#include "base/log.h"
#include "base/util.h"

struct accept_guard {
    struct accept_guard *next; /* in g_guards */
    struct evconnlistener *l;
    struct event *resume;
    char what[48];
    unsigned long failures;
    unsigned long unlogged; /* failures since the last line */
    uint64_t logged_ms;     /* when the last line was written (0: never) */
};

static accept_guard *g_guards;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static accept_guard *guard_of(const struct evconnlistener *l)
{
    pthread_mutex_lock(&g_mu);
    accept_guard *g = g_guards;
    while (g && g->l != l) g = g->next;
    pthread_mutex_unlock(&g_mu);
    return g;
}

/* Descriptors this process has open below lim, or -1 (lim unknown or too large to look at each). Asked of
 * each descriptor: listing /proc/self/fd would need one more, and there is none. */
static long open_fds(long lim)
{
    if (lim < 0 || lim > (1L << 16)) return -1;
    long n = 0;
    for (int fd = 0; fd < lim; fd++) n += fcntl(fd, F_GETFD) != -1;
    return n;
}

static void say(accept_guard *g, int e)
{
    struct rlimit rl;
    long lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : -1;
    const char *hint = e == EMFILE || e == ENFILE
                           ? "; raise the limit (ulimit -n, systemd LimitNOFILE=) or find what holds the connections"
                           : "";
    if (g->logged_ms == 0)
        log_error("%s: accept failed: %s (%ld descriptors open, limit %ld): pausing new connections %d ms at a "
                  "time until it succeeds%s",
                  g->what, strerror(e), open_fds(lim), lim, ACCEPT_GUARD_PAUSE_MS, hint);
    else
        log_error("%s: accept still failing: %s, %lu times in the last %llu s (%ld descriptors open, limit %ld)%s",
                  g->what, strerror(e), g->unlogged, (unsigned long long)(now_ms() - g->logged_ms) / 1000,
                  open_fds(lim), lim, hint);
    g->logged_ms = now_ms();
    g->unlogged = 0;
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    accept_guard *g = arg;
    evconnlistener_enable(g->l);
}

static void on_error(struct evconnlistener *l, void *arg)
{
    (void)arg;
    int e = EVUTIL_SOCKET_ERROR();
    accept_guard *g = guard_of(l);
    if (!g) return;
    g->failures++;
    g->unlogged++;
    if (g->logged_ms == 0 || now_ms() - g->logged_ms >= ACCEPT_GUARD_LOG_MS) say(g, e);
    struct timeval tv = {.tv_sec = 0, .tv_usec = ACCEPT_GUARD_PAUSE_MS * 1000};
    if (evconnlistener_disable(l) == 0 && evtimer_add(g->resume, &tv) != 0) evconnlistener_enable(l);
}

accept_guard *accept_guard_new(struct evconnlistener *l, const char *what)
{
    accept_guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->l = l;
    snprintf(g->what, sizeof g->what, "%s", what);
    g->resume = evtimer_new(evconnlistener_get_base(l), on_resume, g);
    if (!g->resume) {
        free(g);
        return NULL;
    }
    pthread_mutex_lock(&g_mu);
    g->next = g_guards;
    g_guards = g;
    pthread_mutex_unlock(&g_mu);
    evconnlistener_set_error_cb(l, on_error);
    return g;
}

void accept_guard_free(accept_guard *g)
{
    if (!g) return;
    evconnlistener_set_error_cb(g->l, NULL);
    pthread_mutex_lock(&g_mu);
    for (accept_guard **pp = &g_guards; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    event_free(g->resume);
    free(g);
}

unsigned long accept_guard_failures(const accept_guard *g)
{
    return g ? g->failures : 0;
}
