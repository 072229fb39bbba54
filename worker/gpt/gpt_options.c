/* gpt_options.c: the gpt trainer's options (gpt.h): defaults, the flag table behind gpt_usage and
 * gpt_options_parse, the model flags that differ from a run's (gpt_config_diff_flags), and the
 * learning-rate schedule gpt_lr_at. */
#include "base/opts.h"
#include "base/util.h"
#include "gpt.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void gpt_options_default(gpt_options *o)
{
    memset(o, 0, sizeof *o);
    o->model = (gpt_config){.layers = 4, .heads = 4, .dim = 256, .ctx = 256, .vocab = 256};
    o->batch = 8;
    o->seq = 256;
    o->lr = 4e-4;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->eps = 1e-8;
    o->weight_decay = 0.1;
    o->grad_clip = 1.0;
    o->warmup_steps = 100;
    o->total_steps = 0;
    o->min_lr_ratio = 0.1;
    o->num_shards = 1;
    o->shard_index = 0;
    o->eval_every = 100;
    o->eval_batches = 8;
    o->threads = 0;
    o->seed = 1234;
    o->attention = GPT_ATTENTION_AUTO;
    o->data_seed = 1;
    o->checkpoint_every = 0;
}

enum {
    F_INT,
    F_LONG,
    F_DBL,
    F_STR,
    F_U64,
    F_ORDER,
    F_LAYOUT,
    F_DEVICE,
    F_PRECISION,
    F_ATTENTION,
    F_BOOL /* --flag alone = 1, or --flag=0|1 */
};
typedef struct {
    const char *name;
    int type;
    size_t off;
    const char *help;
} flag;
#define OFF(f) offsetof(gpt_options, f)
static const flag FLAGS[] = {
    {"layers", F_INT, OFF(model.layers), "transformer blocks (the run's)"},
    {"heads", F_INT, OFF(model.heads), "attention heads (the run's)"},
    {"dim", F_INT, OFF(model.dim), "model width (the run's)"},
    {"ctx", F_INT, OFF(model.ctx), "maximum context = position embeddings (the run's)"},
    {"vocab", F_INT, OFF(model.vocab), "vocabulary size, 256 = bytes (the run's)"},
    {"batch", F_INT, OFF(batch), "sequences per step (8)"},
    {"seq", F_INT, OFF(seq), "tokens per sequence, <= ctx (256, or the run's ctx if shorter)"},
    {"lr", F_DBL, OFF(lr), "peak AdamW learning rate, above 0 (4e-4)"},
    {"beta1", F_DBL, OFF(beta1), "AdamW beta1 (0.9)"},
    {"beta2", F_DBL, OFF(beta2), "AdamW beta2 (0.95)"},
    {"eps", F_DBL, OFF(eps), "AdamW eps (1e-8)"},
    {"weight-decay", F_DBL, OFF(weight_decay), "decoupled weight decay on matrices (0.1)"},
    {"grad-clip", F_DBL, OFF(grad_clip), "global gradient norm clip, 0 = off (1.0)"},
    {"warmup", F_INT, OFF(warmup_steps), "linear warmup steps (100)"},
    {"steps", F_LONG, OFF(total_steps), "cosine decay horizon, 0 = constant lr (the worker's --steps)"},
    {"min-lr-ratio", F_DBL, OFF(min_lr_ratio), "final lr / peak lr of the cosine (0.1)"},
    {"data", F_STR, OFF(data_path), "token file from prepare-data (none: random tokens)"},
    {"num-shards", F_INT, OFF(num_shards), "training data split in this many parts (1)"},
    {"shard-index", F_INT, OFF(shard_index), "this worker's part, 0-based (0)"},
    {"shard-layout", F_LAYOUT, OFF(shard_layout),
     "contiguous | stripe: slices, or stripe k in part k mod num-shards (contiguous)"},
    {"shard-stripe", F_INT, OFF(shard_stripe), "stripe layout: tokens per stripe, >= seq+1 (4096)"},
    {"data-order", F_ORDER, OFF(data_sequential), "random | sequential windows (random)"},
    {"eval-every", F_INT, OFF(eval_every), "validation loss every N steps, 0 = never (100)"},
    {"eval-batches", F_INT, OFF(eval_batches), "fixed validation batches per evaluation (8)"},
    {"threads", F_INT, OFF(threads), "compute threads, 0 = all cores (0)"},
    {"seed", F_U64, OFF(seed), "parameter init seed (the run's)"},
    {"data-seed", F_U64, OFF(data_seed), "data order seed, mixed with the shard index (1)"},
    {"log", F_STR, OFF(log_path), "JSON-lines telemetry file, appended (in bin/worker: its --log above)"},
    {"checkpoint", F_STR, OFF(checkpoint_path), "local safetensors checkpoint, resumed if present (none)"},
    {"checkpoint-every", F_INT, OFF(checkpoint_every), "steps between checkpoints, 0 = at exit only (0)"},
    {"device", F_DEVICE, OFF(device), "auto | cpu | cuda (auto: cuda when built with CUDA and a GPU is present)"},
    {"tf32", F_BOOL, OFF(tf32), "cuda: let cuBLAS use TF32 tensor cores (off: fp32 products)"},
    {"precision", F_PRECISION, OFF(precision),
     "cuda: fp32 | bf16 (bf16 products and attention on fp32 master weights, see --attention; fp32: exact, the "
     "default)"},
    {"attention", F_ATTENTION, OFF(attention),
     "cuda, bf16 only: auto | flash | fused | gemm (flash: tensor-core tiles, probabilities recomputed, head size "
     "a multiple of 16 up to 128; fused: one warp per row, any head size up to 256; gemm: tensor-core products, "
     "T x T probabilities kept; auto, the default: flash where the head size allows, else fused)"},
};
#undef OFF
#define NFLAGS ((int)(sizeof FLAGS / sizeof FLAGS[0]))

