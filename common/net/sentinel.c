/*
 * sentinel.c: redis_url_resolve() (sentinel.h) on the hiredis blocking API: ask the Sentinels, check
 * ROLE on the node they name; or pick the first seed that answers.
 */
#include "sentinel.h"

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
    else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
             r->element[1]->type == REDIS_REPLY_STRING) {
        snprintf(host, hostcap, "%s", r->element[0]->str);
        *port = atoi(r->element[1]->str);
        rc = 0;
    } else if (r->type == REDIS_REPLY_ERROR)
        err_set(why, whylen, "Sentinel %s:%d: %s", s->host, s->port, r->str);
    else
        err_set(why, whylen, "Sentinel %s:%d does not know a master named '%s'", s->host, s->port, u->sentinel_master);
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
    int ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
    if (!ok)
        err_set(why, whylen, "%s:%d is not a master (ROLE: %s)", host, port,
                r == NULL                      ? c->errstr
                : r->type == REDIS_REPLY_ERROR ? r->str
                : r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING
                    ? r->element[0]->str
                    : "unexpected reply");
    if (r != NULL) freeReplyObject(r);
    redisFree(c);
    return ok;
}

static void single(const redis_url *u, const char *host, int port, redis_url *out)
{
    *out = *u;
    snprintf(out->host, sizeof out->host, "%s", host);
    out->port = port;
    out->is_unix = 0;
    out->nhosts = 1;
    snprintf(out->hosts[0].host, sizeof out->hosts[0].host, "%s", host);
    out->hosts[0].port = port;
    out->sentinel_master[0] = out->sentinel_user[0] = out->sentinel_pass[0] = '\0';
}

static int resolve_sentinel(const redis_url *u, int timeout_ms, redis_url *out, char *err, size_t errlen)
{
    char why[512] = "";
    for (int i = 0; i < u->nhosts; i++) {
        char host[256];
        int port;
        if (ask_sentinel(u, &u->hosts[i], timeout_ms, host, sizeof host, &port, why, sizeof why) != 0) continue;
        if (is_master(u, host, port, timeout_ms, why, sizeof why)) {
            single(u, host, port, out);
            return 0;
        }
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
            single(u, u->hosts[i].host, u->hosts[i].port, out);
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
