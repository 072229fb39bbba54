/*
 * wait.c: a command's reply held back until enough replicas have it (rlink_cmd_replicated).
 *
 * WAIT n timeout blocks the client until n replicas acknowledged every write the connection made so
 * far, or the timeout passes, and answers how many did. It is sent on the connection that ran the
 * command (in a cluster, the twin on the key's master), right after its reply. While fewer replicas
 * answer, it is sent again: a commit is reported durable only when replicated, however long that takes
 * (the round waits; docs/PROTOCOL.md, "Durable means replicated"). The timeout stays well below the
 * link's stall watchdog, so a WAIT in progress never looks like a frozen Redis. A lost connection ends
 * it with a NULL reply: outcome unknown, and the caller reloads from whichever master it finds.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

#define WAIT_TIMEOUT_MS 500
#define WAIT_LOG_EVERY_MS 5000

typedef struct rl_wait {
    rlink *conn;
    int replicas;
    redisReply *reply; /* the command's, copied */
    rlink_cb *cb;
    void *priv;
    rl_send_here_fn *send; /* cmd.c's, on conn itself */
    uint64_t t0, logged;
} rl_wait;

/* A deep copy of r (hiredis frees its replies when the callback returns); NULL if out of memory. */
static redisReply *reply_dup(const redisReply *r)
{
    redisReply *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->type = r->type;
    c->integer = r->integer;
    if (r->str != NULL) {
        c->str = malloc(r->len + 1);
        if (c->str == NULL) goto fail;
        memcpy(c->str, r->str, r->len);
        c->str[r->len] = '\0';
        c->len = r->len;
    }
    if (r->elements > 0) {
        c->element = calloc(r->elements, sizeof *c->element);
        if (c->element == NULL) goto fail;
        c->elements = r->elements;
        for (size_t i = 0; i < r->elements; i++)
            if ((c->element[i] = reply_dup(r->element[i])) == NULL) goto fail;
    }
    return c;
fail:
    freeReplyObject(c);
    return NULL;
}

static void wait_done(rl_wait *w, redisReply *reply)
{
    if (w->cb != NULL) w->cb(reply, w->priv);
    freeReplyObject(w->reply);
    free(w);
}

static int wait_send(rl_wait *w);

static void on_wait(redisReply *r, void *priv)
{
    rl_wait *w = priv;
    if (r == NULL) {
        wait_done(w, NULL);
        return;
    }
    if (r->type == REDIS_REPLY_INTEGER && r->integer >= w->replicas) {
        wait_done(w, w->reply);
        return;
    }
    uint64_t now = now_ms();
    if (now - w->logged >= WAIT_LOG_EVERY_MS) {
        log_warn("redis %s connection: %s; waiting for %d replica(s) to have the write (%.1f s so far)", w->conn->name,
                 r->type == REDIS_REPLY_ERROR ? r->str : "fewer replicas acknowledged it", w->replicas,
                 (double)(now - w->t0) / 1000.0);
        w->logged = now;
    }
    if (wait_send(w) != 0) wait_done(w, NULL);
}

static int wait_send(rl_wait *w)
{
    char n[16], ms[16];
    snprintf(n, sizeof n, "%d", w->replicas);
    snprintf(ms, sizeof ms, "%d", WAIT_TIMEOUT_MS);
    const char *argv[3] = {"WAIT", n, ms};
    return w->send(w->conn, on_wait, w, 3, argv);
}

void rl_wait_replicas(rlink *conn, int replicas, const redisReply *reply, rlink_cb *cb, void *priv,
                      rl_send_here_fn *send)
{
    rl_wait *w = calloc(1, sizeof *w);
    redisReply *copy = w != NULL ? reply_dup(reply) : NULL;
    if (copy == NULL) {
        free(w);
        log_error("redis %s connection: out of memory waiting for replicas", conn->name);
        if (cb != NULL) cb(NULL, priv);
        return;
    }
    *w = (rl_wait){
        .conn = conn, .replicas = replicas, .reply = copy, .cb = cb, .priv = priv, .send = send, .t0 = now_ms()};
    w->logged = w->t0;
    if (wait_send(w) != 0) wait_done(w, NULL);
}
