/* gpt_trainer.c: the "gpt" trainer behind trainer.h: data windows, AdamW schedule, evaluation,
 * JSON-lines telemetry and the safetensors checkpoint (its options: gpt_options.c). */
#include "base/util.h"
#include "gpt.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/file_atomic.h"
#include "diloco.h"

#ifdef DILOCO_HAVE_CUDA
#include "cuda/diloco_cuda.h" /* DiLoCo on the device */
#include "cuda/gpt_cuda.h"    /* the CUDA backend (worker/cuda, docs/cuda.md) */
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------------------------- */
/* trainer                                                                                     */

typedef struct gpt_trainer {
    trainer t;
    gpt_options o;
    char *data_path, *log_path, *ckpt_path;
    gpt_model *m;
    float *grads, *am, *av;
    int *inp, *tgt;
    gpt_tokens data;      /* data.tok == NULL: synthetic random tokens */
    gpt_part part;        /* this worker's part of the training split */
    uint64_t rng, cursor; /* data position */
    long step;
    uint64_t tokens;
    double eval_loss, t0, last_norm;
    FILE *log;
    struct gpt_cuda *cu; /* the CUDA backend, NULL on the CPU (then m is used) */
    int pinned;          /* t->params is page-locked for the CUDA copies */
    struct dl_cuda *dl;  /* DiLoCo on the device (gpt_trainer_device_ops): params stay on the device */
    long ckpt_failed;    /* periodic checkpoints not written in a row (ckpt_periodic) */
    double ckpt_said;    /* when one of them was last said (now_s) */
} gpt_trainer;

/* forward on the trainer's backend (the device parameters mirror t->params) */
static float backend_forward(gpt_trainer *g, const int *inp, const int *tgt)
{
#ifdef DILOCO_HAVE_CUDA
    if (g->cu) {
        char err[256];
        float loss;
        if (gpt_cuda_forward(g->cu, inp, tgt, &loss, err, sizeof err)) {
            fprintf(stderr, "gpt: %s\n", err);
            return NAN;
        }
        return loss;
    }
#endif
    return gpt_forward(g->m, g->t.params, inp, tgt);
}

static void next_batch(gpt_trainer *g)
{
    int B = g->o.batch, T = g->o.seq, V = g->o.model.vocab;
    for (int b = 0; b < B; b++) {
        int *in = g->inp + (size_t)b * T, *tg = g->tgt + (size_t)b * T;
        if (!g->data.tok) {
            int prev = (int)(splitmix64(&g->rng) % (uint64_t)V);
            for (int t = 0; t < T; t++) {
                int nx = (int)(splitmix64(&g->rng) % (uint64_t)V);
                in[t] = prev;
                tg[t] = nx;
                prev = nx;
            }
            continue;
        }
        uint64_t s = g->o.data_sequential ? gpt_part_next(&g->part, &g->cursor)
                                          : gpt_part_start(&g->part, splitmix64(&g->rng) % g->part.starts);
        for (int t = 0; t < T; t++) {
            in[t] = g->data.tok[s + t];
            tg[t] = g->data.tok[s + t + 1];
        }
    }
}

static int gpt_evaluate(trainer *t, double *loss, char *err, size_t errlen)
{
    gpt_trainer *g = t->impl;
    int B = g->o.batch, T = g->o.seq, V = g->o.model.vocab, nb = g->o.eval_batches > 0 ? g->o.eval_batches : 1;
    uint64_t nval = g->data.tok ? g->data.ntokens - g->data.ntrain : 0;
    if (g->data.tok && nval < (uint64_t)T + 1) {
        err_set(err, errlen, "gpt evaluate: the validation split has %llu tokens, need at least seq+1 = %d",
                (unsigned long long)nval, T + 1);
        return -1;
    }
    uint64_t J = (uint64_t)nb * B, vr = 0x1234567ULL;
    double total = 0;
    for (int k = 0; k < nb; k++) {
        for (int b = 0; b < B; b++) {
            int *in = g->inp + (size_t)b * T, *tg = g->tgt + (size_t)b * T;
            if (!g->data.tok) {
                for (int i = 0; i <= T; i++) {
                    int x = (int)(splitmix64(&vr) % (uint64_t)V);
                    if (i < T) in[i] = x;
                    if (i > 0) tg[i - 1] = x;
                }
                continue;
            }
            uint64_t j = (uint64_t)k * B + b;
            uint64_t s = g->data.ntrain + (J > 1 ? j * (nval - T - 1) / (J - 1) : 0);
            for (int i = 0; i < T; i++) {
                in[i] = g->data.tok[s + i];
                tg[i] = g->data.tok[s + i + 1];
            }
        }
        total += backend_forward(g, g->inp, g->tgt);
    }
    *loss = total / nb;
    g->eval_loss = *loss;
    return 0;
}

