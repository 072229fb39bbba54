/* ref_async.c: the in-process reference of an async DiLoCo run of the quadratic trainer.
 *
 * Async runs are not deterministic in their order (who submits first depends on timing), but every
 * version is a pure function of the previous one and of the submission Redis placed there. This tool
 * reads that order from dl:{R}:events (submit events: worker, shard, seq, base version), replays it
 * with the same trainer and the same outer math (full Nesterov per submission, or Delayed Nesterov),
 * and prints the digests the run's shards must have:
 *
 *   shard <k> <digest>
 *
 * usage: ref_async --redis URL --run R --sync-every H [--quad-lr 0.01] [--no-bf16] [--async-rule RULE]
 *                  [--async-lookahead G] [--failed W:N,...] [--late W:N,...] [--twice W:N,...]
 * (--async-rule, --async-lookahead: replay with this setting instead of the run's, to show that it matters)
 * (--failed W:N: worker W's N-th try to submit failed without a trace in Redis (DL_FAIL, training went on):
 * the submission it made next trained 2H steps from the start of the one before, and Δ covers both windows)
 * (--late W:N: worker W's N-th try got its places, and so is recorded, but not its result (its get
 * failed): the worker completed it at its next sync, dropped the H steps trained meanwhile and took the
 * versions it got, from which its next submission trains H steps (not ahead: --async-lookahead starts
 * only an interval that follows a submission's own get). --twice W:N: the same failure as the
 * worker handled it before 29 November (without --async-lookahead): its next submission continued from
 * where that window ended and measured Δ from the same start, so the window was applied twice, and its
 * weight was H)
 * (a worker's k-th submission trains H steps from the versions its previous submission got back; with
 * --weight-by tokens its pseudo-gradient is scaled by its steps / weight_ref_tokens (2H after a failed
 * try), a quadratic step being a token;
 * with --staleness-weight, per shard, by outer_stale_weight of its seq - base; with --async-rule rebase
 * it enters the outer step as g + theta_seq - theta_base; with --async-lookahead a worker's later submissions
 * start ahead of their base, start_of) */
#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/opts.h"
#include "base/util.h"
#include "format/keys.h"
#include "format/runconf.h"
#include "math/bf16.h"
#include "math/outer.h"
#include "math/outer_dn.h"
#include "redis/rconn.h"
#include "redis/runconf_load.h"
#include "trainers/quadratic.h"

#define MAX_WORKERS 64

typedef struct submission {
    char worker[64];
    int64_t *base; /* per shard */
    int seen;      /* shards recorded */
} submission;

typedef struct ref {
    runconf rc;
    size_t n;
    float lr, mu;
    int nesterov;
    submission *subs; /* by seq */
    int64_t nsubs;
    float **theta; /* theta[v]: the whole vector at version v (all shards move together) */
    char *ids[MAX_WORKERS];
    trainer *t[MAX_WORKERS];
    int64_t last[MAX_WORKERS]; /* each worker's latest submission replayed so far (-1: none) */
    int tries[MAX_WORKERS];    /* each worker's tries to submit so far, the failed ones included */
    int after[MAX_WORKERS];    /* what its latest submission's try left: AFTER_* */
    int nworkers;
    const char *failed, *late, *twice; /* --failed, --late, --twice: "W:N,..." */
} ref;

enum { AFTER_OK, AFTER_LATE, AFTER_TWICE };

static const char *field(redisReply *e, const char *name)
{
    for (size_t i = 0; i + 1 < e->elements; i += 2)
        if (strcmp(e->element[i]->str, name) == 0) return e->element[i + 1]->str;
    return NULL;
}

static int read_tunables(rconn *c, const char *run, ref *r)
{
    char key[KEY_MAX];
    redisReply *s =
        rconn_command(c, "HMGET %s outer_lr outer_momentum nesterov", key_run(key, sizeof key, run, "tunables"));
    if (!s || s->type != REDIS_REPLY_ARRAY || s->elements != 3 || !s->element[0]->str) return -1;
    r->lr = (float)atof(s->element[0]->str);
    r->mu = (float)atof(s->element[1]->str);
    r->nesterov = atoi(s->element[2]->str);
    freeReplyObject(s);
    return 0;
}

