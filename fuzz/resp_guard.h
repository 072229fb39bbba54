/* resp_guard.h: shared by the fuzz targets that read RESP with hiredis' reader (cluster, runconf).
 * hiredis 0.14 allocates an array of whatever size a reply announces ("*411111191" is 3 GB of
 * pointers) and has no limit to set; that is hiredis trusting its server, not our code, so the
 * targets skip inputs in which an array header announces more than 4096 elements. Any '*' counts, not
 * only one at a line's start: hiredis skips the two bytes after a bulk string without checking they are
 * "\r\n" ("$0\r\nFC*411111191\r\n" announces 411111191 elements), which it_fuzz found. */
#ifndef FUZZ_RESP_GUARD_H
#define FUZZ_RESP_GUARD_H
#include <stddef.h>
#include <stdint.h>

static inline int resp_huge_array(const uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (d[i] != '*') continue;
        unsigned long long v = 0;
        for (size_t j = i + 1; j < n && d[j] >= '0' && d[j] <= '9' && v <= 4096; j++) v = v * 10 + (d[j] - '0');
        if (v > 4096) return 1;
    }
    return 0;
}
#endif
