/* fuzz_replay.c: libFuzzer target of the log replay (common/format/replay.c): a shard's durable state as
 * blobs read from Redis, a snapshot then log entries, decoded with blob_decode and applied with
 * replay_state_snapshot / replay_state_log as a shard-server does when it loads a shard.
 * Input: byte 0 = the shard's element count n (1..16) and whether the run has a Delayed Nesterov
 * buffer (bit 7), byte 1 = the DN buffer size N; then blobs, each preceded by its 2-byte
 * little-endian length (the first is the snapshot).
 * Checks besides the sanitizers: the version goes up by one per log entry applied. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/blob.h"
#include "format/replay.h"
#include "math/outer_dn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t n = (size_t)(data[0] & 15) + 1;
    float theta[16], mom[16], buf[16];
    replay_state st = {.theta = theta,
                       .mom = mom,
                       .dnbuf = (data[0] & 128) ? buf : NULL,
                       .dn_buffer = data[1],
                       .dn_variant = (data[0] & 64) ? DN_FORGATHER : DN_PAPER,
                       .dn_t0 = 3};
    size_t off = 2;
    for (int i = 0; off + 2 <= size; i++) {
        size_t len = (size_t)data[off] | (size_t)data[off + 1] << 8;
        off += 2;
        if (len > size - off) len = size - off;
        blob_header h;
        const uint8_t *payload;
        size_t plen;
        char err[256];
        int rc = blob_decode(data + off, len, &h, &payload, &plen, err, sizeof err);
        off += len;
        if (rc != 0) return 0;
        int64_t before = st.version;
        if (i == 0) {
            if (replay_state_snapshot(&st, &h, payload, plen, n, err, sizeof err) != 0) return 0;
        } else {
            if (replay_state_log(&st, &h, payload, plen, n, err, sizeof err) != 0) return 0;
            if (st.version != before + 1) abort();
        }
    }
    return 0;
}
