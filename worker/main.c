/* main.c: bin/worker, a DiLoCo worker process.
 *
 *   bin/worker [train] --redis URL --run NAME [worker flags] [trainer flags]
 *   bin/worker prepare-data --input FILE --output FILE.tok [--val-fraction 0.05]
 *
 * It reads the run from Redis (the trainer and model the coordinator initialised it with), builds
 * that trainer (the GPT by default, or the protocol-test `quadratic`), joins the run through
 * libdiloco and trains: one inner step at a time, a DiLoCo sync every H steps, a progress line, and
 * JSON-lines telemetry (--log). SIGINT/SIGTERM stop it cleanly after the current step (it leaves the
 * run, so the others are not kept waiting for it). A trainer on a GPU gives libdiloco its device hooks
 * (--device-hooks auto): the pseudo-gradient and the new global parameters then go through the device
 * and the parameters never come back to the host (docs/cuda.md). */
#include <float.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/opts.h"
#include "base/util.h"
#include "diloco.h"
#include "evaluator.h"
#include "format/runconf.h"
#include "gpt/gpt.h"
#include "layout_check.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"
#include "telemetry.h"
#include "trainers/host_device.h"
#include "trainers/quadratic.h"

typedef struct worker_args {
    diloco_options dl;
    const char *trainer; /* NULL: the run's */
    long steps;          /* total inner steps (0 = until stopped) */
    const char *log_path;
    int quiet;
    int eval_only;
    int evaluate_every; /* > 0: the evaluator role (evaluator.h) instead of training */
    int final_sync;
    unsigned step_delay_ms;
    double slowdown; /* --slowdown F: after each step, sleep F - 1 times as long as it took (1 = off) */
    double quad_lr;
    const char *device_hooks;       /* --device-hooks auto|off|host */
    const char *redis_file;         /* --redis-file */
    char redis_text[REDIS_URL_MAX]; /* the URL picked (dl.redis_url points here) */
} worker_args;

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELAXED); /* read by libdiloco's threads too (dl_stopping) */
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bin/worker [train] --redis URL --run NAME [options] [trainer options]\n"
            "       bin/worker prepare-data --input FILE --output FILE.tok [--val-fraction 0.05]\n"
            "\n"
            "Joins a ReDiLoCo run and trains. Everything about the run (model, shards, servers) comes from\n"
            "Redis; start the run with `bin/coordinator init` first.\n"
            "\n"
            "worker options:\n" REDIS_URL_HELP "  --run NAME                run name (required)\n"
            "  --worker-id ID            unique id (default: <hostname>-<pid>)\n"
            "  --sync-every H            inner steps between syncs (default 500; Streaming: a multiple of\n"
            "                            the run's fragments, one sent every H/F steps)\n"
            "  --steps N                 inner steps to train, then leave (default: until stopped); a trainer\n"
            "                            resumed from its --checkpoint counts them from its step\n"
            "  --no-bf16                 send fp32 pseudo-gradients instead of bf16 (in a bf16 run; ignored, with a\n"
            "                            warning, in an int8/int4/int3/int2 run)\n"
            "  --error-feedback          (int8/int4/int3/int2 runs) add what quantization dropped to the next round's\n"
            "                            pseudo-gradient (kept in this process only)\n"
            "  --heartbeat-interval S    seconds between heartbeats (default 30; 0 disables)\n"
            "  --max-sync-retries N      failed syncs in a row before registering again (default 3)\n"
            "  --sync-timeout S          give up one sync attempt after S seconds without progress (default 120)\n"
            "  --connect-timeout S       at start, wait up to S seconds for an unreachable Redis, or for a\n"
            "                            read-only replica to be promoted (default 60; 0: try once); a refused\n"
            "                            password or user fails at once\n"
            "  --dylu                    follow the sync interval the run's DyLU assigns\n"
            "  --num-fragments F         Streaming DiLoCo fragments: optional, must equal the run's\n"
            "  --fragment-alpha A        Streaming mixing: params = A*local + (1-A)*global (default 0)\n"
            "  --fragments-in-flight D   Streaming: rounds in flight at once (default 1, at most the run's\n"
            "                            fragments - 1 with --fragment-alpha 0, sync runs only): a fragment\n"
            "                            sent at a boundary is applied D boundaries later, so a round may last\n"
            "                            D intervals before training waits for it (2 over a distant link:\n"
            "                            docs/compression.md)\n"
            "  --simulate-latency-ms MS  testing: delay each background fragment sync by MS\n"
            "  --trainer NAME            gpt or quadratic (default: what the run was initialised for)\n"
            "  --log FILE                JSON-lines telemetry (steps, syncs)\n"
            "  --quiet                   no progress line\n"
            "  --eval-only               print the validation loss of the current global parameters (read from\n"
            "                            Redis, as the evaluator does: without joining the run) and leave\n"
            "  --evaluate-every N        evaluator: do not train; publish the validation loss of every N-th\n"
            "                            committed version to the stream dl:{R}:evals (see docs/quality.md)\n"
            "  --final-sync              after the last step, sync every fragment at once (diloco_force_sync)\n"
            "  --step-delay-ms MS        sleep after each step, to simulate a slower machine (tests)\n"
            "  --slowdown F              after each step, sleep F - 1 times as long as the step took: a machine F\n"
            "                            times slower, whatever the load (benchmarks; default 1)\n"
            "  --quad-lr LR              (quadratic) inner AdamW learning rate, above 0 (default 0.01)\n"
            "  --device-hooks MODE       auto (default): DiLoCo on the device when the trainer runs on a GPU;\n"
            "                            off: through the host buffer; host: testing, a host-memory stand-in\n"
            "                            for a device (tests/it_device_hooks.sh)\n"
            "  -h, --help                this help\n"
            "\n");
    gpt_usage(f);
}

