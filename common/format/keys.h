/* keys.h: the names of a run's Redis keys (docs/PROTOCOL.md has the full table).
 *
 * Control keys of run R share the hash tag {R} ("dl:{R}:state"); the durable blobs of shard k use
 * {R:k} ("dl:{R:k}:snap:3:1") so a Redis Cluster spreads shards over its masters. Build every name
 * through these two functions so the scheme lives in one place. */
#ifndef DILOCO_KEYS_H
#define DILOCO_KEYS_H
#include <stddef.h>
#include <stdint.h>

#define KEY_MAX 512

/* "dl:{run}:suffix" into dst; returns dst. */
char *key_run(char *dst, size_t cap, const char *run, const char *suffix);
/* "dl:{run:shard}:suffix" into dst; returns dst. */
char *key_shard(char *dst, size_t cap, const char *run, int shard, const char *suffix);
/* Blob names from a "v.e" reference as kept in dl:{R}:shards: kind is "snap" or "log". -1 if ref is malformed. */
int key_shard_ref(char *dst, size_t cap, const char *run, int shard, const char *kind, const char *ref);
/* The parts of a durable blob's name "dl:{run:shard}:kind:version:epoch". */
typedef struct key_blob_name {
    char run[80];
    int shard;
    char kind[16];
    int64_t version, epoch;
} key_blob_name;
/* Parse a durable blob's name; -1 if key is not one. */
int key_parse_blob(const char *key, key_blob_name *out);
/* A run name must be 1..64 chars of [A-Za-z0-9_.-]: it becomes part of every key and hash tag. */
int key_check_run_name(const char *run, char *err, size_t errlen);
#endif
