/* gpt_model.c: forward and backward of the GPT, AdamW and gradient clipping (its layout and
 * initialisation are model/gpt_layout.c).
 *
 * Style after llm.c: one forward/backward function per layer with the tensor shapes in the
 * signature. Matrix products go through cblas_sgemm; OpenBLAS itself runs single-threaded and we
 * split each product between OpenMP threads (one thread pool, no oversubscription). */
#include "base/clones.h"
#include "base/util.h"
#include "gpt.h"
#include "gpt_acts.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------------------------------- */
/* model                                                                                       */

struct gpt_model {
    gpt_config c;
    int B, T, nthreads;
    size_t numel;
    model_tensor *tensors;
    int ntensors;
    gpt_params p, g; /* the parameters and the gradients by role (gpt_params_bind) */
    gpt_acts a;      /* the activations (gpt_acts.h) */
    float *dpatt;    /* backward scratch of the attention: nthreads * T*T */
    const int *inputs, *targets;
    float *arena;
};

gpt_model *gpt_model_create(const gpt_config *c, int B, int T, int threads, char *err, size_t errlen)
{
    if (gpt_config_check(c, err, errlen)) return NULL;
    if (B < 1 || T < 1 || T > c->ctx) {
        err_set(err, errlen, "gpt: batch must be >= 1 and 1 <= seq <= ctx (%d), got batch %d seq %d", c->ctx, B, T);
        return NULL;
    }
    gpt_model *m = calloc(1, sizeof *m);
    if (!m) {
        err_set(err, errlen, "gpt: out of memory");
        return NULL;
    }
    m->c = *c;
    m->B = B;
    m->T = T;
    m->nthreads = threads > 0 ? threads : omp_get_num_procs();
    if (gpt_layout(c, &m->tensors, &m->ntensors, &m->numel, err, errlen)) {
        free(m);
        return NULL;
    }
    int L = c->layers;
    m->p.h = calloc((size_t)L, sizeof(gpt_layer_params));
    m->g.h = calloc((size_t)L, sizeof(gpt_layer_params));
    m->a.h = calloc((size_t)L, sizeof(gpt_layer_acts));
    /* every sub-buffer starts on 16 floats (64-byte alignment) */
    size_t T2 = (size_t)m->nthreads * T * T;
    size_t total = gpt_acts_size(c, B, T, 16) + gpt_arena_round(T2, 16);
    if (!m->p.h || !m->g.h || !m->a.h || posix_memalign((void **)&m->arena, 64, total * sizeof(float))) {
        err_set(err, errlen, "gpt: out of memory for activations (%zu MB)", total * 4 >> 20);
        gpt_model_free(m);
        return NULL;
    }
    memset(m->arena, 0, total * sizeof(float));
    float *cur = m->arena + gpt_acts_bind(c, B, T, 16, m->arena, &m->a);
    m->dpatt = gpt_arena_take(&cur, T2, 16);
    return m;
}

void gpt_model_free(gpt_model *m)
{
    if (!m) return;
    free(m->arena);
    free(m->p.h);
    free(m->g.h);
    free(m->a.h);
    free(m->tensors);
    free(m);
}

const float *gpt_model_logits(const gpt_model *m)
{
    return m->a.logits;
}
int gpt_model_threads(const gpt_model *m)
{
    return m->nthreads;
}

/* ------------------------------------------------------------------------------------------- */
/* parallel sgemm: C(MxN) = alpha op(A)(MxK) op(B)(KxN) + beta C, row-major, split over threads */

