/* gpt_layout.c: the GPT's configuration check, parameter layout, initialisation and the map of its
 * tensors by role (see model.h). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ---- configuration and layout -------------------------------------------------------------- */

int gpt_config_check(const gpt_config *c, char *err, size_t errlen)
{
    if (!c || c->layers < 1 || c->heads < 1 || c->dim < 1 || c->ctx < 1 || c->vocab < 2) {
        err_set(err, errlen, "gpt config: layers, heads, dim, ctx must be >= 1 and vocab >= 2");
        return -1;
    }
    if (c->dim % c->heads) {
        err_set(err, errlen, "gpt config: dim %d is not divisible by heads %d", c->dim, c->heads);
        return -1;
    }
    if (c->layers > 1000 || c->dim > 65536 || c->ctx > 1 << 20 || c->vocab > 1 << 24) {
        err_set(err, errlen, "gpt config: sizes out of range");
        return -1;
    }
    return 0;
}

int gpt_layout(const gpt_config *c, model_tensor **tensors, int *ntensors, size_t *numel, char *err, size_t errlen)
{
    if (gpt_config_check(c, err, errlen)) return -1;
    int n = GPT_TENSORS_HEAD + GPT_TENSORS_PER_LAYER * c->layers + 2;
    const size_t namelen = 40;
    model_tensor *t = calloc(1, (size_t)n * (sizeof *t + namelen));
    if (!t) {
        err_set(err, errlen, "gpt_layout: out of memory");
        return -1;
    }
    char *names = (char *)(t + n);
    size_t C = (size_t)c->dim, off = 0;
    int i = 0;
#define ADD(nd, s0, s1, ...)                                     \
    do {                                                         \
        char *nm = names + (size_t)i * namelen;                  \
        snprintf(nm, namelen, __VA_ARGS__);                      \
        t[i].name = nm;                                          \
        t[i].ndim = nd;                                          \
        t[i].shape[0] = s0;                                      \
        t[i].shape[1] = nd > 1 ? (size_t)(s1) : 0;               \
        t[i].numel = (size_t)(s0) * (nd > 1 ? (size_t)(s1) : 1); \
        t[i].offset = off;                                       \
        off += t[i].numel;                                       \
        i++;                                                     \
    } while (0)
    ADD(2, (size_t)c->vocab, C, "wte.weight");
    ADD(2, (size_t)c->ctx, C, "wpe.weight");
    for (int l = 0; l < c->layers; l++) {
        ADD(1, C, 0, "h.%d.ln1.weight", l);
        ADD(1, C, 0, "h.%d.ln1.bias", l);
        ADD(2, 3 * C, C, "h.%d.attn.qkv.weight", l);
        ADD(1, 3 * C, 0, "h.%d.attn.qkv.bias", l);
        ADD(2, C, C, "h.%d.attn.proj.weight", l);
        ADD(1, C, 0, "h.%d.attn.proj.bias", l);
        ADD(1, C, 0, "h.%d.ln2.weight", l);
        ADD(1, C, 0, "h.%d.ln2.bias", l);
        ADD(2, 4 * C, C, "h.%d.mlp.fc.weight", l);
        ADD(1, 4 * C, 0, "h.%d.mlp.fc.bias", l);
        ADD(2, C, 4 * C, "h.%d.mlp.proj.weight", l);
        ADD(1, C, 0, "h.%d.mlp.proj.bias", l);
    }
    ADD(1, C, 0, "lnf.weight");
    ADD(1, C, 0, "lnf.bias");
#undef ADD
    *tensors = t;
    *ntensors = n;
    *numel = off;
    return 0;
}

/* ---- init ---------------------------------------------------------------------------------- */

static double u01(uint64_t *s)
{
    return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

int gpt_init_params(const gpt_config *c, uint64_t seed, float *params, size_t numel, char *err, size_t errlen)
{
    model_tensor *t;
    int n;
    size_t total;
    if (gpt_layout(c, &t, &n, &total, err, errlen)) return -1;
    if (total != numel) {
        err_set(err, errlen, "gpt_init_params: buffer has %zu elements, layout needs %zu", numel, total);
        free(t);
        return -1;
    }
    double resid_std = 0.02 / sqrt(2.0 * c->layers);
    for (int i = 0; i < n; i++) {
        float *p = params + t[i].offset;
        const char *nm = t[i].name;
        /* one stream per tensor: the init of a tensor does not depend on the others */
        uint64_t s = seed ^ (0x5851f42d4c957f2dULL * (uint64_t)(i + 1));
        if (t[i].ndim >= 2) {
            size_t len = strlen(nm);
            int resid = len > 11 && strcmp(nm + len - 11, "proj.weight") == 0;
            double std = resid ? resid_std : 0.02;
            for (size_t k = 0; k < t[i].numel; k += 2) {
                double u1 = u01(&s), u2 = u01(&s);
                double r = sqrt(-2.0 * log(u1));
                p[k] = (float)(std * r * cos(2.0 * M_PI * u2));
                if (k + 1 < t[i].numel) p[k + 1] = (float)(std * r * sin(2.0 * M_PI * u2));
            }
        } else {
            size_t len = strlen(nm);
            int lnw = len > 6 && strcmp(nm + len - 6, "weight") == 0; /* 1-D weights are LayerNorm */
            for (size_t k = 0; k < t[i].numel; k++) p[k] = lnw ? 1.0f : 0.0f;
        }
    }
    free(t);
    return 0;
}

/* ---- the tensors by role ------------------------------------------------------------------- */

void gpt_params_bind(const model_tensor *t, int ntensors, float *base, gpt_params *v)
{
    int layers = (ntensors - GPT_TENSORS_HEAD - 2) / GPT_TENSORS_PER_LAYER;
    v->wte = base + t[0].offset;
    v->wpe = base + t[1].offset;
    for (int l = 0; l < layers; l++) {
        const model_tensor *u = t + GPT_TENSORS_HEAD + GPT_TENSORS_PER_LAYER * l;
        gpt_layer_params *h = &v->h[l];
        h->ln1w = base + u[0].offset;
        h->ln1b = base + u[1].offset;
        h->qkvw = base + u[2].offset;
        h->qkvb = base + u[3].offset;
        h->projw = base + u[4].offset;
        h->projb = base + u[5].offset;
        h->ln2w = base + u[6].offset;
        h->ln2b = base + u[7].offset;
        h->fcw = base + u[8].offset;
        h->fcb = base + u[9].offset;
        h->fcprojw = base + u[10].offset;
        h->fcprojb = base + u[11].offset;
    }
    v->lnfw = base + t[ntensors - 2].offset;
    v->lnfb = base + t[ntensors - 1].offset;
}
