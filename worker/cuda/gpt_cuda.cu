/* gpt_cuda.cu: the CUDA backend of the GPT (see gpt_cuda.h). The structure follows
 * worker/gpt/gpt_model.c function by function so the two can be read side by side: one launch
 * function per layer (shared by the model and by the single-kernel test entry points), cuBLAS for
 * every product (row-major products mapped onto column-major cuBLAS by swapping the operands),
 * attention through q/k/v permuted to (B, NH, T, hs) so that each product is one strided-batched
 * sgemm over the B*NH heads.
 *
 * No atomics anywhere: column sums, norms and the loss use fixed reduction trees, and the
 * token-embedding scatter is a per-token sum in position order (the positions of each token are
 * bucketed on the host when the batch is uploaded), so results are reproducible bit for bit. */
#include "gpt_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_check.h"

/* CUDA / cuBLAS call checks inside functions that take (err, errlen) and return int */
#define CKB(call)                                                                                  \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            err_set(err, errlen, "cublas: %s: status %d (%s:%d)", #call, (int)s_, __FILE__, __LINE__); \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)
#define CKL() CK(cudaGetLastError())

static inline unsigned nblocks(size_t n, int bs) { return (unsigned)((n + bs - 1) / bs); }

/* ------------------------------------------------------------------------------------------- */
/* devices                                                                                     */

extern "C" int gpt_cuda_device_count(char *why, size_t whylen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        err_set(why, whylen, "%s", cudaGetErrorString(e));
        cudaGetLastError(); /* clear the sticky-free error state */
        return 0;
    }
    if (n <= 0) err_set(why, whylen, "cudaGetDeviceCount returned 0 devices");
    return n > 0 ? n : 0;
}

extern "C" int gpt_cuda_device_info(char *name, size_t namelen, double *fp32_peak, double *tf32_peak) {
    int dev = 0, sms = 0, khz = 0, major = 0, minor = 0;
    cudaDeviceProp p;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) return -1;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    /* fp32 FMA lanes per SM and dense TF32 tensor-core FLOP per clock per SM (A100 / H100 data
     * sheets: 64 lanes and 1024 FLOP/clk on sm_80, 128 and 2048 on sm_90); 0 = unknown */
    int lanes = 0, tf32 = 0;
    if (major == 8 && minor == 0) { lanes = 64; tf32 = 1024; }
    else if (major == 8) lanes = 128;
    else if (major == 9) { lanes = 128; tf32 = 2048; }
    else if (major == 7) lanes = 64;
    else if (major >= 10) lanes = 128;
    double hz = khz * 1e3;
    if (fp32_peak) *fp32_peak = 2.0 * lanes * sms * hz;
    if (tf32_peak) *tf32_peak = (double)tf32 * sms * hz;
    if (name)
        snprintf(name, namelen, "%s, sm_%d%d, %d SMs, %.0f MHz, %zu MiB", p.name, major, minor, sms, khz / 1e3,
                 p.totalGlobalMem >> 20);
    return 0;
}

extern "C" int gpt_cuda_pin(void *host, size_t bytes) {
    if (cudaHostRegister(host, bytes, cudaHostRegisterDefault) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return 1;
}

extern "C" void gpt_cuda_unpin(void *host) {
    if (cudaHostUnregister(host) != cudaSuccess) cudaGetLastError();
}

/* ------------------------------------------------------------------------------------------- */
/* products: row-major C(MxN) = alpha op(A) op(B) + beta C, as cblas_sgemm(CblasRowMajor, ...)   */
/* A row-major matrix is its transpose in column-major, so C^T = op(B)^T op(A)^T: swap operands.  */

static cublasStatus_t mm(cublasHandle_t h, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                         int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    return cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb,
                       A, lda, &beta, C, ldc);
}

static cublasStatus_t mmb(cublasHandle_t h, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                          int lda, long long sA, const float *B, int ldb, long long sB, float beta, float *C, int ldc,
                          long long sC, int batch) {
    return cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                                     &alpha, B, ldb, sB, A, lda, sA, &beta, C, ldc, sC, batch);
}

/* ------------------------------------------------------------------------------------------- */
/* kernels                                                                                     */

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* block-wide sum / max (blockDim.x a multiple of 32, <= 1024); every thread gets the result */
__device__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}
__device__ float block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

__global__ void encoder_forward_k(float *out, const int *inp, const float *wte, const float *wpe, int N, int T,
                                  int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C), t = n % T;
    out[i] = wte[(size_t)inp[n] * C + c] + wpe[(size_t)t * C + c];
}

/* dwpe[t, c] = sum over b of dout[b, t, c] (b in order); rows t >= T are zero */
__global__ void encoder_backward_wpe_k(float *dwpe, const float *dout, int B, int T, int C, int maxT) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)maxT * C) return;
    int t = (int)(i / C), c = (int)(i % C);
    float s = 0.0f;
    if (t < T)
        for (int b = 0; b < B; b++) s += dout[((size_t)b * T + t) * C + c];
    dwpe[i] = s;
}

/* dwte[tok, c] += dout[n, c] for the positions n of tok, in increasing n (as the CPU loop):
 * uniq[u] is a token, its positions are order[ustart[u] .. ustart[u+1]) */
__global__ void encoder_backward_wte_k(float *dwte, const float *dout, const int *order, const int *uniq,
                                       const int *ustart, int U, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int u = blockIdx.y; u < U; u += gridDim.y) {
        float *w = dwte + (size_t)uniq[u] * C + c;
        float acc = *w;
        for (int k = ustart[u]; k < ustart[u + 1]; k++) acc += dout[(size_t)order[k] * C + c];
        *w = acc;
    }
}

/* one warp per row */
__global__ void layernorm_forward_k(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                    const float *b, int N, int C) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int i = lane; i < C; i += 32) s += x[i];
    float mu = warp_sum(s) / C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) { float d = x[i] - mu; v += d * d; }
    v = warp_sum(v);
    float rs = 1.0f / sqrtf(v / C + 1e-5f);
    float *o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) o[i] = (x[i] - mu) * rs * w[i] + b[i];
    if (lane == 0) { mean[row] = mu; rstd[row] = rs; }
}

__global__ void layernorm_backward_dx_k(float *dinp, const float *dout, const float *inp, const float *w,
                                        const float *mean, const float *rstd, int N, int C, int accumulate) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *d = dout + (size_t)row * C, *x = inp + (size_t)row * C;
    float mu = mean[row], rs = rstd[row], s1 = 0.0f, s2 = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float nx = (x[i] - mu) * rs, dn = w[i] * d[i];
        s1 += dn;
        s2 += dn * nx;
    }
    s1 = warp_sum(s1) / C;
    s2 = warp_sum(s2) / C;
    float *di = dinp + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float g = (w[i] * d[i] - s1 - (x[i] - mu) * rs * s2) * rs;
        di[i] = accumulate ? di[i] + g : g;
    }
}

/* column sums over N rows, block (32, 32): x = column in a tile of 32, y = row lane.
 * dw[c] = sum_r (x[r,c]-mean[r])*rstd[r]*d[r,c] (when inp != NULL), db[c] = sum_r d[r,c]. */
