/*
 * rasync.c: one asynchronous hiredis connection (0.14 API, libevent adapter) that never gives up.
 *
 * The shard-server must never exit because Redis went away: a lost connection is re-opened with
 * exponential backoff (100 ms .. 5 s, jittered), and every command that was in flight gets a NULL
 * reply so its owner treats the outcome as unknown. hiredis 0.14 has no command timeout, so a watchdog
 * drops the connection when commands are pending and nothing has come back for stall_ms (a Redis that
 * is SIGSTOPped or a silent network partition). AUTH and SELECT are sent first on every connection; a
 * final refusal of them (rconn_error_final: the password or user changed under us) stops the process.
 *
 * Redis Cluster (route.c): once the cluster's slot map is known, ra_cmd sends a command to this
 * connection's twin on the master of its key (a connection like this one, opened on first use and
 * accepting commands while it connects); a MOVED or ASK reply is followed here, so callers only ever
 * see the final reply. Each command's arguments are kept until its reply for that.
 */
#include "ss.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libevent.h>

#include "log.h"
#include "rconn.h"
#include "util.h"

#define RA_BACKOFF_BASE_MS 100
#define RA_BACKOFF_CAP_MS 5000
#define RA_WATCH_MS 500

typedef struct ra_call {
    rasync *owner; /* the connection the caller used */
    rasync *conn;  /* the one it was sent on (owner or one of its twins) */
    ra_cb *cb;
    void *priv;
    int hops;      /* redirections followed */
    int argc;
    const char **argv; /* copies, after the struct, to resend after a redirection */
    size_t *argvlen;
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
    ra->last_activity = now_ms(); /* pending: a twin may have commands queued while connecting */
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
        if (rconn_error_final(r->str))
            ss_refused(ra ? ra->name : "?", r->str);
        else
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

static void ra_on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* May commands be queued on ra now? A twin queues them while it connects (hiredis sends them once
 * connected, after AUTH, or fails them with NULL replies). */
static int ra_accepting(const rasync *ra)
{
    return ra->ac != NULL && !(ra->ac->c.flags & REDIS_DISCONNECTING) && (ra->ready || ra->is_twin);
}

static int ra_send(rasync *conn, ra_call *call, int asking)
{
    if (!ra_accepting(conn))
        return -1;
    if (asking && redisAsyncCommand(conn->ac, NULL, NULL, "ASKING") != REDIS_OK)
        return -1;
    if (redisAsyncCommandArgv(conn->ac, ra_on_reply, call, call->argc, call->argv, call->argvlen) != REDIS_OK)
        return -1;
    call->conn = conn;
    if (conn->pending == 0)
        conn->last_activity = now_ms();
    conn->pending++;
    return 0;
}

/* A twin owns its URL and name. */
typedef struct ra_twin_conn {
    rasync ra; /* first: a twin is freed through its rasync pointer */
    redis_url url;
    char name[300];
} ra_twin_conn;

/* This connection's twin on cluster node `node` (-1: itself), opened now if needed; NULL if it cannot be. */
static rasync *ra_twin(rasync *ra, int node)
{
    if (node < 0)
        return ra;
    if (ra->twin[node] != NULL)
        return ra->twin[node];
    ra_twin_conn *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    if (route_node_url(ra->route, node, ra->url, &t->url)) {
        free(t);
        return ra->twin[node] = ra;
    }
    snprintf(t->name, sizeof t->name, "%s@%s:%d", ra->name, t->url.host, t->url.port);
    if (ra_init(&t->ra, t->name, &t->url, ra->base, ra->stall_ms) != 0) {
        free(t);
        return NULL;
    }
    t->ra.is_twin = 1;
    t->ra.route = ra->route;
    return ra->twin[node] = &t->ra;
}

static void ra_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    ra_call *call = privdata;
    rasync *conn = call->conn;
    if (conn->ac == ac && reply != NULL) {
        conn->pending--;
        conn->last_activity = now_ms();
    }
    cluster_redirect rd;
    if (call->owner->route != NULL && call->hops < CLUSTER_MAX_HOPS &&
        cluster_reply_redirect(reply, conn->url->host, &rd)) {
        int node = route_learn(call->owner->route, &rd);
        rasync *to = node >= 0 ? ra_twin(call->owner, node) : NULL;
        call->hops++;
        if (to != NULL && ra_send(to, call, rd.ask) == 0)
            return;
        log_warn("redis %s connection: cannot follow %s", call->owner->name, ((redisReply *)reply)->str);
        reply = NULL; /* not executed; the caller retries as after a lost connection */
    }
    ra_cb *cb = call->cb;
    void *priv = call->priv;
    free(call);
    if (cb != NULL)
        cb(reply, priv);
}

int ra_cmd(rasync *ra, ra_cb *cb, void *priv, int argc, const char **argv, const size_t *argvlen)
{
    size_t bytes = sizeof(ra_call) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    size_t lens[64];
    if (argc <= 0 || argc > 64)
        return -1;
    for (int i = 0; i < argc; i++) {
        lens[i] = argvlen != NULL ? argvlen[i] : strlen(argv[i]);
        bytes += lens[i];
    }
    rasync *conn = ra_twin(ra, route_node(ra->route, cluster_command_slot(argc, argv, lens)));
    if (conn == NULL || !ra_accepting(conn))
        return -1;
    ra_call *call = malloc(bytes);
    if (call == NULL)
        return -1;
    *call = (ra_call){ .owner = ra, .cb = cb, .priv = priv, .argc = argc };
    call->argv = (const char **)(call + 1);
    call->argvlen = (size_t *)(call->argv + argc);
    char *data = (char *)(call->argvlen + argc);
    for (int i = 0; i < argc; i++) {
        memcpy(data, argv[i], lens[i]);
        call->argv[i] = data;
        call->argvlen[i] = lens[i];
        data += lens[i];
    }
    if (ra_send(conn, call, 0) != 0) {
        free(call);
        return -1;
    }
    return 0;
}

int ra_cmds(rasync *ra, ra_cb *cb, void *priv, int argc, const char **argv)
{
    return ra_cmd(ra, cb, priv, argc, argv, NULL);
}

void ra_close(rasync *ra)
{
    for (int i = 0; i < CLUSTER_MAX_NODES; i++)
        if (ra->twin[i] != NULL && ra->twin[i] != ra) {
            ra_close(ra->twin[i]);
            free(ra->twin[i]);
            ra->twin[i] = NULL;
        }
    ra->stopping = 1;
    if (ra->ac != NULL) {
        redisAsyncContext *ac = ra->ac;
        ra->ac = NULL;
        ra->ready = 0;
        redisAsyncFree(ac);
    }
}
