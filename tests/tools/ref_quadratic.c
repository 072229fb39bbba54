/* ref_quadratic.c: the in-process reference of a sync DiLoCo run of the quadratic trainer.
 *
 * It applies exactly the math the distributed system must apply (the same trainer, the same bf16
 * cast, the same fixed-order mean and outer step from common/math/outer.h) to the same workers, with no
 * Redis, no network and no shard-servers, and prints the digests of the final global parameters:
 *
 *   shard <k> <digest>      one line per shard (as dl:{R}:shards k:digest)
 *   all <digest>            the whole vector (as the workers' sync log)
 *
 * The exactness and crash tests compare a real run against these lines: bit-identical or failed.
 *
 * usage: ref_quadratic --numel N --shards S --seed SEED --workers a,b,c --rounds R --sync-every H
 *                      [--outer-lr 0.7] [--outer-momentum 0.5] [--no-nesterov] [--no-bf16] [--quad-lr 0.01]
 *                      (the outer defaults are coordinator init's: OUTER_DEFAULT_* of outer.h)
 *                      [--bounds b0,b1,...,bS]   (shard offsets; default: as coordinator init cuts them)
 *                      [--frag-bounds f0,..,fF --alpha A --steps S]   Streaming DiLoCo: F fragments of whole
 *                      shards, one sent every H/F steps and applied one interval later, S steps per worker
 *                      [--in-flight D]   with --frag-bounds: each fragment applied D intervals after it was
 *                      sent (worker --fragments-in-flight D)
 *                      [--h-of id=H,...] [--weight-tokens]   per-worker H (plain DiLoCo) and weighting of
 *                      each worker's pseudo-gradient by its tokens (steps) in the round
 *                      [--ranks-of id=R,...]   a worker that is a process group of R ranks (each training the
 *                      same copy, as tests/tools/group_worker's): its tokens in a round are R times its steps
 *                      [--codec int8|int4|int3|int2 [--error-feedback]]   block-quantized pseudo-gradients (blocks from
 *                      each shard's start), decoded and summed in fp32, as the shard-servers do
 *                      [--download update]   the mean is put through the codec (bf16 without --codec) per
 *                      shard before the step, as a run with coordinator init --download update does
 *                      [--away id=A-B,...]   (plain DiLoCo) worker id was dropped from round A after training it
 *                      (its Δ of rounds A..B does not count), trained nothing in rounds A+1..B and takes part
 *                      again from round B+1, from that round's global parameters (its AdamW state kept)
 *                      [--away-tentative]   with --away: each worker away learnt it was dropped one round late:
 *                      it got round A's result as it would have been with it (served tentatively before the
 *                      commit that dropped it) and trained round A+1 from it too, its Δ never sent
 *                      [--away-steps id=N,...]   with --away: worker id trained only N inner steps of round A
 *                      (stopped mid-interval, it learnt from its heartbeat that it was evicted and registered
 *                      again at once instead of training the rest; default H)
 *                      [--late id=R,...]   (plain DiLoCo) worker id's get of round R failed after the round took its
 *                      Δ: it trained on H steps from its own parameters, dropped them at its next sync (which
 *                      completed round R), and trained round R+1 from round R's result (its AdamW state kept)
 *                      [--redo id=R --redo-steps id=N]   (plain DiLoCo) worker id trained N inner steps of round R,
 *                      dropped them (evicted mid-interval, it registered again into round R, which could not
 *                      close without it) and trained round R again from its start, its AdamW state kept */
#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/opts.h"
#include "base/util.h"
#include "format/runconf.h"
#include "math/bf16.h"
#include "math/codec.h"
#include "math/outer.h"
#include "trainers/quadratic.h"

#define MAX_WORKERS 64

