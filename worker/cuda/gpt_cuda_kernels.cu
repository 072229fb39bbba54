/* gpt_cuda_kernels.cu: the kernels of the CUDA GPT and one launch function per layer (l_*,
 * gpt_cuda_internal.h), laid out like worker/gpt/gpt_model.c so the two read side by side. cuBLAS does
 * every product (row-major products mapped onto column-major cuBLAS by swapping the operands);
 * attention goes through q/k/v permuted to (B, NH, T, hs) so that each product is one strided-batched
 * sgemm over the B*NH heads.
 *
 * No atomics anywhere: column sums, norms and the loss use fixed reduction trees, and the
 * token-embedding scatter is a per-token sum in position order (the positions of each token are
 * bucketed on the host when the batch is uploaded), so results are reproducible bit for bit. */
#include "gpt_cuda_internal.h"

#include <math.h>
#include <string.h>

#include "layer_rows.cuh"

/* ------------------------------------------------------------------------------------------- */
/* kernels                                                                                     */

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* block-wide sum / max (blockDim.x a multiple of 32, <= 1024); every thread gets the result */
__device__ float block_sum(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}
__device__ float block_max(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

__global__ void encoder_forward_k(float *out, const int *inp, const float *wte, const float *wpe, int N, int T, int C)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C), t = n % T;
    out[i] = wte[(size_t)inp[n] * C + c] + wpe[(size_t)t * C + c];
}

/* dwpe[t, c] = sum over b of dout[b, t, c] (b in order); rows t >= T are zero */
__global__ void encoder_backward_wpe_k(float *dwpe, const float *dout, int B, int T, int C, int maxT)
{
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
                                       const int *ustart, int U, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int u = blockIdx.y; u < U; u += gridDim.y) {
        float *w = dwte + (size_t)uniq[u] * C + c;
        float acc = *w;
        for (int k = ustart[u]; k < ustart[u + 1]; k++) acc += dout[(size_t)order[k] * C + c];
        *w = acc;
    }
}

__global__ void layernorm_backward_dx_k(float *dinp, const float *dout, const float *inp, const float *w,
                                        const float *mean, const float *rstd, int N, int C, int accumulate)
{
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

__global__ void bias_broadcast_k(float *out, const float *bias, int N, int OC)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)N * OC) out[i] = bias[i % OC];
}

/* qkv (B,T,3C) -> q, k, v (B,NH,T,hs) */
__global__ void permute_qkv_k(float *q, float *k, float *v, const float *qkv, int B, int T, int C, int NH)
{
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
__global__ void permute_bt_k(float *bt, float *bh, int B, int T, int C, int NH, int ld, int col0, int to_bt)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * C) return;
    int hs = C / NH;
    int d = (int)(i % hs);
    size_t r = i / hs;
    int t = (int)(r % T);
    r /= T;
    int h = (int)(r % NH), b = (int)(r / NH);
    float *p = bt + ((size_t)b * T + t) * ld + col0 + h * hs + d;
    if (to_bt)
        *p = bh[i];
    else
        bh[i] = *p;
}

/* rows of length T, row index % T = t: softmax over columns 0..t, zero above; one warp per row */
__global__ void softmax_causal_k(float *s, int rows, int T)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = row % T;
    float *x = s + (size_t)row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, x[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) {
        float e = expf(x[j] - mx);
        x[j] = e;
        sum += e;
    }
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += 32) x[j] = j <= t ? x[j] * inv : 0.0f;
}

