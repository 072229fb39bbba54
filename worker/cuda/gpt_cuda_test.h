/* gpt_cuda_test.h: single kernels of the CUDA GPT on host arrays, for tests/test_cuda_kernels.c (each
 * kernel against the CPU math); not used by the trainer. Compiled only with the CUDA backend. Each
 * returns 0, or -1 with the reason on stderr. */
#ifndef DILOCO_GPT_CUDA_TEST_H
#define DILOCO_GPT_CUDA_TEST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "model.h" /* model_tensor */

/* Each copies its inputs to fresh device buffers, runs the kernel(s) the model uses, copies the
 * outputs back and frees the buffers. Shapes as in worker/gpt/gpt_model.c. */
int gpt_cuda_k_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C,
                               int V, int maxT);
/* dwte (V,C) in/out (holds the head's gradient, the scatter adds); dwpe (maxT,C) written */
int gpt_cuda_k_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C, int V,
                                int maxT);
int gpt_cuda_k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                                 int N, int C);
/* dinp written (accumulate=0) or added to (1); dw, db written */
int gpt_cuda_k_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                  const float *w, const float *mean, const float *rstd, int N, int C, int accumulate);
/* out = inp W^T + bias ; and the backward: dinp, dw, dbias written */
int gpt_cuda_k_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                              int tf32);
int gpt_cuda_k_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                               const float *w, int N, int C, int OC, int tf32);
/* causal attention: out (B,T,C), att (B,NH,T,T) probabilities (0 above the diagonal) */
int gpt_cuda_k_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH, int tf32);
int gpt_cuda_k_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T,
                                  int C, int NH, int tf32);
/* softmax of the rows of S (rows of length T, row t keeps columns 0..t), in place */
int gpt_cuda_k_softmax_causal(float *s, int BH, int T);
int gpt_cuda_k_gelu_forward(float *out, const float *inp, size_t n);
int gpt_cuda_k_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
int gpt_cuda_k_residual_forward(float *out, const float *a, const float *b, size_t n);
/* logits -> probabilities in place, losses (N); *mean = mean loss. Then (separately) backward. */
int gpt_cuda_k_crossentropy_forward(float *logits, float *losses, const int *targets, int N, int V, float *mean);
int gpt_cuda_k_crossentropy_backward(float *probs, const int *targets, int N, int V);
int gpt_cuda_k_clip(float *grads, size_t numel, double max_norm, double *norm);
/* bf16 precision (gpt_cuda_bf16.cu): out (N,OC) = inp W^T + bias (+ res when not NULL) with inp and W
 * rounded to bf16 on the device, fp32 accumulation; lt 0: the bias (and res) written first, the product
 * added (two passes); lt 1: in cuBLASLt's epilogue (gpt_cuda_lt.cu), or 1 returned, nothing computed,
 * when cuBLASLt has no algorithm for the shape; lt 2: the same with the bias 4 bytes off alignment */
int gpt_cuda_k_matmul_forward_bf16(float *out, const float *inp, const float *w, const float *bias, const float *res,
                                   int N, int C, int OC, int lt);
/* its backward from the incoming gradient dout, or with gelu_in not NULL from dout * GELU'(gelu_in), the
 * GELU's backward fused into the pass that makes the bf16 operand (the fc layer's) */
int gpt_cuda_k_matmul_backward_bf16(float *dinp, float *dw, float *dbias, const float *dout, const float *gelu_in,
                                    const float *inp, const float *w, int N, int C, int OC);
/* the fused causal attention, forward (out, lse B*NH*T) and backward (dqkv), or with mma != 0 the tensor-core
 * flash attention (gpt_cuda_flash.cu, --attention flash) */
int gpt_cuda_k_flash_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int mma);
/* --attention auto's device check (gpt_cuda_flash_check.cu) for head size hs with this limit, not kept:
 * 1 flash agrees with the fused kernels, 0 not, -1 error; note says by how much */
int gpt_cuda_k_flash_verify(int hs, double limit, char *note, size_t notelen);
int gpt_cuda_k_flash_backward(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                              int B, int T, int C, int NH, int mma);
/* the attention with bf16 products (--attention gemm): as gpt_cuda_k_attention_forward / _backward (att:
 * the fp32 probabilities it keeps), with q, k, v, P, dY and dS rounded to bf16 before each product */
int gpt_cuda_k_attention_forward_bf16(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
int gpt_cuda_k_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T,
                                       int C, int NH);
/* warp_mma_check_k (worker/cuda/warp_mma_check.cuh) on one warp: A 16x16, B, C, B2 16x8 in; d_frag,
 * d_ldm, d_reuse 16x8 and sums[32] out */
int gpt_cuda_k_warp_mma_check(float *d_frag, float *d_ldm, float *d_reuse, float *sums, const float *A, const float *B,
                              const float *C, const float *B2);
int gpt_cuda_k_adamw(const model_tensor *tensors, int ntensors, float *params, const float *grads, float *m, float *v,
                     long t, double lr, double beta1, double beta2, double eps, double weight_decay);

#ifdef __cplusplus
}
#endif
#endif
