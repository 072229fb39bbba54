/* fuzz_mpmap.c: libFuzzer target of mpmap_get_str and mpmap_get_num (common/format/mpmap.c), which read the
 * msgpack records of dl:{R}:workers and dl:{R}:servers (a shard-server's address, a worker's speed).
 * Checks besides the sanitizers: a string found is terminated within the buffer given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/mpmap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const keys[] = {"addr", "pid", "last", "speed", "", "a"};
    char out[64];
    double d;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        memset(out, 'x', sizeof out);
        if (mpmap_get_str(data, size, keys[i], out, sizeof out) == 0 && strnlen(out, sizeof out) == sizeof out) abort();
        (void)mpmap_get_num(data, size, keys[i], &d);
    }
    return 0;
}
