/*
 * cmd.c: the RLINK_CMD transport (rlink.h): any command, on a hiredis 0.14 asynchronous connection
 * attached to the libevent loop.
 *
 * A lost connection hands NULL replies to the commands in flight (hiredis does) and is reported to
 * state.c, which schedules the reconnect. Each command's arguments are copied with it and kept until
 * its reply, so a MOVED or ASK reply can resend it on the right twin (route.c): callers only see the
 * final reply.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libevent.h>

#include "base/log.h"
#include "base/util.h"
#include "redis/rconn.h"

#define CMD_MAX_ARGS 64
#define NOREPLICAS_PATIENCE_MS 10000

typedef struct cmd_call {
    rlink *owner; /* the link the caller used */
    rlink *conn;  /* the one it was sent on (owner or one of its twins) */
    rlink_cb *cb;
    void *priv;
    int hops;         /* redirections followed */
    int replicas;     /* > 0: WAIT for that many replicas before cb (wait.c) */
    unsigned refused; /* NOREPLICAS replies so far (the command did not run: sent again) */
    uint64_t first_refused_ms;
    int argc;
    const char **argv; /* copies, after the struct, to resend after a redirection */
    size_t *argvlen;
} cmd_call;

static void cmd_on_connect(const redisAsyncContext *ac, int status)
{
    rlink *l = ac->data;
    if (l == NULL || l->ac != ac) return;
    if (status != REDIS_OK) {
        log_warn("redis %s connection: connect failed: %s; retrying", l->name, ac->errstr);
        l->ac = NULL; /* hiredis frees it after this callback */
        rl_state_lost(l);
        return;
    }
    rl_state_connected(l);
}

static void cmd_on_disconnect(const redisAsyncContext *ac, int status)
{
    rlink *l = ac->data;
    if (l == NULL || l->ac != ac) return;
    /* (hiredis ends a connection on an error reply nobody asked for: maxclients reached, said at accept) */
    int refused = !l->stopping && status != REDIS_OK && rl_state_refused(l, ac->errstr);
    if (!l->stopping && !refused)
        log_warn("redis %s connection lost (%s); reconnecting", l->name, status == REDIS_OK ? "closed" : ac->errstr);
    l->ac = NULL;
    rl_state_lost(l);
}

static void cmd_on_login(redisAsyncContext *ac, void *reply, void *what)
{
    redisReply *r = reply;
    rlink *l = ac->data;
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        if (l != NULL) rl_state_login_failed(l, what, r->str);
        redisAsyncDisconnect(ac);
    }
}

static void cmd_open(rlink *l)
{
    if (l->stopping || l->ac != NULL) return;
    int where = rl_state_resolve(l);
    if (where != 0) {
        if (where < 0) rl_state_lost(l);
        return; /* 1: open is called again once the Sentinels answer */
    }
    const redis_url *u = &l->target;
    redisAsyncContext *ac = u->is_unix ? redisAsyncConnectUnix(u->path) : redisAsyncConnect(u->host, u->port);
    if (ac == NULL || ac->err) {
        log_warn("redis %s connection: %s; retrying", l->name, ac ? ac->errstr : "out of memory");
        if (ac != NULL) redisAsyncFree(ac);
        rl_state_lost(l);
        return;
    }
    ac->data = l;
    l->ac = ac;
    l->ready = 0;
    redisLibeventAttach(ac, l->base);
    redisAsyncSetConnectCallback(ac, cmd_on_connect);
    redisAsyncSetDisconnectCallback(ac, cmd_on_disconnect);
    rl_login login;
    rl_state_login_commands(u, &login);
    for (int i = 0; i < login.n; i++)
        redisAsyncCommandArgv(ac, cmd_on_login, (void *)login.what[i], login.argc[i], login.argv[i], NULL);
}

/* Free the connection now (its callbacks get NULL replies), then reconnect after backoff. */
static void cmd_drop(rlink *l, const char *why)
{
    if (l->ac != NULL) {
        if (!l->stopping) log_warn("redis %s connection lost (%s); reconnecting", l->name, why);
        redisAsyncContext *ac = l->ac;
        l->ac = NULL;
        l->ready = 0;
        redisAsyncFree(ac);
    }
    rl_state_lost(l);
}

