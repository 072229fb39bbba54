/* owners.c: which shard-server owns which shard, as the control plane says, and the pause between
 * a data-plane job's tries (owners_retry_pause), which looks at the owners again.
 *
 * Leases live in dl:{R}:shards (owner id, epoch, expiry) and server addresses in dl:{R}:servers. The
 * worker caches the map and re-reads it whenever a server redirects it or cannot be reached: the
 * data plane is direct, but Redis is the only place that knows the truth. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "format/mpmap.h"
#include "internal.h"
#include "redis/rconn.h"

/* How long a push or get still tries once the run was shut down: long enough for a commit on its way to
 * land (milliseconds, or a beat or two where an owner moves), where --sync-timeout (120 s by default) kept a
 * worker whose owner was gone with the run's servers waiting that long before it stopped. */
#define SHUTDOWN_GRACE_MS 5000

static const char *hash_field(redisReply *r, const char *name)
{
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, name) == 0) return r->element[i + 1]->str;
    return NULL;
}

static redisReply *hash_field_reply(redisReply *r, const char *name)
{
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, name) == 0) return r->element[i + 1];
    return NULL;
}

/* Fill owners from the two hashes. A shard whose lease has expired keeps its last owner: the request
 * to it will fail or redirect, and we will look again. */
static void owners_fill(diloco *d, redisReply *shards, redisReply *servers)
{
    char name[48];
    pthread_mutex_lock(&d->owners_mu);
    for (int k = 0; k < d->rc.nshards; k++) {
        shard_owner *o = &d->owners[k];
        snprintf(name, sizeof name, "%d:owner", dl_shard_id(d, k));
        const char *owner = hash_field(shards, name);
        snprintf(name, sizeof name, "%d:epoch", dl_shard_id(d, k));
        const char *epoch = hash_field(shards, name);
        snprintf(o->server, sizeof o->server, "%s", owner ? owner : "");
        o->epoch = epoch ? atoll(epoch) : 0;
        o->addr[0] = '\0';
        redisReply *info = o->server[0] ? hash_field_reply(servers, o->server) : NULL;
        if (info && info->type == REDIS_REPLY_STRING)
            mpmap_get_str(info->str, info->len, "addr", o->addr, sizeof o->addr);
    }
    pthread_mutex_unlock(&d->owners_mu);
}

int owners_refresh(diloco *d, char *err, size_t errlen)
{
    char k1[KEY_MAX], k2[KEY_MAX];
    key_run(k1, sizeof k1, d->o.run, "shards");
    key_run(k2, sizeof k2, d->o.run, "servers");
    redisReply *shards = dl_command(d, err, errlen, "HGETALL %s", k1);
    if (dl_reply_failed(shards)) {
        if (shards) freeReplyObject(shards);
        return -1;
    }
    redisReply *servers = dl_command(d, err, errlen, "HGETALL %s", k2);
    if (dl_reply_failed(servers)) {
        freeReplyObject(shards);
        if (servers) freeReplyObject(servers);
        return -1;
    }
    owners_fill(d, shards, servers);
    freeReplyObject(shards);
    freeReplyObject(servers);
    return 0;
}

void owners_get(diloco *d, int shard, shard_owner *out)
{
    pthread_mutex_lock(&d->owners_mu);
    *out = d->owners[shard];
    pthread_mutex_unlock(&d->owners_mu);
}

/* The map is read again only when a lease did move: two HGETALLs, against a request to an owner that refuses it
 * (`moved`), or, gone, makes the worker wait for a connect or a handshake to time out (5 s each). The confirm reads
 * the leases' epochs anyway (sync.c), and so does a fetch (fetch.c): tests/it_confirm_moved.sh, bench/confirm_moved. */
int owners_follow(diloco *d, int first, int last, const committed_shard *c, char *err, size_t errlen)
{
    int moved = 0;
    pthread_mutex_lock(&d->owners_mu);
    for (int k = first; k < last && !moved; k++)
        moved = c[k - first].epoch >= 0 && c[k - first].epoch != d->owners[k].epoch;
    pthread_mutex_unlock(&d->owners_mu);
    if (!moved) return 0;
    return owners_refresh(d, err, errlen) < 0 ? -1 : 1;
}