/* ---- checkpoint (safetensors) ---- */

#define CKPT_WRITE_FAILED (-2) /* ckpt_save: the file could not be written (the disk full, say) */
#define CKPT_SAY_S 60.0        /* a periodic checkpoint that cannot be written is said once a minute at most */

/* -1 when the state cannot be gathered, CKPT_WRITE_FAILED when the file cannot be written: the file there
 * before is then as it was (file_write_atomic). */
static int ckpt_save(gpt_trainer *g, char *err, size_t errlen)
{
    const char *path = g->ckpt_path;
    if (!path) return 0;
    trainer *t = &g->t;
#ifdef DILOCO_HAVE_CUDA
    /* the moments live on the device (the parameters are copied to t->params after every step,
     * unless DiLoCo runs on the device) */
    if (g->cu && gpt_cuda_get_moments(g->cu, g->am, g->av, err, errlen)) return -1;
#endif
    if (gpt_trainer_params_to_host(t, err, errlen)) return -1;
    int n = t->ntensors;
    size_t cap = 1024 + (size_t)n * 3 * 160, len = 0;
    char *h = malloc(cap);
    if (!h) {
        err_set(err, errlen, "checkpoint: out of memory");
        return -1;
    }
    const gpt_config *c = &g->o.model;
    len += (size_t)snprintf(
        h + len, cap - len,
        "{\"__metadata__\":{\"format\":\"rediloco-gpt-v1\",\"layers\":\"%d\",\"heads\":\"%d\",\"dim\":\"%d\","
        "\"ctx\":\"%d\",\"vocab\":\"%d\",\"step\":\"%ld\",\"tokens\":\"%llu\",\"data_rng\":\"%llu\","
        "\"data_cursor\":\"%llu\",\"shard_index\":\"%d\",\"num_shards\":\"%d\",\"shard_layout\":\"%s\","
        "\"shard_stripe\":\"%llu\"}",
        c->layers, c->heads, c->dim, c->ctx, c->vocab, g->step, (unsigned long long)g->tokens,
        (unsigned long long)g->rng, (unsigned long long)g->cursor, g->o.shard_index, g->o.num_shards,
        g->part.stripe ? "stripe" : "contiguous", (unsigned long long)g->part.stripe);
    static const char *pre[3] = {"", "adam_m.", "adam_v."};
    size_t pos = 0;
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < n; i++) {
            const model_tensor *tt = &t->tensors[i];
            char shape[64];
            if (tt->ndim == 2)
                snprintf(shape, sizeof shape, "%zu,%zu", tt->shape[0], tt->shape[1]);
            else
                snprintf(shape, sizeof shape, "%zu", tt->shape[0]);
            len += (size_t)snprintf(h + len, cap - len,
                                    ",\"%s%s\":{\"dtype\":\"F32\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}", pre[s],
                                    tt->name, shape, pos, pos + tt->numel * 4);
            pos += tt->numel * 4;
        }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    unsigned char hl[8];
    for (int i = 0; i < 8; i++) hl[i] = (unsigned char)((uint64_t)len >> (8 * i));
    size_t bytes = t->numel * sizeof(float);
    const file_chunk chunks[5] = {{hl, 8}, {h, len}, {t->params, bytes}, {g->am, bytes}, {g->av, bytes}};
    char why[512];
    int rc = file_write_atomic(path, chunks, 5, why, sizeof why);
    free(h);
    if (rc != 0) err_set(err, errlen, "checkpoint %s: %s", path, why);
    return rc != 0 ? CKPT_WRITE_FAILED : 0;
}

/* The checkpoint of every --checkpoint-every steps. One that cannot be written (a full disk) does not stop
 * training: the run's state is in Redis, the checkpoint only resumes this trainer's own, and the one written
 * last is still whole. Before, the worker left the run at the first full disk. Said at once, then once a
 * minute at most, and when one is written again. */
