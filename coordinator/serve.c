/* serve.c: `coordinator serve`, the operator's long-running process, on one libevent loop.
 *
 * Workers and shard-servers evict dead members themselves whenever they call the control plane,
 * but a run whose every worker is blocked still needs someone to notice a death on time: serve
 * calls dl_reap every second and prints a one-line summary every --print-every seconds (started before
 * its run is made, it says once a minute that it waits for `coordinator init`, and serves meanwhile). With
 * --http it also serves the dashboard, /status, /metrics and /control (http_server.c) on the same
 * loop, and with --save-dir it exports checkpoints (POST /control/save_state, and every --save-every N
 * versions) on a thread of its own (http_save.c). It holds no state, so several may run and any may
 * be killed; SIGINT/SIGTERM end it cleanly, also while a command waits for a Redis that does not answer
 * (frozen, its packets dropped): the signal's handler sets a flag that the connection watches
 * (rconn_watch_stop) and wakes the loop through a pipe. */
#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/opts.h"
#include "base/util.h"
#include "coordinator.h"
#include "format/keys.h"
#include "http.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"

typedef struct serve_ctx {
    coord_common c;
    rconn *rc;
    char key[KEY_MAX];
    long long print_every;
    uint64_t last_print;
    uint64_t last_connect_fail;
    struct event_base *base;
    saver *saver;
    long long save_every; /* versions between periodic checkpoints (0 = off) */
    long long last_saved; /* version the last periodic save was triggered at */
    int refused;          /* Redis refused our credentials or permissions: stop, exit 1 */
    topology_watch topo;  /* the Redis master last seen, and the last failover (topology.c) */
    char reap_err[256];   /* the last error dl_reap gave, and when it was logged: a lasting one */
    uint64_t reap_logged; /* (no run yet, say) is logged once a minute, not every second */
    int saw_run;          /* a reap succeeded once: a missing run since then is a run gone, not one to come */
    struct event *stop_ev, *tick;          /* the loop's events: the stop pipe's, the tick (serve_loop_setup) */
    http_server *http;                     /* --http's server, or NULL */
    uint64_t last_orphans;                 /* when orphans_collect last ran (0: not yet) */
} serve_ctx;

/* How often serve deletes the blobs no shard names (orphans.c): at start, then every 10 minutes. A pass
 * lists the run's blobs (SCAN) and reads the shards hash once per blob: milliseconds. */
#define ORPHANS_EVERY_MS (10 * 60 * 1000)

/* After a stop, a command on the connection (none is sent on purpose) waits at most this long. */
#define STOP_CLOSING_MS 1000

/* SIGINT/SIGTERM, for the whole life of serve. The flag is what the Redis connection watches (a command
 * that waits for a frozen Redis ends within 100 ms); the pipe wakes the event loop, which libevent's own
 * signal events could not do while the loop's thread sits in such a command. */
static volatile int g_stop;
static volatile int g_signal;
static int g_stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig)
{
    int saved = errno;
    g_signal = sig;
    g_stop = 1;
    if (g_stop_pipe[1] >= 0 && write(g_stop_pipe[1], "s", 1) < 0) {
        /* full: a wake-up is already pending */
    }
    errno = saved;
}

static int serve_stopped(void *arg)
{
    (void)arg;
    return g_stop;
}

/* The lowest committed shard version (all shards share it between rounds); -1 on error. */
static long long min_version(rconn *rc, const char *run)
{
    char key[KEY_MAX];
    redisReply *r = rconn_command(rc, "HGETALL %s", key_run(key, sizeof key, run, "shards"));
    long long m = -1;
    if (r && r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            const char *f = r->element[i]->str, *c = f ? strchr(f, ':') : NULL;
            if (!c || strcmp(c, ":version") || !r->element[i + 1]->str) continue;
            long long v = strtoll(r->element[i + 1]->str, NULL, 10);
            if (m < 0 || v < m) m = v;
        }
    }
    if (r) freeReplyObject(r);
    return m;
}

