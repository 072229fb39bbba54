/* replay_load.h: rebuilding a shard's durable state from the blobs in Redis (snapshot + log entries,
 * named by dl:{R}:shards), read synchronously with hiredis: the coordinator's checkpoint export, repair
 * and the evaluator use it. The replay itself (no Redis) is format/replay.h's. */
#ifndef DILOCO_REPLAY_LOAD_H
#define DILOCO_REPLAY_LOAD_H
#include <stddef.h>
#include <stdint.h>

#include "format/replay.h"
#include "redis/rconn.h"

/* Return codes of the loaders besides 0: -1 a real error (corrupt blob, digest mismatch, ...);
 * REPLAY_GONE (-2) a blob named by the refs is missing, which happens when a shard-server trims it
 * (new snapshot) after the refs were read: read the refs again and retry. */
#define REPLAY_GONE (-2)

/* The version v of a ref "v.e" (a snapshot's or a log entry's, as dl:{R}:shards names them): 0, or -1 when
 * it is malformed. */
int replay_ref_version(const char *ref, int64_t *v);
/* The refs of log_refs ("v.e,v.e,...") whose version is <= upto, as a new comma list ("" when none; NULL:
 * out of memory): the log that rebuilds a shard at version upto from its snapshot. */
char *replay_log_upto(const char *log_refs, int64_t upto);

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
