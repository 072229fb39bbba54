/* loss_rows.cuh: the bf16 GPT's cross-entropy in two passes over the logits instead of seven, as kernels
 * only: gpt_cuda_bf16.cu launches them (l_loss_forward_rows, l_loss_backward_bf16), and
 * tests/test_loss_rows_emu.cc runs them on the CPU under the lane emulator against float64.
 *
 * The logits of GPT-2 small at 8 x 1024 tokens are 412 M floats (1.65 GB), the largest tensor of a step.
 * The fp32 path (gpt_cuda_kernels.cu) reads them three times and writes them twice to turn them into
 * probabilities in place, reads and writes them again for the gradient, and the bf16 head then copies
 * the gradient to bf16: about 17 GB of traffic. Here:
 *   forward   one read: each row's max and sum of exponentials by an online softmax (a running max,
 *             the sum rescaled when the max grows), merged across the block in a fixed tree; it writes
 *             the row's loss and its (max, 1 / sum), and leaves the logits as they are;
 *   backward  one read and a bf16 write: the gradient (softmax - onehot) / N straight into the bf16
 *             operand of the head's products, so no fp32 gradient and no copy.
 * That is about 7.4 GB with the head's products. Deterministic: a fixed tree, no atomics. */
#ifndef DILOCO_LOSS_ROWS_CUH
#define DILOCO_LOSS_ROWS_CUH

#include <math.h>
#include <stddef.h>

#include "warp_mma.h" /* bf16_bits; without nvcc, the emulator's CUDA builtins */

#define LOSS_ROW_THREADS 512 /* threads per row of loss_rows_k: a power of two */

/* (m, s) <- the max and the sum of exponentials relative to it of both parts */
__device__ __forceinline__ void softmax_merge(float *m, float *s, float m2, float s2)
{
    if (m2 == -INFINITY) return;
    if (*m == -INFINITY) {
        *m = m2;
        *s = s2;
        return;
    }
    float mx = fmaxf(*m, m2);
    *s = *s * expf(*m - mx) + s2 * expf(m2 - mx);
    *m = mx;
}

/* one block of LOSS_ROW_THREADS per row n (its V logits, rows ld >= V apart): losses[n] = log(sum exp) + max -
 * x[target], stats[2n] = max, stats[2n + 1] = 1 / sum exp(x - max) */
__global__ void loss_rows_k(float *losses, float *stats, const float *logits, const int *targets, int V, int ld)
{
    __shared__ float row_max[LOSS_ROW_THREADS], row_sum[LOSS_ROW_THREADS];
    int n = blockIdx.x, tid = threadIdx.x;
    const float *x = logits + (size_t)n * ld;
    float m = -INFINITY, s = 0.0f;
    for (int i = tid; i < V; i += LOSS_ROW_THREADS) {
        float v = x[i];
        if (v > m) {
            s = s * expf(m - v) + 1.0f; /* exp(-inf) = 0 on the first value */
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    row_max[tid] = m;
    row_sum[tid] = s;
    __syncthreads();
    for (int k = LOSS_ROW_THREADS / 2; k > 0; k >>= 1) {
        if (tid < k) softmax_merge(&row_max[tid], &row_sum[tid], row_max[tid + k], row_sum[tid + k]);
        __syncthreads();
    }
    if (tid == 0) {
        float mx = row_max[0], sum = row_sum[0];
        losses[n] = logf(sum) + mx - x[targets[n]];
        stats[2 * (size_t)n] = mx;
        stats[2 * (size_t)n + 1] = 1.0f / sum;
    }
}

/* dlogits16 (N, V) = bf16 of (softmax - onehot(target)) / N, rows n = blockIdx.y, blockIdx.y + gridDim.y,
 * ...; columns blockIdx.x * blockDim.x + threadIdx.x; the logits' rows and the gradient's ld apart */
__global__ void loss_grad_bf16_k(uint16_t *dlogits16, const float *logits, const float *stats, const int *targets,
                                 int N, int V, int ld)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= V) return;
    float inv_n = 1.0f / (float)N;
    for (int n = blockIdx.y; n < N; n += gridDim.y) {
        size_t i = (size_t)n * ld + c;
        float p = expf(logits[i] - stats[2 * (size_t)n]) * stats[2 * (size_t)n + 1];
        dlogits16[i] = bf16_bits((p - (c == targets[n] ? 1.0f : 0.0f)) * inv_n);
    }
}

#endif
