/* gpt_cuda.h: the CUDA backend of the GPT trainer (worker/gpt), a plain C API over the .cu sources of worker/cuda.
 *
 * Same model, same flat parameter layout (gpt_layout), same math as the CPU backend in
 * worker/gpt/gpt_model.c: cuBLAS sgemm for every matrix product (strided-batched for attention;
 * TF32 only when asked), our own kernels for the embedding, LayerNorm, causal softmax, GELU,
 * residuals, cross-entropy, gradient clipping and AdamW. bf16 precision (gpt_cuda_set_precision) is
 * the exception to "same math": bf16 products and a fused attention kernel or, with
 * gpt_cuda_set_attention, the fp32 attention's products in bf16 (gpt_cuda_bf16.cu). Every
 * device buffer is allocated once in gpt_cuda_create with cudaMalloc (no managed memory), the bf16
 * copies once in gpt_cuda_set_precision (and gpt_cuda_set_attention); a step allocates nothing.
 *
 * Parameters, gradients and the AdamW moments live on the device. In a DiLoCo run the worker hands
 * libdiloco the device hooks of worker/cuda/diloco_cuda.h over gpt_cuda_params_device (the
 * pseudo-gradient and the new global parameters go through the device, gpt_trainer_device_ops);
 * otherwise the host buffer of the trainer (trainer.params) is copied in with gpt_cuda_set_params
 * (one async copy on the compute stream, after DiLoCo wrote new global values) and out with
 * gpt_cuda_get_params.
 *
 * Every sum that decides a number is deterministic (fixed reduction trees, no atomics): the same
 * batch on the same GPU gives the same bytes. The token-embedding gradient is a per-token sum in
 * position order, like the CPU's.
 *
 * Compiled only when nvcc exists (the Makefile defines DILOCO_HAVE_CUDA=1 for C code then). Every
 * function returns 0 / a pointer on success and -1 / NULL with a message in err on a CUDA error. */
#ifndef DILOCO_GPT_CUDA_H
#define DILOCO_GPT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "gpt/gpt.h"

/* Number of usable CUDA devices; 0 when there is none or the driver/runtime fails (never aborts).
 * If why is given it receives the reason when the answer is 0. */
int gpt_cuda_device_count(char *why, size_t whylen);
/* "NAME, sm_XY, N SMs, M MiB" of the current device, and its fp32 / tf32 dense peaks in FLOP/s
 * estimated from the SM count and clock (0 when the architecture is unknown). */
int gpt_cuda_device_info(char *name, size_t namelen, double *fp32_peak, double *tf32_peak);

/* Measured cublasSgemm rate (FLOP/s) for n x n x n on the current device (best of reps); 0 on error. */
double gpt_cuda_sgemm_flops(int n, int tf32, int reps);

typedef struct gpt_cuda gpt_cuda;

/* Allocates parameters, gradients, AdamW moments, every activation for batch B x sequence T, and
 * the cuBLAS handle on the current device. tf32 != 0 lets cuBLAS use TF32 tensor cores. */
gpt_cuda *gpt_cuda_create(const gpt_config *c, int B, int T, int tf32, char *err, size_t errlen);
void gpt_cuda_free(gpt_cuda *g);
/* bf16 != 0: from the next forward on, the linear layers and the lm head multiply bf16 copies of the
 * weights and activations with fp32 accumulation (cublasGemmEx), and attention is one fused kernel
 * (online softmax, no T x T probabilities); parameters, gradients and AdamW moments stay fp32 (DiLoCo
 * sees the fp32 master weights). 0: back to fp32. -1 with err when the head size is over 256. */
int gpt_cuda_set_precision(gpt_cuda *g, int bf16, char *err, size_t errlen);
int gpt_cuda_precision_bf16(const gpt_cuda *g);
/* In bf16: how the linear layers add their bias ("bias in the products' epilogue (cuBLASLt)", or added
 * by a kernel before each product where cuBLASLt has no algorithm for the shapes); "" in fp32 */
const char *gpt_cuda_precision_note(const gpt_cuda *g);
/* The floats from one row of the logits to the next on the device: the vocabulary, or in bf16 the
 * vocabulary rounded up to a multiple of 64 for the head's products (DILOCO_CUDA_VOCAB_PAD=0: not) */
size_t gpt_cuda_logits_stride(const gpt_cuda *g);
/* The attention of bf16 precision, from the next forward on (fp32 always uses its sgemm attention):
 * GPT_ATTENTION_FUSED (gpt.h; a new model's): the fused kernels above. GPT_ATTENTION_AUTO (the trainer's
 * default): FLASH where its kernels take the shapes and agree with the fused ones on this device (one
 * small check per head size and process: gpt_cuda_attention_note), else FUSED; gpt_cuda_attention then says which. GPT_ATTENTION_GEMM: the fp32
 * path's layout (q, k, v permuted to (B, NH, T, hs), the T x T probabilities kept per layer, softmax and
 * its backward in fp32) with its six products on bf16 operands, fp32 accumulation and fp32 results
 * (cublasGemmStridedBatchedEx: tensor cores); the first call with GEMM allocates its bf16 operands.
 * GPT_ATTENTION_FLASH: tensor-core flash kernels (gpt_cuda_flash.cu: tiles on mma.m16n8k16, online
 * softmax, probabilities recomputed in the backward), head size a multiple of 16 up to 128. Set it
 * between steps: a backward after it needs a new forward. This and gpt_cuda_set_precision allocate the
 * activations again when what they need changes: bf16 keeps the products' inputs in bf16 only (no fp32
 * copies), and FUSED or FLASH in bf16 keep one value per row (no T x T buffers). -1 with err for another value, a head size
 * FLASH does not take, or no memory. */