static int ckpt_periodic(gpt_trainer *g, char *err, size_t errlen)
{
    int rc = ckpt_save(g, err, errlen);
    if (rc == 0 && g->ckpt_failed > 0) {
        fprintf(stderr, "gpt: checkpoint %s written again at step %ld, after %ld that could not be\n", g->ckpt_path,
                g->step, g->ckpt_failed);
        g->ckpt_failed = 0;
    }
    if (rc != CKPT_WRITE_FAILED) return rc;
    if (g->ckpt_failed++ == 0 || now_s() - g->ckpt_said >= CKPT_SAY_S) {
        fprintf(stderr,
                "gpt: step %ld: %s (%ld in a row); training goes on, and the checkpoint written before is "
                "unchanged: free space there or point --checkpoint elsewhere\n",
                g->step, err, g->ckpt_failed);
        g->ckpt_said = now_s();
    }
    return 0;
}

static int meta_u64(const char *h, const char *key, unsigned long long *out)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(h, pat);
    if (!p) return -1;
    char *end;
    *out = strtoull(p + strlen(pat), &end, 10);
    return *end == '"' ? 0 : -1;
}

static void layout_text(char *buf, size_t len, unsigned long long stripe)
{
    if (stripe)
        snprintf(buf, len, "stripes of %llu tokens", stripe);
    else
        snprintf(buf, len, "contiguous");
}

/* The checkpoint's data position is resumed only for the same part of the same division of the
 * split (shard index, number of parts, layout and stripe; a checkpoint without a layout is
 * contiguous): a position in another part would draw from or walk the wrong tokens. Otherwise the
 * part's position starts afresh, and stderr says why. */
static void resume_data_position(gpt_trainer *g, const char *h, uint64_t rng, uint64_t cursor, unsigned long long index)
{
    unsigned long long parts = 1, stripe = 0;
    if (meta_u64(h, "num_shards", &parts)) parts = (unsigned long long)g->o.num_shards;
    if (meta_u64(h, "shard_stripe", &stripe)) stripe = 0;
    if (index == (unsigned long long)g->o.shard_index && parts == (unsigned long long)g->o.num_shards &&
        stripe == g->part.stripe) {
        g->rng = rng;
        g->cursor = cursor;
        return;
    }
    char was[48], is[48];
    layout_text(was, sizeof was, stripe);
    layout_text(is, sizeof is, g->part.stripe);
    fprintf(stderr,
            "gpt: checkpoint %s was written for data part %llu of %llu (%s); this trainer reads part %d of %d (%s): "
            "its data position starts afresh\n",
            g->ckpt_path, index, parts, was, g->o.shard_index, g->o.num_shards, is);
}

/* returns 1 when loaded, 0 when there is no file, -1 on error */
static int ckpt_load(gpt_trainer *g, char *err, size_t errlen)
{
    const char *path = g->ckpt_path;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 0;
        err_set(err, errlen, "checkpoint %s: %s", path, strerror(errno));
        return -1;
    }
    trainer *t = &g->t;
    unsigned char hl[8];
    char *h = NULL;
    uint64_t len = 0;
    int rc = -1;
    if (fread(hl, 1, 8, f) != 8) goto bad;
    for (int i = 7; i >= 0; i--) len = len << 8 | hl[i];
    if (len > (64u << 20)) goto bad;
    h = malloc(len + 1);
    if (!h || fread(h, 1, len, f) != len) goto bad;
    h[len] = 0;
    unsigned long long v[10];
    static const char *keys[10] = {"layers", "heads",  "dim",      "ctx",         "vocab",
                                   "step",   "tokens", "data_rng", "data_cursor", "shard_index"};
    for (int i = 0; i < 10; i++)
        if (meta_u64(h, keys[i], &v[i])) goto bad;
    const gpt_config *c = &g->o.model;
    if (v[0] != (unsigned)c->layers || v[1] != (unsigned)c->heads || v[2] != (unsigned)c->dim ||
        v[3] != (unsigned)c->ctx || v[4] != (unsigned)c->vocab) {
        err_set(err, errlen, "checkpoint %s: model L%llu H%llu C%llu T%llu V%llu does not match the options", path,
                v[0], v[1], v[2], v[3], v[4]);
        goto out;
    }
    static const char *pre[3] = {"", "adam_m.", "adam_v."};
    float *bufs[3] = {t->params, g->am, g->av};
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < t->ntensors; i++) {
            const model_tensor *tt = &t->tensors[i];
            char pat[128];
            snprintf(pat, sizeof pat, "\"%s%s\":{", pre[s], tt->name);
            const char *p = strstr(h, pat);
            const char *d = p ? strstr(p, "\"data_offsets\":[") : NULL;
            unsigned long long a, b;
            if (!d || sscanf(d, "\"data_offsets\":[%llu,%llu]", &a, &b) != 2 || b - a != tt->numel * 4) {
                err_set(err, errlen, "checkpoint %s: tensor %s%s missing or of the wrong size", path, pre[s], tt->name);
                goto out;
            }
            if (fseeko(f, (off_t)(8 + len + a), SEEK_SET) ||
                fread(bufs[s] + tt->offset, sizeof(float), tt->numel, f) != tt->numel)
                goto bad;
        }
    g->step = (long)v[5];
    g->tokens = v[6];
    resume_data_position(g, h, v[7], v[8], v[9]);
    rc = 1;
    goto out;
