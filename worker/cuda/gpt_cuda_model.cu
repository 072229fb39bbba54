/* gpt_cuda_model.cu: the CUDA GPT model behind gpt_cuda.h: every buffer allocated once, host <->
 * device copies, forward, backward, gradient clipping and AdamW, each layer through the launchers of
 * gpt_cuda_kernels.cu in the order of worker/gpt/gpt_model.c. In bf16 precision (gpt_cuda_set_precision)
 * the products and the attention (fused, or with bf16 products: gpt_cuda_set_attention) go through
 * gpt_cuda_bf16.cu's launchers instead (mm_forward, attention_forward and their backwards pick), on a
 * bf16 copy of the fp32 master weights made at the start of each forward. */
#include "gpt_cuda_internal.h"
#include "gpt/gpt_acts.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------- */
/* the model                                                                                   */

/* the bf16 path's inputs of a layer's products (N*C each, fch_gelu N*4C): written by the kernel that
 * produces them (LayerNorm, GELU) or copied once (the attention's output), read by the forward product
 * and again by the backward's weight gradient, so nothing is converted twice and their fp32 copies are
 * never written */
typedef struct {
    __nv_bfloat16 *ln1, *atty, *ln2, *fch_gelu;
} layer_bf16;

struct gpt_cuda {
    gpt_config c;
    int B, T, tf32;
    size_t numel;
    model_tensor *tensors;
    int ntensors;
    cudaStream_t st;
    cublasHandle_t h;
    float *params, *grads, *m, *v;
    gpt_params p, g;                           /* the device parameters and gradients by role (gpt_params_bind) */
    gpt_acts a;                                /* the activations (worker/gpt/gpt_acts.h), on the device */
    float *q, *k, *vv, *y, *dq, *dk, *dv, *dp; /* attention scratch (l_attention_forward/backward) */
    int *dtok;                                 /* inputs N | targets N | order N | uniq N | ustart N+1 */
    int *htok;                                 /* pinned staging of the same */
    int *slot, *cnt;                           /* host: V (token -> bucket+1), N */
    int nuniq, have_targets;
    double *red, *hred; /* device reduction scratch, pinned host copy of the results */
    float *part;        /* the column sums' chunks (ctx.part): COLSUM_PART(4C) floats */
    float *arena;
    int arena_square, arena_lean; /* alloc_arena: it holds the (B, NH, T, T) buffers; it lacks bf16's inputs */
    size_t vld;                   /* alloc_arena: the logits' row stride, V or bf16's padded one (logits_stride) */
    int bf16;                     /* gpt_cuda_set_precision */
    gpt_lt *lt;                   /* bf16: cuBLASLt for the forward products (gpt_cuda_lt.cu) */
    __nv_bfloat16 *w16, *s16a;    /* bf16: the weights' copy (numel), scratch N*max(padded V,4C) */
    layer_bf16 *l16;              /* bf16: each layer's bf16 product inputs, kept for the backward */
    __nv_bfloat16 *lnf16;         /* bf16: the final LayerNorm's output, the head's input (N*C) */
    int attention;                /* gpt_cuda_set_attention: GPT_ATTENTION_* (bf16 only) */
    __nv_bfloat16 *q16, *k16, *v16, *dy16, *p16; /* gemm attention's operands: N*C each, B*NH*T*T */
    float *loss_stats;                           /* bf16: each row's (max, 1 / sum) of the logits, 2N */
    char attention_note[192];                    /* auto's flash check on this device (gpt_cuda_attention_note) */
    gpt_prof *prof;                              /* gpt_cuda_set_profile: NULL when off */
};

/* a launcher call timed as `phase` when profiling is on (gpt_cuda_profile.cu): its status passes through */
#define TIMED(phase, call) (gpt_prof_begin(g->prof, (phase), g->st), gpt_prof_end(g->prof, g->st, (call)))

extern "C" size_t gpt_cuda_numel(const gpt_cuda *g)
{
    return g ? g->numel : 0;
}

extern "C" void gpt_cuda_free(gpt_cuda *g)
{
    if (!g) return;
    if (g->st) cudaStreamSynchronize(g->st);
    gpt_prof_free(g->prof);
    gpt_lt_free(g->lt);
    if (g->h) cublasDestroy(g->h);
    if (g->st) cudaStreamDestroy(g->st);
    cudaFree(g->arena);
    cudaFree(g->w16);
    cudaFree(g->loss_stats);
    cudaFree(g->q16);
    cudaFree(g->params);
    cudaFree(g->dtok);
    cudaFree(g->red);
    cudaFree(g->part);
    if (g->htok) cudaFreeHost(g->htok);
    if (g->hred) cudaFreeHost(g->hred);
    free(g->slot);
    free(g->cnt);
    free(g->p.h);
    free(g->g.h);
    free(g->a.h);
    free(g->l16);
    free(g->tensors);
    free(g);
    cudaGetLastError();
}

/* The logits' row stride: bf16 rounds V up to a multiple of 64 (GPT-2's 50257 -> 50304; 0.1% more), so that
 * every row of the logits and of their bf16 gradient starts 16-byte aligned, as cuBLAS's fastest kernels
 * for the head's three products want their operands (an odd stride leaves it slower ones; llm.c pads its
 * vocabulary for the same reason). The padding columns are never read or written. DILOCO_CUDA_VOCAB_PAD=0:
 * V (the benchmark's comparison, tools/gpu_check.sh). fp32 keeps V: its path is the exact one. */
static size_t logits_stride(size_t V, int bf16)
{
    const char *v = getenv("DILOCO_CUDA_VOCAB_PAD");
    return bf16 && !(v && !strcmp(v, "0")) ? gpt_arena_round(V, 64) : V;
}

