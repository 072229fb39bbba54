/*
 * sentinel.c: redis_url_resolve() (sentinel.h) on the hiredis blocking API: ask the Sentinels, check
 * ROLE on the node they name; or pick the first seed that answers.
 */
#include "sentinel.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "sigpipe.h"
#include "util.h"

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

/* Ask one Sentinel where the master is; 0 and host/port filled. */
static int ask_sentinel(const redis_url *u, const redis_host *s, int timeout_ms, char *host, size_t hostcap, int *port,
                        char *why, size_t whylen)
{
    redisContext *c = open_login(s->host, s->port, u->sentinel_user, u->sentinel_pass, timeout_ms, why, whylen);
    if (c == NULL) return -1;
    redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", u->sentinel_master);
    int rc = -1;
    if (r == NULL)
        err_set(why, whylen, "Sentinel %s:%d: %s", s->host, s->port, c->errstr);
    else
        rc = sentinel_reply_addr(u, s, r, host, hostcap, port, why, whylen);
    if (r != NULL) freeReplyObject(r);
    redisFree(c);
    return rc;
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

/* Every Sentinel is asked: right after a failover some still name the old master, and asking the
 * majority's choice first spares a ROLE on a dead or stopped node. */
static int ask_all(const redis_url *u, int timeout_ms, sentinel_named *out, char *why, size_t whylen)
{
    int n = 0;
    for (int i = 0; i < u->nhosts; i++) {
        char host[256];
        int port;
        if (ask_sentinel(u, &u->hosts[i], timeout_ms, host, sizeof host, &port, why, whylen) == 0)
            n = sentinel_vote(out, n, host, port);
    }
    return n;
}

static int resolve_sentinel(const redis_url *u, int timeout_ms, redis_url *out, char *err, size_t errlen)
{
    char why[512] = "";
    sentinel_named named[REDIS_URL_MAX_HOSTS];
    int n = ask_all(u, timeout_ms, named, why, sizeof why);
    for (int i = 0; i < n; i++)
        if (is_master(u, named[i].host, named[i].port, timeout_ms, why, sizeof why)) {
            redis_url_at(u, named[i].host, named[i].port, out);
            return 0;
        }
    err_set(err, errlen, "no master '%s' found through %d Sentinel(s) (last: %s)", u->sentinel_master, u->nhosts, why);
    return -1;
}

static int resolve_seeds(const redis_url *u, int timeout_ms, redis_url *out, char *err, size_t errlen)
{
    char why[512] = "";
    for (int i = 0; i < u->nhosts; i++) {
        redisContext *c = open_login(u->hosts[i].host, u->hosts[i].port, "", "", timeout_ms, why, sizeof why);
        if (c == NULL) continue;
        redisReply *r = redisCommand(c, "PING"); /* NOAUTH is an answer too: the node is alive */
        if (r == NULL) err_set(why, sizeof why, "%s:%d: %s", u->hosts[i].host, u->hosts[i].port, c->errstr);
        redisFree(c);
        if (r != NULL) {
            freeReplyObject(r);
            redis_url_at(u, u->hosts[i].host, u->hosts[i].port, out);
            return 0;
        }
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
    sigpipe_guard g;
    sigpipe_hold(&g);
    redisReply *r = NULL;
    for (int i = 0; i < u->nhosts && r == NULL; i++) {
        redisContext *c =
            open_login(u->hosts[i].host, u->hosts[i].port, u->sentinel_user, u->sentinel_pass, timeout_ms, err, errlen);
        if (c == NULL) continue;
        va_list ap;
        va_start(ap, fmt);
        r = redisvCommand(c, fmt, ap);
        va_end(ap);
        if (r == NULL) err_set(err, errlen, "Sentinel %s:%d: %s", u->hosts[i].host, u->hosts[i].port, c->errstr);
        redisFree(c);
    }
    sigpipe_release(&g);
    return r;
}

int sentinel_master_changed(const redis_url *u, const char *host, int port, int timeout_ms, redis_url *out)
{
    if (u->sentinel_master[0] == '\0') return 0;
    sigpipe_guard g;
    sigpipe_hold(&g);
    char why[512];
    sentinel_named named[REDIS_URL_MAX_HOSTS];
    int n = ask_all(u, timeout_ms, named, why, sizeof why), changed = 0;
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

sentinel_watch *sentinel_watch_open(const redis_url *u, int timeout_ms)
{
    if (u->sentinel_master[0] == '\0') return NULL;
    sentinel_watch *w = calloc(1, sizeof *w);
    if (w == NULL) return NULL;
    snprintf(w->master, sizeof w->master, "%s", u->sentinel_master);
    sigpipe_guard g;
    sigpipe_hold(&g);
    for (int i = 0; i < u->nhosts; i++) {
        char why[300];
        redisContext *c = open_login(u->hosts[i].host, u->hosts[i].port, u->sentinel_user, u->sentinel_pass,
                                     timeout_ms, why, sizeof why);
        if (c == NULL) continue;
        /* the confirmations (one per channel) are read and dropped by sentinel_watch_wait */
        if (redisAppendCommand(c, "SUBSCRIBE +switch-master +promoted-slave") != REDIS_OK) {
            redisFree(c);
            continue;
        }
        int done = 0;
        while (!done && redisBufferWrite(c, &done) == REDIS_OK) {}
        if (!done) {
            redisFree(c);
            continue;
        }
        w->c[w->n++] = c;
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
        seen |= sentinel_announcement(r, w->master, host, sizeof host, &port);
        freeReplyObject(r);
    }
broken:
    redisFree(w->c[i]);
    w->c[i] = w->c[--w->n];
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
