/* fuzz_codec.c: libFuzzer target of the block codecs' receiving side (common/math/codec.c):
 * codec_check, which a shard-server runs on every pushed int8/int4/int3/int2 payload, then codec_decode,
 * which its commit runs on what passed.
 * Input: byte 0 picks the dtype (its low two bits: int8, int4, int3, int2), bytes 1-2 the element count n (< 4096), the rest is
 * the payload (inputs shorter than codec_bytes(dtype, n) are skipped: the blob layer refuses those).
 * Checks besides the sanitizers: every element of a payload codec_check accepts decodes to a finite
 * value (the server sums them unchecked), and the portable and the AVX2 decoders give the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "math/codec.h"

static float a[4096], b[4096];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    static const int dtypes[] = {BLOB_I8, BLOB_I4, BLOB_I3, BLOB_I2};
    int dtype = dtypes[data[0] & 3];
    size_t n = ((size_t)data[1] | (size_t)data[2] << 8) % 4096;
    const uint8_t *in = data + 3;
    if (codec_bytes(dtype, n) > size - 3) return 0;
    size_t bad;
    if (codec_check(dtype, in, n, &bad) != 0) {
        if (bad >= n) abort();
        return 0;
    }
    codec_force_portable(1);
    codec_decode(dtype, in, n, a);
    codec_force_portable(0);
    codec_decode(dtype, in, n, b);
    if (memcmp(a, b, n * sizeof(float)) != 0) abort();
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a[i])) abort();
    return 0;
}