/* The activations (gpt_acts.h), then the attention's scratch, in one allocation; every sub-buffer starts
 * on 64 floats (256 bytes). square: the (B, NH, T, T) buffers the fp32 and gemm attentions need (each
 * layer's probabilities in att, dP); without, the fused and flash attentions' one value per row (the
 * log-sum-exp in att, D in dp: B*NH*T) takes their place (GPT-2 small at 8 x 1024: 4.9 GB less). lean:
 * no fp32 ln1, ln2, fch_gelu, lnf, which bf16 keeps in bf16 only (layer_bf16; 1.8 GB less there). Replaces
 * the arena there was: its contents are a step's, and a step after a precision or attention change
 * starts with a forward. */
static int alloc_arena(gpt_cuda *g, int square, int lean, char *err, size_t errlen)
{
    const gpt_config *c = &g->c;
    int B = g->B, T = g->T;
    size_t N = (size_t)B * T, C = (size_t)c->dim, rows = (size_t)B * c->heads * T, tt = square ? rows * T : rows;
    gpt_acts_shape shape = {tt, lean, logits_stride((size_t)c->vocab, lean)};
    if (g->arena) {
        CK(cudaStreamSynchronize(g->st));
        cudaFree(g->arena);
        g->arena = NULL;
    }
    size_t scratch = gpt_arena_round(N * C, 64) * 7 + gpt_arena_round(tt, 64);
    size_t total = gpt_acts_size_shaped(c, B, T, 64, &shape) + scratch;
    CK(cudaMalloc((void **)&g->arena, total * sizeof(float)));
    CK(cudaMemsetAsync(g->arena, 0, total * sizeof(float), g->st));
    float *cur = g->arena + gpt_acts_bind_shaped(c, B, T, 64, &shape, g->arena, &g->a);
    g->q = gpt_arena_take(&cur, N * C, 64);
    g->k = gpt_arena_take(&cur, N * C, 64);
    g->vv = gpt_arena_take(&cur, N * C, 64);
    g->y = gpt_arena_take(&cur, N * C, 64);
    g->dq = gpt_arena_take(&cur, N * C, 64);
    g->dk = gpt_arena_take(&cur, N * C, 64);
    g->dv = gpt_arena_take(&cur, N * C, 64);
    g->dp = gpt_arena_take(&cur, tt, 64);
    g->arena_square = square;
    g->arena_lean = lean;
    g->vld = shape.logits_ld;
    return 0;
}

/* the arena the precision and attention now set need (alloc_arena) */
static int fit_arena(gpt_cuda *g, char *err, size_t errlen)
{
    int square = !g->bf16 || g->attention == GPT_ATTENTION_GEMM, lean = g->bf16;
    return square == g->arena_square && lean == g->arena_lean ? 0 : alloc_arena(g, square, lean, err, errlen);
}

static int create_inner(gpt_cuda *g, char *err, size_t errlen)
{
    const gpt_config *c = &g->c;
    int B = g->B, T = g->T;
    size_t N = (size_t)B * T, V = (size_t)c->vocab;
    CK(cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking));
    CKB(cublasCreate(&g->h));
    CKB(cublasSetStream(g->h, g->st));
    if (set_math(g->h, g->tf32, err, errlen)) return -1;
    /* params, grads, m, v in one allocation */
    CK(cudaMalloc((void **)&g->params, 4 * g->numel * sizeof(float)));
    g->grads = g->params + g->numel;
    g->m = g->grads + g->numel;
    g->v = g->m + g->numel;
    CK(cudaMemsetAsync(g->params, 0, 4 * g->numel * sizeof(float), g->st));
    if (alloc_arena(g, 1, 0, err, errlen)) return -1;
    CK(cudaMalloc((void **)&g->dtok, (5 * N + 1) * sizeof(int)));
    CK(cudaMallocHost((void **)&g->htok, (5 * N + 1) * sizeof(int)));
    CK(cudaMalloc((void **)&g->red, (RED_BLOCKS + 2) * sizeof(double)));
    CK(cudaMalloc((void **)&g->part, COLSUM_PART(4 * (size_t)c->dim) * sizeof(float)));
    CK(cudaMallocHost((void **)&g->hred, 2 * sizeof(double)));
    g->slot = (int *)calloc(V, sizeof(int));
    g->cnt = (int *)calloc(N + 1, sizeof(int));
    if (!g->slot || !g->cnt) {
        err_set(err, errlen, "gpt_cuda: out of memory");
        return -1;
    }
    gpt_params_bind(g->tensors, g->ntensors, g->params, &g->p);
    gpt_params_bind(g->tensors, g->ntensors, g->grads, &g->g);
    CK(cudaStreamSynchronize(g->st));
    return 0;
}

