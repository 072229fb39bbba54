/* fuzz_url.c: libFuzzer target of redis_url_parse and redis_url_format (common/redis/url.c): the URL of
 * --redis, --redis-file and $DL_REDIS_URL.
 * Checks besides the sanitizers: what is accepted is in range (ports 1..65535, db >= 0, terminated
 * fields, at most REDIS_URL_MAX_HOSTS hosts), and a URL without credentials (one host, cluster seeds
 * or Sentinels) formats to one that parses back to the same place. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "redis/url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char s[2048], text[2048], err[256];
    if (size >= sizeof s) return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    redis_url u, v;
    if (redis_url_parse(s, &u, err, sizeof err) != 0) return 0;
    if (u.port < 1 || u.port > 65535 || u.db < 0 || strnlen(u.host, sizeof u.host) == sizeof u.host ||
        strnlen(u.path, sizeof u.path) == sizeof u.path)
        abort();
    if (u.nhosts < 0 || u.nhosts > REDIS_URL_MAX_HOSTS) abort();
    for (int i = 0; i < u.nhosts; i++)
        if (u.hosts[i].port < 1 || u.hosts[i].port > 65535) abort();
    if (u.user[0] || u.pass[0] || u.sentinel_user[0] || u.sentinel_pass[0] ||
        redis_url_format(&u, text, sizeof text) != 0)
        return 0;
    if (redis_url_parse(text, &v, err, sizeof err) != 0 || v.is_unix != u.is_unix || strcmp(v.host, u.host) ||
        v.port != u.port || strcmp(v.path, u.path) || v.db != u.db || v.nhosts != u.nhosts ||
        strcmp(v.sentinel_master, u.sentinel_master))
        abort();
    for (int i = 0; i < u.nhosts; i++)
        if (strcmp(v.hosts[i].host, u.hosts[i].host) || v.hosts[i].port != u.hosts[i].port) abort();
    return 0;
}
