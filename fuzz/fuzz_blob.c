/* fuzz_blob.c: libFuzzer target of blob_decode (common/format/blob.c): header, payload length and checksum
 * of a whole blob, as a shard-server reads snapshots and log entries from Redis.
 * Checks besides the sanitizers: an accepted payload lies inside the input, has exactly count
 * elements, and passes blob_check_payload again. */
#include <stdint.h>
#include <stdlib.h>

#include "format/blob.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    blob_header h;
    const uint8_t *payload;
    size_t plen;
    char err[256];
    if (blob_decode(data, size, &h, &payload, &plen, err, sizeof err) != 0) return 0;
    if (payload < data || payload + plen != data + size || plen != blob_payload_bytes(h.dtype, h.count) ||
        blob_check_payload(&h, payload, plen, err, sizeof err) != 0)
        abort();
    return 0;
}