static int cmd_is_open(const rlink *l)
{
    return l->ac != NULL;
}

/* A twin queues commands while it connects (hiredis sends them once connected, after the login, or
 * fails them with NULL replies). */
static int cmd_accepting(const rlink *l)
{
    return l->ac != NULL && !(l->ac->c.flags & REDIS_DISCONNECTING) && (l->ready || l->is_twin);
}

const rlink_transport rl_cmd_transport = {cmd_open, cmd_drop, cmd_is_open, cmd_accepting};

static void cmd_on_reply(redisAsyncContext *ac, void *reply, void *privdata);
static int cmd_here(rlink *conn, rlink_cb *cb, void *priv, int argc, const char **argv);

static int cmd_send(rlink *conn, cmd_call *call, int asking)
{
    if (!cmd_accepting(conn)) return -1;
    if (asking && redisAsyncCommand(conn->ac, NULL, NULL, "ASKING") != REDIS_OK) return -1;
    if (redisAsyncCommandArgv(conn->ac, cmd_on_reply, call, call->argc, call->argv, call->argvlen) != REDIS_OK)
        return -1;
    call->conn = conn;
    rl_state_sent(conn);
    return 0;
}

static void cmd_on_resend(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cmd_call *call = arg;
    if (cmd_send(call->conn, call, 0) != 0) {
        rlink_cb *cb = call->cb;
        void *priv = call->priv;
        free(call);
        if (cb != NULL) cb(NULL, priv); /* the connection went away meanwhile: as if lost in flight */
    }
}

/* A master without enough replicas refused the command (NOREPLICAS: it did not run): send it again on
 * the same connection after a backoff, for up to NOREPLICAS_PATIENCE_MS (a new master gets its
 * replicas within a second or two of a failover). 1 if it will be. */
static int cmd_retry_refused(cmd_call *call, const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ERROR || !rconn_error_noreplicas(r->str)) return 0;
    uint64_t now = now_ms();
    if (call->refused++ == 0) call->first_refused_ms = now;
    if (now - call->first_refused_ms >= NOREPLICAS_PATIENCE_MS) return 0;
    rl_state_check_master(call->conn); /* if another master leads now, the connection is dropped: the resend fails */
    unsigned wait = backoff_ms(call->refused - 1, 20, 500);
    struct timeval tv = {.tv_sec = wait / 1000, .tv_usec = (wait % 1000) * 1000};
    return event_base_once(call->conn->base, -1, EV_TIMEOUT, cmd_on_resend, call, &tv) == 0;
}

static void cmd_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    cmd_call *call = privdata;
    rlink *conn = call->conn;
    if (conn->ac == ac && reply != NULL) rl_state_replied(conn);
    if (cmd_retry_refused(call, reply)) return;
    const redisReply *r = reply;
    /* (a Redis at its maxclients answers the first command so, then closes: it did not run) */
    int refused = r != NULL && r->type == REDIS_REPLY_ERROR && rl_state_refused(conn, r->str);
    if (refused || rl_state_failover_reply(conn, reply)) {
        if (conn->ac == ac) redisAsyncDisconnect(ac); /* the reconnect finds the master again */
        reply = NULL;                                 /* not executed; the caller retries as after a lost connection */
    }
    rlink *to;
    int ask;
    if (reply != NULL && rl_route_redirect(call->owner, reply, conn->target.host, call->hops, &to, &ask)) {
        call->hops++;
        if (to != NULL && cmd_send(to, call, ask) == 0) return;
        log_warn("redis %s connection: cannot follow %s: " RLINK_CANNOT_FOLLOW_HINT, call->owner->name, ((redisReply *)reply)->str);
        reply = NULL; /* not executed; the caller retries as after a lost connection */
    }
    rlink_cb *cb = call->cb;
    void *priv = call->priv;
    int replicas = call->replicas;
    free(call);
    if (replicas > 0 && reply != NULL && ((redisReply *)reply)->type != REDIS_REPLY_ERROR)
        rl_wait_replicas(conn, replicas, reply, cb, priv, cmd_here);
    else if (cb != NULL)
        cb(reply, priv);
}