bad:
    err_set(err, errlen, "checkpoint %s: truncated or not a checkpoint of this trainer", path);
out:
    free(h);
    fclose(f);
    return rc;
}

static void log_line(gpt_trainer *g, const char *fields)
{
    if (!g->log) return;
    fprintf(g->log, "{\"step\":%ld,\"time\":%.3f,%s}\n", g->step, now_s() - g->t0, fields);
    fflush(g->log);
}

#ifdef DILOCO_HAVE_CUDA
/* The same step on the device. With DiLoCo on the device (g->dl) the step ends with its kernels
 * queued (the sync stream of diloco_cuda orders itself after them); otherwise the device parameters
 * are copied back into t->params (the DiLoCo buffer) at the end of every step, so libdiloco always
 * computes its pseudo-gradient from current values, and params_changed copies what DiLoCo wrote back
 * to the device. */
static int cuda_step(gpt_trainer *g, float *loss, char *err, size_t errlen)
{
    trainer *t = &g->t;
    if (gpt_cuda_forward(g->cu, g->inp, g->tgt, loss, err, errlen)) return -1;
    if (!isfinite(*loss)) {
        err_set(err, errlen, "gpt step %ld: loss is not finite (%g)", g->step, (double)*loss);
        return -1;
    }
    double lr = gpt_lr_at(&g->o, g->step);
    if (gpt_cuda_backward(g->cu, err, errlen) || gpt_cuda_clip(g->cu, g->o.grad_clip, NULL, err, errlen) ||
        gpt_cuda_adamw(g->cu, g->step + 1, lr, g->o.beta1, g->o.beta2, g->o.eps, g->o.weight_decay, err, errlen))
        return -1;
    if (!g->dl) {
        if (gpt_cuda_get_params(g->cu, t->params, err, errlen)) return -1; /* waits for the step */
        g->last_norm = gpt_cuda_last_norm(g->cu);
    } else if (g->log) { /* the telemetry line wants this step's norm: wait for it */
        if (gpt_cuda_sync(g->cu, err, errlen)) return -1;
        g->last_norm = gpt_cuda_last_norm(g->cu);
    }
    return 0;
}

static int cuda_params_changed(trainer *t, size_t off, size_t n, char *err, size_t errlen)
{
    gpt_trainer *g = t->impl;
    return gpt_cuda_set_params(g->cu, t->params, off, n, err, errlen);
}
#endif