__global__ void colsum_k(float *db, float *dw, const float *d, const float *inp, const float *mean,
                         const float *rstd, int N, int C) {
    __shared__ float sb[32][33], sw[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float ab = 0.0f, aw = 0.0f;
    if (c < C)
        for (int r = threadIdx.y; r < N; r += 32) {
            float g = d[(size_t)r * C + c];
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
        db[c] = sb[0][threadIdx.x];
        if (dw) dw[c] = sw[0][threadIdx.x];
    }
}

__global__ void bias_broadcast_k(float *out, const float *bias, int N, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)N * OC) out[i] = bias[i % OC];
}

/* qkv (B,T,3C) -> q, k, v (B,NH,T,hs) */
__global__ void permute_qkv_k(float *q, float *k, float *v, const float *qkv, int B, int T, int C, int NH) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    int hs = C / NH;
    int d = (int)(i % hs);
    size_t r = i / hs;
    int t = (int)(r % T);
    r /= T;
    int h = (int)(r % NH), b = (int)(r / NH);
    const float *src = qkv + ((size_t)b * T + t) * 3 * C + h * hs + d;
    q[i] = src[0];
    k[i] = src[C];
    v[i] = src[2 * C];
}

/* (B,NH,T,hs) <-> (B,T,C) with row stride ld and column offset col0 in the (B,T,*) tensor;
 * to_bt: y -> out, else out -> y */
__global__ void permute_bt_k(float *bt, float *bh, int B, int T, int C, int NH, int ld, int col0, int to_bt) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    int hs = C / NH;
    int d = (int)(i % hs);
    size_t r = i / hs;
    int t = (int)(r % T);
    r /= T;
    int h = (int)(r % NH), b = (int)(r / NH);
    float *p = bt + ((size_t)b * T + t) * ld + col0 + h * hs + d;
    if (to_bt) *p = bh[i];
    else bh[i] = *p;
}

/* rows of length T, row index % T = t: softmax over columns 0..t, zero above; one warp per row */
__global__ void softmax_causal_k(float *s, int rows, int T) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = row % T;
    float *x = s + (size_t)row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, x[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) { float e = expf(x[j] - mx); x[j] = e; sum += e; }
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += 32) x[j] = j <= t ? x[j] * inv : 0.0f;
}

/* dS = P * (dP - sum_j P dP) on columns 0..t, zero above; in place on dP */
__global__ void softmax_backward_k(float *dp, const float *p, int rows, int T) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = row % T;
    float *d = dp + (size_t)row * T;
    const float *pp = p + (size_t)row * T;
    float s = 0.0f;
    for (int j = lane; j <= t; j += 32) s += pp[j] * d[j];
    s = warp_sum(s);
    for (int j = lane; j < T; j += 32) d[j] = j <= t ? pp[j] * (d[j] - s) : 0.0f;
}

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */

__global__ void gelu_forward_k(float *out, const float *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    float u = GELU_S * (x + 0.044715f * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
}

__global__ void gelu_backward_k(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    float u = GELU_S * (x + 0.044715f * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = g * dout[i];
}

__global__ void residual_k(float *out, const float *a, const float *b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

/* one block per row: logits -> probabilities in place, losses[n] = log(sum) - log(p_target) */
__global__ void crossentropy_forward_k(float *logits, float *losses, const int *targets, int V) {
    __shared__ float sh[32];
    int n = blockIdx.x;
    float *x = logits + (size_t)n * V;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, x[i]);
    mx = block_max(mx, sh);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) { float e = expf(x[i] - mx); x[i] = e; s += e; }
    s = block_sum(s, sh); /* its barriers make every e above visible to the block */
    if (threadIdx.x == 0) losses[n] = logf(s) - logf(x[targets[n]]);
    __syncthreads();
    float inv = 1.0f / s;
    for (int i = threadIdx.x; i < V; i += blockDim.x) x[i] *= inv;
}

/* probs -> (p - onehot) / N in place */
__global__ void crossentropy_backward_k(float *x, const int *targets, int N, int V) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * V) return;
    int n = (int)(i / V), c = (int)(i % V);
    float inv = 1.0f / N;
    float g = x[i] * inv;
    if (c == targets[n]) g -= inv;
    x[i] = g;
}

/* deterministic double sums: RED_BLOCKS partial sums (grid-stride, fixed tree), then one block */
#define RED_BLOCKS 256
#define RED_THREADS 256
__global__ void sum_partial_k(double *partial, const float *x, size_t n, int square) {
    __shared__ double sh[RED_THREADS];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double v = x[i];
        s += square ? v * v : v;
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

/* red[0..RED_BLOCKS) partials -> red[RED_BLOCKS] = total; mode 1 (clip): red[RED_BLOCKS] = norm,
 * red[RED_BLOCKS+1] = coefficient as torch (1 when not clipping) */
__global__ void sum_final_k(double *red, int mode, double max_norm, double scale) {
    __shared__ double sh[RED_BLOCKS];
    sh[threadIdx.x] = red[threadIdx.x];
    __syncthreads();
    for (int k = RED_BLOCKS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x) return;
    if (mode == 0) { red[RED_BLOCKS] = sh[0] * scale; return; }
    double norm = sqrt(sh[0]);
    red[RED_BLOCKS] = norm;
    double coef = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
    red[RED_BLOCKS + 1] = coef < 1.0 ? coef : 1.0;
}

__global__ void clip_scale_k(float *g, size_t n, const double *red) {
    double coef = red[RED_BLOCKS + 1];
    if (coef >= 1.0) return;
    float c = (float)coef;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] *= c;
}

/* torch.optim.AdamW on [0, n), float math in the CPU's order (no contraction into FMAs) */
__global__ void adamw_k(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2, float e,
                        float step_size, float bc2s, float decay) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i];
    float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(1.0f - b1, gi));
    float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(1.0f - b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2s), e);
    p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fdiv_rn(__fmul_rn(step_size, mi), denom));
}

/* ------------------------------------------------------------------------------------------- */
/* launches (shared by the model and the single-kernel entry points)                           */

#define BS 256
#define ROWS_PER_BLOCK (BS / 32)

typedef struct {
    cudaStream_t st;
    cublasHandle_t h;
    char *err;
    size_t errlen;
} ctx;

static int l_encoder_forward(ctx *x, float *out, const int *inp, const float *wte, const float *wpe, int B, int T,
                             int C) {
    char *err = x->err;
    size_t errlen = x->errlen;
    size_t n = (size_t)B * T * C;
    encoder_forward_k<<<nblocks(n, BS), BS, 0, x->st>>>(out, inp, wte, wpe, B * T, T, C);
    CKL();
    return 0;
}

static int l_encoder_backward(ctx *x, float *dwte, float *dwpe, const float *dout, const int *order, const int *uniq,
                              const int *ustart, int U, int B, int T, int C, int maxT) {
    char *err = x->err;
    size_t errlen = x->errlen;
    encoder_backward_wpe_k<<<nblocks((size_t)maxT * C, BS), BS, 0, x->st>>>(dwpe, dout, B, T, C, maxT);
    CKL();
    if (U > 0) {
        dim3 grid(nblocks((size_t)C, 128), (unsigned)(U < 65535 ? U : 65535));
        encoder_backward_wte_k<<<grid, 128, 0, x->st>>>(dwte, dout, order, uniq, ustart, U, C);
        CKL();
    }
    return 0;
}

