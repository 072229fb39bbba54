/* mpmap.h: read one field of a msgpack map, as the control plane stores records.
 *
 * dl:{R}:workers and dl:{R}:servers hold msgpack maps packed by the Lua library (cmsgpack). C code
 * that needs one field (a server's address, a worker's speed) reads it with these instead of
 * unpacking whole records by hand. Input is checked with mpscan first, so bad bytes are an error. */
#ifndef DILOCO_MPMAP_H
#define DILOCO_MPMAP_H
#include <stddef.h>

/* 0 and the string (NUL-terminated, truncated to cap) of key; -1 when absent, not a string, or malformed. */
int mpmap_get_str(const void *buf, size_t len, const char *key, char *out, size_t cap);
/* 0 and the number (integer or float) of key; -1 when absent, not a number, or malformed. */
int mpmap_get_num(const void *buf, size_t len, const char *key, double *out);
#endif
