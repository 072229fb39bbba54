/* snapshot.c: a shard snapshot blob written by the coordinator (see snapshot.h). With mom (a checkpoint's
 * or a replay's outer momentum) the snapshot carries θ then the momentum and flags bit 0, exactly like
 * the snapshots a shard-server writes, so the next outer step continues that momentum; with dnbuf (a
 * Delayed Nesterov buffer) also the buffer (flags bit 1) after the momentum. */
#include "snapshot.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "format/blob.h"
#include "format/keys.h"
#include "math/outer.h"

int coord_write_snapshot(rconn *rc, const char *run, int k, int64_t version, int64_t epoch, const float *x,
                         const float *mom, const float *dnbuf, uint64_t n, int only_new, char *digest, char *err,
                         size_t errlen)
{
    int with_mom = mom != NULL || dnbuf != NULL, with_buf = dnbuf != NULL;
    blob_header h;
    blob_header_init(&h, "snap");
    h.dtype = BLOB_F32;
    h.count = (uint64_t)(1 + with_mom + with_buf) * n;
    h.flags = (with_mom ? 1 : 0) | (with_buf ? 2 : 0);
    h.shard = k;
    h.version = version;
    h.epoch = epoch;
    snprintf(h.run, sizeof h.run, "%s", run);
    uint8_t *blob;
    size_t len;
    float *both = NULL;
    if (with_mom) {
        both = calloc(h.count, sizeof(float));
        if (!both) {
            err_set(err, errlen, "out of memory");
            return -1;
        }
        memcpy(both, x, n * sizeof(float));
        if (mom) memcpy(both + n, mom, n * sizeof(float));
        if (dnbuf) memcpy(both + 2 * n, dnbuf, n * sizeof(float));
    }
    int enc = blob_encode(&h, with_mom ? both : x, h.count * sizeof(float), &blob, &len, err, errlen);
    free(both);
    if (enc < 0) return -1;
    char key[KEY_MAX], suffix[64];
    snprintf(suffix, sizeof suffix, "snap:%" PRId64 ":%" PRId64, version, epoch);
    key_shard(key, sizeof key, run, k, suffix);
    redisReply *r = rconn_command(rc, only_new ? "SET %s %b NX" : "SET %s %b", key, blob, len);
    free(blob);
    int ok = rconn_reply_error(rc, r, err, errlen);
    if (ok == 0 && r->type == REDIS_REPLY_NIL) {
        err_set(err, errlen, "%s exists already (written by someone else meanwhile?)", key);
        ok = -1;
    }
    if (r) freeReplyObject(r);
    snprintf(digest, 17, "%016" PRIx64, digest_f32(x, n));
    return ok;
}