static void mm(int nt, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
               int ldb, float beta, float *C, int ldc)
{
    enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    if (nt <= 1 || (double)M * N * K < 2e6) {
        cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int splitm = M >= N;
#pragma omp parallel num_threads(nt)
    {
        int n = omp_get_num_threads(), id = omp_get_thread_num();
        int len = splitm ? M : N;
        int chunk = ((len + n - 1) / n + 15) / 16 * 16;
        int s = id * chunk, e = s + chunk < len ? s + chunk : len;
        if (s < e) {
            if (splitm) {
                const float *a = ta ? A + s : A + (size_t)s * lda;
                cblas_sgemm(CblasRowMajor, TA, TB, e - s, N, K, alpha, a, lda, B, ldb, beta, C + (size_t)s * ldc, ldc);
            } else {
                const float *b = tb ? B + (size_t)s * ldb : B + s;
                cblas_sgemm(CblasRowMajor, TA, TB, M, e - s, K, alpha, A, lda, b, ldb, beta, C + s, ldc);
            }
        }
    }
}

/* exp for x <= 88.3, vectorisable (Cephes expf polynomial, relative error ~1e-7); inputs below
 * -87.3 give ~1e-38 instead of 0 (harmless for softmax and tanh) */
static inline float vexpf(float x)
{
    x = x < -87.3f ? -87.3f : x > 88.3f ? 88.3f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}
static inline float vtanhf(float u)
{
    return 1.0f - 2.0f / (1.0f + vexpf(2.0f * u));
}

/* ---- sums with the same bits on every CPU ---------------------------------------------------
 * The kernels below are HOT_CLONES (common/base/clones.h): an x86-64-v3 build and a baseline build, picked
 * at load time. `omp simd reduction` would split a sum into as many partial sums as the vector has
 * lanes, so the two builds would round differently. LANE_SUM keeps SUM_LANES interleaved partial sums
 * instead (lane k takes elements k, k + SUM_LANES, ...), which a vector of 4, 8 or 16 floats computes
 * exactly, and lanes_total combines them in a fixed tree. */
#define SUM_LANES 16
#define GPT_INLINE static inline __attribute__((always_inline))

/* acc[k] += expr for every i in [0, n), where expr is an expression of i */
#define LANE_SUM(acc, n, i, expr)                        \
    do {                                                 \
        int i0_ = 0;                                     \
        for (; i0_ + SUM_LANES <= (n); i0_ += SUM_LANES) \
            for (int k_ = 0; k_ < SUM_LANES; k_++) {     \
                int i = i0_ + k_;                        \
                (acc)[k_] += (expr);                     \
            }                                            \
        for (int k_ = 0; i0_ + k_ < (n); k_++) {         \
            int i = i0_ + k_;                            \
            (acc)[k_] += (expr);                         \
        }                                                \
    } while (0)

GPT_INLINE float lanes_total(float *acc)
{
    for (int w = SUM_LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) acc[k] += acc[k + w];
    return acc[0];
}

GPT_INLINE float sum_f(const float *x, int n)
{
    float acc[SUM_LANES] = {0};
    LANE_SUM(acc, n, i, x[i]);
    return lanes_total(acc);
}

/* ------------------------------------------------------------------------------------------- */
/* layers                                                                                      */

HOT_CLONES static void encoder_forward(int nt, float *out /* (B,T,C) */, const int *inp /* (B,T) */,
                                       const float *wte /* (V,C) */, const float *wpe /* (maxT,C) */, int B, int T,
                                       int C)
{
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < B * T; n++) {
        int t = n % T;
        const float *a = wte + (size_t)inp[n] * C, *b = wpe + (size_t)t * C;
        float *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] = a[i] + b[i];
    }
}

/* dwte += scatter of dout (dwte already holds the head's gradient); dwpe = sum over batch */
HOT_CLONES static void encoder_backward(int nt, float *dwte /* (V,C) */, float *dwpe /* (maxT,C) */,
                                        const float *dout /* (B,T,C) */, const int *inp /* (B,T) */, int B, int T,
                                        int C, int maxT)
{
    /* columns are independent: each thread owns a range of columns, no races */
#pragma omp parallel num_threads(nt)
    {
        int n = omp_get_num_threads(), id = omp_get_thread_num();
        int chunk = (C + n - 1) / n, c0 = id * chunk, c1 = c0 + chunk < C ? c0 + chunk : C;
        for (int t = 0; t < T; t++) {
            float *w = dwpe + (size_t)t * C;
            for (int i = c0; i < c1; i++) w[i] = 0;
        }
        for (int t = T; t < maxT; t++) {
            float *w = dwpe + (size_t)t * C;
            for (int i = c0; i < c1; i++) w[i] = 0;
        }
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *d = dout + ((size_t)b * T + t) * C;
                float *we = dwte + (size_t)inp[b * T + t] * C, *wp = dwpe + (size_t)t * C;
                for (int i = c0; i < c1; i++) {
                    we[i] += d[i];
                    wp[i] += d[i];
                }
            }
    }
}