static int gpt_step(trainer *t, trainer_stats *out, char *err, size_t errlen)
{
    gpt_trainer *g = t->impl;
    next_batch(g);
    float loss;
    double lr = gpt_lr_at(&g->o, g->step);
#ifdef DILOCO_HAVE_CUDA
    if (g->cu) {
        if (cuda_step(g, &loss, err, errlen)) return -1;
        g->step++;
    } else
#endif
    {
        loss = gpt_forward(g->m, t->params, g->inp, g->tgt);
        if (!isfinite(loss)) {
            err_set(err, errlen, "gpt step %ld: loss is not finite (%g)", g->step, (double)loss);
            return -1;
        }
        gpt_backward(g->m, t->params, g->grads);
        if (g->o.grad_reduce && g->o.grad_reduce(g->o.grad_reduce_ctx, g->grads, t->numel, err, errlen) < 0) return -1;
        g->last_norm = gpt_clip_grad_norm(g->grads, t->numel, g->o.grad_clip, g->o.threads);
        g->step++;
        gpt_adamw_step(t->tensors, t->ntensors, t->params, g->grads, g->am, g->av, g->step, lr, g->o.beta1, g->o.beta2,
                       g->o.eps, g->o.weight_decay, g->o.threads);
    }
    g->tokens += (uint64_t)g->o.batch * g->o.seq;
    int evaluated = 0;
    if (g->o.eval_every > 0 && g->step % g->o.eval_every == 0) {
        double el;
        if (gpt_evaluate(t, &el, err, errlen) == 0) evaluated = 1;
    }
    if (g->log) {
        char f[256];
        int n = snprintf(f, sizeof f, "\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.5g,\"tokens\":%llu", (double)loss, lr,
                         g->last_norm, (unsigned long long)g->tokens);
        if (evaluated) snprintf(f + n, sizeof f - (size_t)n, ",\"eval_loss\":%.6f", g->eval_loss);
        log_line(g, f);
    }
    if (g->ckpt_path && g->o.checkpoint_every > 0 && g->step % g->o.checkpoint_every == 0)
        if (ckpt_periodic(g, err, errlen)) return -1;
    if (out) {
        out->loss = loss;
        out->eval_loss = g->eval_loss;
        out->tokens = g->tokens;
    }
    return 0;
}

static int gpt_eval_public(trainer *t, double *loss, char *err, size_t errlen)
{
    gpt_trainer *g = t->impl;
    if (gpt_evaluate(t, loss, err, errlen)) return -1;
    char f[64];
    snprintf(f, sizeof f, "\"eval_loss\":%.6f", *loss);
    log_line(g, f);
    return 0;
}

int gpt_trainer_save(trainer *t, char *err, size_t errlen)
{
    return ckpt_save(t->impl, err, errlen) != 0 ? -1 : 0;
}

long gpt_trainer_steps(const trainer *t)
{
    return ((const gpt_trainer *)t->impl)->step;
}

void gpt_trainer_data_position(const trainer *t, uint64_t *rng, uint64_t *cursor)
{
    const gpt_trainer *g = t->impl;
    *rng = g->rng;
    *cursor = g->cursor;
}

const char *gpt_trainer_device(const trainer *t)
{
    return ((const gpt_trainer *)t->impl)->cu ? "cuda" : "cpu";
}

void gpt_trainer_describe(const trainer *t, char *buf, size_t len)
{
    const gpt_trainer *g = t->impl;
#ifdef DILOCO_HAVE_CUDA
    if (g->cu) {
        static const char *attention[] = {"fused", "gemm", "flash"}; /* GPT_ATTENTION_*, as resolved */
        int a = gpt_cuda_attention(g->cu);
        const char *note = gpt_cuda_attention_note(g->cu), *bias = gpt_cuda_precision_note(g->cu);
        if (g->o.precision == GPT_PRECISION_BF16)
            snprintf(buf, len, "cuda, bf16 products on fp32 master weights%s%s, %s attention%s%s%s",
                     bias[0] ? ", " : "", bias, a >= 0 && a < 3 ? attention[a] : "?", note[0] ? " (" : "", note,
                     note[0] ? ")" : "");
        else
            snprintf(buf, len, "cuda, fp32%s", g->o.tf32 ? " (TF32 products, --tf32)" : "");
        return;
    }
#endif
    snprintf(buf, len, "cpu, fp32, %d thread%s", g->o.threads, g->o.threads == 1 ? "" : "s");
}

struct gpt_cuda *gpt_trainer_cuda(trainer *t)
{
    return ((gpt_trainer *)t->impl)->cu;
}

int gpt_trainer_device_ops(trainer *t, struct diloco_device_ops *ops, char *err, size_t errlen)
{
    gpt_trainer *g = t->impl;
    memset(ops, 0, sizeof *ops);
#ifdef DILOCO_HAVE_CUDA
    if (g->cu) {
        if (!g->dl) {
            if (gpt_cuda_sync(g->cu, err, errlen)) return -1;
            g->dl = dl_cuda_create(gpt_cuda_params_device(g->cu), t->numel, gpt_cuda_stream(g->cu), err, errlen);
            if (!g->dl) return -1;
        }
        dl_cuda_ops(g->dl, ops);
        return 1;
    }
#else
    (void)err;
    (void)errlen;
#endif
    (void)g;
    return 0;
}

