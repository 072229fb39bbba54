/*
 * ctx.c: bringing an ss_ctx up: the run read from Redis, then everything that runs on the event loop.
 *
 * main.c calls ss_ctx_load_run and ss_ctx_start with the options it parsed, installs the signal
 * handlers and runs the loop; the unit tests (tests/test_ss_*.c) call the same two on an event base
 * of their own and drive the loop themselves, so what they test is the server as it starts.
 * ss_ctx_free takes it all down again once the loop has stopped.
 */
#include "ss.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/version.h"
#include "format/keys.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"

#define REDIS_TIMEOUT_MS 5000
#define PARK_CHECK_MS 1000
#define PARK_MAX_MS 30000
#define BULK_STALL_MS 60000

/* The first server started in this process (its only one, but in the unit tests): on_refused's, as the
 * links' refusal callback carries no pointer. */
static ss_ctx *g_ss;

/* Read the outer tunables from dl:{R}:tunables (the lease loop keeps them fresh afterwards). */
static void read_tunables(rconn *c, ss_ctx *ss)
{
    char key[KEY_MAX];
    ss->tun.lr = 0.7f;
    ss->tun.mu = 0.9f;
    ss->tun.nesterov = 1;
    redisReply *r = rconn_command(c, "HMGET %s outer_lr outer_momentum nesterov",
                                  key_run(key, sizeof key, ss->opts.run, "tunables"));
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
        if (r->element[0]->type == REDIS_REPLY_STRING) ss->tun.lr = strtof(r->element[0]->str, NULL);
        if (r->element[1]->type == REDIS_REPLY_STRING) ss->tun.mu = strtof(r->element[1]->str, NULL);
        if (r->element[2]->type == REDIS_REPLY_STRING) ss->tun.nesterov = atoi(r->element[2]->str) != 0;
    }
    if (r != NULL) freeReplyObject(r);
}

/* Shard-servers may be started before their run is made (a service that comes up with Redis): until
 * `coordinator init` has made it, wait, saying so once and then once a minute, until it exists or we are
 * told to stop. Any other failure (a library of another version, a config that does not parse, Redis gone)
 * ends the start at once. 0 loaded; -1 with the reason logged. */
static int load_config_when_made(rconn *c, ss_ctx *ss, volatile int *stop)
{
    char err[512];
    uint64_t said_at = 0;
    for (;;) {
        int rc = runconf_load(c, ss->opts.run, &ss->rc, err, sizeof err);
        if (rc == 0) return 0;
        if (rc != RUNCONF_ABSENT) {
            log_error("%s", err);
            return -1;
        }
        if (said_at == 0 || now_ms() - said_at >= RUN_GONE_LOG_EVERY_MS) {
            log_warn("waiting for run %s to be made (SIGINT/SIGTERM to stop): %s", ss->opts.run, err);
            said_at = now_ms();
        }
        for (int i = 0; i < 10 && !(stop != NULL && *stop); i++) sleep_ms(100);
        if (stop != NULL && *stop) {
            log_info("stopped while waiting for run %s to be made", ss->opts.run);
            return -1;
        }
    }
}

int ss_ctx_load_run(ss_ctx *ss, volatile int *stop)
{
    char err[512];
    key_run(ss->config_key, sizeof ss->config_key, ss->opts.run, "config");
    if (redis_url_parse(ss->opts.redis, &ss->url, err, sizeof err) != 0) {
        log_error("bad --redis URL: %s", err);
        return -1;
    }
    if (key_check_run_name(ss->opts.run, err, sizeof err) != 0) {
        log_error("bad --run: %s", err);
        return -1;
    }
    rconn *c =
        rconn_connect_retry(&ss->url, REDIS_TIMEOUT_MS, ss->opts.connect_timeout_ms, stop, NULL, err, sizeof err);
    if (c == NULL) {
        if (stop != NULL && *stop) /* a signal while it waited for Redis: the stop asked for, not an error */
            log_info("%s", err);
        else
            log_error("%s", err);
        return -1;
    }
    if (load_config_when_made(c, ss, stop) != 0) {
        rconn_free(c);
        return -1;
    }
    read_tunables(c, ss);
    rconn_free(c);
    log_info("run %s: %llu parameters in %d shards, %d fragments, snapshot every %d versions; outer lr %g "
             "momentum %g nesterov %d (library version %s)",
             ss->opts.run, (unsigned long long)ss->rc.numel, ss->rc.nshards, ss->rc.nfragments, ss->rc.snapshot_every,
             (double)ss->tun.lr, (double)ss->tun.mu, ss->tun.nesterov, DL_LIB_VERSION);
    return 0;
}

