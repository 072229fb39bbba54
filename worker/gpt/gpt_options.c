/* gpt_options.c: the gpt trainer's options (gpt.h): defaults, the flag table behind gpt_usage and
 * gpt_options_parse, and the learning-rate schedule gpt_lr_at. */
#include "gpt.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void gpt_options_default(gpt_options *o) {
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
    o->data_seed = 1;
    o->checkpoint_every = 0;
}

enum { F_INT, F_LONG, F_DBL, F_STR, F_U64, F_ORDER, F_DEVICE, F_BOOL /* --flag alone = 1, or --flag=0|1 */ };
typedef struct { const char *name; int type; size_t off; const char *help; } flag;
#define OFF(f) offsetof(gpt_options, f)
static const flag FLAGS[] = {
    {"layers", F_INT, OFF(model.layers), "transformer blocks (4)"},
    {"heads", F_INT, OFF(model.heads), "attention heads (4)"},
    {"dim", F_INT, OFF(model.dim), "model width (256)"},
    {"ctx", F_INT, OFF(model.ctx), "maximum context = position embeddings (256)"},
    {"vocab", F_INT, OFF(model.vocab), "vocabulary size (256 = bytes)"},
    {"batch", F_INT, OFF(batch), "sequences per step (8)"},
    {"seq", F_INT, OFF(seq), "tokens per sequence, <= ctx (256)"},
    {"lr", F_DBL, OFF(lr), "peak AdamW learning rate (4e-4)"},
    {"beta1", F_DBL, OFF(beta1), "AdamW beta1 (0.9)"},
    {"beta2", F_DBL, OFF(beta2), "AdamW beta2 (0.95)"},
    {"eps", F_DBL, OFF(eps), "AdamW eps (1e-8)"},
    {"weight-decay", F_DBL, OFF(weight_decay), "decoupled weight decay on matrices (0.1)"},
    {"grad-clip", F_DBL, OFF(grad_clip), "global gradient norm clip, 0 = off (1.0)"},
    {"warmup", F_INT, OFF(warmup_steps), "linear warmup steps (100)"},
    {"steps", F_LONG, OFF(total_steps), "total inner steps: cosine decay horizon, 0 = constant lr (0)"},
    {"min-lr-ratio", F_DBL, OFF(min_lr_ratio), "final lr / peak lr of the cosine (0.1)"},
    {"data", F_STR, OFF(data_path), "token file from prepare-data (none: random tokens)"},
    {"num-shards", F_INT, OFF(num_shards), "training data split in this many parts (1)"},
    {"shard-index", F_INT, OFF(shard_index), "this worker's part, 0-based (0)"},
    {"data-order", F_ORDER, OFF(data_sequential), "random | sequential windows (random)"},
    {"eval-every", F_INT, OFF(eval_every), "validation loss every N steps, 0 = never (100)"},
    {"eval-batches", F_INT, OFF(eval_batches), "fixed validation batches per evaluation (8)"},
    {"threads", F_INT, OFF(threads), "compute threads, 0 = all cores (0)"},
    {"seed", F_U64, OFF(seed), "parameter init seed (1234)"},
    {"data-seed", F_U64, OFF(data_seed), "data order seed, mixed with the shard index (1)"},
    {"log", F_STR, OFF(log_path), "JSON-lines telemetry file, appended (none)"},
    {"checkpoint", F_STR, OFF(checkpoint_path), "local safetensors checkpoint, resumed if present (none)"},
    {"checkpoint-every", F_INT, OFF(checkpoint_every), "steps between checkpoints, 0 = at exit only (0)"},
    {"device", F_DEVICE, OFF(device), "auto | cpu | cuda (auto: cuda when built with CUDA and a GPU is present)"},
    {"tf32", F_BOOL, OFF(tf32), "cuda: let cuBLAS use TF32 tensor cores (off: fp32 products)"},
};
#undef OFF
#define NFLAGS ((int)(sizeof FLAGS / sizeof FLAGS[0]))

