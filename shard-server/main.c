/*
 * main.c: the shard-server's command line, start-up and shutdown.
 *
 * Start-up: parse the options, then (ctx.c) connect to Redis (retrying with backoff for up to --connect-timeout or
 * until we are told to stop; a refused password fails at once), check that the function library is the
 * version this build speaks, read the run's layout (dl:{R}:config; a run not made yet is waited for) and
 * outer tunables (dl:{R}:tunables), then hand over to the event loop: the data-plane listener, two
 * asynchronous Redis connections (control and bulk), the lease loop.
 * SIGINT/SIGTERM: stop accepting, give the leases back (dl_server_leave), exit 0 within 2 s.
 * A run made again under its name (`coordinator init --force`) ends the loop too, and the process starts
 * again from its own binary (start_again) to load the new run.
 */
#include "ss.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/opts.h"
#include "base/util.h"

#define EXIT_GRACE_MS 1500

static volatile int g_startup_stop;

static void usage(FILE *f)
{
    fprintf(f, "usage: shard-server --redis URL --run NAME [options]\n"
               "\n"
               "A stateless outer-optimizer process of ReDiLoCo: it leases shards of the run's parameters in\n"
               "Redis, receives pseudo-gradients from workers over TCP, commits each round's outer step to Redis\n"
               "and serves the new parameters. Start as many as you like, any time; kill them any time.\n"
               "\n" REDIS_URL_HELP
               "  --run NAME                run name (as given to `coordinator init`; started before the run is\n"
               "                            made, the server waits for it)\n"
               "  --listen HOST:PORT        data-plane address to bind (default 127.0.0.1:0, an ephemeral port)\n"
               "  --advertise HOST:PORT     address workers should use (default: the bound address)\n"
               "  --id ID                   server id in Redis, one process each (default ss-<hostname>-<pid>);\n"
               "                            a restart with the same id takes over at once\n"
               "  --lease-ttl-ms MS         lease time-to-live; renewed every ttl/3 (default 5000)\n"
               "  --connect-timeout S       at start, wait up to S seconds for an unreachable Redis (default 60;\n"
               "                            0: try once); a refused password or user fails at once\n"
               "  --max-pending-rounds N    bounds pushes parked per shard while it loads: 64*N (default 4; parked\n"
               "                            gets: 16384)\n"
               "  --metrics [HOST:]PORT     serve Prometheus metrics at http://HOST:PORT/metrics (default off;\n"
               "                            HOST defaults to 127.0.0.1: bind another only if scrapers elsewhere\n"
               "                            need it)\n"
               "  --compute-ahead on|off    compute a sync round's outer step as soon as the pseudo-gradients of\n"
               "                            the last round's participants are all here, before the barrier\n"
               "                            closes; used only if the round has those participants (default on)\n"
               "  --peer-timeout S          close a data-plane connection that sends part of a frame and not the\n"
               "                            rest within S seconds of its first byte, or does not read its replies\n"
               "                            for S seconds, or (within min(S, 10)) says no hello (default 60, as\n"
               "                            a worker's net timeout: keep it at least that; 0: never)\n"
               "  --log-level LEVEL         debug, info, warn or error (default info, or $LOG_LEVEL)\n"
               "  --fault-crash-before-commit P  chaos testing: with probability P, die (exit 137) after a\n"
               "                            round's log entry is written and before it is committed\n"
               "  --fault-tentative-to WORKER  chaos testing: serve versions tentatively to WORKER alone (other\n"
               "                            gets wait for the commit), never commit, and die (exit 137) once\n"
               "                            WORKER has one and a commit reached dl_commit\n"
               "  --fault-late-need WORKER  chaos testing: answer WORKER's gets of a committed version with a\n"
               "                            late `need` of its Δ of that round, until it sends that Δ again\n"
               "  -h, --help                this help\n");
}

