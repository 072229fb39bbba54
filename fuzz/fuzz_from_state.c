/* fuzz_from_state.c: libFuzzer target of from_state_read (coordinator/from_state.c), what
 * `coordinator init --from-state FILE` runs on a model's weights from PyTorch (rediloco.save_state).
 * The input becomes an in-memory file (memfd) read through its /proc/self/fd path.
 * Checks besides the sanitizers: an accepted state's tensors tile its numel parameters in order. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "from_state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("state", 0);
    if (fd < 0) abort();
    if (write(fd, data, size) != (ssize_t)size) abort();
    char path[64], err[1024];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    from_state fs;
    if (from_state_read(path, &fs, err, sizeof err) == 0) {
        uint64_t off = 0;
        for (int i = 0; i < fs.ntensors; i++) {
            if (fs.tensors[i].offset != off) abort();
            off += fs.tensors[i].numel;
        }
        if (off != fs.numel || !fs.params) abort();
        from_state_free(&fs);
    }
    close(fd);
    return 0;
}
