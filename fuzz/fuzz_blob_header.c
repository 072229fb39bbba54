/* fuzz_blob_header.c: libFuzzer target of blob_decode_header (common/format/blob.c), the first decoder every
 * frame from a peer and every durable blob from Redis meets.
 * Checks besides the sanitizers: an accepted header lies inside the input, its strings are
 * terminated, and encoding it again gives a header that decodes to the same fields. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/blob.h"

static void same_fields(const blob_header *a, const blob_header *b)
{
    if (strcmp(a->op, b->op) || a->dtype != b->dtype || a->count != b->count || a->xxh != b->xxh ||
        a->shard != b->shard || a->version != b->version || a->round != b->round || a->epoch != b->epoch ||
        a->inc != b->inc || a->frag != b->frag || a->flags != b->flags || a->aux != b->aux ||
        strcmp(a->worker, b->worker) || strcmp(a->code, b->code) || strcmp(a->text, b->text) ||
        (isnan(a->lr) != isnan(b->lr)) || (!isnan(a->lr) && a->lr != b->lr) || (isnan(a->mu) != isnan(b->mu)) ||
        (!isnan(a->mu) && a->mu != b->mu))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    blob_header h, again;
    size_t hl, hl2;
    char err[256];
    if (blob_decode_header(data, size, &h, &hl, err, sizeof err) != 0) return 0;
    if (hl > size || hl > BLOB_HEADER_MAX || strnlen(h.op, sizeof h.op) == sizeof h.op || h.op[0] == '\0' ||
        strnlen(h.text, sizeof h.text) == sizeof h.text)
        abort();
    /* a NaN lr or mu reads back as "absent": the encoder leaves such a field out */
    uint8_t buf[BLOB_HEADER_MAX];
    size_t plen = blob_payload_bytes(h.dtype, h.count);
    int n = blob_encode_header_hashed(&h, plen, buf, sizeof buf, err, sizeof err);
    if (n < 0) abort(); /* every header we accept can be written back */
    if (blob_decode_header(buf, (size_t)n, &again, &hl2, err, sizeof err) != 0 || hl2 != (size_t)n) abort();
    same_fields(&h, &again);
    return 0;
}