/* Every submit event, indexed by seq. */
static int read_submissions(rconn *c, const char *run, ref *r)
{
    char key[KEY_MAX];
    redisReply *x = rconn_command(c, "XRANGE %s - +", key_run(key, sizeof key, run, "events"));
    if (!x || x->type != REDIS_REPLY_ARRAY) return -1;
    int64_t max = -1;
    for (size_t i = 0; i < x->elements; i++) {
        redisReply *e = x->element[i]->element[1];
        const char *type = field(e, "type"), *seq = field(e, "seq");
        if (type && !strcmp(type, "submit") && seq && atoll(seq) > max) max = atoll(seq);
    }
    r->nsubs = max + 1;
    r->subs = calloc((size_t)r->nsubs + 1, sizeof *r->subs);
    for (int64_t s = 0; s < r->nsubs; s++) r->subs[s].base = calloc((size_t)r->rc.nshards, sizeof(int64_t));
    for (size_t i = 0; i < x->elements; i++) {
        redisReply *e = x->element[i]->element[1];
        const char *type = field(e, "type");
        if (!type || strcmp(type, "submit") != 0) continue;
        submission *s = &r->subs[atoll(field(e, "seq"))];
        snprintf(s->worker, sizeof s->worker, "%s", field(e, "worker"));
        s->base[atoi(field(e, "shard"))] = atoll(field(e, "base"));
        s->seen++;
    }
    freeReplyObject(x);
    for (int64_t s = 0; s < r->nsubs; s++)
        if (r->subs[s].seen != r->rc.nshards) {
            fprintf(stderr, "ref_async: submission %" PRId64 " is not recorded for every shard\n", s);
            return -1;
        }
    return 0;
}

static int worker_index(ref *r, const char *id, double qlr)
{
    for (int w = 0; w < r->nworkers; w++)
        if (!strcmp(r->ids[w], id)) return w;
    char err[128];
    quadratic_options q;
    quadratic_options_default(&q);
    q.numel = r->n;
    q.seed = r->rc.seed;
    q.worker_id = r->ids[r->nworkers] = strdup(id);
    q.lr = (float)qlr;
    r->t[r->nworkers] = quadratic_trainer_create(&q, err, sizeof err);
    r->last[r->nworkers] = -1;
    r->tries[r->nworkers] = 0;
    return r->nworkers++;
}

/* Does list ("W:N,...": --failed, --late, --twice) name worker id's try n? */
static int listed(const char *list, const char *id, int n)
{
    char want[96];
    snprintf(want, sizeof want, "%s:%d", id, n);
    size_t len = strlen(want);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : "")
        if (strncmp(p, want, len) == 0 && (p[len] == ',' || p[len] == '\0')) return 1;
    return 0;
}

/* How many windows of H steps submission s's worker trained for it: 1, plus one per failed try just before;
 * its try's outcome into after[w]. */
static int windows_of(ref *r, int w)
{
    int n = 1;
    while (listed(r->failed, r->ids[w], ++r->tries[w])) n++;
    r->after[w] = listed(r->late, r->ids[w], r->tries[w])    ? AFTER_LATE
                  : listed(r->twice, r->ids[w], r->tries[w]) ? AFTER_TWICE
                                                             : AFTER_OK;
    return n;
}

/* Where submission s's worker started: the versions of its base, or with --async-lookahead G (and a
 * submission of the same worker before it, p) each shard ahead by c (base - p's base), c from p's place
 * and the versions in between: the worker's own computation (worker/diloco/lookahead.c), replayed. */
static void start_of(const ref *r, int64_t s, int64_t p, float *start)
{
    const submission *sub = &r->subs[s];
    for (int k = 0; k < r->rc.nshards; k++) {
        size_t lo = (size_t)r->rc.shard_bounds[k], len = (size_t)runconf_shard_numel(&r->rc, k);
        const float *got = r->theta[sub->base[k]] + lo;
        if (r->rc.async_lookahead > 0 && p >= 0) {
            int64_t prev = r->subs[p].base[k];
            float c = outer_lookahead_coef(r->rc.async_lookahead, p - prev, sub->base[k] - prev);
            outer_lookahead(start + lo, got, r->theta[prev] + lo, c, len);
        } else {
            memcpy(start + lo, got, len * sizeof(float));
        }
    }
}

