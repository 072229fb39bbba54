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
 * against direct outer_sgd_step application (tests/test_replay.c). The loaders read Redis
 * synchronously (hiredis): the coordinator's checkpoint export uses them. */
#ifndef DILOCO_REPLAY_H
#define DILOCO_REPLAY_H
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "rconn.h"

#include "blob.h"

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

/* Return codes of the loaders besides 0: -1 a real error (corrupt blob, digest mismatch, ...);
 * REPLAY_GONE (-2) a blob named by the refs is missing, which happens when a shard-server trims it
 * (new snapshot) after the refs were read: read the refs again and retry. */
#define REPLAY_GONE (-2)

/* Replay shard `shard` (n elements) from refs as kept in dl:{R}:shards (snap "v.e", log "v.e,v.e,..."
 * possibly empty), each blob checked by blob_decode (its checksum) and blob_check_key (it is the blob its
 * key names) and applied in order; each version's digest checked when st->digests records it. On failure st->version is the last version replayed (-1: the snapshot failed) and st's buffers
 * hold that version, so a caller can tell how far the durable state verifies; err names the key. */
int replay_refs_state(rconn *c, const char *run, int shard, size_t n, const char *snap_ref, const char *log_refs,
                      replay_state *st, char *err, size_t errlen);
/* Rebuild shard `shard` (n elements) from explicit refs as kept in dl:{R}:shards (snap "v.e", log
 * "v.e,v.e,..." possibly empty) and check the result against `version` and `digest` (16 hex digits).
 * st holds the buffers (theta, mom, and dnbuf with dn_buffer/dn_variant/dn_t0 for a Delayed Nesterov
 * run) and gets has_mom and version. */
int replay_load_refs_state(rconn *c, const char *run, int shard, size_t n, int64_t want_version, const char *snap_ref,
                           const char *log_refs, const char *digest, replay_state *st, char *err, size_t errlen);
/* The same for runs without Delayed Nesterov. */
int replay_load_refs(rconn *c, const char *run, int shard, size_t n, int64_t want_version, const char *snap_ref,
                     const char *log_refs, const char *digest, float *theta, float *mom, int *has_mom, char *err,
                     size_t errlen);
/* Rebuild shard `shard` of run `run` as committed now: reads the run config (for the shard's size:
 * theta and mom must hold that many floats) and k:version, k:snap, k:log, k:digest, then
 * replay_load_refs. */
int replay_load_shard(rconn *c, const char *run, int shard, float *theta, float *mom, int *has_mom, int64_t *version,
                      char *err, size_t errlen);
#endif
