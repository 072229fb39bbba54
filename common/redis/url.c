/*
 * url.c: the Redis URL parser declared in url.h. It parses by hand, left to right, copying each part
 * into the fixed-size fields of redis_url; every rejection says which part is wrong so an operator
 * can fix a typo in a command line without reading code.
 */
#include "base/util.h"
#include "redis/url.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_PORT 6379
#define DEFAULT_SENTINEL_PORT 26379
#define MAX_DB 2147483647LL

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decode src[0..len) into dst (cap bytes incl. NUL). */
static int percent_decode(const char *src, size_t len, char *dst, size_t cap, const char *what, char *err,
                          size_t errlen)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (c == '%') {
            int hi = i + 2 < len ? hex_value(src[i + 1]) : -1;
            int lo = i + 2 < len ? hex_value(src[i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                err_set(err, errlen, "bad percent-escape in the %s of the Redis URL", what);
                return -1;
            }
            c = (char)(hi * 16 + lo);
            i += 2;
            if (c == '\0') {
                err_set(err, errlen, "%%00 is not allowed in the %s of the Redis URL", what);
                return -1;
            }
        }
        if (o + 1 >= cap) {
            err_set(err, errlen, "the %s in the Redis URL is too long (max %zu bytes)", what, cap - 1);
            return -1;
        }
        dst[o++] = c;
    }
    dst[o] = '\0';
    return 0;
}

static int copy_part(const char *src, size_t len, char *dst, size_t cap, const char *what, char *err, size_t errlen)
{
    if (len >= cap) {
        err_set(err, errlen, "the %s in the Redis URL is too long (max %zu bytes)", what, cap - 1);
        return -1;
    }
    memcpy(dst, src, len);
    dst[len] = '\0';
    return 0;
}

static int parse_number_part(const char *src, size_t len, long long min, long long max, long long *out)
{
    char tmp[32];
    if (len == 0 || len >= sizeof tmp) return -1;
    for (size_t i = 0; i < len; i++)
        if (src[i] < '0' || src[i] > '9') return -1; /* strtoll would accept signs and spaces; a URL must not */
    memcpy(tmp, src, len);
    tmp[len] = '\0';
    return parse_int(tmp, min, max, out);
}

static int parse_db(const char *src, size_t len, redis_url *out, char *err, size_t errlen)
{
    long long db;
    if (parse_number_part(src, len, 0, MAX_DB, &db) != 0) {
        err_set(err, errlen, "bad database number '%.*s' in the Redis URL (want 0, 1, 2, ...)",
                (int)(len > 40 ? 40 : len), src);
        return -1;
    }
    out->db = (int)db;
    return 0;
}

/* user[:pass] before the '@'. */
static int parse_userinfo(const char *s, size_t len, redis_url *out, char *err, size_t errlen)
{
    const char *colon = memchr(s, ':', len);
    size_t ulen = colon ? (size_t)(colon - s) : len;
    if (percent_decode(s, ulen, out->user, sizeof out->user, "user name", err, errlen) != 0) return -1;
    if (colon == NULL) return 0;
    return percent_decode(colon + 1, len - ulen - 1, out->pass, sizeof out->pass, "password", err, errlen);
}

/* A host name or IPv4 address: letters, digits, '.', '-', '_'; inside brackets an IPv6 address, which
 * adds ':' and a zone after '%'. Anything else ('[', '/', blanks, ...) cannot name a host, and would
 * not survive redis_url_format either. */
static int check_host(const char *h, size_t len, int bracketed, char *err, size_t errlen)
{
    for (size_t i = 0; i < len; i++) {
        char c = h[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
            c == '_' || (bracketed && (c == ':' || c == '%')))
            continue;
        if (c > ' ' && c < 127)
            err_set(err, errlen, "bad character '%c' in the host of the Redis URL", c);
        else
            err_set(err, errlen, "bad character (byte 0x%02x) in the host of the Redis URL", (unsigned char)c);
        return -1;
    }
    return 0;
}