/* Submission s: its worker trains H steps (more after a failed try: windows_of) from the versions it started
 * from; the shard-servers apply its Δ (bf16 unless told otherwise) as version s+1. */
static void apply(ref *r, int64_t s, long long H, double qlr, int bf16, float *mom, float *buf, float *g)
{
    const submission *sub = &r->subs[s];
    int w = worker_index(r, sub->worker, qlr);
    trainer *t = r->t[w];
    int before = r->after[w]; /* what the worker's previous submission left */
    float *start = malloc(r->n * sizeof(float));
    start_of(r, s, before == AFTER_LATE ? -1 : r->last[w], start); /* (a late one's completion took base) */
    r->last[w] = s;
    char err[128];
    trainer_stats st;
    if (before == AFTER_LATE) { /* the window of the try that completed the late one: trained, dropped */
        for (long long i = 0; i < H; i++) t->step(t, &st, err, sizeof err);
        r->tries[w]++;
    }
    /* (--twice: the worker went on from where the late window ended; its base, and so start, did not move) */
    if (before != AFTER_TWICE) memcpy(t->params, start, r->n * sizeof(float));
    long long steps = H * windows_of(r, w), weighed = before == AFTER_TWICE ? H : steps;
    for (long long i = 0; i < steps; i++) t->step(t, &st, err, sizeof err);
    float *d = malloc(r->n * sizeof(float));
    uint16_t *d16 = malloc(r->n * sizeof(uint16_t));
    /* Δ from where it started; a rebase run's worker measures it from its base (lookahead.c) */
    for (int k = 0; k < r->rc.nshards; k++) {
        size_t lo = (size_t)r->rc.shard_bounds[k], hi = lo + (size_t)runconf_shard_numel(&r->rc, k);
        const float *from = runconf_rebase(&r->rc) ? r->theta[sub->base[k]] : start;
        for (size_t i = lo; i < hi; i++) d[i] = from[i] - t->params[i];
    }
    outer_sum_zero(g, r->n); /* exactly the servers' mean of one submission (or its scaling) */
    if (bf16) bf16_encode(d, d16, r->n);
    for (int k = 0; k < r->rc.nshards; k++) {
        size_t lo = (size_t)r->rc.shard_bounds[k], len = (size_t)runconf_shard_numel(&r->rc, k);
        /* --weight-by tokens: its steps / weight_ref_tokens; --staleness-weight: times its weight of s - base */
        double w = r->rc.weight_tokens
                       ? (double)weighed / (double)(r->rc.weight_ref_tokens ? r->rc.weight_ref_tokens : 1)
                       : 1.0;
        float scale = (float)(w * outer_stale_weight(r->rc.stale_weight, s - sub->base[k], r->rc.stale_ref));
        if (runconf_weighted(&r->rc) && bf16)
            outer_sum_add_scaled_bf16(g + lo, d16 + lo, scale, len);
        else if (runconf_weighted(&r->rc))
            outer_sum_add_scaled_f32(g + lo, d + lo, scale, len);
        else if (bf16)
            outer_sum_add_bf16(g + lo, d16 + lo, len);
        else
            outer_sum_add_f32(g + lo, d + lo, len);
    }
    if (!runconf_weighted(&r->rc)) outer_mean_finish(g, r->n, 1);
    for (int k = 0; runconf_rebase(&r->rc) && k < r->rc.nshards; k++) {
        /* --async-rule rebase: g + a (theta_s - theta_base), written out here (fp32, each rounded once) */
        size_t lo = (size_t)r->rc.shard_bounds[k], len = (size_t)runconf_shard_numel(&r->rc, k);
        const float *now = r->theta[s], *base = r->theta[sub->base[k]];
        for (size_t i = lo; i < lo + len; i++) {
            float diff = now[i] - base[i];
            float part = r->rc.rebase_fraction * diff;
            g[i] = g[i] + part;
        }
    }
    free(d);
    free(d16);
    float *next = malloc(r->n * sizeof(float));
    memcpy(next, r->theta[s], r->n * sizeof(float));
    for (int k = 0; k < r->rc.nshards; k++) {
        size_t lo = (size_t)r->rc.shard_bounds[k], len = (size_t)runconf_shard_numel(&r->rc, k);
        if (r->rc.dn_buffer > 0)
            outer_dn_step(r->rc.dn_variant, next + lo, mom + lo, buf + lo, g + lo, len, r->rc.dn_t0 + (uint64_t)s + 1,
                          (uint32_t)r->rc.dn_buffer, r->lr, r->mu, r->nesterov);
        else
            outer_sgd_step(next + lo, mom + lo, s == 0, g + lo, len, r->lr, r->mu, r->nesterov);
    }
    r->theta[s + 1] = next;
    free(start);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ref_async --redis URL --run R --sync-every H [--quad-lr LR] [--no-bf16] [--async-rule RULE]\n"
               "                 [--async-lookahead G] [--failed W:N,...] [--late W:N,...] [--twice W:N,...]\n");
}

