/* gpt_acts.c: the activation layout of gpt_acts.h. One walk over the buffers in a fixed order both
 * sizes the arena and binds it, so the two cannot disagree. */
#include "gpt_acts.h"

/* Walks the buffers from offset 0; binds them when arena is not NULL. Returns the floats used. */
static size_t walk(const gpt_config *c, int B, int T, size_t align, const gpt_acts_shape *shape, float *arena,
                   gpt_acts *a)
{
    size_t N = (size_t)B * T, C = (size_t)c->dim, att = shape->att;
    size_t V = shape->logits_ld ? shape->logits_ld : (size_t)c->vocab; /* (the logits' row stride) */
    int inputs = !shape->no_fp32_inputs; /* the fp32 outputs of the LayerNorms and the GELU */
    size_t off = 0;
#define TAKE(field, n)                              \
    do {                                            \
        if (arena) (field) = arena + off;           \
        off += gpt_arena_round((size_t)(n), align); \
    } while (0)
/* a buffer the shape may leave out: NULL then, so a use of it faults instead of reading another's */
#define TAKE_IF(keep, field, n) \
    do {                        \
        if (keep)               \
            TAKE(field, n);     \
        else if (arena)         \
            (field) = NULL;     \
    } while (0)
    for (int l = 0; l < c->layers; l++) {
        gpt_layer_acts *h = arena ? &a->h[l] : NULL; /* only dereferenced when binding */
        TAKE_IF(inputs, h->ln1, N * C);
        TAKE(h->ln1_mean, N);
        TAKE(h->ln1_rstd, N);
        TAKE(h->qkv, N * 3 * C);
        TAKE(h->att, att);
        TAKE(h->atty, N * C);
        TAKE(h->res2, N * C);
        TAKE_IF(inputs, h->ln2, N * C);
        TAKE(h->ln2_mean, N);
        TAKE(h->ln2_rstd, N);
        TAKE(h->fch, N * 4 * C);
        TAKE_IF(inputs, h->fch_gelu, N * 4 * C);
        TAKE(h->res3, N * C);
    }
    TAKE(a->encoded, N * C);
    TAKE_IF(inputs, a->lnf, N * C);
    TAKE(a->lnf_mean, N);
    TAKE(a->lnf_rstd, N);
    TAKE(a->logits, N * V);
    TAKE(a->losses, N);
    TAKE(a->dres, N * C);
    TAKE(a->dln, N * C);
    TAKE(a->datty, N * C);
    TAKE(a->dqkv, N * 3 * C);
    TAKE(a->dfch, N * 4 * C);
#undef TAKE_IF
#undef TAKE
    return off;
}

static gpt_acts_shape cpu_shape(const gpt_config *c, int B, int T)
{
    gpt_acts_shape s = {(size_t)B * (size_t)c->heads * (size_t)T * (size_t)T, 0, 0};
    return s;
}

size_t gpt_acts_size(const gpt_config *c, int B, int T, size_t align)
{
    gpt_acts_shape s = cpu_shape(c, B, T);
    return walk(c, B, T, align, &s, NULL, NULL);
}

size_t gpt_acts_bind(const gpt_config *c, int B, int T, size_t align, float *arena, gpt_acts *a)
{
    gpt_acts_shape s = cpu_shape(c, B, T);
    return walk(c, B, T, align, &s, arena, a);
}

size_t gpt_acts_size_shaped(const gpt_config *c, int B, int T, size_t align, const gpt_acts_shape *shape)
{
    return walk(c, B, T, align, shape, NULL, NULL);
}

size_t gpt_acts_bind_shaped(const gpt_config *c, int B, int T, size_t align, const gpt_acts_shape *shape, float *arena,
                            gpt_acts *a)
{
    return walk(c, B, T, align, shape, arena, a);
}
