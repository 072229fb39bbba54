/* fuzz_topk.c: libFuzzer target of the top-k codec's receiving side (common/math/codec_sparse.c,
 * codec_topk.c): sparse_check, which a shard-server runs on every pushed topk payload, then the mean its
 * commit computes from what passed; sparse_update_check, which a worker and the replay run on an update
 * or log entry, then sparse_update_mean.
 * Input: byte 0 picks the check (bit 0: a push, or an update), bytes 1-2 the shard's element count n
 * (< 3 * 4096: full chunks and a shorter one), byte 3 the density ((b + 1) / 1024), the rest is the
 * payload. Checks besides the sanitizers: a push the check accepts has the density's size and decodes to
 * finite values (the server sums them unchecked); an accepted update's mean is computed whole and from
 * its second chunk on with the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "math/codec_sparse.h"

#define MAX_N (3 * TOPK_CHUNK)
static float a[MAX_N], b[MAX_N];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    size_t n = ((size_t)data[1] | (size_t)data[2] << 8) % MAX_N;
    double density = (double)(data[3] + 1) / 1024.0;
    const uint8_t *in = data + 4;
    size_t len = size - 4, bad;
    uint32_t w;
    if (!(data[0] & 1)) {
        if (sparse_check(in, len, n, density, &bad) != 0) {
            if (bad > n) abort();
            return 0;
        }
        if (len != sparse_shard_bytes(density, n)) abort();
        memset(a, 0, sizeof a);
        sparse_add_scaled(in, n, 0, n, 1.0f, a);
        for (size_t i = 0; i < n; i++)
            if (!isfinite(a[i])) abort();
        return 0;
    }
    if (sparse_update_check(in, len, n, &w) != 0) return 0;
    sparse_update_mean(in, n, 0, n, a);
    if (n > TOPK_CHUNK) {
        sparse_update_mean(in, n, TOPK_CHUNK, n - TOPK_CHUNK, b);
        if (memcmp(a + TOPK_CHUNK, b, (n - TOPK_CHUNK) * sizeof(float)) != 0) abort();
    }
    return 0;
}