static int parse_alpha(const char *v, void *dest)
{
    double x;
    if (parse_double(v, &x) < 0 || x < 0 || x >= 1) return -1;
    *(double *)dest = x;
    return 0;
}

/* Seconds given on the command line into the milliseconds the library wants (left alone when absent). */
static void seconds_to_ms(int given, double s, int *ms)
{
    if (given) *ms = (int)(s * 1000);
}

/* The flags whose values parse_args converts once they are all read: as typed, before they become
 * worker_args' (a mode's index, seconds that become milliseconds, counts that become narrower). */
typedef struct typed_flags {
    int hooks;                        /* --device-hooks: index in "auto|off|host" */
    double hb_s, st_s, ct_s;          /* --heartbeat-interval, --sync-timeout, --connect-timeout */
    int hb_given, st_given, ct_given; /* whether each was given (the library's default otherwise) */
    long long steps, delay;           /* --steps, --step-delay-ms */
} typed_flags;

/* How many flags each table below holds (parse_args puts them one after the other). */
enum { SESSION_FLAGS = 11, SYNC_FLAGS = 10, TIME_FLAGS = 6, WORKER_FLAGS = SESSION_FLAGS + SYNC_FLAGS + TIME_FLAGS };

/* Which run, as whom, with which trainer, doing what (training, evaluating), logging where. */
static void session_flags(opt_spec *specs, worker_args *a, typed_flags *t)
{
    const opt_spec table[] = {
        {.name = "redis", .kind = OPT_STRING, .dest = &a->dl.redis_url},
        {.name = "redis-file", .kind = OPT_STRING, .dest = &a->redis_file},
        {.name = "run", .kind = OPT_STRING, .dest = &a->dl.run},
        {.name = "worker-id", .kind = OPT_STRING, .dest = &a->dl.worker_id},
        {.name = "trainer", .kind = OPT_STRING, .dest = &a->trainer},
        {.name = "log", .kind = OPT_STRING, .dest = &a->log_path},
        {.name = "device-hooks", .kind = OPT_CHOICE, .dest = &t->hooks, .choices = "auto|off|host"},
        {.name = "quiet", .kind = OPT_FLAG, .dest = &a->quiet},
        {.name = "eval-only", .kind = OPT_FLAG, .dest = &a->eval_only},
        {.name = "evaluate-every",
         .kind = OPT_INT,
         .dest = &a->evaluate_every,
         .lo = 1,
         .hi = 1000000000,
         .wants = "a positive integer"},
        {.name = "quad-lr", /* 0 trained nothing: every pseudo-gradient zero, the run's loss flat (measured) */
         .kind = OPT_DOUBLE,
         .dest = &a->quad_lr,
         .min = FLT_MIN,
         .max = HUGE_VAL,
         .wants = "a positive number (at 0 the worker trains nothing and sends only zero pseudo-gradients; "
                  "default 0.01)"},
    };
    _Static_assert(sizeof table / sizeof table[0] == SESSION_FLAGS, "SESSION_FLAGS counts session_flags' table");
    memcpy(specs, table, sizeof table);
}

