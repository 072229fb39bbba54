/* init.c: `coordinator init`, which creates a run.
 *
 * It loads the function library (FUNCTION LOAD REPLACE), builds the initial parameters (the model's
 * deterministic init from --seed, model/model.h: the same bytes a worker's trainer starts from), cuts
 * them into shards, writes each shard's version 0 as a snapshot blob dl:{R:k}:snap:0:0, and finally
 * calls dl_init, which creates the control keys atomically. The blobs are written first and are
 * harmless if init fails: nothing references them until dl_init. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "codec.h"
#include "checkpoint.h"
#include "coordinator.h"
#include "from_state.h"
#include "keys.h"
#include "layout.h"
#include "log.h"
#include "model.h"
#include "opts.h"
#include "outer.h"
#include "rconn.h"
#include "runconf.h"
#include "snapshot.h"
#include "util.h"
#include "version.h"

extern const char lua_library[];
extern const unsigned long lua_library_len;

typedef struct init_args {
    coord_common c;
    long long workers, min_workers, shards, fragments, numel, seed, snapshot_every, dylu_base, min_replicas;
    long long dn_buffer, max_staleness, weight_ref;
    const char *dn_variant, *weight_by, *compress, *download;
    double outer_lr, outer_momentum, heartbeat_timeout;
    int nesterov, force, async, dylu;
    const char *trainer;
    gpt_config gpt;
    const char *from_checkpoint;
    const char *from_state;      /* --from-state: version 0 and the layout are this safetensors file's */
    int reset_momentum;          /* --reset-momentum: take only the parameters from the checkpoint */
    int given[64];               /* given[k]: option k of the table was on the command line (checkpoint */
    const char *given_names[64]; /* values fill the rest); given_names[k] is its long name */
    char ck_trainer[32];
    char ck_dn_variant[16];
} init_args;

#define ASYNC_OUTER_MOMENTUM 0.5 /* the default outer momentum of an async run */

static int flag_given(const init_args *a, const char *flag)
{
    for (int i = 0; i < 64 && a->given_names[i]; i++)
        if (!strcmp(a->given_names[i], flag + 2)) return a->given[i];
    return 0;
}

static void init_usage(FILE *f)
{
    fprintf(
        f,
        "usage: bin/coordinator init --redis URL --run NAME [options]\n"
        "\n"
        "Creates run NAME: loads the function library, writes version 0 of the parameters.\n"
        "\n" REDIS_URL_HELP
        "  -n, --workers N            workers a barrier waits for at start and when every worker left (default 2)\n"
        "  --min-workers N            never wait for fewer than N workers (default 1)\n"
        "  --shards S                 shards of the parameter vector (default 8)\n"
        "  --fragments F              Streaming DiLoCo fragments (default 1)\n"
        "  --trainer NAME             gpt (default) or quadratic\n"
        "  --numel N                  (quadratic) number of parameters (default 1000000)\n"
        "  --layers --heads --dim --ctx --vocab   (gpt) model shape (default 2 4 128 128 256)\n"
        "  --seed S                   initial parameters seed (default 0)\n"
        "  --outer-lr LR              outer SGD learning rate (default 0.7)\n"
        "  --outer-momentum MU        outer momentum (default 0.9; 0.5 with --async)\n"
        "  --no-nesterov              plain momentum instead of Nesterov\n"
        "  --heartbeat-timeout S      evict workers silent for S seconds (default 120; 0 = never)\n"
        "  --async                    async DiLoCo: no barrier, each submission applied in its Redis order\n"
        "  --dn-buffer-size N         (async) Delayed Nesterov every N submissions (default 0 = off)\n"
        "  --dn-variant V             (async) paper (Async Local-SGD, default) or forgather\n"
        "  --max-staleness K          (async) reject submissions more than K versions stale (0 = no limit)\n"
        "  --weight-by none|tokens    weight pseudo-gradients by the tokens behind them (default none)\n"
        "  --weight-ref-tokens N      (async, --weight-by tokens) a submission of N tokens has weight 1\n"
        "  --compress C               codec of pseudo-gradients on the wire: bf16 (default; workers may send\n"
        "                             fp32), fp32, int8 or int4 (blocks of 256 with a scale; docs/compression.md)\n"
        "  --download params|update   what a sync round sends back: the new parameters in fp32 (default) or\n"
        "                             the averaged pseudo-gradient in the --compress codec, which workers\n"
        "                             apply with their own copy of the outer momentum (sync, 1 fragment)\n"
        "  --dylu                     Dynamic Local Updates: each worker's H follows its speed\n"
        "  --dylu-base-sync-every H   H of the fastest worker under DyLU (default 500)\n"
        "  --snapshot-every K         durable snapshot every K versions, log in between (default 8)\n"
        "  --min-replicas N           a commit counts as durable once N Redis replicas have it (WAIT);\n"
        "                             for Redis with replicas and failover (docs/deploy.md; default 0)\n"
        "  --from-checkpoint FILE     start from a checkpoint (`coordinator checkpoint save`): its parameters\n"
        "                             and outer momentum (and Delayed Nesterov buffer) become version 0;\n"
        "                             trainer, model, shards, fragments, seed, outer lr/momentum/nesterov,\n"
        "                             snapshot-every (and, with --async, the DN settings) default to the\n"
        "                             checkpoint's; a model that does not match it is an error\n"
        "  --reset-momentum           (with --from-checkpoint) start the outer momentum (and DN buffer) afresh\n"
        "  --from-state FILE          start from a model's own weights: the floating-point tensors of a safetensors\n"
        "                             file (e.g. rediloco.save_state(model, FILE)), in file order, are the run's\n"
        "                             parameters and layout (trainer \"state\", for PyTorch workers); with --trainer\n"
        "                             and model flags, the file must hold exactly that model's tensors\n"
        "  --force                    replace an existing run of that name\n");
}