void gpt_usage(FILE *f) {
    fprintf(f, "GPT trainer options (--flag VALUE or --flag=VALUE):\n");
    for (int i = 0; i < NFLAGS; i++) {
        char nm[40];
        snprintf(nm, sizeof nm, "--%s", FLAGS[i].name);
        fprintf(f, "  %-20s %s\n", nm, FLAGS[i].help);
    }
}

static int set_flag(gpt_options *o, const flag *fl, const char *v, char *err, size_t errlen) {
    char *p = (char *)o + fl->off, *end = NULL;
    errno = 0;
    switch (fl->type) {
    case F_INT: {
        long x = strtol(v, &end, 10);
        if (*v == 0 || *end || errno || x < -2147483647L || x > 2147483647L) break;
        *(int *)p = (int)x;
        return 0;
    }
    case F_LONG: {
        long x = strtol(v, &end, 10);
        if (*v == 0 || *end || errno) break;
        *(long *)p = x;
        return 0;
    }
    case F_U64: {
        unsigned long long x = strtoull(v, &end, 0);
        if (*v == 0 || *end || errno) break;
        *(uint64_t *)p = x;
        return 0;
    }
    case F_DBL: {
        double x = strtod(v, &end);
        if (*v == 0 || *end || errno || !isfinite(x)) break;
        *(double *)p = x;
        return 0;
    }
    case F_STR:
        *(const char **)p = v;
        return 0;
    case F_ORDER:
        if (!strcmp(v, "random")) { *(int *)p = 0; return 0; }
        if (!strcmp(v, "sequential")) { *(int *)p = 1; return 0; }
        break;
    case F_DEVICE:
        if (!strcmp(v, "auto")) { *(int *)p = GPT_DEVICE_AUTO; return 0; }
        if (!strcmp(v, "cpu")) { *(int *)p = GPT_DEVICE_CPU; return 0; }
        if (!strcmp(v, "cuda")) { *(int *)p = GPT_DEVICE_CUDA; return 0; }
        break;
    case F_BOOL:
        if (!strcmp(v, "0") || !strcmp(v, "1")) { *(int *)p = v[0] == '1'; return 0; }
        break;
    }
    err_set(err, errlen, "bad value for --%s: '%s'", fl->name, v);
    return -1;
}

int gpt_options_parse(gpt_options *o, int argc, char **argv, char *err, size_t errlen) {
    int keep = 0, consumed = 0;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        const flag *fl = NULL;
        const char *val = NULL;
        if (a && a[0] == '-' && a[1] == '-') {
            size_t kl = strcspn(a + 2, "=");
            for (int k = 0; k < NFLAGS; k++)
                if (strlen(FLAGS[k].name) == kl && !strncmp(a + 2, FLAGS[k].name, kl)) { fl = &FLAGS[k]; break; }
            if (fl) {
                int n = 1;
                if (a[2 + kl] == '=') val = a + 3 + kl;
                else if (fl->type == F_BOOL) val = "1";
                else if (i + 1 < argc && argv[i + 1]) { val = argv[i + 1]; n = 2; }
                else { err_set(err, errlen, "--%s needs a value", fl->name); return -1; }
                if (set_flag(o, fl, val, err, errlen)) return -1;
                consumed += n;
                i += n - 1;
                continue;
            }
        }
        argv[keep++] = a;
    }
    if (keep < argc) argv[keep] = NULL;
    return consumed;
}

double gpt_lr_at(const gpt_options *o, long s) {
    if (o->warmup_steps > 0 && s < o->warmup_steps) return o->lr * (double)(s + 1) / o->warmup_steps;
    if (o->total_steps <= 0) return o->lr;
    double min_lr = o->lr * o->min_lr_ratio;
    if (s >= o->total_steps) return min_lr;
    double span = (double)(o->total_steps - o->warmup_steps);
    double prog = span > 0 ? (double)(s - o->warmup_steps) / span : 1.0;
    return min_lr + 0.5 * (1.0 + cos(M_PI * prog)) * (o->lr - min_lr);
}
