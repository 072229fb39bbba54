/* http_deadline.c: http_deadlines (http_deadline.h).
 *
 * evhttp makes each connection's bufferevent through our callback, so each gets a watch. The socket is given
 * to the bufferevent just after (in the same accept callback), so the watch learns it at once after that, with
 * the socket's cookie (SO_COOKIE, unique for the kernel's lifetime), and forgets the bufferevent: evhttp may
 * free it at any time. The request handler finds its connection's watch by socket and cookie and ends it; the
 * deadline of a watch still there shuts its socket down, if the descriptor is still that socket (a closed
 * connection's descriptor may be another's by then), and ends it. A watch holds no descriptor: holding the
 * bufferevent kept each closed connection's socket open until its deadline, and serve ran out of them. */
#include "http_deadline.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "base/log.h"
#include "base/util.h"

#define CUT_LOG_MS 60000 /* one line about cut connections, then at most one a minute */

typedef struct watch {
    struct watch *prev, *next;
    http_deadlines *d;
    struct bufferevent *bev; /* until the socket is learned */
    evutil_socket_t fd;
    uint64_t cookie;
    struct event *timer; /* at once: learn the socket; then the deadline */
} watch;

struct http_deadlines {
    watch *all;
    unsigned long cut, unlogged;
    uint64_t logged_ms;
};

static void watch_free(watch *w)
{
    http_deadlines *d = w->d;
    if (w->prev)
        w->prev->next = w->next;
    else
        d->all = w->next;
    if (w->next) w->next->prev = w->prev;
    event_free(w->timer);
    free(w);
}

/* The socket's cookie, or 0. */
static uint64_t cookie_of(evutil_socket_t fd)
{
    uint64_t c = 0;
    socklen_t len = sizeof c;
    if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_COOKIE, &c, &len) != 0) return 0;
    return c;
}

static void say_cut(http_deadlines *d)
{
    d->cut++;
    d->unlogged++;
    if (d->logged_ms != 0 && now_ms() - d->logged_ms < CUT_LOG_MS) return;
    log_warn("HTTP: closed %lu connection(s) that had not sent a whole request %d s after connecting (a client "
             "sending a byte at a time, or stalled); at most one line a minute about these",
             d->unlogged, HTTP_REQUEST_DEADLINE_S);
    d->logged_ms = now_ms();
    d->unlogged = 0;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    watch *w = arg;
    if (w->bev) { /* just accepted: learn the socket, then wait for the deadline */
        w->fd = bufferevent_getfd(w->bev);
        w->cookie = cookie_of(w->fd);
        w->bev = NULL;
        struct timeval tv = {.tv_sec = HTTP_REQUEST_DEADLINE_S, .tv_usec = 0};
        if (w->cookie == 0 || evtimer_add(w->timer, &tv) != 0) watch_free(w);
        return;
    }
    if (cookie_of(w->fd) == w->cookie) {
        shutdown(w->fd, SHUT_RDWR); /* evhttp reads the end of the stream and frees the connection */
        say_cut(w->d);
    }
    watch_free(w);
}

static struct bufferevent *make_bev(struct event_base *base, void *arg)
{
    http_deadlines *d = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    watch *w = bev ? calloc(1, sizeof *w) : NULL;
    if (w) w->timer = evtimer_new(base, on_timer, w);
    if (!w || !w->timer) {
        free(w);
        return bev; /* unwatched: evhttp's own timeout only */
    }
    w->d = d;
    w->bev = bev;
    w->fd = -1;
    w->next = d->all;
    if (d->all) d->all->prev = w;
    d->all = w;
    event_active(w->timer, EV_TIMEOUT, 0); /* after evhttp gave the bufferevent its socket */
    return bev;
}

http_deadlines *http_deadlines_new(struct evhttp *http, struct event_base *base)
{
    (void)base;
    http_deadlines *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    evhttp_set_bevcb(http, make_bev, d);
    return d;
}

void http_deadlines_met(http_deadlines *d, struct evhttp_request *req)
{
    if (!d) return;
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    uint64_t c = cookie_of(fd);
    for (watch *w = d->all; w && c; w = w->next)
        if (!w->bev && w->fd == fd && w->cookie == c) {
            watch_free(w);
            return;
        }
}

unsigned long http_deadlines_cut(const http_deadlines *d)
{
    return d ? d->cut : 0;
}

void http_deadlines_free(http_deadlines *d)
{
    if (!d) return;
    for (watch *w = d->all, *next; w; w = next) { /* all of them: no unlinking one by one */
        next = w->next;
        event_free(w->timer);
        free(w);
    }
    free(d);
}
