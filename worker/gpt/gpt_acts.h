/* gpt_acts.h: the activation layout of the GPT, one description shared by the CPU backend
 * (gpt_model.c) and the CUDA backend (worker/cuda/gpt_cuda_model.cu), as gpt_params_bind (model/model.h)
 * is for the parameters.
 *
 * Every activation a forward keeps for its backward, and the backward's scratch, for batch B x
 * sequence T, lives in one arena the backend allocates (host or device memory): gpt_acts_bind points
 * the fields into it, each buffer starting on a multiple of `align` floats. A backend's own scratch
 * (the CPU's per-thread attention rows, the CUDA attention's permuted q/k/v) follows, taken with
 * gpt_arena_take. Shapes use N = B*T, C = dim, NH = heads, V = vocab. */
#ifndef DILOCO_GPT_ACTS_H
#define DILOCO_GPT_ACTS_H

#include <stddef.h>

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpt_layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C) (N) (N) */
    float *qkv;                       /* (N,3C) */
    float *att;                       /* (B,NH,T,T) softmax probabilities, 0 above the diagonal */
    float *atty;                      /* (N,C) */
    float *res2;                      /* (N,C) */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N,C) (N) (N) */
    float *fch, *fch_gelu;            /* (N,4C) */
    float *res3;                      /* (N,C) */
} gpt_layer_acts;

typedef struct gpt_acts {
    gpt_layer_acts *h;                       /* one entry per layer, allocated by the caller */
    float *encoded;                          /* (N,C) */
    float *lnf, *lnf_mean, *lnf_rstd;        /* (N,C) (N) (N) */
    float *logits;                           /* (N,V), rows logits_ld apart; probabilities after the loss */
    float *losses;                           /* (N) */
    float *dres, *dln, *datty, *dqkv, *dfch; /* backward: (N,C) (N,C) (N,C) (N,3C) (N,4C) */
} gpt_acts;

/* Floats the activations of batch B x T take with every buffer rounded up to align floats. */
size_t gpt_acts_size(const gpt_config *c, int B, int T, size_t align);
/* Points a's fields (a->h: c->layers entries) into arena, which holds at least gpt_acts_size floats;
 * arena may be a device address (only offsets are added). Returns the floats used. */
size_t gpt_acts_bind(const gpt_config *c, int B, int T, size_t align, float *arena, gpt_acts *a);
/* What a backend's layout may change from the CPU's: each layer's att of att floats instead of
 * (B,NH,T,T) (an attention that keeps one value per row there: the CUDA bf16 fused and flash attentions
 * keep the log-sum-exp, B*NH*T), with no_fp32_inputs no fp32 ln1, ln2, fch_gelu and lnf (left NULL:
 * the CUDA bf16 path keeps those in bf16 only), and logits rows logits_ld floats apart instead of V (0:
 * V; the CUDA bf16 path pads them to a multiple of 64, so that the head's products get aligned rows). */
typedef struct gpt_acts_shape {
    size_t att;
    int no_fp32_inputs;
    size_t logits_ld;
} gpt_acts_shape;
size_t gpt_acts_size_shaped(const gpt_config *c, int B, int T, size_t align, const gpt_acts_shape *shape);
size_t gpt_acts_bind_shaped(const gpt_config *c, int B, int T, size_t align, const gpt_acts_shape *shape, float *arena,
                            gpt_acts *a);

/* n rounded up to a multiple of align. */
static inline size_t gpt_arena_round(size_t n, size_t align)
{
    return (n + align - 1) / align * align;
}
/* The next n floats (rounded up to align) of an arena at *cur; advances *cur. */
static inline float *gpt_arena_take(float **cur, size_t n, size_t align)
{
    float *p = *cur;
    *cur += gpt_arena_round(n, align);
    return p;
}

#ifdef __cplusplus
}
#endif
#endif
