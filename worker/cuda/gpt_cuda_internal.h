/* gpt_cuda_internal.h: what the CUDA sources of the GPT backend share (not part of the C API).
 *
 *   gpt_cuda_kernels.cu  the kernels and one launch function per layer (l_*), shared by the model and
 *                        by the single-kernel test entry points, so the tests run the trainer's code
 *   gpt_cuda_bf16.cu     what the bf16 precision adds: bf16 copies, bf16 products, fused attention and
 *                        the attention with bf16 products (gemm)
 *   gpt_cuda_lt.cu       the bf16 forward products with bias and residual in cuBLASLt's epilogue
 *   gpt_cuda_flash.cu    the tensor-core flash attention's launchers (kernels: flash_mma.cuh)
 *   gpt_cuda_flash_check.cu  the device check --attention auto trusts flash by (flash against fused)
 *   gpt_cuda_model.cu    the model: buffers, forward, backward, clipping, AdamW (gpt_cuda.h)
 *   gpt_cuda_device.cu   device count and description, pinned host memory, the sgemm rate
 *   gpt_cuda_profile.cu  per-phase timing of the steps with CUDA events (gpt_cuda_set_profile)
 *   gpt_cuda_test.cu     the single-kernel entry points on host arrays (gpt_cuda_test.h)
 *
 * A kernel is launched only from the file that includes it (no relocatable device code): the other
 * files call the launchers declared here. Kernels the CPU tests run under the lane emulator live in
 * headers of kernels only (attention_rows.cuh, loss_rows.cuh, layer_rows.cuh, flash_mma.cuh,
 * warp_mma_check.cuh), each included by the one .cu file that launches them. The CPU tests also compile
 * every .cu file here with g++ against tests/tools/cuda_emu (a CPU CUDA runtime and cuBLAS; launches
 * rewritten by the Makefile), so use only the runtime calls that emulator provides, and launch with
 * <<<grid, block, 0, stream>>> on one line (the rewrite's form). */
#ifndef DILOCO_GPT_CUDA_INTERNAL_H
#define DILOCO_GPT_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "gpt_cuda.h"

/* CUDA / cuBLAS call checks inside functions that take (err, errlen) and return int */
#define CKB(call)                                                                                      \
    do {                                                                                               \
        cublasStatus_t s_ = (call);                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
            err_set(err, errlen, "cublas: %s: status %d (%s:%d)", #call, (int)s_, __FILE__, __LINE__); \
            return -1;                                                                                 \
        }                                                                                              \
    } while (0)
#define CKL() CK(cudaGetLastError())

static inline unsigned nblocks(size_t n, int bs)
{
    return (unsigned)((n + bs - 1) / bs);
}

/* ---- per-phase timing (gpt_cuda_profile.cu) ------------------------------------------------- */

enum gpt_phase {
    GPT_PHASE_CAST, /* the bf16 copy of the weights */
    GPT_PHASE_EMBED,
    GPT_PHASE_LAYERNORM,
    GPT_PHASE_LINEAR,
    GPT_PHASE_ATTENTION,
    GPT_PHASE_GELU,
    GPT_PHASE_RESIDUAL,
    GPT_PHASE_HEAD,
    GPT_PHASE_LOSS,
    GPT_PHASE_CLIP,
    GPT_PHASE_ADAMW,
    GPT_PHASES
};
typedef struct gpt_prof gpt_prof;
gpt_prof *gpt_prof_create(char *err, size_t errlen);
void gpt_prof_free(gpt_prof *p);
/* brackets one launcher call: begin before it, end after it with its status, which end returns; both
 * do nothing when p is NULL (profiling off) */
void gpt_prof_begin(gpt_prof *p, int phase, cudaStream_t st);
int gpt_prof_end(gpt_prof *p, cudaStream_t st, int rc);
void gpt_prof_fold(gpt_prof *p);
int gpt_prof_read(gpt_prof *p, const char **names, double *ms, int max, long *steps);

#define BS 256                   /* threads per block of the elementwise kernels */
#define ROWS_PER_BLOCK (BS / 32) /* one warp per row */
/* deterministic double sums: RED_BLOCKS partial sums (grid-stride, fixed tree), then one block */
#define RED_BLOCKS 256
#define RED_THREADS 256