extern "C" gpt_cuda *gpt_cuda_create(const gpt_config *c, int B, int T, int tf32, char *err, size_t errlen)
{
    if (gpt_config_check(c, err, errlen)) return NULL;
    if (B < 1 || T < 1 || T > c->ctx) {
        err_set(err, errlen, "gpt cuda: batch must be >= 1 and 1 <= seq <= ctx (%d), got batch %d seq %d", c->ctx, B,
                T);
        return NULL;
    }
    char why[256] = "";
    if (gpt_cuda_device_count(why, sizeof why) == 0) {
        err_set(err, errlen, "gpt cuda: no CUDA device (%s)", why);
        return NULL;
    }
    gpt_cuda *g = (gpt_cuda *)calloc(1, sizeof *g);
    if (!g) {
        err_set(err, errlen, "gpt cuda: out of memory");
        return NULL;
    }
    g->c = *c;
    g->B = B;
    g->T = T;
    g->tf32 = tf32;
    if (gpt_layout(c, &g->tensors, &g->ntensors, &g->numel, err, errlen)) {
        free(g);
        return NULL;
    }
    g->p.h = (gpt_layer_params *)calloc((size_t)c->layers, sizeof(gpt_layer_params));
    g->g.h = (gpt_layer_params *)calloc((size_t)c->layers, sizeof(gpt_layer_params));
    g->a.h = (gpt_layer_acts *)calloc((size_t)c->layers, sizeof(gpt_layer_acts));
    if (!g->p.h || !g->g.h || !g->a.h) {
        err_set(err, errlen, "gpt cuda: out of memory");
        gpt_cuda_free(g);
        return NULL;
    }
    if (create_inner(g, err, errlen)) {
        gpt_cuda_free(g);
        return NULL;
    }
    return g;
}

/* The bf16 buffers in one allocation: the weights' copy (numel), the scratch s16a (N*max(V,4C), V padded
 * to 64: an incoming gradient before its product, or the logits' gradient, rows as the logits'), each
 * layer's product inputs (7N*C) and the head's (N*C). GPT-2 small at 8 x 1024: 0.25 + 0.82 + 1.06 + 0.01 GB. */
static int alloc_bf16(gpt_cuda *g, char *err, size_t errlen)
{
    size_t N = (size_t)g->B * g->T, C = (size_t)g->c.dim, V = gpt_arena_round((size_t)g->c.vocab, 64);
    size_t wide = V > 4 * C ? V : 4 * C;
    size_t NC = gpt_arena_round(N * C, 128), L = (size_t)g->c.layers;
    size_t total = gpt_arena_round(g->numel, 128) + gpt_arena_round(N * wide, 128) + L * 7 * NC + NC;
    if (!g->l16 && !(g->l16 = (layer_bf16 *)calloc(L ? L : 1, sizeof(layer_bf16)))) {
        err_set(err, errlen, "gpt cuda: out of memory");
        return -1;
    }
    CK(cudaMalloc((void **)&g->w16, total * sizeof(__nv_bfloat16)));
    g->s16a = g->w16 + gpt_arena_round(g->numel, 128);
    __nv_bfloat16 *cur = g->s16a + gpt_arena_round(N * wide, 128);
    for (size_t l = 0; l < L; l++) {
        g->l16[l].ln1 = cur;
        g->l16[l].atty = cur + NC;
        g->l16[l].ln2 = cur + 2 * NC;
        g->l16[l].fch_gelu = cur + 3 * NC;
        cur += 7 * NC;
    }
    g->lnf16 = cur;
    return 0;
}

/* the bf16 copy of a weight (w points into params; its values are the forward's copy, made at its start) */
static const __nv_bfloat16 *w16_of(const gpt_cuda *g, const float *w)
{
    return g->w16 + (w - g->params);
}

/* cuBLASLt's algorithm for each forward product of each layer, chosen now (the pointers' alignments
 * differ between layers), so gpt_cuda_precision_note can say what they got before the first step */
static int plan_products(gpt_cuda *g, char *err, size_t errlen)
{
    ctx x = {g->st, g->h, err, errlen, g->lt, g->part};
    if (!g->lt) return 0;
    int C = g->c.dim, N = g->B * g->T;
    for (int l = 0; l < g->c.layers; l++) {
        gpt_layer_params *p = &g->p.h[l];
        gpt_layer_acts *a = &g->a.h[l];
        layer_bf16 *o = &g->l16[l];
        const float *xin = l ? g->a.h[l - 1].res3 : g->a.encoded;
        if (l_linear_lt_plan(&x, a->qkv, o->ln1, w16_of(g, p->qkvw), p->qkvb, NULL, N, C, 3 * C) < 0 ||
            l_linear_lt_plan(&x, a->res2, o->atty, w16_of(g, p->projw), p->projb, xin, N, C, C) < 0 ||
            l_linear_lt_plan(&x, a->fch, o->ln2, w16_of(g, p->fcw), p->fcb, NULL, N, C, 4 * C) < 0 ||
            l_linear_lt_plan(&x, a->res3, o->fch_gelu, w16_of(g, p->fcprojw), p->fcprojb, a->res2, N, 4 * C, C) < 0)
            return -1;
    }
    return 0;
}

/* cuBLASLt for the forward products unless DILOCO_CUDA_LT=0: then the two passes (a way round a library
 * that misbehaves, and the tests' way to run that path in a whole model) */
static int lt_wanted(void)
{
    const char *v = getenv("DILOCO_CUDA_LT");
    return !(v && !strcmp(v, "0"));
}

extern "C" int gpt_cuda_set_precision(gpt_cuda *g, int bf16, char *err, size_t errlen)
{
    g->bf16 = 0;
    g->have_targets = 0; /* a backward needs a forward in its precision: what the logits buffer holds differs */
    if (!bf16) return fit_arena(g, err, errlen);
    if (!g->w16 && alloc_bf16(g, err, errlen)) return -1;
    if (!g->loss_stats) CK(cudaMalloc((void **)&g->loss_stats, 2 * (size_t)g->B * g->T * sizeof(float)));
    if (g->c.dim % g->c.heads || g->c.dim / g->c.heads > 256) {
        err_set(err, errlen, "gpt cuda: --precision bf16 takes a head size (dim / heads) up to 256, got %d / %d",
                g->c.dim, g->c.heads);
        return -1;
    }
    if (!g->lt && lt_wanted() && !(g->lt = gpt_lt_create(err, errlen))) return -1;
    g->bf16 = 1;
    return fit_arena(g, err, errlen) || plan_products(g, err, errlen) ? -1 : 0;
}

