/* evaluator.h: the evaluator role of bin/worker (--evaluate-every N), and --eval-only (one evaluation).
 *
 * An evaluator is not a member of the run: it never registers, arrives at a barrier or sends a
 * pseudo-gradient, so it cannot slow a round. It polls the shard versions in dl:{R}:shards, and each
 * time the global model reaches the next multiple of N committed versions (or passed it: only the
 * current version can be read, so a busy evaluator takes the first one it sees) it rebuilds the parameters
 * from Redis (common/redis/run_state.c: snapshot + log replay, digest-checked, as a shard-server loads them),
 * computes the trainer's validation loss on them and appends it to the stream dl:{R}:evals with the
 * entry ID "<version>-1": fields loss, version, tokens (the tokens the live workers reported so far) and
 * time (unix seconds). Redis refuses an explicit ID that is not above the last one, so a restarted or
 * second evaluator never duplicates a version; a restarted one continues after the stream's last
 * entry. A Streaming run's fragments are never at one version while it trains: there the evaluator
 * takes every shard as committed and reports the lowest version. */
#ifndef DILOCO_EVALUATOR_H
#define DILOCO_EVALUATOR_H
#include <stddef.h>
#include <stdint.h>

#include "format/runconf.h"
#include "redis/rconn.h"
#include "trainer.h"

typedef struct evaluator_options {
    const char *redis_url;
    const char *run;
    int every;   /* evaluate once per N versions (N >= 1) */
    int poll_ms; /* between looks at the shard versions */
    int connect_timeout_ms;
    const volatile int *stop; /* set by a signal handler: leave after the current evaluation */
} evaluator_options;

/* Evaluate run `rc` with trainer `t` (its params are overwritten) until *stop or the run is shut
 * down. 0 on a clean stop, -1 with err when Redis refuses us for good or the trainer fails. */
int evaluator_run(const evaluator_options *o, const runconf *rc, trainer *t, char *err, size_t errlen);

/* bin/worker --eval-only: the validation loss of the global model as it is now, rebuilt from Redis the
 * same way, once (o->every is not used; while the shards are between two versions it looks again every
 * o->poll_ms, for at most EVALUATOR_ONCE_WAIT_MS). Not a member either: a run's barriers never wait for it,
 * and it needs no shard-server. Publishes nothing. 0 with *version and *loss, -1 with err. */
#define EVALUATOR_ONCE_WAIT_MS 60000
int evaluator_once(const evaluator_options *o, const runconf *rc, trainer *t, int64_t *version, double *loss,
                   char *err, size_t errlen);
#endif
