/*
 * sentinel.c: redis_url_resolve() (sentinel.h) for threads that may block: ask the Sentinels, all at
 * once (askall.h), check ROLE on the node they name; or pick the first seed that answers a PING sent
 * to all.
 */
#include "redis/sentinel.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "base/sigpipe.h"
#include "base/util.h"
#include "redis/askall.h"

int redis_url_needs_resolve(const redis_url *u)
{
    return u->sentinel_master[0] != '\0' || u->nhosts > 1;
}

/* ---------------------------------------------------------------------------------------------- */
/* The pieces the blocking resolver below shares with asynchronous clients (sentinel.h) */

int sentinel_vote(sentinel_named *named, int n, const char *host, int port)
{
    int j;
    for (j = 0; j < n && !(named[j].port == port && strcmp(named[j].host, host) == 0); j++) {}
    if (j == n) {
        if (n == REDIS_URL_MAX_HOSTS) return n;
        snprintf(named[n].host, sizeof named[n].host, "%s", host);
        named[n].port = port;
        named[n++].votes = 0;
    }
    named[j].votes++;
    for (; j > 0 && named[j].votes > named[j - 1].votes; j--) { /* keep most named first */
        sentinel_named t = named[j];
        named[j] = named[j - 1];
        named[j - 1] = t;
    }
    return n;
}

int sentinel_reply_addr(const redis_url *u, const redis_host *s, const redisReply *r, char *host, size_t hostcap,
                        int *port, char *why, size_t whylen)
{
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
        r->element[1]->type == REDIS_REPLY_STRING) {
        snprintf(host, hostcap, "%s", r->element[0]->str);
        *port = atoi(r->element[1]->str);
        return 0;
    }
    if (r->type == REDIS_REPLY_ERROR)
        err_set(why, whylen, "Sentinel %s:%d: %s", s->host, s->port, r->str);
    else
        err_set(why, whylen, "Sentinel %s:%d does not know a master named '%s'", s->host, s->port, u->sentinel_master);
    return -1;
}

int sentinel_reply_is_master(const redisReply *r, const char *host, int port, char *why, size_t whylen)
{
    int named = r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING;
    if (named && strcmp(r->element[0]->str, "master") == 0) return 1;
    err_set(why, whylen, "%s:%d is not a master (ROLE: %s)", host, port,
            r->type == REDIS_REPLY_ERROR ? r->str
            : named                      ? r->element[0]->str
                                         : "unexpected reply");
    return 0;
}

int sentinel_announcement(const redisReply *r, const char *master, char *host, size_t hostcap, int *port)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_STRING ||
        strcmp(r->element[0]->str, "message") != 0 || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return 0;
    const char *channel = r->element[1]->str, *text = r->element[2]->str;
    char name[128], ip[256];
    int p, ok;
    if (strcmp(channel, "+switch-master") == 0) /* <name> <old ip> <old port> <new ip> <new port> */
        ok = sscanf(text, "%127s %*s %*d %255s %d", name, ip, &p) == 3;
    else if (strcmp(channel, "+promoted-slave") == 0) /* slave <ip:port> <ip> <port> @ <name> <ip> <port> */
        ok = sscanf(text, "slave %*s %255s %d @ %127s", ip, &p, name) == 3;
    else
        ok = 0;
    if (!ok || strcmp(name, master) != 0) return 0;
    snprintf(host, hostcap, "%s", ip);
    *port = p;
    return 1;
}

/* Connect to host:port and log in as user/pass ("" = no AUTH); NULL + why. */
static redisContext *open_login(const char *host, int port, const char *user, const char *pass, int timeout_ms,
                                char *why, size_t whylen)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (c == NULL || c->err) {
        err_set(why, whylen, "%s:%d: %s", host, port, c ? c->errstr : "out of memory");
        goto fail;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        err_set(why, whylen, "%s:%d: %s", host, port, c->errstr);
        goto fail;
    }
    if (pass[0] != '\0') {
        redisReply *r = user[0] != '\0' ? redisCommand(c, "AUTH %s %s", user, pass) : redisCommand(c, "AUTH %s", pass);
        int bad = r == NULL || r->type == REDIS_REPLY_ERROR;
        if (bad) err_set(why, whylen, "%s:%d: AUTH: %s", host, port, r ? r->str : c->errstr);
        if (r != NULL) freeReplyObject(r);
        if (bad) goto fail;
    }
    return c;
fail:
    if (c != NULL) redisFree(c);
    return NULL;
}