extern "C" size_t gpt_cuda_logits_stride(const gpt_cuda *g)
{
    return g->vld;
}

extern "C" int gpt_cuda_precision_bf16(const gpt_cuda *g)
{
    return g->bf16;
}

extern "C" const char *gpt_cuda_precision_note(const gpt_cuda *g)
{
    if (!g->bf16) return "";
    return g->lt ? gpt_lt_note(g->lt) : "bias added before each product (cuBLASLt off: DILOCO_CUDA_LT=0)";
}

/* The gemm attention's bf16 operands in one allocation, made on first use: q, k, v, dy (N*C each) and
 * one (B, NH, T, T) matrix for P, then dS. GPT-2 small at batch 8 x 1024 (N 8192, C 768, NH 12): 4 x
 * 8192 x 768 x 2 B = 48 MiB and 96 x 1024 x 1024 x 2 B = 192 MiB, 240 MiB in all. The fp32 buffers it
 * also uses are the fp32 attention's, allocated by gpt_cuda_create in every precision: the probabilities
 * of each layer (a->att, 12 x 384 MiB = 4.5 GiB there), dP (384 MiB), q, k, v, y, dq, dk, dv (24 MiB
 * each). */
extern "C" int gpt_cuda_set_attention(gpt_cuda *g, int attention, char *err, size_t errlen)
{
    g->attention_note[0] = 0;
    if (attention == GPT_ATTENTION_AUTO) { /* flash where its kernels take the shapes and pass the device check */
        char why[256];
        attention = GPT_ATTENTION_FUSED;
        if (!l_flash_mma_check(g->B, g->T, g->c.dim, g->c.heads, why, sizeof why)) {
            int t = l_flash_mma_trusted(g->st, g->c.dim / g->c.heads, g->attention_note, sizeof g->attention_note, err,
                                        errlen);
            if (t < 0) { /* a CUDA error in the check: the device is in doubt, but say how to train without flash */
                size_t len = strlen(err);
                if (len + 1 < errlen)
                    snprintf(
                        err + len, errlen - len,
                        " (in --attention auto's check of the flash kernels: --attention fused trains without them)");
                return -1;
            }
            if (t) attention = GPT_ATTENTION_FLASH;
        }
    }
    if (attention != GPT_ATTENTION_FUSED && attention != GPT_ATTENTION_GEMM && attention != GPT_ATTENTION_FLASH) {
        err_set(err, errlen, "gpt cuda: attention %d is none of fused (%d), gemm (%d), flash (%d), auto (%d)",
                attention, GPT_ATTENTION_FUSED, GPT_ATTENTION_GEMM, GPT_ATTENTION_FLASH, GPT_ATTENTION_AUTO);
        return -1;
    }
    if (attention == GPT_ATTENTION_FLASH && l_flash_mma_check(g->B, g->T, g->c.dim, g->c.heads, err, errlen)) return -1;
    if (attention == GPT_ATTENTION_GEMM && !g->q16) {
        size_t NC = gpt_arena_round((size_t)g->B * g->T * g->c.dim, 128);
        size_t A = (size_t)g->B * g->c.heads * g->T * g->T;
        CK(cudaMalloc((void **)&g->q16, (4 * NC + A) * sizeof(__nv_bfloat16)));
        g->k16 = g->q16 + NC;
        g->v16 = g->k16 + NC;
        g->dy16 = g->v16 + NC;
        g->p16 = g->dy16 + NC;
    }
    g->attention = attention;
    g->have_targets = 0; /* a->att holds what the forward's attention keeps (fused, flash: lse; gemm: probabilities) */
    return fit_arena(g, err, errlen);
}

extern "C" int gpt_cuda_attention(const gpt_cuda *g)
{
    return g->attention;
}

extern "C" const char *gpt_cuda_attention_note(const gpt_cuda *g)
{
    return g->attention_note;
}

/* attention: fp32 and bf16 gemm keep the probabilities in a->att; bf16 fused and flash keep only each
 * row's log-sum-exp there */
static int attention_forward(gpt_cuda *g, ctx *x, gpt_layer_acts *a, int B, int T, int C, int NH)
{
    if (g->bf16 && g->attention == GPT_ATTENTION_GEMM)
        return l_attention_forward_bf16(x, a->atty, a->att, a->qkv, g->q, g->k, g->vv, g->y, g->q16, g->k16, g->v16,
                                        g->p16, B, T, C, NH);
    if (g->bf16 && g->attention == GPT_ATTENTION_FLASH)
        return l_flash_mma_forward(x, a->atty, a->att, a->qkv, B, T, C, NH);
    if (g->bf16) return l_flash_forward(x, a->atty, a->att, a->qkv, B, T, C, NH);
    return l_attention_forward(x, a->atty, a->att, a->qkv, g->q, g->k, g->vv, g->y, B, T, C, NH);
}

static int attention_backward(gpt_cuda *g, ctx *x, gpt_layer_acts *a, int B, int T, int C, int NH)
{
    if (g->bf16 && g->attention == GPT_ATTENTION_GEMM)
        return l_attention_backward_bf16(x, g->a.dqkv, g->a.datty, a->qkv, a->att, g->q, g->k, g->vv, g->y, g->dq,
                                         g->dk, g->dv, g->dp, g->q16, g->k16, g->v16, g->dy16, g->p16, B, T, C, NH);
    if (g->bf16 && g->attention == GPT_ATTENTION_FLASH)
        return l_flash_mma_backward(x, g->a.dqkv, g->a.datty, a->qkv, a->atty, a->att, g->dp, B, T, C, NH);
    if (g->bf16) return l_flash_backward(x, g->a.dqkv, g->a.datty, a->qkv, a->atty, a->att, g->dp, B, T, C, NH);
    return l_attention_backward(x, g->a.dqkv, g->a.datty, a->qkv, a->att, g->q, g->k, g->vv, g->y, g->dq, g->dk, g->dv,
                                g->dp, B, T, C, NH);
}