/* host[:port] or [v6][:port]. */
static int parse_hostport(const char *s, size_t len, redis_url *out, char *err, size_t errlen)
{
    const char *host = s;
    size_t hlen;
    const char *rest;
    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (close == NULL) {
            err_set(err, errlen, "unterminated '[' in the IPv6 host of the Redis URL");
            return -1;
        }
        host = s + 1;
        hlen = (size_t)(close - host);
        rest = close + 1;
        if (rest < s + len && *rest != ':') {
            err_set(err, errlen, "unexpected characters after ']' in the Redis URL");
            return -1;
        }
    } else {
        const char *colon = memchr(s, ':', len);
        hlen = colon ? (size_t)(colon - s) : len;
        rest = s + hlen;
    }
    if (hlen == 0) {
        err_set(err, errlen, "missing host in the Redis URL (e.g. redis://127.0.0.1:6379)");
        return -1;
    }
    if (host != s && memchr(host, ':', hlen) == NULL) {
        err_set(err, errlen,
                "the host in brackets is not an IPv6 address in the Redis URL (write a host name or "
                "IPv4 address without brackets)");
        return -1;
    }
    if (check_host(host, hlen, host != s, err, errlen) != 0 ||
        copy_part(host, hlen, out->host, sizeof out->host, "host", err, errlen) != 0)
        return -1;
    if (rest == s + len) return 0;
    /* rest points at ':' */
    long long port;
    size_t plen = (size_t)(s + len - rest - 1);
    if (parse_number_part(rest + 1, plen, 1, 65535, &port) != 0) {
        err_set(err, errlen, "bad port '%.*s' in the Redis URL (want 1..65535)", (int)(plen > 40 ? 40 : plen),
                rest + 1);
        return -1;
    }
    out->port = (int)port;
    return 0;
}

/* h1[:p1],h2[:p2],...: every address into out->hosts, the first also into host/port. */
static int parse_hostlist(const char *s, size_t len, int default_port, redis_url *out, char *err, size_t errlen)
{
    const char *end = s + len;
    out->nhosts = 0;
    for (const char *p = s; p <= end;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        if (out->nhosts == REDIS_URL_MAX_HOSTS) {
            err_set(err, errlen, "too many hosts in the Redis URL (at most %d)", REDIS_URL_MAX_HOSTS);
            return -1;
        }
        out->port = default_port;
        if (parse_hostport(p, (size_t)(stop - p), out, err, errlen) != 0) return -1;
        redis_host *h = &out->hosts[out->nhosts++];
        snprintf(h->host, sizeof h->host, "%s", out->host);
        h->port = out->port;
        p = stop + 1;
    }
    snprintf(out->host, sizeof out->host, "%s", out->hosts[0].host);
    out->port = out->hosts[0].port;
    return 0;
}

/* [user[:pass]@]hosts, up to the first '/' (and, with query, '?': a Sentinel URL's) (the password may contain '@'
 * and, in a redis:// URL, '?' when not percent-encoded: the last '@' ends the userinfo); *rest = what follows the
 * hosts. An '@' after the hosts (outside a Sentinel URL's query, whose sentinel_password may hold one) is a login
 * whose password or user has a '/' not percent-encoded: said as such, without a word of it (the rest of the parse
 * took the login's first part for a host and port, and quoted the password's first characters as a "bad port"). */
static int parse_authority(const char *s, int default_port, int query, redis_url *out, const char **rest, char *err,
                           size_t errlen)
{
    size_t alen = strcspn(s, query ? "/?" : "/");
    const char *after = s + alen;
    size_t span = !query ? strlen(after) : *after == '/' ? strcspn(after, "?") : 0;
    if (memchr(after, '@', span) != NULL) {
        err_set(err, errlen,
                "the Redis URL has an '@' after a '/': percent-encode a '/', '?' or '#' in its user name or password "
                "(%%2F, %%3F, %%23)");
        return -1;
    }
    const char *at = NULL;
    for (const char *p = s; p < s + alen; p++)
        if (*p == '@') at = p;
    const char *hp = s;
    if (at != NULL) {
        if (parse_userinfo(s, (size_t)(at - s), out, err, errlen) != 0) return -1;
        hp = at + 1;
    }
    const char *q = memchr(hp, '?', (size_t)(after - hp));
    if (q != NULL) { /* (a redis:// URL's: redis-py's ?db=N, say) */
        err_set(err, errlen,
                "a redis:// URL takes no query ('%.*s'): give the database as its path (redis://HOST:PORT/DB)",
                (int)(after - q > 40 ? 40 : after - q), q);
        return -1;
    }
    *rest = after;
    return parse_hostlist(hp, (size_t)(after - hp), default_port, out, err, errlen);
}