/* Redis refused a login of connection `conn` for good (rconn_error_final: the password or user was
 * changed under us): nothing can work any more, so the loop stops and the process exits with status 1. */
static void on_refused(const char *conn, const char *why)
{
    log_error("redis %s connection: Redis refuses this user: %s; stopping (check the user, password and ACL in "
              "the Redis URL)",
              conn, why);
    if (g_ss == NULL) return; /* taken down already */
    g_ss->refused = 1;
    if (g_ss->base != NULL) event_base_loopbreak(g_ss->base);
}

static void on_park_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ss_ctx *ss = arg;
    lease_check_expiry(ss);
    park_expire(ss, PARK_MAX_MS);
    subscribe_tick(ss);
    snapshot_idle_work(ss);
}

static int add_persist(ss_ctx *ss, struct event **ev, event_callback_fn fn, int ms)
{
    *ev = event_new(ss->base, -1, EV_PERSIST, fn, ss);
    if (*ev == NULL) return -1;
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return evtimer_add(*ev, &tv);
}

int ss_ctx_start(ss_ctx *ss, struct event_base *base, char *err, size_t errlen)
{
    ss->base = base;
    if (g_ss == NULL) g_ss = ss;
    ss->dispatch = ops_dispatch;
    ss->reload = shard_reload;
    ss->release = shard_release;
    if (shards_init(ss, err, errlen) != 0 || server_listen(ss, err, errlen) != 0) return -1;
    if (commit_init(ss) != 0) {
        snprintf(err, errlen, "cannot create the compute event");
        return -1;
    }
    int stall = ss->opts.lease_ttl_ms < 2000 ? 2000 : ss->opts.lease_ttl_ms;
    if (rlink_init(&ss->ctl, "control", RLINK_CMD, &ss->url, ss->base, stall, on_refused) != 0 ||
        rlink_init(&ss->bulk, "bulk", RLINK_CMD, &ss->url, ss->base, BULK_STALL_MS, on_refused) != 0 ||
        rlink_init(&ss->bulkw, "bulk-write", RLINK_SET, &ss->url, ss->base, BULK_STALL_MS, on_refused) != 0) {
        snprintf(err, errlen, "cannot set up the Redis connections");
        return -1;
    }
    rlink *links[4] = {&ss->ctl, &ss->bulk, &ss->bulkw, &ss->closes.link};
    int nlinks = 3;
    if (!ss->rc.async) { /* sync runs: the barrier closes (subscribe.c) */
        if (rlink_init(&ss->closes.link, "closes", RLINK_CMD, &ss->url, ss->base, stall, on_refused) != 0 ||
            subscribe_start(ss) != 0) {
            snprintf(err, errlen, "cannot set up the subscription to the barrier closes");
            return -1;
        }
        nlinks = 4;
    }
    rlink_route_attach(&ss->route, &ss->bulk, links, nlinks);
    if (metrics_start(ss, err, errlen) != 0 || lease_start(ss, err, errlen) != 0) return -1;
    if (add_persist(ss, &ss->park_timer, on_park_timer, PARK_CHECK_MS) != 0) {
        snprintf(err, errlen, "cannot start the park timer");
        return -1;
    }
    return 0;
}

static void free_event(struct event **ev)
{
    if (*ev != NULL) event_free(*ev);
    *ev = NULL;
}

void ss_ctx_free(ss_ctx *ss)
{
    ss->stopping = 1;
    server_close(ss);
    /* shards first: the commands in flight are answered (NULL) as the links close, and their callbacks
     * must find their shard gone rather than start new work */
    shards_stop(ss);
    rlink_close(&ss->ctl);
    rlink_close(&ss->bulk);
    rlink_close(&ss->bulkw);
    if (ss->closes.link.base != NULL) rlink_close(&ss->closes.link);
    closes_free(ss);
    rlink_route_free(&ss->route);
    commit_free_all(ss);
    fault_free(ss);
    free_event(&ss->beat_timer);
    free_event(&ss->exit_timer);
    free_event(&ss->park_timer);
    metrics_stop(ss);
    shards_free(ss);
    runconf_free(&ss->rc);
    if (g_ss == ss) g_ss = NULL;
}