static int parse_hostport(const char *s, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(s, ':');
    long long p;
    if (colon == NULL || colon == s || parse_int(colon + 1, 0, 65535, &p) != 0) return -1;
    size_t hl = (size_t)(colon - s);
    if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']') { /* [v6]:port */
        s++;
        hl -= 2;
    }
    if (hl >= cap) return -1;
    memcpy(host, s, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

static int parse_listen(const char *v, void *dest)
{
    ss_opts *o = dest;
    return parse_hostport(v, o->listen_host, sizeof o->listen_host, &o->listen_port);
}

/* --metrics [HOST:]PORT: a bare PORT is 127.0.0.1's, as serve's --http */
static int parse_metrics(const char *v, void *dest)
{
    ss_opts *o = dest;
    snprintf(o->metrics_host, sizeof o->metrics_host, "127.0.0.1");
    return parse_listen_addr(v, o->metrics_host, sizeof o->metrics_host, &o->metrics_port);
}

/* --advertise: what workers are told, kept as given, once it is HOST:PORT with a port workers can connect
 * to (without one, or with 0, the server ran and every worker was sent nowhere) */
static int parse_advertise(const char *v, void *dest)
{
    ss_opts *o = dest;
    char host[256];
    int port;
    if (parse_hostport(v, host, sizeof host, &port) < 0 || port == 0 || strlen(v) >= sizeof o->advertise) return -1;
    snprintf(o->advertise, sizeof o->advertise, "%s", v);
    return 0;
}

/* 0 ok, 1 help printed, -1 error printed. */
static int parse_args(int argc, char **argv, ss_opts *o)
{
    static const int levels[4] = {LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR};
    const char *redis_flag = NULL, *redis_file = NULL, *run = NULL, *id = NULL;
    const char *tentative_to = NULL, *late_need = NULL;
    int level = -1;
    double connect_s = 60, peer_s = 60;
    memset(o, 0, sizeof *o);
    snprintf(o->listen_host, sizeof o->listen_host, "127.0.0.1");
    o->lease_ttl_ms = 5000;
    o->max_pending_rounds = 4;
    const opt_spec specs[] = {
        {.name = "redis", .kind = OPT_STRING, .dest = &redis_flag},
        {.name = "redis-file", .kind = OPT_STRING, .dest = &redis_file},
        {.name = "run", .kind = OPT_STRING, .dest = &run},
        {.name = "listen", .kind = OPT_CUSTOM, .dest = o, .parse = parse_listen, .wants = "HOST:PORT"},
        {.name = "metrics", .kind = OPT_CUSTOM, .dest = o, .parse = parse_metrics, .wants = "[HOST:]PORT"},
        {.name = "advertise",
         .kind = OPT_CUSTOM,
         .dest = o,
         .parse = parse_advertise,
         .wants = "HOST:PORT with a port in [1, 65535]"},
        {.name = "id", .kind = OPT_STRING, .dest = &id},
        {.name = "lease-ttl-ms", .kind = OPT_INT, .dest = &o->lease_ttl_ms, .lo = 300, .hi = 3600000},
        {.name = "max-pending-rounds", .kind = OPT_INT, .dest = &o->max_pending_rounds, .lo = 1, .hi = 1000},
        {.name = "log-level", .kind = OPT_CHOICE, .dest = &level, .choices = "debug|info|warn|error"},
        {.name = "compute-ahead", .kind = OPT_CHOICE, .dest = &o->compute_ahead_off, .choices = "on|off"},
        {.name = "connect-timeout",
         .kind = OPT_DOUBLE,
         .dest = &connect_s,
         .min = 0,
         .max = OPTS_SECONDS_MAX,
         .wants = "seconds in [0, 2000000]"},
        {.name = "peer-timeout",
         .kind = OPT_DOUBLE,
         .dest = &peer_s,
         .min = 0,
         .max = 86400,
         .wants = "seconds in [0, 86400]"},
        {.name = "fault-crash-before-commit",
         .kind = OPT_DOUBLE,
         .dest = &o->crash_before_commit,
         .min = 0,
         .max = 1,
         .wants = "a probability in [0, 1]"},
        {.name = "fault-tentative-to", .kind = OPT_STRING, .dest = &tentative_to},
        {.name = "fault-late-need", .kind = OPT_STRING, .dest = &late_need},
        {0},
    };
    int rc = opts_parse_cmd("shard-server", usage, specs, argc, argv, 1, NULL, NULL);
    if (rc != 0) return rc;
    char err[256];
    o->log_level = level < 0 ? -1 : levels[level];
    o->connect_timeout_ms = (int)(connect_s * 1000);
    o->peer_timeout_ms = (int)(peer_s * 1000);
    snprintf(o->run, sizeof o->run, "%s", run ? run : "");
    snprintf(o->id, sizeof o->id, "%s", id ? id : "");
    snprintf(o->fault_tentative_to, sizeof o->fault_tentative_to, "%s", tentative_to ? tentative_to : "");
    snprintf(o->fault_late_need, sizeof o->fault_late_need, "%s", late_need ? late_need : "");
    if (redis_url_pick(redis_flag, redis_file, o->redis, sizeof o->redis, err, sizeof err) != 0) {
        fprintf(stderr, "shard-server: %s (see --help)\n", err);
        return -1;
    }
    if (o->run[0] == '\0') {
        fprintf(stderr, "shard-server: --run NAME is required (see --help)\n");
        return -1;
    }
    return 0;
}

/* Every round allocates and frees buffers of shard size (frames, copies, blobs). glibc serves those
 * with mmap and gives them back on free, so each round would pay a page fault per 4 KiB of every
 * buffer, which dominates a large shard's commit. Keep freed memory in the heap for reuse instead. */
static void keep_freed_memory(void)
{
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

static void on_startup_signal(int sig)
{
    (void)sig;
    g_startup_stop = 1;
}

static void on_exit_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ss_ctx *ss = arg;
    event_base_loopbreak(ss->base);
}

static void on_left(void *arg)
{
    ss_ctx *ss = arg;
    event_base_loopbreak(ss->base);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    ss_ctx *ss = arg;
    if (ss->stopping) {
        log_warn("second signal: exiting now");
        event_base_loopbreak(ss->base);
        return;
    }
    log_info("%s: stopping (giving leases back)", sig == SIGINT    ? "SIGINT (Ctrl-C)"
                                                  : sig == SIGTERM ? "SIGTERM"
                                                                   : "signal");
    ss->stopping = 1;
    server_stop_accepting(ss);
    struct timeval tv = {.tv_sec = EXIT_GRACE_MS / 1000, .tv_usec = (EXIT_GRACE_MS % 1000) * 1000};
    ss->exit_timer = evtimer_new(ss->base, on_exit_timer, ss);
    evtimer_add(ss->exit_timer, &tv);
    lease_leave(ss, on_left, ss);
}

static int run_loop(ss_ctx *ss)
{
    char err[512];
    struct event_base *base = event_base_new();
    if (base == NULL) {
        log_error("cannot create the event loop");
        return -1;
    }
    if (ss_ctx_start(ss, base, err, sizeof err) != 0) {
        log_error("%s", err);
        return -1;
    }
    struct event *sigint = evsignal_new(ss->base, SIGINT, on_signal, ss);
    struct event *sigterm = evsignal_new(ss->base, SIGTERM, on_signal, ss);
    if (sigint == NULL || sigterm == NULL || evsignal_add(sigint, NULL) != 0 || evsignal_add(sigterm, NULL) != 0) {
        log_error("cannot install signal handlers");
        return -1;
    }
    log_info("shard-server %s up: pid %d, data plane %s, lease ttl %d ms", ss->id, (int)getpid(), ss->addr,
             ss->opts.lease_ttl_ms);
    event_base_dispatch(ss->base);
    metrics_log(ss);
    log_info("shard-server %s stopped", ss->id);
    int rc = ss->refused ? -1 : 0;
    event_free(sigint);
    event_free(sigterm);
    ss_ctx_free(ss);
    event_base_free(base);
    return rc;
}

/* The run was made again under its name (lease.c, run_recreated): start this process again, from its own
 * binary and arguments, once run_loop has closed every connection and listener of the old run and freed its
 * shards, so that it loads the new run as a fresh start does. The pid, and so a default --id, stay. */
static int start_again(char **argv)
{
    fflush(NULL);
    execv("/proc/self/exe", argv);
    log_error("cannot start again to serve the new run (%s): exiting; start the shard-server again", strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    static ss_ctx ctx;
    ss_ctx *ss = &ctx;
    int rc = parse_args(argc, argv, &ss->opts);
    if (rc != 0) return opts_exit_status(rc);
    log_init("shard-server");
    if (ss->opts.log_level >= 0) log_set_level(ss->opts.log_level);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGHUP, SIG_IGN); /* (a rotation's `kill -HUP`, a closed terminal): it logs to stderr, nothing to reopen */
    keep_freed_memory();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_startup_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    if (ss->opts.id[0] != '\0') {
        snprintf(ss->id, sizeof ss->id, "%.120s", ss->opts.id);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        snprintf(ss->id, sizeof ss->id, "ss-%s-%d", host, (int)getpid());
    }
    if (auth_nonce(ss->token) != 0) {
        log_error("cannot read /dev/urandom for this process's token (lease.c): exiting");
        return 1;
    }
    if (ss_ctx_load_run(ss, &g_startup_stop) != 0) return g_startup_stop ? 0 : 1;
    if (g_startup_stop) return 0;
    rc = run_loop(ss);
    if (ss->recreated) return start_again(argv);
    if (ss->replaced) return SS_EXIT_ID_TAKEN;
    return rc == 0 ? 0 : 1;
}