/* --from-checkpoint: what the command line left open comes from the checkpoint's metadata. */
static int adopt_checkpoint(init_args *a)
{
    checkpoint ck;
    char err[1024];
    if (checkpoint_read(a->from_checkpoint, 0, &ck, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator init: --from-checkpoint: %s\n", err);
        return -1;
    }
    if (!flag_given(a, "--trainer")) {
        snprintf(a->ck_trainer, sizeof a->ck_trainer, "%s", ck.trainer);
        a->trainer = a->ck_trainer;
    }
    model_spec ms; /* each model flag not given comes from the checkpoint */
    if (!strcmp(a->trainer, ck.trainer) && model_spec_parse(ck.trainer, ck.model, &ms, NULL, 0) == 0) {
        if (!strcmp(ms.kind, "quadratic") && !flag_given(a, "--numel")) a->numel = (long long)ms.numel;
        if (!strcmp(ms.kind, "gpt")) {
            if (!flag_given(a, "--layers")) a->gpt.layers = ms.gpt.layers;
            if (!flag_given(a, "--heads")) a->gpt.heads = ms.gpt.heads;
            if (!flag_given(a, "--dim")) a->gpt.dim = ms.gpt.dim;
            if (!flag_given(a, "--ctx")) a->gpt.ctx = ms.gpt.ctx;
            if (!flag_given(a, "--vocab")) a->gpt.vocab = ms.gpt.vocab;
        }
    }
    if (!flag_given(a, "--shards")) a->shards = ck.nshards;
    if (!flag_given(a, "--fragments")) a->fragments = ck.nfragments;
    if (!flag_given(a, "--seed")) a->seed = (long long)ck.seed;
    if (!flag_given(a, "--snapshot-every") && ck.snapshot_every > 0) a->snapshot_every = ck.snapshot_every;
    if (!flag_given(a, "--outer-lr")) a->outer_lr = ck.outer_lr;
    if (!flag_given(a, "--outer-momentum")) a->outer_momentum = ck.outer_momentum;
    if (!flag_given(a, "--no-nesterov")) a->nesterov = ck.nesterov;
    /* Delayed Nesterov is an async setting: an async run takes the checkpoint's unless told otherwise
     * (make_initial_checkpoint refuses a DN buffer the new run could not continue) */
    if (a->async && ck.dn_buffer > 0) {
        if (!flag_given(a, "--dn-buffer-size")) a->dn_buffer = ck.dn_buffer;
        if (!flag_given(a, "--dn-variant")) {
            snprintf(a->ck_dn_variant, sizeof a->ck_dn_variant, "%s", ck.dn_variant);
            a->dn_variant = a->ck_dn_variant;
        }
    }
    checkpoint_free(&ck);
    return 0;
}

static int parse_compress(const char *v, void *dest)
{
    if (!codec_parse(v)) return -1;
    *(const char **)dest = v;
    return 0;
}

/* The option table of `init`; entry k records in a->given[k] whether it was on the command line. */
static int parse_init_flags(int argc, char **argv, init_args *a)
{
    static const char *weight_by[] = {"none", "tokens"}, *download[] = {"params", "update"},
                      *dn_variant[] = {"paper", "forgather"};
    int weight_idx = -1, download_idx = -1, dn_idx = -1;
    opt_spec specs[] = {
        {.name = "redis", .kind = OPT_STRING, .dest = &a->c.redis_url},
        {.name = "redis-file", .kind = OPT_STRING, .dest = &a->c.redis_file},
        {.name = "run", .kind = OPT_STRING, .dest = &a->c.run},
        {.name = "no-nesterov", .kind = OPT_CLEAR, .dest = &a->nesterov},
        {.name = "dylu", .kind = OPT_FLAG, .dest = &a->dylu},
        {.name = "async", .kind = OPT_FLAG, .dest = &a->async},
        {.name = "force", .kind = OPT_FLAG, .dest = &a->force},
        {.name = "reset-momentum", .kind = OPT_FLAG, .dest = &a->reset_momentum},
        {.name = "workers", .alias = 'n', .kind = OPT_LLONG, .dest = &a->workers, .lo = 1, .hi = 100000},
        {.name = "min-workers", .kind = OPT_LLONG, .dest = &a->min_workers, .lo = 1, .hi = 100000},
        {.name = "shards", .kind = OPT_LLONG, .dest = &a->shards, .lo = 1, .hi = RUNCONF_MAX_SHARDS},
        {.name = "fragments", .kind = OPT_LLONG, .dest = &a->fragments, .lo = 1, .hi = RUNCONF_MAX_FRAGMENTS},
        {.name = "numel", .kind = OPT_LLONG, .dest = &a->numel, .lo = 1, .hi = 4000000000LL},
        {.name = "seed", .kind = OPT_LLONG, .dest = &a->seed, .lo = 0, .hi = INT64_MAX},
        {.name = "snapshot-every", .kind = OPT_LLONG, .dest = &a->snapshot_every, .lo = 1, .hi = 1000000},
        {.name = "dylu-base-sync-every", .kind = OPT_LLONG, .dest = &a->dylu_base, .lo = 1, .hi = 100000000},
        {.name = "dn-buffer-size", .kind = OPT_LLONG, .dest = &a->dn_buffer, .lo = 0, .hi = 1000000},
        {.name = "max-staleness", .kind = OPT_LLONG, .dest = &a->max_staleness, .lo = 0, .hi = 1000000000},
        {.name = "weight-ref-tokens", .kind = OPT_LLONG, .dest = &a->weight_ref, .lo = 1, .hi = INT64_MAX},
        {.name = "min-replicas", .kind = OPT_LLONG, .dest = &a->min_replicas, .lo = 0, .hi = RUNCONF_MAX_REPLICAS},
        {.name = "layers",
         .kind = OPT_INT,
         .dest = &a->gpt.layers,
         .lo = 1,
         .hi = 1 << 24,
         .wants = "a positive integer"},
        {.name = "heads",
         .kind = OPT_INT,
         .dest = &a->gpt.heads,
         .lo = 1,
         .hi = 1 << 24,
         .wants = "a positive integer"},
        {.name = "dim", .kind = OPT_INT, .dest = &a->gpt.dim, .lo = 1, .hi = 1 << 24, .wants = "a positive integer"},
        {.name = "ctx", .kind = OPT_INT, .dest = &a->gpt.ctx, .lo = 1, .hi = 1 << 24, .wants = "a positive integer"},
        {.name = "vocab",
         .kind = OPT_INT,
         .dest = &a->gpt.vocab,
         .lo = 1,
         .hi = 1 << 24,
         .wants = "a positive integer"},
        {.name = "outer-lr",
         .kind = OPT_DOUBLE,
         .dest = &a->outer_lr,
         .min = 0,
         .max = HUGE_VAL,
         .wants = "a non-negative number"},
        {.name = "outer-momentum",
         .kind = OPT_DOUBLE,
         .dest = &a->outer_momentum,
         .min = 0,
         .max = HUGE_VAL,
         .wants = "a non-negative number"},
        {.name = "heartbeat-timeout",
         .kind = OPT_DOUBLE,
         .dest = &a->heartbeat_timeout,
         .min = 0,
         .max = HUGE_VAL,
         .wants = "a non-negative number"},
        {.name = "trainer", .kind = OPT_STRING, .dest = &a->trainer},
        {.name = "weight-by", .kind = OPT_CHOICE, .dest = &weight_idx, .choices = "none|tokens"},
        {.name = "compress",
         .kind = OPT_CUSTOM,
         .dest = &a->compress,
         .parse = parse_compress,
         .wants = "bf16, fp32, int8 or int4"},
        {.name = "download", .kind = OPT_CHOICE, .dest = &download_idx, .choices = "params|update"},
        {.name = "dn-variant", .kind = OPT_CHOICE, .dest = &dn_idx, .choices = "paper|forgather"},
        {.name = "from-checkpoint", .kind = OPT_STRING, .dest = &a->from_checkpoint},
        {.name = "from-state", .kind = OPT_STRING, .dest = &a->from_state},
        {0},
    };
    _Static_assert(sizeof specs / sizeof specs[0] <= sizeof a->given / sizeof a->given[0], "init: given[] too small");
    for (size_t k = 0; specs[k].name; k++) specs[k].given = &a->given[k];
    char err[512];
    int rc = opts_parse(specs, argc, argv, 0, NULL, NULL, err, sizeof err);
    if (rc == 1) {
        init_usage(stdout);
        exit(0);
    }
    if (rc < 0) {
        fprintf(stderr, "coordinator init: %s\n", err);
        return -1;
    }
    for (size_t k = 0; specs[k].name; k++) a->given_names[k] = specs[k].name;
    if (weight_idx >= 0) a->weight_by = weight_by[weight_idx];
    if (download_idx >= 0) a->download = download[download_idx];
    if (dn_idx >= 0) a->dn_variant = dn_variant[dn_idx];
    return 0;
}

static int parse_init(int argc, char **argv, init_args *a)
{
    memset(a, 0, sizeof *a);
    a->workers = 2;
    a->min_workers = 1;
    a->shards = 8;
    a->fragments = 1;
    a->numel = 1000000;
    a->snapshot_every = 8;
    a->outer_lr = 0.7;
    a->outer_momentum = 0.9;
    a->heartbeat_timeout = 120;
    a->nesterov = 1;
    a->trainer = "gpt";
    a->gpt = (gpt_config){2, 4, 128, 128, 256};
    if (parse_init_flags(argc, argv, a) < 0) return -1;
    if (a->reset_momentum && !a->from_checkpoint) {
        fprintf(stderr, "coordinator init: --reset-momentum goes with --from-checkpoint\n");
        return -1;
    }
    if (a->from_checkpoint && a->from_state) {
        fprintf(stderr, "coordinator init: --from-checkpoint and --from-state exclude each other\n");
        return -1;
    }
    if (a->from_state && !flag_given(a, "--trainer")) a->trainer = "state";
    /* async applies each submission on its own, one round stale: that staleness already acts as momentum,
     * and 0.9 on top overshoots (docs/quality.md measures it) */
    if (a->async && !a->from_checkpoint && !flag_given(a, "--outer-momentum")) a->outer_momentum = ASYNC_OUTER_MOMENTUM;
    if (a->from_checkpoint && adopt_checkpoint(a) < 0) return -1;
    if (a->outer_lr <= 0 || a->outer_momentum >= 1) {
        fprintf(stderr, "coordinator init: --outer-lr must be > 0 and --outer-momentum in [0, 1)\n");
        return -1;
    }
    if (a->download && !strcmp(a->download, "update") && (a->async || a->fragments > 1)) {
        fprintf(stderr, "coordinator init: --download update is for sync runs of one fragment (an async run or "
                        "Streaming DiLoCo downloads parameters: leave --download at params)\n");
        return -1;
    }
    if (a->min_workers > a->workers) a->workers = a->min_workers;
    if (a->async && a->weight_by && !strcmp(a->weight_by, "tokens") && a->weight_ref <= 0) {
        fprintf(stderr, "coordinator init: async --weight-by tokens needs --weight-ref-tokens N (the tokens of a "
                        "normal submission, e.g. sync_every * batch * seq): each submission is scaled by tokens / N\n");
        return -1;
    }
    return 0;
}

/* ---- initial parameters and their layout ------------------------------------------------------ */

typedef struct initial_params {
    float *params;
    uint64_t numel;
    model_tensor *tensors;
    int ntensors;
    char model[256];
    float *mom;         /* outer momentum to start from (--from-checkpoint), or NULL */
    float *dnbuf;       /* Delayed Nesterov buffer to start from (--from-checkpoint of a DN run), or NULL */
    uint64_t dn_t0;     /* ... and the DN submissions applied before it (config dn_t0) */
    int64_t ck_version; /* the checkpoint's version, -1 without one */
    char ck_run[80];
} initial_params;

static int make_initial_seed(const init_args *a, initial_params *ip, char *err, size_t errlen);

/* A run from a model's state (trainer "state") has no model to rebuild its layout from: it is the
 * checkpoint's own (its metadata). */
static int layout_of_checkpoint(const checkpoint *ck, initial_params *ip, char *err, size_t errlen)
{
    char e2[512];
    if (!ck->layout || layout_parse_json(ck->layout, ck->numel, &ip->tensors, &ip->ntensors, e2, sizeof e2) < 0) {
        err_set(err, errlen, "--from-checkpoint: a run from a model's state takes its layout from the checkpoint: %s",
                ck->layout ? e2 : "this one has none");
        return -1;
    }
    ip->numel = ck->numel;
    snprintf(ip->model, sizeof ip->model, "%s", ck->model);
    return 0;
}

/* The run's layout as requested, then the checkpoint's values in place of the seeded ones. */
static int make_initial_checkpoint(const init_args *a, initial_params *ip, char *err, size_t errlen)
{
    memset(ip, 0, sizeof *ip); /* create_run frees it whatever happens */
    ip->ck_version = -1;
    checkpoint ck;
    char e2[1024];
    if (checkpoint_read(a->from_checkpoint, 1, &ck, e2, sizeof e2) < 0) {
        err_set(err, errlen, "--from-checkpoint: %s", e2);
        return -1;
    }
    if ((!strcmp(a->trainer, "state") ? layout_of_checkpoint(&ck, ip, err, errlen)
                                      : make_initial_seed(a, ip, err, errlen)) < 0) {
        checkpoint_free(&ck);
        return -1;
    }
    if (strcmp(ck.trainer, a->trainer) != 0 || ck.numel != ip->numel || strcmp(ck.model, ip->model) != 0) {
        err_set(err, errlen,
                "--from-checkpoint %s: layout mismatch: the checkpoint holds a %s model (%s, %" PRIu64
                " parameters), this run asks for a %s model (%s, %" PRIu64
                " parameters); drop the trainer and model flags "
                "to take the checkpoint's, or use a checkpoint of this model",
                a->from_checkpoint, ck.trainer, ck.model, ck.numel, a->trainer, ip->model, ip->numel);
        checkpoint_free(&ck);
        return -1;
    }
    free(ip->params);
    ip->params = ck.params;
    ck.params = NULL;
    if (ck.has_mom && !a->reset_momentum) {
        ip->mom = ck.mom;
        ck.mom = NULL;
    }
    /* A DN buffer holds the submissions since the last momentum step, counted against the every-N
     * schedule that dn_t fixes: only a run with the same N and variant can continue it. */
    const char *dnv = a->dn_variant ? a->dn_variant : "paper";
    if (ck.dn_buffer > 0 && !a->reset_momentum) {
        if (!a->async || a->dn_buffer != ck.dn_buffer || strcmp(dnv, ck.dn_variant) != 0) {
            err_set(err, errlen,
                    "--from-checkpoint %s: the checkpoint holds a Delayed Nesterov buffer (async, "
                    "--dn-buffer-size %d --dn-variant %s, %" PRIu64 " submissions applied), which this run (%s, "
                    "--dn-buffer-size %lld --dn-variant %s) cannot continue: add --async (the DN settings then come "
                    "from the checkpoint), or --reset-momentum to start the outer optimizer afresh",
                    a->from_checkpoint, ck.dn_buffer, ck.dn_variant, ck.dn_t, a->async ? "async" : "sync", a->dn_buffer,
                    dnv);
            checkpoint_free(&ck);
            return -1;
        }
        ip->dnbuf = ck.dnbuf;
        ck.dnbuf = NULL;
        ip->dn_t0 = ck.dn_t;
    }
    ip->ck_version = ck.version;
    snprintf(ip->ck_run, sizeof ip->ck_run, "%s", ck.run);
    checkpoint_free(&ck);
    return 0;
}

/* --from-state: the file's values; its layout, or the requested model's when it is exactly that. */
static int make_initial_state(const init_args *a, initial_params *ip, char *err, size_t errlen)
{
    from_state fs;
    memset(ip, 0, sizeof *ip); /* create_run frees it whatever happens */
    if (from_state_read(a->from_state, &fs, err, errlen) < 0) return -1;
    if (strcmp(a->trainer, "state") != 0) {
        char what[300];
        if (make_initial_seed(a, ip, err, errlen) < 0) goto fail;
        snprintf(what, sizeof what, "the %s model %s", a->trainer, ip->model);
        if (from_state_match(&fs, ip->tensors, ip->ntensors, what, err, errlen) < 0) goto fail;
        free(ip->params);
        ip->params = fs.params;
        fs.params = NULL;
        from_state_free(&fs);
        return 0;
    }
    ip->ck_version = -1;
    ip->params = fs.params;
    ip->numel = fs.numel;
    ip->tensors = fs.tensors;
    ip->ntensors = fs.ntensors;
    snprintf(ip->model, sizeof ip->model, "--tensors %d", fs.ntensors);
    return 0;
fail:
    from_state_free(&fs);
    return -1;
}

static int make_initial(const init_args *a, initial_params *ip, char *err, size_t errlen)
{
    if (a->from_checkpoint) return make_initial_checkpoint(a, ip, err, errlen);
    if (a->from_state) return make_initial_state(a, ip, err, errlen);
    return make_initial_seed(a, ip, err, errlen);
}

static int make_initial_seed(const init_args *a, initial_params *ip, char *err, size_t errlen)
{
    memset(ip, 0, sizeof *ip);
    ip->ck_version = -1;
    model_spec ms = {.kind = a->trainer, .gpt = a->gpt, .numel = (size_t)a->numel};
    size_t n;
    if (model_layout(&ms, &ip->tensors, &ip->ntensors, &n, err, errlen) < 0) return -1;
    ip->numel = n;
    if (!(ip->params = malloc(n * sizeof(float)))) {
        err_set(err, errlen, "out of memory for the initial parameters");
        return -1;
    }
    if (model_init_params(&ms, (uint64_t)a->seed, ip->params, n, err, errlen) < 0) return -1;
    model_spec_format(&ms, ip->model, sizeof ip->model);
    return 0;
}

static void free_initial(initial_params *ip)
{
    free(ip->params);
    free(ip->mom);
    free(ip->dnbuf);
    free(ip->tensors);
}

/* ---- Redis ---------------------------------------------------------------------------------------- */

/* FUNCTION LOAD REPLACE on one server (every master of a cluster: a function runs where its keys are). */
static int load_on_node(redisContext *node, const char *addr, void *arg, char *err, size_t errlen)
{
    (void)arg;
    redisReply *r = redisCommand(node, "FUNCTION LOAD REPLACE %b", lua_library, (size_t)lua_library_len);
    int ok = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (ok < 0) err_set(err, errlen, "%s: %s", addr, r ? r->str : node->errstr);
    if (r) freeReplyObject(r);
    return ok;
}

int coord_load_library(rconn *rc, char *err, size_t errlen)
{
    return rconn_each_master(rc, load_on_node, NULL, err, errlen);
}

/* Delete every key of the run on one node (SCAN, so a large keyspace is not blocked; a cluster's
 * keys are on the node that SCAN found them on). */
static int delete_on_node(redisContext *node, const char *addr, void *arg, char *err, size_t errlen)
{
    const char *run = ((const char **)arg)[0];
    long *deleted = (long *)((const char **)arg)[1];
    char patterns[2][160];
    snprintf(patterns[0], sizeof patterns[0], "dl:{%s}*", run);
    snprintf(patterns[1], sizeof patterns[1], "dl:{%s:*", run);
    for (int p = 0; p < 2; p++) {
        char cursor[32] = "0";
        do {
            redisReply *r = redisCommand(node, "SCAN %s MATCH %s COUNT 1000", cursor, patterns[p]);
            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
                err_set(err, errlen, "%s: SCAN: %s", addr, r && r->type == REDIS_REPLY_ERROR ? r->str : node->errstr);
                if (r) freeReplyObject(r);
                return -1;
            }
            snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
            for (size_t i = 0; i < r->element[1]->elements; i++) {
                redisReply *d = redisCommand(node, "DEL %s", r->element[1]->element[i]->str);
                if (d) freeReplyObject(d);
                (*deleted)++;
            }
            freeReplyObject(r);
        } while (strcmp(cursor, "0") != 0);
    }
    return 0;
}