/* What a sync sends and when: the codec's options, the interval, Streaming DiLoCo's fragments, retries. */
static void sync_flags(opt_spec *specs, worker_args *a)
{
    const opt_spec table[] = {
        {.name = "no-bf16", .kind = OPT_CLEAR, .dest = &a->dl.bf16},
        {.name = "error-feedback", .kind = OPT_FLAG, .dest = &a->dl.error_feedback},
        {.name = "dylu", .kind = OPT_FLAG, .dest = &a->dl.dylu},
        {.name = "final-sync", .kind = OPT_FLAG, .dest = &a->final_sync},
        {.name = "num-fragments",
         .kind = OPT_INT,
         .dest = &a->dl.num_fragments,
         .lo = 0,
         .hi = 100000,
         .wants = "a non-negative integer"},
        {.name = "simulate-latency-ms",
         .kind = OPT_INT,
         .dest = &a->dl.simulate_latency_ms,
         .lo = 0,
         .hi = 100000,
         .wants = "a non-negative integer"},
        {.name = "fragments-in-flight",
         .kind = OPT_INT,
         .dest = &a->dl.fragments_in_flight,
         .lo = 1,
         .hi = RUNCONF_MAX_FRAGMENTS,
         .wants = "an integer from 1 to the run's fragments"},
        {.name = "fragment-alpha",
         .kind = OPT_CUSTOM,
         .dest = &a->dl.fragment_alpha,
         .parse = parse_alpha,
         .wants = "a number in [0, 1)"},
        {.name = "sync-every",
         .kind = OPT_INT,
         .dest = &a->dl.sync_every,
         .lo = 1,
         .hi = 1000000000,
         .wants = "a positive integer"},
        {.name = "max-sync-retries",
         .kind = OPT_INT,
         .dest = &a->dl.max_sync_retries,
         .lo = 0,
         .hi = 1000000000,
         .wants = "a non-negative integer"},
    };
    _Static_assert(sizeof table / sizeof table[0] == SYNC_FLAGS, "SYNC_FLAGS counts sync_flags' table");
    memcpy(specs, table, sizeof table);
}

/* How long: the steps to train, the pace of a simulated slower machine, heartbeats and timeouts. */
static void time_flags(opt_spec *specs, worker_args *a, typed_flags *t)
{
    const opt_spec table[] = {
        {.name = "steps",
         .kind = OPT_LLONG,
         .dest = &t->steps,
         .lo = 0,
         .hi = 1000000000,
         .wants = "a non-negative integer"},
        {.name = "step-delay-ms",
         .kind = OPT_LLONG,
         .dest = &t->delay,
         .lo = 0,
         .hi = 1000000000,
         .wants = "a non-negative integer"},
        {.name = "heartbeat-interval",
         .kind = OPT_DOUBLE,
         .dest = &t->hb_s,
         .min = 0,
         .max = OPTS_SECONDS_MAX,
         .given = &t->hb_given,
         .wants = "seconds in [0, 2000000]"},
        {.name = "sync-timeout",
         .kind = OPT_DOUBLE,
         .dest = &t->st_s,
         .min = 0.001,
         .max = OPTS_SECONDS_MAX,
         .given = &t->st_given,
         .wants = "seconds in (0, 2000000]"},
        {.name = "connect-timeout",
         .kind = OPT_DOUBLE,
         .dest = &t->ct_s,
         .min = 0,
         .max = OPTS_SECONDS_MAX,
         .given = &t->ct_given,
         .wants = "seconds in [0, 2000000]"},
        {.name = "slowdown",
         .kind = OPT_DOUBLE,
         .dest = &a->slowdown,
         .min = 1,
         .max = 1000,
         .wants = "a number in [1, 1000]"},
    };
    _Static_assert(sizeof table / sizeof table[0] == TIME_FLAGS, "TIME_FLAGS counts time_flags' table");
    memcpy(specs, table, sizeof table);
}

/* The typed flags into worker_args, in the units and types it holds. */
static void convert_flags(worker_args *a, const typed_flags *t)
{
    static const char *hook_modes[] = {"auto", "off", "host"};
    a->device_hooks = hook_modes[t->hooks];
    a->steps = (long)t->steps;
    a->step_delay_ms = (unsigned)t->delay;
    seconds_to_ms(t->hb_given, t->hb_s, &a->dl.heartbeat_interval_ms);
    seconds_to_ms(t->st_given, t->st_s, &a->dl.sync_timeout_ms);
    seconds_to_ms(t->ct_given, t->ct_s, &a->dl.connect_timeout_ms);
}

/* The Redis URL (--redis, --redis-file or $DL_REDIS_URL, exactly one) and --run, which every command
 * line needs: 0, or -1 after a message. */
static int check_redis_and_run(worker_args *a)
{
    char err[256];
    if (redis_url_pick(a->dl.redis_url, a->redis_file, a->redis_text, sizeof a->redis_text, err, sizeof err) < 0) {
        fprintf(stderr, "worker: %s (see --help)\n", err);
        return -1;
    }
    a->dl.redis_url = a->redis_text;
    if (!a->dl.run) {
        fprintf(stderr, "worker: --run NAME is required (see --help)\n");
        return -1;
    }
    return 0;
}