/* dS = P * (dP - sum_j P dP) on columns 0..t, zero above; in place on dP */
__global__ void softmax_backward_k(float *dp, const float *p, int rows, int T)
{
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

__global__ void gelu_backward_k(float *dinp, const float *inp, const float *dout, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    dinp[i] = gelu_grad(inp[i]) * dout[i];
}

__global__ void residual_k(float *out, const float *a, const float *b, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

/* one block per row: logits -> probabilities in place, losses[n] = log(sum) - log(p_target) */
__global__ void crossentropy_forward_k(float *logits, float *losses, const int *targets, int V)
{
    __shared__ float sh[32];
    int n = blockIdx.x;
    float *x = logits + (size_t)n * V;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, x[i]);
    mx = block_max(mx, sh);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float e = expf(x[i] - mx);
        x[i] = e;
        s += e;
    }
    s = block_sum(s, sh); /* its barriers make every e above visible to the block */
    if (threadIdx.x == 0) losses[n] = logf(s) - logf(x[targets[n]]);
    __syncthreads();
    float inv = 1.0f / s;
    for (int i = threadIdx.x; i < V; i += blockDim.x) x[i] *= inv;
}

/* probs -> (p - onehot) / N in place */
__global__ void crossentropy_backward_k(float *x, const int *targets, int N, int V)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * V) return;
    int n = (int)(i / V), c = (int)(i % V);
    float inv = 1.0f / N;
    float g = x[i] * inv;
    if (c == targets[n]) g -= inv;
    x[i] = g;
}

/* deterministic double sums: RED_BLOCKS partial sums (grid-stride, fixed tree), then one block */
__global__ void sum_partial_k(double *partial, const float *x, size_t n, int square)
{
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
__global__ void sum_final_k(double *red, int mode, double max_norm, double scale)
{
    __shared__ double sh[RED_BLOCKS];
    sh[threadIdx.x] = red[threadIdx.x];
    __syncthreads();
    for (int k = RED_BLOCKS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x) return;
    if (mode == 0) {
        red[RED_BLOCKS] = sh[0] * scale;
        return;
    }
    double norm = sqrt(sh[0]);
    red[RED_BLOCKS] = norm;
    double coef = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
    red[RED_BLOCKS + 1] = coef < 1.0 ? coef : 1.0;
}

__global__ void clip_scale_k(float *g, size_t n, const double *red)
{
    double coef = red[RED_BLOCKS + 1];
    if (coef >= 1.0) return;
    float c = (float)coef;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] *= c;
}

/* torch.optim.AdamW on [0, n), float math in the CPU's order (no contraction into FMAs) */
__global__ void adamw_k(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2, float e,
                        float step_size, float bc2s, float decay)
{
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

int l_encoder_forward(ctx *x, float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    size_t n = (size_t)B * T * C;
    encoder_forward_k<<<nblocks(n, BS), BS, 0, x->st>>>(out, inp, wte, wpe, B * T, T, C);
    CKL();
    return 0;
}

int bucket_tokens(int *h, const int *inputs, const int *targets, int N, int *slot, int *cnt)
{
    int *in = h, *tg = h + N, *order = h + 2 * N, *uniq = h + 3 * N, *ustart = h + 4 * N;
    memcpy(in, inputs, (size_t)N * sizeof(int));
    if (targets)
        memcpy(tg, targets, (size_t)N * sizeof(int));
    else
        memset(tg, 0, (size_t)N * sizeof(int));
    int U = 0;
    for (int n = 0; n < N; n++) {
        int tok = in[n];
        if (!slot[tok]) {
            slot[tok] = ++U;
            uniq[U - 1] = tok;
            cnt[U - 1] = 0;
        }
        cnt[slot[tok] - 1]++;
    }
    ustart[0] = 0;
    for (int u = 0; u < U; u++) ustart[u + 1] = ustart[u] + cnt[u];
    for (int u = 0; u < U; u++) cnt[u] = ustart[u];
    for (int n = 0; n < N; n++) order[cnt[slot[in[n]] - 1]++] = n;
    for (int u = 0; u < U; u++) slot[uniq[u]] = 0;
    return U;
}

int l_encoder_backward(ctx *x, float *dwte, float *dwpe, const float *dout, const int *order, const int *uniq,
                       const int *ustart, int U, int B, int T, int C, int maxT)
{
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

int l_layernorm_forward(ctx *x, float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                        int N, int C)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    layernorm_forward_k<<<nblocks((size_t)N, ROWS_PER_BLOCK), BS, 0, x->st>>>(out, NULL, mean, rstd, inp, w, b, N, C);
    CKL();
    return 0;
}

int l_layernorm_forward_bf16(ctx *x, __nv_bfloat16 *out16, float *mean, float *rstd, const float *inp, const float *w,
                             const float *b, int N, int C)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    layernorm_forward_k<<<nblocks((size_t)N, ROWS_PER_BLOCK), BS, 0, x->st>>>(NULL, (uint16_t *)out16, mean, rstd, inp,
                                                                              w, b, N, C);
    CKL();
    return 0;
}

