/*
 * mpscan.h: a bounds-only scan of untrusted msgpack bytes.
 *
 * msgpack-c allocates memory for a container as soon as it reads its declared element count, so a
 * 5-byte "array of 4 billion elements" makes it try to allocate ~100 GB. Before handing bytes from
 * the network to msgpack-c, blob.c runs this scan: it finds where the first complete object ends and
 * rejects any count that cannot fit in the bytes that remain (every element takes at least one byte).
 */
#ifndef DILOCO_MPSCAN_H
#define DILOCO_MPSCAN_H

#include <stddef.h>
#include <stdint.h>

/* 0 and *object_len = length of the first object in buf[0..len) if it is complete and well formed;
 * -1 and err otherwise ("truncated", "invalid byte", "impossible element count"). */
int mpscan_object(const uint8_t *buf, size_t len, size_t *object_len, char *err, size_t errlen);

#endif
