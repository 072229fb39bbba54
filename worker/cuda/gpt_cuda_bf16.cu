/* gpt_cuda_bf16.cu: what the CUDA GPT's bf16 precision (gpt_cuda_set_precision) adds to the fp32 model,
 * as launchers (l_*, gpt_cuda_internal.h) the model calls in place of the fp32 ones:
 *
 *   l_to_bf16             the bf16 copy of fp32 values (the master weights once per forward, and an
 *                         activation or its gradient just before a product), round to nearest even
 *   l_matmul_*_bf16       the linear layers' products as cublasGemmEx on bf16 operands with fp32
 *                         accumulation and fp32 results (what torch.autocast does); bias and its
 *                         gradient stay fp32 (the forward's in cuBLASLt's epilogue: gpt_cuda_lt.cu)
 *   l_flash_forward       causal attention fused in one kernel: each query row keeps a running max and
 *   l_flash_backward      sum (online softmax) over its keys, so the T x T probabilities are never
 *                         stored; the row's log-sum-exp is kept for the backward, which recomputes the
 *                         probabilities: one kernel for dq (query rows), one for dk and dv (key rows)
 *   l_attention_*_bf16    the other attention (gpt_cuda_set_attention, --attention gemm): the fp32 path's
 *                         (gpt_cuda_kernels.cu: q, k, v permuted to (B, NH, T, hs), T x T probabilities
 *                         kept, fp32 softmax and softmax backward) with its six strided-batched products
 *                         on bf16 copies (l_to_bf16) of their operands, fp32 accumulation and fp32
 *                         results: tensor cores do the products the fused kernels do with scalar dot
 *                         products. Which of the two is faster is for a GPU to say (tools/gpu_check.sh
 *                         runs both)
 *   l_loss_forward_rows   the cross-entropy in two passes over the logits (loss_rows.cuh): the forward
 *   l_loss_backward_bf16  keeps each row's max and sum, the backward writes the bf16 gradient straight
 *                         into the operand of the head's products (l_head_backward_bf16)
 *
 * Everything else (LayerNorm, GELU, residuals, clipping, AdamW) is the fp32 path's, on
 * fp32 activations; the parameters, their gradients and AdamW's moments stay fp32, so DiLoCo works on
 * the fp32 master weights exactly as in fp32.
 *
 * The fused attention's kernels (one warp per row) are in attention_rows.cuh, where the CPU lane
 * emulator of the tests runs them too. */
#include "gpt_cuda_internal.h"

#include <cuda_bf16.h>
#include <math.h>

#include "attention_rows.cuh"
#include "loss_rows.cuh"

__global__ void to_bf16_k(__nv_bfloat16 *out, const float *in, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16_rn(in[i]);
}

int l_to_bf16(ctx *x, __nv_bfloat16 *out, const float *in, size_t n)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    to_bf16_k<<<nblocks(n, BS), BS, 0, x->st>>>(out, in, n);
    CKL();
    return 0;
}

/* row-major C(MxN) = alpha op(A) op(B) + beta C with bf16 A, B and fp32 C, fp32 accumulation (mm's
 * operand swap: cuBLAS is column-major) */
static cublasStatus_t mm16(cublasHandle_t h, int ta, int tb, int M, int N, int K, float alpha, const __nv_bfloat16 *A,
                           int lda, const __nv_bfloat16 *B, int ldb, float beta, float *C, int ldc)
{
    return cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                        CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
}

/* out (N,OC) = inp16 (N,C) W^T + bias, plus res (N,OC) when it is not NULL (the residual a projection
 * adds); inp16 is the input in bf16, w16 W's. Through cuBLASLt's epilogue where x->lt has an algorithm
 * (gpt_cuda_lt.cu), else in two passes: the bias (and res) written into out, the C the product adds to
 * (beta = 1) */
