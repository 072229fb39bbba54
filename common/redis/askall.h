/*
 * askall.h: one command sent to several Redis servers at once, for a thread that may block.
 *
 * The blocking resolver (sentinel.c) asks every Sentinel of a URL, or pings every seed of a Cluster
 * URL. Asked one after the other, a server that accepts connections and never answers would cost each
 * (re)connect its whole timeout before the next is asked; asked together, the answers of the others
 * arrive meanwhile and the caller may stop at the first that settles the question. The connections are
 * hiredis contexts in non-blocking mode waited for with poll(); the call itself blocks, at most
 * timeout_ms in all. The caller holds SIGPIPE off (sigpipe.h), as for any hiredis write.
 */
#ifndef DILOCO_ASKALL_H
#define DILOCO_ASKALL_H

#include <stddef.h>

struct redisReply;

/* One server to ask: its address and the login to send first (pass "" = no AUTH; user "" = AUTH pass). */
typedef struct askall_target {
    const char *host;
    int port;
    const char *user;
    const char *pass;
} askall_target;

/* What an askall_fn tells askall after an answer. */
enum { ASKALL_MORE = 0, ASKALL_STOP = 1, ASKALL_KEPT = 2 /* the callback keeps r (free it with freeReplyObject) */ };

/* Target i's reply r to the command (NULL when it could not be asked: why says what happened; an AUTH
 * refusal is such a failure). Called once per target that answers or fails before the end, in the
 * order of the answers. Returns ASKALL_MORE, or ASKALL_STOP to end the asking now, or'ed with
 * ASKALL_KEPT when it keeps r. */
typedef int askall_fn(void *arg, int i, struct redisReply *r, const char *why);

/* Send cmd (a command formatted by redisFormatCommand, len bytes) to the n targets at once and hand
 * each answer to fn until fn says stop, every target answered or failed, or timeout_ms passed. The
 * number of targets that answered or failed; -1 when out of memory. */
int askall(const askall_target *t, int n, const char *cmd, size_t len, int timeout_ms, askall_fn *fn, void *arg);

#endif
