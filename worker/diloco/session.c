/* session.c: a libdiloco session's life: open (connect, read the run, register, fetch the global
 * parameters) and close. Commands to Redis and registration are control.c's. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "internal.h"
#include "keys.h"
#include "log.h"
#include "rconn.h"
#include "util.h"

void diloco_options_default(diloco_options *o)
{
    memset(o, 0, sizeof *o);
    o->sync_every = 500;
    o->bf16 = 1;
    o->heartbeat_interval_ms = 30000;
    o->max_sync_retries = 3;
    o->net_timeout_ms = 60000;
    o->sync_timeout_ms = 120000;
    o->wait_poll_ms = 1000;
    o->connect_timeout_ms = 60000;
    o->log_level = DILOCO_LOG_DEFAULT;
}

/* Fetch the shards of fragment f at version >= min_version into base (and params when adopt).
 * Shards commit one by one, so a fetch may see some shards one version ahead: fetch again at the
 * highest version seen until all of the fragment's shards agree. */
int dl_fetch_fragment(diloco *d, int f, int64_t min_version, int adopt, char *err, size_t errlen)
{
    int first = dl_first_shard(d, f), last = dl_last_shard(d, f);
    uint64_t deadline = now_ms() + (uint64_t)d->o.sync_timeout_ms;
    for (;;) {
        int rc = dl_fetch_shards(d, first, last, min_version, err, errlen);
        if (rc == DL_CORRUPT) { /* the repaired version is above min_version: the same fetch gets it */
            if (repair_wait(d, err, err, errlen) < 0) return -1;
            deadline = now_ms() + (uint64_t)d->o.sync_timeout_ms;
            continue;
        }
        if (rc == DL_FAIL) return -1;
        if (rc == DL_OK) {
            int64_t lo = d->shard_version[first], hi = lo;
            for (int k = first + 1; k < last; k++) {
                if (d->shard_version[k] < lo) lo = d->shard_version[k];
                if (d->shard_version[k] > hi) hi = d->shard_version[k];
            }
            if (lo == hi) {
                d->frag_version[f] = hi;
                d->frag_incomplete[f] = 0; /* base is one consistent version: no earlier round to finish */
                if (!adopt) return 0;
                params_adopt(d, first, last);
                size_t off = (size_t)d->rc.shard_bounds[first];
                return params_changed(d, off, (size_t)d->rc.shard_bounds[last] - off, err, errlen);
            }
            min_version = hi;
        }
        if (dl_stopping(d)) {
            err_set(err, errlen, "stopped while fetching the global parameters");
            return -1;
        }
        if (now_ms() > deadline) {
            char last[256];
            snprintf(last, sizeof last, "%s", err && err[0] ? err : "no answer"); /* err is written below */
            err_set(err, errlen, "could not fetch the global parameters within %d ms (last: %s)", d->o.sync_timeout_ms,
                    last);
            return -1;
        }
        sleep_ms(50);
    }
}

/* A sync-mode joiner the open round does not wait for (dl_register put it at the next one) waits for
 * that round to close and starts from its result, together with the workers that close it. Training
 * from the open round's parameters instead would almost never make it in time (the others are already
 * part-way through the round): that work is lost as STALE, and the joiner then starts the next round,
 * where the barrier does wait for it, late by the same amount, stalling every worker. Idling costs this
 * worker alone. One fragment only: Streaming DiLoCo's schedule is a function of the step count. */
int dl_wait_joined_round(diloco *d, int f, char *err, size_t errlen)
{
    if (d->rc.async || d->rc.nfragments != 1 || d->frag_joined[f] <= d->frag_version[f]) return 0;
    int rc = sync_wait_closed(d, f, d->frag_version[f], err, errlen);
    if (rc == DL_FAIL) return -1;
    if (rc == DL_OK) d->frag_version[f] = d->frag_joined[f];
    /* DL_NEED (every member it waited for is gone: it needs our arrival to close), DL_STALE,
     * DL_EVICTED: the fetch below takes the version registration gave us and we train for the open
     * round (an eviction shows at the first arrival, which registers again) */
    return 0;
}