static int parse_tcp(const char *s, redis_url *out, char *err, size_t errlen)
{
    const char *slash;
    if (parse_authority(s, DEFAULT_PORT, 0, out, &slash, err, errlen) != 0) return -1;
    if (*slash != '/' || slash[1] == '\0') return 0;
    return parse_db(slash + 1, strlen(slash + 1), out, err, errlen);
}

/* ?sentinel_username=U&sentinel_password=P (either, percent-encoded). */
static int parse_sentinel_query(const char *q, redis_url *out, char *err, size_t errlen)
{
    while (*q != '\0') {
        size_t len = strcspn(q, "&");
        const char *eq = memchr(q, '=', len);
        size_t klen = eq ? (size_t)(eq - q) : len;
        const char *v = eq ? eq + 1 : q + len;
        size_t vlen = (size_t)(q + len - v);
        if (eq != NULL && klen == 17 && strncmp(q, "sentinel_username", klen) == 0) {
            if (percent_decode(v, vlen, out->sentinel_user, sizeof out->sentinel_user, "Sentinel user name", err,
                               errlen) != 0)
                return -1;
        } else if (eq != NULL && klen == 17 && strncmp(q, "sentinel_password", klen) == 0) {
            if (percent_decode(v, vlen, out->sentinel_pass, sizeof out->sentinel_pass, "Sentinel password", err,
                               errlen) != 0)
                return -1;
        } else {
            /* (its name alone: a misspelt sentinel_password's value is a password) */
            err_set(err, errlen,
                    "unknown query '%.*s' in the Redis URL (accepted: sentinel_username, "
                    "sentinel_password)",
                    (int)(klen > 40 ? 40 : klen), q);
            return -1;
        }
        q += len + (q[len] == '&');
    }
    return 0;
}

/* s1[:p1],s2[:p2],.../master[/db][?query] */
static int parse_sentinel(const char *s, redis_url *out, char *err, size_t errlen)
{
    const char *rest;
    if (parse_authority(s, DEFAULT_SENTINEL_PORT, 1, out, &rest, err, errlen) != 0) return -1;
    const char *q = strchr(rest, '?');
    size_t plen = q ? (size_t)(q - rest) : strlen(rest);
    if (plen < 2 || rest[0] != '/') {
        err_set(err, errlen,
                "missing master name in the Sentinel URL (e.g. redis+sentinel://127.0.0.1:26379/mymaster)");
        return -1;
    }
    const char *name = rest + 1;
    const char *dbs = memchr(name, '/', plen - 1);
    size_t nlen = dbs ? (size_t)(dbs - name) : plen - 1;
    if (nlen == 0) {
        err_set(err, errlen,
                "missing master name in the Sentinel URL (e.g. redis+sentinel://127.0.0.1:26379/mymaster)");
        return -1;
    }
    if (percent_decode(name, nlen, out->sentinel_master, sizeof out->sentinel_master, "master name", err, errlen) != 0)
        return -1;
    if (dbs != NULL && (size_t)(dbs + 1 - rest) < plen &&
        parse_db(dbs + 1, plen - (size_t)(dbs + 1 - rest), out, err, errlen) != 0)
        return -1;
    return q != NULL ? parse_sentinel_query(q + 1, out, err, errlen) : 0;
}

static int parse_unix(const char *s, redis_url *out, char *err, size_t errlen)
{
    /* Optional credentials before the absolute path: unix://user:pass@/run/redis.sock */
    const char *at = strstr(s, "@/");
    const char *slash = strchr(s, '/');
    if (at != NULL && slash == at + 1) {
        if (parse_userinfo(s, (size_t)(at - s), out, err, errlen) != 0) return -1;
        s = at + 1;
    }
    const char *q = strchr(s, '?');
    size_t plen = q ? (size_t)(q - s) : strlen(s);
    if (plen == 0) {
        err_set(err, errlen, "missing socket path in the Redis URL (e.g. unix:///run/redis/redis.sock)");
        return -1;
    }
    if (copy_part(s, plen, out->path, sizeof out->path, "socket path", err, errlen) != 0) return -1;
    if (q == NULL) return 0;
    if (strncmp(q + 1, "db=", 3) != 0) { /* (its name alone: a value may be a password) */
        size_t klen = strcspn(q + 1, "=&");
        err_set(err, errlen, "unknown query '%.*s' in the Redis URL (only ?db=N is accepted)",
                (int)(klen > 40 ? 40 : klen), q + 1);
        return -1;
    }
    return parse_db(q + 4, strlen(q + 4), out, err, errlen);
}