static void periodic_saved(void *arg, int ok, const char *path, int64_t version, const char *err)
{
    (void)arg;
    (void)path;
    (void)version;
    (void)err;
    (void)ok; /* logged by the saver */
}

static void maybe_save(serve_ctx *x, rconn *rc)
{
    if (!x->saver || x->save_every <= 0 || saver_busy(x->saver)) return;
    long long v = min_version(rc, x->c.run);
    if (v < 0) return;
    if (x->last_saved < 0) x->last_saved = v; /* first look: count from here */
    if (v >= x->last_saved + x->save_every) {
        log_info("checkpoint: version %lld (every %lld): saving to %s", v, x->save_every, "--save-dir");
        x->last_saved = v;
        saver_request(x->saver, periodic_saved, NULL);
    }
}

/* A refusal by Redis (rconn_error_final: a wrong password, a user without the permission) is final: no
 * reap or save can succeed, so serve stops (exit status 1) instead of retrying forever. */
static void refused(serve_ctx *x, const char *why)
{
    if (!x->refused)
        log_error("Redis refuses us: %s; stopping (check the user, password and ACL in the Redis URL)", why);
    x->refused = 1;
    event_base_loopbreak(x->base);
}

/* The shared connection, reconnected (one attempt, short timeout) when it broke, so a dead Redis
 * costs each caller at most about a second and the loop keeps answering. */
static rconn *ctx_redis(void *arg, char *err, size_t errlen)
{
    serve_ctx *x = arg;
    if (g_stop) {
        err_set(err, errlen, "serve is stopping");
        return NULL;
    }
    if (x->rc && !rconn_broken(x->rc)) return x->rc;
    if (x->rc) {
        log_warn("lost Redis: %s; reconnecting", rconn_errstr(x->rc));
        rconn_free(x->rc);
        x->rc = NULL;
    }
    int final = 0;
    x->rc = rconn_connect_retry(&x->c.url, 1000, 0, &g_stop, &final, err, errlen);
    if (!x->rc && final) refused(x, err);
    if (!x->rc) {
        if (now_ms() - x->last_connect_fail > 10000) log_warn("cannot reach Redis: %s", err);
        x->last_connect_fail = now_ms();
        return NULL;
    }
    /* commands get a longer bound than the connect */
    rconn_set_timeout(x->rc, 5000);
    rconn_watch_stop(x->rc, serve_stopped, NULL, STOP_CLOSING_MS);
    log_info("connected to Redis");
    return x->rc;
}

static void summary(rconn *rc, const char *run)
{
    json_t *doc = NULL;
    char err[512];
    if (status_fetch(rc, run, 0, &doc, NULL, err, sizeof err) < 0) {
        log_warn("summary of run %s: %s", run, err);
        json_decref(doc);
        return;
    }
    json_t *st = json_object_get(doc, "state");
    json_t *ws = json_object_get(doc, "workers"), *ss = json_object_get(doc, "servers");
    char progress[256]; /* an async run has no rounds */
    if (status_async_text(doc, progress, sizeof progress) < 0)
        snprintf(progress, sizeof progress, "round %s", json_string_value(json_object_get(st, "round:0")));
    log_info("run %s: status %s, %s, %zu workers, %zu servers, commits %s, deaths %s, rejections %s", run,
             json_string_value(json_object_get(st, "status")), progress, json_is_array(ws) ? json_array_size(ws) : 0,
             json_is_array(ss) ? json_array_size(ss) : 0, json_string_value(json_object_get(st, "commits")),
             json_string_value(json_object_get(st, "deaths")), json_string_value(json_object_get(st, "rejections")));
    json_t *shards = json_object_get(doc, "shards"), *sh;
    size_t i;
    json_array_foreach(shards, i, sh)
    { /* the run cannot go on: say it every time */
        const char *key = json_string_value(json_object_get(sh, "corrupt"));
        const char *why = json_string_value(json_object_get(sh, "corrupt_reason"));
        if (key)
            log_error("shard %zu's durable state is corrupt (key %s: %s); see coordinator repair", i, key,
                      why ? why : "");
    }
    json_decref(doc);
}