/* Every fragment at the version registration gave us (or, for a joiner of the next round, at that
 * round's start), into base and params. */
int dl_fetch_all(diloco *d, char *err, size_t errlen)
{
    for (int f = 0; f < d->rc.nfragments; f++) {
        if (dl_wait_joined_round(d, f, err, errlen) < 0) return -1;
        if (dl_fetch_fragment(d, f, d->frag_version[f], 1, err, errlen) < 0) return -1;
    }
    return 0;
}

static int alloc_buffers(diloco *d, char *err, size_t errlen)
{
    size_t n = d->numel;
    d->base = dl_host_alloc(d, n * sizeof(float));
    d->push_dtype = dl_delta_dtype(d);
    if (d->o.error_feedback && !codec_is_block(d->push_dtype))
        log_warn("--error-feedback applies to block-quantized runs (int8, int4, int3, int2); this run's "
                 "pseudo-gradients are %s: ignored",
                 codec_name(d->push_dtype));
    if (!d->o.bf16 && codec_is_block(d->rc.compress)) /* the run's codec is the one sent */
        log_warn("--no-bf16 applies to bf16 runs (it sends fp32 pseudo-gradients instead of bf16); this run's "
                 "pseudo-gradients are %s: ignored",
                 codec_name(d->rc.compress));
    if (dl_delta_alloc(d, err, errlen) < 0 || dl_update_alloc(d, err, errlen) < 0) return -1;
    d->owners = calloc((size_t)d->rc.nshards, sizeof(shard_owner));
    d->shard_version = calloc((size_t)d->rc.nshards, sizeof(int64_t));
    d->frag_version = calloc((size_t)d->rc.nfragments, sizeof(int64_t));
    d->frag_joined = calloc((size_t)d->rc.nfragments, sizeof(int64_t));
    d->seq = calloc((size_t)d->rc.nshards, sizeof(int64_t));
    d->push_tokens = calloc((size_t)d->rc.nfragments, sizeof(uint64_t));
    d->tokens_at_send = calloc((size_t)d->rc.nfragments, sizeof(uint64_t));
    d->tent_version = calloc((size_t)d->rc.nshards, sizeof(int64_t));
    d->tent_xxh = calloc((size_t)d->rc.nshards, sizeof(uint64_t));
    d->delta_xxh = calloc((size_t)d->rc.nshards, sizeof(uint64_t));
    d->tent_epoch = calloc((size_t)d->rc.nshards, sizeof(int64_t));
    d->tent_round = calloc((size_t)d->rc.nfragments, sizeof(int64_t));
    d->frag_incomplete = calloc((size_t)d->rc.nfragments, sizeof(int));
    if (!d->base || !d->owners || !d->shard_version || !d->frag_version || !d->frag_joined || !d->seq ||
        !d->push_tokens || !d->tokens_at_send || !d->tent_version || !d->tent_xxh || !d->delta_xxh || !d->tent_epoch ||
        !d->tent_round || !d->frag_incomplete) {
        err_set(err, errlen, "out of memory for %zu parameters", n);
        return -1;
    }
    uint64_t largest = 0;
    for (int k = 0; k < d->rc.nshards; k++)
        if (runconf_shard_numel(&d->rc, k) > largest) largest = runconf_shard_numel(&d->rc, k);
    /* --download update: parameters come with their momentum */
    d->recv_cap = (size_t)largest * sizeof(float) * (d->rc.download_update ? 2 : 1) + BLOB_HEADER_MAX + 64;
    return 0;
}

static void default_worker_id(char *out, size_t cap, const char *host)
{
    snprintf(out, cap, "%.40s-%d", host, (int)getpid());
}