/* db (C) = the column sums of d (N,C), or of d * GELU'(gelu_in) when gelu_in is not NULL; dw (C), when
 * inp is not NULL, LayerNorm's weight gradient; d16, when not NULL, what is summed in bf16. In up to
 * COLSUM_CHUNKS chunks of rows summed apart into x->part, then added in order (layer_rows.cuh); without
 * x->part in one chunk (a block per 32 columns walks every row). The chunk count depends on N only: the
 * sums are the same bytes on any GPU. */
static int colsum(ctx *x, float *db, float *dw, uint16_t *d16, const float *d, const float *gelu_in, const float *inp,
                  const float *mean, const float *rstd, int N, int C)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    int chunks = x->part ? (N + 31) / 32 : 1;
    if (chunks > COLSUM_CHUNKS) chunks = COLSUM_CHUNKS;
    if (chunks < 1) chunks = 1;
    int rpc = (N + chunks - 1) / chunks;
    float *pb = chunks > 1 ? x->part : db, *pw = chunks > 1 && dw ? x->part + (size_t)chunks * C : dw;
    colsum_k<<<dim3(nblocks((size_t)C, 32), chunks), dim3(32, 32), 0, x->st>>>(pb, pw, d16, d, gelu_in, inp, mean, rstd,
                                                                               N, C, rpc);
    CKL();
    if (chunks > 1) {
        colsum_final_k<<<nblocks((size_t)C, BS), BS, 0, x->st>>>(db, dw, pb, pw, chunks, C);
        CKL();
    }
    return 0;
}

int l_layernorm_backward(ctx *x, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                         const float *mean, const float *rstd, int N, int C, int accumulate)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    layernorm_backward_dx_k<<<nblocks((size_t)N, ROWS_PER_BLOCK), BS, 0, x->st>>>(dinp, dout, inp, w, mean, rstd, N, C,
                                                                                  accumulate);
    CKL();
    return colsum(x, db, dw, NULL, dout, NULL, inp, mean, rstd, N, C);
}

int l_matmul_forward(ctx *x, float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    bias_broadcast_k<<<nblocks((size_t)N * OC, BS), BS, 0, x->st>>>(out, bias, N, OC);
    CKL();
    CKB(mm(x->h, 0, 1, N, OC, C, 1.0f, inp, C, w, C, 1.0f, out, OC));
    return 0;
}

/* out (N,OC) = bias + res: the C of a product with beta = 1 that adds the residual too */
int l_bias_residual(ctx *x, float *out, const float *bias, const float *res, int N, int OC)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    bias_residual_k<<<nblocks((size_t)N * OC, BS), BS, 0, x->st>>>(out, bias, res, N, OC);
    CKL();
    return 0;
}

int l_bias_broadcast(ctx *x, float *out, const float *bias, int N, int OC)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    bias_broadcast_k<<<nblocks((size_t)N * OC, BS), BS, 0, x->st>>>(out, bias, N, OC);
    CKL();
    return 0;
}

/* dbias = the column sums of dout (N,OC), and dout16 = its bf16 copy, in one pass over it */
int l_colsum_bf16(ctx *x, float *dbias, __nv_bfloat16 *dout16, const float *dout, const float *gelu_in, int N, int OC)
{
    return colsum(x, dbias, NULL, (uint16_t *)dout16, dout, gelu_in, NULL, NULL, NULL, N, OC);
}

int l_matmul_backward(ctx *x, float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                      int N, int C, int OC)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    CKB(mm(x->h, 0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C));
    CKB(mm(x->h, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 0.0f, dw, C));
    return colsum(x, dbias, NULL, NULL, dout, NULL, NULL, NULL, NULL, N, OC);
}

