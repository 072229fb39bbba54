/* accept_guard.h: a listening socket that pauses, instead of spinning, when accept() fails.
 *
 * libevent's listener watches its socket level-triggered: when accept() fails for want of a descriptor
 * (EMFILE under `ulimit -n`, ENFILE, ENOBUFS), the pending connection stays in the backlog, the socket
 * stays readable, and the loop calls accept() again at once: a shard-server or `coordinator serve` held
 * at 100% CPU and wrote a million "accept failed" lines in four seconds. A guarded listener stops
 * accepting for ACCEPT_GUARD_PAUSE_MS after each failure (the kernel keeps the connections that arrive
 * meanwhile in the backlog), and says so in one log line at most every ACCEPT_GUARD_LOG_MS. */
#ifndef DILOCO_ACCEPT_GUARD_H
#define DILOCO_ACCEPT_GUARD_H

#include <event2/listener.h>

#define ACCEPT_GUARD_PAUSE_MS 200
#define ACCEPT_GUARD_LOG_MS 10000

typedef struct accept_guard accept_guard;

/* Guard l (its error callback is replaced); what names it in the log ("data plane", "HTTP"). NULL when
 * out of memory (l then keeps libevent's behaviour). Free the guard before the listener. */
accept_guard *accept_guard_new(struct evconnlistener *l, const char *what);
void accept_guard_free(accept_guard *g);
/* How many times accept() failed so far. */
unsigned long accept_guard_failures(const accept_guard *g);

#endif