/* the cross-entropy: fp32 turns the logits into probabilities in place and its backward into their
 * gradient; bf16 leaves the logits, keeps each row's statistics and writes the gradient in bf16 straight
 * into s16a, the head backward's operand (loss_rows.cuh: 2 passes over the logits instead of 7) */
static int loss_forward(gpt_cuda *g, ctx *x, const int *targets, int N, int V)
{
    if (g->bf16)
        return l_loss_forward_rows(x, g->a.losses, g->loss_stats, g->a.logits, targets, N, V, (int)g->vld, g->red);
    return l_crossentropy_forward(x, g->a.logits, g->a.losses, targets, N, V, g->red);
}

static int loss_backward(gpt_cuda *g, ctx *x, const int *targets, int N, int V)
{
    if (g->bf16) return l_loss_backward_bf16(x, g->s16a, g->a.logits, g->loss_stats, targets, N, V, (int)g->vld);
    return l_crossentropy_backward(x, g->a.logits, targets, N, V);
}

/* the lm head: logits (N,V) = lnf wte^T, and its backward dlnf = dlogits wte, dwte = dlogits^T lnf (dlogits
 * in the logits buffer; bf16: in s16a, both with rows vld apart) */
static int head_forward(gpt_cuda *g, ctx *x, int N, int C, int V)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    if (g->bf16) return l_head_forward_bf16(x, g->a.logits, g->lnf16, w16_of(g, g->p.wte), N, C, V, (int)g->vld);
    CKB(mm(g->h, 0, 1, N, V, C, 1.0f, g->a.lnf, C, g->p.wte, C, 0.0f, g->a.logits, V));
    return 0;
}

static int head_backward(gpt_cuda *g, ctx *x, int N, int C, int V)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    const float *dlogits = g->a.logits;
    if (g->bf16) /* the bf16 gradient of the logits is in s16a (l_loss_backward_bf16) */
        return l_head_backward_bf16(x, g->a.dln, g->g.wte, g->s16a, g->lnf16, w16_of(g, g->p.wte), N, C, V,
                                    (int)g->vld);
    CKB(mm(g->h, 0, 0, N, C, V, 1.0f, dlogits, V, g->p.wte, C, 0.0f, g->a.dln, C));
    CKB(mm(g->h, 1, 0, V, C, N, 1.0f, dlogits, V, g->a.lnf, C, 0.0f, g->g.wte, C));
    return 0;
}

static int copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st, int wait, char *err,
                size_t errlen)
{
    CK(cudaMemcpyAsync(dst, src, bytes, kind, st));
    if (wait) CK(cudaStreamSynchronize(st));
    return 0;
}

extern "C" int gpt_cuda_set_params(gpt_cuda *g, const float *host, size_t off, size_t n, char *err, size_t errlen)
{
    if (off > g->numel || n > g->numel - off) {
        err_set(err, errlen, "gpt cuda: params range [%zu, %zu) outside [0, %zu)", off, off + n, g->numel);
        return -1;
    }
    return copy(g->params + off, host + off, n * sizeof(float), cudaMemcpyHostToDevice, g->st, 0, err, errlen);
}

extern "C" int gpt_cuda_get_params(gpt_cuda *g, float *host, char *err, size_t errlen)
{
    return copy(host, g->params, g->numel * sizeof(float), cudaMemcpyDeviceToHost, g->st, 1, err, errlen);
}

extern "C" int gpt_cuda_get_grads(gpt_cuda *g, float *host, char *err, size_t errlen)
{
    return copy(host, g->grads, g->numel * sizeof(float), cudaMemcpyDeviceToHost, g->st, 1, err, errlen);
}

extern "C" int gpt_cuda_get_logits(gpt_cuda *g, float *host, char *err, size_t errlen)
{
    size_t N = (size_t)g->B * g->T, V = (size_t)g->c.vocab;
    if (g->vld == V) {
        if (copy(host, g->a.logits, N * V * sizeof(float), cudaMemcpyDeviceToHost, g->st, 1, err, errlen)) return -1;
    } else { /* padded rows (bf16): one copy a row (an inspection, not a step's work) */
        for (size_t n = 0; n < N; n++)
            if (copy(host + n * V, g->a.logits + n * g->vld, V * sizeof(float), cudaMemcpyDeviceToHost, g->st, 1, err,
                     errlen))
                return -1;
    }
    if (!g->bf16 || !g->have_targets) return 0;
    /* bf16 kept the logits and each row's (max, 1 / sum): the probabilities, as fp32 gives them */
    float *stats = (float *)malloc(2 * N * sizeof(float));
    if (!stats) {
        err_set(err, errlen, "gpt cuda: out of memory");
        return -1;
    }
    int rc = copy(stats, g->loss_stats, 2 * N * sizeof(float), cudaMemcpyDeviceToHost, g->st, 1, err, errlen);
    for (size_t n = 0; !rc && n < N; n++)
        for (size_t i = 0; i < V; i++) host[n * V + i] = expf(host[n * V + i] - stats[2 * n]) * stats[2 * n + 1];
    free(stats);
    return rc;
}