/* A failed reap, logged when it is news (another error than the last) and then once a minute: a lasting
 * one (no run yet) is not said every second. A run not made yet is one piece of news whichever way Redis
 * says it (no function library, or the library and no config of the run): serve waits for `coordinator
 * init` as a shard-server does, and keeps serving (GET /status answers 404 meanwhile). */
static void reap_failed(serve_ctx *x, const char *e)
{
    const char *gone = runconf_error_gone(e);
    const char *news = gone && !x->saw_run ? "(no run yet)" : e;
    if (!strncmp(x->reap_err, news, sizeof x->reap_err - 1) && now_ms() - x->reap_logged < RUN_GONE_LOG_EVERY_MS)
        return;
    if (gone && x->saw_run)
        log_error("reap: run '%s' is gone from this Redis (%s): " RUN_GONE_HINT, x->c.run, gone);
    else if (gone)
        log_warn("run '%s' does not exist in this Redis yet (%s): waiting for it to be made (`coordinator init "
                 "--run %s`), serving meanwhile",
                 x->c.run, gone, x->c.run);
    else {
        char why[768];
        rconn_explain_error(e, why, sizeof why);
        log_warn("reap: %s", why);
    }
    snprintf(x->reap_err, sizeof x->reap_err, "%s", news);
    x->reap_logged = now_ms();
}

static void collect_orphans(serve_ctx *x, rconn *rc)
{
    char err[512];
    long deleted = 0;
    x->last_orphans = now_ms();
    if (orphans_collect(rc, x->c.run, &deleted, err, sizeof err) < 0)
        log_warn("could not look for blobs that no shard names (left by shard-servers killed between writing "
                 "and recording them): %s; trying again in 10 minutes",
                 err);
    if (deleted > 0)
        log_info("deleted %ld blob(s) that no shard names (left by shard-servers killed between writing and "
                 "recording them)",
                 deleted);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    serve_ctx *x = arg;
    char err[512];
    rconn *rc = ctx_redis(x, err, sizeof err); /* (NULL once stopping) */
    if (!rc) return;
    redisReply *r = rconn_command(rc, "FCALL dl_reap 1 %s", x->key);
    int absent = r && r->type == REDIS_REPLY_ERROR && runconf_error_gone(r->str); /* no run (yet, or any more) */
    if (r && r->type == REDIS_REPLY_INTEGER && r->integer > 0)
        log_warn("evicted %lld dead worker(s)", r->integer);
    else if (r && r->type == REDIS_REPLY_ERROR && rconn_error_final(r->str))
        refused(x, r->str);
    else if (r && r->type == REDIS_REPLY_ERROR)
        reap_failed(x, r->str);
    if (r && r->type != REDIS_REPLY_ERROR) {
        x->reap_err[0] = '\0'; /* the next error is news */
        x->saw_run = 1;
    }
    if (r) freeReplyObject(r);
    if (!rconn_broken(rc)) maybe_save(x, rc);
    if (!rconn_broken(rc) && !absent && x->saw_run &&
        (!x->last_orphans || now_ms() - x->last_orphans >= ORPHANS_EVERY_MS))
        collect_orphans(x, rc);
    char master[300];
    if (!rconn_broken(rc)) topology_watch_master(&x->topo, rconn_server(rc, master, sizeof master));
    /* (no summary of a run that is not there: reap_failed said so, and says it again once a minute) */
    if (x->print_every > 0 && now_ms() - x->last_print >= (uint64_t)x->print_every * 1000 && !rconn_broken(rc) &&
        !absent) {
        summary(rc, x->c.run);
        x->last_print = now_ms();
    }
}