void gpt_usage(FILE *f)
{
    fprintf(f, "GPT trainer options (--flag VALUE or --flag=VALUE):\n");
    for (int i = 0; i < NFLAGS; i++) {
        char nm[40];
        snprintf(nm, sizeof nm, "--%s", FLAGS[i].name);
        fprintf(f, "  %-20s %s\n", nm, FLAGS[i].help);
    }
}

static int parse_long(const char *v, void *dest)
{
    long long x;
    if (parse_int(v, LONG_MIN, LONG_MAX, &x) < 0) return -1;
    *(long *)dest = (long)x;
    return 0;
}

static int parse_u64(const char *v, void *dest)
{
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (*v == 0 || *end || errno) return -1;
    *(uint64_t *)dest = x;
    return 0;
}

/* The opts.h entry of one flag of the table, writing into o. */
static opt_spec flag_spec(const flag *fl, gpt_options *o)
{
    opt_spec s = {.name = fl->name, .dest = (char *)o + fl->off};
    switch (fl->type) {
    case F_INT:
        s.kind = OPT_INT;
        s.lo = -2147483647LL;
        s.hi = 2147483647LL;
        s.wants = "an integer";
        break;
    case F_LONG:
        s.kind = OPT_CUSTOM;
        s.parse = parse_long;
        s.wants = "an integer";
        break;
    case F_U64:
        s.kind = OPT_CUSTOM;
        s.parse = parse_u64;
        s.wants = "an unsigned 64-bit integer";
        break;
    case F_DBL:
        s.kind = OPT_DOUBLE;
        s.min = -DBL_MAX;
        s.max = DBL_MAX;
        s.wants = "a finite number";
        break;
    case F_STR: s.kind = OPT_STRING; break;
    case F_ORDER:
        s.kind = OPT_CHOICE;
        s.choices = "random|sequential";
        break;
    case F_LAYOUT:
        s.kind = OPT_CHOICE;
        s.choices = "contiguous|stripe";
        break; /* GPT_SHARD_* in this order */
    case F_DEVICE:
        s.kind = OPT_CHOICE;
        s.choices = "auto|cpu|cuda";
        break; /* GPT_DEVICE_* in this order */
    case F_PRECISION:
        s.kind = OPT_CHOICE;
        s.choices = "fp32|bf16";
        break; /* GPT_PRECISION_* in this order */
    case F_ATTENTION:
        s.kind = OPT_CHOICE;
        s.choices = "fused|gemm|flash|auto";
        break; /* GPT_ATTENTION_* in this order */
    case F_BOOL: s.kind = OPT_FLAG; break;
    }
    return s;
}

int gpt_options_parse(gpt_options *o, int argc, char **argv, char *err, size_t errlen)
{
    opt_spec specs[NFLAGS + 1];
    for (int k = 0; k < NFLAGS; k++) specs[k] = flag_spec(&FLAGS[k], o);
    specs[NFLAGS] = (opt_spec){0};
    char **rest = malloc(((size_t)argc + 1) * sizeof *rest);
    int nrest = 0;
    if (!rest) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    int rc = opts_parse(specs, argc, argv, 0, rest, &nrest, err, errlen);
    if (rc == 1) err_set(err, errlen, "--help is not a trainer option");
    if (rc == 0) {
        memcpy(argv, rest, (size_t)nrest * sizeof *rest);
        if (nrest < argc) argv[nrest] = NULL;
    }
    free(rest);
    return rc == 0 ? argc - nrest : -1;
}

int gpt_config_diff_flags(const gpt_config *run, const gpt_config *mine, char *out, size_t cap)
{
    const char *names[] = {"layers", "heads", "dim", "ctx", "vocab"};
    const int theirs[] = {run->layers, run->heads, run->dim, run->ctx, run->vocab};
    const int ours[] = {mine->layers, mine->heads, mine->dim, mine->ctx, mine->vocab};
    int n = 0;
    size_t len = 0;
    if (cap > 0) out[0] = '\0';
    for (int i = 0; i < 5; i++) {
        if (theirs[i] == ours[i]) continue;
        if (len < cap) len += (size_t)snprintf(out + len, cap - len, "%s--%s %d", n ? " " : "", names[i], ours[i]);
        n++;
    }
    return n;
}

double gpt_lr_at(const gpt_options *o, long s)
{
    if (o->warmup_steps > 0 && s < o->warmup_steps) return o->lr * (double)(s + 1) / o->warmup_steps;
    if (o->total_steps <= 0) return o->lr;
    double min_lr = o->lr * o->min_lr_ratio;
    if (s >= o->total_steps) return min_lr;
    double span = (double)(o->total_steps - o->warmup_steps);
    double prog = span > 0 ? (double)(s - o->warmup_steps) / span : 1.0;
    return min_lr + 0.5 * (1.0 + cos(M_PI * prog)) * (o->lr - min_lr);
}