HOT_CLONES static void layernorm_forward(int nt, float *out /* (N,C) */, float *mean /* (N) */, float *rstd /* (N) */,
                                         const float *inp /* (N,C) */, const float *w /* (C) */,
                                         const float *b /* (C) */, int N, int C)
{
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float mu = sum_f(x, C) / C, acc[SUM_LANES] = {0};
        LANE_SUM(acc, C, i, (x[i] - mu) * (x[i] - mu));
        float v = lanes_total(acc);
        float rs = 1.0f / sqrtf(v / C + 1e-5f);
        float *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] = (x[i] - mu) * rs * w[i] + b[i];
        mean[n] = mu;
        rstd[n] = rs;
    }
}

/* dinp = (accumulate ? dinp + : ) LN backward; dw, db written */
HOT_CLONES static void layernorm_backward(int nt, float *dinp /* (N,C) */, float *dw /* (C) */, float *db /* (C) */,
                                          const float *dout /* (N,C) */, const float *inp /* (N,C) */,
                                          const float *w /* (C) */, const float *mean /* (N) */,
                                          const float *rstd /* (N) */, int N, int C, int accumulate)
{
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C, *x = inp + (size_t)n * C;
        float mu = mean[n], rs = rstd[n];
        float acc1[SUM_LANES] = {0}, acc2[SUM_LANES] = {0};
        LANE_SUM(acc1, C, i, w[i] * d[i]);
        LANE_SUM(acc2, C, i, (w[i] * d[i]) * ((x[i] - mu) * rs));
        float s1 = lanes_total(acc1) / C, s2 = lanes_total(acc2) / C;
        float *di = dinp + (size_t)n * C;
        if (accumulate)
            for (int i = 0; i < C; i++) di[i] += (w[i] * d[i] - s1 - (x[i] - mu) * rs * s2) * rs;
        else
            for (int i = 0; i < C; i++) di[i] = (w[i] * d[i] - s1 - (x[i] - mu) * rs * s2) * rs;
    }
#pragma omp parallel num_threads(nt)
    {
        int n = omp_get_num_threads(), id = omp_get_thread_num();
        int chunk = (C + n - 1) / n, c0 = id * chunk, c1 = c0 + chunk < C ? c0 + chunk : C;
        for (int i = c0; i < c1; i++) {
            dw[i] = 0;
            db[i] = 0;
        }
        for (int r = 0; r < N; r++) {
            const float *d = dout + (size_t)r * C, *x = inp + (size_t)r * C;
            float mu = mean[r], rs = rstd[r];
            for (int i = c0; i < c1; i++) {
                dw[i] += (x[i] - mu) * rs * d[i];
                db[i] += d[i];
            }
        }
    }
}

/* out = inp W^T + bias */
static void matmul_forward(int nt, float *out /* (N,OC) */, const float *inp /* (N,C) */, const float *w /* (OC,C) */,
                           const float *bias /* (OC) */, int N, int C, int OC)
{
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    mm(nt, 0, 1, N, OC, C, 1.0f, inp, C, w, C, 1.0f, out, OC);
}