/* s, at most 60 characters of it, into out with the password of its login (what lies between its scheme, or its
 * start, and its last '@', after the user name's ':') hidden: a URL refused for its scheme ("redis:/", "http://",
 * "rediss://") was quoted whole, password included, to the terminal and the logs. */
static void quote_masked(const char *s, char *out, size_t cap)
{
    const char *at = strrchr(s, '@');
    if (at == NULL) {
        snprintf(out, cap, "%.60s%s", s, strlen(s) > 60 ? "..." : "");
        return;
    }
    const char *login = strstr(s, "://");
    login = login != NULL && login < at ? login + 3 : s;
    if (login == s && memchr(s, ':', (size_t)(at - s)) != NULL) { /* ("redis:/user:pass@", "redis:user:pass@") */
        login = strchr(s, ':') + 1;
        login += strspn(login, "/");
    }
    const char *colon = memchr(login, ':', (size_t)(at - login));
    size_t keep = (size_t)((colon ? colon : login) - s); /* the scheme and the user name */
    snprintf(out, cap, "%.*s%s***%.40s%s", (int)(keep > 40 ? 40 : keep), s, colon ? ":" : "", at,
             strlen(at) > 40 ? "..." : "");
}

/* Whether s starts with scheme, in any case (RFC 3986: "Redis://" is "redis://"). */
static int scheme_is(const char *s, const char *scheme)
{
    return strncasecmp(s, scheme, strlen(scheme)) == 0;
}

int redis_url_parse(const char *s, redis_url *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->port = DEFAULT_PORT;
    if (s == NULL || *s == '\0') {
        err_set(err, errlen, "empty Redis URL (e.g. redis://127.0.0.1:6379/0)");
        return -1;
    }
    if (scheme_is(s, "redis://")) return parse_tcp(s + 8, out, err, errlen);
    if (scheme_is(s, "redis+sentinel://")) return parse_sentinel(s + 17, out, err, errlen);
    if (scheme_is(s, "redis-sentinel://")) return parse_sentinel(s + 17, out, err, errlen);
    if (scheme_is(s, "unix://")) {
        out->is_unix = 1;
        return parse_unix(s + 7, out, err, errlen);
    }
    char quoted[160];
    quote_masked(s, quoted, sizeof quoted);
    if (scheme_is(s, "rediss://") || scheme_is(s, "rediss+sentinel://")) {
        err_set(err, errlen,
                "unsupported Redis URL '%s': the processes do not speak TLS themselves; put stunnel in front "
                "(docs/deploy.md, \"Across machines\", 3. TLS with stunnel: deploy/stunnel/) and give the plain "
                "redis:// URL of its local end",
                quoted);
        return -1;
    }
    err_set(err, errlen,
            "unsupported Redis URL '%s' (want redis://host:port/db, redis+sentinel://host:port/master or "
            "unix://path%s)",
            quoted,
            strstr(s, "://") == NULL && strstr(s, ":/") == NULL ? "; a host and port alone want redis:// before them"
                                                                : "");
    return -1;
}

/* "h1:p1,[v6]:p2,..." (every host of u, IPv6 in brackets) appended at buf + n; the new length, or
 * a length >= cap when it did not fit */
static int append_hosts(const redis_url *u, char *buf, size_t cap, int n)
{
    int count = u->nhosts > 0 ? u->nhosts : 1;
    for (int i = 0; i < count && n >= 0 && (size_t)n < cap; i++) {
        const char *h = u->nhosts > 0 ? u->hosts[i].host : u->host;
        int v6 = strchr(h, ':') != NULL;
        n += snprintf(buf + n, cap - (size_t)n, "%s%s%s%s:%d", i ? "," : "", v6 ? "[" : "", h, v6 ? "]" : "",
                      u->nhosts > 0 ? u->hosts[i].port : u->port);
    }
    return n;
}