/* The stop pipe is readable: a signal came (on_stop_signal). */
static void on_signal(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    serve_ctx *x = arg;
    char buf[16];
    while (read(fd, buf, sizeof buf) > 0) {}
    int sig = g_signal;
    log_info("%s: stopping", sig == SIGINT ? "SIGINT (Ctrl-C)" : sig == SIGTERM ? "SIGTERM" : "signal");
    event_base_loopbreak(x->base);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bin/coordinator serve --redis URL --run NAME [options]\n"
               "\n" COORD_HELP "  --print-every S           one-line summary every S seconds (default 10, 0 = never)\n"
               "  --connect-timeout S       at start, wait up to S seconds for an unreachable Redis (default 60;\n"
               "                            0: try once); a refused password or user fails at once\n"
               "  --http [HOST:]PORT        serve the dashboard, /status, /metrics and /control on PORT\n"
               "                            (default host 127.0.0.1; PORT 0 = any free port)\n"
               "  --host HOST               bind address of --http (e.g. 0.0.0.0: must be explicit)\n"
               "  --token-file FILE         POST /control/* needs 'Authorization: Bearer <first line of FILE>'\n"
               "  --no-dashboard            GET / and /dashboard answer 404 (status, metrics, control stay)\n"
               "  --save-dir DIR            POST /control/save_state exports a checkpoint to\n"
               "                            DIR/checkpoint-<v>.safetensors\n"
               "  --save-every N            export a checkpoint to --save-dir every N committed versions\n"
               "  --keep K                  keep the newest K checkpoints in --save-dir (default 0 = all; needs\n"
               "                            --save-dir)\n");
}

static int addr_loopback_hint(const char *h)
{
    return !strncmp(h, "127.", 4) || !strcmp(h, "localhost") || !strcmp(h, "::1");
}

/* The token: the first line of path, trimmed (malloc'd), or NULL with why in err. */
static char *read_token(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        err_set(err, errlen, "%s", strerror(errno));
        return NULL;
    }
    char buf[1024];
    char *line = fgets(buf, sizeof buf, f);
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    if (!line) {
        err_set(err, errlen, "%s", rerr ? strerror(rerr) : "the file is empty");
        return NULL;
    }
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t')) buf[--n] = 0;
    char *s = buf;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) {
        err_set(err, errlen, "its first line is empty");
        return NULL;
    }
    return strdup(s);
}

/* serve's settings beyond serve_ctx's: the HTTP listener and the checkpoint directory. */
typedef struct serve_opts {
    const char *http_arg, *host_arg, *token_file, *save_dir;
    long long keep;
    int keep_given; /* --keep appeared (it needs --save-dir) */
    int no_dashboard;
    double connect_s;
    char host[256]; /* where --http listens: its HOST, --host, or 127.0.0.1 */
    int port;
    char *token; /* --token-file's first line (NULL: control needs no token) */
} serve_opts;

/* The flags into x and o: 0, or opts_parse_cmd's status after --help or a usage error. */
static int serve_parse_flags(int argc, char **argv, serve_ctx *x, serve_opts *o)
{
    x->print_every = 10;
    x->c.connect_timeout_ms = 60000;
    x->save_every = 0;
    x->last_saved = -1;
    o->connect_s = 60;
    const opt_spec specs[] = {
        COORD_COMMON_OPTS(&x->c),
        {.name = "print-every", .kind = OPT_LLONG, .dest = &x->print_every, .lo = 0, .hi = 86400, .wants = "seconds"},
        {.name = "connect-timeout",
         .kind = OPT_DOUBLE,
         .dest = &o->connect_s,
         .min = 0,
         .max = OPTS_SECONDS_MAX,
         .wants = "seconds in [0, 2000000]"},
        {.name = "http", .kind = OPT_STRING, .dest = &o->http_arg},
        {.name = "host", .kind = OPT_STRING, .dest = &o->host_arg},
        {.name = "token-file", .kind = OPT_STRING, .dest = &o->token_file},
        {.name = "save-dir", .kind = OPT_STRING, .dest = &o->save_dir},
        {.name = "save-every",
         .kind = OPT_LLONG,
         .dest = &x->save_every,
         .lo = 0,
         .hi = 1000000000,
         .wants = "a number of rounds >= 0"},
        {.name = "keep",
         .kind = OPT_LLONG,
         .dest = &o->keep,
         .lo = 0,
         .hi = 1000000,
         .wants = "an integer >= 0",
         .given = &o->keep_given},
        {.name = "no-dashboard", .kind = OPT_FLAG, .dest = &o->no_dashboard},
        {0},
    };
    int prc = opts_parse_cmd("coordinator serve", usage, specs, argc, argv, 0, NULL, NULL);
    if (prc != 0) return prc;
    x->c.connect_timeout_ms = (int)(o->connect_s * 1000);
    return 0;
}