int l_matmul_forward_bf16(ctx *x, float *out, const __nv_bfloat16 *inp16, const __nv_bfloat16 *w16, const float *bias,
                          const float *res, int N, int C, int OC)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    int lt = x->lt ? l_linear_lt(x, out, inp16, w16, bias, res, N, C, OC) : 0;
    if (lt) return lt < 0 ? -1 : 0;
    if (res ? l_bias_residual(x, out, bias, res, N, OC) : l_bias_broadcast(x, out, bias, N, OC)) return -1;
    CKB(mm16(x->h, 0, 1, N, OC, C, 1.0f, inp16, C, w16, C, 1.0f, out, OC));
    return 0;
}

/* dinp (N,C) = dout W; dw (OC,C) = dout^T inp from inp16, the forward's bf16 input; dbias = column sums
 * of dout (fp32); dout16 (N*OC) is scratch. gelu_in, when not NULL: dout is first multiplied by
 * GELU'(gelu_in), in the same pass */
static int backward_bf16(ctx *x, float *dinp, float *dw, float *dbias, const float *dout, const float *gelu_in,
                         const __nv_bfloat16 *inp16, const __nv_bfloat16 *w16, __nv_bfloat16 *dout16, int N, int C,
                         int OC)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    if (l_colsum_bf16(x, dbias, dout16, dout, gelu_in, N, OC)) return -1; /* dbias and dout's bf16 in one pass */
    CKB(mm16(x->h, 0, 0, N, C, OC, 1.0f, dout16, OC, w16, C, 0.0f, dinp, C));
    CKB(mm16(x->h, 1, 0, OC, C, N, 1.0f, dout16, OC, inp16, C, 0.0f, dw, C));
    return 0;
}

int l_matmul_backward_bf16(ctx *x, float *dinp, float *dw, float *dbias, const float *dout, const __nv_bfloat16 *inp16,
                           const __nv_bfloat16 *w16, __nv_bfloat16 *dout16, int N, int C, int OC)
{
    return backward_bf16(x, dinp, dw, dbias, dout, NULL, inp16, w16, dout16, N, C, OC);
}

int l_matmul_backward_gelu_bf16(ctx *x, float *dinp, float *dw, float *dbias, const float *dout, const float *gelu_in,
                                const __nv_bfloat16 *inp16, const __nv_bfloat16 *w16, __nv_bfloat16 *dout16, int N,
                                int C, int OC)
{
    return backward_bf16(x, dinp, dw, dbias, dout, gelu_in, inp16, w16, dout16, N, C, OC);
}

/* the lm head: logits (N,V) = lnf16 (N,C) wte^T, and its backward dlnf = dlogits wte, dwte = dlogits^T lnf
 * (lnf16: the final LayerNorm's bf16 output; the logits' and their gradient's rows ld apart) */
int l_head_forward_bf16(ctx *x, float *logits, const __nv_bfloat16 *lnf16, const __nv_bfloat16 *wte16, int N, int C,
                        int V, int ld)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    CKB(mm16(x->h, 0, 1, N, V, C, 1.0f, lnf16, C, wte16, C, 0.0f, logits, ld));
    return 0;
}

int l_head_backward_bf16(ctx *x, float *dlnf, float *dwte, const __nv_bfloat16 *dlogits16, const __nv_bfloat16 *lnf16,
                         const __nv_bfloat16 *wte16, int N, int C, int V, int ld)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    CKB(mm16(x->h, 0, 0, N, C, V, 1.0f, dlogits16, ld, wte16, C, 0.0f, dlnf, C));
    CKB(mm16(x->h, 1, 0, V, C, N, 1.0f, dlogits16, ld, lnf16, C, 0.0f, dwte, C));
    return 0;
}

/* ---- the cross-entropy in two passes (loss_rows.cuh) ------------------------------------------ */

int l_loss_forward_rows(ctx *x, float *losses, float *stats, const float *logits, const int *targets, int N, int V,
                        int ld, double *red)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    loss_rows_k<<<N, LOSS_ROW_THREADS, 0, x->st>>>(losses, stats, logits, targets, V, ld);
    CKL();
    return l_mean(x, losses, N, red);
}

