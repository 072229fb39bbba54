/* sigpipe.c: the SIGPIPE guard of sigpipe.h. A few system calls per guarded call, made only around
 * Redis commands (a network round trip each), never on the data plane (MSG_NOSIGNAL there). */
#include "base/sigpipe.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

static int sigpipe_pending(void)
{
    sigset_t pending;
    return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
}

void sigpipe_hold(sigpipe_guard *g)
{
    int saved = errno;
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &g->old_mask);
    /* only a thread that blocked SIGPIPE itself can have one pending at this point */
    g->was_pending = sigismember(&g->old_mask, SIGPIPE) == 1 && sigpipe_pending();
    errno = saved;
}

void sigpipe_release(sigpipe_guard *g)
{
    int saved = errno;
    if (!g->was_pending && sigpipe_pending()) {
        sigset_t pipe_only;
        sigemptyset(&pipe_only);
        sigaddset(&pipe_only, SIGPIPE);
        struct timespec now = {0, 0};
        while (sigtimedwait(&pipe_only, NULL, &now) < 0 && errno == EINTR) {}
    }
    pthread_sigmask(SIG_SETMASK, &g->old_mask, NULL);
    errno = saved;
}
