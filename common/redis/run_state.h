/* run_state.h: reading a run's committed global state (parameters, outer momentum, Delayed Nesterov
 * buffer) out of Redis, without a shard-server.
 *
 * One HMGET of every shard's refs (version, snapshot, log, digest) in dl:{R}:shards, so all shards come
 * from the same instant, then common/format/replay.c rebuilds each shard (snapshot + log replay + digest
 * check). What may differ between shards is the caller's (RUN_STATE_*): the checkpoint export wants each
 * fragment's shards at one version (a Streaming run's fragments never line up while it trains, and an
 * async run's never at all), or once the run is shut down any versions (async: a submission delivered to
 * some owners only stays so) or each fragment at its lowest (sync: a round committed by some owners only is
 * left out); the evaluator takes any. */
#ifndef DILOCO_RUN_STATE_H
#define DILOCO_RUN_STATE_H
#include <stddef.h>
#include <stdint.h>

#include "format/runconf.h"
#include "redis/rconn.h"

/* Which shard versions a read takes (else it tries again): */
enum {
    RUN_STATE_ONE_VERSION = 0, /* every shard at one version */
    RUN_STATE_ANY = 1,         /* any */
    RUN_STATE_FRAGMENTS = 2,   /* each fragment's shards at one version */
    /* each fragment's shards at its lowest version, at once: a shard ahead of it is rebuilt at that version
     * (its snapshot and the log entries up to it, which must give the digest k:digests recorded then). For a
     * sync run shut down between the commits of one round's shards, which stays torn: the state it had
     * before that round. A shard whose durable state no longer reaches back (a newer snapshot trimmed the
     * log) or whose digest of that version is not recorded is taken as it stands, with a warning. */
    RUN_STATE_FRAGMENTS_LOWEST = 3,
};

typedef struct run_state {
    float *params, *mom; /* numel fp32 each */
    float *dnbuf;        /* numel fp32 when the run has a Delayed Nesterov buffer, else NULL */
    int has_mom;
    int64_t version;     /* the common version (the lowest shard version when they differ) */
    int64_t max_version; /* the highest shard version */
    int64_t *versions;   /* per shard: the version taken */
    int rolled_back;     /* RUN_STATE_FRAGMENTS_LOWEST: how many shards were taken below their version */
    char (*digests)[17]; /* per shard */
} run_state;

/* Allocate the buffers for run `rc` (free with run_state_free). */
int run_state_alloc(run_state *st, const runconf *rc, char *err, size_t errlen);
void run_state_free(run_state *st);

/* The shard versions now: lowest and highest (one HMGET). */
int run_state_versions(rconn *c, const runconf *rc, int64_t *min_version, int64_t *max_version, char *err,
                       size_t errlen);

/* One attempt at reading the state: 0 done, 1 try again (the shard versions are not what `versions`
 * (RUN_STATE_*) takes, or a blob was trimmed while we read; *why says which), -1 error. */
int run_state_read_once(rconn *c, const runconf *rc, int versions, run_state *st, char *why, size_t whylen, char *err,
                        size_t errlen);

/* run_state_read_once until it succeeds or timeout_ms passes (then -1, with a message that says what to
 * do). */
int run_state_read(rconn *c, const runconf *rc, int versions, int timeout_ms, run_state *st, char *err, size_t errlen);
#endif