/* Whether host:port is a master now (ROLE), logged in with the URL's credentials. */
static int is_master(const redis_url *u, const char *host, int port, int timeout_ms, char *why, size_t whylen)
{
    redisContext *c = open_login(host, port, u->user, u->pass, timeout_ms, why, whylen);
    if (c == NULL) return 0;
    redisReply *r = redisCommand(c, "ROLE");
    int ok = r != NULL && sentinel_reply_is_master(r, host, port, why, whylen);
    if (r == NULL) err_set(why, whylen, "%s:%d is not a master (ROLE: %s)", host, port, c->errstr);
    if (r != NULL) freeReplyObject(r);
    redisFree(c);
    return ok;
}

void redis_url_at(const redis_url *u, const char *host, int port, redis_url *out)
{
    *out = *u;
    snprintf(out->host, sizeof out->host, "%.255s", host);
    out->port = port;
    out->is_unix = 0;
    out->nhosts = 1;
    snprintf(out->hosts[0].host, sizeof out->hosts[0].host, "%.255s", host);
    out->hosts[0].port = port;
    out->sentinel_master[0] = out->sentinel_user[0] = out->sentinel_pass[0] = '\0';
}

/* The URL's servers as askall targets, logged in as the Sentinels (sentinel = 1) or not at all. */
static void targets_of(const redis_url *u, int sentinel, askall_target *t)
{
    for (int i = 0; i < u->nhosts; i++)
        t[i] = (askall_target){.host = u->hosts[i].host,
                               .port = u->hosts[i].port,
                               .user = sentinel ? u->sentinel_user : "",
                               .pass = sentinel ? u->sentinel_pass : ""};
}

/* Send the command fmt to u's servers at once (askall.h), each answer to fn. */
static void ask_each(const redis_url *u, int sentinel, int timeout_ms, askall_fn *fn, void *arg, char *why,
                     size_t whylen, const char *fmt, ...)
{
    askall_target t[REDIS_URL_MAX_HOSTS];
    targets_of(u, sentinel, t);
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    int len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    if (len < 0 || askall(t, u->nhosts, cmd, (size_t)len, timeout_ms, fn, arg) < 0)
        err_set(why, whylen, "out of memory");
    free(cmd);
}

/* The Sentinels' answers so far (ask_sentinels). */
typedef struct votes {
    const redis_url *u;
    sentinel_named *named;
    int n;
    char *why;
    size_t whylen;
} votes;

static int on_sentinel_answer(void *arg, int i, redisReply *r, const char *why)
{
    votes *v = arg;
    char host[256];
    int port;
    if (r == NULL)
        err_set(v->why, v->whylen, "Sentinel %s", why);
    else if (sentinel_reply_addr(v->u, &v->u->hosts[i], r, host, sizeof host, &port, v->why, v->whylen) == 0)
        v->n = sentinel_vote(v->named, v->n, host, port);
    return v->n > 0 && 2 * v->named[0].votes > v->u->nhosts ? ASKALL_STOP : ASKALL_MORE;
}

/* Every Sentinel is asked, all at once: right after a failover some still name the old master, and
 * checking the majority's choice first spares a ROLE on a dead or stopped node. The asking ends when
 * one master is named by a majority of the URL's Sentinels (the others cannot outvote it), when all
 * answered or failed, or after timeout_ms: a Sentinel that accepts and never answers costs nothing
 * while a majority answers. The masters named, most named first. */
static int ask_sentinels(const redis_url *u, int timeout_ms, sentinel_named *out, char *why, size_t whylen)
{
    votes v = {.u = u, .named = out, .why = why, .whylen = whylen};
    ask_each(u, 1, timeout_ms, on_sentinel_answer, &v, why, whylen, "SENTINEL get-master-addr-by-name %s",
             u->sentinel_master);
    if (v.n == 0 && why[0] == '\0') err_set(why, whylen, "no Sentinel answered within %d ms", timeout_ms);
    return v.n;
}

static int resolve_sentinel(const redis_url *u, int timeout_ms, redis_url *out, char *err, size_t errlen)
{
    char why[512] = "";
    sentinel_named named[REDIS_URL_MAX_HOSTS];
    int n = ask_sentinels(u, timeout_ms, named, why, sizeof why);
    for (int i = 0; i < n; i++)
        if (is_master(u, named[i].host, named[i].port, timeout_ms, why, sizeof why)) {
            redis_url_at(u, named[i].host, named[i].port, out);
            return 0;
        }
    err_set(err, errlen, "no master '%s' found through %d Sentinel(s) (last: %s)", u->sentinel_master, u->nhosts, why);
    return -1;
}