/* What the flags mean together: --http's address (and --host's), the flags that need another, the
 * token. 0, or -1 after a message (a usage error, exit 2). */
static int serve_check_flags(const serve_ctx *x, serve_opts *o)
{
    snprintf(o->host, sizeof o->host, "127.0.0.1");
    if (o->http_arg && parse_listen_addr(o->http_arg, o->host, sizeof o->host, &o->port) < 0) {
        fprintf(stderr, "coordinator serve: --http wants [HOST:]PORT, got '%s'\n", o->http_arg);
        return -1;
    }
    if (o->host_arg) {
        if (o->http_arg && strchr(o->http_arg, ':') && strcmp(o->host, o->host_arg)) {
            fprintf(stderr, "coordinator serve: --host %s contradicts --http %s\n", o->host_arg, o->http_arg);
            return -1;
        }
        snprintf(o->host, sizeof o->host, "%s", o->host_arg);
    }
    if (x->save_every > 0 && !o->save_dir) {
        fprintf(stderr, "coordinator serve: --save-every needs --save-dir DIR\n");
        return -1;
    }
    if (o->keep_given && !o->save_dir) {
        fprintf(stderr, "coordinator serve: --keep needs --save-dir DIR (it prunes the checkpoints there)\n");
        return -1;
    }
    if ((o->host_arg || o->token_file || o->no_dashboard) && !o->http_arg) {
        fprintf(stderr, "coordinator serve: --host, --token-file and --no-dashboard need --http\n");
        return -1;
    }
    char err[300];
    if (o->token_file && !(o->token = read_token(o->token_file, err, sizeof err))) {
        fprintf(stderr, "coordinator serve: cannot read a token from %s: %s (the token is its first line, non-empty)\n",
                o->token_file, err);
        return -1;
    }
    return 0;
}

/* The connection to Redis (waiting up to --connect-timeout for it). 0, or -1 with the exit status:
 * SIGINT/SIGTERM while it waits end it cleanly (0), as later (the event loop's handlers). */
