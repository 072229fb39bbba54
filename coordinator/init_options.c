/* init_options.c: `coordinator init`'s command line: the flags and their checks (through
 * common/base/opts), the usage text, and --from-checkpoint's values for the flags not given. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/opts.h"
#include "base/util.h"
#include "base/version.h"
#include "checkpoint.h"
#include "coordinator.h"
#include "format/blob.h"
#include "format/keys.h"
#include "format/runconf.h"
#include "from_state.h"
#include "init.h"
#include "layout.h"
#include "math/codec.h"
#include "math/codec_sparse.h"
#include "math/codec_topk.h"
#include "math/outer.h"
#include "model.h"
#include "redis/rconn.h"
#include "snapshot.h"

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
        "\n" COORD_HELP
        "  -n, --workers N           workers a barrier waits for at start and when every worker left (default 2)\n"
        "  --min-workers N           never wait for fewer than N workers (default 1)\n"
        "  --shards S                shards of the parameter vector (default 8)\n"
        "  --fragments F             Streaming DiLoCo fragments (default 1)\n"
        "  --fsdp-ranks R[,R2...]    for sharded process groups of R ranks (FSDP2's fully_shard, diloco.h\n"
        "                            \"Sharded groups\"): the shards are also cut at every tensor boundary and at\n"
        "                            every boundary between the R ranks' dim-0 chunks of a tensor (ceil(rows/R)\n"
        "                            rows each, as torch.chunk), so each rank holds whole shards; with\n"
        "                            --shards 1 those cuts alone (a sharded group's run: docs/PROTOCOL.md);\n"
        "                            with --fragments, each fragment is whole tensors\n"
        "  --trainer NAME            gpt (default) or quadratic\n"
        "  --numel N                 (quadratic) number of parameters (default 1000000)\n"
        "  --layers --heads --dim --ctx --vocab   (gpt) model shape (default 2 4 128 128 256)\n"
        "  --seed S                  initial parameters seed (default 0)\n"
        "  --outer-lr LR             outer SGD learning rate (default 0.7; 2 with --compress topk)\n"
        "  --outer-momentum MU       outer momentum (default 0.5; 0 with --compress topk)\n"
        "  --no-nesterov             plain momentum instead of Nesterov\n"
        "  --heartbeat-timeout S     evict workers silent for S seconds (default 120; 0 = never)\n"
        "  --async                   async DiLoCo: no barrier, each submission applied in its Redis order\n"
        "  --dn-buffer-size N        (async) Delayed Nesterov every N submissions (default: --workers; 0 = off)\n"
        "  --dn-variant V            (async) paper (Async Local-SGD, default) or forgather\n"
        "  --max-staleness K         (async) reject submissions over K versions stale (default 0: no limit)\n"
        "  --staleness-weight W      (async) scale each pseudo-gradient by its staleness tau: none (default),\n"
        "                            inverse min(1, (1+T)/(1+tau)) or sqrt of that (docs/async.md)\n"
        "  --staleness-ref T         (async, --staleness-weight) staleness that keeps weight 1 (default workers-1)\n"
        "  --async-rule plain|rebase  (async) plain (default) or rebase: a submission enters the outer step\n"
        "                            as g + theta_now - theta_base (measured from the version it is applied\n"
        "                            to); the servers hold the last --max-staleness versions (default then\n"
        "                            4 x workers) (docs/async.md)\n"
        "  --rebase-fraction A       (--async-rule rebase) g + A (theta_now - theta_base), A in (0, 1] (default 1)\n"
        "  --async-lookahead G       (async) each worker starts its next interval G x the others' expected\n"
        "                            progress ahead of the version it got, G in [0, 2] (default 0; 0.5 with\n"
        "                            --async-rule rebase) (docs/async.md)\n"
        "  --weight-by none|tokens   weight pseudo-gradients by the tokens behind them (default none)\n"
        "  --weight-ref-tokens N     (async, --weight-by tokens) a submission of N tokens has weight 1\n"
        "  --compress C              codec of pseudo-gradients on the wire: bf16 (default; workers may send\n"
        "                            fp32), fp32, int8, int4, int3 or int2 (blocks of 256 with a scale;\n"
        "                            docs/compression.md), or topk (SparseLoCo: each worker sends the top\n"
        "                            --topk-density of every 4096 entries of its error-feedback accumulator at\n"
        "                            --topk-bits; outer momentum defaults to 0 and outer lr to 2 then; sync runs "
        "only)\n"
        "  --topk-density D          (topk) fraction of each chunk sent (default 0.02)\n"
        "  --topk-bits B             (topk) bits a kept value, 2 to 8 (default 2): sign and 2^(B-1) levels up to\n"
        "                            the chunk's largest; at density 0.02 a worker sends 0.0254 bytes per parameter\n"
        "                            per round at 2 bits, 0.0303 at 4, 0.0403 at 8 (with --download update each\n"
        "                            worker gets the workers' sets: W times that; init prints the run's figures)\n"
        "  --topk-beta B             (topk) the accumulator's decay: e = B*e + pseudo-gradient (default 0.95)\n"
        "  --download params|update  what a sync round sends back: params (default), the new parameters in\n"
        "                            fp32, or update, the averaged pseudo-gradient in the --compress codec,\n"
        "                            which workers apply with their own copy of the outer momentum (sync,\n"
        "                            1 fragment)\n"
        "  --dylu                    Dynamic Local Updates: each worker's H follows its speed\n"
        "  --dylu-base-sync-every H  H of the fastest worker under DyLU (default 500)\n"
        "  --snapshot-every K        durable snapshot every K versions, log in between (default 8)\n"
        "  --min-replicas N          a commit counts as durable once N Redis replicas have it (WAIT);\n"
        "                            for Redis with replicas and failover (docs/deploy.md; default 0)\n"
        "  --from-checkpoint FILE    start from a checkpoint (`coordinator checkpoint save`): its parameters\n"
        "                            and outer momentum (and Delayed Nesterov buffer) become version 0;\n"
        "                            trainer, model, shards, fragments, seed, outer lr/momentum/nesterov,\n"
        "                            snapshot-every (and, with --async, the DN settings) default to the\n"
        "                            checkpoint's; a model that does not match it is an error\n"
        "  --reset-momentum          (with --from-checkpoint) start the outer momentum (and DN buffer) afresh\n"
        "  --from-state FILE         start from a model's own weights: the floating-point tensors of a safetensors\n"
        "                            file (e.g. rediloco.save_state(model, FILE)), in file order, are the run's\n"
        "                            parameters and layout (trainer \"state\", for PyTorch workers); with --trainer\n"
        "                            and model flags, the file must hold exactly that model's tensors (a\n"
        "                            ReDiLoCo checkpoint is refused here: it resumes with --from-checkpoint)\n"
        "  --force                   replace an existing run of that name\n");
}

/* --from-checkpoint: what the command line left open comes from the checkpoint's metadata. */
static int adopt_checkpoint(init_args *a)
{
    checkpoint ck;
    char err[1024];
    if (checkpoint_file_readable(a->from_checkpoint, err, sizeof err) < 0) { /* a typo in the path: usage */
        fprintf(stderr, "coordinator init: --from-checkpoint %s: cannot open it: %s\n", a->from_checkpoint, err);
        return -1;
    }
    if (checkpoint_read(a->from_checkpoint, 0, &ck, err, sizeof err) < 0) { /* bad data */
        fprintf(stderr, "coordinator init: --from-checkpoint: %s\n", err);
        return INIT_BAD_FILE;
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

/* topk's outer lr unless given: an entry that one worker of W sent enters the mean divided by W, and
 * there is no momentum to lengthen the step. On the KJV GPT over 3 data seeds, lr 2 against 0.7 took
 * top-k at 2% from +28% to +10% of bf16's validation loss (docs/compression.md, "Quality of top-k"). */
#define TOPK_DEFAULT_OUTER_LR 2.0

/* --compress topk: its flags go with it, SparseLoCo's accumulator is the momentum (outer momentum 0
 * unless given), its outer lr defaults to TOPK_DEFAULT_OUTER_LR, and async runs are refused: each
 * submission would be one worker's top-k set applied alone, with no average over workers to make the
 * step, and nothing of that has been measured. */
static int topk_settings(init_args *a)
{
    int topk = a->compress && !strcmp(a->compress, "topk");
    if (!topk && (flag_given(a, "--topk-density") || flag_given(a, "--topk-beta") || flag_given(a, "--topk-bits"))) {
        fprintf(stderr, "coordinator init: --topk-density, --topk-bits and --topk-beta are settings of --compress topk\n");
        return -1;
    }
    if (!topk) return 0;
    if (a->async) {
        fprintf(stderr, "coordinator init: --compress topk is for sync runs: an async run applies each worker's "
                        "top-k set alone (no average over workers, which SparseLoCo's step is), and that is neither "
                        "built nor measured; use a block codec (e.g. --compress int3) with --async\n");
        return -1;
    }
    if (!flag_given(a, "--outer-momentum")) a->outer_momentum = 0; /* the accumulator is the momentum */
    if (!flag_given(a, "--outer-lr")) a->outer_lr = TOPK_DEFAULT_OUTER_LR;
    return 0;
}

/* --weight-by, --download, --dn-variant, --staleness-weight, --async-rule: the index of the choice
 * given (-1: none), turned into its name by apply_choices. */
typedef struct init_choices {
    int weight_by, download, dn_variant, stale_weight, async_rule;
} init_choices;

/* The option table of `init`, in four groups of at most *_SPECS_MAX entries each, so that the whole
 * fits a->given: entry k of the table records in a->given[k] whether it was on the command line. */
#define RUN_SPECS_MAX 12
#define SHAPE_SPECS_MAX 18
#define OUTER_SPECS_MAX 18
#define ASYNC_SPECS_MAX 16
#define INIT_SPECS_MAX (RUN_SPECS_MAX + SHAPE_SPECS_MAX + OUTER_SPECS_MAX + ASYNC_SPECS_MAX)
_Static_assert(INIT_SPECS_MAX <= sizeof((init_args *)0)->given / sizeof((init_args *)0)->given[0],
               "init: given[] too small");

/* Which Redis and run, and what version 0 is made from. */
static size_t run_specs(init_args *a, opt_spec *out)
{
    const opt_spec s[] = {
        {.name = "redis", .kind = OPT_STRING, .dest = &a->c.redis_url},
        {.name = "redis-file", .kind = OPT_STRING, .dest = &a->c.redis_file},
        {.name = "run", .kind = OPT_STRING, .dest = &a->c.run},
        {.name = "force", .kind = OPT_FLAG, .dest = &a->force},
        {.name = "trainer", .kind = OPT_STRING, .dest = &a->trainer},
        {.name = "from-checkpoint", .kind = OPT_STRING, .dest = &a->from_checkpoint},
        {.name = "reset-momentum", .kind = OPT_FLAG, .dest = &a->reset_momentum},
        {.name = "from-state", .kind = OPT_STRING, .dest = &a->from_state},
    };
    _Static_assert(sizeof s / sizeof *s <= RUN_SPECS_MAX, "init: raise RUN_SPECS_MAX");
    memcpy(out, s, sizeof s);
    return sizeof s / sizeof *s;
}

/* Membership, the model, how its parameters are cut, and how they are kept. */
static size_t shape_specs(init_args *a, opt_spec *out)
{
    const char *dims = "a positive integer";
    const opt_spec s[] = {
        {.name = "workers", .alias = 'n', .kind = OPT_LLONG, .dest = &a->workers, .lo = 1, .hi = 100000},
        {.name = "min-workers", .kind = OPT_LLONG, .dest = &a->min_workers, .lo = 1, .hi = 100000},
        {.name = "shards", .kind = OPT_LLONG, .dest = &a->shards, .lo = 1, .hi = RUNCONF_MAX_SHARDS},
        {.name = "fragments", .kind = OPT_LLONG, .dest = &a->fragments, .lo = 1, .hi = RUNCONF_MAX_FRAGMENTS},
        {.name = "fsdp-ranks", .kind = OPT_STRING, .dest = &a->fsdp_ranks_arg},
        {.name = "numel", .kind = OPT_LLONG, .dest = &a->numel, .lo = 1, .hi = 4000000000LL},
        {.name = "layers", .kind = OPT_INT, .dest = &a->gpt.layers, .lo = 1, .hi = 1 << 24, .wants = dims},
        {.name = "heads", .kind = OPT_INT, .dest = &a->gpt.heads, .lo = 1, .hi = 1 << 24, .wants = dims},
        {.name = "dim", .kind = OPT_INT, .dest = &a->gpt.dim, .lo = 1, .hi = 1 << 24, .wants = dims},
        {.name = "ctx", .kind = OPT_INT, .dest = &a->gpt.ctx, .lo = 1, .hi = 1 << 24, .wants = dims},
        {.name = "vocab", .kind = OPT_INT, .dest = &a->gpt.vocab, .lo = 1, .hi = 1 << 24, .wants = dims},
        {.name = "seed", .kind = OPT_LLONG, .dest = &a->seed, .lo = 0, .hi = INT64_MAX},
        {.name = "snapshot-every", .kind = OPT_LLONG, .dest = &a->snapshot_every, .lo = 1, .hi = 1000000},
        {.name = "min-replicas", .kind = OPT_LLONG, .dest = &a->min_replicas, .lo = 0, .hi = RUNCONF_MAX_REPLICAS},
    };
    _Static_assert(sizeof s / sizeof *s <= SHAPE_SPECS_MAX, "init: raise SHAPE_SPECS_MAX");
    memcpy(out, s, sizeof s);
    return sizeof s / sizeof *s;
}

/* The outer optimizer, liveness and DyLU, and what travels on the wire (the codec, the download). */
static size_t outer_specs(init_args *a, init_choices *ch, opt_spec *out)
{
    const char *nonneg = "a non-negative number";
    const opt_spec s[] = {
        {.name = "outer-lr", .kind = OPT_DOUBLE, .dest = &a->outer_lr, .min = 0, .max = HUGE_VAL, .wants = nonneg},
        {.name = "outer-momentum",
         .kind = OPT_DOUBLE,
         .dest = &a->outer_momentum,
         .min = 0,
         .max = HUGE_VAL,
         .wants = nonneg},
        {.name = "no-nesterov", .kind = OPT_CLEAR, .dest = &a->nesterov},
        {.name = "heartbeat-timeout",
         .kind = OPT_DOUBLE,
         .dest = &a->heartbeat_timeout,
         .min = 0,
         .max = OPTS_SECONDS_MAX,
         .wants = "seconds in [0, 2000000] (0 = never)"},
        {.name = "dylu", .kind = OPT_FLAG, .dest = &a->dylu},
        {.name = "dylu-base-sync-every", .kind = OPT_LLONG, .dest = &a->dylu_base, .lo = 1, .hi = 100000000},
        {.name = "compress",
         .kind = OPT_CUSTOM,
         .dest = &a->compress,
         .parse = parse_compress,
         .wants = "bf16, fp32, int8, int4, int3, int2 or topk"},
        {.name = "topk-density",
         .kind = OPT_DOUBLE,
         .dest = &a->topk_density,
         .min = 1e-6,
         .max = 1,
         .wants = "a fraction in (0, 1]"},
        {.name = "topk-bits", .kind = OPT_LLONG, .dest = &a->topk_bits, .lo = TOPK_BITS_MIN, .hi = TOPK_BITS_MAX},
        {.name = "topk-beta",
         .kind = OPT_DOUBLE,
         .dest = &a->topk_beta,
         .min = 0,
         .max = 1,
         .wants = "a number in [0, 1]"},
        {.name = "download", .kind = OPT_CHOICE, .dest = &ch->download, .choices = "params|update"},
        {.name = "weight-by", .kind = OPT_CHOICE, .dest = &ch->weight_by, .choices = "none|tokens"},
        {.name = "weight-ref-tokens", .kind = OPT_LLONG, .dest = &a->weight_ref, .lo = 1, .hi = INT64_MAX},
    };
    _Static_assert(sizeof s / sizeof *s <= OUTER_SPECS_MAX, "init: raise OUTER_SPECS_MAX");
    memcpy(out, s, sizeof s);
    return sizeof s / sizeof *s;
}

/* Async DiLoCo: Delayed Nesterov, staleness, and the rebase rule. */
static size_t async_specs(init_args *a, init_choices *ch, opt_spec *out)
{
    const opt_spec s[] = {
        {.name = "async", .kind = OPT_FLAG, .dest = &a->async},
        {.name = "dn-buffer-size", .kind = OPT_LLONG, .dest = &a->dn_buffer, .lo = 0, .hi = 1000000},
        {.name = "dn-variant", .kind = OPT_CHOICE, .dest = &ch->dn_variant, .choices = "paper|forgather"},
        {.name = "max-staleness", .kind = OPT_LLONG, .dest = &a->max_staleness, .lo = 0, .hi = 1000000000},
        {.name = "staleness-weight", .kind = OPT_CHOICE, .dest = &ch->stale_weight, .choices = "none|inverse|sqrt"},
        {.name = "staleness-ref", .kind = OPT_LLONG, .dest = &a->stale_ref, .lo = 0, .hi = 1000000000},
        {.name = "async-rule", .kind = OPT_CHOICE, .dest = &ch->async_rule, .choices = "plain|rebase"},
        {.name = "rebase-fraction",
         .kind = OPT_DOUBLE,
         .dest = &a->rebase_fraction,
         .min = 0x1p-24,
         .max = 1,
         .wants = "a number in (0, 1]"},
        {.name = "async-lookahead",
         .kind = OPT_DOUBLE,
         .dest = &a->async_lookahead,
         .min = 0,
         .max = ASYNC_LOOKAHEAD_MAX,
         .wants = "a number in [0, 2]"},
    };
    _Static_assert(sizeof s / sizeof *s <= ASYNC_SPECS_MAX, "init: raise ASYNC_SPECS_MAX");
    memcpy(out, s, sizeof s);
    return sizeof s / sizeof *s;
}

/* The names of the choices given (the strings live as long as the program). */
static void apply_choices(init_args *a, const init_choices *ch)
{
    static const char *weight_by[] = {"none", "tokens"}, *download[] = {"params", "update"},
                      *dn_variant[] = {"paper", "forgather"}, *stale_weight[] = {"none", "inverse", "sqrt"},
                      *async_rule[] = {"plain", "rebase"};
    if (ch->weight_by >= 0) a->weight_by = weight_by[ch->weight_by];
    if (ch->download >= 0) a->download = download[ch->download];
    if (ch->dn_variant >= 0) a->dn_variant = dn_variant[ch->dn_variant];
    if (ch->stale_weight >= 0) a->stale_weight = stale_weight[ch->stale_weight];
    if (ch->async_rule >= 0) a->async_rule = async_rule[ch->async_rule];
}

/* The flags into a, and which of them were given (a->given, a->given_names). */
static int parse_init_flags(int argc, char **argv, init_args *a)
{
    init_choices ch = {-1, -1, -1, -1, -1};
    opt_spec specs[INIT_SPECS_MAX + 1];
    size_t n = run_specs(a, specs);
    n += shape_specs(a, specs + n);
    n += outer_specs(a, &ch, specs + n);
    n += async_specs(a, &ch, specs + n);
    specs[n] = (opt_spec){0};
    for (size_t k = 0; specs[k].name; k++) specs[k].given = &a->given[k];
    int rc = opts_parse_cmd("coordinator init", init_usage, specs, argc, argv, 0, NULL, NULL);
    if (rc != 0) return rc;
    for (size_t k = 0; specs[k].name; k++) a->given_names[k] = specs[k].name;
    apply_choices(a, &ch);
    return 0;
}

/* --async-rule rebase: an async run whose staleness is bounded (the shard-servers hold every version a
 * submission may be based on: the last --max-staleness, by default 4 x the workers: a worker at half the
 * speed of the others submits about 2 x workers versions stale). */
static int check_async_rule(init_args *a)
{
    if (a->async_lookahead > 0 && !a->async) {
        fprintf(stderr, "coordinator init: --async-lookahead is an async setting: add --async\n");
        return -1;
    }
    if (a->async_rule == NULL || strcmp(a->async_rule, "rebase") != 0) {
        if (!flag_given(a, "--rebase-fraction")) return 0;
        fprintf(stderr, "coordinator init: --rebase-fraction goes with --async-rule rebase\n");
        return -1;
    }
    if (!a->async) {
        fprintf(stderr, "coordinator init: --async-rule is an async setting: add --async\n");
        return -1;
    }
    if (!flag_given(a, "--max-staleness")) a->max_staleness = 4 * a->workers;
    /* a rebased submission trains best from a start ahead (docs/quality.md, "Starting ahead") */
    if (!flag_given(a, "--async-lookahead")) a->async_lookahead = ASYNC_REBASE_LOOKAHEAD;
    if (a->max_staleness < 1) {
        fprintf(stderr, "coordinator init: --async-rule rebase needs --max-staleness K of 1 or more (the "
                        "shard-servers keep the last K versions, each as large as the shard)\n");
        return -1;
    }
    return 0;
}

/* --fsdp-ranks R[,R2...]: group sizes of 2 to 4096, at most 16 of them. */
static int parse_fsdp_ranks(init_args *a)
{
    const char *p = a->fsdp_ranks_arg;
    for (;;) {
        char *end;
        errno = 0;
        long r = strtol(p, &end, 10);
        if (end == p || errno || r < 2 || r > RUNCONF_MAX_SHARDS || (*end && *end != ',') || a->nfsdp_ranks == 16) {
            fprintf(stderr, "coordinator init: --fsdp-ranks wants a comma list of at most 16 group sizes of 2 to %d "
                            "(the ranks of the sharded groups that will join), got '%s'\n",
                    RUNCONF_MAX_SHARDS, a->fsdp_ranks_arg);
            return -1;
        }
        a->fsdp_ranks[a->nfsdp_ranks++] = (int)r;
        if (!*end) break;
        p = end + 1;
    }
    return 0;
}

static void init_defaults(init_args *a)
{
    memset(a, 0, sizeof *a);
    a->workers = 2;
    a->min_workers = 1;
    a->shards = 8;
    a->fragments = 1;
    a->numel = 1000000;
    a->snapshot_every = 8;
    a->outer_lr = OUTER_DEFAULT_LR;
    a->outer_momentum = OUTER_DEFAULT_MOMENTUM;
    a->heartbeat_timeout = 120;
    a->topk_density = SPARSE_DENSITY_DEFAULT;
    a->topk_beta = SPARSE_BETA_DEFAULT;
    a->topk_bits = TOPK_BITS_DEFAULT;
    a->nesterov = 1;
    a->rebase_fraction = 1;
    a->trainer = "gpt";
    a->gpt = (gpt_config){2, 4, 128, 128, 256};
}

/* What version 0 is made from: --from-checkpoint or --from-state (not both), a known trainer, a
 * --from-state file that exists, is no directory and is a model's state. 0, or -1 after a message. */
static int check_sources(init_args *a)
{
    if (a->reset_momentum && !a->from_checkpoint) {
        fprintf(stderr, "coordinator init: --reset-momentum goes with --from-checkpoint\n");
        return -1;
    }
    if (a->from_checkpoint && a->from_state) {
        fprintf(stderr, "coordinator init: --from-checkpoint and --from-state exclude each other\n");
        return -1;
    }
    if (strcmp(a->trainer, "gpt") != 0 && strcmp(a->trainer, "quadratic") != 0) {
        fprintf(stderr, "coordinator init: --trainer wants gpt or quadratic, got '%s' (see --help)\n", a->trainer);
        return -1;
    }
    /* a typo in the path, or a directory, is a usage error at once, as for --from-checkpoint (the file is
     * read later; a directory would read as a file shorter than 8 bytes, bad data) */
    char err[512];
    if (a->from_state && checkpoint_file_readable(a->from_state, err, sizeof err) < 0) {
        fprintf(stderr, "coordinator init: --from-state %s: %s\n", a->from_state, err);
        return -1;
    }
    char whose[160];
    if (a->from_state && from_state_is_checkpoint(a->from_state, whose, sizeof whose)) {
        fprintf(stderr,
                "coordinator init: --from-state %s is a ReDiLoCo checkpoint (%s), not a model's state: "
                "resume from it with --from-checkpoint %s\n",
                a->from_state, whose, a->from_state);
        return -1;
    }
    if (a->from_state && !flag_given(a, "--trainer")) a->trainer = "state";
    return 0;
}

/* The outer optimizer's range, what --download update and the staleness settings need, and the floor of
 * the workers. 0, or -1 after a message. */
static int check_run_settings(init_args *a)
{
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
    if (!a->async && ((a->stale_weight && strcmp(a->stale_weight, "none") != 0) || flag_given(a, "--staleness-ref"))) {
        fprintf(stderr, "coordinator init: --staleness-weight and --staleness-ref are async settings: add --async\n");
        return -1;
    }
    return 0;
}

/* Flags given where they do nothing (a mode's setting outside it): refused as --staleness-weight on a sync
 * run is, naming what they need, not taken silently. 0, or -1 after a message. */
static int check_idle_flags(const init_args *a)
{
    int tokens = a->weight_by && !strcmp(a->weight_by, "tokens");
    int stale_weight = a->stale_weight && strcmp(a->stale_weight, "none") != 0;
    const struct {
        const char *flag;
        int applies;
        const char *needs;
    } rules[] = {
        {"--max-staleness", a->async, "is an async setting: add --async"},
        {"--dn-buffer-size", a->async, "is an async setting: add --async"},
        {"--dn-variant", a->async, "is an async setting: add --async"},
        {"--weight-ref-tokens", tokens, "goes with --weight-by tokens"},
        {"--dylu-base-sync-every", a->dylu, "goes with --dylu"},
        {"--staleness-ref", stale_weight, "goes with --staleness-weight inverse or sqrt"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++)
        if (!rules[i].applies && flag_given(a, rules[i].flag)) {
            fprintf(stderr, "coordinator init: %s %s\n", rules[i].flag, rules[i].needs);
            return -1;
        }
    return 0;
}

/* The defaults that follow from the workers: the staleness of equal workers, and the DN buffer. 0, or
 * -1 after a message (async --weight-by tokens without its reference). */
static int worker_defaults(init_args *a)
{
    if (!flag_given(a, "--staleness-ref")) a->stale_ref = a->workers - 1; /* what equal workers see */
    /* Delayed Nesterov over one submission per worker: the outer step of a window of W submissions then
     * equals a sync round's (docs/quality.md, "Async": a buffer of 2W halves the step and trains worse) */
    if (a->async && !flag_given(a, "--dn-buffer-size") && a->dn_buffer == 0) a->dn_buffer = a->workers;
    if (a->async && a->weight_by && !strcmp(a->weight_by, "tokens") && a->weight_ref <= 0) {
        fprintf(stderr, "coordinator init: async --weight-by tokens needs --weight-ref-tokens N (the tokens of a "
                        "normal submission, e.g. sync_every * batch * seq): each submission is scaled by tokens / N\n");
        return -1;
    }
    return 0;
}

/* A member is removed by leaving, a kick, or its heartbeats timing out: with no timeout, a crashed one stays.
 * Sync: every round waits for it. Async: a place it was given and never filled holds up its shard's order
 * (it becomes a no-op only once its worker is evicted, docs/async.md). */
static void warn_no_eviction(const init_args *a)
{
    if (a->heartbeat_timeout != 0) return;
    fprintf(stderr,
            "coordinator init: warning: --heartbeat-timeout 0 never evicts a worker: one that dies without leaving "
            "(kill -9, a lost machine) stays a member, and %s; use a timeout in seconds (default 120), or remove a "
            "dead worker with `coordinator control kick WORKER`\n",
            a->async ? "a submission it was given places for but never delivered holds up the order of its shards "
                       "for ever (a dead submitter's place becomes a no-op only once it is evicted: docs/async.md)"
                     : "every sync round waits for it for ever (measured: 2 workers, one killed: no round closed "
                       "in the 12 s after)");
}

/* Settings that are legal but make the run learn almost nothing: said once, with what to use. */
static void warn_degenerate(const init_args *a)
{
    if (a->outer_lr > OUTER_LR_WARN)
        fprintf(stderr,
                "coordinator init: warning: --outer-lr %g is far above DiLoCo's %g (top-k's %g): the outer step "
                "moves the parameters lr times the workers' mean drift, so above %g it overshoots and the run "
                "diverges instead of learning (the quadratic: loss 0.35 at lr 10 with momentum 0.5, 7e10 at lr 1e6, 0.055 at lr 2); "
                "use %g to %g\n",
                a->outer_lr, OUTER_DEFAULT_LR, TOPK_DEFAULT_OUTER_LR, OUTER_LR_WARN, OUTER_DEFAULT_LR,
                TOPK_DEFAULT_OUTER_LR);
    /* paper Delayed Nesterov: each submission moves theta by lr * g / N between the momentum steps */
    if (a->async && a->dn_buffer > a->workers && (!a->dn_variant || !strcmp(a->dn_variant, "paper")))
        fprintf(stderr,
                "coordinator init: warning: --dn-buffer-size %lld with --workers %lld: each submission moves the "
                "parameters by lr * g / %lld, so a window of one submission per worker moves them %lld/%lld of a "
                "sync round's step (the quadratic, 4 workers: loss 0.21 at N 100, 0.065 at N 4); use --dn-buffer-size "
                "%lld (one submission per worker, the default), or say --workers N for the workers you run\n",
                a->dn_buffer, a->workers, a->dn_buffer, a->workers, a->dn_buffer, a->workers);
    /* no Delayed Nesterov: each submission takes a whole outer step of one worker's drift, so W submissions
     * move the parameters W times a sync round's step (which averages W drifts into one); a run resumed
     * from a checkpoint keeps the lr it was given */
    if (a->async && a->dn_buffer == 0 && a->workers > 1 && !flag_given(a, "--outer-lr") && !a->from_checkpoint)
        fprintf(stderr,
                "coordinator init: warning: --dn-buffer-size 0 with --workers %lld: every submission takes a whole "
                "outer step (lr %g times one worker's drift, and the momentum), so one submission per worker moves "
                "the parameters about %lld times a sync round's step (the quadratic, 6 workers: loss 0.33 -> 0.76 at "
                "lr 0.7, 0.087 at lr 0.117 = 0.7 / 6, 0.088 with the default buffer); use --outer-lr %.3g, or leave "
                "Delayed Nesterov on (the default --dn-buffer-size, one submission per worker)\n",
                a->workers, a->outer_lr, a->workers, a->outer_lr / (double)a->workers);
    warn_no_eviction(a);
    /* a chunk keeps round(density x 4096) entries, at least 1: below half an entry the density is not the one sent */
    if (a->compress && !strcmp(a->compress, "topk") && topk_count(a->topk_density, TOPK_CHUNK) > a->topk_density * TOPK_CHUNK + 0.5)
        fprintf(stderr,
                "coordinator init: warning: --topk-density %g keeps %g of each chunk of %d entries, which rounds to "
                "none: each chunk sends its largest one, a density of %.3g, and what it does not send decays in the "
                "accumulator (the quadratic, 2 workers, density 1e-6: loss 0.22 at step 200, 0.235 at 1000); use "
                "--topk-density %.3g or more\n",
                a->topk_density, a->topk_density * TOPK_CHUNK, TOPK_CHUNK, 1.0 / TOPK_CHUNK, 1.0 / TOPK_CHUNK);
    /* equal workers submit W - 1 versions stale: a lower limit refuses most of their work */
    if (a->async && a->max_staleness > 0 && a->max_staleness < a->workers - 1)
        fprintf(stderr,
                "coordinator init: warning: --max-staleness %lld with --workers %lld: workers of equal speed submit "
                "about %lld versions stale, so most of their submissions would be refused and their training lost "
                "(the quadratic, 6 workers, limit 1: 40 of 60 refused, loss 0.131 where no limit reaches 0.085); use "
                "--max-staleness %lld or more (0: no limit)\n",
                a->max_staleness, a->workers, a->workers - 1, a->workers - 1);
}

int parse_init(int argc, char **argv, init_args *a)
{
    init_defaults(a);
    int rc = parse_init_flags(argc, argv, a);
    if (rc != 0) return rc;
    if (check_sources(a) < 0) return -1;
    if (a->from_checkpoint && (rc = adopt_checkpoint(a)) < 0) return rc;
    if (topk_settings(a) < 0 || check_run_settings(a) < 0 || check_idle_flags(a) < 0 || check_async_rule(a) != 0)
        return -1;
    if (a->fsdp_ranks_arg && parse_fsdp_ranks(a) < 0) return -1;
    if (worker_defaults(a) < 0) return -1;
    warn_degenerate(a);
    return 0;
}