/* Our own copies of the strings in o (the caller's may go away after diloco_open) and the checks of
 * what the options say about this worker. */
static int keep_options(diloco *d, const diloco_options *o, char *err, size_t errlen)
{
    d->o = *o;
    d->o.redis_url = NULL; /* parsed into d->url */
    if (!o->redis_url || !o->run) {
        err_set(err, errlen, "a Redis URL and a run name are required");
        return -1;
    }
    if (key_check_run_name(o->run, err, errlen) < 0) return -1;
    snprintf(d->run, sizeof d->run, "%s", o->run);
    d->o.run = d->run;
    if (o->worker_id && strlen(o->worker_id) >= sizeof d->worker_id) {
        err_set(err, errlen, "worker id '%.20s...' is %zu characters long: at most %zu", o->worker_id,
                strlen(o->worker_id), sizeof d->worker_id - 1);
        return -1;
    }
    if (o->worker_id && o->worker_id[0])
        snprintf(d->worker_id, sizeof d->worker_id, "%s", o->worker_id);
    else
        default_worker_id(d->worker_id, sizeof d->worker_id, d->host);
    d->o.worker_id = d->worker_id;
    if (!o->stop) d->o.stop = &d->stop_flag; /* what the Redis reconnects watch */
    return redis_url_parse(o->redis_url, &d->url, err, errlen);
}

int dl_session_init(diloco *d, const diloco_options *o, float *params, size_t numel, char *err, size_t errlen)
{
    d->params = params;
    d->numel = numel;
    d->sync_every = o->sync_every > 0 ? o->sync_every : 500;
    d->inflight = -1;
    for (int i = 0; i < MAX_CONNS; i++) d->conns[i].fd = -1;
    pthread_mutex_init(&d->ctl_mu, NULL);
    pthread_mutex_init(&d->owners_mu, NULL);
    pthread_mutex_init(&d->conns_mu, NULL);
    pthread_mutex_init(&d->hb_mu, NULL);
    pthread_cond_init(&d->hb_cond, NULL);
    if (gethostname(d->host, sizeof d->host) != 0) snprintf(d->host, sizeof d->host, "unknown");
    d->host[sizeof d->host - 1] = '\0';
    if (keep_options(d, o, err, errlen) < 0) return -1;
    key_run(d->config_key, sizeof d->config_key, o->run, "config");
    d->ctl = rconn_connect_retry(&d->url, REDIS_TIMEOUT_MS, o->connect_timeout_ms, o->stop, NULL, err, errlen);
    if (!d->ctl) return -1;
    if (runconf_load(d->ctl, o->run, &d->rc, err, errlen) < 0) return -1;
    if (o->num_fragments > 0 && o->num_fragments != d->rc.nfragments) {
        err_set(err, errlen,
                "run '%s' is cut into %d fragment(s) but this worker was started with %d: drop "
                "--num-fragments (workers take it from the run) or re-init the run",
                o->run, d->rc.nfragments, o->num_fragments);
        return -1;
    }
    if (o->fragment_alpha < 0 || o->fragment_alpha >= 1) {
        err_set(err, errlen, "fragment alpha must be in [0, 1), got %g", o->fragment_alpha);
        return -1;
    }
    if (d->rc.numel != numel) {
        err_set(err, errlen,
                "run '%s' has %" PRIu64 " parameters but this trainer has %zu: start the worker "
                "with the model the run was initialised with (%s %s)",
                o->run, d->rc.numel, numel, d->rc.trainer, d->rc.model);
        return -1;
    }
    if (dl_dev_init(d, params, err, errlen) < 0) return -1;
    d->part_hi = d->rc.nshards; /* all of them (a group's rank: its part, group.c) */
    return alloc_buffers(d, err, errlen);
}