/* scratch: q, k, v, y each B*T*C */
int l_attention_forward(ctx *x, float *out, float *att, const float *qkv, float *q, float *k, float *v, float *y, int B,
                        int T, int C, int NH)
{
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
int l_attention_backward(ctx *x, float *dqkv, const float *dout, const float *qkv, const float *att, float *q, float *k,
                         float *v, float *dy, float *dq, float *dk, float *dv, float *dp, int B, int T, int C, int NH)
{
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

int l_gelu_forward(ctx *x, float *out, const float *inp, size_t n)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    gelu_forward_k<<<nblocks(n, BS), BS, 0, x->st>>>(out, NULL, inp, n);
    CKL();
    return 0;
}

int l_gelu_forward_bf16(ctx *x, __nv_bfloat16 *out16, const float *inp, size_t n)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    gelu_forward_k<<<nblocks(n, BS), BS, 0, x->st>>>(NULL, (uint16_t *)out16, inp, n);
    CKL();
    return 0;
}

int l_gelu_backward(ctx *x, float *dinp, const float *inp, const float *dout, size_t n)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    gelu_backward_k<<<nblocks(n, BS), BS, 0, x->st>>>(dinp, inp, dout, n);
    CKL();
    return 0;
}

int l_residual(ctx *x, float *out, const float *a, const float *b, size_t n)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    residual_k<<<nblocks(n, BS), BS, 0, x->st>>>(out, a, b, n);
    CKL();
    return 0;
}

/* red: RED_BLOCKS + 2 doubles; the mean loss ends up in red[RED_BLOCKS] */
int l_crossentropy_forward(ctx *x, float *logits, float *losses, const int *targets, int N, int V, double *red)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    int bs = V >= 4096 ? 1024 : V >= 1024 ? 512 : 256;
    crossentropy_forward_k<<<N, bs, 0, x->st>>>(logits, losses, targets, V);
    CKL();
    return l_mean(x, losses, N, red);
}

/* red[RED_BLOCKS] = the mean of v[0..n), a deterministic double sum */
int l_mean(ctx *x, const float *v, int n, double *red)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    sum_partial_k<<<RED_BLOCKS, RED_THREADS, 0, x->st>>>(red, v, (size_t)n, 0);
    CKL();
    sum_final_k<<<1, RED_BLOCKS, 0, x->st>>>(red, 0, 0.0, 1.0 / n);
    CKL();
    return 0;
}

int l_crossentropy_backward(ctx *x, float *probs, const int *targets, int N, int V)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    crossentropy_backward_k<<<nblocks((size_t)N * V, BS), BS, 0, x->st>>>(probs, targets, N, V);
    CKL();
    return 0;
}

/* norm in red[RED_BLOCKS], coefficient in red[RED_BLOCKS+1] */
int l_clip(ctx *x, float *g, size_t n, double max_norm, double *red)
{
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
int l_adamw(ctx *x, const model_tensor *tensors, int ntensors, float *p, const float *g, float *m, float *v, long t,
            double lr, double beta1, double beta2, double eps, double weight_decay)
{
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
int l_softmax_causal(ctx *x, float *s, int rows, int T)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    softmax_causal_k<<<nblocks((size_t)rows, ROWS_PER_BLOCK), BS, 0, x->st>>>(s, rows, T);
    CKL();
    return 0;
}

int l_softmax_backward(ctx *x, float *dp, const float *p, int rows, int T)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    softmax_backward_k<<<nblocks((size_t)rows, ROWS_PER_BLOCK), BS, 0, x->st>>>(dp, p, rows, T);
    CKL();
    return 0;
}

int l_permute_bt(ctx *x, float *bt, float *bh, int B, int T, int C, int NH, int ld, int col0, int to_bt)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    permute_bt_k<<<nblocks((size_t)B * T * C, BS), BS, 0, x->st>>>(bt, bh, B, T, C, NH, ld, col0, to_bt);
    CKL();
    return 0;
}
