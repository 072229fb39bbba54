/*
 * metrics.c: the shard-server's counters (ss_metrics in ss.h), kept in memory, logged every
 * METRICS_PERIOD_S at INFO, and, with --metrics [HOST:]PORT, served as Prometheus text (format 0.0.4) at
 * GET /metrics by a libevent evhttp on the server's own event loop (a scrape is a few hundred bytes
 * formatted in place: it never waits on anything). Every sample carries run="R" and server="<id>"; the coordinator's
 * /metrics has the run-wide view (docs/http.md), these are the data-plane numbers of one process. A connection
 * delivers its request within HTTP_REQUEST_DEADLINE_S of its accept and serves that one (net/http_deadline.h).
 */
#include "ss.h"

#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "base/log.h"
#include "net/accept_guard.h"
#include "net/http_deadline.h"

#define METRICS_PERIOD_S 30

/* Connections to Redis re-established after a loss, over the server's three links (not the closes
 * subscription: a Redis restart counts 3 whatever the mode). */
static uint64_t metrics_redis_reconnects(const ss_ctx *ss)
{
    return ss->ctl.reconnects + ss->bulk.reconnects + ss->bulkw.reconnects;
}

/* Shards held (leased), ready (loaded, serving) and found corrupt. */
static void count_shards(const ss_ctx *ss, int *held, int *ready, int *corrupt)
{
    *held = *ready = *corrupt = 0;
    for (int k = 0; k < ss->nshards; k++) {
        *held += ss->shards[k].state != SH_FREE;
        *ready += ss->shards[k].state == SH_READY;
        *corrupt += ss->shards[k].state == SH_CORRUPT;
    }
}

void metrics_log(ss_ctx *ss)
{
    const ss_metrics *m = &ss->m;
    int held, ready, corrupt;
    count_shards(ss, &held, &ready, &corrupt);
    double mean = m->rounds_committed ? m->commit_seconds / (double)m->rounds_committed : 0.0;
    log_info("metrics: shards held %d (ready %d, corrupt %d); rounds committed %llu (no-op %llu), commit mean %.3f s "
             "max %.3f s; "
             "pushes %llu, gets %llu (tentative %llu); bytes in %llu out %llu; conflicts %llu; lease changes %llu; "
             "rejections %llu, duplicates %llu; computed ahead %llu (dropped %llu); "
             "loads %llu (failed %llu); snapshots %llu; connections %llu (closed silent %llu); redis reconnects %llu; "
             "barrier closes heard "
             "%llu (missed %llu)",
             held, ready, corrupt, (unsigned long long)m->rounds_committed, (unsigned long long)m->noop_commits, mean,
             m->commit_seconds_max, (unsigned long long)m->pushes, (unsigned long long)m->gets,
             (unsigned long long)m->tentative_gets, (unsigned long long)m->bytes_in, (unsigned long long)m->bytes_out,
             (unsigned long long)m->conflicts, (unsigned long long)m->lease_changes, (unsigned long long)m->rejections,
             (unsigned long long)m->duplicates, (unsigned long long)m->ahead_used,
             (unsigned long long)m->ahead_discarded, (unsigned long long)m->loads, (unsigned long long)m->load_failures,
             (unsigned long long)m->snapshots, (unsigned long long)m->connections,
             (unsigned long long)m->peers_timed_out, (unsigned long long)metrics_redis_reconnects(ss),
             (unsigned long long)m->closes_heard, (unsigned long long)m->closes_missed);
}

static void on_metrics_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    metrics_log(arg);
}

/* One metric: HELP, TYPE and its sample with the process's labels. */
static void prom_metric(struct evbuffer *out, const ss_ctx *ss, const char *name, const char *type, const char *help,
                        double value)
{
    evbuffer_add_printf(out, "# HELP diloco_shardserver_%s %s\n# TYPE diloco_shardserver_%s %s\n", name, help, name,
                        type);
    evbuffer_add_printf(out, "diloco_shardserver_%s{run=\"%s\",server=\"%s\"} %.17g\n", name, ss->opts.run, ss->id,
                        value);
}

static void prom_counter(struct evbuffer *out, const ss_ctx *ss, const char *name, const char *help, uint64_t v)
{
    prom_metric(out, ss, name, "counter", help, (double)v);
}