static int l_layernorm_forward(ctx *x, float *out, float *mean, float *rstd, const float *inp, const float *w,
                               const float *b, int N, int C) {
    char *err = x->err;
    size_t errlen = x->errlen;
    layernorm_forward_k<<<nblocks((size_t)N, ROWS_PER_BLOCK), BS, 0, x->st>>>(out, mean, rstd, inp, w, b, N, C);
    CKL();
    return 0;
}

static int l_layernorm_backward(ctx *x, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                const float *w, const float *mean, const float *rstd, int N, int C, int accumulate) {
    char *err = x->err;
    size_t errlen = x->errlen;
    layernorm_backward_dx_k<<<nblocks((size_t)N, ROWS_PER_BLOCK), BS, 0, x->st>>>(dinp, dout, inp, w, mean, rstd, N,
                                                                                  C, accumulate);
    CKL();
    colsum_k<<<nblocks((size_t)C, 32), dim3(32, 32), 0, x->st>>>(db, dw, dout, inp, mean, rstd, N, C);
    CKL();
    return 0;
}

static int l_matmul_forward(ctx *x, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                            int OC) {
    char *err = x->err;
    size_t errlen = x->errlen;
    bias_broadcast_k<<<nblocks((size_t)N * OC, BS), BS, 0, x->st>>>(out, bias, N, OC);
    CKL();
    CKB(mm(x->h, 0, 1, N, OC, C, 1.0f, inp, C, w, C, 1.0f, out, OC));
    return 0;
}

static int l_matmul_backward(ctx *x, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                             const float *w, int N, int C, int OC) {
    char *err = x->err;
    size_t errlen = x->errlen;
    CKB(mm(x->h, 0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C));
    CKB(mm(x->h, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 0.0f, dw, C));
    colsum_k<<<nblocks((size_t)OC, 32), dim3(32, 32), 0, x->st>>>(dbias, NULL, dout, NULL, NULL, NULL, N, OC);
    CKL();
    return 0;
}

/* scratch: q, k, v, y each B*T*C */
static int l_attention_forward(ctx *x, float *out, float *att, const float *qkv, float *q, float *k, float *v,
                               float *y, int B, int T, int C, int NH) {
    char *err = x->err;
    size_t errlen = x->errlen;
    int hs = C / NH, BH = B * NH;
    size_t n = (size_t)B * T * C;
    float scale = 1.0f / sqrtf((float)hs);
    permute_qkv_k<<<nblocks(n, BS), BS, 0, x->st>>>(q, k, v, qkv, B, T, C, NH);
    CKL();
    long long sT = (long long)T * hs, sTT = (long long)T * T;
    CKB(mmb(x->h, 0, 1, T, T, hs, scale, q, hs, sT, k, hs, sT, 0.0f, att, T, sTT, BH));
    softmax_causal_k<<<nblocks((size_t)BH * T, ROWS_PER_BLOCK), BS, 0, x->st>>>(att, BH * T, T);
    CKL();
    CKB(mmb(x->h, 0, 0, T, hs, T, 1.0f, att, T, sTT, v, hs, sT, 0.0f, y, hs, sT, BH));
    permute_bt_k<<<nblocks(n, BS), BS, 0, x->st>>>(out, y, B, T, C, NH, C, 0, 1);
    CKL();
    return 0;
}

/* scratch: q, k, v, dy, dq, dk, dv each B*T*C; dp B*NH*T*T */
static int l_attention_backward(ctx *x, float *dqkv, const float *dout, const float *qkv, const float *att,
                                float *q, float *k, float *v, float *dy, float *dq, float *dk, float *dv, float *dp,
                                int B, int T, int C, int NH) {
    char *err = x->err;
    size_t errlen = x->errlen;
    int hs = C / NH, BH = B * NH;
    size_t n = (size_t)B * T * C;
    float scale = 1.0f / sqrtf((float)hs);
    long long sT = (long long)T * hs, sTT = (long long)T * T;
    permute_qkv_k<<<nblocks(n, BS), BS, 0, x->st>>>(q, k, v, qkv, B, T, C, NH);
    CKL();
    permute_bt_k<<<nblocks(n, BS), BS, 0, x->st>>>((float *)dout, dy, B, T, C, NH, C, 0, 0);
    CKL();
    /* dP = dY V^T ; dV = P^T dY */
    CKB(mmb(x->h, 0, 1, T, T, hs, 1.0f, dy, hs, sT, v, hs, sT, 0.0f, dp, T, sTT, BH));
    CKB(mmb(x->h, 1, 0, T, hs, T, 1.0f, att, T, sTT, dy, hs, sT, 0.0f, dv, hs, sT, BH));
    softmax_backward_k<<<nblocks((size_t)BH * T, ROWS_PER_BLOCK), BS, 0, x->st>>>(dp, att, BH * T, T);
    CKL();
    /* dQ = scale dS K ; dK = scale dS^T Q */
    CKB(mmb(x->h, 0, 0, T, hs, T, scale, dp, T, sTT, k, hs, sT, 0.0f, dq, hs, sT, BH));
    CKB(mmb(x->h, 1, 0, T, hs, T, scale, dp, T, sTT, q, hs, sT, 0.0f, dk, hs, sT, BH));
    permute_bt_k<<<nblocks(n, BS), BS, 0, x->st>>>(dqkv, dq, B, T, C, NH, 3 * C, 0, 1);
    CKL();
    permute_bt_k<<<nblocks(n, BS), BS, 0, x->st>>>(dqkv, dk, B, T, C, NH, 3 * C, C, 1);
    CKL();
    permute_bt_k<<<nblocks(n, BS), BS, 0, x->st>>>(dqkv, dv, B, T, C, NH, 3 * C, 2 * C, 1);
    CKL();
    return 0;
}

static int l_gelu_forward(ctx *x, float *out, const float *inp, size_t n) {
    char *err = x->err;
    size_t errlen = x->errlen;
    gelu_forward_k<<<nblocks(n, BS), BS, 0, x->st>>>(out, inp, n);
    CKL();
    return 0;
}

static int l_gelu_backward(ctx *x, float *dinp, const float *inp, const float *dout, size_t n) {
    char *err = x->err;
    size_t errlen = x->errlen;
    gelu_backward_k<<<nblocks(n, BS), BS, 0, x->st>>>(dinp, inp, dout, n);
    CKL();
    return 0;
}

static int l_residual(ctx *x, float *out, const float *a, const float *b, size_t n) {
    char *err = x->err;
    size_t errlen = x->errlen;
    residual_k<<<nblocks(n, BS), BS, 0, x->st>>>(out, a, b, n);
    CKL();
    return 0;
}

/* red: RED_BLOCKS + 2 doubles; the mean loss ends up in red[RED_BLOCKS] */
static int l_crossentropy_forward(ctx *x, float *logits, float *losses, const int *targets, int N, int V,
                                  double *red) {
    char *err = x->err;
    size_t errlen = x->errlen;
    int bs = V >= 4096 ? 1024 : V >= 1024 ? 512 : 256;
    crossentropy_forward_k<<<N, bs, 0, x->st>>>(logits, losses, targets, V);
    CKL();
    sum_partial_k<<<RED_BLOCKS, RED_THREADS, 0, x->st>>>(red, losses, (size_t)N, 0);
    CKL();
    sum_final_k<<<1, RED_BLOCKS, 0, x->st>>>(red, 0, 0.0, 1.0 / N);
    CKL();
    return 0;
}