extern "C" int gpt_cuda_set_moments(gpt_cuda *g, const float *m, const float *v, char *err, size_t errlen)
{
    size_t b = g->numel * sizeof(float);
    if (m && copy(g->m, m, b, cudaMemcpyHostToDevice, g->st, 0, err, errlen)) return -1;
    if (v && copy(g->v, v, b, cudaMemcpyHostToDevice, g->st, 0, err, errlen)) return -1;
    CK(cudaStreamSynchronize(g->st));
    return 0;
}

extern "C" int gpt_cuda_get_moments(gpt_cuda *g, float *m, float *v, char *err, size_t errlen)
{
    size_t b = g->numel * sizeof(float);
    if (m && copy(m, g->m, b, cudaMemcpyDeviceToHost, g->st, 0, err, errlen)) return -1;
    if (v && copy(v, g->v, b, cudaMemcpyDeviceToHost, g->st, 0, err, errlen)) return -1;
    CK(cudaStreamSynchronize(g->st));
    return 0;
}

extern "C" int gpt_cuda_sync(gpt_cuda *g, char *err, size_t errlen)
{
    CK(cudaStreamSynchronize(g->st));
    return 0;
}

/* ---- one transformer block, forward and backward, in each precision --------------------------------- */

/* fp32: the layer of worker/gpt/gpt_model.c, kernel for kernel */
static int layer_forward_fp32(gpt_cuda *g, ctx *x, int l, const float *xin)
{
    int B = g->B, T = g->T, C = g->c.dim, NH = g->c.heads, N = B * T;
    gpt_layer_params *p = &g->p.h[l];
    gpt_layer_acts *a = &g->a.h[l];
    return TIMED(GPT_PHASE_LAYERNORM,
                 l_layernorm_forward(x, a->ln1, a->ln1_mean, a->ln1_rstd, xin, p->ln1w, p->ln1b, N, C)) ||
           TIMED(GPT_PHASE_LINEAR, l_matmul_forward(x, a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C)) ||
           TIMED(GPT_PHASE_ATTENTION, attention_forward(g, x, a, B, T, C, NH)) ||
           TIMED(GPT_PHASE_LINEAR, l_matmul_forward(x, a->res2, a->atty, p->projw, p->projb, N, C, C)) ||
           TIMED(GPT_PHASE_RESIDUAL, l_residual(x, a->res2, a->res2, xin, (size_t)N * C)) ||
           TIMED(GPT_PHASE_LAYERNORM,
                 l_layernorm_forward(x, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C)) ||
           TIMED(GPT_PHASE_LINEAR, l_matmul_forward(x, a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C)) ||
           TIMED(GPT_PHASE_GELU, l_gelu_forward(x, a->fch_gelu, a->fch, (size_t)N * 4 * C)) ||
           TIMED(GPT_PHASE_LINEAR, l_matmul_forward(x, a->res3, a->fch_gelu, p->fcprojw, p->fcprojb, N, 4 * C, C)) ||
           TIMED(GPT_PHASE_RESIDUAL, l_residual(x, a->res3, a->res3, a->res2, (size_t)N * C));
}

static int layer_backward_fp32(gpt_cuda *g, ctx *x, int l, const float *xin)
{
    int B = g->B, T = g->T, C = g->c.dim, NH = g->c.heads, N = B * T;
    gpt_layer_params *p = &g->p.h[l], *gg = &g->g.h[l];
    gpt_layer_acts *a = &g->a.h[l];
    return TIMED(GPT_PHASE_LINEAR, l_matmul_backward(x, g->a.dfch, gg->fcprojw, gg->fcprojb, g->a.dres, a->fch_gelu,
                                                     p->fcprojw, N, 4 * C, C)) ||
           TIMED(GPT_PHASE_GELU, l_gelu_backward(x, g->a.dfch, a->fch, g->a.dfch, (size_t)N * 4 * C)) ||
           TIMED(GPT_PHASE_LINEAR,
                 l_matmul_backward(x, g->a.dln, gg->fcw, gg->fcb, g->a.dfch, a->ln2, p->fcw, N, C, 4 * C)) ||
           TIMED(GPT_PHASE_LAYERNORM, l_layernorm_backward(x, g->a.dres, gg->ln2w, gg->ln2b, g->a.dln, a->res2, p->ln2w,
                                                           a->ln2_mean, a->ln2_rstd, N, C, 1)) ||
           TIMED(GPT_PHASE_LINEAR,
                 l_matmul_backward(x, g->a.datty, gg->projw, gg->projb, g->a.dres, a->atty, p->projw, N, C, C)) ||
           TIMED(GPT_PHASE_ATTENTION, attention_backward(g, x, a, B, T, C, NH)) ||
           TIMED(GPT_PHASE_LINEAR,
                 l_matmul_backward(x, g->a.dln, gg->qkvw, gg->qkvb, g->a.dqkv, a->ln1, p->qkvw, N, C, 3 * C)) ||
           TIMED(GPT_PHASE_LAYERNORM, l_layernorm_backward(x, g->a.dres, gg->ln1w, gg->ln1b, g->a.dln, xin, p->ln1w,
                                                           a->ln1_mean, a->ln1_rstd, N, C, 1));
}

/* bf16: the LayerNorms and the GELU write their outputs only in bf16 (l16), the inputs of the products;
 * the attention's fp32 output is copied once; the projections add their residual as the C of their
 * product (l_matmul_forward_bf16's res), so the layer has no residual pass */