static void metrics_format(struct evbuffer *out, const ss_ctx *ss)
{
    const ss_metrics *m = &ss->m;
    int held, ready, corrupt;
    count_shards(ss, &held, &ready, &corrupt);
    prom_metric(out, ss, "shards_held", "gauge", "Shards this server holds a lease on.", held);
    prom_metric(out, ss, "shards_ready", "gauge", "Held shards loaded and serving.", ready);
    prom_metric(out, ss, "shards_corrupt", "gauge",
                "Held shards whose durable state is corrupt (answering CORRUPT until coordinator repair).", corrupt);
    prom_counter(out, ss, "rounds_committed_total", "Versions committed (outer steps made durable).",
                 m->rounds_committed);
    prom_counter(out, ss, "noop_commits_total", "Committed versions with no participant left.", m->noop_commits);
    prom_metric(out, ss, "commit_seconds_total", "counter",
                "Seconds from the first barrier read to the dl_commit reply, summed over commits.", m->commit_seconds);
    prom_metric(out, ss, "commit_seconds_max", "gauge", "Longest commit so far, seconds.", m->commit_seconds_max);
    prom_counter(out, ss, "commit_conflicts_total", "FENCED or VERSION replies to dl_commit or dl_snapshot.",
                 m->conflicts);
    prom_counter(out, ss, "lease_changes_total", "Shards gained or lost.", m->lease_changes);
    prom_counter(out, ss, "bytes_in_total", "Data-plane bytes received.", m->bytes_in);
    prom_counter(out, ss, "bytes_out_total", "Data-plane bytes sent.", m->bytes_out);
    prom_counter(out, ss, "pushes_total", "Pseudo-gradients accepted.", m->pushes);
    prom_counter(out, ss, "gets_total", "Parameter replies sent.", m->gets);
    prom_counter(out, ss, "tentative_gets_total", "Parameter replies sent before the version was durable.",
                 m->tentative_gets);
    prom_counter(out, ss, "commits_computed_ahead_total",
                 "Commits that took over the compute made ahead of their barrier (--compute-ahead).", m->ahead_used);
    prom_counter(out, ss, "computes_ahead_dropped_total",
                 "Computes ahead of a barrier that were dropped (the round had other participants, a resend, a "
                 "reload).",
                 m->ahead_discarded);
    prom_counter(out, ss, "rejections_total", "Requests rejected (recorded in dl:{R}:events).", m->rejections);
    prom_counter(out, ss, "duplicates_total",
                 "Pushes of a sync round that had committed already (a resend after a failover or a lost reply).",
                 m->duplicates);
    prom_counter(out, ss, "loads_total", "Shard loads (snapshot + log replay) completed.", m->loads);
    prom_counter(out, ss, "load_failures_total", "Shard loads that failed (retried unless the state is corrupt).",
                 m->load_failures);
    prom_counter(out, ss, "corrupt_loads_total", "Shard loads that found the durable state corrupt.", m->corrupt_loads);
    prom_counter(out, ss, "snapshots_total", "Snapshots written and recorded.", m->snapshots);
    prom_counter(out, ss, "connections_total", "Data-plane connections accepted.", m->connections);
    prom_counter(out, ss, "connections_timed_out_total",
                 "Data-plane connections closed for their silence (no hello, a frame not finished, replies not read).",
                 m->peers_timed_out);
    prom_counter(out, ss, "redis_reconnects_total",
                 "Connections to Redis re-established after a loss (control, bulk and bulk-write each count).",
                 metrics_redis_reconnects(ss));
    prom_counter(out, ss, "barrier_closes_heard_total",
                 "Sync barrier closes announced on dl:{R}:closes (the gets parked on them answered at once).",
                 m->closes_heard);
    prom_counter(out, ss, "barrier_closes_missed_total",
                 "Sync barrier closes found by reading the barrier, never announced (a lost message).",
                 m->closes_missed);
}

/* req arrived whole: its connection's deadline is over, and the connection serves no other request (a second
 * one, on a connection kept alive, would have no deadline: sent a byte at a time, it held the connection). */
static void request_arrived(ss_ctx *ss, struct evhttp_request *req)
{
    http_deadlines_met(ss->metrics_deadlines, req);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
}

/* 405 with "Allow: GET, HEAD" (evhttp_send_error would drop the header: it clears them for its page). */
static void reply_method_not_allowed(struct evhttp_request *req)
{
    static const char msg[] = "this server only has GET /metrics (and HEAD)\n";
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Allow", "GET, HEAD");
    evhttp_add_header(h, "Content-Type", "text/plain; charset=utf-8");
    struct evbuffer *out = evbuffer_new();
    if (out != NULL) evbuffer_add(out, msg, sizeof msg - 1);
    evhttp_send_reply(req, 405, "Method Not Allowed", out);
    if (out != NULL) evbuffer_free(out);
}