static int l_crossentropy_backward(ctx *x, float *probs, const int *targets, int N, int V) {
    char *err = x->err;
    size_t errlen = x->errlen;
    crossentropy_backward_k<<<nblocks((size_t)N * V, BS), BS, 0, x->st>>>(probs, targets, N, V);
    CKL();
    return 0;
}

/* norm in red[RED_BLOCKS], coefficient in red[RED_BLOCKS+1] */
static int l_clip(ctx *x, float *g, size_t n, double max_norm, double *red) {
    char *err = x->err;
    size_t errlen = x->errlen;
    sum_partial_k<<<RED_BLOCKS, RED_THREADS, 0, x->st>>>(red, g, n, 1);
    CKL();
    sum_final_k<<<1, RED_BLOCKS, 0, x->st>>>(red, 1, max_norm, 1.0);
    CKL();
    if (max_norm > 0) {
        clip_scale_k<<<nblocks(n, BS), BS, 0, x->st>>>(g, n, red);
        CKL();
    }
    return 0;
}

/* AdamW over tensors, one launch per run of consecutive tensors with the same decay */
static int l_adamw(ctx *x, const model_tensor *tensors, int ntensors, float *p, const float *g, float *m, float *v,
                   long t, double lr, double beta1, double beta2, double eps, double weight_decay) {
    char *err = x->err;
    size_t errlen = x->errlen;
    double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    float step_size = (float)(lr / bc1), bc2s = (float)sqrt(bc2);
    float b1 = (float)beta1, b2 = (float)beta2, e = (float)eps;
    for (int k = 0; k < ntensors;) {
        int dec = tensors[k].ndim >= 2, j = k + 1;
        while (j < ntensors && (tensors[j].ndim >= 2) == dec) j++;
        size_t off = tensors[k].offset, n = tensors[j - 1].offset + tensors[j - 1].numel - off;
        float decay = dec ? (float)(1.0 - lr * weight_decay) : 1.0f;
        adamw_k<<<nblocks(n, BS), BS, 0, x->st>>>(p + off, g + off, m + off, v + off, n, b1, b2, e, step_size, bc2s,
                                                  decay);
        CKL();
        k = j;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* the model                                                                                   */

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3;
} layer_acts;

struct gpt_cuda {
    gpt_config c;
    int B, T, tf32;
    size_t numel;
    model_tensor *tensors;
    int ntensors;
    cudaStream_t st;
    cublasHandle_t h;
    float *params, *grads, *m, *v;
    gpt_params p, g;  /* the device parameters and gradients by role (gpt_params_bind) */
    layer_acts *a;
    float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
    float *dres, *dln, *datty, *dqkv, *dfch;
    float *q, *k, *vv, *y, *dq, *dk, *dv, *dp;
    int *dtok;        /* inputs N | targets N | order N | uniq N | ustart N+1 */
    int *htok;        /* pinned staging of the same */
    int *slot, *cnt;  /* host: V (token -> bucket+1), N */
    int nuniq, have_targets;
    double *red, *hred; /* device reduction scratch, pinned host copy of the results */
    float *arena;
};

extern "C" size_t gpt_cuda_numel(const gpt_cuda *g) { return g ? g->numel : 0; }

extern "C" void gpt_cuda_free(gpt_cuda *g) {
    if (!g) return;
    if (g->st) cudaStreamSynchronize(g->st);
    if (g->h) cublasDestroy(g->h);
    if (g->st) cudaStreamDestroy(g->st);
    cudaFree(g->arena);
    cudaFree(g->params);
    cudaFree(g->dtok);
    cudaFree(g->red);
    if (g->htok) cudaFreeHost(g->htok);
    if (g->hred) cudaFreeHost(g->hred);
    free(g->slot);
    free(g->cnt);
    free(g->p.h);
    free(g->g.h);
    free(g->a);
    free(g->tensors);
    free(g);
    cudaGetLastError();
}

static int set_math(cublasHandle_t h, int tf32, char *err, size_t errlen) {
    CKB(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    return 0;
}

static int create_inner(gpt_cuda *g, char *err, size_t errlen) {
    const gpt_config *c = &g->c;
    int B = g->B, T = g->T, L = c->layers;
    size_t N = (size_t)B * T, C = (size_t)c->dim, NH = (size_t)c->heads, V = (size_t)c->vocab;
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
    /* activations */
    size_t per_layer = N * C * 6 + N * 3 * C + B * NH * T * T + N * 4 * C * 2 + N * 4;
    size_t total = per_layer * L + N * C * 2 + N * 2 + N * V + N + N * C * 3 + N * 3 * C + N * 4 * C +
                   N * C * 7 + (size_t)B * NH * T * T;
    total += (size_t)(20 * L + 40) * 64; /* every sub-buffer rounded to 64 floats (256 bytes) */
    CK(cudaMalloc((void **)&g->arena, total * sizeof(float)));
    CK(cudaMemsetAsync(g->arena, 0, total * sizeof(float), g->st));
    float *cur = g->arena;
#define TAKE(n) (cur += (((size_t)(n)) + 63) / 64 * 64, cur - (((size_t)(n)) + 63) / 64 * 64)
    for (int l = 0; l < L; l++) {
        layer_acts *a = &g->a[l];
        a->ln1 = TAKE(N * C); a->ln1_mean = TAKE(N); a->ln1_rstd = TAKE(N);
        a->qkv = TAKE(N * 3 * C);
        a->att = TAKE(B * NH * T * T);
        a->atty = TAKE(N * C);
        a->res2 = TAKE(N * C);
        a->ln2 = TAKE(N * C); a->ln2_mean = TAKE(N); a->ln2_rstd = TAKE(N);
        a->fch = TAKE(N * 4 * C); a->fch_gelu = TAKE(N * 4 * C);
        a->res3 = TAKE(N * C);
    }
    g->encoded = TAKE(N * C);
    g->lnf = TAKE(N * C); g->lnf_mean = TAKE(N); g->lnf_rstd = TAKE(N);
    g->logits = TAKE(N * V);
    g->losses = TAKE(N);
    g->dres = TAKE(N * C);
    g->dln = TAKE(N * C);
    g->datty = TAKE(N * C);
    g->dqkv = TAKE(N * 3 * C);
    g->dfch = TAKE(N * 4 * C);
    g->q = TAKE(N * C); g->k = TAKE(N * C); g->vv = TAKE(N * C); g->y = TAKE(N * C);
    g->dq = TAKE(N * C); g->dk = TAKE(N * C); g->dv = TAKE(N * C);
    g->dp = TAKE(B * NH * T * T);
#undef TAKE
    if ((size_t)(cur - g->arena) > total) {
        err_set(err, errlen, "gpt_cuda: arena overflow (internal error)");
        return -1;
    }
    CK(cudaMalloc((void **)&g->dtok, (5 * N + 1) * sizeof(int)));
    CK(cudaMallocHost((void **)&g->htok, (5 * N + 1) * sizeof(int)));
    CK(cudaMalloc((void **)&g->red, (RED_BLOCKS + 2) * sizeof(double)));
    CK(cudaMallocHost((void **)&g->hred, 2 * sizeof(double)));
    g->slot = (int *)calloc(V, sizeof(int));
    g->cnt = (int *)calloc(N + 1, sizeof(int));
    if (!g->slot || !g->cnt) { err_set(err, errlen, "gpt_cuda: out of memory"); return -1; }
    gpt_params_bind(g->tensors, g->ntensors, g->params, &g->p);
    gpt_params_bind(g->tensors, g->ntensors, g->grads, &g->g);
    CK(cudaStreamSynchronize(g->st));
    return 0;
}

extern "C" gpt_cuda *gpt_cuda_create(const gpt_config *c, int B, int T, int tf32, char *err, size_t errlen) {
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
    if (!g) { err_set(err, errlen, "gpt cuda: out of memory"); return NULL; }
    g->c = *c;
    g->B = B;
    g->T = T;
    g->tf32 = tf32;
    if (gpt_layout(c, &g->tensors, &g->ntensors, &g->numel, err, errlen)) { free(g); return NULL; }
    g->p.h = (gpt_layer_params *)calloc((size_t)c->layers, sizeof(gpt_layer_params));
    g->g.h = (gpt_layer_params *)calloc((size_t)c->layers, sizeof(gpt_layer_params));
    g->a = (layer_acts *)calloc((size_t)c->layers, sizeof(layer_acts));
    if (!g->p.h || !g->g.h || !g->a) {
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

static int copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st, int wait, char *err,
                size_t errlen) {
    CK(cudaMemcpyAsync(dst, src, bytes, kind, st));
    if (wait) CK(cudaStreamSynchronize(st));
    return 0;
}

extern "C" int gpt_cuda_set_params(gpt_cuda *g, const float *host, size_t off, size_t n, char *err, size_t errlen) {
    if (off > g->numel || n > g->numel - off) {
        err_set(err, errlen, "gpt cuda: params range [%zu, %zu) outside [0, %zu)", off, off + n, g->numel);
        return -1;
    }
    return copy(g->params + off, host + off, n * sizeof(float), cudaMemcpyHostToDevice, g->st, 0, err, errlen);
}

extern "C" int gpt_cuda_get_params(gpt_cuda *g, float *host, char *err, size_t errlen) {
    return copy(host, g->params, g->numel * sizeof(float), cudaMemcpyDeviceToHost, g->st, 1, err, errlen);
}

extern "C" int gpt_cuda_get_grads(gpt_cuda *g, float *host, char *err, size_t errlen) {
    return copy(host, g->grads, g->numel * sizeof(float), cudaMemcpyDeviceToHost, g->st, 1, err, errlen);
}

extern "C" int gpt_cuda_get_logits(gpt_cuda *g, float *host, char *err, size_t errlen) {
    size_t n = (size_t)g->B * g->T * g->c.vocab;
    return copy(host, g->logits, n * sizeof(float), cudaMemcpyDeviceToHost, g->st, 1, err, errlen);
}

extern "C" int gpt_cuda_set_moments(gpt_cuda *g, const float *m, const float *v, char *err, size_t errlen) {
    size_t b = g->numel * sizeof(float);
    if (m && copy(g->m, m, b, cudaMemcpyHostToDevice, g->st, 0, err, errlen)) return -1;
    if (v && copy(g->v, v, b, cudaMemcpyHostToDevice, g->st, 0, err, errlen)) return -1;
    CK(cudaStreamSynchronize(g->st));
    return 0;
}

extern "C" int gpt_cuda_get_moments(gpt_cuda *g, float *m, float *v, char *err, size_t errlen) {
    size_t b = g->numel * sizeof(float);
    if (m && copy(m, g->m, b, cudaMemcpyDeviceToHost, g->st, 0, err, errlen)) return -1;
    if (v && copy(v, g->v, b, cudaMemcpyDeviceToHost, g->st, 0, err, errlen)) return -1;
    CK(cudaStreamSynchronize(g->st));
    return 0;
}

extern "C" int gpt_cuda_sync(gpt_cuda *g, char *err, size_t errlen) {
    CK(cudaStreamSynchronize(g->st));
    return 0;
}

/* stage inputs | targets | order | uniq | ustart: the positions of each distinct input token in
 * increasing order (for the deterministic embedding scatter). Returns the distinct token count. */
static int bucket_tokens(int *h, const int *inputs, const int *targets, int N, int *slot, int *cnt) {
    int *in = h, *tg = h + N, *order = h + 2 * N, *uniq = h + 3 * N, *ustart = h + 4 * N;
    memcpy(in, inputs, (size_t)N * sizeof(int));
    if (targets) memcpy(tg, targets, (size_t)N * sizeof(int));
    else memset(tg, 0, (size_t)N * sizeof(int));
    int U = 0;
    for (int n = 0; n < N; n++) {
        int tok = in[n];
        if (!slot[tok]) { slot[tok] = ++U; uniq[U - 1] = tok; cnt[U - 1] = 0; }
        cnt[slot[tok] - 1]++;
    }
    ustart[0] = 0;
    for (int u = 0; u < U; u++) ustart[u + 1] = ustart[u] + cnt[u];
    for (int u = 0; u < U; u++) cnt[u] = ustart[u];
    for (int n = 0; n < N; n++) order[cnt[slot[in[n]] - 1]++] = n;
    for (int u = 0; u < U; u++) slot[uniq[u]] = 0;
    return U;
}

extern "C" int gpt_cuda_forward(gpt_cuda *g, const int *inputs, const int *targets, float *loss, char *err,
                                size_t errlen) {
    int B = g->B, T = g->T, C = g->c.dim, NH = g->c.heads, V = g->c.vocab, L = g->c.layers, N = B * T;
    for (int n = 0; n < N; n++)
        if (inputs[n] < 0 || inputs[n] >= V || (targets && (targets[n] < 0 || targets[n] >= V))) {
            err_set(err, errlen, "gpt cuda: token id out of range at position %d", n);
            return -1;
        }
    ctx x = {g->st, g->h, err, errlen};
    /* the staging buffer may still be read by the copy of the previous batch */
    CK(cudaStreamSynchronize(g->st));
    g->nuniq = bucket_tokens(g->htok, inputs, targets, N, g->slot, g->cnt);
    g->have_targets = targets != NULL;
    CK(cudaMemcpyAsync(g->dtok, g->htok, (5 * (size_t)N + 1) * sizeof(int), cudaMemcpyHostToDevice, g->st));
    const int *din = g->dtok, *dtg = g->dtok + N;
    if (l_encoder_forward(&x, g->encoded, din, g->p.wte, g->p.wpe, B, T, C)) return -1;
    const float *xin = g->encoded;
    for (int l = 0; l < L; l++) {
        gpt_layer_params *p = &g->p.h[l];
        layer_acts *a = &g->a[l];
        if (l_layernorm_forward(&x, a->ln1, a->ln1_mean, a->ln1_rstd, xin, p->ln1w, p->ln1b, N, C) ||
            l_matmul_forward(&x, a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C) ||
            l_attention_forward(&x, a->atty, a->att, a->qkv, g->q, g->k, g->vv, g->y, B, T, C, NH) ||
            l_matmul_forward(&x, a->res2, a->atty, p->projw, p->projb, N, C, C) ||
            l_residual(&x, a->res2, a->res2, xin, (size_t)N * C) ||
            l_layernorm_forward(&x, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C) ||
            l_matmul_forward(&x, a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C) ||
            l_gelu_forward(&x, a->fch_gelu, a->fch, (size_t)N * 4 * C) ||
            l_matmul_forward(&x, a->res3, a->fch_gelu, p->fcprojw, p->fcprojb, N, 4 * C, C) ||
            l_residual(&x, a->res3, a->res3, a->res2, (size_t)N * C))
            return -1;
        xin = a->res3;
    }
    if (l_layernorm_forward(&x, g->lnf, g->lnf_mean, g->lnf_rstd, xin, g->p.lnfw, g->p.lnfb, N, C)) return -1;
    CKB(mm(g->h, 0, 1, N, V, C, 1.0f, g->lnf, C, g->p.wte, C, 0.0f, g->logits, V));
    if (!targets) {
        if (loss) *loss = 0.0f;
        CK(cudaStreamSynchronize(g->st));
        return 0;
    }
    if (l_crossentropy_forward(&x, g->logits, g->losses, dtg, N, V, g->red)) return -1;
    CK(cudaMemcpyAsync(g->hred, g->red + RED_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, g->st));
    CK(cudaStreamSynchronize(g->st));
    if (loss) *loss = (float)g->hred[0];
    return 0;
}

extern "C" int gpt_cuda_backward(gpt_cuda *g, char *err, size_t errlen) {
    int B = g->B, T = g->T, C = g->c.dim, NH = g->c.heads, V = g->c.vocab, L = g->c.layers, N = B * T;
    if (!g->have_targets) {
        err_set(err, errlen, "gpt cuda: backward needs a forward with targets");
        return -1;
    }
    ctx x = {g->st, g->h, err, errlen};
    const int *dtg = g->dtok + N, *order = g->dtok + 2 * N, *uniq = g->dtok + 3 * N, *ustart = g->dtok + 4 * N;
    if (l_crossentropy_backward(&x, g->logits, dtg, N, V)) return -1;
    float *dlogits = g->logits;
    CKB(mm(g->h, 0, 0, N, C, V, 1.0f, dlogits, V, g->p.wte, C, 0.0f, g->dln, C));
    CKB(mm(g->h, 1, 0, V, C, N, 1.0f, dlogits, V, g->lnf, C, 0.0f, g->g.wte, C));
    const float *xlast = L > 0 ? g->a[L - 1].res3 : g->encoded;
    if (l_layernorm_backward(&x, g->dres, g->g.lnfw, g->g.lnfb, g->dln, xlast, g->p.lnfw, g->lnf_mean, g->lnf_rstd, N, C,
                             0))
        return -1;
    for (int l = L - 1; l >= 0; l--) {
        gpt_layer_params *p = &g->p.h[l], *gg = &g->g.h[l];
        layer_acts *a = &g->a[l];
        const float *xin = l > 0 ? g->a[l - 1].res3 : g->encoded;
        if (l_matmul_backward(&x, g->dfch, gg->fcprojw, gg->fcprojb, g->dres, a->fch_gelu, p->fcprojw, N, 4 * C, C) ||
            l_gelu_backward(&x, g->dfch, a->fch, g->dfch, (size_t)N * 4 * C) ||
            l_matmul_backward(&x, g->dln, gg->fcw, gg->fcb, g->dfch, a->ln2, p->fcw, N, C, 4 * C) ||
            l_layernorm_backward(&x, g->dres, gg->ln2w, gg->ln2b, g->dln, a->res2, p->ln2w, a->ln2_mean, a->ln2_rstd,
                                 N, C, 1) ||
            l_matmul_backward(&x, g->datty, gg->projw, gg->projb, g->dres, a->atty, p->projw, N, C, C) ||
            l_attention_backward(&x, g->dqkv, g->datty, a->qkv, a->att, g->q, g->k, g->vv, g->y, g->dq, g->dk, g->dv,
                                 g->dp, B, T, C, NH) ||
            l_matmul_backward(&x, g->dln, gg->qkvw, gg->qkvb, g->dqkv, a->ln1, p->qkvw, N, C, 3 * C) ||
            l_layernorm_backward(&x, g->dres, gg->ln1w, gg->ln1b, g->dln, xin, p->ln1w, a->ln1_mean, a->ln1_rstd, N,
                                 C, 1))
            return -1;
    }
    return l_encoder_backward(&x, g->g.wte, g->g.wpe, g->dres, order, uniq, ustart, g->nuniq, B, T, C, g->c.ctx);
}

extern "C" int gpt_cuda_clip(gpt_cuda *g, double max_norm, double *norm, char *err, size_t errlen) {
    ctx x = {g->st, g->h, err, errlen};
    if (l_clip(&x, g->grads, g->numel, max_norm, g->red)) return -1;
    CK(cudaMemcpyAsync(g->hred + 1, g->red + RED_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, g->st));
    if (norm) {
        CK(cudaStreamSynchronize(g->st));
        *norm = g->hred[1];
    }
    return 0;
}

extern "C" double gpt_cuda_last_norm(const gpt_cuda *g) { return g->hred[1]; }

extern "C" int gpt_cuda_adamw(gpt_cuda *g, long t, double lr, double beta1, double beta2, double eps,
                              double weight_decay, char *err, size_t errlen) {
    ctx x = {g->st, g->h, err, errlen};
    return l_adamw(&x, g->tensors, g->ntensors, g->params, g->grads, g->m, g->v, t, lr, beta1, beta2, eps,
                   weight_decay);
}

extern "C" float *gpt_cuda_params_device(gpt_cuda *g) { return g->params; }
extern "C" void *gpt_cuda_stream(gpt_cuda *g) { return (void *)g->st; }

extern "C" double gpt_cuda_sgemm_flops(int n, int tf32, int reps) {
    char err[256];
    size_t errlen = sizeof err;
    cublasHandle_t h = NULL;
    float *a = NULL;
    double best = 0;
    cudaEvent_t e0 = NULL, e1 = NULL;
    size_t nn = (size_t)n * n;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
    if (set_math(h, tf32, err, errlen) == 0 && cudaMalloc((void **)&a, 3 * nn * sizeof(float)) == cudaSuccess &&
        cudaMemset(a, 0, 3 * nn * sizeof(float)) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
        cudaEventCreate(&e1) == cudaSuccess) {
        for (int r = 0; r < reps + 1; r++) {
            cudaEventRecord(e0, 0);
            if (mm(h, 0, 0, n, n, n, 1.0f, a, n, a + nn, n, 0.0f, a + 2 * nn, n) != CUBLAS_STATUS_SUCCESS) break;
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            double f = 2.0 * n * (double)n * n / (ms * 1e-3);
            if (r > 0 && f > best) best = f; /* the first run warms up */
        }
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cublasDestroy(h);
    cudaGetLastError();
    return best;
}

/* ------------------------------------------------------------------------------------------- */
/* single kernels on host arrays (tests)                                                       */

/* a small pool of device buffers freed together */
typedef struct {
    void *p[16];
    int n;
    int fail;
} pool;

static void *dup_to_dev(pool *pl, const void *h, size_t bytes) {
    void *d = NULL;
    if (pl->fail || pl->n >= 16 || cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) {
        pl->fail = 1;
        return NULL;
    }
    pl->p[pl->n++] = d;
    if (h && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) pl->fail = 1;
    if (!h && cudaMemset(d, 0, bytes) != cudaSuccess) pl->fail = 1;
    return d;
}

static int back(pool *pl, void *h, const void *d, size_t bytes) {
    if (pl->fail) return -1;
    if (cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) pl->fail = 1;
    return pl->fail ? -1 : 0;
}

static int done(pool *pl, int rc, const char *what, const char *err) {
    cudaError_t e = cudaDeviceSynchronize();
    for (int i = 0; i < pl->n; i++) cudaFree(pl->p[i]);
    if (rc || pl->fail || e != cudaSuccess) {
        fprintf(stderr, "gpt_cuda_k_%s: %s\n", what, err && *err ? err : cudaGetErrorString(e ? e : cudaGetLastError()));
        return -1;
    }
    return 0;
}

static cublasHandle_t test_h; /* one handle for the single-kernel entry points (tests) */
static cublasHandle_t test_handle(int tf32) {
    cublasHandle_t &h = test_h;
    if (!h && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return NULL;
    cublasSetStream(h, 0);
    cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    return h;
}

#define KBEGIN(tf32)                                                                               \
    char kerr[512] = "";                                                                           \
    pool pl;                                                                                       \
    memset(&pl, 0, sizeof pl);                                                                     \
    ctx x = {0, test_handle(tf32), kerr, sizeof kerr};                                             \
    if (!x.h) { fprintf(stderr, "gpt_cuda_k: cublasCreate failed\n"); return -1; }                  \
    int rc = 0
#define F(n) ((size_t)(n) * sizeof(float))
#define I(n) ((size_t)(n) * sizeof(int))

extern "C" int gpt_cuda_k_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B,
                                          int T, int C, int V, int maxT) {
    KBEGIN(0);
    size_t N = (size_t)B * T;
    float *dout = (float *)dup_to_dev(&pl, NULL, F(N * C));
    int *di = (int *)dup_to_dev(&pl, inp, I(N));
    float *dwte = (float *)dup_to_dev(&pl, wte, F((size_t)V * C)), *dwpe = (float *)dup_to_dev(&pl, wpe, F((size_t)maxT * C));
    if (!pl.fail) rc = l_encoder_forward(&x, dout, di, dwte, dwpe, B, T, C);
    if (!rc) rc = back(&pl, out, dout, F(N * C));
    return done(&pl, rc, "encoder_forward", kerr);
}

extern "C" int gpt_cuda_k_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T,
                                           int C, int V, int maxT) {
    KBEGIN(0);
    int N = B * T;
    int *h = (int *)malloc(I(5 * (size_t)N + 1)), *slot = (int *)calloc((size_t)V, sizeof(int)),
        *cnt = (int *)calloc((size_t)N + 1, sizeof(int));
    if (!h || !slot || !cnt) { free(h); free(slot); free(cnt); return -1; }
    int U = bucket_tokens(h, inp, NULL, N, slot, cnt);
    int *dt = (int *)dup_to_dev(&pl, h, I(5 * (size_t)N + 1));
    free(h); free(slot); free(cnt);
    float *ddw = (float *)dup_to_dev(&pl, dwte, F((size_t)V * C)), *ddp = (float *)dup_to_dev(&pl, NULL, F((size_t)maxT * C));
    float *dd = (float *)dup_to_dev(&pl, dout, F((size_t)N * C));
    if (!pl.fail) rc = l_encoder_backward(&x, ddw, ddp, dd, dt + 2 * N, dt + 3 * N, dt + 4 * N, U, B, T, C, maxT);
    if (!rc) rc = back(&pl, dwte, ddw, F((size_t)V * C));
    if (!rc) rc = back(&pl, dwpe, ddp, F((size_t)maxT * C));
    return done(&pl, rc, "encoder_backward", kerr);
}

extern "C" int gpt_cuda_k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                            const float *b, int N, int C) {
    KBEGIN(0);
    float *d_o = (float *)dup_to_dev(&pl, NULL, F((size_t)N * C)), *dm = (float *)dup_to_dev(&pl, NULL, F(N)),
          *dr = (float *)dup_to_dev(&pl, NULL, F(N)), *di = (float *)dup_to_dev(&pl, inp, F((size_t)N * C)),
          *dw = (float *)dup_to_dev(&pl, w, F(C)), *db = (float *)dup_to_dev(&pl, b, F(C));
    if (!pl.fail) rc = l_layernorm_forward(&x, d_o, dm, dr, di, dw, db, N, C);
    if (!rc) rc = back(&pl, out, d_o, F((size_t)N * C)) || back(&pl, mean, dm, F(N)) || back(&pl, rstd, dr, F(N));
    return done(&pl, rc, "layernorm_forward", kerr);
}

extern "C" int gpt_cuda_k_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                             const float *w, const float *mean, const float *rstd, int N, int C,
                                             int accumulate) {
    KBEGIN(0);
    float *ddi = (float *)dup_to_dev(&pl, dinp, F((size_t)N * C)), *ddw = (float *)dup_to_dev(&pl, NULL, F(C)),
          *ddb = (float *)dup_to_dev(&pl, NULL, F(C)), *ddo = (float *)dup_to_dev(&pl, dout, F((size_t)N * C)),
          *di = (float *)dup_to_dev(&pl, inp, F((size_t)N * C)), *dwt = (float *)dup_to_dev(&pl, w, F(C)),
          *dm = (float *)dup_to_dev(&pl, mean, F(N)), *dr = (float *)dup_to_dev(&pl, rstd, F(N));
    if (!pl.fail) rc = l_layernorm_backward(&x, ddi, ddw, ddb, ddo, di, dwt, dm, dr, N, C, accumulate);
    if (!rc) rc = back(&pl, dinp, ddi, F((size_t)N * C)) || back(&pl, dw, ddw, F(C)) || back(&pl, db, ddb, F(C));
    return done(&pl, rc, "layernorm_backward", kerr);
}

extern "C" int gpt_cuda_k_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                                         int C, int OC, int tf32) {
    KBEGIN(tf32);
    float *d_o = (float *)dup_to_dev(&pl, NULL, F((size_t)N * OC)), *di = (float *)dup_to_dev(&pl, inp, F((size_t)N * C)),
          *dw = (float *)dup_to_dev(&pl, w, F((size_t)OC * C)), *db = (float *)dup_to_dev(&pl, bias, F(OC));
    if (!pl.fail) rc = l_matmul_forward(&x, d_o, di, dw, db, N, C, OC);
    if (!rc) rc = back(&pl, out, d_o, F((size_t)N * OC));
    return done(&pl, rc, "matmul_forward", kerr);
}