/* A wait that lasts (no shard-server running, an owner still loading) would otherwise be silent until
 * the sync timeout: one line per session every WAIT_LOG_EVERY_MS, from whichever job waits. `control` is
 * why the owners could not be read from Redis ("" when they could): when the control plane itself is
 * down (a Redis Cluster node unreachable, CLUSTERDOWN), that is the cause to name, not the shard-server's
 * last answer, which only says it no longer holds the shard. */
#define WAIT_LOG_EVERY_MS 10000
static void log_long_wait(diloco *d, uint64_t deadline, int shard, const char *what, const char *why,
                          const char *control)
{
    uint64_t now = now_ms(), started = deadline - (uint64_t)d->o.sync_timeout_ms;
    uint64_t last = __atomic_load_n(&d->wait_logged_ms, __ATOMIC_RELAXED);
    if (now - started < WAIT_LOG_EVERY_MS / 2 || (last != 0 && now - last < WAIT_LOG_EVERY_MS)) return;
    if (!__atomic_compare_exchange_n(&d->wait_logged_ms, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return;
    uint64_t none = 0; /* (the first line's wait: the one owners_wait_over says is over) */
    __atomic_compare_exchange_n(&d->wait_warned_since_ms, &none, started, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    log_warn("%s of shard %d: still trying after %.0f s (%s%s%s); gives up after %.0f s (--sync-timeout)", what, shard,
             (double)(now - started) / 1000.0, why, control[0] ? "; the owners cannot be read from Redis: " : "",
             control, (double)d->o.sync_timeout_ms / 1000.0);
}

void owners_wait_over(diloco *d, int shard, const char *what)
{
    if (__atomic_load_n(&d->wait_warned_since_ms, __ATOMIC_RELAXED) == 0) return;
    uint64_t since = __atomic_exchange_n(&d->wait_warned_since_ms, 0, __ATOMIC_RELAXED);
    if (since == 0) return; /* (another job said it) */
    log_info("%s of shard %d: went through after %.0f s (the wait logged above is over)", what, shard,
             (double)(now_ms() - since) / 1000.0);
}

/* After a transient failure: look at the owners again and back off a little. The cap is short: what we
 * wait for (a restarted or new owner that has loaded its shards, a commit in progress) is what every
 * worker waits for, so each ms between its arrival and our next look is a stall of the whole run,
 * and a look is one read of the owners plus a request. */
int owners_retry_pause(diloco *d, unsigned *attempt, uint64_t deadline, int shard, const char *what, char *err,
                       size_t errlen)
{
    char why[256];
    snprintf(why, sizeof why, "%s", err ? err : "");
    if (dl_stopping(d)) {
        err_set(err, errlen, "stopped before %s of shard %d succeeded (last: %s)", what, shard, why);
        return DL_FAIL;
    }
    if (now_ms() > deadline) {
        err_set(err, errlen, "%s of shard %d did not succeed within %d ms (last: %s)", what, shard,
                d->o.sync_timeout_ms, why);
        return DL_FAIL;
    }
    uint64_t shut = dl_shutdown_seen_ms(d);
    if (shut && dl_run_ended(d)) { /* (a run made again, or our id taken: nothing of ours can land, no grace) */
        err_set(err, errlen, "%s: %s of shard %d given up (last: %s)", dl_run_end(d), what, shard, why);
        return DL_FAIL;
    }
    if (shut && now_ms() > shut + SHUTDOWN_GRACE_MS) {
        err_set(err, errlen, "%s and %s of shard %d had not succeeded %d ms later (last: %s)", dl_run_end(d), what,
                shard, SHUTDOWN_GRACE_MS, why);
        return DL_FAIL;
    }
    char control[512] = "";
    if (owners_refresh(d, control, sizeof control) == 0) control[0] = '\0';
    log_long_wait(d, deadline, shard, what, err ? err : "", control);
    sleep_ms(backoff_ms((*attempt)++, 20, 100));
    return DL_OK;
}
