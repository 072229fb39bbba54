/* wake.h: listening for a sync barrier's close while we arrive (wake.c). */
#ifndef DILOCO_WAKE_H
#define DILOCO_WAKE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "redis/rconn.h"

struct diloco;

/* Our wake list, dl:{R}:wake:<id> (a process group's rank r > 0: dl:{R}:wake:<id>:<r>), into key. */
void wake_key(const struct diloco *d, char *key, size_t cap);

/* The blocking connection for BLPOPs on our wake list (a 2 s limit to open it, which stopped(arg) ends
 * (NULL: nothing), then wait_poll_ms + 10 s a command; the session's stop ends a BLPOP, dl_watch_stop):
 * NULL when Redis cannot be reached. */
struct rconn *wake_blk_open(struct diloco *d, rconn_stop_fn *stopped, void *arg);

/* A token a worker pushes to its own wake list to end its listening thread early (a failed arrival). */
#define WAKE_CANCEL "cancel"

typedef struct wake_wait {
    struct diloco *d;
    int frag;
    int64_t round;
    int closed; /* the token of round's close was popped */
    int started;
    pthread_t thread;
} wake_wait;

/* Start listening (BLPOP on d->blk, from a thread) for the close of round `round` of fragment f: call it
 * before dl_arrive. -1: no thread (then wake_finish says 0 and the usual wait decides). */
int wake_start(struct diloco *d, int f, int64_t round, wake_wait *w);
/* Wait for the listening thread (at most one BLPOP timeout, wait_poll_ms): 1 when it popped the token of
 * the close, 0 otherwise. */
int wake_finish(wake_wait *w);
/* End the listening early (push WAKE_CANCEL to our wake list) and wait for it: after a failed arrival. */
void wake_cancel(wake_wait *w);

/* With rounds of several fragments in flight at once (fragments_in_flight > 1), their barriers would share
 * the blocking connection from several threads and pop each other's tokens. Then one thread per session
 * (the hub) pops our wake list instead, and records the close of each fragment's round it popped; the
 * barrier waits ask it (wake_hub_wait). */
struct wake_hub;
/* Start the session's hub (d->hub). 0, or -1 + err. */
int wake_hub_start(struct diloco *d, char *err, size_t errlen);
/* Stop and free it (none: nothing). */
void wake_hub_stop(struct diloco *d);
/* Wait at most ms for the token of the close of round `round` of fragment f: 1 when the hub popped it
 * (before the call or during it), 0 after the timeout. */
int wake_hub_wait(struct diloco *d, int f, int64_t round, int ms);

#endif