extern "C" int gpt_cuda_k_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                          const float *w, int N, int C, int OC, int tf32) {
    KBEGIN(tf32);
    float *ddi = (float *)dup_to_dev(&pl, NULL, F((size_t)N * C)), *ddw = (float *)dup_to_dev(&pl, NULL, F((size_t)OC * C)),
          *ddb = (float *)dup_to_dev(&pl, NULL, F(OC)), *ddo = (float *)dup_to_dev(&pl, dout, F((size_t)N * OC)),
          *di = (float *)dup_to_dev(&pl, inp, F((size_t)N * C)), *dwt = (float *)dup_to_dev(&pl, w, F((size_t)OC * C));
    if (!pl.fail) rc = l_matmul_backward(&x, ddi, ddw, ddb, ddo, di, dwt, N, C, OC);
    if (!rc) rc = back(&pl, dinp, ddi, F((size_t)N * C)) || back(&pl, dw, ddw, F((size_t)OC * C)) ||
                  back(&pl, dbias, ddb, F(OC));
    return done(&pl, rc, "matmul_backward", kerr);
}

extern "C" int gpt_cuda_k_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                                            int tf32) {
    KBEGIN(tf32);
    size_t N = (size_t)B * T, A = (size_t)B * NH * T * T;
    float *d_o = (float *)dup_to_dev(&pl, NULL, F(N * C)), *da = (float *)dup_to_dev(&pl, NULL, F(A)),
          *dq = (float *)dup_to_dev(&pl, qkv, F(N * 3 * C)), *s = (float *)dup_to_dev(&pl, NULL, F(4 * N * C));
    if (!pl.fail) rc = l_attention_forward(&x, d_o, da, dq, s, s + N * C, s + 2 * N * C, s + 3 * N * C, B, T, C, NH);
    if (!rc) rc = back(&pl, out, d_o, F(N * C)) || back(&pl, att, da, F(A));
    return done(&pl, rc, "attention_forward", kerr);
}

