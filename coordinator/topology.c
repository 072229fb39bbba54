/* topology.c: what `coordinator status` and the dashboard show of Redis itself: the master the URL
 * leads to, its replicas with their replication offset and lag, and, behind Sentinel, the number of
 * failovers so far (the Sentinels' config epoch); `serve` also remembers the last failover it saw.
 * Read with INFO replication on the master (and SENTINEL MASTER on a Sentinel); its memory and a warning
 * when its maxmemory-policy evicts, with INFO memory; a Redis that refuses them (an ACL without INFO) leaves
 * the fields out. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "coordinator.h"
#include "redis/sentinel.h"

/* INFO replication's "slaveN:ip=...,port=...,state=...,offset=...,lag=..." into a replica object. */
static json_t *parse_replica(const char *v)
{
    char ip[256] = "", state[32] = "";
    long long port = 0, offset = 0, lag = 0;
    const char *p = v;
    while (*p) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!eq) break;
        if (!end) end = p + strlen(p);
        size_t kl = (size_t)(eq - p), vl = (size_t)(end - eq - 1);
        char val[256];
        snprintf(val, sizeof val, "%.*s", (int)(vl < sizeof val ? vl : sizeof val - 1), eq + 1);
        if (kl == 2 && !strncmp(p, "ip", 2))
            snprintf(ip, sizeof ip, "%s", val);
        else if (kl == 4 && !strncmp(p, "port", 4))
            port = atoll(val);
        else if (kl == 5 && !strncmp(p, "state", 5))
            snprintf(state, sizeof state, "%.31s", val);
        else if (kl == 6 && !strncmp(p, "offset", 6))
            offset = atoll(val);
        else if (kl == 3 && !strncmp(p, "lag", 3))
            lag = atoll(val);
        p = *end ? end + 1 : end;
    }
    char addr[300];
    snprintf(addr, sizeof addr, "%s:%lld", ip, port);
    return json_pack("{s:s, s:s, s:I, s:I}", "addr", addr, "state", state, "offset", (json_int_t)offset, "lag_s",
                     (json_int_t)lag);
}

/* INFO SECTION of the node rc talks to, field by field: fn(name, value, arg) for each "name:value" line.
 * -1 when Redis gave no such reply (nothing called). */
static int info_each(rconn *rc, const char *section, void (*fn)(const char *, const char *, void *), void *arg)
{
    redisReply *r = rconn_command(rc, "INFO %s", section);
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r) freeReplyObject(r);
        return -1;
    }
    char *save = NULL;
    for (char *line = strtok_r(r->str, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        *colon = '\0';
        fn(line, colon + 1, arg);
    }
    freeReplyObject(r);
    return 0;
}

/* t's "warning", with w added to what it says already. */
static void add_warning(json_t *t, const char *w)
{
    const char *before = json_string_value(json_object_get(t, "warning"));
    char both[800];
    snprintf(both, sizeof both, "%s%s%s", before ? before : "", before ? "; " : "", w);
    json_object_set_new(t, "warning", json_string(both));
}

static void replication_field(const char *name, const char *v, void *arg)
{
    json_t *t = arg;
    if (!strcmp(name, "role"))
        json_object_set_new(t, "role", json_string(v));
    else if (!strcmp(name, "master_host"))
        json_object_set_new(t, "replica_of_host", json_string(v));
    else if (!strcmp(name, "master_port"))
        json_object_set_new(t, "replica_of_port", json_integer(atoll(v)));
    else if (!strcmp(name, "master_repl_offset"))
        json_object_set_new(t, "master_repl_offset", json_integer(atoll(v)));
    else if (!strncmp(name, "slave", 5) && name[5] >= '0' && name[5] <= '9')
        json_array_append_new(json_object_get(t, "replicas"), parse_replica(v));
}

/* INFO replication of the node rc talks to (node: its address): role, master_repl_offset, replicas. A node that
 * is a replica (a plain URL that names one): "master" becomes the one it replicates and "node" the replica
 * (before, status said "master <the replica>" just above the warning that it is a replica), and a warning says
 * that what status shows is a copy (it may lag) and that the run's processes given that URL are refused
 * (READONLY), with the master to name instead. */
static void read_replication(rconn *rc, json_t *t, int url_sentinel, const char *node)
{
    json_object_set_new(t, "replicas", json_array());
    if (info_each(rc, "replication", replication_field, t) != 0) {
        json_object_del(t, "replicas");
        return;
    }
    const char *role = json_string_value(json_object_get(t, "role"));
    const char *host = json_string_value(json_object_get(t, "replica_of_host"));
    if (!role || strcmp(role, "slave") != 0 || !host) return;
    char of[300];
    snprintf(of, sizeof of, "%s:%lld", host, (long long)json_integer_value(json_object_get(t, "replica_of_port")));
    json_object_set_new(t, "node", json_string(node));
    json_object_set_new(t, "master", json_string(of));
    if (url_sentinel) return;
    char w[500];
    snprintf(w, sizeof w,
             "this Redis is a read-only replica of %s: what is shown may lag, and processes given this URL cannot "
             "write; give the master's URL",
             of);
    add_warning(t, w);
}

static void memory_field(const char *name, const char *v, void *arg)
{
    json_t *m = arg;
    if (!strcmp(name, "used_memory"))
        json_object_set_new(m, "used", json_integer(atoll(v)));
    else if (!strcmp(name, "maxmemory"))
        json_object_set_new(m, "max", json_integer(atoll(v)));
    else if (!strcmp(name, "maxmemory_policy"))
        json_object_set_new(m, "policy", json_string(v));
}