int main(int argc, char **argv)
{
    const char *url = NULL, *run = NULL, *rule = NULL;
    long long H = 0;
    double qlr = 0.01, ahead = -1;
    int bf16 = 1;
    ref r = {0};
    const opt_spec specs[] = {
        {.name = "no-bf16", .kind = OPT_CLEAR, .dest = &bf16},
        {.name = "redis", .kind = OPT_STRING, .dest = &url},
        {.name = "run", .kind = OPT_STRING, .dest = &run},
        {.name = "sync-every", .kind = OPT_LLONG, .dest = &H, .lo = 1, .hi = INT64_MAX},
        {.name = "quad-lr", .kind = OPT_DOUBLE, .dest = &qlr, .min = -DBL_MAX, .max = DBL_MAX},
        {.name = "async-rule", .kind = OPT_STRING, .dest = &rule},
        {.name = "async-lookahead", .kind = OPT_DOUBLE, .dest = &ahead, .min = 0, .max = ASYNC_LOOKAHEAD_MAX},
        {.name = "failed", .kind = OPT_STRING, .dest = &r.failed},
        {.name = "late", .kind = OPT_STRING, .dest = &r.late},
        {.name = "twice", .kind = OPT_STRING, .dest = &r.twice},
        {0},
    };
    int prc = opts_parse_cmd("ref_async", usage, specs, argc, argv, 1, NULL, NULL);
    if (prc != 0) return opts_exit_status(prc);
    if (!url || !run || H <= 0) {
        usage(stderr);
        return OPTS_EXIT_USAGE;
    }
    char err[512];
    redis_url u;
    rconn *c;
    if (redis_url_parse(url, &u, err, sizeof err) < 0 || !(c = rconn_connect(&u, 5000, err, sizeof err)) ||
        runconf_load(c, run, &r.rc, err, sizeof err) < 0) {
        fprintf(stderr, "ref_async: %s\n", err);
        return 1;
    }
    if (rule != NULL && (r.rc.async_rule = outer_async_rule_parse(rule)) < 0) {
        fprintf(stderr, "ref_async: --async-rule wants plain or rebase, got '%s'\n", rule);
        return OPTS_EXIT_USAGE;
    }
    if (ahead >= 0) r.rc.async_lookahead = (float)ahead;
    if (read_tunables(c, run, &r) < 0 || read_submissions(c, run, &r) < 0) {
        fprintf(stderr, "ref_async: cannot read the run's state or events\n");
        return 1;
    }
    r.n = (size_t)r.rc.numel;
    r.theta = calloc((size_t)r.nsubs + 1, sizeof(float *));
    r.theta[0] = malloc(r.n * sizeof(float));
    quadratic_init_params(r.rc.seed, r.theta[0], r.n);
    float *mom = calloc(r.n, sizeof(float)), *buf = calloc(r.n, sizeof(float)), *g = malloc(r.n * sizeof(float));
    for (int64_t s = 0; s < r.nsubs; s++) apply(&r, s, H, qlr, bf16, mom, buf, g);
    for (int k = 0; k < r.rc.nshards; k++)
        printf("shard %d %016" PRIx64 "\n", k,
               digest_f32(r.theta[r.nsubs] + r.rc.shard_bounds[k], (size_t)runconf_shard_numel(&r.rc, k)));
    fprintf(stderr, "ref_async: replayed %" PRId64 " submissions of %d workers\n", r.nsubs, r.nworkers);
    return 0;
}
