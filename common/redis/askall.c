/*
 * askall.c: askall() (askall.h): the command and any AUTH before it are queued on a non-blocking
 * hiredis context per target; one poll() over all of them writes what a socket takes (a connect in
 * progress completes as the socket turns writable) and reads what arrives, until the caller has its
 * answer, every target is done, or the deadline.
 */
#include "redis/askall.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include "base/util.h"

typedef struct slot {
    redisContext *c; /* NULL once done */
    int auth;        /* an AUTH reply is still to come, before the command's */
    int written;     /* everything queued is on the wire */
} slot;

/* Open target t's context with the login and cmd queued; NULL + why. */
static redisContext *open_slot(const askall_target *t, const char *cmd, size_t len, int *auth, char *why, size_t whylen)
{
    redisContext *c = redisConnectNonBlock(t->host, t->port);
    if (c == NULL || c->err) {
        err_set(why, whylen, "%s:%d: %s", t->host, t->port, c != NULL ? c->errstr : "out of memory");
        if (c != NULL) redisFree(c);
        return NULL;
    }
    *auth = t->pass[0] != '\0';
    int rc = !*auth               ? REDIS_OK
             : t->user[0] != '\0' ? redisAppendCommand(c, "AUTH %s %s", t->user, t->pass)
                                  : redisAppendCommand(c, "AUTH %s", t->pass);
    if (rc != REDIS_OK || redisAppendFormattedCommand(c, cmd, len) != REDIS_OK) {
        err_set(why, whylen, "%s:%d: %s", t->host, t->port, c->errstr);
        redisFree(c);
        return NULL;
    }
    return c;
}

/* Target i is done: its context closed, fn told (r NULL: why). The fn's verdict. */
static int finish(slot *s, int i, redisReply *r, const char *why, askall_fn *fn, void *arg)
{
    redisFree(s[i].c);
    s[i].c = NULL;
    int v = fn(arg, i, r, why);
    if (r != NULL && !(v & ASKALL_KEPT)) freeReplyObject(r);
    return v & ASKALL_STOP;
}

/* Serve slot i after poll() saw revents on it: write, read, and hand over its answer. 1 when the
 * slot ended and fn said stop. */
static int serve(const askall_target *t, slot *s, int i, short revents, askall_fn *fn, void *arg)
{
    redisContext *c = s[i].c;
    char why[300];
    if (!s[i].written && (revents & (POLLOUT | POLLERR | POLLHUP)) && redisBufferWrite(c, &s[i].written) != REDIS_OK)
        goto failed;
    if (!(revents & (POLLIN | POLLERR | POLLHUP))) return 0;
    if (redisBufferRead(c) != REDIS_OK) goto failed;
    for (;;) {
        void *r = NULL;
        if (redisGetReplyFromReader(c, &r) != REDIS_OK) goto failed;
        if (r == NULL) return 0;
        redisReply *reply = r;
        if (!s[i].auth) return finish(s, i, reply, NULL, fn, arg);
        s[i].auth = 0;
        int refused = reply->type == REDIS_REPLY_ERROR;
        if (refused) err_set(why, sizeof why, "%s:%d: AUTH: %s", t[i].host, t[i].port, reply->str);
        freeReplyObject(reply);
        if (refused) return finish(s, i, NULL, why, fn, arg);
    }
failed:
    err_set(why, sizeof why, "%s:%d: %s", t[i].host, t[i].port, c->errstr);
    return finish(s, i, NULL, why, fn, arg);
}

int askall(const askall_target *t, int n, const char *cmd, size_t len, int timeout_ms, askall_fn *fn, void *arg)
{
    slot *s = calloc((size_t)(n > 0 ? n : 1), sizeof *s);
    struct pollfd *pfd = calloc((size_t)(n > 0 ? n : 1), sizeof *pfd);
    int *at = calloc((size_t)(n > 0 ? n : 1), sizeof *at); /* pfd[k] watches slot at[k] */
    if (s == NULL || pfd == NULL || at == NULL) {
        free(s);
        free(pfd);
        free(at);
        return -1;
    }
    int done = 0, stop = 0;
    for (int i = 0; i < n && !stop; i++) {
        char why[300];
        s[i].c = open_slot(&t[i], cmd, len, &s[i].auth, why, sizeof why);
        if (s[i].c == NULL) {
            done++;
            stop = fn(arg, i, NULL, why) & ASKALL_STOP;
        }
    }
    uint64_t deadline = now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
    while (!stop && done < n) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (s[i].c != NULL) {
                pfd[k] = (struct pollfd){.fd = s[i].c->fd, .events = (short)(POLLIN | (s[i].written ? 0 : POLLOUT))};
                at[k++] = i;
            }
        uint64_t now = now_ms();
        if (now >= deadline) break;
        int ready = poll(pfd, (nfds_t)k, (int)(deadline - now));
        if (ready < 0 && errno != EINTR) break;
        for (int j = 0; j < k && ready > 0 && !stop; j++) {
            if (pfd[j].revents == 0) continue;
            int i = at[j];
            stop = serve(t, s, i, pfd[j].revents, fn, arg);
            done += s[i].c == NULL;
        }
    }
    for (int i = 0; i < n; i++)
        if (s[i].c != NULL) redisFree(s[i].c);
    free(s);
    free(pfd);
    free(at);
    return done;
}