/* INFO memory of the node rc talks to: used_memory, maxmemory and maxmemory_policy as "memory", and a
 * "warning" when the policy evicts keys: the run's keys are its committed state, not a cache, and an evicting
 * Redis that is full drops them at random (the functions then refuse the run, LOST: lua/10_helpers.lua).
 * Said before it happens, while maxmemory is still far. */
static void read_memory(rconn *rc, json_t *t)
{
    json_t *m = json_object();
    if (info_each(rc, "memory", memory_field, m) != 0) {
        json_decref(m);
        return;
    }
    const char *policy = json_string_value(json_object_get(m, "policy"));
    if (policy && strcmp(policy, "noeviction") != 0) {
        char w[400];
        snprintf(w, sizeof w,
                 "maxmemory-policy %s lets Redis evict the run's keys when it is full, and the run is lost: CONFIG SET "
                 "maxmemory-policy noeviction (docs/deploy.md)",
                 policy);
        add_warning(t, w);
    }
    json_object_set_new(t, "memory", m);
}

/* SENTINEL MASTER name on the first Sentinel that answers: the config epoch counts the failovers. */
static void read_sentinel(const redis_url *u, json_t *t)
{
    json_t *s = json_pack("{s:s, s:i}", "name", u->sentinel_master, "sentinels", u->nhosts);
    char err[300];
    redisReply *r = sentinel_command(u, 1000, err, sizeof err, "SENTINEL MASTER %s", u->sentinel_master);
    if (r && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            const char *k = r->element[i]->str, *v = r->element[i + 1]->str;
            if (!k || !v) continue;
            if (!strcmp(k, "config-epoch"))
                json_object_set_new(s, "failovers", json_integer(atoll(v)));
            else if (!strcmp(k, "quorum"))
                json_object_set_new(s, "quorum", json_integer(atoll(v)));
            else if (!strcmp(k, "flags"))
                json_object_set_new(s, "flags", json_string(v));
        }
    } else {
        json_object_set_new(s, "error", json_string(r && r->type == REDIS_REPLY_ERROR ? r->str : err));
    }
    if (r) freeReplyObject(r);
    json_object_set_new(t, "sentinel", s);
}

void topology_watch_master(topology_watch *w, const char *master)
{
    if (w->master[0] && strcmp(w->master, master)) {
        log_warn("Redis failover: the master is now %s (was %s)", master, w->master);
        snprintf(w->last_from, sizeof w->last_from, "%s", w->master);
        snprintf(w->last_to, sizeof w->last_to, "%s", master);
        w->last_ms = wall_ms();
        w->seen++;
    }
    snprintf(w->master, sizeof w->master, "%s", master);
}

json_t *topology_read(rconn *rc, const redis_url *url, topology_watch *w)
{
    json_t *t = json_object();
    const char *mode = url->sentinel_master[0]                   ? "sentinel"
                       : rconn_is_cluster(rc) || url->nhosts > 1 ? "cluster"
                                                                 : "single";
    json_object_set_new(t, "mode", json_string(mode));
    char master[300];
    rconn_server(rc, master, sizeof master);
    json_object_set_new(t, "master", json_string(master));
    read_replication(rc, t, url->sentinel_master[0] != '\0', master);
    read_memory(rc, t);
    if (url->sentinel_master[0]) read_sentinel(url, t);
    if (w) {
        topology_watch_master(w, master);
        if (w->seen)
            json_object_set_new(t, "last_failover",
                                json_pack("{s:s, s:s, s:I, s:i}", "from", w->last_from, "to", w->last_to, "t_ms",
                                          (json_int_t)w->last_ms, "seen", w->seen));
    }
    return t;
}

void topology_print(json_t *t)
{
    json_t *reps = json_object_get(t, "replicas"), *r, *s = json_object_get(t, "sentinel");
    printf("redis: %s, ", json_string_value(json_object_get(t, "mode")));
    if (json_object_get(t, "node")) printf("replica %s of ", json_string_value(json_object_get(t, "node")));
    printf("master %s", json_string_value(json_object_get(t, "master")));
    if (json_is_array(reps)) printf(", %zu replica(s)", json_array_size(reps));
    if (s && json_object_get(s, "failovers"))
        printf(", %lld failover(s) (Sentinel config epoch)",
               (long long)json_integer_value(json_object_get(s, "failovers")));
    json_t *m = json_object_get(t, "memory");
    if (m && json_object_get(m, "used")) {
        long long used = (long long)json_integer_value(json_object_get(m, "used"));
        long long max = (long long)json_integer_value(json_object_get(m, "max"));
        printf(", memory %.1f MB", (double)used / 1e6);
        if (max > 0) printf(" of maxmemory %.1f MB", (double)max / 1e6);
    }
    putchar('\n');
    if (json_object_get(t, "warning")) printf("  WARNING: %s\n", json_string_value(json_object_get(t, "warning")));
    size_t i;
    json_array_foreach(reps, i, r)
    {
        printf("  replica %-22s %-8s offset %lld (master %lld), lag %lld s\n",
               json_string_value(json_object_get(r, "addr")), json_string_value(json_object_get(r, "state")),
               (long long)json_integer_value(json_object_get(r, "offset")),
               (long long)json_integer_value(json_object_get(t, "master_repl_offset")),
               (long long)json_integer_value(json_object_get(r, "lag_s")));
    }
}
