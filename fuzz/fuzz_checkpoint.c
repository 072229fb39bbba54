/* fuzz_checkpoint.c: libFuzzer target of checkpoint_read (coordinator/checkpoint_read.c), what
 * `coordinator checkpoint show` and `init --from-checkpoint` run on a file the operator gives.
 * The input becomes an in-memory file (memfd) read through its /proc/self/fd path.
 * Checks besides the sanitizers: an accepted checkpoint's shard bounds cover its parameters. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("checkpoint", 0);
    if (fd < 0) abort();
    if (write(fd, data, size) != (ssize_t)size) abort();
    char path[64], err[1024];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    checkpoint ck;
    if (checkpoint_read(path, 1, &ck, err, sizeof err) == 0) {
        if (ck.nshards < 1 || ck.shard_bounds[0] != 0 || ck.shard_bounds[ck.nshards] != ck.numel || !ck.params ||
            !ck.mom)
            abort();
        checkpoint_free(&ck);
    }
    close(fd);
    return 0;
}