/* GET /metrics, and HEAD as GET without the body (evhttp leaves it out), as the coordinator's. */
static void on_metrics_request(struct evhttp_request *req, void *arg)
{
    ss_ctx *ss = arg;
    request_arrived(ss, req);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        reply_method_not_allowed(req);
        return;
    }
    struct evbuffer *out = evbuffer_new();
    if (out == NULL) {
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    metrics_format(out, ss);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; version=0.0.4");
    evhttp_send_reply(req, 200, "OK", out);
    evbuffer_free(out);
}

static void on_other_request(struct evhttp_request *req, void *arg)
{
    request_arrived(arg, req);
    evhttp_send_error(req, 404, "this server only has /metrics");
}

static int metrics_listen(ss_ctx *ss, char *err, size_t errlen)
{
    ss->metrics_http = evhttp_new(ss->base);
    if (ss->metrics_http == NULL) {
        snprintf(err, errlen, "cannot create the metrics HTTP server");
        return -1;
    }
    /* every method reaches the callbacks, which answer another than GET and HEAD 405 with Allow (evhttp's
     * own answer to a method left out here is a 501 without it) */
    evhttp_set_allowed_methods(ss->metrics_http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                                     EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH |
                                                     EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT);
    /* A scraper's connection that says nothing is closed after --peer-timeout, as a data-plane one: without a
     * timeout evhttp kept it for ever, and enough of them took every descriptor of the process, the data plane's
     * too (it_hostile_peers). Requests are a GET line and a few headers. */
    if (ss->opts.peer_timeout_ms > 0) {
        struct timeval tv = {.tv_sec = ss->opts.peer_timeout_ms / 1000,
                             .tv_usec = ss->opts.peer_timeout_ms % 1000 * 1000};
        evhttp_set_timeout_tv(ss->metrics_http, &tv);
    }
    /* ... and one that says a byte at a time is cut HTTP_REQUEST_DEADLINE_S after it connected: evhttp's timeout
     * starts again at every byte, so it was never cut */
    ss->metrics_deadlines = http_deadlines_new(ss->metrics_http, ss->base);
    if (ss->metrics_deadlines == NULL) {
        snprintf(err, errlen, "out of memory for the metrics HTTP server");
        return -1;
    }
    evhttp_set_max_headers_size(ss->metrics_http, 16 * 1024);
    evhttp_set_max_body_size(ss->metrics_http, 4 * 1024);
    evhttp_set_cb(ss->metrics_http, "/metrics", on_metrics_request, ss);
    evhttp_set_gencb(ss->metrics_http, on_other_request, ss);
    struct evhttp_bound_socket *bound =
        evhttp_bind_socket_with_handle(ss->metrics_http, ss->opts.metrics_host, (ev_uint16_t)ss->opts.metrics_port);
    if (bound == NULL) {
        snprintf(err, errlen, "cannot listen for metrics on %s:%d (in use? try another --metrics port)",
                 ss->opts.metrics_host, ss->opts.metrics_port);
        return -1;
    }
    ss->metrics_guard = accept_guard_new(evhttp_bound_socket_get_listener(bound), "metrics HTTP");
    log_info("metrics at http://%s:%d/metrics", ss->opts.metrics_host, ss->opts.metrics_port);
    return 0;
}

int metrics_start(ss_ctx *ss, char *err, size_t errlen)
{
    ss->metrics_timer = event_new(ss->base, -1, EV_PERSIST, on_metrics_timer, ss);
    if (ss->metrics_timer == NULL) {
        snprintf(err, errlen, "cannot create the metrics timer");
        return -1;
    }
    struct timeval tv = {.tv_sec = METRICS_PERIOD_S, .tv_usec = 0};
    if (evtimer_add(ss->metrics_timer, &tv) != 0) {
        snprintf(err, errlen, "cannot start the metrics timer");
        return -1;
    }
    return ss->opts.metrics_host[0] != '\0' ? metrics_listen(ss, err, errlen) : 0;
}

void metrics_stop(ss_ctx *ss)
{
    if (ss->metrics_timer != NULL) event_free(ss->metrics_timer);
    accept_guard_free(ss->metrics_guard);
    http_deadlines_free(ss->metrics_deadlines);
    if (ss->metrics_http != NULL) evhttp_free(ss->metrics_http);
    ss->metrics_deadlines = NULL;
    ss->metrics_timer = NULL;
    ss->metrics_http = NULL;
    ss->metrics_guard = NULL;
}