/* s percent-encoded (all but letters, digits and "-._~") appended at buf + n, as append_hosts */
static int append_escaped(const char *s, char *buf, size_t cap, int n)
{
    for (; *s && n >= 0 && (size_t)n < cap; s++) {
        unsigned char c = (unsigned char)*s;
        int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-._~", c);
        n += plain ? snprintf(buf + n, cap - (size_t)n, "%c", c) : snprintf(buf + n, cap - (size_t)n, "%%%02X", c);
    }
    return n;
}

int redis_url_format(const redis_url *u, char *buf, size_t cap)
{
    int n;
    if (u->is_unix) {
        n = snprintf(buf, cap, "unix://%s%s%s?db=%d", u->user, u->user[0] ? "@" : "", u->path, u->db);
        return n < 0 || (size_t)n >= cap ? -1 : 0;
    }
    int sentinel = u->sentinel_master[0] != '\0';
    n = snprintf(buf, cap, "%s%s%s", sentinel ? "redis+sentinel://" : "redis://", u->user, u->user[0] ? "@" : "");
    n = append_hosts(u, buf, cap, n);
    if (n >= 0 && (size_t)n < cap && sentinel) {
        n += snprintf(buf + n, cap - (size_t)n, "/");
        n = append_escaped(u->sentinel_master, buf, cap, n);
    }
    if (n >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "/%d", u->db);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* The first line of path, without the blanks around it, into out. */
static int read_url_file(const char *path, char *out, size_t cap, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        err_set(err, errlen, "--redis-file %s: %s", path, strerror(errno));
        return -1;
    }
    char line[REDIS_URL_MAX + 2] = "";
    if (fgets(line, sizeof line, f) == NULL) line[0] = '\0';
    fclose(f);
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') {
        err_set(err, errlen, "--redis-file %s: the first line is longer than %d bytes", path, REDIS_URL_MAX);
        return -1;
    }
    while (len > 0 && strchr(" \t\r\n", line[len - 1]) != NULL) line[--len] = '\0';
    const char *s = line + strspn(line, " \t");
    if (*s == '\0') {
        err_set(err, errlen, "--redis-file %s: no Redis URL on its first line", path);
        return -1;
    }
    if (strlen(s) >= cap) {
        err_set(err, errlen, "--redis-file %s: the URL is longer than %zu bytes", path, cap - 1);
        return -1;
    }
    snprintf(out, cap, "%s", s);
    return 0;
}

/* redis_url_pick without the check that the URL parses. */
static int pick_text(const char *flag, const char *file, char *out, size_t cap, char *err, size_t errlen)
{
    if (flag != NULL && file != NULL) {
        err_set(err, errlen, "give the Redis URL once: --redis or --redis-file, not both");
        return -1;
    }
    if (file != NULL) return read_url_file(file, out, cap, err, errlen);
    const char *src = flag != NULL ? flag : getenv(REDIS_URL_ENV);
    if (src == NULL || *src == '\0') {
        /* (REDIS_URL is the name other tools read: a user who set it wonders why it is not seen) */
        const char *other = getenv("REDIS_URL");
        err_set(err, errlen, "no Redis URL: give --redis URL, --redis-file FILE or set %s%s", REDIS_URL_ENV,
                other != NULL && *other != '\0' ? " ($REDIS_URL is set, but not read: the variable is " REDIS_URL_ENV
                                                  ")"
                                                : "");
        return -1;
    }
    if (strlen(src) >= cap) {
        err_set(err, errlen, "the Redis URL is longer than %zu bytes", cap - 1);
        return -1;
    }
    snprintf(out, cap, "%s", src);
    return 0;
}

int redis_url_pick(const char *flag, const char *file, char *out, size_t cap, char *err, size_t errlen)
{
    if (pick_text(flag, file, out, cap, err, errlen) < 0) return -1;
    redis_url u;
    char why[512];
    if (redis_url_parse(out, &u, why, sizeof why) == 0) return 0;
    if (flag != NULL)
        err_set(err, errlen, "--redis: %s", why);
    else if (file != NULL)
        err_set(err, errlen, "--redis-file %s: %s", file, why);
    else
        err_set(err, errlen, "$%s: %s", REDIS_URL_ENV, why);
    return -1;
}