extern "C" int gpt_cuda_k_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                                             int B, int T, int C, int NH, int tf32) {
    KBEGIN(tf32);
    size_t N = (size_t)B * T, A = (size_t)B * NH * T * T, NC = N * C;
    float *ddq = (float *)dup_to_dev(&pl, NULL, F(N * 3 * C)), *ddo = (float *)dup_to_dev(&pl, dout, F(NC)),
          *dq = (float *)dup_to_dev(&pl, qkv, F(N * 3 * C)), *da = (float *)dup_to_dev(&pl, att, F(A)),
          *s = (float *)dup_to_dev(&pl, NULL, F(7 * NC)), *dp = (float *)dup_to_dev(&pl, NULL, F(A));
    if (!pl.fail)
        rc = l_attention_backward(&x, ddq, ddo, dq, da, s, s + NC, s + 2 * NC, s + 3 * NC, s + 4 * NC, s + 5 * NC,
                                  s + 6 * NC, dp, B, T, C, NH);
    if (!rc) rc = back(&pl, dqkv, ddq, F(N * 3 * C));
    return done(&pl, rc, "attention_backward", kerr);
}

extern "C" int gpt_cuda_k_softmax_causal(float *s, int BH, int T) {
    KBEGIN(0);
    size_t n = (size_t)BH * T * T;
    float *d = (float *)dup_to_dev(&pl, s, F(n));
    if (!pl.fail) {
        softmax_causal_k<<<nblocks((size_t)BH * T, ROWS_PER_BLOCK), BS>>>(d, BH * T, T);
        if (cudaGetLastError() != cudaSuccess) rc = -1;
    }
    if (!rc) rc = back(&pl, s, d, F(n));
    return done(&pl, rc, "softmax_causal", kerr);
}