/* ------------------------------------------------------------------------------------------- */
/* products: row-major C(MxN) = alpha op(A) op(B) + beta C, as cblas_sgemm(CblasRowMajor, ...)   */
/* A row-major matrix is its transpose in column-major, so C^T = op(B)^T op(A)^T: swap operands.  */

static inline cublasStatus_t mm(cublasHandle_t h, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                                int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    return cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A,
                       lda, &beta, C, ldc);
}

static inline cublasStatus_t mmb(cublasHandle_t h, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                                 int lda, long long sA, const float *B, int ldb, long long sB, float beta, float *C,
                                 int ldc, long long sC, int batch)
{
    return cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                                     B, ldb, sB, A, lda, sA, &beta, C, ldc, sC, batch);
}

static inline int set_math(cublasHandle_t h, int tf32, char *err, size_t errlen)
{
    CKB(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    return 0;
}

typedef struct gpt_lt gpt_lt; /* cuBLASLt's handle, workspace and plans (gpt_cuda_lt.cu) */

/* row chunks of the column sums (the bias and LayerNorm gradients: gpt_cuda_kernels.cu's colsum) */
#define COLSUM_CHUNKS 32
/* floats of ctx.part for sums over up to `cols` columns */
#define COLSUM_PART(cols) (2 * (size_t)COLSUM_CHUNKS * (size_t)(cols))

/* where a launch goes: the stream, the cuBLAS handle bound to it, and the error buffer; lt, when not
 * NULL, lets the bf16 forward products run through cuBLASLt (the model's; the tests' entry points choose);
 * part, when not NULL, COLSUM_PART(widest) floats of scratch for the column sums' chunks (without it they
 * run in one chunk: far fewer blocks) */
typedef struct {
    cudaStream_t st;
    cublasHandle_t h;
    char *err;
    size_t errlen;
    gpt_lt *lt;
    float *part;
} ctx;

/* ---- launches (gpt_cuda_kernels.cu): shapes as in worker/gpt/gpt_model.c; 0 or -1 with x->err ---- */
int l_encoder_forward(ctx *x, float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C);
/* order, uniq, ustart: the positions of each distinct token (U of them), bucketed on the host */
int l_encoder_backward(ctx *x, float *dwte, float *dwpe, const float *dout, const int *order, const int *uniq,
                       const int *ustart, int U, int B, int T, int C, int maxT);
/* Stage inputs | targets | order | uniq | ustart (5N+1 ints at h) for l_encoder_backward: the positions
 * of each distinct input token in increasing order (the deterministic embedding scatter). slot: V ints,
 * zero on entry and on return; cnt: N+1 ints of scratch. Returns the distinct token count. */
int bucket_tokens(int *h, const int *inputs, const int *targets, int N, int *slot, int *cnt);
int l_layernorm_forward(ctx *x, float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                        int N, int C);
int l_layernorm_backward(ctx *x, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                         const float *mean, const float *rstd, int N, int C, int accumulate);
int l_matmul_forward(ctx *x, float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC);
int l_matmul_backward(ctx *x, float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                      int N, int C, int OC);
/* scratch: q, k, v, y each B*T*C */
int l_attention_forward(ctx *x, float *out, float *att, const float *qkv, float *q, float *k, float *v, float *y, int B,
                        int T, int C, int NH);
/* scratch: q, k, v, dy, dq, dk, dv each B*T*C; dp B*NH*T*T */
int l_attention_backward(ctx *x, float *dqkv, const float *dout, const float *qkv, const float *att, float *q, float *k,
                         float *v, float *dy, float *dq, float *dk, float *dv, float *dp, int B, int T, int C, int NH);
/* rows of length T, row index % T = t: softmax over columns 0..t, zero above, in place */
int l_softmax_causal(ctx *x, float *s, int rows, int T);
/* its backward in place on dp: dS = P * (dP - sum_j P dP) on columns 0..t, zero above */
int l_softmax_backward(ctx *x, float *dp, const float *p, int rows, int T);
/* (B,NH,T,hs) bh <-> columns [col0, col0 + C) of the (B,T,ld) tensor bt; to_bt: bh -> bt, else bt -> bh */
int l_permute_bt(ctx *x, float *bt, float *bh, int B, int T, int C, int NH, int ld, int col0, int to_bt);
int l_gelu_forward(ctx *x, float *out, const float *inp, size_t n);
/* the bf16 path: the output only in bf16 (layer_rows.cuh) */
int l_gelu_forward_bf16(ctx *x, __nv_bfloat16 *out16, const float *inp, size_t n);
int l_layernorm_forward_bf16(ctx *x, __nv_bfloat16 *out16, float *mean, float *rstd, const float *inp, const float *w,
                             const float *b, int N, int C);
int l_gelu_backward(ctx *x, float *dinp, const float *inp, const float *dout, size_t n);
int l_residual(ctx *x, float *out, const float *a, const float *b, size_t n);
/* red: RED_BLOCKS + 2 doubles; the mean loss ends up in red[RED_BLOCKS] */
int l_crossentropy_forward(ctx *x, float *logits, float *losses, const int *targets, int N, int V, double *red);
int l_crossentropy_backward(ctx *x, float *probs, const int *targets, int N, int V);
int l_mean(ctx *x, const float *v, int n, double *red);
/* norm in red[RED_BLOCKS], coefficient in red[RED_BLOCKS+1] */
int l_clip(ctx *x, float *g, size_t n, double max_norm, double *red);
/* out (N,OC) = bias broadcast (before a product adds into it); dbias (OC) = column sums of dout (N,OC) */
int l_bias_broadcast(ctx *x, float *out, const float *bias, int N, int OC);
int l_bias_residual(ctx *x, float *out, const float *bias, const float *res, int N, int OC);
/* dout16 = the bf16 of dout, or of dout * GELU'(gelu_in) when gelu_in is not NULL, and dbias its column
 * sums, in one pass */
int l_colsum_bf16(ctx *x, float *dbias, __nv_bfloat16 *dout16, const float *dout, const float *gelu_in, int N, int OC);

/* ---- bf16 precision (gpt_cuda_bf16.cu): bf16 operands, fp32 accumulation and results ---------- */
int l_to_bf16(ctx *x, __nv_bfloat16 *out, const float *in, size_t n);
/* w16: the weight's bf16 copy; inp16 (N*C), dout16 (N*OC): scratch */
/* out = inp16 W^T + bias (+ res when not NULL), inputs already in bf16; backward from the forward's inp16 */
int l_matmul_forward_bf16(ctx *x, float *out, const __nv_bfloat16 *inp16, const __nv_bfloat16 *w16, const float *bias,
                          const float *res, int N, int C, int OC);
int l_matmul_backward_bf16(ctx *x, float *dinp, float *dw, float *dbias, const float *dout, const __nv_bfloat16 *inp16,
                           const __nv_bfloat16 *w16, __nv_bfloat16 *dout16, int N, int C, int OC);
/* the same for the fc layer, whose incoming gradient is dout * GELU'(gelu_in) (gelu_in: the GELU's input,
 * the fc product's output): the GELU's backward done in the pass that makes the bf16 operand, so that
 * gradient is never written in fp32 */
int l_matmul_backward_gelu_bf16(ctx *x, float *dinp, float *dw, float *dbias, const float *dout, const float *gelu_in,
                                const __nv_bfloat16 *inp16, const __nv_bfloat16 *w16, __nv_bfloat16 *dout16, int N,
                                int C, int OC);
/* the tied lm head: logits = lnf16 wte^T; backward dlnf (written), dwte (written); the logits' and their
 * gradient's rows ld >= V apart (gpt_cuda_model.cu's logits_stride) */
int l_head_forward_bf16(ctx *x, float *logits, const __nv_bfloat16 *lnf16, const __nv_bfloat16 *wte16, int N, int C,
                        int V, int ld);
int l_head_backward_bf16(ctx *x, float *dlnf, float *dwte, const __nv_bfloat16 *dlogits16, const __nv_bfloat16 *lnf16,
                         const __nv_bfloat16 *wte16, int N, int C, int V, int ld);
/* the bf16 path's cross-entropy (loss_rows.cuh): the forward leaves the logits and keeps each row's
 * (max, 1 / sum) in stats (2N floats), the mean loss in red[RED_BLOCKS]; the backward writes the bf16
 * gradient of the logits for l_head_backward_bf16; rows ld apart, as the head's */
int l_loss_forward_rows(ctx *x, float *losses, float *stats, const float *logits, const int *targets, int N, int V,
                        int ld, double *red);
int l_loss_backward_bf16(ctx *x, __nv_bfloat16 *dlogits16, const float *logits, const float *stats, const int *targets,
                         int N, int V, int ld);
/* fused causal attention on qkv (B,T,3C): out (B,T,C), lse (B*NH*T) kept for the backward; the backward
 * writes all of dqkv; dsum: B*NH*T scratch. Head size <= 256. */
int l_flash_forward(ctx *x, float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
int l_flash_backward(ctx *x, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                     float *dsum, int B, int T, int C, int NH);
/* dsum (B*NH*T) = per row, sum over the head of dout * out: the backward's D term (both flash attentions) */
int l_flash_dsum(ctx *x, float *dsum, const float *dout, const float *out, int B, int T, int C, int NH);
/* the tensor-core flash attention (gpt_cuda_flash.cu, kernels in flash_mma.cuh): the same arguments and
 * lse semantics as l_flash_forward / l_flash_backward; head size a multiple of 16 up to 128 */
int l_flash_mma_check(int B, int T, int C, int NH, char *err, size_t errlen); /* 0, or -1 with err */
int l_flash_mma_forward(ctx *x, float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
int l_flash_mma_backward(ctx *x, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                         float *dsum, int B, int T, int C, int NH);
/* the device check --attention auto trusts flash by (gpt_cuda_flash_check.cu): one small attention
 * through flash and through the fused kernels, forward and backward. verify: 1 when they agree within
 * limit, 0 when not, -1 on a CUDA error (err); note says by how much either way. trusted: verify's
 * verdict at the trust limit, computed once per head size and process. */
int l_flash_mma_verify(cudaStream_t st, int hs, double limit, char *note, size_t notelen, char *err, size_t errlen);
int l_flash_mma_trusted(cudaStream_t st, int hs, char *note, size_t notelen, char *err, size_t errlen);
/* causal attention as the fp32 path's (l_attention_*) with its products on bf16 operands, fp32 accumulation
 * and fp32 results (cublasGemmStridedBatchedEx): att (B,NH,T,T) keeps the fp32 probabilities; permutes,
 * softmax and its backward are the fp32 kernels. Scratch as l_attention_* (q, k, v, y / dy, dq, dk, dv:
 * B*T*C floats, dp B*NH*T*T floats) and the bf16 copies q16, k16, v16, dy16 (B*T*C), p16 (B*NH*T*T). The
 * backward writes all of dqkv. */
int l_attention_forward_bf16(ctx *x, float *out, float *att, const float *qkv, float *q, float *k, float *v, float *y,
                             __nv_bfloat16 *q16, __nv_bfloat16 *k16, __nv_bfloat16 *v16, __nv_bfloat16 *p16, int B,
                             int T, int C, int NH);
int l_attention_backward_bf16(ctx *x, float *dqkv, const float *dout, const float *qkv, const float *att, float *q,
                              float *k, float *v, float *dy, float *dq, float *dk, float *dv, float *dp,
                              __nv_bfloat16 *q16, __nv_bfloat16 *k16, __nv_bfloat16 *v16, __nv_bfloat16 *dy16,
                              __nv_bfloat16 *p16, int B, int T, int C, int NH);

/* ---- cuBLASLt (gpt_cuda_lt.cu) ------------------------------------------------------------- */
gpt_lt *gpt_lt_create(char *err, size_t errlen);
void gpt_lt_free(gpt_lt *lt);
/* l_matmul_forward_bf16's product with the bias (and res, when not NULL) in the epilogue, through x->lt:
 * 1 when done, 0 when cuBLASLt has no algorithm for it (nothing was launched: take the two passes), -1
 * on an error (x->err). _plan only chooses the algorithm (kept per shape and pointer alignments). */
int l_linear_lt(ctx *x, float *out, const __nv_bfloat16 *inp16, const __nv_bfloat16 *w16, const float *bias,
                const float *res, int N, int C, int OC);
int l_linear_lt_plan(ctx *x, float *out, const __nv_bfloat16 *inp16, const __nv_bfloat16 *w16, const float *bias,
                     const float *res, int N, int C, int OC);
/* what the planned products got: "" before any plan */
const char *gpt_lt_note(const gpt_lt *lt);

/* AdamW over tensors (decay on the 2-D ones), one launch for up to 240 runs of consecutive tensors with the same decay */
int l_adamw(ctx *x, const model_tensor *tensors, int ntensors, float *p, const float *g, float *m, float *v, long t,
            double lr, double beta1, double beta2, double eps, double weight_decay);

#endif