static int session_open(diloco *d, const diloco_options *o, float *params, size_t numel, char *err, size_t errlen)
{
    if (o->group.size > 1) return group_open(d, o, params, numel, err, errlen);
    if (dl_session_init(d, o, params, numel, err, errlen) < 0) return -1;
    if (dl_register(d, err, errlen) < 0) return -1;
    if (owners_refresh(d, err, errlen) < 0) return -1;
    /* beating before the first fetch: with a short heartbeat timeout, a fetch that waits for a round to
     * close or for a shard-server to come back would otherwise get us evicted before we trained */
    if (heartbeat_start(d, err, errlen) < 0) return -1;
    if (dl_fetch_all(d, err, errlen) < 0) return -1;
    log_info("worker %s joined run %s at version %" PRId64 " (%zu parameters, %d shards, %d fragment(s), H=%d, %s%s)",
             d->worker_id, d->run, d->frag_version[0], numel, d->rc.nshards, d->rc.nfragments, d->sync_every,
             codec_name(d->push_dtype), d->ef ? " with error feedback" : "");
    return 0;
}

int diloco_open(const diloco_options *o, float *params, size_t numel, diloco **out, char *err, size_t errlen)
{
    diloco *d = calloc(1, sizeof *d);
    if (!d) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    log_sink_init(&d->log, o->log_callback, o->log_ctx, o->log_level);
    log_sink *prev = log_use_sink(&d->log);
    int rc = session_open(d, o, params, numel, err, errlen);
    log_use_sink(prev);
    if (rc < 0) {
        diloco_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

static void session_close(diloco *d)
{
    stream_finish_inflight(d);
    /* our last Δ must not vanish with us while its round is not durable (a server that died before its
     * commit needs it again); best effort, within the sync timeout */
    for (int f = 0; !d->rc.async && d->base && f < d->rc.nfragments; f++) {
        char err[256];
        if (dl_inc(d) > 0 && sync_confirm_durable(d, f, err, sizeof err) == DL_FAIL)
            log_warn("closing before fragment %d's last round was confirmed durable: %s", f, err);
    }
    group_wait_committed(d); /* still beating: the other ranks' parts of the last round too */
    heartbeat_stop(d);
    int64_t inc = dl_inc(d);
    if (inc > 0 && d->ctl && !rconn_broken(d->ctl)) { /* a group's rank: the group leaves (GONE if it has) */
        redisReply *r = d->grp ? rconn_command(d->ctl, "FCALL dl_deregister 1 %s %s %lld %d", d->config_key,
                                               d->worker_id, (long long)inc, d->grp_rank)
                               : rconn_command(d->ctl, "FCALL dl_deregister 1 %s %s %lld", d->config_key, d->worker_id,
                                               (long long)inc);
        if (r) freeReplyObject(r);
    }
    conn_close_all(d);
    if (d->ctl) rconn_free(d->ctl);
    if (d->blk) rconn_free(d->blk);
    runconf_free(&d->rc);
    dl_host_free(d, d->base);
    dl_delta_free(d);
    dl_update_free(d);
    dl_dev_free(d);
    free(d->owners);
    free(d->shard_version);
    free(d->tent_version);
    free(d->tent_xxh);
    free(d->delta_xxh);
    free(d->tent_epoch);
    free(d->tent_round);
    free(d->frag_incomplete);
    free(d->frag_version);
    free(d->frag_joined);
    free(d->seq);
    free(d->push_tokens);
    free(d->tokens_at_send);
    free(d->grp_bounds);
}

void diloco_close(diloco *d)
{
    if (!d) return;
    log_sink *prev = log_use_sink(&d->log);
    session_close(d);
    log_use_sink(prev);
    log_sink_destroy(&d->log);
    free(d);
}

void diloco_report(diloco *d, double loss, uint64_t tokens)
{
    pthread_mutex_lock(&d->hb_mu);
    d->loss = loss;
    d->tokens = tokens;
    pthread_mutex_unlock(&d->hb_mu);
}
