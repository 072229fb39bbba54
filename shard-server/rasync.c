/*
 * rasync.c: one asynchronous hiredis connection (0.14 API, libevent adapter) that never gives up.
 *
 * The shard-server must never exit because Redis went away: a lost connection is re-opened with
 * exponential backoff (100 ms .. 5 s, jittered), and every command that was in flight gets a NULL
 * reply so its owner treats the outcome as unknown. hiredis 0.14 has no command timeout, so a watchdog
 * drops the connection when commands are pending and nothing has come back for stall_ms (a Redis that
 * is SIGSTOPped or a silent network partition). AUTH and SELECT are sent first on every connection.
 */
#include "ss.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libevent.h>

#include "log.h"
#include "util.h"

#define RA_BACKOFF_BASE_MS 100
#define RA_BACKOFF_CAP_MS 5000
#define RA_WATCH_MS 500

typedef struct ra_call {
    rasync *ra;
    ra_cb *cb;
    void *priv;
} ra_call;

static void ra_connect(rasync *ra);

static void ra_schedule_retry(rasync *ra)
{
    if (ra->stopping)
        return;
    unsigned wait = backoff_ms(ra->attempt++, RA_BACKOFF_BASE_MS, RA_BACKOFF_CAP_MS);
    struct timeval tv = { .tv_sec = wait / 1000, .tv_usec = (wait % 1000) * 1000 };
    evtimer_add(ra->retry_timer, &tv);
}

static void ra_on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ra_connect(arg);
}

static void ra_on_connect(const redisAsyncContext *ac, int status)
{
    rasync *ra = ac->data;
    if (ra == NULL || ra->ac != ac)
        return;
    if (status != REDIS_OK) {
        log_warn("redis %s connection: connect failed: %s; retrying", ra->name, ac->errstr);
        ra->ac = NULL; /* hiredis frees it after this callback */
        ra->ready = 0;
        ra_schedule_retry(ra);
        return;
    }
    log_info("redis %s connection established", ra->name);
    ra->ready = 1;
    ra->attempt = 0;
    ra->pending = 0;
    ra->last_activity = now_ms();
    if (ra->on_ready != NULL)
        ra->on_ready(ra->on_ready_arg);
}

static void ra_on_disconnect(const redisAsyncContext *ac, int status)
{
    rasync *ra = ac->data;
    if (ra == NULL || ra->ac != ac)
        return;
    if (!ra->stopping)
        log_warn("redis %s connection lost (%s); reconnecting", ra->name,
                 status == REDIS_OK ? "closed" : ac->errstr);
    ra->ac = NULL;
    ra->ready = 0;
    ra->pending = 0;
    ra_schedule_retry(ra);
}

static void ra_on_auth(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)priv;
    redisReply *r = reply;
    rasync *ra = ac->data;
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        log_error("redis %s connection: %s failed: %s (check the Redis URL)", ra ? ra->name : "?",
                  priv ? (const char *)priv : "AUTH", r->str);
        redisAsyncDisconnect(ac);
    }
}

static void ra_send_login(rasync *ra)
{
    const redis_url *u = ra->url;
    if (u->user[0] != '\0') {
        const char *argv[3] = { "AUTH", u->user, u->pass };
        redisAsyncCommandArgv(ra->ac, ra_on_auth, "AUTH", 3, argv, NULL);
    } else if (u->pass[0] != '\0') {
        const char *argv[2] = { "AUTH", u->pass };
        redisAsyncCommandArgv(ra->ac, ra_on_auth, "AUTH", 2, argv, NULL);
    }
    if (u->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", u->db);
        const char *argv[2] = { "SELECT", db };
        redisAsyncCommandArgv(ra->ac, ra_on_auth, "SELECT", 2, argv, NULL);
    }
}

static void ra_connect(rasync *ra)
{
    if (ra->stopping || ra->ac != NULL)
        return;
    redisAsyncContext *ac = ra->url->is_unix ? redisAsyncConnectUnix(ra->url->path)
                                             : redisAsyncConnect(ra->url->host, ra->url->port);
    if (ac == NULL || ac->err) {
        log_warn("redis %s connection: %s; retrying", ra->name, ac ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        ra_schedule_retry(ra);
        return;
    }
    ac->data = ra;
    ra->ac = ac;
    ra->ready = 0;
    redisLibeventAttach(ac, ra->base);
    redisAsyncSetConnectCallback(ac, ra_on_connect);
    redisAsyncSetDisconnectCallback(ac, ra_on_disconnect);
    ra_send_login(ra);
}

/* Drop a connection that stopped answering; its callbacks get NULL replies. */
static void ra_on_watch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rasync *ra = arg;
    if (ra->ac == NULL || !ra->ready || ra->pending <= 0)
        return;
    uint64_t idle = now_ms() - ra->last_activity;
    if (idle < (uint64_t)ra->stall_ms)
        return;
    log_warn("redis %s connection: no reply for %llu ms with %d commands pending; reconnecting", ra->name,
             (unsigned long long)idle, ra->pending);
    redisAsyncContext *ac = ra->ac;
    ra->ac = NULL;
    ra->ready = 0;
    ra->pending = 0;
    redisAsyncFree(ac);
    ra_schedule_retry(ra);
}

int ra_init(rasync *ra, const char *name, const redis_url *url, struct event_base *base, int stall_ms)
{
    memset(ra, 0, sizeof *ra);
    ra->name = name;
    ra->url = url;
    ra->base = base;
    ra->stall_ms = stall_ms;
    ra->retry_timer = evtimer_new(base, ra_on_retry, ra);
    ra->watch_timer = event_new(base, -1, EV_PERSIST, ra_on_watch, ra);
    if (ra->retry_timer == NULL || ra->watch_timer == NULL)
        return -1;
    struct timeval tv = { .tv_sec = 0, .tv_usec = RA_WATCH_MS * 1000 };
    evtimer_add(ra->watch_timer, &tv);
    ra_connect(ra);
    return 0;
}

static void ra_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    ra_call *call = privdata;
    rasync *ra = call->ra;
    if (ra->ac == ac && reply != NULL) {
        ra->pending--;
        ra->last_activity = now_ms();
    }
    ra_cb *cb = call->cb;
    void *priv = call->priv;
    free(call);
    if (cb != NULL)
        cb(reply, priv);
}

int ra_cmd(rasync *ra, ra_cb *cb, void *priv, int argc, const char **argv, const size_t *argvlen)
{
    if (ra->ac == NULL || !ra->ready || (ra->ac->c.flags & REDIS_DISCONNECTING))
        return -1;
    ra_call *call = malloc(sizeof *call);
    if (call == NULL)
        return -1;
    call->ra = ra;
    call->cb = cb;
    call->priv = priv;
    if (redisAsyncCommandArgv(ra->ac, ra_on_reply, call, argc, argv, argvlen) != REDIS_OK) {
        free(call);
        return -1;
    }
    if (ra->pending == 0)
        ra->last_activity = now_ms();
    ra->pending++;
    return 0;
}

int ra_cmds(rasync *ra, ra_cb *cb, void *priv, int argc, const char **argv)
{
    return ra_cmd(ra, cb, priv, argc, argv, NULL);
}

void ra_close(rasync *ra)
{
    ra->stopping = 1;
    if (ra->ac != NULL) {
        redisAsyncContext *ac = ra->ac;
        ra->ac = NULL;
        ra->ready = 0;
        redisAsyncFree(ac);
    }
}