/* The first answer among several servers asked at once (resolve_seeds, sentinel_command). */
typedef struct first_answer {
    int from; /* -1 until one answered */
    redisReply *r;
    char *why;
    size_t whylen;
} first_answer;

static int on_first_answer(void *arg, int i, redisReply *r, const char *why)
{
    first_answer *f = arg;
    if (r == NULL) {
        err_set(f->why, f->whylen, "%s", why);
        return ASKALL_MORE;
    }
    f->from = i;
    f->r = r;
    return ASKALL_STOP | ASKALL_KEPT;
}

/* Every seed is pinged at once and the first to answer is used (NOAUTH is an answer too: the node is
 * alive, and any node of a cluster routes us to the others). */
static int resolve_seeds(const redis_url *u, int timeout_ms, redis_url *out, char *err, size_t errlen)
{
    char why[512] = "no answer within the timeout";
    first_answer f = {.from = -1, .why = why, .whylen = sizeof why};
    ask_each(u, 0, timeout_ms, on_first_answer, &f, why, sizeof why, "PING");
    if (f.r != NULL) {
        freeReplyObject(f.r);
        redis_url_at(u, u->hosts[f.from].host, u->hosts[f.from].port, out);
        return 0;
    }
    err_set(err, errlen, "none of the %d Redis nodes of the URL answers (last: %s)", u->nhosts, why);
    return -1;
}

int redis_url_resolve(const redis_url *u, int timeout_ms, redis_url *out, char *err, size_t errlen)
{
    if (!redis_url_needs_resolve(u)) {
        *out = *u;
        return 0;
    }
    sigpipe_guard g;
    sigpipe_hold(&g);
    int rc = u->sentinel_master[0] != '\0' ? resolve_sentinel(u, timeout_ms, out, err, errlen)
                                           : resolve_seeds(u, timeout_ms, out, err, errlen);
    sigpipe_release(&g);
    return rc;
}

redisReply *sentinel_command(const redis_url *u, int timeout_ms, char *err, size_t errlen, const char *fmt, ...)
{
    err_set(err, errlen, "no Sentinel in the URL");
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    int len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    if (len < 0) {
        err_set(err, errlen, "out of memory");
        return NULL;
    }
    askall_target t[REDIS_URL_MAX_HOSTS];
    targets_of(u, 1, t);
    first_answer f = {.from = -1, .why = err, .whylen = errlen};
    sigpipe_guard g;
    sigpipe_hold(&g);
    int done = askall(t, u->nhosts, cmd, (size_t)len, timeout_ms, on_first_answer, &f);
    if (f.r == NULL && done >= 0 && done < u->nhosts) /* else err says why the last one failed */
        err_set(err, errlen, "no Sentinel of the %d answered within %d ms", u->nhosts, timeout_ms);
    sigpipe_release(&g);
    free(cmd);
    return f.r;
}

int sentinel_master_changed(const redis_url *u, const char *host, int port, int timeout_ms, redis_url *out)
{
    if (u->sentinel_master[0] == '\0') return 0;
    sigpipe_guard g;
    sigpipe_hold(&g);
    char why[512] = "";
    sentinel_named named[REDIS_URL_MAX_HOSTS];
    int n = ask_sentinels(u, timeout_ms, named, why, sizeof why), changed = 0;
    for (int i = 0; i < n && !changed; i++) {
        if (named[i].port == port && strcmp(named[i].host, host) == 0) break; /* ours is the most named */
        if (is_master(u, named[i].host, named[i].port, timeout_ms, why, sizeof why)) {
            redis_url_at(u, named[i].host, named[i].port, out);
            changed = 1;
        }
    }
    sigpipe_release(&g);
    return changed;
}

/* ---------------------------------------------------------------------------------------------- */
/* Failover announcements */

struct sentinel_watch {
    char master[128];
    int n;
    redisContext *c[REDIS_URL_MAX_HOSTS];
};

void sentinel_watch_close(sentinel_watch *w)
{
    if (w == NULL) return;
    for (int i = 0; i < w->n; i++) redisFree(w->c[i]);
    free(w);
}

/* Subscription i is dropped (the last one takes its place). */
static void watch_drop(sentinel_watch *w, int i)
{
    redisFree(w->c[i]);
    w->c[i] = w->c[--w->n];
}

