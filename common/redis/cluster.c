/*
 * cluster.c: hash slots, the slot map and MOVED/ASK parsing declared in cluster.h (no I/O).
 */
#include "redis/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

/* CRC16/XMODEM (poly 0x1021, init 0, no reflection), the variant the Redis Cluster spec uses. */
uint16_t cluster_crc16(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int cluster_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        if (close != NULL && close > key + from) /* "{}" is no tag: the whole key is hashed */
            return cluster_crc16(key + from, (size_t)(close - (key + from))) & (CLUSTER_SLOTS - 1);
    }
    return cluster_crc16(key, len) & (CLUSTER_SLOTS - 1);
}

static int name_is(const char *s, size_t len, const char *name)
{
    return strlen(name) == len && strncasecmp(s, name, len) == 0;
}

/* Commands we might send that name no key (their argv[1], if any, is not a key). */
static int keyless(const char *cmd, size_t len)
{
    static const char *const names[] = {
        "FUNCTION", "SCAN",     "CLUSTER",   "PING",         "INFO",     "AUTH",    "SELECT",    "TIME",
        "ASKING",   "READONLY", "READWRITE", "DBSIZE",       "FLUSHALL", "FLUSHDB", "CONFIG",    "ACL",
        "COMMAND",  "HELLO",    "CLIENT",    "SHUTDOWN",     "SCRIPT",   "KEYS",    "RANDOMKEY", "WAIT",
        "MULTI",    "EXEC",     "DISCARD",   "ECHO",         "QUIT",     "ROLE",    "SLOWLOG",   "LATENCY",
        "MEMORY",   "SAVE",     "BGSAVE",    "BGREWRITEAOF", "LASTSAVE", "PUBLISH"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (name_is(cmd, len, names[i])) return 1;
    return 0;
}

/* Index of the key argument, or -1. */
static int key_index(int argc, const char **argv, const size_t *argvlen)
{
    if (argc < 2 || keyless(argv[0], argvlen[0])) return -1;
    if (name_is(argv[0], argvlen[0], "FCALL") || name_is(argv[0], argvlen[0], "FCALL_RO") ||
        name_is(argv[0], argvlen[0], "EVAL") || name_is(argv[0], argvlen[0], "EVALSHA")) {
        if (argc < 4 || argvlen[2] == 0 || argvlen[2] > 9) return -1;
        char n[10];
        memcpy(n, argv[2], argvlen[2]);
        n[argvlen[2]] = '\0';
        return atol(n) > 0 ? 3 : -1;
    }
    return 1;
}

int cluster_command_slot(int argc, const char **argv, const size_t *argvlen)
{
    size_t lens[4];
    int m = argc < 4 ? argc : 4;
    for (int i = 0; i < m; i++) lens[i] = argvlen != NULL ? argvlen[i] : strlen(argv[i]);
    int k = key_index(m, argv, lens);
    return k < 0 ? -1 : cluster_key_slot(argv[k], lens[k]);
}

/* Read "<c><decimal>\r\n" at *p (bounded by end); -1 if malformed. */
static long resp_number(const char **p, const char *end, char c)
{
    const char *s = *p;
    if (s >= end || *s != c) return -1;
    s++;
    long v = 0;
    const char *digits = s;
    while (s < end && *s >= '0' && *s <= '9' && s - digits < 12) v = v * 10 + (*s++ - '0');
    if (s == digits || s + 2 > end || s[0] != '\r' || s[1] != '\n') return -1;
    *p = s + 2;
    return v;
}

int cluster_resp_slot(const char *cmd, size_t len)
{
    const char *p = cmd, *end = cmd + len;
    long argc = resp_number(&p, end, '*');
    if (argc < 1) return -1;
    const char *argv[4];
    size_t lens[4];
    int n = argc < 4 ? (int)argc : 4;
    for (int i = 0; i < n; i++) {
        long l = resp_number(&p, end, '$');
        if (l < 0 || end - p < l + 2) return -1;
        argv[i] = p;
        lens[i] = (size_t)l;
        p += l + 2;
    }
    return cluster_command_slot(n, argv, lens);
}

void cluster_map_init(cluster_map *m)
{
    m->nnodes = 0;
    for (int s = 0; s < CLUSTER_SLOTS; s++) m->owner[s] = -1;
}

int cluster_map_node(cluster_map *m, const char *host, int port)
{
    for (int i = 0; i < m->nnodes; i++)
        if (m->node[i].port == port && strcmp(m->node[i].host, host) == 0) return i;
    if (m->nnodes == CLUSTER_MAX_NODES || strlen(host) >= sizeof m->node[0].host) return -1;
    snprintf(m->node[m->nnodes].host, sizeof m->node[0].host, "%s", host);
    m->node[m->nnodes].port = port;
    return m->nnodes++;
}

int cluster_map_owner(const cluster_map *m, int slot)
{
    return slot >= 0 && slot < CLUSTER_SLOTS ? m->owner[slot] : -1;
}

int cluster_map_load(cluster_map *m, const redisReply *r, const char *default_host, char *err, size_t errlen)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        err_set(err, errlen, "CLUSTER SLOTS: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return -1;
    }
    /* Validate everything first, then apply: a bad reply leaves the map as it was. */
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 || e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER || e->element[0]->integer < 0 ||
            e->element[1]->integer >= CLUSTER_SLOTS || e->element[0]->integer > e->element[1]->integer) {
            err_set(err, errlen, "CLUSTER SLOTS: malformed range %zu", i);
            return -1;
        }
        const redisReply *host = e->element[2]->element[0], *port = e->element[2]->element[1];
        if (port->integer < 1 || port->integer > 65535 || strlen(host->str) >= sizeof m->node[0].host) {
            err_set(err, errlen, "CLUSTER SLOTS: range %zu has a bad master (port %lld, host of %zu bytes)", i,
                    port->integer, strlen(host->str));
            return -1;
        }
    }
    for (int s = 0; s < CLUSTER_SLOTS; s++) m->owner[s] = -1;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i], *master = e->element[2];
        const char *host = master->element[0]->str;
        if (host[0] == '\0' || strcmp(host, "?") == 0) host = default_host;
        int node = cluster_map_node(m, host, (int)master->element[1]->integer);
        if (node < 0) {
            err_set(err, errlen, "CLUSTER SLOTS: more than %d masters", CLUSTER_MAX_NODES);
            return -1;
        }
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++) m->owner[s] = (int16_t)node;
    }
    return 0;
}