typedef struct ref_args {
    long long numel, shards, seed, rounds, sync_every;
    double outer_lr, outer_mu, quad_lr;
    int nesterov, bf16;
    char *ids[MAX_WORKERS];
    int nworkers;
    const char *bounds, *frag_bounds;
    double alpha;
    long long steps;
    long long in_flight; /* --in-flight D: Streaming fragments in flight (0: 1) */
    long long h[MAX_WORKERS];     /* per worker (sorted ids), default sync_every */
    long long ranks[MAX_WORKERS]; /* per worker: its process group's ranks, default 1 */
    const char *h_of, *ranks_of;
    int weight_tokens;
    int final_sync; /* streaming: workers end with diloco_force_sync (every fragment at once) */
    int codec;      /* BLOB_I8 / BLOB_I4, or 0 */
    int error_feedback;
    int download_update;
    const char *away;
    int away_tentative;
    long long away_from[MAX_WORKERS], away_to[MAX_WORKERS]; /* --away: rounds [from, to], none when from > to */
    const char *away_steps;
    long long away_n[MAX_WORKERS]; /* --away-steps: inner steps trained in round away_from (default h) */
    const char *late;
    long long late_round[MAX_WORKERS]; /* --late: the round whose get failed (-1: none) */
    const char *redo, *redo_steps;
    long long redo_round[MAX_WORKERS], redo_n[MAX_WORKERS]; /* --redo, --redo-steps (-1: none) */
} ref_args;