/* dinp = dout W (written); dw = dout^T inp (written); dbias = column sums (written) */
HOT_CLONES static void matmul_backward(int nt, float *dinp /* (N,C) */, float *dw /* (OC,C) */, float *dbias /* (OC) */,
                                       const float *dout /* (N,OC) */, const float *inp /* (N,C) */,
                                       const float *w /* (OC,C) */, int N, int C, int OC)
{
    mm(nt, 0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
    mm(nt, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 0.0f, dw, C);
#pragma omp parallel num_threads(nt)
    {
        int n = omp_get_num_threads(), id = omp_get_thread_num();
        int chunk = ((OC + n - 1) / n + 15) / 16 * 16, c0 = id * chunk, c1 = c0 + chunk < OC ? c0 + chunk : OC;
        for (int i = c0; i < c1; i++) dbias[i] = 0;
        for (int r = 0; r < N; r++) {
            const float *d = dout + (size_t)r * OC;
            for (int i = c0; i < c1; i++) dbias[i] += d[i];
        }
    }
}

/* causal self-attention: qkv (B,T,3C) holding q|k|v, heads of size hs = C/NH */
HOT_CLONES static void attention_forward(int nt, float *out /* (B,T,C) */, float *att /* (B,NH,T,T) */,
                                         const float *qkv /* (B,T,3C) */, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * C3 + h * hs;
        const float *k = q + C, *v = q + 2 * C;
        float *P = att + (size_t)bh * T * T;
        /* S = scale Q K^T; lower triangle only, in row blocks */
        const int RB = 64;
        for (int r0 = 0; r0 < T; r0 += RB) {
            int r1 = r0 + RB < T ? r0 + RB : T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, scale, q + (size_t)r0 * C3, C3, k, C3,
                        0.0f, P + (size_t)r0 * T, T);
        }
        for (int t = 0; t < T; t++) {
            float *row = P + (size_t)t * T;
            float mx = row[0];
#pragma omp simd reduction(max : mx)
            for (int j = 1; j <= t; j++) mx = row[j] > mx ? row[j] : mx;
            for (int j = 0; j <= t; j++) row[j] = vexpf(row[j] - mx);
            float inv = 1.0f / sum_f(row, t + 1);
            for (int j = 0; j <= t; j++) row[j] *= inv;
            for (int j = t + 1; j < T; j++) row[j] = 0.0f;
        }
        /* Y = P V, written into out[:, h*hs:(h+1)*hs] */
        for (int r0 = 0; r0 < T; r0 += RB) {
            int r1 = r0 + RB < T ? r0 + RB : T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.0f, P + (size_t)r0 * T, T, v, C3,
                        0.0f, out + ((size_t)b * T + r0) * C + h * hs, C);
        }
    }
}

HOT_CLONES static void attention_backward(int nt, float *dqkv /* (B,T,3C) written */, float *scratch /* nt*T*T */,
                                          const float *dout /* (B,T,C) */, const float *qkv /* (B,T,3C) */,
                                          const float *att /* (B,NH,T,T) */, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * C3 + h * hs;
        const float *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + (size_t)b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C;
        const float *P = att + (size_t)bh * T * T;
        const float *dy = dout + (size_t)b * T * C + h * hs;
        float *dP = scratch + (size_t)omp_get_thread_num() * T * T;
        /* dP = dY V^T (lower triangle needed only) */
        const int RB = 64;
        for (int r0 = 0; r0 < T; r0 += RB) {
            int r1 = r0 + RB < T ? r0 + RB : T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, 1.0f, dy + (size_t)r0 * C, C, v, C3,
                        0.0f, dP + (size_t)r0 * T, T);
        }
        /* dV = P^T dY: row block [c0, c1) of dV needs rows t >= c0 of P only (P is lower triangular) */
        for (int c0 = 0; c0 < T; c0 += RB) {
            int c1 = c0 + RB < T ? c0 + RB : T;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, T - c0, 1.0f, P + (size_t)c0 * T + c0, T,
                        dy + (size_t)c0 * C, C, 0.0f, dv + (size_t)c0 * C3, C3);
        }
        /* dS = P * (dP - sum_j P dP) (softmax backward), zero above the diagonal */
        for (int t = 0; t < T; t++) {
            const float *p = P + (size_t)t * T;
            float *d = dP + (size_t)t * T;
            float acc[SUM_LANES] = {0};
            LANE_SUM(acc, t + 1, j, p[j] * d[j]);
            float s = lanes_total(acc);
            for (int j = 0; j <= t; j++) d[j] = p[j] * (d[j] - s);
            for (int j = t + 1; j < T; j++) d[j] = 0.0f;
        }
        /* dQ = scale dS K ; dK = scale dS^T Q */
        for (int r0 = 0; r0 < T; r0 += RB) {
            int r1 = r0 + RB < T ? r0 + RB : T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, scale, dP + (size_t)r0 * T, T, k,
                        C3, 0.0f, dq + (size_t)r0 * C3, C3);
        }
        for (int c0 = 0; c0 < T; c0 += RB) {
            int c1 = c0 + RB < T ? c0 + RB : T;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, T - c0, scale, dP + (size_t)c0 * T + c0,
                        T, q + (size_t)c0 * C3, C3, 0.0f, dk + (size_t)c0 * C3, C3);
        }
    }
}

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */

/* elementwise loops: each thread takes one contiguous range and runs a plain (vectorised) loop */
#define RANGE(n)                                                  \
    int nth_ = omp_get_num_threads(), id_ = omp_get_thread_num(); \
    long chunk_ = (((long)(n) + nth_ - 1) / nth_ + 15) / 16 * 16; \
    long s_ = id_ * chunk_, e_ = s_ + chunk_ < (long)(n) ? s_ + chunk_ : (long)(n)

HOT_CLONES static void gelu_forward(int nt, float *restrict out, const float *restrict inp, size_t n)
{
#pragma omp parallel num_threads(nt)
    {
        RANGE(n);
        for (long i = s_; i < e_; i++) {
            float x = inp[i];
            float u = GELU_S * (x + 0.044715f * x * x * x);
            out[i] = 0.5f * x * (1.0f + vtanhf(u));
        }
    }
}

/* dinp = gelu'(inp) * dout (in place allowed: dinp == dout) */
HOT_CLONES static void gelu_backward(int nt, float *dinp, const float *inp, const float *dout, size_t n)
{
#pragma omp parallel num_threads(nt)
    {
        RANGE(n);
        for (long i = s_; i < e_; i++) {
            float x = inp[i];
            float u = GELU_S * (x + 0.044715f * x * x * x);
            float th = vtanhf(u);
            float sech2 = 1.0f - th * th;
            float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
            dinp[i] = g * dout[i];
        }
    }
}

HOT_CLONES static void residual_forward(int nt, float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* logits (N,V) -> probabilities in place; losses (N) */
HOT_CLONES static float crossentropy_forward(int nt, float *logits, float *losses, const int *targets, int N, int V)
{
    double total = 0;
#pragma omp parallel for num_threads(nt) reduction(+ : total)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * V;
        float mx = x[0];
#pragma omp simd reduction(max : mx)
        for (int i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < V; i++) x[i] = vexpf(x[i] - mx);
        float s = sum_f(x, V);
        float inv = 1.0f / s;
        float pt = x[targets[n]];
        losses[n] = logf(s) - logf(pt);
        for (int i = 0; i < V; i++) x[i] *= inv;
        total += losses[n];
    }
    return (float)(total / N);
}

/* probs (N,V) -> dlogits in place: (p - onehot) / N */
HOT_CLONES static void crossentropy_backward(int nt, float *probs, const int *targets, int N, int V)
{
    float inv = 1.0f / N;
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        float *x = probs + (size_t)n * V;
        for (int i = 0; i < V; i++) x[i] *= inv;
        x[targets[n]] -= inv;
    }
}

/* ------------------------------------------------------------------------------------------- */