static int layer_forward_bf16(gpt_cuda *g, ctx *x, int l, const float *xin)
{
    int B = g->B, T = g->T, C = g->c.dim, NH = g->c.heads, N = B * T;
    gpt_layer_params *p = &g->p.h[l];
    gpt_layer_acts *a = &g->a.h[l];
    layer_bf16 *o = &g->l16[l];
    return TIMED(GPT_PHASE_LAYERNORM,
                 l_layernorm_forward_bf16(x, o->ln1, a->ln1_mean, a->ln1_rstd, xin, p->ln1w, p->ln1b, N, C)) ||
           TIMED(GPT_PHASE_LINEAR,
                 l_matmul_forward_bf16(x, a->qkv, o->ln1, w16_of(g, p->qkvw), p->qkvb, NULL, N, C, 3 * C)) ||
           TIMED(GPT_PHASE_ATTENTION, attention_forward(g, x, a, B, T, C, NH)) ||
           TIMED(GPT_PHASE_LINEAR,
                 l_to_bf16(x, o->atty, a->atty, (size_t)N * C) ||
                     l_matmul_forward_bf16(x, a->res2, o->atty, w16_of(g, p->projw), p->projb, xin, N, C, C)) ||
           TIMED(GPT_PHASE_LAYERNORM,
                 l_layernorm_forward_bf16(x, o->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C)) ||
           TIMED(GPT_PHASE_LINEAR,
                 l_matmul_forward_bf16(x, a->fch, o->ln2, w16_of(g, p->fcw), p->fcb, NULL, N, C, 4 * C)) ||
           TIMED(GPT_PHASE_GELU, l_gelu_forward_bf16(x, o->fch_gelu, a->fch, (size_t)N * 4 * C)) ||
           TIMED(GPT_PHASE_LINEAR, l_matmul_forward_bf16(x, a->res3, o->fch_gelu, w16_of(g, p->fcprojw), p->fcprojb,
                                                         a->res2, N, 4 * C, C));
}

/* the weight gradients read the bf16 inputs the forward kept; each incoming gradient is copied to bf16
 * in s16a just before its product, the fc layer's through the GELU's backward in the same pass (the
 * profile counts that GELU in the linear layers) */
static int layer_backward_bf16(gpt_cuda *g, ctx *x, int l, const float *xin)
{
    int B = g->B, T = g->T, C = g->c.dim, NH = g->c.heads, N = B * T;
    gpt_layer_params *p = &g->p.h[l], *gg = &g->g.h[l];
    gpt_layer_acts *a = &g->a.h[l];
    layer_bf16 *o = &g->l16[l];
    return TIMED(GPT_PHASE_LINEAR, l_matmul_backward_bf16(x, g->a.dfch, gg->fcprojw, gg->fcprojb, g->a.dres,
                                                          o->fch_gelu, w16_of(g, p->fcprojw), g->s16a, N, 4 * C, C)) ||
           TIMED(GPT_PHASE_LINEAR, l_matmul_backward_gelu_bf16(x, g->a.dln, gg->fcw, gg->fcb, g->a.dfch, a->fch, o->ln2,
                                                               w16_of(g, p->fcw), g->s16a, N, C, 4 * C)) ||
           TIMED(GPT_PHASE_LAYERNORM, l_layernorm_backward(x, g->a.dres, gg->ln2w, gg->ln2b, g->a.dln, a->res2, p->ln2w,
                                                           a->ln2_mean, a->ln2_rstd, N, C, 1)) ||
           TIMED(GPT_PHASE_LINEAR, l_matmul_backward_bf16(x, g->a.datty, gg->projw, gg->projb, g->a.dres, o->atty,
                                                          w16_of(g, p->projw), g->s16a, N, C, C)) ||
           TIMED(GPT_PHASE_ATTENTION, attention_backward(g, x, a, B, T, C, NH)) ||
           TIMED(GPT_PHASE_LINEAR, l_matmul_backward_bf16(x, g->a.dln, gg->qkvw, gg->qkvb, g->a.dqkv, o->ln1,
                                                          w16_of(g, p->qkvw), g->s16a, N, C, 3 * C)) ||
           TIMED(GPT_PHASE_LAYERNORM, l_layernorm_backward(x, g->a.dres, gg->ln1w, gg->ln1b, g->a.dln, xin, p->ln1w,
                                                           a->ln1_mean, a->ln1_rstd, N, C, 1));
}

/* the LayerNorm before the head: fp32 into a.lnf, bf16 into lnf16 (the head's input) */
static int final_layernorm(gpt_cuda *g, ctx *x, const float *xin, int N, int C)
{
    if (g->bf16)
        return l_layernorm_forward_bf16(x, g->lnf16, g->a.lnf_mean, g->a.lnf_rstd, xin, g->p.lnfw, g->p.lnfb, N, C);
    return l_layernorm_forward(x, g->a.lnf, g->a.lnf_mean, g->a.lnf_rstd, xin, g->p.lnfw, g->p.lnfb, N, C);
}

