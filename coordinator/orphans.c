/* orphans.c: blobs of a run that no shard names, deleted by `coordinator serve` (every ORPHANS_EVERY_MS).
 *
 * A shard-server writes a blob (a log entry, a snapshot) and then records it with dl_commit or dl_snapshot;
 * killed in between, or fenced out by a new lease before its record, it leaves the blob behind, named by no
 * field of dl:{R}:shards, and nobody deleted it: a whole shard's parameters each (measured: 13 of them after
 * 25 kill -9's of the shard-server of a 2-shard run). Over weeks of restarts they added up without bound.
 *
 * A blob of shard k written under lease epoch e can be recorded only by that lease's holder, and dl_commit /
 * dl_snapshot refuse an epoch that is not the shard's current one (FENCED). So a blob whose epoch is below the
 * shard's epoch and that k:snap, k:log and k:obsolete do not name (read together, after the blob was
 * listed) can never be named again: garbage. Epoch 0 is init's and repair's (repair writes its snapshot
 * before it records it): never touched. Two passes: the keys listed on every master (SCAN), then each one
 * judged through the routed connection, so no command goes out while a node's SCAN is under way. */
#include "coordinator.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"

typedef struct blob_list {
    const char *run;
    char **keys;
    size_t n, cap;
} blob_list;

/* rconn_key_fn: a blob of the run under an epoch above 0, kept for the second pass. */
static int list_blob(redisContext *node, const char *key, void *arg)
{
    (void)node;
    blob_list *l = arg;
    key_blob_name b;
    if (key_parse_blob(key, &b) < 0 || strcmp(b.run, l->run) != 0 || b.epoch < 1) return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **keys = realloc(l->keys, cap * sizeof *keys);
        if (!keys) return -1;
        l->keys = keys;
        l->cap = cap;
    }
    char *copy = strdup(key);
    if (!copy) return -1;
    l->keys[l->n++] = copy; /* (freed by orphans_collect) */
    return 0;
}

static int list_on_node(redisContext *node, const char *addr, void *arg, char *err, size_t errlen)
{
    char pattern[160];
    snprintf(pattern, sizeof pattern, "dl:{%s:*", ((blob_list *)arg)->run);
    return rconn_scan_node(node, addr, pattern, list_blob, arg, err, errlen);
}

/* Whether the comma list of refs "v.e,..." names version v under epoch e. */
static int names(const char *refs, int64_t v, int64_t e)
{
    char want[48];
    int n = snprintf(want, sizeof want, "%lld.%lld", (long long)v, (long long)e);
    for (const char *p = refs; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == (size_t)n && memcmp(p, want, len) == 0) return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

/* 1: key is garbage (the rule at the top), 0: it stays, -1: Redis said no (err). */
static int is_orphan(rconn *c, const char *run, const char *key, char *err, size_t errlen)
{
    key_blob_name b;
    if (key_parse_blob(key, &b) < 0) return 0;
    char hkey[KEY_MAX], f[4][32];
    snprintf(f[0], sizeof f[0], "%d:epoch", b.shard);
    snprintf(f[1], sizeof f[1], "%d:snap", b.shard);
    snprintf(f[2], sizeof f[2], "%d:log", b.shard);
    snprintf(f[3], sizeof f[3], "%d:obsolete", b.shard);
    redisReply *r =
        rconn_command(c, "HMGET %s %s %s %s %s", key_run(hkey, sizeof hkey, run, "shards"), f[0], f[1], f[2], f[3]);
    if (rconn_reply_error(c, r, err, errlen) < 0 || r->type != REDIS_REPLY_ARRAY || r->elements != 4) {
        if (r && r->type != REDIS_REPLY_ERROR) err_set(err, errlen, "HMGET %s: unexpected reply", hkey);
        if (r) freeReplyObject(r);
        return -1;
    }
    const char *epoch = r->element[0]->str;
    int orphan = epoch && b.epoch < strtoll(epoch, NULL, 10);
    for (int i = 1; i < 4 && orphan; i++)
        if (names(r->element[i]->str, b.version, b.epoch)) orphan = 0;
    freeReplyObject(r);
    return orphan;
}

int orphans_collect(rconn *c, const char *run, long *deleted, char *err, size_t errlen)
{
    blob_list l = {.run = run};
    int rc = rconn_each_master(c, list_on_node, &l, err, errlen);
    *deleted = 0;
    for (size_t i = 0; rc == 0 && i < l.n; i++) {
        int o = is_orphan(c, run, l.keys[i], err, errlen);
        if (o < 0) rc = -1;
        if (o <= 0) continue;
        redisReply *r = rconn_command(c, "DEL %s", l.keys[i]);
        if (rconn_reply_error(c, r, err, errlen) < 0)
            rc = -1;
        else if (r->type == REDIS_REPLY_INTEGER)
            *deleted += r->integer;
        if (r) freeReplyObject(r);
    }
    for (size_t i = 0; i < l.n; i++) free(l.keys[i]);
    free(l.keys);
    return rc;
}