float gpt_forward(gpt_model *m, const float *params, const int *inputs, const int *targets)
{
    int B = m->B, T = m->T, C = m->c.dim, NH = m->c.heads, V = m->c.vocab, L = m->c.layers, nt = m->nthreads;
    int N = B * T;
    openblas_set_num_threads(1);
    gpt_params_bind(m->tensors, m->ntensors, (float *)params, &m->p);
    m->inputs = inputs;
    m->targets = targets;
    encoder_forward(nt, m->a.encoded, inputs, m->p.wte, m->p.wpe, B, T, C);
    const float *x = m->a.encoded;
    for (int l = 0; l < L; l++) {
        gpt_layer_params *p = &m->p.h[l];
        gpt_layer_acts *a = &m->a.h[l];
        layernorm_forward(nt, a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C);
        matmul_forward(nt, a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C);
        attention_forward(nt, a->atty, a->att, a->qkv, B, T, C, NH);
        matmul_forward(nt, a->res2, a->atty, p->projw, p->projb, N, C, C);
        residual_forward(nt, a->res2, a->res2, x, (size_t)N * C);
        layernorm_forward(nt, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C);
        matmul_forward(nt, a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C);
        gelu_forward(nt, a->fch_gelu, a->fch, (size_t)N * 4 * C);
        matmul_forward(nt, a->res3, a->fch_gelu, p->fcprojw, p->fcprojb, N, 4 * C, C);
        residual_forward(nt, a->res3, a->res3, a->res2, (size_t)N * C);
        x = a->res3;
    }
    layernorm_forward(nt, m->a.lnf, m->a.lnf_mean, m->a.lnf_rstd, x, m->p.lnfw, m->p.lnfb, N, C);
    mm(nt, 0, 1, N, V, C, 1.0f, m->a.lnf, C, m->p.wte, C, 0.0f, m->a.logits, V);
    if (!targets) return 0.0f;
    return crossentropy_forward(nt, m->a.logits, m->a.losses, targets, N, V);
}

void gpt_backward(gpt_model *m, const float *params, float *grads)
{
    int B = m->B, T = m->T, C = m->c.dim, NH = m->c.heads, V = m->c.vocab, L = m->c.layers, nt = m->nthreads;
    int N = B * T;
    openblas_set_num_threads(1);
    gpt_params_bind(m->tensors, m->ntensors, (float *)params, &m->p);
    gpt_params_bind(m->tensors, m->ntensors, grads, &m->g);
    crossentropy_backward(nt, m->a.logits, m->targets, N, V);
    float *dlogits = m->a.logits;
    /* head: dlnf = dlogits wte ; dwte = dlogits^T lnf (written; the embedding adds to it) */
    mm(nt, 0, 0, N, C, V, 1.0f, dlogits, V, m->p.wte, C, 0.0f, m->a.dln, C);
    mm(nt, 1, 0, V, C, N, 1.0f, dlogits, V, m->a.lnf, C, 0.0f, m->g.wte, C);
    const float *xlast = L > 0 ? m->a.h[L - 1].res3 : m->a.encoded;
    layernorm_backward(nt, m->a.dres, m->g.lnfw, m->g.lnfb, m->a.dln, xlast, m->p.lnfw, m->a.lnf_mean, m->a.lnf_rstd, N,
                       C, 0);
    for (int l = L - 1; l >= 0; l--) {
        gpt_layer_params *p = &m->p.h[l], *g = &m->g.h[l];
        gpt_layer_acts *a = &m->a.h[l];
        const float *x = l > 0 ? m->a.h[l - 1].res3 : m->a.encoded;
        /* MLP: res3 = res2 + proj(gelu(fc(ln2(res2)))) */
        matmul_backward(nt, m->a.dfch, g->fcprojw, g->fcprojb, m->a.dres, a->fch_gelu, p->fcprojw, N, 4 * C, C);
        gelu_backward(nt, m->a.dfch, a->fch, m->a.dfch, (size_t)N * 4 * C);
        matmul_backward(nt, m->a.dln, g->fcw, g->fcb, m->a.dfch, a->ln2, p->fcw, N, C, 4 * C);
        layernorm_backward(nt, m->a.dres, g->ln2w, g->ln2b, m->a.dln, a->res2, p->ln2w, a->ln2_mean, a->ln2_rstd, N, C,
                           1);
        /* attention: res2 = x + proj(attn(ln1(x))) */
        matmul_backward(nt, m->a.datty, g->projw, g->projb, m->a.dres, a->atty, p->projw, N, C, C);
        attention_backward(nt, m->a.dqkv, m->dpatt, m->a.datty, a->qkv, a->att, B, T, C, NH);
        matmul_backward(nt, m->a.dln, g->qkvw, g->qkvb, m->a.dqkv, a->ln1, p->qkvw, N, C, 3 * C);
        layernorm_backward(nt, m->a.dres, g->ln1w, g->ln1b, m->a.dln, x, p->ln1w, a->ln1_mean, a->ln1_rstd, N, C, 1);
    }
    encoder_backward(nt, m->g.wte, m->g.wpe, m->a.dres, m->inputs, B, T, C, m->c.ctx);
}