int l_loss_backward_bf16(ctx *x, __nv_bfloat16 *dlogits16, const float *logits, const float *stats, const int *targets,
                         int N, int V, int ld)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    dim3 grid(nblocks((size_t)V, BS), N < 65535 ? N : 65535); /* the kernel loops over rows past 65535 */
    loss_grad_bf16_k<<<grid, BS, 0, x->st>>>((uint16_t *)dlogits16, logits, stats, targets, N, V, ld);
    CKL();
    return 0;
}

/* ---- attention with bf16 products (gemm) ----------------------------------------------------- */

/* bh16 (B,NH,T,hs) = the bf16 of columns [col0, col0 + C) of bt (B,T,ld): the fp32 path's permute into
 * bh (fp32 scratch), then its bf16 copy */
static int permute_bf16(ctx *x, __nv_bfloat16 *bh16, float *bh, const float *bt, int B, int T, int C, int NH, int ld,
                        int col0)
{
    if (l_permute_bt(x, (float *)bt, bh, B, T, C, NH, ld, col0, 0) || l_to_bf16(x, bh16, bh, (size_t)B * T * C))
        return -1;
    return 0;
}

/* q, k, v of qkv (B,T,3C) -> (B,NH,T,hs) bf16, through the fp32 scratch q, k, v */
static int qkv_bf16(ctx *x, __nv_bfloat16 *q16, __nv_bfloat16 *k16, __nv_bfloat16 *v16, float *q, float *k, float *v,
                    const float *qkv, int B, int T, int C, int NH)
{
    if (permute_bf16(x, q16, q, qkv, B, T, C, NH, 3 * C, 0) || permute_bf16(x, k16, k, qkv, B, T, C, NH, 3 * C, C) ||
        permute_bf16(x, v16, v, qkv, B, T, C, NH, 3 * C, 2 * C))
        return -1;
    return 0;
}

/* mmb (gpt_cuda_internal.h) on bf16 operands: batched row-major C = alpha op(A) op(B), fp32 C and
 * accumulation */
static cublasStatus_t mmb16(cublasHandle_t h, int ta, int tb, int M, int N, int K, float alpha, const __nv_bfloat16 *A,
                            int lda, long long sA, const __nv_bfloat16 *B, int ldb, long long sB, float *C, int ldc,
                            long long sC, int batch)
{
    const float beta = 0.0f;
    return cublasGemmStridedBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                      &alpha, B, CUDA_R_16BF, ldb, sB, A, CUDA_R_16BF, lda, sA, &beta, C, CUDA_R_32F,
                                      ldc, sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* l_attention_forward with bf16 products: S = scale q k^T, softmax in fp32 (kept in att), Y = P v */
int l_attention_forward_bf16(ctx *x, float *out, float *att, const float *qkv, float *q, float *k, float *v, float *y,
                             __nv_bfloat16 *q16, __nv_bfloat16 *k16, __nv_bfloat16 *v16, __nv_bfloat16 *p16, int B,
                             int T, int C, int NH)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    int hs = C / NH, BH = B * NH;
    float scale = 1.0f / sqrtf((float)hs);
    long long sT = (long long)T * hs, sTT = (long long)T * T;
    if (qkv_bf16(x, q16, k16, v16, q, k, v, qkv, B, T, C, NH)) return -1;
    CKB(mmb16(x->h, 0, 1, T, T, hs, scale, q16, hs, sT, k16, hs, sT, att, T, sTT, BH));
    if (l_softmax_causal(x, att, BH * T, T) || l_to_bf16(x, p16, att, (size_t)BH * T * T)) return -1;
    CKB(mmb16(x->h, 0, 0, T, hs, T, 1.0f, p16, T, sTT, v16, hs, sT, y, hs, sT, BH));
    return l_permute_bt(x, out, y, B, T, C, NH, C, 0, 1);
}

