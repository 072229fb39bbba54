/*
 * url.h: parsing of the Redis URLs every binary is given on its command line.
 *
 * Accepted forms:
 *   redis://[user[:pass]@]host[:port][/db]     (user and pass may be percent-encoded)
 *   redis://:pass@host                          (password only, the "default" user)
 *   redis://[::1]:6379                          (IPv6 literal in brackets)
 *   unix://path[?db=N]                          (unix socket, e.g. unix:///run/redis.sock?db=2)
 *   unix://[user]:pass@/abs/path[?db=N]         (unix socket with credentials)
 *   redis://[user[:pass]@]h1[:p1],h2[:p2],...    (several nodes of one Redis Cluster: the seeds; the
 *                                                first that answers is used, so one dead node is fine;
 *                                                rconn refuses seeds that are not Cluster nodes)
 *   redis+sentinel://[user[:pass]@]s1[:p1],s2[:p2],.../master[/db][?sentinel_username=U&sentinel_password=P]
 *                                               (also redis-sentinel://: the Sentinels, default port
 *                                                26379, and the name of the master they watch; user and
 *                                                pass log in to the master and its replicas, the query
 *                                                gives the Sentinels' own login when they have one)
 * Schemes in any case (REDIS:// is redis://). A '/' in a user name or password must be percent-encoded (%2F): an
 * '@' after a '/' is refused as such. A refusal never quotes the password of the URL it refuses.
 * Defaults: port 6379, db 0. The parsed form is what rconn_connect() needs; a URL with several hosts
 * or Sentinels is turned into the address of one server by redis_url_resolve() (common/redis/sentinel.h).
 */
#ifndef DILOCO_URL_H
#define DILOCO_URL_H

#include <stddef.h>

#define REDIS_URL_MAX_HOSTS 8

typedef struct redis_host {
    char host[256];
    int port;
} redis_host;

typedef struct redis_url {
    int is_unix;
    char host[256]; /* the server; for a list of hosts, the first one */
    int port;
    char path[256];
    char user[128];
    char pass[256];
    int db;
    int nhosts;                            /* > 1: cluster seeds, or the Sentinels when sentinel_master is set */
    redis_host hosts[REDIS_URL_MAX_HOSTS]; /* in URL order (hosts[0] = host:port) */
    char sentinel_master[128];             /* "" = not through Sentinel */
    char sentinel_user[128];
    char sentinel_pass[256];
} redis_url;

int redis_url_parse(const char *s, redis_url *out, char *err, size_t errlen);

/* Format u back to a URL without the password (safe for logs); 0, or -1 if it did not fit. */
int redis_url_format(const redis_url *u, char *buf, size_t cap);

/*
 * Where a process gets its Redis URL. A command line is readable by every local user (ps,
 * /proc/PID/cmdline), so a URL with a password should not be on it: besides `--redis URL`, every
 * binary accepts `--redis-file FILE` (the URL on the first line of a file only its owner reads) and
 * the environment variable DL_REDIS_URL (/proc/PID/environ is readable only by the same user and
 * root). redis_url_pick() is the one implementation of that choice:
 *   flag (the --redis value) if given, else the first line of `file` (--redis-file) if given, else
 *   $DL_REDIS_URL; both flag and file given is an error (which one did the operator mean?), and so
 *   is none of the three. Blanks around the file's first line are dropped (editors add a newline).
 * The URL goes to out (cap bytes) once redis_url_parse accepts it, so that a bad one is a usage error
 * naming where it came from (--redis, --redis-file FILE or $DL_REDIS_URL); the caller parses it again
 * into the redis_url it keeps. 0, or -1 with err.
 */
#define REDIS_URL_ENV "DL_REDIS_URL"
#define REDIS_URL_MAX 1024
int redis_url_pick(const char *flag, const char *file, char *out, size_t cap, char *err, size_t errlen);

/* The --help lines every binary prints about these three sources. */
#define REDIS_URL_HELP                                                                                       \
    "  --redis URL               Redis of the run: redis://[user[:pass]@]host[:port][/db] or unix://path;\n" \
    "                            redis://h1:p1,h2:p2 (Cluster seeds), redis+sentinel://s1,s2,s3/master;\n"   \
    "                            other local users see it in ps: with a password, use one of the next two\n" \
    "  --redis-file FILE         read the URL from the first line of FILE (e.g. chmod 600)\n"                \
    "  $" REDIS_URL_ENV "             the URL, when neither --redis nor --redis-file is given\n"

#endif
