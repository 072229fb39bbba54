/* state.c: what a session holds, made and unmade: the options (our own copies, checked), the control
 * connection and the run's configuration read through it, the buffers sized by the run. diloco_open
 * (session.c) and a group's rank (group.c) start from state_init; diloco_close ends with state_free. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "format/keys.h"
#include "internal.h"
#include "math/codec.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"

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
    o->fragments_in_flight = 1;
}

/* What grows with the run (shards, fragments, fragments in flight) is allocated below, at open: struct diloco
 * had room for 256 rounds in flight, tails and lanes whatever D and F were, 134 KB a session (15 KB now). */
_Static_assert(sizeof(struct diloco) < 32 * 1024, "struct diloco holds per-fragment arrays: allocate them at open");

/* Options the run makes moot: said once, at open, never dropped silently. */
static void warn_moot_options(const diloco *d)
{
    if (d->o.error_feedback && !codec_is_block(d->push_dtype) && d->push_dtype != BLOB_TOPK)
        log_warn("--error-feedback applies to block-quantized runs (int8, int4, int3, int2); this run's "
                 "pseudo-gradients are %s: ignored",
                 codec_name(d->push_dtype));
    if (!d->o.bf16 && d->rc.compress != BLOB_BF16) /* the run's codec is the one sent (top-k's too) */
        log_warn("--no-bf16 applies to bf16 runs (it sends fp32 pseudo-gradients instead of bf16); this run's "
                 "pseudo-gradients are %s: ignored",
                 codec_name(d->rc.compress));
    /* (one fragment syncs whole, with alpha 0: after_step.c; a lookahead run refuses an alpha instead) */
    if (d->o.fragment_alpha > 0 && d->rc.nfragments == 1 && d->rc.async_lookahead <= 0)
        log_warn("--fragment-alpha applies to Streaming runs (coordinator init --fragments 2 or more); this run "
                 "has one fragment: ignored");
}

