/*
 * store.c: the shard-server's Redis I/O helpers.
 *
 * Durable blobs (dl:{R:k}:snap:<v>:<e>, dl:{R:k}:log:<v>:<e>) are written on the bulk-write connection
 * (link/set.c: straight from the caller's buffers, no copy) and read and deleted on the bulk connection,
 * so that a multi-megabyte write never sits in front of a lease renewal; FCALLs of the control library
 * go over the control connection. Every helper returns -1 when the connection is down (the callback is
 * then not called) so callers handle "Redis unavailable" in one place.
 */
#include "ss.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "format/keys.h"
#include "redis/fcall.h"

void store_blob_key(ss_ctx *ss, char *dst, size_t cap, int k, const char *kind, int64_t v, int64_t e)
{
    char suffix[96];
    snprintf(suffix, sizeof suffix, "%s:%lld:%lld", kind, (long long)v, (long long)e);
    key_shard(dst, cap, ss->opts.run, k, suffix);
}

int store_get(ss_ctx *ss, const char *key, rlink_cb *cb, void *priv)
{
    const char *argv[2] = {"GET", key};
    return rlink_cmds(&ss->bulk, cb, priv, 2, argv);
}

int store_set(ss_ctx *ss, const char *key, const uint8_t *head, size_t hlen, const void *payload, size_t plen,
              rlink_cb *cb, void *priv)
{
    return rlink_set(&ss->bulkw, key, head, hlen, payload, plen, cb, priv);
}

/* DEL the blob named by one "v.e" reference; a malformed one is logged and skipped. */
int store_del_ref(ss_ctx *ss, int k, const char *kind, const char *ref)
{
    char key[KEY_MAX];
    if (key_shard_ref(key, sizeof key, ss->opts.run, k, kind, ref) != 0) {
        log_warn("shard %d: cannot delete %s blob of malformed ref '%s'", k, kind, ref);
        return 0;
    }
    const char *argv[2] = {"DEL", key};
    if (rlink_cmds(&ss->bulk, NULL, NULL, 2, argv) != 0) return -1;
    log_debug("shard %d: deleted %s", k, key);
    return 0;
}

/* DEL the blobs named by "v.e" references (a dl_snapshot reply); keys of one shard share a slot. */
int store_del_refs(ss_ctx *ss, int k, const char *kind, redisReply **refs, size_t nrefs)
{
    for (size_t i = 0; i < nrefs; i++) {
        if (refs[i]->type != REDIS_REPLY_STRING || refs[i]->len == 0) continue;
        if (store_del_ref(ss, k, kind, refs[i]->str) != 0) return -1;
    }
    return 0;
}

int store_shard_version(ss_ctx *ss, int k, rlink_cb *cb, void *priv)
{
    char key[KEY_MAX], field[32];
    snprintf(field, sizeof field, "%d:version", k);
    const char *argv[3] = {"HGET", key_run(key, sizeof key, ss->opts.run, "shards"), field};
    return rlink_cmds(&ss->ctl, cb, priv, 3, argv);
}

/* FCALL fn 1 dl:{R}:config args... on the control connection; with replicas > 0 the reply comes once
 * WAIT says that many replicas have the call. */
static int fcall_send(ss_ctx *ss, int replicas, rlink_cb *cb, void *priv, const char *fn, int nargs, const char **args)
{
    const char *argv[24];
    int argc = fcall_argv(argv, (int)(sizeof argv / sizeof argv[0]), fn, ss->config_key, nargs, args);
    if (argc < 0) return -1;
    return rlink_cmd_replicated(&ss->ctl, replicas, cb, priv, argc, argv, NULL);
}

int store_fcall(ss_ctx *ss, rlink_cb *cb, void *priv, const char *fn, int nargs, const char **args)
{
    return fcall_send(ss, 0, cb, priv, fn, nargs, args);
}

int store_fcall_durable(ss_ctx *ss, rlink_cb *cb, void *priv, const char *fn, int nargs, const char **args)
{
    return fcall_send(ss, ss->rc.min_replicas, cb, priv, fn, nargs, args);
}

static void on_marked(redisReply *r, void *priv)
{
    (void)priv;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) /* the workers then ask this server for the version */
        log_debug("dl_replicated: %s", r ? r->str : "connection lost");
}

void store_mark_replicated(ss_ctx *ss, int k, int64_t epoch, int64_t version)
{
    if (ss->rc.min_replicas <= 0) return;
    char ep[24], shard[16], v[24];
    snprintf(ep, sizeof ep, "%lld", (long long)epoch);
    snprintf(shard, sizeof shard, "%d", k);
    snprintf(v, sizeof v, "%lld", (long long)version);
    const char *args[4] = {ss->id, ep, shard, v};
    if (store_fcall(ss, on_marked, NULL, "dl_replicated", 4, args) != 0)
        log_debug("dl_replicated: Redis is unavailable");
}
