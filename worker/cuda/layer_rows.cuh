/* layer_rows.cuh: the CUDA GPT's layer kernels that write the bf16 path's operands, as kernels only:
 * gpt_cuda_kernels.cu launches them, and tests/test_layer_rows_emu.cc runs them on the CPU under the
 * lane emulator against float64.
 *
 *   layernorm_forward_k   one warp per row; its output in fp32 (the fp32 path), or in bf16 (out16) when
 *   gelu_forward_k        it only feeds a product, as in the bf16 path: the fp32 copy is then never
 *                         written nor converted again (l_to_bf16) before the product and its backward
 *   bias_residual_k       out = bias + res, the C a product with beta = 1 adds to: the bf16 path's
 *                         projections add their residual there instead of in a separate pass
 *   colsum_k              column sums (a bias's gradient, and LayerNorm's weight gradient) over chunks
 *   colsum_final_k        of rows, then the chunks added in order; with d16 the bf16 copy of what it
 *                         sums, in the same pass: the incoming gradient of the bf16 path's products is
 *                         read once, not twice
 *
 * The fp32 arithmetic is the same either way, so the bf16 output is the fp32 output rounded once. */
#ifndef DILOCO_LAYER_ROWS_CUH
#define DILOCO_LAYER_ROWS_CUH

#include <math.h>
#include <stddef.h>

#include "warp_mma.h" /* bf16_bits; without nvcc, the emulator's CUDA builtins */

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* one warp per row; out16 non-NULL: the output in bf16 there instead of fp32 in out (the bf16 path's
 * operand of the next product) */
__global__ void layernorm_forward_k(float *out, uint16_t *out16, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, int N, int C)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int i = lane; i < C; i += 32) s += x[i];
    float mu = warp_sum(s) / C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = x[i] - mu;
        v += d * d;
    }
    v = warp_sum(v);
    float rs = 1.0f / sqrtf(v / C + 1e-5f);
    size_t at = (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float y = (x[i] - mu) * rs * w[i] + b[i];
        if (out16)
            out16[at + i] = bf16_bits(y);
        else
            out[at + i] = y;
    }
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */

/* out16 non-NULL: the output in bf16 there instead of fp32 in out */
__global__ void gelu_forward_k(float *out, uint16_t *out16, const float *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    float u = GELU_S * (x + 0.044715f * x * x * x);
    float y = 0.5f * x * (1.0f + tanhf(u));
    if (out16)
        out16[i] = bf16_bits(y);
    else
        out[i] = y;
}

/* d gelu(x) / dx of gelu_forward_k's tanh GELU: gelu_backward_k's factor, and colsum_k's with gelu_in */
__device__ __forceinline__ float gelu_grad(float x)
{
    float u = GELU_S * (x + 0.044715f * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
}

/* Column sums over the rows of chunk blockIdx.y (rows [blockIdx.y * rpc, + rpc) of N), block (32, 32): x =
 * column in a tile of 32, y = row lane, summed in a fixed tree. db[blockIdx.y * C + c] = sum_r d[r,c],
 * dw[blockIdx.y * C + c] = sum_r (x[r,c]-mean[r])*rstd[r]*d[r,c] (when inp != NULL); d16 (when not NULL) =
 * d in bf16, in the same pass: the bf16 path's incoming gradient, the operand of its products. gelu_in
 * (when not NULL): what is summed and copied is d[r,c] * gelu_grad(gelu_in[r,c]), the GELU's backward
 * fused into the pass (the fc layer's incoming gradient, never written in fp32). With one
 * chunk (gridDim.y 1, rpc >= N) these are the sums; with more, the partial sums colsum_final_k adds. The
 * chunks are what keeps a GPU busy: one block per 32 columns is 24 blocks for 768 columns, a fifth of an
 * H100's SMs, each walking all N rows. */
__global__ void colsum_k(float *db, float *dw, uint16_t *d16, const float *d, const float *gelu_in, const float *inp,
                         const float *mean, const float *rstd, int N, int C, int rpc)
{
    __shared__ float sb[32][33], sw[32][33];
    int c = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * rpc, r1 = r0 + rpc < N ? r0 + rpc : N;
    float ab = 0.0f, aw = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 32) {
            float g = d[(size_t)r * C + c];
            if (gelu_in) g = gelu_grad(gelu_in[(size_t)r * C + c]) * g;
            if (d16) d16[(size_t)r * C + c] = bf16_bits(g);
            ab += g;
            if (inp) aw += (inp[(size_t)r * C + c] - mean[r]) * rstd[r] * g;
        }
    sb[threadIdx.y][threadIdx.x] = ab;
    sw[threadIdx.y][threadIdx.x] = aw;
    __syncthreads();
    for (int s = 16; s > 0; s >>= 1) {
        if ((int)threadIdx.y < s) {
            sb[threadIdx.y][threadIdx.x] += sb[threadIdx.y + s][threadIdx.x];
            sw[threadIdx.y][threadIdx.x] += sw[threadIdx.y + s][threadIdx.x];
        }
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < C) {
        size_t at = (size_t)blockIdx.y * C + c;
        db[at] = sb[0][threadIdx.x];
        if (dw) dw[at] = sw[0][threadIdx.x];
    }
}

/* the chunks' partial sums of colsum_k (pb, pw: chunks x C) added in chunk order: db[c], and dw[c] when pw
 * is not NULL. A fixed order, so the same bytes on any GPU */
__global__ void colsum_final_k(float *db, float *dw, const float *pb, const float *pw, int chunks, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sb = 0.0f, sw = 0.0f;
    for (int k = 0; k < chunks; k++) {
        sb += pb[(size_t)k * C + c];
        if (pw) sw += pw[(size_t)k * C + c];
    }
    db[c] = sb;
    if (pw) dw[c] = sw;
}

__global__ void bias_residual_k(float *out, const float *bias, const float *res, int N, int OC)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)N * OC) out[i] = bias[i % OC] + res[i];
}

#endif