int cluster_parse_redirect(const char *msg, const char *default_host, cluster_redirect *out)
{
    int ask;
    if (strncmp(msg, "MOVED ", 6) == 0)
        ask = 0;
    else if (strncmp(msg, "ASK ", 4) == 0)
        ask = 1;
    else
        return 0;
    const char *p = msg + (ask ? 4 : 6);
    char *end;
    /* digits only: strtol would also take blanks and signs */
    if (*p < '0' || *p > '9') return 0;
    long slot = strtol(p, &end, 10);
    if (*end != ' ' || slot < 0 || slot >= CLUSTER_SLOTS) return 0;
    const char *ep = end + 1;
    const char *colon = strrchr(ep, ':'); /* the last one: an IPv6 address has colons too */
    if (colon == NULL || colon[1] < '0' || colon[1] > '9') return 0;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port <= 0 || port > 65535) return 0;
    size_t hl = (size_t)(colon - ep);
    if (hl == 0) {
        snprintf(out->host, sizeof out->host, "%s", default_host);
    } else {
        if (hl >= sizeof out->host) return 0;
        memcpy(out->host, ep, hl);
        out->host[hl] = '\0';
    }
    out->ask = ask;
    out->slot = (int)slot;
    out->port = (int)port;
    return 1;
}

int cluster_reply_redirect(const redisReply *r, const char *default_host, cluster_redirect *out)
{
    return r != NULL && r->type == REDIS_REPLY_ERROR && r->str != NULL &&
           cluster_parse_redirect(r->str, default_host, out);
}

/* One line of CLUSTER NODES ("id host:port@bus flags master ping pong epoch link slots...") that is
 * unreachable: appends "host:port (role of slots ...) is unreachable (flags)" to out; 1 if it was. */
static int explain_node(const char *line, size_t len, char *out, size_t cap, size_t *used)
{
    char id[64], addr[128], flags[128], master[64], link[32];
    long long ping, pong, epoch;
    int n = 0;
    char buf[1024];
    if (len >= sizeof buf) return 0;
    memcpy(buf, line, len);
    buf[len] = '\0';
    if (sscanf(buf, "%63s %127s %127s %63s %lld %lld %lld %31s %n", id, addr, flags, master, &ping, &pong, &epoch, link,
               &n) < 8)
        return 0;
    int down = strstr(flags, "fail") != NULL || strcmp(link, "disconnected") == 0;
    if (!down || strstr(flags, "myself") != NULL) return 0;
    char *at = strchr(addr, '@');
    if (at) *at = '\0';
    const char *slots = n > 0 ? buf + n : "";
    int w = snprintf(out + *used, cap - *used, "%snode %s (%s%s%s) is unreachable (%s)", *used ? "; " : "", addr,
                     strstr(flags, "master") ? "master" : "replica", slots[0] ? " of slots " : "", slots, flags);
    if (w > 0) *used = *used + (size_t)w < cap ? *used + (size_t)w : cap - 1;
    return 1;
}

void cluster_explain_down(const char *clusterdown, const char *cluster_nodes, const char *seed, char *out, size_t cap)
{
    char nodes[600] = "";
    size_t used = 0;
    int down = 0;
    for (const char *p = cluster_nodes; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        down += explain_node(p, len, nodes, sizeof nodes, &used);
        p = nl ? nl + 1 : NULL;
    }
    if (down > 0)
        snprintf(out, cap,
                 "the Redis Cluster is down (%s): %s; start %s again, or fail %s slots over to a replica, then "
                 "check with redis-cli --cluster check %s",
                 clusterdown, nodes, down > 1 ? "them" : "it", down > 1 ? "their" : "its", seed);
    else
        snprintf(out, cap,
                 "the Redis Cluster is down (%s): some hash slots have no reachable master; see which with "
                 "redis-cli --cluster check %s",
                 clusterdown, seed);
}
