/* fuzz_url.c: libFuzzer target of redis_url_parse and redis_url_format (common/net/url.c): the URL of
 * --redis, --redis-file and $DL_REDIS_URL.
 * Checks besides the sanitizers: what is accepted is in range (port 1..65535, db >= 0, terminated
 * fields), and a URL without credentials formats to one that parses back to the same place. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char s[2048], text[2048], err[256];
    if (size >= sizeof s) return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    redis_url u, v;
    if (redis_url_parse(s, &u, err, sizeof err) != 0) return 0;
    if (u.port < 1 || u.port > 65535 || u.db < 0 || strnlen(u.host, sizeof u.host) == sizeof u.host ||
        strnlen(u.path, sizeof u.path) == sizeof u.path)
        abort();
    if (u.user[0] || u.pass[0] || redis_url_format(&u, text, sizeof text) != 0) return 0;
    if (redis_url_parse(text, &v, err, sizeof err) != 0 || v.is_unix != u.is_unix || strcmp(v.host, u.host) ||
        v.port != u.port || strcmp(v.path, u.path) || v.db != u.db)
        abort();
    return 0;
}