int gpt_trainer_params_to_host(trainer *t, char *err, size_t errlen)
{
    gpt_trainer *g = t->impl;
#ifdef DILOCO_HAVE_CUDA
    if (g->dl) return gpt_cuda_get_params(g->cu, t->params, err, errlen);
#else
    (void)err;
    (void)errlen;
#endif
    (void)g;
    return 0;
}

/* --device: *cuda = 1 for the CUDA backend */
static int resolve_device(const gpt_options *o, int *cuda, char *err, size_t errlen)
{
    *cuda = 0;
    if (o->device != GPT_DEVICE_AUTO && o->device != GPT_DEVICE_CPU && o->device != GPT_DEVICE_CUDA) {
        err_set(err, errlen, "gpt: bad device %d", o->device);
        return -1;
    }
    if (o->device == GPT_DEVICE_CPU) return 0;
#ifdef DILOCO_HAVE_CUDA
    char why[512] = "";
    if (gpt_cuda_device_count(why, sizeof why) > 0) {
        *cuda = 1;
        return 0;
    }
    if (o->device == GPT_DEVICE_CUDA) {
        err_set(err, errlen, "gpt: --device cuda: no CUDA device (%s)", why);
        return -1;
    }
#else
    if (o->device == GPT_DEVICE_CUDA) {
        err_set(err, errlen, "gpt: --device cuda: this build has no CUDA backend (nvcc was not found at build time)");
        return -1;
    }
#endif
    return 0;
}

static void gpt_destroy(trainer *t)
{
    if (!t) return;
    gpt_trainer *g = t->impl;
    if (g->ckpt_path && g->step > 0) {
        char err[256];
        if (ckpt_save(g, err, sizeof err)) fprintf(stderr, "gpt: %s\n", err);
    }
    if (g->log) fclose(g->log);
#ifdef DILOCO_HAVE_CUDA
    if (g->pinned) gpt_cuda_unpin(t->params);
    dl_cuda_free(g->dl);
    gpt_cuda_free(g->cu);
#endif
    gpt_model_free(g->m);
    gpt_tokens_free(&g->data);
    free(t->params);
    free((void *)t->tensors);
    free(g->grads);
    free(g->am);
    free(g->av);
    free(g->inp);
    free(g->tgt);
    free(g->data_path);
    free(g->log_path);
    free(g->ckpt_path);
    free(g);
}