extern "C" int gpt_cuda_k_gelu_forward(float *out, const float *inp, size_t n) {
    KBEGIN(0);
    float *d_o = (float *)dup_to_dev(&pl, NULL, F(n)), *di = (float *)dup_to_dev(&pl, inp, F(n));
    if (!pl.fail) rc = l_gelu_forward(&x, d_o, di, n);
    if (!rc) rc = back(&pl, out, d_o, F(n));
    return done(&pl, rc, "gelu_forward", kerr);
}

extern "C" int gpt_cuda_k_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    KBEGIN(0);
    float *ddi = (float *)dup_to_dev(&pl, NULL, F(n)), *di = (float *)dup_to_dev(&pl, inp, F(n)),
          *ddo = (float *)dup_to_dev(&pl, dout, F(n));
    if (!pl.fail) rc = l_gelu_backward(&x, ddi, di, ddo, n);
    if (!rc) rc = back(&pl, dinp, ddi, F(n));
    return done(&pl, rc, "gelu_backward", kerr);
}

extern "C" int gpt_cuda_k_residual_forward(float *out, const float *a, const float *b, size_t n) {
    KBEGIN(0);
    float *d_o = (float *)dup_to_dev(&pl, NULL, F(n)), *da = (float *)dup_to_dev(&pl, a, F(n)),
          *db = (float *)dup_to_dev(&pl, b, F(n));
    if (!pl.fail) rc = l_residual(&x, d_o, da, db, n);
    if (!rc) rc = back(&pl, out, d_o, F(n));
    return done(&pl, rc, "residual_forward", kerr);
}

