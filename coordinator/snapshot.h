/* snapshot.h: a shard snapshot blob written by the coordinator (init's version 0, repair's restored
 * state), in exactly the form a shard-server writes one (docs/PROTOCOL.md, schemas/blob.md). */
#ifndef DILOCO_COORD_SNAPSHOT_H
#define DILOCO_COORD_SNAPSHOT_H
#include <stddef.h>
#include <stdint.h>

#include "redis/rconn.h"

/* SET dl:{run:k}:snap:<version>:<epoch> to a snapshot of x (n fp32), then mom (flags bit 0) and dnbuf
 * (flags bit 1, after the momentum: zeros if mom is NULL) when given; digest (17 bytes) gets the
 * XXH3 of x as dl:{R}:shards keeps it. only_new: SET NX, and an existing key is an error (nothing is
 * overwritten). */
int coord_write_snapshot(rconn *rc, const char *run, int k, int64_t version, int64_t epoch, const float *x,
                         const float *mom, const float *dnbuf, uint64_t n, int only_new, char *digest, char *err,
                         size_t errlen);
#endif
