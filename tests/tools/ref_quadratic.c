/* ref_quadratic.c: the in-process reference of a sync DiLoCo run of the quadratic trainer.
 *
 * It applies exactly the math the distributed system must apply (the same trainer, the same bf16
 * cast, the same fixed-order mean and outer step from common/outer.h) to the same workers, with no
 * Redis, no network and no shard-servers, and prints the digests of the final global parameters:
 *
 *   shard <k> <digest>      one line per shard (as dl:{R}:shards k:digest)
 *   all <digest>            the whole vector (as the workers' sync log)
 *
 * The exactness and crash tests compare a real run against these lines: bit-identical or failed.
 *
 * usage: ref_quadratic --numel N --shards S --seed SEED --workers a,b,c --rounds R --sync-every H
 *                      [--outer-lr 0.7] [--outer-momentum 0.9] [--no-nesterov] [--no-bf16] [--quad-lr 0.01]
 *                      [--bounds b0,b1,...,bS]   (shard offsets; default: as coordinator init cuts them) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "outer.h"
#include "runconf.h"
#include "trainers/quadratic.h"
#include "util.h"

#define MAX_WORKERS 64

typedef struct ref_args {
    long long numel, shards, seed, rounds, sync_every;
    double outer_lr, outer_mu, quad_lr;
    int nesterov, bf16;
    char *ids[MAX_WORKERS];
    int nworkers;
    const char *bounds;
} ref_args;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int parse(int argc, char **argv, ref_args *a) {
    memset(a, 0, sizeof *a);
    a->shards = 1;
    a->outer_lr = 0.7;
    a->outer_mu = 0.9;
    a->quad_lr = 0.01;
    a->nesterov = 1;
    a->bf16 = 1;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--no-nesterov")) { a->nesterov = 0; continue; }
        if (!strcmp(f, "--no-bf16")) { a->bf16 = 0; continue; }
        if (!v) return -1;
        i++;
        if (!strcmp(f, "--numel")) parse_int(v, 1, INT64_MAX, &a->numel);
        else if (!strcmp(f, "--shards")) parse_int(v, 1, 4096, &a->shards);
        else if (!strcmp(f, "--seed")) parse_int(v, 0, INT64_MAX, &a->seed);
        else if (!strcmp(f, "--rounds")) parse_int(v, 0, 1000000, &a->rounds);
        else if (!strcmp(f, "--sync-every")) parse_int(v, 1, 1000000, &a->sync_every);
        else if (!strcmp(f, "--outer-lr")) parse_double(v, &a->outer_lr);
        else if (!strcmp(f, "--outer-momentum")) parse_double(v, &a->outer_mu);
        else if (!strcmp(f, "--quad-lr")) parse_double(v, &a->quad_lr);
        else if (!strcmp(f, "--bounds")) a->bounds = v;
        else if (!strcmp(f, "--workers")) {
            char *list = strdup(v);
            for (char *t = strtok(list, ","); t && a->nworkers < MAX_WORKERS; t = strtok(NULL, ",")) a->ids[a->nworkers++] = t;
        } else return -1;
    }
    if (a->numel <= 0 || a->nworkers == 0 || a->sync_every <= 0) return -1;
    qsort(a->ids, (size_t)a->nworkers, sizeof a->ids[0], cmp_str);
    return 0;
}

int main(int argc, char **argv) {
    ref_args a;
    char err[256];
    if (parse(argc, argv, &a) < 0) {
        fprintf(stderr, "usage: see the comment at the top of tests/tools/ref_quadratic.c\n");
        return 2;
    }
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
    float *theta = malloc(n * sizeof(float)), *mom = calloc(n, sizeof(float)), *g = malloc(n * sizeof(float));
    uint16_t *d16 = malloc(n * sizeof(uint16_t));
    float *d32 = malloc(n * sizeof(float));
    trainer *t[MAX_WORKERS];
    quadratic_init_params((uint64_t)a.seed, theta, n);
    for (int w = 0; w < a.nworkers; w++) {
        quadratic_options q;
        quadratic_options_default(&q);
        q.numel = n;
        q.seed = (uint64_t)a.seed;
        q.worker_id = a.ids[w];
        q.lr = (float)a.quad_lr;
        t[w] = quadratic_trainer_create(&q, err, sizeof err);
        if (!t[w]) {
            fprintf(stderr, "ref_quadratic: %s\n", err);
            return 1;
        }
        memcpy(t[w]->params, theta, n * sizeof(float));
    }
    for (long long r = 0; r < a.rounds; r++) {
        outer_sum_zero(g, n);
        for (int w = 0; w < a.nworkers; w++) {
            trainer_stats st;
            for (long long s = 0; s < a.sync_every; s++) t[w]->step(t[w], &st, err, sizeof err);
            if (a.bf16) {
                for (size_t i = 0; i < n; i++) d16[i] = bf16_from_f32(theta[i] - t[w]->params[i]);
                outer_sum_add_bf16(g, d16, n);
            } else {
                for (size_t i = 0; i < n; i++) d32[i] = theta[i] - t[w]->params[i];
                outer_sum_add_f32(g, d32, n);
            }
        }
        outer_mean_finish(g, n, (uint32_t)a.nworkers);
        for (long long k = 0; k < a.shards; k++) {
            size_t off = (size_t)bounds[k], len = (size_t)(bounds[k + 1] - bounds[k]);
            outer_sgd_step(theta + off, mom + off, r == 0, g + off, len, (float)a.outer_lr, (float)a.outer_mu,
                           a.nesterov);
        }
        for (int w = 0; w < a.nworkers; w++) memcpy(t[w]->params, theta, n * sizeof(float));
    }
    for (long long k = 0; k < a.shards; k++)
        printf("shard %lld %016" PRIx64 "\n", k, digest_f32(theta + bounds[k], (size_t)(bounds[k + 1] - bounds[k])));
    printf("all %016" PRIx64 "\n", digest_f32(theta, n));
    return 0;
}