/* l_attention_backward with bf16 products; p16 holds P for dV, then dS (the stream orders them) */
int l_attention_backward_bf16(ctx *x, float *dqkv, const float *dout, const float *qkv, const float *att, float *q,
                              float *k, float *v, float *dy, float *dq, float *dk, float *dv, float *dp,
                              __nv_bfloat16 *q16, __nv_bfloat16 *k16, __nv_bfloat16 *v16, __nv_bfloat16 *dy16,
                              __nv_bfloat16 *p16, int B, int T, int C, int NH)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    int hs = C / NH, BH = B * NH;
    float scale = 1.0f / sqrtf((float)hs);
    long long sT = (long long)T * hs, sTT = (long long)T * T;
    size_t A = (size_t)BH * T * T;
    if (qkv_bf16(x, q16, k16, v16, q, k, v, qkv, B, T, C, NH) || permute_bf16(x, dy16, dy, dout, B, T, C, NH, C, 0) ||
        l_to_bf16(x, p16, att, A))
        return -1;
    /* dP = dY V^T ; dV = P^T dY */
    CKB(mmb16(x->h, 0, 1, T, T, hs, 1.0f, dy16, hs, sT, v16, hs, sT, dp, T, sTT, BH));
    CKB(mmb16(x->h, 1, 0, T, hs, T, 1.0f, p16, T, sTT, dy16, hs, sT, dv, hs, sT, BH));
    if (l_softmax_backward(x, dp, att, BH * T, T) || l_to_bf16(x, p16, dp, A)) return -1;
    /* dQ = scale dS K ; dK = scale dS^T Q */
    CKB(mmb16(x->h, 0, 0, T, hs, T, scale, p16, T, sTT, k16, hs, sT, dq, hs, sT, BH));
    CKB(mmb16(x->h, 1, 0, T, hs, T, scale, p16, T, sTT, q16, hs, sT, dk, hs, sT, BH));
    if (l_permute_bt(x, dqkv, dq, B, T, C, NH, 3 * C, 0, 1) || l_permute_bt(x, dqkv, dk, B, T, C, NH, 3 * C, C, 1) ||
        l_permute_bt(x, dqkv, dv, B, T, C, NH, 3 * C, 2 * C, 1))
        return -1;
    return 0;
}

static int head_size_ok(ctx *x, int C, int NH)
{
    if (C % NH || C / NH > HS_MAX) {
        err_set(x->err, x->errlen, "gpt cuda bf16: head size %d (dim %d / heads %d) must divide and be <= %d", C / NH,
                C, NH, HS_MAX);
        return -1;
    }
    return 0;
}

int l_flash_forward(ctx *x, float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    if (head_size_ok(x, C, NH)) return -1;
    size_t rows = (size_t)B * NH * T;
    flash_forward_k<<<nblocks(rows, ROWS_PER_BLOCK), BS, 0, x->st>>>(out, lse, qkv, B, T, C, NH,
                                                                     1.0f / sqrtf((float)(C / NH)));
    CKL();
    return 0;
}

int l_flash_dsum(ctx *x, float *dsum, const float *dout, const float *out, int B, int T, int C, int NH)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    if (head_size_ok(x, C, NH)) return -1;
    flash_dsum_k<<<nblocks((size_t)B * NH * T, ROWS_PER_BLOCK), BS, 0, x->st>>>(dsum, dout, out, B, T, C, NH);
    CKL();
    return 0;
}

int l_flash_backward(ctx *x, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                     float *dsum, int B, int T, int C, int NH)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    if (l_flash_dsum(x, dsum, dout, out, B, T, C, NH)) return -1;
    size_t rows = (size_t)B * NH * T;
    float scale = 1.0f / sqrtf((float)(C / NH));
    unsigned nb = nblocks(rows, ROWS_PER_BLOCK);
    flash_dq_k<<<nb, BS, 0, x->st>>>(dqkv, dout, qkv, lse, dsum, B, T, C, NH, scale);
    CKL();
    flash_dkv_k<<<nb, BS, 0, x->st>>>(dqkv, dout, qkv, lse, dsum, B, T, C, NH, scale);
    CKL();
    return 0;
}
