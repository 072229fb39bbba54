/* fuzz_frame.c: libFuzzer target of frame_recv and frame_recv_place (common/net/frame.c): the bytes a
 * peer sends on a data-plane connection, written into a socket pair whose far end is then closed,
 * read frame after frame until the first error (as a worker reads a shard-server's replies).
 * Byte 0 picks the reader: frame_recv into a small buffer, or frame_recv_place, whose big payloads go
 * into memory from the place callback (refused for some ops, as a worker refuses unexpected frames).
 * Checks besides the sanitizers: an accepted payload lies inside the buffer it was received into. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/frame.h"

static uint8_t *placed;
static size_t placed_len;

static void *place(const blob_header *h, size_t payload_len, void *arg)
{
    (void)arg;
    if (strcmp(h->op, "params") != 0 || payload_len > (1u << 20)) return NULL;
    free(placed);
    placed = malloc(payload_len + 1);
    placed_len = payload_len;
    return placed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536) return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
    int use_place = data[0] & 1;
    if (size > 1 && write(sv[1], data + 1, size - 1) != (ssize_t)(size - 1)) abort();
    close(sv[1]);
    uint8_t buf[2048];
    blob_header h;
    const uint8_t *payload;
    size_t plen;
    char err[256];
    for (;;) {
        int rc = use_place ? frame_recv_place(sv[0], buf, sizeof buf, 1u << 20, place, NULL, &h, &payload, &plen, 1000,
                                              err, sizeof err)
                           : frame_recv(sv[0], buf, sizeof buf, &h, &payload, &plen, 1000, err, sizeof err);
        if (rc != 0) break;
        int in_buf = payload >= buf && payload + plen <= buf + sizeof buf;
        int in_placed = placed && payload == placed && plen == placed_len;
        if (!in_buf && !in_placed) abort();
    }
    close(sv[0]);
    free(placed);
    placed = NULL;
    return 0;
}