static char *dupstr(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* The model, batch, data part and attention the options ask for, checked before anything is built. */
static int check_shape(const gpt_options *o, char *err, size_t errlen)
{
    if (gpt_config_check(&o->model, err, errlen)) return -1;
    if (o->batch < 1 || o->seq < 1 || o->seq > o->model.ctx) {
        err_set(err, errlen, "gpt: need --batch >= 1 and 1 <= --seq <= --ctx (%d), got --batch %d --seq %d",
                o->model.ctx, o->batch, o->seq);
        return -1;
    }
    if (o->num_shards < 1 || o->shard_index < 0 || o->shard_index >= o->num_shards) {
        err_set(err, errlen, "gpt: need 0 <= --shard-index < --num-shards, got --shard-index %d --num-shards %d",
                o->shard_index, o->num_shards);
        return -1;
    }
    if (o->shard_stripe < 0 || (o->shard_stripe && o->shard_layout != GPT_SHARD_STRIPE)) {
        err_set(err, errlen, "gpt: --shard-stripe %d: a stripe length in tokens, for --shard-layout stripe only",
                o->shard_stripe);
        return -1;
    }
    if (o->attention != GPT_ATTENTION_FUSED && o->attention != GPT_ATTENTION_AUTO &&
        o->precision != GPT_PRECISION_BF16) {
        err_set(err, errlen,
                "gpt: --attention %s chooses the attention of --precision bf16; the fp32 attention is always "
                "its own sgemm path: add --precision bf16 or drop --attention",
                o->attention == GPT_ATTENTION_GEMM ? "gemm" : "flash");
        return -1;
    }
    return 0;
}

/* AdamW's settings and the schedule's floor, checked: out of range they make the lr negative or the
 * weights grow; a peak lr of 0 trains nothing, so every pseudo-gradient the worker sends is zero. */
static int check_optimizer(const gpt_options *o, char *err, size_t errlen)
{
    if (!(o->lr > 0) || !(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1) || !(o->eps > 0) ||
        !(o->weight_decay >= 0)) {
        err_set(err, errlen,
                "gpt: need --lr > 0 (at 0 nothing is trained and every pseudo-gradient is zero; default 4e-4), "
                "--beta1 and --beta2 in [0, 1), --eps > 0 and --weight-decay >= 0, got --lr %g "
                "--beta1 %g --beta2 %g --eps %g --weight-decay %g",
                o->lr, o->beta1, o->beta2, o->eps, o->weight_decay);
        return -1;
    }
    if (!(o->min_lr_ratio >= 0 && o->min_lr_ratio <= 1)) { /* outside, the cosine ends above the peak or below 0 */
        err_set(err, errlen, "gpt: --min-lr-ratio is the final lr over the peak lr, in [0, 1]; got %g",
                o->min_lr_ratio);
        return -1;
    }
    return 0;
}

/* A trainer with its own copy of the options (and of their strings) and its functions, nothing built yet. */
static gpt_trainer *trainer_new(const gpt_options *o, char *err, size_t errlen)
{
    gpt_trainer *g = calloc(1, sizeof *g);
    if (!g) {
        err_set(err, errlen, "gpt: out of memory");
        return NULL;
    }
    trainer *t = &g->t;
    g->o = *o;
    g->data_path = dupstr(o->data_path);
    g->log_path = dupstr(o->log_path);
    g->ckpt_path = dupstr(o->checkpoint_path);
    g->o.data_path = g->data_path;
    g->o.log_path = g->log_path;
    g->o.checkpoint_path = g->ckpt_path;
    g->eval_loss = -1;
    g->t0 = now_s();
    t->name = "gpt";
    t->impl = g;
    t->step = gpt_step;
    t->params_changed = NULL;
    t->evaluate = gpt_eval_public;
    t->destroy = gpt_destroy;
    return g;
}

/* The layout, the parameters (initialised from the seed), their gradients, AdamW's moments and the
 * batch's token buffers. */
static int alloc_state(gpt_trainer *g, const gpt_options *o, char *err, size_t errlen)
{
    trainer *t = &g->t;
    model_tensor *tens;
    if (gpt_layout(&o->model, &tens, &t->ntensors, &t->numel, err, errlen)) return -1;
    t->tensors = tens;
    size_t N = (size_t)o->batch * o->seq, bytes = t->numel * sizeof(float);
    if (posix_memalign((void **)&t->params, 64, bytes) || posix_memalign((void **)&g->grads, 64, bytes) ||
        posix_memalign((void **)&g->am, 64, bytes) || posix_memalign((void **)&g->av, 64, bytes) ||
        !(g->inp = malloc(N * sizeof(int))) || !(g->tgt = malloc(N * sizeof(int)))) {
        err_set(err, errlen, "gpt: out of memory for %zu parameters", t->numel);
        return -1;
    }
    memset(g->am, 0, bytes);
    memset(g->av, 0, bytes);
    memset(g->grads, 0, bytes);
    return gpt_init_params(&o->model, o->seed, t->params, t->numel, err, errlen) ? -1 : 0;
}

/* The backend --device picks: CUDA (with its precision and attention, the parameters pinned for its
 * copies) or the CPU model, which is fp32 only and the only one a gradient reduction works with. */
static int open_backend(gpt_trainer *g, const gpt_options *o, char *err, size_t errlen)
{
    int use_cuda;
    if (resolve_device(o, &use_cuda, err, errlen)) return -1;
#ifdef DILOCO_HAVE_CUDA
    if (use_cuda) {
        g->cu = gpt_cuda_create(&o->model, o->batch, o->seq, o->tf32, err, errlen);
        if (!g->cu) return -1;
        if (o->precision == GPT_PRECISION_BF16 && gpt_cuda_set_precision(g->cu, 1, err, errlen)) return -1;
        if (gpt_cuda_set_attention(g->cu, o->attention, err, errlen)) return -1;
        g->pinned = gpt_cuda_pin(g->t.params, g->t.numel * sizeof(float)) == 1;
        g->t.params_changed = cuda_params_changed;
    }
#endif
    if (use_cuda && o->grad_reduce) {
        err_set(err, errlen,
                "gpt: a gradient reduction (data-parallel ranks) is for the CPU backend only: use --device cpu");
        return -1;
    }
    if (!use_cuda && o->precision != GPT_PRECISION_FP32) {
        err_set(err, errlen,
                "gpt: --precision bf16 needs the CUDA backend (--device cuda and a GPU); the CPU "
                "trainer is fp32 only");
        return -1;
    }
    if (!use_cuda) {
        g->m = gpt_model_create(&o->model, o->batch, o->seq, o->threads, err, errlen);
        if (!g->m) return -1;
        g->o.threads = gpt_model_threads(g->m);
    }
    return 0;
}

/* --data: the token file and this worker's part of its training split (without it, random tokens). */
static int open_data(gpt_trainer *g, const gpt_options *o, char *err, size_t errlen)
{
    if (!o->data_path) return 0;
    if (gpt_tokens_load(o->data_path, &g->data, err, errlen)) return -1;
    if (g->data.vocab > (uint32_t)o->model.vocab) {
        err_set(err, errlen, "gpt: %s has vocab %u > model vocab %d", o->data_path, g->data.vocab, o->model.vocab);
        return -1;
    }
    int stripe = o->shard_stripe ? o->shard_stripe : GPT_SHARD_STRIPE_DEFAULT;
    if (gpt_part_init(&g->part, g->data.ntrain, o->num_shards, o->shard_index, o->shard_layout, stripe, o->seq, err,
                      errlen))
        return -1;
    g->cursor = g->part.lo;
    return 0;
}

/* One line on stderr about --checkpoint at start: resumed (its step, and the lr there), or started fresh. The
 * cosine's position is the checkpoint's step and its horizon --steps, which bin/worker counts from that step
 * too (trainer.resumed_step), so a resume finishes the schedule the first start began. A horizon at or before
 * the checkpoint's step (a longer run wanted: raise --steps) trains at the floor lr, which is said. */
static void say_resume(const gpt_trainer *g, int loaded)
{
    if (!loaded) {
        fprintf(stderr,
                "gpt: checkpoint %s does not exist: starting fresh (it is written every --checkpoint-every "
                "steps and at the end)\n",
                g->ckpt_path);
        return;
    }
    fprintf(stderr, "gpt: resuming from %s: step %ld, %llu tokens trained, lr %g at this step\n", g->ckpt_path, g->step,
            (unsigned long long)g->tokens, gpt_lr_at(&g->o, g->step));
    if (g->o.total_steps > 0 && g->step >= g->o.total_steps && g->step >= g->o.warmup_steps)
        fprintf(stderr,
                "gpt: warning: the cosine schedule ends at step %ld (--steps), at or before the checkpoint's step "
                "%ld: every step trains at the floor lr %g (--min-lr-ratio)\n",
                g->o.total_steps, g->step, gpt_lr_at(&g->o, g->step));
}

/* The data order's seed, then --checkpoint's state where its file exists (the parameters, moments, step
 * and data position), handed to the device on CUDA. */
static int resume(gpt_trainer *g, const gpt_options *o, char *err, size_t errlen)
{
    g->rng = o->data_seed * 0x9e3779b97f4a7c15ULL ^ ((uint64_t)o->shard_index + 1) * 0xd1b54a32d192ed03ULL;
    int loaded = g->ckpt_path ? ckpt_load(g, err, errlen) : 0;
    if (loaded < 0) return -1;
    if (g->ckpt_path) say_resume(g, loaded);
    if (loaded) g->t.resumed_step = g->step;
#ifdef DILOCO_HAVE_CUDA
    trainer *t = &g->t;
    if (g->cu &&
        (gpt_cuda_set_params(g->cu, t->params, 0, t->numel, err, errlen) ||
         (loaded && gpt_cuda_set_moments(g->cu, g->am, g->av, err, errlen)) || gpt_cuda_sync(g->cu, err, errlen)))
        return -1;
#endif
    return 0;
}

trainer *gpt_trainer_create(const gpt_options *o, char *err, size_t errlen)
{
    if (check_shape(o, err, errlen) || check_optimizer(o, err, errlen)) return NULL;
    gpt_trainer *g = trainer_new(o, err, errlen);
    if (!g) return NULL;
    if (alloc_state(g, o, err, errlen) || open_backend(g, o, err, errlen) || open_data(g, o, err, errlen) ||
        resume(g, o, err, errlen))
        goto fail;
    if (g->log_path && !(g->log = fopen(g->log_path, "a"))) {
        err_set(err, errlen, "gpt: --log %s: %s", g->log_path, strerror(errno));
        goto fail;
    }
    return &g->t;
fail:
    g->step = 0; /* no checkpoint from a half-built trainer */
    gpt_destroy(&g->t);
    return NULL;
}
