/* gpt_cuda_lt.cu: the bf16 forward products of the linear layers through cuBLASLt, with the bias (and
 * a projection's residual) in the product's epilogue.
 *
 * Without it (gpt_cuda_bf16.cu's l_matmul_forward_bf16 alone), a linear layer is two passes: a kernel
 * writes the bias (or bias + residual) into the output, then cublasGemmEx adds the product to it (beta
 * 1), reading it back. With cuBLASLt's CUBLASLT_EPILOGUE_BIAS the product adds the bias itself as it
 * stores its result, and the residual is its C (beta 1, D the output): one pass, and 2 N x OC floats of
 * memory traffic less per layer (GPT-2 small at 8 x 1024: about 5 GB a step). llm.c does the same.
 *
 * cuBLASLt picks a kernel per shape with cublasLtMatmulAlgoGetHeuristic, which also assumes the
 * alignment of the pointers it is shown (the bias pointer's own, the others' through the preference's
 * minimum alignments). A plan (descriptors and the algorithm) is kept per shape and per alignment of
 * the five pointers, so the four products of a layer cost one query each per run, and a pointer less
 * aligned than a plan assumed gets a plan of its own, never a kernel that would fault on it.
 *
 * When cuBLASLt has no algorithm for a shape, l_linear_lt answers 0 and the caller takes the two-pass
 * path: the results are the same to rounding (the bias is added after the product's accumulation
 * instead of before). The model plans its products when it turns bf16 on (l_linear_lt_plan), so
 * gpt_lt_note can say which they get before the first step. */
#include "gpt_cuda_internal.h"

#include <cublasLt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LT_WORKSPACE (32u << 20) /* cuBLASLt's split-K and Hopper kernels want up to 32 MiB */
#define LT_PLANS 16              /* a GPT has 4 shapes; alignments differ between layers' biases */
#define LT_ALIGN_MAX 256         /* bytes: the most alignment cuBLASLt's preferences speak of (its default) */
#define LT_BIAS_ALIGN 16         /* bytes: a bias less aligned is added before the product (plan_choose) */

/* one shape and the alignments of its pointers: what a plan was made for */
typedef struct {
    int N, C, OC, res;
    uint32_t align[5]; /* A (the weight), B (the input), C, D, bias: bytes, a power of two up to 256 */
} lt_key;

typedef struct {
    lt_key key;
    int ok; /* 0: cuBLASLt has no algorithm for it (the caller's fallback) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, cd;
    cublasLtMatmulAlgo_t algo;
} lt_plan;

struct gpt_lt {
    cublasLtHandle_t h;
    void *ws;
    lt_plan plans[LT_PLANS];
    int nplans, next; /* plans made; the slot the next one replaces once all are made */
};

#define CKT(call) CKB(call) /* cuBLASLt's calls return cuBLAS's statuses */

static void plan_free(lt_plan *p)
{
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->cd) cublasLtMatrixLayoutDestroy(p->cd);
    memset(p, 0, sizeof *p);
}

gpt_lt *gpt_lt_create(char *err, size_t errlen)
{
    gpt_lt *lt = (gpt_lt *)calloc(1, sizeof *lt);
    if (!lt) {
        err_set(err, errlen, "gpt cuda: out of memory");
        return NULL;
    }
    cublasStatus_t s = cublasLtCreate(&lt->h);
    cudaError_t e = s == CUBLAS_STATUS_SUCCESS ? cudaMalloc(&lt->ws, LT_WORKSPACE) : cudaSuccess;
    if (s != CUBLAS_STATUS_SUCCESS || e != cudaSuccess) {
        err_set(err, errlen, "gpt cuda: cuBLASLt: %s",
                s != CUBLAS_STATUS_SUCCESS ? "cublasLtCreate failed" : cudaGetErrorString(e));
        gpt_lt_free(lt);
        return NULL;
    }
    return lt;
}

void gpt_lt_free(gpt_lt *lt)
{
    if (!lt) return;
    for (int i = 0; i < lt->nplans; i++) plan_free(&lt->plans[i]);
    cudaFree(lt->ws);
    if (lt->h) cublasLtDestroy(lt->h);
    free(lt);
}

/* the descriptors of out^T (OC x N, column-major) = W (C x OC stored, transposed) times inp^T (C x N):
 * mm16's operand swap, as cuBLAS is column-major; the bias runs along D's rows (OC) */
static int plan_describe(lt_plan *p, const void *bias, char *err, size_t errlen)
{
    const lt_key *k = &p->key;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CKT(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CKT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CKT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CKT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CKT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    CKT(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, k->C, k->OC, k->C));
    CKT(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, k->C, k->N, k->C));
    CKT(cublasLtMatrixLayoutCreate(&p->cd, CUDA_R_32F, k->OC, k->N, k->OC));
    return 0;
}

