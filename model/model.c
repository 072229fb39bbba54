/* model.c: a run's model by kind, for callers that hold only the run's (trainer, model) strings:
 * the coordinator's init and checkpoints (see model.h). Each kind's own code is in its file. */
#include "model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static int is_kind(const model_spec *s, const char *kind)
{
    return s->kind && !strcmp(s->kind, kind);
}

static int unknown_kind(const char *kind, char *err, size_t errlen)
{
    err_set(err, errlen, "unknown trainer '%s' (gpt or quadratic)", kind ? kind : "");
    return -1;
}

void model_spec_format(const model_spec *s, char *out, size_t cap)
{
    if (!cap) return;
    out[0] = 0;
    if (is_kind(s, "quadratic")) snprintf(out, cap, "--numel %" PRIu64, (uint64_t)s->numel);
    if (is_kind(s, "gpt"))
        snprintf(out, cap, "--layers %d --heads %d --dim %d --ctx %d --vocab %d", s->gpt.layers, s->gpt.heads,
                 s->gpt.dim, s->gpt.ctx, s->gpt.vocab);
}

int model_spec_parse(const char *kind, const char *model, model_spec *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (kind && !strcmp(kind, "quadratic")) {
        unsigned long long n;
        if (sscanf(model, "--numel %llu", &n) != 1) goto bad;
        s->kind = "quadratic";
        s->numel = (size_t)n;
        return 0;
    }
    if (kind && !strcmp(kind, "gpt")) {
        gpt_config *g = &s->gpt;
        if (sscanf(model, "--layers %d --heads %d --dim %d --ctx %d --vocab %d", &g->layers, &g->heads, &g->dim,
                   &g->ctx, &g->vocab) != 5)
            goto bad;
        s->kind = "gpt";
        return 0;
    }
    return unknown_kind(kind, err, errlen);
bad:
    err_set(err, errlen, "'%s' is not a %s model (expected what `coordinator init` writes, e.g. '%s')", model, kind,
            !strcmp(kind, "gpt") ? "--layers 2 --heads 4 --dim 128 --ctx 128 --vocab 256" : "--numel 1000");
    return -1;
}

int model_layout(const model_spec *s, model_tensor **tensors, int *ntensors, size_t *numel, char *err, size_t errlen)
{
    if (is_kind(s, "gpt")) return gpt_layout(&s->gpt, tensors, ntensors, numel, err, errlen);
    if (!is_kind(s, "quadratic")) return unknown_kind(s->kind, err, errlen);
    if (s->numel == 0) {
        err_set(err, errlen, "a quadratic model needs at least one parameter");
        return -1;
    }
    if (!(*tensors = malloc(sizeof **tensors))) {
        err_set(err, errlen, "out of memory for a layout");
        return -1;
    }
    **tensors = quadratic_tensor(s->numel);
    *ntensors = 1;
    *numel = s->numel;
    return 0;
}

int model_init_params(const model_spec *s, uint64_t seed, float *params, size_t numel, char *err, size_t errlen)
{
    if (is_kind(s, "gpt")) return gpt_init_params(&s->gpt, seed, params, numel, err, errlen);
    if (!is_kind(s, "quadratic")) return unknown_kind(s->kind, err, errlen);
    if (numel != s->numel) {
        err_set(err, errlen, "quadratic init: buffer has %zu elements, the model %zu", numel, s->numel);
        return -1;
    }
    quadratic_init_params(seed, params, numel);
    return 0;
}

void model_tensor_shape_str(const model_tensor *t, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, d ? ", %zu" : "%zu", t->shape[d]);
    if (n < cap) snprintf(out + n, cap - n, "]");
}

size_t model_dim0_chunk(const model_tensor *t, int ranks, int rank, size_t *offset)
{
    *offset = t->offset;
    if (t->ndim == 0 || ranks <= 1) return rank == 0 ? t->numel : 0;
    size_t rows = t->shape[0], row = rows ? t->numel / rows : 0, c = (rows + (size_t)ranks - 1) / (size_t)ranks;
    size_t lo = (size_t)rank * c < rows ? (size_t)rank * c : rows;
    size_t hi = (size_t)(rank + 1) * c < rows ? (size_t)(rank + 1) * c : rows;
    *offset = t->offset + lo * row;
    return (hi - lo) * row;
}