static int alloc_buffers(diloco *d, char *err, size_t errlen)
{
    size_t n = d->numel;
    d->base = dl_host_alloc(d, n * sizeof(float));
    d->push_dtype = dl_delta_dtype(d);
    warn_moot_options(d);
    if (dl_delta_alloc(d, err, errlen) < 0 || dl_update_alloc(d, err, errlen) < 0 ||
        lookahead_alloc(d, err, errlen) < 0)
        return -1;
    d->owners = calloc((size_t)d->rc.nshards, sizeof(shard_owner));
    d->shard_version = calloc((size_t)d->rc.nshards, sizeof(int64_t));
    d->shard_corrupt = calloc((size_t)d->rc.nshards, 1);
    d->frag_version = calloc((size_t)d->rc.nfragments, sizeof(int64_t));
    d->frag_joined = calloc((size_t)d->rc.nfragments, sizeof(int64_t));
    d->seq = calloc((size_t)d->rc.nshards, sizeof(int64_t));
    d->sub_base = calloc((size_t)d->rc.nshards, sizeof(int64_t));
    d->push_tokens = calloc((size_t)d->rc.nfragments, sizeof(uint64_t));
    d->tokens_at_send = calloc((size_t)d->rc.nfragments, sizeof(uint64_t));
    d->tokens_before = calloc((size_t)d->rc.nfragments, sizeof(uint64_t));
    d->tent_version = calloc((size_t)d->rc.nshards, sizeof(int64_t));
    d->tent_xxh = calloc((size_t)d->rc.nshards, sizeof(uint64_t));
    d->delta_xxh = calloc((size_t)d->rc.nshards, sizeof(uint64_t));
    d->tent_epoch = calloc((size_t)d->rc.nshards, sizeof(int64_t));
    d->tent_round = calloc((size_t)d->rc.nfragments, sizeof(int64_t));
    d->counted_round = malloc((size_t)d->rc.nfragments * sizeof(int64_t));
    d->frag_incomplete = calloc((size_t)d->rc.nfragments, sizeof(int));
    /* Streaming (streaming.c): D slots for the rounds in flight, a tail and a lane per fragment */
    d->inflight_max = d->o.fragments_in_flight; /* at least 1: check_in_flight ran before */
    d->inflight = calloc((size_t)d->inflight_max, sizeof(stream_slot));
    d->tails = calloc((size_t)d->rc.nfragments, sizeof(stream_tail));
    d->lane_ctl = calloc((size_t)d->rc.nfragments, sizeof(rconn *));
    if (!d->base || !d->owners || !d->shard_version || !d->shard_corrupt || !d->frag_version || !d->frag_joined ||
        !d->seq || !d->sub_base || !d->push_tokens || !d->tokens_at_send || !d->tokens_before || !d->tent_version ||
        !d->tent_xxh || !d->delta_xxh || !d->tent_epoch || !d->tent_round || !d->counted_round || !d->frag_incomplete ||
        !d->inflight || !d->tails || !d->lane_ctl) {
        err_set(err, errlen, "out of memory for %zu parameters", n);
        return -1;
    }
    for (int f = 0; f < d->rc.nfragments; f++) d->counted_round[f] = -1; /* (round 0 is a round) */
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

/* The limits and periods in o, each named as diloco_options names it: a zero timeout made every sync fail
 * at once, a zero poll spun on Redis, and a negative one wrapped into a wait of weeks. */
static int check_times(const diloco_options *o, char *err, size_t errlen)
{
    const struct {
        const char *name;
        int value, least;
    } t[] = {{"net_timeout_ms", o->net_timeout_ms, 1},
             {"sync_timeout_ms", o->sync_timeout_ms, 1},
             {"wait_poll_ms", o->wait_poll_ms, 1},
             {"heartbeat_interval_ms", o->heartbeat_interval_ms, 0},
             {"connect_timeout_ms", o->connect_timeout_ms, 0},
             {"max_sync_retries", o->max_sync_retries, 0},
             {"simulate_latency_ms", o->simulate_latency_ms, 0},
             {"fragments_in_flight", o->fragments_in_flight, 0}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].value < t[i].least) {
            err_set(err, errlen, "diloco_options.%s must be at least %d, got %d (diloco_options_default sets it)",
                    t[i].name, t[i].least, t[i].value);
            return -1;
        }
    return 0;
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
    if (key_check_run_name(o->run, err, errlen) < 0 || check_times(o, err, errlen) < 0) return -1;
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

/* --dylu on a run made without DyLU (its tunables' dylu is not 1): no heartbeat reply ever assigns an H, so the
 * worker keeps its own; said once, as the flag would otherwise be silently moot. */
static void check_dylu(diloco *d, const diloco_options *o)
{
    if (!o->dylu) return;
    char key[KEY_MAX];
    redisReply *r = rconn_command(d->ctl, "HGET %s dylu", key_run(key, sizeof key, o->run, "tunables"));
    int on = r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "1") == 0;
    int known = r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL);
    if (r) freeReplyObject(r);
    if (known && !on)
        log_warn("--dylu (diloco_options.dylu): run '%s' was made without DyLU (coordinator init --dylu), so nothing "
                 "assigns this worker an H: it syncs every %d steps, its own",
                 o->run, o->sync_every > 0 ? o->sync_every : 500);
}

/* --fragments-in-flight D: 1 <= D <= the run's fragments, and 1 in an async run (its submissions share the
 * session's submission number and order places: one at a time). 0 is the default, 1. */