static int delete_run(rconn *rc, const char *run, char *err, size_t errlen)
{
    long deleted = 0;
    const void *arg[2] = {run, &deleted};
    if (rconn_each_master(rc, delete_on_node, arg, err, errlen) < 0) return -1;
    log_info("--force: deleted %ld keys of run '%s'", deleted, run);
    return 0;
}

static int run_exists(rconn *rc, const char *run, int *exists, char *err, size_t errlen)
{
    char key[KEY_MAX];
    redisReply *r = rconn_command(rc, "EXISTS %s", key_run(key, sizeof key, run, "config"));
    if (rconn_reply_error(rc, r, err, errlen) < 0) {
        if (r) freeReplyObject(r);
        return -1;
    }
    *exists = r->integer > 0;
    freeReplyObject(r);
    return 0;
}

static void random_secret(char *out, size_t cap)
{
    unsigned char b[16] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(b, 1, sizeof b, f) != sizeof b) memset(b, 0, sizeof b);
        fclose(f);
    }
    for (size_t i = 0; i < sizeof b && 2 * i + 2 < cap; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* dl_init with the config and state fields and one digest per shard. */
static int call_dl_init(rconn *rc, const init_args *a, const initial_params *ip, const uint64_t *sb, const uint64_t *fb,
                        char digests[][17], char *err, size_t errlen)
{
    static char sbuf[RUNCONF_MAX_SHARDS * 12], fbuf[RUNCONF_MAX_FRAGMENTS * 8];
    char numel[32], shards[16], frags[16], seed[32], snap[16], secret[40] = "";
    char target[16], minw[16], lr[32], mu[32], nest[4], hbt[32], dylu[4], dbase[24], dnb[24], stale[24], wref[24];
    char dnt0[24], minrep[16];
    char *layout = layout_json(ip->tensors, ip->ntensors);
    if (!layout) {
        err_set(err, errlen, "out of memory for the layout");
        return -1;
    }
    runconf_format_bounds_u64(sb, (int)a->shards, sbuf, sizeof sbuf);
    runconf_format_bounds_u64(fb, (int)a->fragments, fbuf, sizeof fbuf);
    snprintf(numel, sizeof numel, "%" PRIu64, ip->numel);
    snprintf(shards, sizeof shards, "%lld", a->shards);
    snprintf(frags, sizeof frags, "%lld", a->fragments);
    snprintf(seed, sizeof seed, "%lld", a->seed);
    snprintf(snap, sizeof snap, "%lld", a->snapshot_every);
    random_secret(secret, sizeof secret);
    snprintf(target, sizeof target, "%lld", a->workers);
    snprintf(minw, sizeof minw, "%lld", a->min_workers);
    snprintf(lr, sizeof lr, "%.9g", a->outer_lr);
    snprintf(mu, sizeof mu, "%.9g", a->outer_momentum);
    snprintf(nest, sizeof nest, "%d", a->nesterov);
    snprintf(hbt, sizeof hbt, "%lld", (long long)(a->heartbeat_timeout * 1000));
    snprintf(dylu, sizeof dylu, "%d", a->dylu);
    snprintf(dbase, sizeof dbase, "%lld", a->dylu_base > 0 ? a->dylu_base : 500);
    snprintf(dnb, sizeof dnb, "%lld", a->dn_buffer);
    snprintf(dnt0, sizeof dnt0, "%" PRIu64, ip->dn_t0);
    snprintf(stale, sizeof stale, "%lld", a->max_staleness);
    snprintf(wref, sizeof wref, "%lld", a->weight_ref > 0 ? a->weight_ref : 1);
    snprintf(minrep, sizeof minrep, "%lld", a->min_replicas);
    char key[KEY_MAX];
    key_run(key, sizeof key, a->c.run, "config");
    const char *fixed[] = {"FCALL",
                           "dl_init",
                           "1",
                           key,
                           "20",
                           "layout",
                           layout,
                           "numel",
                           numel,
                           "shards",
                           shards,
                           "fragments",
                           frags,
                           "mode",
                           a->async ? "async" : "sync",
                           "shard_bounds",
                           sbuf,
                           "frag_bounds",
                           fbuf,
                           "trainer",
                           a->trainer,
                           "model",
                           ip->model,
                           "seed",
                           seed,
                           "snapshot_every",
                           snap,
                           "secret",
                           secret,
                           "dn_buffer",
                           dnb,
                           "dn_variant",
                           a->dn_variant ? a->dn_variant : "paper",
                           "dn_t0",
                           dnt0,
                           "weight_by",
                           a->weight_by ? a->weight_by : "none",
                           "weight_ref_tokens",
                           wref,
                           "compress",
                           a->compress ? a->compress : "bf16",
                           "min_replicas",
                           minrep,
                           "download",
                           a->download ? a->download : "params",
                           "10",
                           "target_workers",
                           target,
                           "expected_workers",
                           target,
                           "min_workers",
                           minw,
                           "outer_lr",
                           lr,
                           "outer_momentum",
                           mu,
                           "nesterov",
                           nest,
                           "heartbeat_timeout_ms",
                           hbt,
                           "dylu",
                           dylu,
                           "dylu_base_sync_every",
                           dbase,
                           "max_staleness",
                           stale,
                           shards};
    size_t nfixed = sizeof fixed / sizeof fixed[0], argc = nfixed + (size_t)a->shards;
    const char **argv = calloc(argc + 2, sizeof *argv);
    if (!argv) {
        free(layout);
        err_set(err, errlen, "out of memory");
        return -1;
    }
    memcpy(argv, fixed, sizeof fixed);
    for (long long k = 0; k < a->shards; k++) argv[nfixed + (size_t)k] = digests[k];
    redisReply *r = rconn_command_argv(rc, (int)argc, argv, NULL);
    free(argv);
    free(layout);
    int ok = rconn_reply_error(rc, r, err, errlen);
    if (r) freeReplyObject(r);
    return ok;
}

static int create_run(rconn *rc, const init_args *a, char *err, size_t errlen)
{
    initial_params ip;
    uint64_t *sb = calloc((size_t)a->shards + 1, sizeof *sb), fb[RUNCONF_MAX_FRAGMENTS + 1];
    char(*digests)[17] = calloc((size_t)a->shards, sizeof *digests);
    int rc_ = -1;
    if (!sb || !digests) {
        err_set(err, errlen, "out of memory");
        goto done;
    }
    if (make_initial(a, &ip, err, errlen) < 0) goto done_ip;
    if (layout_cut_shards(ip.tensors, ip.ntensors, ip.numel, (int)a->shards, sb, err, errlen) < 0) goto done_ip;
    if (layout_cut_fragments((int)a->shards, (int)a->fragments, fb, err, errlen) < 0) goto done_ip;
    for (int k = 0; k < a->shards; k++)
        if (coord_write_snapshot(rc, a->c.run, k, 0, 0, ip.params + sb[k], ip.mom ? ip.mom + sb[k] : NULL,
                                 ip.dnbuf ? ip.dnbuf + sb[k] : NULL, sb[k + 1] - sb[k], 0, digests[k], err, errlen) < 0)
            goto done_ip;
    if (call_dl_init(rc, a, &ip, sb, fb, digests, err, errlen) < 0) goto done_ip;
    printf("run '%s' created: %s trainer (%s), %" PRIu64 " parameters in %lld shards, %lld fragment(s), "
           "waiting for %lld worker(s), outer lr %g momentum %g%s\n",
           a->c.run, a->trainer, ip.model, ip.numel, a->shards, a->fragments, a->workers, a->outer_lr,
           a->outer_momentum, a->nesterov ? " nesterov" : "");
    if (a->from_checkpoint)
        printf("version 0 = checkpoint %s (run '%s' at version %" PRId64 "), %s%s\n", a->from_checkpoint, ip.ck_run,
               ip.ck_version, ip.mom ? "with its outer momentum" : "outer momentum starts afresh",
               ip.dnbuf ? ", with its Delayed Nesterov buffer" : "");
    if (a->from_state)
        printf("version 0 = the %d tensors of %s (layout stored in the run's config)\n", ip.ntensors, a->from_state);
    rc_ = 0;
done_ip:
    free_initial(&ip);
done:
    free(sb);
    free(digests);
    return rc_;
}

int cmd_init(int argc, char **argv)
{
    init_args a;
    if (parse_init(argc, argv, &a) < 0) return 2;
    rconn *rc = coord_connect(&a.c);
    if (!rc) return 1;
    char err[512];
    int exists = 0, status = 1;
    if (coord_load_library(rc, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator init: loading the function library: %s\n", err);
        goto done;
    }
    if (run_exists(rc, a.c.run, &exists, err, sizeof err) < 0) goto fail;
    if (exists && !a.force) {
        fprintf(stderr,
                "coordinator init: run '%s' already exists; choose another --run or add --force to "
                "replace it\n",
                a.c.run);
        goto done;
    }
    if (exists && delete_run(rc, a.c.run, err, sizeof err) < 0) goto fail;
    if (create_run(rc, &a, err, sizeof err) < 0) goto fail;
    status = 0;
    goto done;
fail:
    fprintf(stderr, "coordinator init: %s\n", err);
done:
    rconn_free(rc);
    return status;
}