/* ------------------------------------------------------------------------------------------- */
/* optimizer                                                                                   */

HOT_CLONES double gpt_clip_grad_norm(float *grads, size_t numel, double max_norm, int threads)
{
    int nt = threads > 0 ? threads : omp_get_num_procs();
    double ss = 0;
#pragma omp parallel for num_threads(nt) reduction(+ : ss) schedule(static)
    for (size_t i = 0; i < numel; i++) ss += (double)grads[i] * grads[i];
    double norm = sqrt(ss);
    if (max_norm > 0) {
        double coef = max_norm / (norm + 1e-6);
        if (coef < 1.0) {
            float c = (float)coef;
#pragma omp parallel for num_threads(nt) schedule(static)
            for (size_t i = 0; i < numel; i++) grads[i] *= c;
        }
    }
    return norm;
}

HOT_CLONES void gpt_adamw_step(const model_tensor *tensors, int ntensors, float *params, const float *grads, float *m,
                               float *v, long t, double lr, double beta1, double beta2, double eps, double weight_decay,
                               int threads)
{
    int nt = threads > 0 ? threads : omp_get_num_procs();
    double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    float step_size = (float)(lr / bc1), bc2s = (float)sqrt(bc2);
    float b1 = (float)beta1, b2 = (float)beta2, e = (float)eps;
    for (int k = 0; k < ntensors; k++) {
        const model_tensor *tt = &tensors[k];
        float decay = tt->ndim >= 2 ? (float)(1.0 - lr * weight_decay) : 1.0f;
        float *p = params + tt->offset, *mm_ = m + tt->offset, *vv = v + tt->offset;
        const float *g = grads + tt->offset;
        size_t n = tt->numel;
#pragma omp parallel for num_threads(nt) schedule(static) if (n > 32768)
        for (size_t i = 0; i < n; i++) {
            float gi = g[i];
            float mi = b1 * mm_[i] + (1.0f - b1) * gi;
            float vi = b2 * vv[i] + (1.0f - b2) * gi * gi;
            mm_[i] = mi;
            vv[i] = vi;
            float denom = sqrtf(vi) / bc2s + e;
            p[i] = p[i] * decay - step_size * mi / denom;
        }
    }
}

/* ------------------------------------------------------------------------------------------- */
/* OpenBLAS kernel selection                                                                   */

#include <unistd.h>

int gpt_openblas_autotune(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE")) return 0;
    const char *core = openblas_get_corename();
    static const char *good[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    for (int i = 0; good[i]; i++)
        if (core && !strcasecmp(core, good[i])) return 0;
    const char *want = NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        want = "Haswell";
    if (!want || !argv) return 0;
    setenv("OPENBLAS_CORETYPE", want, 1);
    fprintf(stderr, "gpt: OpenBLAS chose the %s kernels for this CPU; restarting with OPENBLAS_CORETYPE=%s\n",
            core ? core : "?", want);
    fflush(NULL);
    execv("/proc/self/exe", argv);
    return -1; /* exec failed: carry on with the slow kernels */
}