static int check_in_flight(diloco *d, const diloco_options *o, char *err, size_t errlen)
{
    int want = o->fragments_in_flight;
    if (want == 0) want = d->o.fragments_in_flight = 1;
    if (want > d->rc.nfragments) { /* (below 0: check_times) */
        err_set(err, errlen,
                "--fragments-in-flight %d (diloco_options.fragments_in_flight): run '%s' has %d fragment(s), and at "
                "most that many can be in flight (1 <= D <= %d)",
                want, o->run, d->rc.nfragments, d->rc.nfragments);
        return -1;
    }
    if (want > 1 && d->rc.async) {
        err_set(err, errlen,
                "--fragments-in-flight %d (diloco_options.fragments_in_flight): run '%s' is asynchronous, whose "
                "fragments go one at a time (a worker's submissions share one submission number and order place); "
                "use 1 in an async run",
                want, o->run);
        return -1;
    }
    if (want > 1 && want == d->rc.nfragments && o->fragment_alpha == 0) {
        /* the fragment a boundary settles is then the only one not in flight, so it goes again at once:
         * its parameters were just set to the global ones (alpha 0), and its Δ is zero over no step */
        err_set(err, errlen,
                "--fragments-in-flight %d (diloco_options.fragments_in_flight) with --fragment-alpha 0: run '%s' has "
                "%d fragments, so each fragment's new values would come back just as it is due again, with no step "
                "trained since, and every pseudo-gradient after its first would be zero; use at most %d in flight, "
                "or a --fragment-alpha (diloco_options.fragment_alpha) above 0",
                want, o->run, d->rc.nfragments, d->rc.nfragments - 1);
        return -1;
    }
    return 0;
}

/* The heartbeat against the run's timeout (dl:{R}:tunables heartbeat_timeout_ms; 0: never evicts): a worker
 * that beats no more often than the timeout is evicted between beats, its rounds lost (the quadratic, timeout
 * 1 s, --heartbeat-interval 3, H of 1.2 s: 1 round of 5 closed, 8 evictions in 300 steps), so that is refused;
 * above half the timeout one late beat evicts it, and with no heartbeat at all (0) any stretch between syncs
 * longer than the timeout does: both are said. */
static int check_heartbeat(diloco *d, const diloco_options *o, char *err, size_t errlen)
{
    char key[KEY_MAX];
    redisReply *r = rconn_command(d->ctl, "HGET %s heartbeat_timeout_ms", key_run(key, sizeof key, o->run, "tunables"));
    long long timeout = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    if (r) freeReplyObject(r);
    int every = o->heartbeat_interval_ms;
    if (timeout > 0 && every == 0) { /* no heartbeat thread: alive to the run only at its syncs */
        /* (measured: the quadratic, syncs 1.2 s apart, timeout 1 s: no round closed in 300 steps) */
        log_warn("--heartbeat-interval 0 (diloco_options.heartbeat_interval_ms): this worker sends no heartbeats, "
                 "and run '%s' evicts a worker silent for %.3g s, so any stretch between its syncs longer than that "
                 "gets it evicted and its round lost; beat every %.3g s or less",
                 o->run, timeout / 1000.0, timeout / 4000.0);
        return 0;
    }
    if (timeout <= 0 || every <= timeout / 2) return 0;
    if (every < timeout) {
        log_warn("--heartbeat-interval %.3g s (diloco_options.heartbeat_interval_ms) is more than half of run '%s''s "
                 "heartbeat timeout of %.3g s: one late beat gets this worker evicted; use %.3g s or less (a quarter of "
                 "the timeout, as the defaults 30 and 120 s)",
                 every / 1000.0, o->run, timeout / 1000.0, timeout / 4000.0);
        return 0;
    }
    err_set(err, errlen,
            "--heartbeat-interval %.3g s (diloco_options.heartbeat_interval_ms %d): run '%s' evicts a worker silent "
            "for %.3g s (coordinator init --heartbeat-timeout), so this worker would be evicted between its beats "
            "and lose its rounds; use a --heartbeat-interval of %.3g s or less (a quarter of the timeout, as the "
            "defaults 30 and 120 s), or a run with a longer --heartbeat-timeout",
            every / 1000.0, every, o->run, timeout / 1000.0, timeout / 4000.0);
    return -1;
}

