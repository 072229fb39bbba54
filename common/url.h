/*
 * url.h: parsing of the Redis URLs every binary is given on its command line.
 *
 * Accepted forms:
 *   redis://[user[:pass]@]host[:port][/db]     (user and pass may be percent-encoded)
 *   redis://:pass@host                          (password only, the "default" user)
 *   redis://[::1]:6379                          (IPv6 literal in brackets)
 *   unix://path[?db=N]                          (unix socket, e.g. unix:///run/redis.sock?db=2)
 *   unix://[user]:pass@/abs/path[?db=N]         (unix socket with credentials)
 * Defaults: port 6379, db 0. The parsed form is what rconn_connect() needs.
 */
#ifndef DILOCO_URL_H
#define DILOCO_URL_H

#include <stddef.h>

typedef struct redis_url {
    int is_unix;
    char host[256];
    int port;
    char path[256];
    char user[128];
    char pass[256];
    int db;
} redis_url;

int redis_url_parse(const char *s, redis_url *out, char *err, size_t errlen);

/* Format u back to a URL without the password (safe for logs); 0, or -1 if it did not fit. */
int redis_url_format(const redis_url *u, char *buf, size_t cap);

#endif