extern "C" int gpt_cuda_k_crossentropy_forward(float *logits, float *losses, const int *targets, int N, int V,
                                               float *mean) {
    KBEGIN(0);
    float *dl = (float *)dup_to_dev(&pl, logits, F((size_t)N * V)), *dls = (float *)dup_to_dev(&pl, NULL, F(N));
    int *dt = (int *)dup_to_dev(&pl, targets, I(N));
    double *red = (double *)dup_to_dev(&pl, NULL, (RED_BLOCKS + 2) * sizeof(double));
    double m = 0;
    if (!pl.fail) rc = l_crossentropy_forward(&x, dl, dls, dt, N, V, red);
    if (!rc) rc = back(&pl, logits, dl, F((size_t)N * V)) || back(&pl, losses, dls, F(N)) ||
                  back(&pl, &m, red + RED_BLOCKS, sizeof(double));
    if (mean) *mean = (float)m;
    return done(&pl, rc, "crossentropy_forward", kerr);
}

extern "C" int gpt_cuda_k_crossentropy_backward(float *probs, const int *targets, int N, int V) {
    KBEGIN(0);
    float *dp = (float *)dup_to_dev(&pl, probs, F((size_t)N * V));
    int *dt = (int *)dup_to_dev(&pl, targets, I(N));
    if (!pl.fail) rc = l_crossentropy_backward(&x, dp, dt, N, V);
    if (!rc) rc = back(&pl, probs, dp, F((size_t)N * V));
    return done(&pl, rc, "crossentropy_backward", kerr);
}

extern "C" int gpt_cuda_k_clip(float *grads, size_t numel, double max_norm, double *norm) {
    KBEGIN(0);
    float *dg = (float *)dup_to_dev(&pl, grads, F(numel));
    double *red = (double *)dup_to_dev(&pl, NULL, (RED_BLOCKS + 2) * sizeof(double));
    double nrm = 0;
    if (!pl.fail) rc = l_clip(&x, dg, numel, max_norm, red);
    if (!rc) rc = back(&pl, grads, dg, F(numel)) || back(&pl, &nrm, red + RED_BLOCKS, sizeof(double));
    if (norm) *norm = nrm;
    return done(&pl, rc, "clip", kerr);
}

extern "C" int gpt_cuda_k_adamw(const model_tensor *tensors, int ntensors, float *params, const float *grads,
                                float *m, float *v, long t, double lr, double beta1, double beta2, double eps,
                                double weight_decay) {
    KBEGIN(0);
    size_t n = tensors[ntensors - 1].offset + tensors[ntensors - 1].numel;
    float *dp = (float *)dup_to_dev(&pl, params, F(n)), *dg = (float *)dup_to_dev(&pl, grads, F(n)),
          *dm = (float *)dup_to_dev(&pl, m, F(n)), *dv = (float *)dup_to_dev(&pl, v, F(n));
    if (!pl.fail) rc = l_adamw(&x, tensors, ntensors, dp, dg, dm, dv, t, lr, beta1, beta2, eps, weight_decay);
    if (!rc) rc = back(&pl, params, dp, F(n)) || back(&pl, m, dm, F(n)) || back(&pl, v, dv, F(n));
    return done(&pl, rc, "adamw", kerr);
}