int state_init(diloco *d, const diloco_options *o, float *params, size_t numel, char *err, size_t errlen)
{
    d->params = params;
    d->numel = numel;
    d->sync_every = o->sync_every > 0 ? o->sync_every : 500;
    for (int i = 0; i < MAX_CONNS; i++) d->conns[i].fd = -1;
    pthread_mutex_init(&d->ctl_mu, NULL);
    pthread_mutex_init(&d->owners_mu, NULL);
    pthread_mutex_init(&d->conns_mu, NULL);
    pthread_mutex_init(&d->hb_mu, NULL);
    pthread_mutex_init(&d->stream_mu, NULL);
    pthread_cond_init(&d->stream_cv, NULL);
    pthread_cond_init(&d->hb_cond, NULL);
    if (gethostname(d->host, sizeof d->host) != 0) snprintf(d->host, sizeof d->host, "unknown");
    d->host[sizeof d->host - 1] = '\0';
    if (keep_options(d, o, err, errlen) < 0) return -1;
    key_run(d->config_key, sizeof d->config_key, o->run, "config");
    d->ctl =
        rconn_connect_watched(&d->url, REDIS_TIMEOUT_MS, o->connect_timeout_ms, dl_stop_seen, d, NULL, err, errlen);
    if (!d->ctl) return -1;
    dl_watch_stop(d, d->ctl);
    if (runconf_load(d->ctl, o->run, &d->rc, err, errlen) < 0) return -1;
    if (d->rc.created_ms > 0) /* (a run made before created_ms was recorded: "", not checked) */
        snprintf(d->made_at, sizeof d->made_at, "%llu", (unsigned long long)d->rc.created_ms);
    if (o->num_fragments > 0 && o->num_fragments != d->rc.nfragments) {
        err_set(err, errlen,
                "run '%s' is cut into %d fragment(s) but this worker was started with %d: drop "
                "--num-fragments (workers take it from the run) or re-init the run",
                o->run, d->rc.nfragments, o->num_fragments);
        return -1;
    }
    if (check_in_flight(d, o, err, errlen) < 0 || check_heartbeat(d, o, err, errlen) < 0) return -1;
    check_dylu(d, o);
    if (o->fragment_alpha < 0 || o->fragment_alpha >= 1) {
        err_set(err, errlen, "fragment alpha must be in [0, 1), got %g", o->fragment_alpha);
        return -1;
    }
    d->run_nshards = d->rc.nshards;
    d->run_numel = d->rc.numel;
    /* a sharded group's rank: rc becomes its view (its shards only, numel its slices' sum) */
    if ((o->group.nslices != 0 || o->group.slices) && part_view(d, numel, err, errlen) < 0) return -1;
    if (d->rc.numel != numel) {
        err_set(err, errlen,
                "run '%s' has %" PRIu64 " parameters but this trainer has %zu: start the worker "
                "with the model the run was initialised with (%s %s)",
                o->run, d->rc.numel, numel, d->rc.trainer, d->rc.model);
        return -1;
    }
    if (dl_dev_init(d, params, err, errlen) < 0) return -1;
    return alloc_buffers(d, err, errlen);
}

/* Everything state_init made (and what the session made since: blk, grp_bounds). */
void state_free(diloco *d)
{
    if (d->ctl) rconn_free(d->ctl);
    for (int i = 0; d->lane_ctl && i < d->rc.nfragments; i++)
        if (d->lane_ctl[i]) rconn_free(d->lane_ctl[i]);
    free(d->lane_ctl);
    if (d->blk) rconn_free(d->blk);
    runconf_free(&d->rc);
    part_free(d);
    dl_host_free(d, d->base);
    dl_delta_free(d);
    lookahead_free(d);
    dl_update_free(d);
    dl_dev_free(d);
    free(d->owners);
    free(d->shard_version);
    free(d->shard_corrupt);
    free(d->tent_version);
    free(d->tent_xxh);
    free(d->delta_xxh);
    free(d->tent_epoch);
    free(d->tent_round);
    free(d->counted_round);
    free(d->frag_incomplete);
    free(d->frag_version);
    free(d->frag_joined);
    free(d->seq);
    free(d->sub_base);
    free(d->push_tokens);
    free(d->tokens_at_send);
    free(d->tokens_before);
    free(d->inflight);
    free(d->tails);
    free(d->grp_bounds);
    free(d->grp_parts);
    free(d->grp_plan.bases);
    free(d->grp_placed);
}
