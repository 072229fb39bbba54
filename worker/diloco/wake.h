/* wake.h: listening for a sync barrier's close while we arrive (wake.c). */
#ifndef DILOCO_WAKE_H
#define DILOCO_WAKE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct diloco;

/* Our wake list, dl:{R}:wake:<id> (a process group's rank r > 0: dl:{R}:wake:<id>:<r>), into key. */
void wake_key(const struct diloco *d, char *key, size_t cap);

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

#endif