/* id's number in a list "id=N,id2=M,..." (--h-of, --ranks-of), or dflt when it has none */
static long long of_worker(const char *list, const char *id, long long dflt)
{
    size_t len = strlen(id);
    for (const char *p = list ? strstr(list, id) : NULL; p; p = strstr(p + 1, id))
        if (p[len] == '=' && (p == list || p[-1] == ',')) return atoll(p + len + 1);
    return dflt;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int parse_codec(const char *v, void *dest)
{
    ref_args *a = dest;
    a->codec = codec_parse(v);
    a->bf16 = 0;
    return codec_is_block(a->codec) ? 0 : -1;
}

static int parse_workers(const char *v, void *dest)
{
    ref_args *a = dest;
    char *list = strdup(v);
    for (char *t = strtok(list, ","); t && a->nworkers < MAX_WORKERS; t = strtok(NULL, ",")) a->ids[a->nworkers++] = t;
    return list ? 0 : -1;
}

/* --away's rounds of worker id ("id=A-B" in the list), or none (from > to). -1 when its entry is malformed. */
static int away_of(const char *list, const char *id, long long *from, long long *to)
{
    *from = 0;
    *to = -1;
    size_t len = strlen(id);
    for (const char *p = list ? strstr(list, id) : NULL; p; p = strstr(p + 1, id))
        if (p[len] == '=' && (p == list || p[-1] == ','))
            return sscanf(p + len + 1, "%lld-%lld", from, to) == 2 && *from <= *to ? 0 : -1;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: see the comment at the top of tests/tools/ref_quadratic.c\n");
}

/* 0 ready, 1 after --help, -1 after a message on stderr. */
static int parse(int argc, char **argv, ref_args *a)
{
    memset(a, 0, sizeof *a);
    a->shards = 1;
    a->outer_lr = OUTER_DEFAULT_LR;
    a->outer_mu = OUTER_DEFAULT_MOMENTUM;
    a->quad_lr = 0.01;
    a->nesterov = 1;
    a->bf16 = 1;
    const opt_spec specs[] = {
        {.name = "no-nesterov", .kind = OPT_CLEAR, .dest = &a->nesterov},
        {.name = "no-bf16", .kind = OPT_CLEAR, .dest = &a->bf16},
        {.name = "weight-tokens", .kind = OPT_FLAG, .dest = &a->weight_tokens},
        {.name = "final-sync", .kind = OPT_FLAG, .dest = &a->final_sync},
        {.name = "error-feedback", .kind = OPT_FLAG, .dest = &a->error_feedback},
        {.name = "numel", .kind = OPT_LLONG, .dest = &a->numel, .lo = 1, .hi = INT64_MAX},
        {.name = "shards", .kind = OPT_LLONG, .dest = &a->shards, .lo = 1, .hi = 4096},
        {.name = "seed", .kind = OPT_LLONG, .dest = &a->seed, .lo = 0, .hi = INT64_MAX},
        {.name = "rounds", .kind = OPT_LLONG, .dest = &a->rounds, .lo = 0, .hi = 1000000},
        {.name = "sync-every", .kind = OPT_LLONG, .dest = &a->sync_every, .lo = 1, .hi = 1000000},
        {.name = "steps", .kind = OPT_LLONG, .dest = &a->steps, .lo = 0, .hi = 100000000},
        {.name = "in-flight", .kind = OPT_LLONG, .dest = &a->in_flight, .lo = 1, .hi = RUNCONF_MAX_FRAGMENTS},
        {.name = "outer-lr", .kind = OPT_DOUBLE, .dest = &a->outer_lr, .min = -DBL_MAX, .max = DBL_MAX},
        {.name = "outer-momentum", .kind = OPT_DOUBLE, .dest = &a->outer_mu, .min = -DBL_MAX, .max = DBL_MAX},
        {.name = "quad-lr", .kind = OPT_DOUBLE, .dest = &a->quad_lr, .min = -DBL_MAX, .max = DBL_MAX},
        {.name = "alpha", .kind = OPT_DOUBLE, .dest = &a->alpha, .min = -DBL_MAX, .max = DBL_MAX},
        {.name = "bounds", .kind = OPT_STRING, .dest = &a->bounds},
        {.name = "frag-bounds", .kind = OPT_STRING, .dest = &a->frag_bounds},
        {.name = "h-of", .kind = OPT_STRING, .dest = &a->h_of},
        {.name = "away", .kind = OPT_STRING, .dest = &a->away},
        {.name = "away-tentative", .kind = OPT_FLAG, .dest = &a->away_tentative},
        {.name = "away-steps", .kind = OPT_STRING, .dest = &a->away_steps},
        {.name = "late", .kind = OPT_STRING, .dest = &a->late},
        {.name = "redo", .kind = OPT_STRING, .dest = &a->redo},
        {.name = "redo-steps", .kind = OPT_STRING, .dest = &a->redo_steps},
        {.name = "ranks-of", .kind = OPT_STRING, .dest = &a->ranks_of},
        {.name = "download", .kind = OPT_CHOICE, .dest = &a->download_update, .choices = "params|update"},
        {.name = "codec", .kind = OPT_CUSTOM, .dest = a, .parse = parse_codec, .wants = "int8, int4, int3 or int2"},
        {.name = "workers", .kind = OPT_CUSTOM, .dest = a, .parse = parse_workers, .wants = "a list of worker ids"},
        {0},
    };
    int rc = opts_parse_cmd("ref_quadratic", usage, specs, argc, argv, 1, NULL, NULL);
    if (rc != 0) return rc;
    if (a->numel <= 0 || a->nworkers == 0 || a->sync_every <= 0) {
        usage(stderr);
        return -1;
    }
    qsort(a->ids, (size_t)a->nworkers, sizeof a->ids[0], cmp_str);
    for (int w = 0; w < a->nworkers; w++) {
        a->h[w] = of_worker(a->h_of, a->ids[w], a->sync_every);
        a->ranks[w] = of_worker(a->ranks_of, a->ids[w], 1);
        if (away_of(a->away, a->ids[w], &a->away_from[w], &a->away_to[w]) < 0) {
            fprintf(stderr, "ref_quadratic: --away wants id=FIRST-LAST rounds (FIRST <= LAST) for %s\n", a->ids[w]);
            return -1;
        }
        a->away_n[w] = of_worker(a->away_steps, a->ids[w], a->h[w]);
        a->late_round[w] = of_worker(a->late, a->ids[w], -1);
        a->redo_round[w] = of_worker(a->redo, a->ids[w], -1);
        a->redo_n[w] = of_worker(a->redo_steps, a->ids[w], -1);
        if ((a->redo_round[w] >= 0) != (a->redo_n[w] >= 0)) {
            fprintf(stderr, "ref_quadratic: --redo and --redo-steps name the same workers (%s)\n", a->ids[w]);
            return -1;
        }
    }
    if (a->away_steps && (!a->away || a->away_tentative)) {
        fprintf(stderr, "ref_quadratic: --away-steps goes with --away (and not --away-tentative)\n");
        return -1;
    }
    if (a->away && (a->frag_bounds || a->codec)) {
        fprintf(stderr, "ref_quadratic: --away is for plain DiLoCo runs without a block codec\n");
        return -1;
    }
    if (a->redo && (a->frag_bounds || a->away || a->late)) {
        fprintf(stderr, "ref_quadratic: --redo is for plain DiLoCo runs without --away or --late\n");
        return -1;
    }
    if (a->late && (a->frag_bounds || a->away)) {
        fprintf(stderr, "ref_quadratic: --late is for plain DiLoCo runs without --away\n");
        return -1;
    }
    return 0;
}

/* The simulated run's state. */
typedef struct sim {
    const ref_args *a;
    size_t n;
    uint64_t *bounds; /* shard offsets */
    uint64_t *fb;     /* fragment -> first shard */
    int nfrag;
    float *theta, *mom, *g;
    long long *rounds; /* per fragment: outer steps applied */
    trainer *t[MAX_WORKERS];
    float *base[MAX_WORKERS];
    uint16_t *d16[MAX_WORKERS];
    float *d32[MAX_WORKERS];
    float *ef[MAX_WORKERS]; /* --error-feedback: each worker's kept quantization error */
    float *tent;            /* --away-tentative: a round's result with every worker */
    float *own;             /* --late: a worker's own parameters at the end of the round whose get failed */
    int count_all;          /* while computing it */
    float *x;               /* one shard's Δ before quantization */
    uint8_t *q;             /* and encoded */
} sim;

static size_t frag_lo(const sim *s, int f)
{
    return (size_t)s->bounds[s->fb[f]];
}
static size_t frag_hi(const sim *s, int f)
{
    return (size_t)s->bounds[s->fb[f + 1]];
}

/* Does worker w's Δ count in round r (--away)? Does it train in round r? (It trains the round it is
 * dropped from, and with --away-tentative the next one too: it learns only at the end.) */
static int counted(const ref_args *a, int w, long long r)
{
    return r < a->away_from[w] || r > a->away_to[w];
}

static int trains(const ref_args *a, int w, long long r)
{
    return r <= a->away_from[w] + a->away_tentative || r > a->away_to[w];
}

/* The inner steps worker w trains in round r: H, fewer in the round it was dropped from with --away-steps. */
static long long steps_in(const ref_args *a, int w, long long r)
{
    if (!trains(a, w, r)) return 0;
    return a->away_from[w] <= a->away_to[w] && r == a->away_from[w] ? a->away_n[w] : a->h[w];
}

/* Was worker w dropped from round r, learning it only from the tentative result (--away-tentative)? */
static int dropped_late(const ref_args *a, int w, long long r)
{
    return a->away_tentative && a->away_from[w] <= a->away_to[w] && r == a->away_from[w];
}

/* Worker w's Δ of shard k quantized (plus its kept error), and decoded into d32. */
static void take_shard_quantized(sim *s, int w, uint64_t k)
{
    size_t lo = (size_t)s->bounds[k], n = (size_t)(s->bounds[k + 1] - lo), bad;
    float *e = s->ef[w] + lo;
    for (size_t i = 0; i < n; i++) {
        s->x[i] = s->base[w][lo + i] - s->t[w]->params[lo + i];
        if (s->a->error_feedback) s->x[i] = s->x[i] + e[i];
    }
    if (codec_encode(s->a->codec, s->x, n, s->q, &bad) < 0) {
        fprintf(stderr, "ref_quadratic: worker %s diverged\n", s->a->ids[w]);
        exit(1);
    }
    codec_decode(s->a->codec, s->q, n, s->d32[w] + lo);
    if (s->a->error_feedback)
        for (size_t i = 0; i < n; i++) e[i] = s->x[i] - s->d32[w][lo + i];
}

/* Every worker's Δ of fragment f, as it would send it now. */
static void take_deltas(sim *s, int f)
{
    if (s->a->codec) {
        for (int w = 0; w < s->a->nworkers; w++)
            for (uint64_t k = s->fb[f]; k < s->fb[f + 1]; k++) take_shard_quantized(s, w, k);
        return;
    }
    for (int w = 0; w < s->a->nworkers; w++)
        for (size_t i = frag_lo(s, f); i < frag_hi(s, f); i++) {
            float d = s->base[w][i] - s->t[w]->params[i];
            if (s->a->bf16)
                s->d16[w][i] = bf16_from_f32(d);
            else
                s->d32[w][i] = d;
        }
}

/* The servers' outer step of fragment f from the Δ taken: mean in id order, SGD per shard. */
static void outer_fragment(sim *s, int f)
{
    size_t lo = frag_lo(s, f), len = frag_hi(s, f) - lo;
    outer_sum_zero(s->g + lo, len);
    double total = 0;
    uint32_t n = 0;
    for (int w = 0; w < s->a->nworkers; w++)
        if (s->count_all || counted(s->a, w, s->rounds[f])) {
            total += (double)(s->a->h[w] * s->a->ranks[w]);
            n++;
        }
    for (int w = 0; w < s->a->nworkers; w++) {
        if (!s->count_all && !counted(s->a, w, s->rounds[f])) continue;
        /* tokens of a quadratic round = its steps, of every rank of a group */
        float scale = (float)((double)(s->a->h[w] * s->a->ranks[w]) / total);
        if (s->a->weight_tokens && s->a->bf16)
            outer_sum_add_scaled_bf16(s->g + lo, s->d16[w] + lo, scale, len);
        else if (s->a->weight_tokens)
            outer_sum_add_scaled_f32(s->g + lo, s->d32[w] + lo, scale, len);
        else if (s->a->bf16)
            outer_sum_add_bf16(s->g + lo, s->d16[w] + lo, len);
        else
            outer_sum_add_f32(s->g + lo, s->d32[w] + lo, len);
    }
    if (!s->a->weight_tokens) outer_mean_finish(s->g + lo, len, n);
    int codec = s->a->codec ? s->a->codec : s->a->bf16 ? BLOB_BF16 : BLOB_F32;
    for (uint64_t k = s->fb[f]; k < s->fb[f + 1]; k++) {
        size_t off = (size_t)s->bounds[k], kl = (size_t)(s->bounds[k + 1] - s->bounds[k]), bad;
        if (s->a->download_update && codec_round_trip(codec, s->g + off, kl, s->q, &bad) != 0) {
            fprintf(stderr, "ref_quadratic: the mean is not finite\n");
            exit(1);
        }
        outer_sgd_step(s->theta + off, s->mom + off, s->rounds[f] == 0, s->g + off, kl, (float)s->a->outer_lr,
                       (float)s->a->outer_mu, s->a->nesterov);
    }
    s->rounds[f]++;
}

/* Workers take fragment f of the new global parameters (alpha mixing), and it becomes their base. */
static void adopt_fragment(sim *s, int f, double alpha)
{
    float a = (float)alpha, b = (float)(1.0 - alpha);
    for (int w = 0; w < s->a->nworkers; w++)
        for (size_t i = frag_lo(s, f); i < frag_hi(s, f); i++) {
            s->t[w]->params[i] = alpha == 0 ? s->theta[i] : a * s->t[w]->params[i] + b * s->theta[i];
            s->base[w][i] = s->theta[i];
        }
}

static void train_all(sim *s)
{
    char err[128];
    trainer_stats st;
    for (int w = 0; w < s->a->nworkers; w++) s->t[w]->step(s->t[w], &st, err, sizeof err);
}

/* Streaming DiLoCo: every interval, once D fragments are in flight (--in-flight D, default 1) apply the
 * oldest (sent D intervals ago), then send the next one. */
static void run_streaming(sim *s)
{
    long long interval = s->a->sync_every / s->nfrag;
    if (interval < 1) interval = 1;
    int depth = s->a->in_flight > 0 ? (int)s->a->in_flight : 1;
    int queue[RUNCONF_MAX_FRAGMENTS], nq = 0, next = 0; /* in flight, oldest first */
    for (long long step = 1; step <= s->a->steps; step++) {
        train_all(s);
        if (step % interval != 0) continue;
        for (; nq >= depth; nq--) {
            outer_fragment(s, queue[0]);
            adopt_fragment(s, queue[0], s->a->alpha);
            memmove(queue, queue + 1, (size_t)(nq - 1) * sizeof queue[0]);
        }
        take_deltas(s, next);
        queue[nq++] = next;
        next = (next + 1) % s->nfrag;
    }
    for (int i = 0; i < nq; i++) {
        outer_fragment(s, queue[i]); /* the last rounds complete when the workers leave */
        /* diloco_force_sync: apply the fragments in flight, then sync every fragment */
        if (s->a->final_sync) adopt_fragment(s, queue[i], s->a->alpha);
    }
    if (!s->a->final_sync) return;
    for (int f = 0; f < s->nfrag; f++) {
        take_deltas(s, f);
        outer_fragment(s, f);
        adopt_fragment(s, f, 0.0);
    }
}

/* --away-tentative: s->tent = the result of the coming outer step of fragment 0 with every worker's Δ (the
 * version served tentatively before the commit that dropped some), the run's own state unchanged. */
static void tentative_result(sim *s)
{
    float *theta = s->theta, *mom = s->mom, *mom_copy = malloc(s->n * sizeof(float));
    if (!mom_copy) {
        fprintf(stderr, "ref_quadratic: out of memory\n");
        exit(1);
    }
    memcpy(s->tent, theta, s->n * sizeof(float));
    memcpy(mom_copy, mom, s->n * sizeof(float));
    s->theta = s->tent;
    s->mom = mom_copy;
    s->count_all = 1;
    outer_fragment(s, 0);
    s->rounds[0]--;
    s->count_all = 0;
    s->theta = theta;
    s->mom = mom;
    free(mom_copy);
}

/* --late: worker w's get of round r - 1 failed: it trains H steps on from its own parameters (s->own), then
 * drops them and starts round r from round r - 1's result, its base. */
static void late_window(sim *s, int w)
{
    char err[128];
    trainer_stats st;
    memcpy(s->t[w]->params, s->own, s->n * sizeof(float));
    for (long long i = 0; i < s->a->h[w]; i++) s->t[w]->step(s->t[w], &st, err, sizeof err);
    memcpy(s->t[w]->params, s->base[w], s->n * sizeof(float));
}

/* --redo: worker w trains N inner steps of the round, then drops them: its parameters are its base again. */
static void redo_window(sim *s, int w)
{
    char err[128];
    trainer_stats st;
    for (long long i = 0; i < s->a->redo_n[w]; i++) s->t[w]->step(s->t[w], &st, err, sizeof err);
    memcpy(s->t[w]->params, s->base[w], s->n * sizeof(float));
}

static void run_plain(sim *s)
{
    char err[128];
    trainer_stats st;
    for (long long r = 0; r < s->a->rounds; r++) {
        for (int w = 0; w < s->a->nworkers; w++) {
            if (s->a->late_round[w] >= 0 && r == s->a->late_round[w] + 1) late_window(s, w);
            if (s->a->redo_round[w] == r) redo_window(s, w);
            for (long long i = 0; i < steps_in(s->a, w, r); i++) s->t[w]->step(s->t[w], &st, err, sizeof err);
        }
        take_deltas(s, 0);
        for (int w = 0; w < s->a->nworkers; w++) /* (s->own: one late worker a round) */
            if (s->a->late_round[w] == r) memcpy(s->own, s->t[w]->params, s->n * sizeof(float));
        int late = 0;
        for (int w = 0; w < s->a->nworkers; w++) late |= dropped_late(s->a, w, r);
        if (late) tentative_result(s);
        outer_fragment(s, 0);
        adopt_fragment(s, 0, 0.0);
        for (int w = 0; w < s->a->nworkers; w++)
            if (dropped_late(s->a, w, r)) { /* it trains on from the tentative result */
                memcpy(s->t[w]->params, s->tent, s->n * sizeof(float));
                memcpy(s->base[w], s->tent, s->n * sizeof(float));
            }
    }
}

int main(int argc, char **argv)
{
    ref_args a;
    char err[256];
    int prc = parse(argc, argv, &a);
    if (prc != 0) return opts_exit_status(prc);
    size_t n = (size_t)a.numel;
    uint64_t *bounds = NULL;
    int nb = 0;
    if (a.bounds) {
        if (runconf_parse_bounds_u64(a.bounds, &bounds, &nb, err, sizeof err) < 0 || nb != a.shards) {
            fprintf(stderr, "ref_quadratic: bad --bounds\n");
            return 2;
        }
    } else {
        bounds = calloc((size_t)a.shards + 1, sizeof *bounds);
        for (long long k = 0; k <= a.shards; k++) bounds[k] = (uint64_t)a.numel * (uint64_t)k / (uint64_t)a.shards;
    }
    sim sm = {.a = &a, .n = n, .bounds = bounds};
    if (a.frag_bounds) {
        if (runconf_parse_bounds_u64(a.frag_bounds, &sm.fb, &sm.nfrag, err, sizeof err) < 0) {
            fprintf(stderr, "ref_quadratic: bad --frag-bounds\n");
            return 2;
        }
    } else {
        sm.nfrag = 1;
        sm.fb = calloc(2, sizeof *sm.fb);
        sm.fb[1] = (uint64_t)a.shards;
    }
    sm.theta = malloc(n * sizeof(float));
    sm.mom = calloc(n, sizeof(float));
    sm.g = malloc(n * sizeof(float));
    sm.tent = malloc(n * sizeof(float));
    sm.own = malloc(n * sizeof(float));
    sm.rounds = calloc((size_t)sm.nfrag, sizeof *sm.rounds);
    sm.x = malloc(n * sizeof(float));
    sm.q = malloc(codec_bytes(BLOB_F32, n) + 1);
    float *theta = sm.theta;
    quadratic_init_params((uint64_t)a.seed, theta, n);
    for (int w = 0; w < a.nworkers; w++) {
        quadratic_options q;
        quadratic_options_default(&q);
        q.numel = n;
        q.seed = (uint64_t)a.seed;
        q.worker_id = a.ids[w];
        q.lr = (float)a.quad_lr;
        sm.t[w] = quadratic_trainer_create(&q, err, sizeof err);
        sm.base[w] = malloc(n * sizeof(float));
        sm.d16[w] = malloc(n * sizeof(uint16_t));
        sm.d32[w] = malloc(n * sizeof(float));
        sm.ef[w] = calloc(n, sizeof(float));
        if (!sm.t[w]) {
            fprintf(stderr, "ref_quadratic: %s\n", err);
            return 1;
        }
        memcpy(sm.t[w]->params, theta, n * sizeof(float));
        memcpy(sm.base[w], theta, n * sizeof(float));
    }
    if (sm.nfrag > 1)
        run_streaming(&sm);
    else
        run_plain(&sm);
    for (long long k = 0; k < a.shards; k++)
        printf("shard %lld %016" PRIx64 "\n", k, digest_f32(theta + bounds[k], (size_t)(bounds[k + 1] - bounds[k])));
    printf("all %016" PRIx64 "\n", digest_f32(theta, n));
    return 0;
}
