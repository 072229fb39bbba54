/* replay.h: rebuilding a shard's durable state (snapshot + log replay), shared by every reader.
 *
 * The durable state of shard k (docs/PROTOCOL.md) is one snapshot blob (op "snap": fp32 θ, then fp32
 * momentum when flags bit 0 is set) and the log entries committed after it (op "log": the averaged
 * pseudo-gradient g that produced each version, fp32, or in the run's codec with --download update, with the step's lr, mu, flags (bit 0 nesterov, bit 1
 * first step) and aux = participant count, 0 meaning a no-op round). Replaying is one outer_sgd_step
 * per entry with its recorded settings, exactly as shard-server/shard.c does when it loads a shard;
 * the result's XXH3 must equal k:digest.
 *
 * The pure part (replay_snapshot, replay_log, replay_shard) touches no Redis and is unit-tested
 * against direct outer_sgd_step application (tests/test_replay.c). The loaders, which read the blobs
 * out of Redis, are redis/replay_load.h's. */
#ifndef DILOCO_REPLAY_H
#define DILOCO_REPLAY_H
#include <stddef.h>
#include <stdint.h>

#include "format/blob.h"

/* A decoded blob: header and a pointer to its payload (may be unaligned). */
typedef struct replay_blob {
    blob_header h;
    const uint8_t *payload;
    size_t len;
} replay_blob;

/* The state a replay rebuilds. dnbuf (n floats) is the async Delayed Nesterov buffer of runs with
 * --dn-buffer-size (dn_buffer > 0), else NULL; a DN log entry of version v is submission number
 * dn_t0 + v (runconf.dn_t0: non-zero for a run resumed from a checkpoint). The shard-server's loader
 * and every other reader use these two functions, so there is one replay. */
typedef struct replay_state {
    float *theta, *mom, *dnbuf;
    int has_mom;
    int64_t version;
    uint32_t dn_buffer;
    int dn_variant;
    uint64_t dn_t0;
    /* k:digests of dl:{R}:shards ("v:digest,...": what each commit recorded), or NULL. When set, every
     * version reached whose digest is recorded is checked against it (a mismatch fails the step), and
     * `verified` is the newest version that matched (-1: none yet). */
    const char *digests;
    int64_t verified;
} replay_state;
/* The digest that k:digests ("v:digest,...", may be NULL) recorded for `version`, into out (17 bytes): 1, or
 * 0 when it records none. */
int replay_recorded_digest(const char *digests, int64_t version, char *out);
/* Snapshot: θ, then momentum (flags bit 0), then the DN buffer (flags bit 1; needs dnbuf). It starts the
 * replay: st->verified becomes -1, or the snapshot's version when its digest is recorded and matches. */
int replay_state_snapshot(replay_state *st, const blob_header *h, const uint8_t *payload, size_t len, size_t n,
                          char *err, size_t errlen);
/* One log entry: no-op (aux 0), a Delayed Nesterov step (flags bit 2, t = the entry's version; needs
 * dnbuf), or outer_sgd_step with the recorded lr/mu/flags. */
int replay_state_log(replay_state *st, const blob_header *h, const uint8_t *payload, size_t len, size_t n, char *err,
                     size_t errlen);

/* The same for runs without Delayed Nesterov, field by field. Start from a snapshot of a shard of n elements: θ = payload[0..n); momentum = payload[n..2n) when
 * flags bit 0 is set (*has_mom = 1), else zeros (*has_mom = 0); *version = h->version.
 * -1 + err if op/dtype/count are wrong. */
int replay_snapshot(const blob_header *h, const uint8_t *payload, size_t len, size_t n, float *theta, float *mom,
                    int *has_mom, int64_t *version, char *err, size_t errlen);
/* Apply one log entry (version v-1 -> v): aux 0 is a no-op; else outer_sgd_step(θ, mom, flags & 2, g,
 * n, lr, mu, flags & 1), and *has_mom becomes 1 when mu != 0. ++*version either way. */
int replay_log(const blob_header *h, const uint8_t *payload, size_t len, size_t n, float *theta, float *mom,
               int *has_mom, int64_t *version, char *err, size_t errlen);
/* Snapshot then every log entry in order. */
int replay_shard(const replay_blob *snap, const replay_blob *logs, int nlogs, size_t n, float *theta, float *mom,
                 int *has_mom, int64_t *version, char *err, size_t errlen);
#endif