/* A call with copies of the arguments (NULL: out of memory or too many arguments). */
static cmd_call *cmd_new(rlink *owner, rlink_cb *cb, void *priv, int argc, const char **argv, const size_t *lens)
{
    size_t bytes = sizeof(cmd_call) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    for (int i = 0; i < argc; i++) bytes += lens[i];
    cmd_call *call = malloc(bytes);
    if (call == NULL) return NULL;
    *call = (cmd_call){.owner = owner, .cb = cb, .priv = priv, .argc = argc};
    call->argv = (const char **)(call + 1);
    call->argvlen = (size_t *)(call->argv + argc);
    char *data = (char *)(call->argvlen + argc);
    for (int i = 0; i < argc; i++) {
        memcpy(data, argv[i], lens[i]);
        call->argv[i] = data;
        call->argvlen[i] = lens[i];
        data += lens[i];
    }
    return call;
}

static int cmd_route_send(rlink *l, int replicas, rlink_cb *cb, void *priv, int argc, const char **argv,
                          const size_t *argvlen)
{
    size_t lens[CMD_MAX_ARGS];
    if (l->kind != RLINK_CMD || argc <= 0 || argc > CMD_MAX_ARGS) return -1;
    for (int i = 0; i < argc; i++) lens[i] = argvlen != NULL ? argvlen[i] : strlen(argv[i]);
    rlink *conn = rl_route_twin(l, rl_route_node(l->route, cluster_command_slot(argc, argv, lens)));
    if (conn != NULL && conn != l && !cmd_accepting(conn)) conn = l; /* see rl_route_twin in internal.h */
    if (conn == NULL || !cmd_accepting(conn)) return -1;
    cmd_call *call = cmd_new(l, cb, priv, argc, argv, lens);
    if (call == NULL) return -1;
    call->replicas = replicas;
    if (cmd_send(conn, call, 0) != 0) {
        free(call);
        return -1;
    }
    return 0;
}

int rlink_cmd(rlink *l, rlink_cb *cb, void *priv, int argc, const char **argv, const size_t *argvlen)
{
    return cmd_route_send(l, 0, cb, priv, argc, argv, argvlen);
}

int rlink_cmds(rlink *l, rlink_cb *cb, void *priv, int argc, const char **argv)
{
    return rlink_cmd(l, cb, priv, argc, argv, NULL);
}

int rlink_cmd_replicated(rlink *l, int replicas, rlink_cb *cb, void *priv, int argc, const char **argv,
                         const size_t *argvlen)
{
    return cmd_route_send(l, replicas, cb, priv, argc, argv, argvlen);
}

/* Send on this very connection (no routing: WAIT must follow its command); wait.c's sender. */
static int cmd_here(rlink *conn, rlink_cb *cb, void *priv, int argc, const char **argv)
{
    size_t lens[CMD_MAX_ARGS];
    if (argc <= 0 || argc > CMD_MAX_ARGS) return -1;
    for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
    cmd_call *call = cmd_new(conn, cb, priv, argc, argv, lens);
    if (call == NULL) return -1;
    if (cmd_send(conn, call, 0) != 0) {
        free(call);
        return -1;
    }
    return 0;
}

/* A subscription's confirmation or message (the reply array), or NULL once its connection is gone. */
static void cmd_on_subscribed(redisAsyncContext *ac, void *reply, void *privdata)
{
    rlink *l = privdata;
    if (reply != NULL && l->ac != ac) return; /* (a connection being replaced) */
    if (l->sub_cb != NULL) l->sub_cb(reply, l->sub_priv);
}

int rlink_cmd_subscribe(rlink *l, const char *channel, rlink_cb *cb, void *priv)
{
    if (l->kind != RLINK_CMD || !cmd_accepting(l)) return -1;
    l->sub_cb = cb;
    l->sub_priv = priv;
    const char *argv[2] = {"SUBSCRIBE", channel};
    return redisAsyncCommandArgv(l->ac, cmd_on_subscribed, l, 2, argv, NULL) == REDIS_OK ? 0 : -1;
}