/* Parse our own flags; leave the rest (trainer flags) in rest[]. 0 ready, 1 after --help printed the usage,
 * -1 after a message on stderr. The Redis URL and --run are checked later (check_redis_and_run), after
 * the trainer flags: an unknown option is said first, as the other binaries say it. */
static int parse_args(int argc, char **argv, worker_args *a, char **rest, int *nrest)
{
    memset(a, 0, sizeof *a);
    diloco_options_default(&a->dl);
    a->quad_lr = 0.01;
    a->slowdown = 1;
    typed_flags t = {0}; /* --steps and --step-delay-ms are 0 by default too */
    opt_spec specs[WORKER_FLAGS + 1] = {{0}};
    session_flags(specs, a, &t);
    sync_flags(specs + SESSION_FLAGS, a);
    time_flags(specs + SESSION_FLAGS + SYNC_FLAGS, a, &t);
    int prc = opts_parse_cmd("worker", usage, specs, argc, argv, 0, rest, nrest);
    if (prc != 0) return prc;
    convert_flags(a, &t);
    return 0;
}

/* --trainer and the trainer flags left by parse_args, checked before Redis is asked anything (a typo
 * must not wait for an unreachable Redis): each flag must be one of the trainer named by --trainer, or
 * of the GPT when the run decides (make_trainer checks again against the run's). 0 or -1 after a
 * message. */
static int precheck_trainer_flags(const worker_args *a, char **rest, int nrest)
{
    if (a->trainer && strcmp(a->trainer, "gpt") != 0 && strcmp(a->trainer, "quadratic") != 0) {
        fprintf(stderr, "worker: --trainer wants gpt or quadratic, got '%s' (see --help)\n", a->trainer);
        return -1;
    }
    if (nrest == 0) return 0;
    if (a->trainer && !strcmp(a->trainer, "quadratic")) {
        fprintf(stderr, "worker: unknown option %s (see --help)\n", rest[0]);
        return -1;
    }
    char **copy = calloc((size_t)nrest + 1, sizeof *copy); /* gpt_options_parse rewrites its argv */
    if (!copy) return -1;
    memcpy(copy, rest, (size_t)nrest * sizeof *copy);
    gpt_options o;
    gpt_options_default(&o);
    char err[256];
    int consumed = gpt_options_parse(&o, nrest, copy, err, sizeof err);
    if (consumed < 0) fprintf(stderr, "worker: %s\n", err); /* err says "(see --help)" */
    else if (consumed < nrest) fprintf(stderr, "worker: unknown option %s (see --help)\n", copy[0]);
    free(copy);
    return consumed == nrest ? 0 : -1;
}

/* Read the run's config with a short-lived connection: we need numel and the model to build the
 * trainer before the session exists. */
static int read_run(const worker_args *a, runconf *rc, char *err, size_t errlen)
{
    redis_url u;
    if (redis_url_parse(a->dl.redis_url, &u, err, errlen) < 0) return -1;
    rconn *c =
        rconn_connect_retry(&u, 5000, a->dl.connect_timeout_ms, (const volatile int *)&g_stop, NULL, err, errlen);
    if (!c) return -1;
    int r = runconf_load(c, a->dl.run, rc, err, errlen);
    rconn_free(c);
    return r;
}

/* The run's GPT options: the defaults, the run's seed and its model (the flags in its config's model
 * string; none for a state run, whose model string is no flags). -1 + err when they do not parse. */
