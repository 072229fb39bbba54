/* fuzz_mpscan.c: libFuzzer target of mpscan_object (common/format/mpscan.c), the bounds check that runs on
 * untrusted msgpack before msgpack-c allocates anything.
 * Checks besides the sanitizers: an object mpscan accepts lies inside the input, and msgpack-c never
 * finds it incomplete nor parses a different length: the scan and msgpack-c agree on where the
 * object ends. (msgpack-c may still refuse it: it allows 32 levels of nesting, which the scan, made
 * to bound allocations, does not count; that is an error for the caller, not a crash.) */
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>

#include "format/mpscan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t objlen;
    char err[128];
    if (mpscan_object(data, size, &objlen, err, sizeof err) != 0) return 0;
    if (objlen == 0 || objlen > size) abort();
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    msgpack_unpack_return rc = msgpack_unpack_next(&up, (const char *)data, objlen, &off);
    if (rc == MSGPACK_UNPACK_CONTINUE || rc == MSGPACK_UNPACK_EXTRA_BYTES ||
        (rc == MSGPACK_UNPACK_SUCCESS && off != objlen))
        abort();
    msgpack_unpacked_destroy(&up);
    return 0;
}
