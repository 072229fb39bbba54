/* attention_rows.cuh: the fused causal attention of the bf16 CUDA GPT (--attention fused), as kernels
 * only: gpt_cuda_bf16.cu launches them (l_flash_forward, l_flash_backward), and tests/test_flash_emu.cc
 * runs them on the CPU under the lane emulator (tests/tools/simt_emu.h) against a float64 reference.
 *
 * One warp owns one row (a query row forward and for dq, a key row for dk and dv) and reads q, k and v
 * straight from qkv (B, T, 3C) in fp32: an online softmax keeps a running max and sum over the row's keys,
 * so no T x T matrix is stored; the row's log-sum-exp is kept for the backward, which recomputes the
 * probabilities. Each dot product is summed across the warp and lane 0's sum is broadcast, so every lane
 * uses the same value and the result is reproducible bit for bit (no atomics: every output element is
 * written by one lane). Slow next to a tiled kernel (scalar dot products), but short and plainly right. */
#ifndef DILOCO_ATTENTION_ROWS_CUH
#define DILOCO_ATTENTION_ROWS_CUH

#include <math.h>
#include <stddef.h>

#include "warp_mma.h" /* nothing of it used here; without nvcc it brings the emulator's CUDA builtins */

#define HS_MAX 256 /* head size the attention kernels take: HS_MAX / 32 values per lane */
#define PER_LANE (HS_MAX / 32)

/* the sum of v over the warp, lane 0's result given to every lane */
__device__ __forceinline__ float warp_dot(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return __shfl_sync(0xffffffffu, v, 0);
}

/* this lane's share of a head vector: elements lane, lane + 32, ... below hs */
__device__ __forceinline__ void load_head(float *r, const float *p, int hs, int lane, float scale)
{
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        int d = lane + 32 * j;
        r[j] = d < hs ? p[d] * scale : 0.0f;
    }
}

__device__ __forceinline__ float dot_head(const float *r, const float *p, int hs, int lane)
{
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        int d = lane + 32 * j;
        if (d < hs) s += r[j] * p[d];
    }
    return warp_dot(s);
}

/* which row a warp owns: (b, h, t) of B*NH*T rows; q, k, v of position t in qkv (B,T,3C) */
struct row_at {
    int b, h, t;
};
__device__ __forceinline__ row_at row_of(int row, int T, int NH)
{
    row_at r;
    r.t = row % T;
    r.h = (row / T) % NH;
    r.b = row / (T * NH);
    return r;
}
__device__ __forceinline__ size_t qkv_at(int b, int t, int h, int T, int C, int hs)
{
    return ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
}

/* out (B,T,C) = softmax(q k^T * scale, causal) v per head; lse (B,NH,T) = the rows' log-sum-exp of the
 * scaled scores. One warp per row; online softmax over keys 0..t. */
__global__ void flash_forward_k(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, float scale)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= B * NH * T) return;
    int hs = C / NH;
    row_at r = row_of(row, T, NH);
    float q[PER_LANE], acc[PER_LANE];
    load_head(q, qkv + qkv_at(r.b, r.t, r.h, T, C, hs), hs, lane, scale);
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) acc[j] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int s = 0; s <= r.t; s++) {
        const float *k = qkv + qkv_at(r.b, s, r.h, T, C, hs) + C, *v = k + C;
        float sc = dot_head(q, k, hs, lane);
        float mn = fmaxf(m, sc), corr = expf(m - mn), p = expf(sc - mn);
        l = l * corr + p;
#pragma unroll
        for (int j = 0; j < PER_LANE; j++) {
            int d = lane + 32 * j;
            acc[j] = acc[j] * corr + (d < hs ? p * v[d] : 0.0f);
        }
        m = mn;
    }
    float *o = out + ((size_t)r.b * T + r.t) * C + (size_t)r.h * hs;
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        int d = lane + 32 * j;
        if (d < hs) o[d] = acc[j] / l;
    }
    if (lane == 0) lse[row] = m + logf(l);
}

/* dsum (B,NH,T) = per row, sum over the head of dout * out (the softmax backward's row term) */
__global__ void flash_dsum_k(float *dsum, const float *dout, const float *out, int B, int T, int C, int NH)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= B * NH * T) return;
    int hs = C / NH;
    row_at r = row_of(row, T, NH);
    size_t at = ((size_t)r.b * T + r.t) * C + (size_t)r.h * hs;
    float o[PER_LANE];
    load_head(o, out + at, hs, lane, 1.0f);
    float s = dot_head(o, dout + at, hs, lane);
    if (lane == 0) dsum[row] = s;
}

/* dq of query row t: scale * sum over s <= t of p_ts (dout_t . v_s - dsum_t) k_s, p recomputed from lse */
__global__ void flash_dq_k(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dsum, int B,
                           int T, int C, int NH, float scale)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= B * NH * T) return;
    int hs = C / NH;
    row_at r = row_of(row, T, NH);
    float q[PER_LANE], dy[PER_LANE], dq[PER_LANE];
    load_head(q, qkv + qkv_at(r.b, r.t, r.h, T, C, hs), hs, lane, scale);
    load_head(dy, dout + ((size_t)r.b * T + r.t) * C + (size_t)r.h * hs, hs, lane, 1.0f);
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) dq[j] = 0.0f;
    float L = lse[row], D = dsum[row];
    for (int s = 0; s <= r.t; s++) {
        const float *k = qkv + qkv_at(r.b, s, r.h, T, C, hs) + C, *v = k + C;
        float p = expf(dot_head(q, k, hs, lane) - L), ds = p * (dot_head(dy, v, hs, lane) - D);
#pragma unroll
        for (int j = 0; j < PER_LANE; j++) {
            int d = lane + 32 * j;
            if (d < hs) dq[j] += ds * k[d];
        }
    }
    float *o = dqkv + qkv_at(r.b, r.t, r.h, T, C, hs);
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        int d = lane + 32 * j;
        if (d < hs) o[d] = dq[j] * scale;
    }
}

/* dk, dv of key row s: over queries t >= s, dv_s += p_ts dout_t and dk_s += scale * ds_ts q_t */
__global__ void flash_dkv_k(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dsum,
                            int B, int T, int C, int NH, float scale)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= B * NH * T) return;
    int hs = C / NH;
    row_at r = row_of(row, T, NH);
    size_t kat = qkv_at(r.b, r.t, r.h, T, C, hs) + C;
    float k[PER_LANE], v[PER_LANE], dk[PER_LANE], dv[PER_LANE];
    load_head(k, qkv + kat, hs, lane, 1.0f);
    load_head(v, qkv + kat + C, hs, lane, 1.0f);
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) dk[j] = dv[j] = 0.0f;
    size_t row0 = (size_t)row - r.t; /* row of query 0 of this (b, h) */
    for (int t = r.t; t < T; t++) {
        const float *q = qkv + qkv_at(r.b, t, r.h, T, C, hs), *dy = dout + ((size_t)r.b * T + t) * C + (size_t)r.h * hs;
        float p = expf(dot_head(k, q, hs, lane) * scale - lse[row0 + t]);
        float ds = p * (dot_head(v, dy, hs, lane) - dsum[row0 + t]);
#pragma unroll
        for (int j = 0; j < PER_LANE; j++) {
            int d = lane + 32 * j;
            if (d < hs) {
                dv[j] += p * dy[d];
                dk[j] += ds * q[d];
            }
        }
    }
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        int d = lane + 32 * j;
        if (d < hs) {
            dqkv[kat + d] = dk[j] * scale;
            dqkv[kat + C + d] = dv[j];
        }
    }
}

#endif