static int serve_connect(serve_ctx *x, int *status)
{
    struct sigaction sa = {.sa_handler = on_stop_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGHUP, SIG_IGN); /* (a rotation's `kill -HUP`, a closed terminal): it logs to stderr, nothing to reopen */
    x->c.stop = &g_stop;
    rconn *rc;
    int st = coord_connect(&x->c, &rc);
    if (st != 0) {
        *status = g_stop ? 0 : st;
        return -1;
    }
    rconn_watch_stop(rc, serve_stopped, NULL, STOP_CLOSING_MS);
    x->rc = rc;
    key_run(x->key, sizeof x->key, x->c.run, "config");
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* The event loop: SIGINT/SIGTERM end it (through the stop pipe), and on_tick runs every second. 0, or -1
 * after a message. */
static int serve_loop_setup(serve_ctx *x)
{
    x->base = event_base_new();
    if (!x->base || pipe(g_stop_pipe) < 0) {
        fprintf(stderr, "coordinator serve: cannot set up the event loop (%s)\n",
                x->base ? strerror(errno) : "event_base_new failed");
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        evutil_make_socket_nonblocking(g_stop_pipe[i]);
        evutil_make_socket_closeonexec(g_stop_pipe[i]);
    }
    x->stop_ev = event_new(x->base, g_stop_pipe[0], EV_READ | EV_PERSIST, on_signal, x);
    event_add(x->stop_ev, NULL);
    if (g_stop) on_stop_signal(g_signal); /* a signal before the pipe: wake the loop for it too */
    x->tick = event_new(x->base, -1, EV_PERSIST, on_tick, x);
    struct timeval one = {1, 0};
    event_add(x->tick, &one);
    return 0;
}

/* With --save-dir, the thread that exports checkpoints (http_save.c). 0, or -1 after a message. */
static int serve_start_saver(serve_ctx *x, const serve_opts *o)
{
    if (o->save_dir && !(x->saver = saver_new(x->base, &x->c.url, x->c.run, o->save_dir, (int)o->keep))) {
        fprintf(stderr, "coordinator serve: cannot set up the checkpoint saver\n");
        return -1;
    }
    if (x->save_every > 0)
        log_info("checkpoints every %lld versions into %s (keep %lld)", x->save_every, o->save_dir, o->keep);
    return 0;
}

/* With --http, the HTTP server on the loop (http_server.c), and its dashboard's URL on stdout (with
 * --no-dashboard, /status's: a URL that answers). 0, or -1 after a message. */
static int serve_start_http(serve_ctx *x, const serve_opts *o)
{
    if (!o->http_arg) return 0;
    char err[512];
    int dashboard = !o->no_dashboard;
    http_options ho = {.host = o->host,
                       .port = o->port,
                       .run = x->c.run,
                       .token = o->token,
                       .dashboard = dashboard,
                       .save_dir = o->save_dir,
                       .keep = (int)o->keep,
                       .saver = x->saver,
                       .redis = ctx_redis,
                       .redis_arg = x,
                       .url = &x->c.url,
                       .topology = &x->topo};
    if (!(x->http = http_start(x->base, &ho, err, sizeof err))) {
        fprintf(stderr, "coordinator serve: %s\n", err);
        return -1;
    }
    const char *host = o->host;
    int v6 = strchr(host, ':') != NULL, port = http_port(x->http);
    log_info("HTTP on %s%s%s:%d: /status, /metrics, /control/<action>, %s%s", v6 ? "[" : "", host, v6 ? "]" : "", port,
             dashboard ? "dashboard at /dashboard" : "no dashboard",
             o->token ? " (control needs the bearer token)" : "");
    printf("http://%s%s%s:%d/%s\n", v6 ? "[" : "", host, v6 ? "]" : "", port, dashboard ? "dashboard" : "status");
    fflush(stdout);
    if (!addr_loopback_hint(host) && !o->token)
        log_warn("listening on %s without --token-file: anyone who can reach it can control the run", host);
    return 0;
}

/* Everything serve_connect and the setup made, in reverse; a checkpoint in progress is finished first. */
static void serve_free(serve_ctx *x, serve_opts *o)
{
    http_stop(x->http);
    if (x->saver && saver_busy(x->saver)) log_info("waiting for the checkpoint in progress");
    saver_free(x->saver);
    if (x->tick) event_free(x->tick);
    if (x->stop_ev) event_free(x->stop_ev);
    for (int i = 1; i >= 0; i--) { /* (the write end first: no handler writes to a closed one) */
        int fd = g_stop_pipe[i];
        g_stop_pipe[i] = -1;
        if (fd >= 0) close(fd);
    }
    if (x->base) event_base_free(x->base);
    if (x->rc) rconn_free(x->rc);
    free(o->token);
}

int cmd_serve(int argc, char **argv)
{
    serve_ctx x = {0};
    serve_opts o = {0};
    int status, prc = serve_parse_flags(argc, argv, &x, &o);
    if (prc != 0) return opts_exit_status(prc);
    if (serve_check_flags(&x, &o) < 0) return OPTS_EXIT_USAGE;
    if (serve_connect(&x, &status) < 0) {
        free(o.token);
        return status;
    }
    if (serve_loop_setup(&x) < 0 || serve_start_saver(&x, &o) < 0 || serve_start_http(&x, &o) < 0) {
        serve_free(&x, &o);
        return 1;
    }
    log_info("serving run %s (reaping every second)", x.c.run);
    on_tick(-1, 0, &x);
    if (!x.refused) event_base_dispatch(x.base);
    serve_free(&x, &o);
    log_info("stopped");
    return x.refused ? 1 : 0;
}