extern "C" int gpt_cuda_forward(gpt_cuda *g, const int *inputs, const int *targets, float *loss, char *err,
                                size_t errlen)
{
    int B = g->B, T = g->T, C = g->c.dim, V = g->c.vocab, L = g->c.layers, N = B * T;
    for (int n = 0; n < N; n++)
        if (inputs[n] < 0 || inputs[n] >= V || (targets && (targets[n] < 0 || targets[n] >= V))) {
            err_set(err, errlen, "gpt cuda: token id out of range at position %d", n);
            return -1;
        }
    ctx x = {g->st, g->h, err, errlen, g->lt, g->part};
    /* the staging buffer may still be read by the copy of the previous batch */
    CK(cudaStreamSynchronize(g->st));
    gpt_prof_fold(g->prof); /* the previous step's events, complete now */
    g->nuniq = bucket_tokens(g->htok, inputs, targets, N, g->slot, g->cnt);
    g->have_targets = targets != NULL;
    CK(cudaMemcpyAsync(g->dtok, g->htok, (5 * (size_t)N + 1) * sizeof(int), cudaMemcpyHostToDevice, g->st));
    const int *din = g->dtok, *dtg = g->dtok + N;
    if (g->bf16 && TIMED(GPT_PHASE_CAST, l_to_bf16(&x, g->w16, g->params, g->numel))) return -1; /* this step's */
    if (TIMED(GPT_PHASE_EMBED, l_encoder_forward(&x, g->a.encoded, din, g->p.wte, g->p.wpe, B, T, C))) return -1;
    const float *xin = g->a.encoded;
    for (int l = 0; l < L; l++) {
        if (g->bf16 ? layer_forward_bf16(g, &x, l, xin) : layer_forward_fp32(g, &x, l, xin)) return -1;
        xin = g->a.h[l].res3;
    }
    if (TIMED(GPT_PHASE_LAYERNORM, final_layernorm(g, &x, xin, N, C))) return -1;
    if (TIMED(GPT_PHASE_HEAD, head_forward(g, &x, N, C, V))) return -1;
    if (!targets) {
        if (loss) *loss = 0.0f;
        CK(cudaStreamSynchronize(g->st));
        return 0;
    }
    if (TIMED(GPT_PHASE_LOSS, loss_forward(g, &x, dtg, N, V))) return -1;
    CK(cudaMemcpyAsync(g->hred, g->red + RED_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, g->st));
    CK(cudaStreamSynchronize(g->st));
    if (loss) *loss = (float)g->hred[0];
    return 0;
}

extern "C" int gpt_cuda_backward(gpt_cuda *g, char *err, size_t errlen)
{
    int B = g->B, T = g->T, C = g->c.dim, V = g->c.vocab, L = g->c.layers, N = B * T;
    if (!g->have_targets) {
        err_set(err, errlen, "gpt cuda: backward needs a forward with targets");
        return -1;
    }
    ctx x = {g->st, g->h, err, errlen, g->lt, g->part};
    const int *dtg = g->dtok + N, *order = g->dtok + 2 * N, *uniq = g->dtok + 3 * N, *ustart = g->dtok + 4 * N;
    if (TIMED(GPT_PHASE_LOSS, loss_backward(g, &x, dtg, N, V))) return -1;
    if (TIMED(GPT_PHASE_HEAD, head_backward(g, &x, N, C, V))) return -1;
    const float *xlast = L > 0 ? g->a.h[L - 1].res3 : g->a.encoded;
    if (TIMED(GPT_PHASE_LAYERNORM, l_layernorm_backward(&x, g->a.dres, g->g.lnfw, g->g.lnfb, g->a.dln, xlast, g->p.lnfw,
                                                        g->a.lnf_mean, g->a.lnf_rstd, N, C, 0)))
        return -1;
    for (int l = L - 1; l >= 0; l--) {
        const float *xin = l > 0 ? g->a.h[l - 1].res3 : g->a.encoded;
        if (g->bf16 ? layer_backward_bf16(g, &x, l, xin) : layer_backward_fp32(g, &x, l, xin)) return -1;
    }
    return TIMED(GPT_PHASE_EMBED, l_encoder_backward(&x, g->g.wte, g->g.wpe, g->a.dres, order, uniq, ustart, g->nuniq,
                                                     B, T, C, g->c.ctx));
}

extern "C" int gpt_cuda_clip(gpt_cuda *g, double max_norm, double *norm, char *err, size_t errlen)
{
    ctx x = {g->st, g->h, err, errlen, g->lt, g->part};
    if (TIMED(GPT_PHASE_CLIP, l_clip(&x, g->grads, g->numel, max_norm, g->red))) return -1;
    CK(cudaMemcpyAsync(g->hred + 1, g->red + RED_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, g->st));
    if (norm) {
        CK(cudaStreamSynchronize(g->st));
        *norm = g->hred[1];
    }
    return 0;
}

extern "C" double gpt_cuda_last_norm(const gpt_cuda *g)
{
    return g->hred[1];
}

extern "C" int gpt_cuda_adamw(gpt_cuda *g, long t, double lr, double beta1, double beta2, double eps,
                              double weight_decay, char *err, size_t errlen)
{
    ctx x = {g->st, g->h, err, errlen, g->lt, g->part};
    return TIMED(GPT_PHASE_ADAMW, l_adamw(&x, g->tensors, g->ntensors, g->params, g->grads, g->m, g->v, t, lr, beta1,
                                          beta2, eps, weight_decay));
}

extern "C" float *gpt_cuda_params_device(gpt_cuda *g)
{
    return g->params;
}
extern "C" void *gpt_cuda_stream(gpt_cuda *g)
{
    return (void *)g->st;
}

extern "C" int gpt_cuda_set_profile(gpt_cuda *g, int on, char *err, size_t errlen)
{
    if (!on) {
        CK(cudaStreamSynchronize(g->st));
        gpt_prof_free(g->prof);
        g->prof = NULL;
        return 0;
    }
    if (!g->prof && !(g->prof = gpt_prof_create(err, errlen))) return -1;
    return 0;
}

extern "C" int gpt_cuda_profile(gpt_cuda *g, const char **names, double *ms, int max, long *steps, char *err,
                                size_t errlen)
{
    if (!g->prof) {
        err_set(err, errlen, "gpt cuda: profiling is off (gpt_cuda_set_profile)");
        return -1;
    }
    CK(cudaStreamSynchronize(g->st));
    gpt_prof_fold(g->prof);
    return gpt_prof_read(g->prof, names, ms, max, steps);
}
