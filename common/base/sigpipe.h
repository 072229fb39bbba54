/* sigpipe.h: write to a socket whose peer is gone without a SIGPIPE killing the process.
 *
 * Our own sockets send with MSG_NOSIGNAL (frame.c), but hiredis 0.14 writes with write(), which on a
 * closed connection (always on a unix socket, on TCP once the peer's reset arrived) raises SIGPIPE,
 * whose default action ends the process. A program can ignore SIGPIPE; a library must not decide that
 * for the program that embeds it. So the code around hiredis calls holds SIGPIPE blocked in the calling
 * thread for the call, and afterwards takes back a SIGPIPE the call raised (the usual technique of
 * libpq and OpenSSL). The write then just fails with EPIPE and the caller sees a broken connection.
 *
 *     sigpipe_guard g;
 *     sigpipe_hold(&g);
 *     ... calls that may write to a dead socket ...
 *     sigpipe_release(&g);
 *
 * A SIGPIPE that was already pending before the hold (the thread had it blocked) is left pending. */
#ifndef DILOCO_SIGPIPE_H
#define DILOCO_SIGPIPE_H

#include <signal.h>

typedef struct sigpipe_guard {
    sigset_t old_mask; /* the thread's mask before the hold, restored by the release */
    int was_pending;   /* a SIGPIPE was pending already: not ours to take */
} sigpipe_guard;

void sigpipe_hold(sigpipe_guard *g);
void sigpipe_release(sigpipe_guard *g);

#endif
