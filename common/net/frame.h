/*
 * frame.h: blocking, timeout-bounded framing of blobs on a stream socket (the worker side of the
 * data plane; shard-servers speak the same bytes through libevent).
 *
 * A frame is a 4-byte little-endian length L followed by a blob of L bytes (blob.h): the msgpack
 * header, then the raw payload. Payloads are sent straight from the caller's memory (no copy).
 * Timeouts are whole-operation deadlines in milliseconds; timeout_ms <= 0 waits forever.
 */
#ifndef DILOCO_FRAME_H
#define DILOCO_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "format/blob.h"

#define FRAME_PREFIX_LEN 4

/* Encode h for payload and send the frame. Sets h->xxh. A peer that went away is an error, never SIGPIPE. */
int frame_send(int fd, blob_header *h, const void *payload, size_t payload_len, int timeout_ms, char *err,
               size_t errlen);
/* The same with h->xxh already set to the payload's checksum (hash64), computed where the payload was made. */
int frame_send_hashed(int fd, blob_header *h, const void *payload, size_t payload_len, int timeout_ms, char *err,
                      size_t errlen);

/* Receive one frame into buf (cap bytes), decode its header and check its payload; *payload points
 * into buf. A frame longer than cap is rejected without reading it (err starts with "oversize"). */
int frame_recv(int fd, uint8_t *buf, size_t cap, blob_header *h, const uint8_t **payload, size_t *payload_len,
               int timeout_ms, char *err, size_t errlen);

/* Where a big payload goes: called with the decoded header and the payload length; returns memory of
 * exactly payload_len bytes to receive the payload into, or NULL to refuse the frame. */
typedef void *(*frame_place_fn)(const blob_header *h, size_t payload_len, void *arg);

/* Like frame_recv, but a frame longer than cap (and at most max_total bytes) has only its header read
 * into buf; its payload is received straight into place()'s memory (no copy), then checked against the
 * header. On failure after place() accepted, that memory holds a partial or unchecked payload. A refused
 * or oversize frame is an error with the rest of it unread: the connection must be closed. */
int frame_recv_place(int fd, uint8_t *buf, size_t cap, size_t max_total, frame_place_fn place, void *arg,
                     blob_header *h, const uint8_t **payload, size_t *payload_len, int timeout_ms, char *err,
                     size_t errlen);

/* A stop for the calling thread's frame I/O (and tcp_connect): while stopped(arg) is true, a wait that sees
 * 100 ms without progress ends the operation with "stopped while ..." (a peer that answers is not cut
 * short). stopped NULL: none, the default (the shard-server and the coordinator never set one).
 * Thread-local, and consulted only inside these calls: a caller sets it before each of its calls (the
 * worker's conn.c does, with its session), so one left from an earlier session is never used. */
typedef int frame_stop_fn(void *arg);
void frame_watch_stop(frame_stop_fn *stopped, void *arg);

/* Connect to "host:port" ("[v6]:port" for IPv6) within timeout_ms. The returned fd is blocking and
 * has TCP_NODELAY; its buffers are left to the kernel's autotuning (bulk transfers need a large window). */
int tcp_connect(const char *host_port, int timeout_ms, char *err, size_t errlen);

#endif