int gpt_cuda_set_attention(gpt_cuda *g, int attention, char *err, size_t errlen);
int gpt_cuda_attention(const gpt_cuda *g);
/* After GPT_ATTENTION_AUTO: what the device check of the flash kernels found ("flash checked on this device,
 * head size 64: out rel .., dqkv rel .. against the fused kernels", or "flash FAILED its check ...", auto
 * then took FUSED); "" when no check ran (another attention, or a head size flash does not take). */
const char *gpt_cuda_attention_note(const gpt_cuda *g);
size_t gpt_cuda_numel(const gpt_cuda *g);

/* Host <-> device copies of params[off, off+n) (host pointers are to the whole flat buffer).
 * set: asynchronous on the compute stream when host is pinned (gpt_cuda_pin), ordered before the
 * next step. get: waits for the step and the copy. */
int gpt_cuda_set_params(gpt_cuda *g, const float *host, size_t off, size_t n, char *err, size_t errlen);
int gpt_cuda_get_params(gpt_cuda *g, float *host, char *err, size_t errlen);
/* AdamW moments (checkpoint): numel floats each; either may be NULL. */
int gpt_cuda_set_moments(gpt_cuda *g, const float *m, const float *v, char *err, size_t errlen);
int gpt_cuda_get_moments(gpt_cuda *g, float *m, float *v, char *err, size_t errlen);
int gpt_cuda_get_grads(gpt_cuda *g, float *host, char *err, size_t errlen);
/* Logits (B,T,V) of the last forward (probabilities after a forward with targets, as the CPU). */
int gpt_cuda_get_logits(gpt_cuda *g, float *host, char *err, size_t errlen);
/* Page-lock a host buffer so copies to/from it are asynchronous DMA (cudaHostRegister); undo with
 * gpt_cuda_unpin. Failing to pin is not an error (copies stay correct, only slower): returns 1 when
 * pinned, 0 when not. */
int gpt_cuda_pin(void *host, size_t bytes);
void gpt_cuda_unpin(void *host);

/* Forward on the device parameters: inputs / targets are B*T host token ids. Returns the mean
 * cross-entropy in *loss (0 when targets is NULL: logits only). Waits for the result. */
int gpt_cuda_forward(gpt_cuda *g, const int *inputs, const int *targets, float *loss, char *err, size_t errlen);
/* After a forward with targets: gradients (written, not accumulated) on the device. */
int gpt_cuda_backward(gpt_cuda *g, char *err, size_t errlen);
/* clip_grad_norm_ on the device gradients; *norm (may be NULL) receives the norm before clipping.
 * The norm is computed and applied on the device; reading it waits for the stream. */
int gpt_cuda_clip(gpt_cuda *g, double max_norm, double *norm, char *err, size_t errlen);
/* The norm of the last gpt_cuda_clip without waiting for it: valid after the next call that waits
 * (gpt_cuda_get_params, gpt_cuda_sync, ...). */
double gpt_cuda_last_norm(const gpt_cuda *g);
/* One AdamW step (t >= 1) on the device, as gpt_adamw_step. */
int gpt_cuda_adamw(gpt_cuda *g, long t, double lr, double beta1, double beta2, double eps, double weight_decay,
                   char *err, size_t errlen);
/* Waits for everything queued. */
int gpt_cuda_sync(gpt_cuda *g, char *err, size_t errlen);

/* Where the steps' GPU time goes (bin/bench-trainer_cuda --profile): on, each launcher call of a step is
 * bracketed by CUDA events (a few microseconds of host time each, so profiled steps run a little slower);
 * off frees them. gpt_cuda_profile waits for the stream, then gives up to max phases (names[i], ms[i] =
 * mean ms per step of phase i since profiling went on; the weights' bf16 copy, embedding, layernorm,
 * linear layers, attention, gelu, residual, lm head, loss, clip, adamw) and *steps (may be NULL);
 * returns the number of phases, or -1 with err when profiling is off. */
int gpt_cuda_set_profile(gpt_cuda *g, int on, char *err, size_t errlen);
int gpt_cuda_profile(gpt_cuda *g, const char **names, double *ms, int max, long *steps, char *err, size_t errlen);

/* DiLoCo on the device (worker/cuda/diloco_cuda.h works on these): the flat device parameter
 * buffer (numel floats) and the cudaStream_t every step runs on. */
float *gpt_cuda_params_device(gpt_cuda *g);
void *gpt_cuda_stream(gpt_cuda *g);

#ifdef __cplusplus
}
#endif
#endif