static int run_gpt_options(const runconf *rc, gpt_options *o, char *err, size_t errlen)
{
    char model[256];
    snprintf(model, sizeof model, "%s", strcmp(rc->trainer, "gpt") == 0 ? rc->model : "");
    char *argv[65];
    int argc = 0;
    for (char *tok = strtok(model, " "); tok && argc < 64; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    gpt_options_default(o);
    o->seed = rc->seed;
    int consumed = gpt_options_parse(o, argc, argv, err, errlen);
    if (consumed >= 0 && consumed < argc)
        err_set(err, errlen, "run '%s' has a model this worker does not know: '%s'", rc->run, rc->model);
    return consumed == argc ? 0 : -1;
}

/* The worker's own GPT flags on top of the run's options. -1 + err for a bad or unknown one. */
static int user_gpt_options(gpt_options *o, char **rest, int nrest, char *err, size_t errlen)
{
    char *argv[160];
    int argc = 0;
    for (int i = 0; i < nrest && argc < 159; i++) argv[argc++] = rest[i];
    argv[argc] = NULL;
    int consumed = gpt_options_parse(o, argc, argv, err, errlen);
    if (consumed < 0) return -1;
    if (argc - consumed > 0) {
        err_set(err, errlen, "unknown option %s (see --help)", argv[0]);
        return -1;
    }
    return 0;
}

/* Model flags that change a gpt run's model make another model than the run's (t, built from them): refused,
 * saying what differs in the flags' terms, then (where the tensors differ too) the first tensor that does.
 * 1 + err when refused, else 0. */
static int model_flags_refused(const runconf *rc, const gpt_config *run, const gpt_config *mine, const trainer *t,
                               char *err, size_t errlen)
{
    char flags[160], detail[400] = "";
    if (strcmp(rc->trainer, "gpt") != 0 || gpt_config_diff_flags(run, mine, flags, sizeof flags) == 0) return 0;
    int tensors_differ = layout_check(rc->layout, t->tensors, t->ntensors, t->name, detail, sizeof detail) < 0;
    err_set(err, errlen,
            "run '%s' has a gpt of layers=%d heads=%d dim=%d ctx=%d vocab=%d; this worker was started with %s: drop "
            "the model flags (workers take the model from the run) or start a new run%s%s",
            rc->run, run->layers, run->heads, run->dim, run->ctx, run->vocab, flags, tensors_differ ? "; " : "",
            tensors_differ ? detail : "");
    return 1;
}

/* --seed seeds the parameters' initialisation, which a worker replaces with the run's at once (it fetches them
 * when it joins): another seed than the run's would do nothing, so it is said. */
static void warn_ignored_seed(const runconf *rc, const gpt_options *o)
{
    if (o->seed != rc->seed)
        log_warn("--seed %llu is ignored: a worker takes its parameters from the run (run '%s' was initialised "
                 "with seed %llu by coordinator init)",
                 (unsigned long long)o->seed, rc->run, (unsigned long long)rc->seed);
}

/* The GPT: the run's model and seed, then the worker's flags (data, batch, ...). */
static trainer *make_gpt(const worker_args *a, const runconf *rc, char **rest, int nrest, char *err, size_t errlen)
{
    gpt_options run, o;
    if (run_gpt_options(rc, &run, err, errlen) < 0) return NULL;
    o = run;
    o.total_steps = a->steps; /* --steps is ours; it is also the trainer's cosine horizon */
    if (user_gpt_options(&o, rest, nrest, err, errlen) < 0) return NULL;
    int seq_given = 0;
    for (int i = 0; i < nrest; i++) seq_given |= !strcmp(rest[i], "--seq") || !strncmp(rest[i], "--seq=", 6);
    if (!seq_given && o.seq > o.model.ctx) o.seq = o.model.ctx; /* the default, 256, fits no shorter context */
    warn_ignored_seed(rc, &o);
    trainer *t = gpt_trainer_create(&o, err, errlen);
    if (t && model_flags_refused(rc, &run.model, &o.model, t, err, errlen)) {
        t->destroy(t);
        return NULL;
    }
    return t;
}

static trainer *make_trainer(const worker_args *a, const runconf *rc, char **rest, int nrest, char *err, size_t errlen)
{
    const char *name = a->trainer ? a->trainer : (rc->trainer[0] ? rc->trainer : "gpt");
    if (!strcmp(name, "quadratic")) {
        if (nrest > 0) {
            err_set(err, errlen, "unknown option %s for the quadratic trainer of run '%s' (see --help)", rest[0],
                    rc->run);
            return NULL;
        }
        quadratic_options q;
        quadratic_options_default(&q);
        q.numel = (size_t)rc->numel;
        q.seed = rc->seed;
        q.worker_id = a->dl.worker_id;
        q.lr = (float)a->quad_lr;
        return quadratic_trainer_create(&q, err, errlen);
    }
    if (!strcmp(name, "gpt")) return make_gpt(a, rc, rest, nrest, err, errlen);
    if (!strcmp(name, "state"))
        err_set(err, errlen,
                "run '%s' was created from a model's own weights (coordinator init --from-state): join "
                "it with a PyTorch training loop through the rediloco package (docs/python.md), or, if its tensors "
                "are the GPT's, with --trainer gpt and the model flags",
                rc->run);
    else
        err_set(err, errlen, "unknown trainer '%s' (gpt or quadratic)", name);
    return NULL;
}

/* ---- telemetry and progress ------------------------------------------------------------------- */

static void log_sync(telemetry *tm, diloco *d, long step)
{
    diloco_sync_info s;
    if (diloco_last_sync(d, &s) < 0) return;
    char digest[20], shards[20];
    snprintf(digest, sizeof digest, "%016" PRIx64, s.digest);
    snprintf(shards, sizeof shards, "%016" PRIx64, s.shards_digest);
    /* the get phase after the barrier's close: the last parameter byte against the close */
    double get_s = s.t_get_us && s.t_last_recv_us > s.t_get_us ? (double)(s.t_last_recv_us - s.t_get_us) / 1e6 : 0.0;
    telemetry_write(tm, json_pack("{s:s, s:s, s:I, s:i, s:I, s:I, s:f, s:f, s:f, s:i, s:f, s:I, s:I, s:s, s:s, s:b}",
                                  "event", "sync", "worker", diloco_worker_id(d), "step", (json_int_t)step, "fragment",
                                  s.fragment, "round", (json_int_t)s.round, "version", (json_int_t)s.version, "seconds",
                                  s.seconds, "wait_seconds", s.wait_seconds, "confirm_seconds", s.confirm_seconds,
                                  "confirm_shards", s.confirm_shards, "get_seconds", get_s, "bytes_up",
                                  (json_int_t)s.bytes_up, "bytes_down", (json_int_t)s.bytes_down, "digest", digest,
                                  "shards_digest", shards, "stale", s.stale));
}

/* rate: trainer_stats.tokens per second, in unit ("tok/s", or "steps/s" for a trainer that counts steps) */
static void progress(const worker_args *a, diloco *d, long step, const trainer_stats *st, double rate,
                     const char *unit, int tty)
{
    if (a->quiet) return;
    diloco_sync_info s;
    char last[64] = "-";
    if (diloco_last_sync(d, &s) == 0) snprintf(last, sizeof last, "%.2fs", s.seconds);
    char eval[32] = "";
    if (st->eval_loss >= 0) snprintf(eval, sizeof eval, " eval %.4f", st->eval_loss);
    char of[32] = ""; /* "/N" with --steps N; nothing when it trains until stopped */
    if (a->steps) snprintf(of, sizeof of, "/%ld", a->steps);
    fprintf(stderr, "%sstep %ld%s  loss %.4f%s  %.0f %s  v%" PRId64 "  sync in %d  last sync %s%s",
            tty ? "\r\033[K" : "", step, of, st->loss, eval, rate, unit, diloco_version(d), diloco_steps_to_sync(d),
            last, tty ? "" : "\n");
    fflush(stderr);
}

/* ---- the training loop -------------------------------------------------------------------------- */

static int on_params(void *ctx, size_t off, size_t n, char *err, size_t errlen)
{
    trainer *t = ctx;
    return t->params_changed ? t->params_changed(t, off, n, err, errlen) : 0;
}

static int train(const worker_args *a, trainer *t, diloco *d, telemetry *tm)
{
    char err[512];
    int tty = isatty(2);
    uint64_t t0 = now_ms(), last_print = 0, tokens0 = 0;
    trainer_stats st = {0, -1, 0};
    const char *unit = strcmp(t->name, "quadratic") == 0 ? "steps/s" : "tok/s"; /* (its "tokens" are its steps) */
    long step = t->resumed_step; /* (--steps counts from a resumed checkpoint's step: trainer.h) */
    if (a->steps && step >= a->steps)
        log_warn("the trainer's checkpoint is at step %ld already, --steps %ld: nothing left to train (raise --steps "
                 "to train on)",
                 step, a->steps);
    while (!g_stop && (a->steps == 0 || step < a->steps) && !diloco_stop_requested(d)) {
        uint64_t step_t0 = now_ms();
        if (t->step(t, &st, err, sizeof err) < 0) {
            log_error("training step failed: %s", err);
            return -1;
        }
        if (a->step_delay_ms) sleep_ms(a->step_delay_ms); /* counts as training time, as a slow machine's would */
        if (a->slowdown > 1) sleep_ms((unsigned)((double)(now_ms() - step_t0) * (a->slowdown - 1) + 0.5));
        step++;
        diloco_report(d, st.loss, st.tokens);
        int synced = diloco_after_step(d, err, sizeof err);
        if (synced < 0 && g_stop) { /* (a command to Redis or a shard-server that the stop ended, said as such) */
            log_info("stopped during a sync: %s", err);
            break;
        }
        if (synced < 0) {
            log_error("sync failed for good: %s", err);
            return -1;
        }
        if (synced) log_sync(tm, d, step);
        uint64_t now = now_ms();
        if (synced || now - last_print >= 1000 || (a->steps && step == a->steps)) {
            double secs = (double)(now - (last_print ? last_print : t0)) / 1000.0;
            double rate = secs > 0 ? (double)(st.tokens - tokens0) / secs : 0;
            progress(a, d, step, &st, rate, unit, tty);
            telemetry_write(tm, json_pack("{s:s, s:I, s:f, s:f, s:I}", "event", "step", "step", (json_int_t)step,
                                          "loss", st.loss, "eval_loss", st.eval_loss, "tokens", (json_int_t)st.tokens));
            last_print = now;
            tokens0 = st.tokens;
        }
    }
    if (tty && !a->quiet) fputc('\n', stderr);
    if (a->final_sync && !g_stop && !diloco_stop_requested(d)) {
        if (diloco_force_sync(d, err, sizeof err) < 0) {
            log_error("final sync failed: %s", err);
            return -1;
        }
        log_sync(tm, d, step);
    }
    if (!g_stop && diloco_stop_requested(d) == DILOCO_STOP_RECREATED) { /* a restart joins the new run */
        log_error("stopped after %ld steps: run '%s' was made again under its name (coordinator init --force); "
                  "start the worker again to join the new run",
                  step, a->dl.run);
        return -1;
    }
    if (!g_stop && diloco_stop_requested(d) == DILOCO_STOP_REPLACED) {
        log_error("stopped after %ld steps: another process registered as worker '%s' in run '%s'; give each worker "
                  "its own --worker-id (the default is <hostname>-<pid>)",
                  step, diloco_worker_id(d), a->dl.run);
        return -1;
    }
    log_info("stopped after %ld steps (%s)", step,
             g_stop                     ? "signal"
             : diloco_stop_requested(d) ? "run shut down"
                                        : "done");
    return 0;
}

/* The exit of a start that did not get to train: a signal while it waited (for Redis, a shard-server, the
 * run's parameters) is a stop the user asked for, said as such with exit 0 as after training (and as the
 * shard-server does); anything else is an error, exit 1. */
static int failed_or_stopped(const char *err)
{
    if (g_stop) {
        if (strcmp(err, "stopped") == 0)
            log_info("stopped by a signal before training started");
        else
            log_info("stopped by a signal before training started (%s)", err);
        return 0;
    }
    log_error("%s", err);
    return 1;
}

/* libdiloco's device hooks for this trainer (--device-hooks): 1 when set (params then stay away from
 * libdiloco), 0 when the host buffer is used, -1 on error. */
static int device_hooks(const worker_args *a, trainer *t, diloco_device_ops *ops, host_device **hd, char *err,
                        size_t errlen)
{
    memset(ops, 0, sizeof *ops);
    if (!strcmp(a->device_hooks, "off")) return 0;
    if (!strcmp(a->device_hooks, "host")) {
        if (!(*hd = host_device_create(t->params, t->numel, err, errlen))) return -1;
        host_device_ops(*hd, ops);
        log_info("device hooks: host-memory stand-in (testing)");
        return 1;
    }
    if (strcmp(t->name, "gpt") != 0) return 0;
    int rc = gpt_trainer_device_ops(t, ops, err, errlen);
    if (rc == 1) log_info("device hooks: DiLoCo on the %s device", gpt_trainer_device(t));
    return rc;
}

/* --sync-every larger than --steps: the worker would leave before its first sync and the run would
 * not move, silently. Said at start, with the way out. */
static void warn_if_never_syncs(const worker_args *a)
{
    if (a->steps > 0 && a->dl.sync_every > a->steps && !a->final_sync && !a->dl.dylu && !a->eval_only)
        log_warn("--sync-every %d is more than --steps %ld: this worker would stop before its first sync and "
                 "send nothing (the run does not move); lower --sync-every, or add --final-sync to sync once "
                 "after the last step",
                 a->dl.sync_every, a->steps);
}

/* What a worker holds once the run's config is read; release_worker lets it go. */
typedef struct worker_parts {
    trainer *t;
    diloco *d;
    host_device *hd; /* --device-hooks host */
    telemetry *log;  /* --log */
} worker_parts;

/* The trainer (the run's, or --trainer's, with the trainer flags), checked against the run's layout. */
static int build_trainer(const worker_args *a, const runconf *rc, char **rest, int nrest, trainer **t, char *err,
                         size_t errlen)
{
    *t = make_trainer(a, rc, rest, nrest, err, errlen);
    if (!*t || layout_check(rc->layout, (*t)->tensors, (*t)->ntensors, (*t)->name, err, errlen) < 0) return -1;
    if (!strcmp((*t)->name, "gpt")) {
        char what[384];
        gpt_trainer_describe(*t, what, sizeof what);
        log_info("gpt trainer: %s", what);
    }
    return 0;
}

/* --evaluate-every (the evaluator, until stopped) or --eval-only (one loss, printed): the run's parameters
 * read from Redis, without joining the run (its barriers must not wait for an evaluation). */
static int evaluate(const worker_args *a, const runconf *rc, trainer *t, char *err, size_t errlen)
{
    evaluator_options eo = {.redis_url = a->dl.redis_url,
                            .run = a->dl.run,
                            .every = a->evaluate_every,
                            .poll_ms = 200,
                            .connect_timeout_ms = a->dl.connect_timeout_ms,
                            .stop = (const volatile int *)&g_stop};
    if (a->evaluate_every) return evaluator_run(&eo, rc, t, err, errlen);
    int64_t version;
    double loss;
    if (evaluator_once(&eo, rc, t, &version, &loss, err, errlen) < 0) return -1;
    printf("eval_loss %.6f version %" PRId64 "\n", loss, version);
    return 0;
}

/* Open --log, join the run through libdiloco (by the device hooks where they apply) and train. -1 with
 * err when it could not start; else the exit status of the training. */
static int join_and_train(worker_args *a, worker_parts *w, char *err, size_t errlen)
{
    warn_if_never_syncs(a);
    if (a->log_path && !(w->log = telemetry_open(a->log_path, err, errlen))) return -1;
    a->dl.stop = (const volatile int *)&g_stop;
    a->dl.on_params = on_params;
    a->dl.on_params_ctx = w->t;
    int hooks = device_hooks(a, w->t, &a->dl.device, &w->hd, err, errlen);
    if (hooks < 0) return -1;
    /* with hooks libdiloco gets no host buffer: it must go through them */
    if (diloco_open(&a->dl, hooks ? NULL : w->t->params, w->t->numel, &w->d, err, errlen) < 0) return -1;
    telemetry_write(w->log, json_pack("{s:s, s:s, s:I}", "event", "join", "worker", diloco_worker_id(w->d), "version",
                                      (json_int_t)diloco_version(w->d)));
    return train(a, w->t, w->d, w->log) < 0 ? 1 : 0;
}

/* libdiloco first: it may free host buffers through the device hooks, so before the trainer. */
static void release_worker(worker_parts *w)
{
    diloco_close(w->d);
    if (w->hd) {
        unsigned long nd, nl[3];
        host_device_counts(w->hd, &nd, nl);
        log_info("device hooks: %lu delta, %lu load snapshot, %lu load copy, %lu load mix", nd, nl[0], nl[1], nl[2]);
        host_device_free(w->hd);
    }
    if (w->t) w->t->destroy(w->t);
    telemetry_close(w->log);
}

/* With the run's config read: the trainer, then evaluating or training. The exit status, or -1 with err. */
static int work(worker_args *a, const runconf *rc, char **rest, int nrest, worker_parts *w, char *err, size_t errlen)
{
    if (build_trainer(a, rc, rest, nrest, &w->t, err, errlen) < 0) return -1;
    if (a->evaluate_every || a->eval_only) return evaluate(a, rc, w->t, err, errlen) < 0 ? -1 : 0;
    return join_and_train(a, w, err, errlen);
}

static int run_worker(int argc, char **argv)
{
    worker_args a;
    char **rest = calloc((size_t)argc + 1, sizeof(char *));
    int nrest;
    int prc = rest ? parse_args(argc, argv, &a, rest, &nrest) : -1;
    if (prc == 0 && precheck_trainer_flags(&a, rest, nrest) < 0) prc = -1;
    if (prc == 0 && check_redis_and_run(&a) < 0) prc = -1;
    if (prc != 0) {
        free(rest);
        return opts_exit_status(prc);
    }
    char err[512];
    runconf rc;
    if (read_run(&a, &rc, err, sizeof err) < 0) {
        free(rest);
        return failed_or_stopped(err);
    }
    worker_parts w = {0};
    int status = work(&a, &rc, rest, nrest, &w, err, sizeof err);
    if (status < 0) status = failed_or_stopped(err);
    release_worker(&w);
    runconf_free(&rc);
    free(rest);
    return status;
}

int main(int argc, char **argv)
{
    gpt_openblas_autotune(argv); /* may re-execute us with faster BLAS kernels: must come first */
    log_init("worker");
    signal(SIGPIPE, SIG_IGN);
    /* SIGHUP (a rotation's `kill -HUP`, a closed terminal) must not end weeks of training without a word to the
     * run: --log follows its file by name instead (telemetry.c) */
    signal(SIGHUP, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (argc >= 2 && !strcmp(argv[1], "prepare-data")) return gpt_prepare_data_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "train")) return run_worker(argc - 2, argv + 2);
    return run_worker(argc - 1, argv + 1);
}