/* cuBLASLt's best algorithm for the plan's shape and alignments, if it has one (p->ok) */
static int plan_choose(gpt_lt *lt, lt_plan *p, char *err, size_t errlen)
{
    static const cublasLtMatmulPreferenceAttributes_t mins[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    cublasLtMatmulPreference_t pref;
    uint64_t ws = LT_WORKSPACE;
    CKT(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t s =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, mins[i], &p->key.align[i], sizeof p->key.align[i]);
    cublasLtMatmulHeuristicResult_t r;
    int n = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(lt->h, p->op, p->a, p->b, p->cd, p->cd, pref, 1, &r, &n);
    cublasLtMatmulPreferenceDestroy(pref);
    /* no algorithm, or a query refused, is an answer: the caller's two passes always work. A bias less
     * than 16-byte aligned takes them too: the epilogue's vector loads have been seen to fault on such
     * biases whatever the heuristic said (marian-nmt keeps the same limit) */
    p->ok = s == CUBLAS_STATUS_SUCCESS && n > 0 && r.state == CUBLAS_STATUS_SUCCESS && p->key.align[4] >= LT_BIAS_ALIGN;
    if (p->ok) p->algo = r.algo;
    return 0;
}

/* the plan for key, made on first use (the oldest replaced once LT_PLANS are made) */
static lt_plan *plan_for(gpt_lt *lt, const lt_key *key, const void *bias, char *err, size_t errlen)
{
    for (int i = 0; i < lt->nplans; i++)
        if (!memcmp(&lt->plans[i].key, key, sizeof *key)) return &lt->plans[i];
    int slot;
    if (lt->nplans < LT_PLANS) {
        slot = lt->nplans++;
    } else {
        slot = lt->next;
        lt->next = (lt->next + 1) % LT_PLANS;
    }
    lt_plan *p = &lt->plans[slot];
    plan_free(p);
    p->key = *key;
    if (plan_describe(p, bias, err, errlen) || plan_choose(lt, p, err, errlen)) {
        plan_free(p); /* a zero key: no product matches it */
        return NULL;
    }
    return p;
}

/* the plan of one product (gpt_cuda_internal.h: l_linear_lt's arguments) */
static lt_plan *plan_of(ctx *x, float *out, const __nv_bfloat16 *inp16, const __nv_bfloat16 *w16, const float *bias,
                        const float *res, int N, int C, int OC)
{
    const float *c = res ? res : out;
    lt_key key;
    memset(&key, 0, sizeof key); /* memcmp compares the padding too */
    key.N = N;
    key.C = C;
    key.OC = OC;
    key.res = res != NULL;
    key.align[0] = ptr_alignment(w16, LT_ALIGN_MAX);
    key.align[1] = ptr_alignment(inp16, LT_ALIGN_MAX);
    key.align[2] = ptr_alignment(c, LT_ALIGN_MAX);
    key.align[3] = ptr_alignment(out, LT_ALIGN_MAX);
    key.align[4] = ptr_alignment(bias, LT_ALIGN_MAX);
    return plan_for(x->lt, &key, bias, x->err, x->errlen);
}

int l_linear_lt_plan(ctx *x, float *out, const __nv_bfloat16 *inp16, const __nv_bfloat16 *w16, const float *bias,
                     const float *res, int N, int C, int OC)
{
    lt_plan *p = plan_of(x, out, inp16, w16, bias, res, N, C, OC);
    return p ? p->ok : -1;
}

int l_linear_lt(ctx *x, float *out, const __nv_bfloat16 *inp16, const __nv_bfloat16 *w16, const float *bias,
                const float *res, int N, int C, int OC)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    lt_plan *p = plan_of(x, out, inp16, w16, bias, res, N, C, OC);
    if (!p || !p->ok) return p ? 0 : -1;
    const float alpha = 1.0f, beta = res ? 1.0f : 0.0f;
    CKT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    CKT(cublasLtMatmul(x->lt->h, p->op, &alpha, w16, p->a, inp16, p->b, &beta, res ? res : out, p->cd, out, p->cd,
                       &p->algo, x->lt->ws, LT_WORKSPACE, x->st));
    return 1;
}

const char *gpt_lt_note(const gpt_lt *lt)
{
    int ok = 0, none = 0;
    for (int i = 0; lt && i < lt->nplans; i++) {
        if (!lt->plans[i].key.N) continue;
        if (lt->plans[i].ok)
            ok++;
        else
            none++;
    }
    if (!ok && !none) return "";
    if (!none) return "bias in the products' epilogue (cuBLASLt)";
    if (!ok)
        return "bias added before each product (no cuBLASLt algorithm for these shapes, or biases not 16-byte aligned)";
    return "bias in the products' epilogue (cuBLASLt) for some shapes, added before the product for others";
}