/* Connect to every Sentinel at once (a host that drops connection attempts delays the others nothing)
 * with the login and the SUBSCRIBE queued, and wait up to timeout_ms for each to be sent; a Sentinel
 * whose connection fails or is not sent by then is left out. The login's reply and the confirmations
 * (one per channel) are read by sentinel_watch_wait: a refused login breaks that subscription. */
sentinel_watch *sentinel_watch_open(const redis_url *u, int timeout_ms)
{
    if (u->sentinel_master[0] == '\0') return NULL;
    sentinel_watch *w = calloc(1, sizeof *w);
    if (w == NULL) return NULL;
    snprintf(w->master, sizeof w->master, "%s", u->sentinel_master);
    sigpipe_guard g;
    sigpipe_hold(&g);
    for (int i = 0; i < u->nhosts; i++) {
        redisContext *c = redisConnectNonBlock(u->hosts[i].host, u->hosts[i].port);
        int ok = c != NULL && !c->err;
        if (ok && u->sentinel_pass[0] != '\0')
            ok = (u->sentinel_user[0] != '\0' ? redisAppendCommand(c, "AUTH %s %s", u->sentinel_user, u->sentinel_pass)
                                              : redisAppendCommand(c, "AUTH %s", u->sentinel_pass)) == REDIS_OK;
        if (ok) ok = redisAppendCommand(c, "SUBSCRIBE +switch-master +promoted-slave") == REDIS_OK;
        if (ok)
            w->c[w->n++] = c;
        else if (c != NULL)
            redisFree(c);
    }
    int sent[REDIS_URL_MAX_HOSTS] = {0}, unsent = w->n;
    uint64_t deadline = now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    while (unsent > 0 && now_ms() < deadline) {
        struct pollfd pfd[REDIS_URL_MAX_HOSTS];
        for (int i = 0; i < w->n; i++) pfd[i] = (struct pollfd){.fd = w->c[i]->fd, .events = sent[i] ? 0 : POLLOUT};
        int k = poll(pfd, (nfds_t)w->n, (int)(deadline - now_ms()));
        if (k < 0 && errno != EINTR) break;
        for (int i = w->n - 1; k > 0 && i >= 0; i--) { /* downwards: watch_drop moves the last one to i */
            if (sent[i] || pfd[i].revents == 0) continue;
            if (redisBufferWrite(w->c[i], &sent[i]) == REDIS_OK) {
                unsent -= sent[i] != 0;
                continue;
            }
            watch_drop(w, i);
            sent[i] = sent[w->n];
            unsent--;
        }
    }
    for (int i = w->n - 1; i >= 0; i--)
        if (!sent[i]) {
            watch_drop(w, i);
            sent[i] = sent[w->n];
        }
    sigpipe_release(&g);
    if (w->n == 0) {
        free(w);
        return NULL;
    }
    return w;
}

/* Read what subscription i has; 1 if it announced a new master, -1 if it broke (it is closed). */
static int watch_read(sentinel_watch *w, int i)
{
    int seen = 0;
    if (redisBufferRead(w->c[i]) != REDIS_OK) goto broken;
    for (;;) {
        void *r = NULL;
        if (redisGetReplyFromReader(w->c[i], &r) != REDIS_OK) goto broken;
        if (r == NULL) return seen;
        char host[256];
        int port;
        int refused = ((redisReply *)r)->type == REDIS_REPLY_ERROR; /* the login, or NOAUTH after it */
        seen |= sentinel_announcement(r, w->master, host, sizeof host, &port);
        freeReplyObject(r);
        if (refused) goto broken;
    }
broken:
    watch_drop(w, i);
    return seen ? 1 : -1;
}

int sentinel_watch_wait(sentinel_watch *w, int ms)
{
    uint64_t deadline = now_ms() + (uint64_t)(ms > 0 ? ms : 0);
    for (;;) {
        if (w->n == 0) return -1;
        struct pollfd pfd[REDIS_URL_MAX_HOSTS];
        for (int i = 0; i < w->n; i++) pfd[i] = (struct pollfd){.fd = w->c[i]->fd, .events = POLLIN};
        uint64_t now = now_ms();
        int k = poll(pfd, (nfds_t)w->n, now >= deadline ? 0 : (int)(deadline - now));
        if (k < 0 && errno != EINTR) return -1;
        int seen = 0;
        for (int i = w->n - 1; k > 0 && i >= 0; i--) /* downwards: watch_read moves the last one to i */
            if (pfd[i].revents != 0 && watch_read(w, i) == 1) seen = 1;
        if (seen) return 1;
        if (now_ms() >= deadline) return 0;
    }
}
