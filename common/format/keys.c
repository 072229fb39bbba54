/* keys.c: builds the Redis key names of a run (see keys.h and docs/PROTOCOL.md). */
#include "format/keys.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"

char *key_run(char *dst, size_t cap, const char *run, const char *suffix)
{
    snprintf(dst, cap, "dl:{%s}:%s", run, suffix);
    return dst;
}

char *key_shard(char *dst, size_t cap, const char *run, int shard, const char *suffix)
{
    snprintf(dst, cap, "dl:{%s:%d}:%s", run, shard, suffix);
    return dst;
}

int key_shard_ref(char *dst, size_t cap, const char *run, int shard, const char *kind, const char *ref)
{
    unsigned long long v, e;
    char tail;
    if (sscanf(ref, "%llu.%llu%c", &v, &e, &tail) != 2) return -1;
    snprintf(dst, cap, "dl:{%s:%d}:%s:%llu:%llu", run, shard, kind, v, e);
    return 0;
}

int key_parse_blob(const char *key, key_blob_name *out)
{
    long long v, e;
    int used = 0;
    if (sscanf(key, "dl:{%79[^:}]:%d}:%15[^:]:%lld:%lld%n", out->run, &out->shard, out->kind, &v, &e, &used) != 5 ||
        key[used] != '\0' || out->shard < 0 || v < 0 || e < 0)
        return -1;
    out->version = v;
    out->epoch = e;
    return 0;
}

int key_check_run_name(const char *run, char *err, size_t errlen)
{
    size_t n = run ? strlen(run) : 0;
    if (n == 0 || n > 64) {
        err_set(err, errlen, "run name must be 1 to 64 characters");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char c = run[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                 c == '.';
        if (!ok) {
            err_set(err, errlen, "run name '%s' may only contain letters, digits, '_', '-' and '.'", run);
            return -1;
        }
    }
    return 0;
}
