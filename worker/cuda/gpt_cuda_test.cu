/* gpt_cuda_test.cu: the single-kernel entry points of gpt_cuda_test.h: each copies host arrays to fresh
 * device buffers, runs the launcher the model uses (gpt_cuda_kernels.cu), copies the outputs back and
 * frees the buffers, so tests/test_cuda_kernels.c checks each kernel against the CPU math. */
#include "gpt_cuda_test.h"

#include <stdio.h>
#include <string.h>

#include "gpt_cuda_internal.h"
#include "warp_mma_check.cuh"

/* ------------------------------------------------------------------------------------------- */
/* single kernels on host arrays (tests)                                                       */

/* a small pool of device buffers freed together */
typedef struct {
    void *p[16];
    int n;
    int fail;
} pool;

static void *dup_to_dev(pool *pl, const void *h, size_t bytes)
{
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

static int back(pool *pl, void *h, const void *d, size_t bytes)
{
    if (pl->fail) return -1;
    if (cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) pl->fail = 1;
    return pl->fail ? -1 : 0;
}

static int done(pool *pl, int rc, const char *what, const char *err)
{
    cudaError_t e = cudaDeviceSynchronize();
    for (int i = 0; i < pl->n; i++) cudaFree(pl->p[i]);
    if (rc || pl->fail || e != cudaSuccess) {
        fprintf(stderr, "gpt_cuda_k_%s: %s\n", what,
                err && *err ? err : cudaGetErrorString(e ? e : cudaGetLastError()));
        return -1;
    }
    return 0;
}

static cublasHandle_t test_h; /* one handle for the single-kernel entry points (tests) */
static cublasHandle_t test_handle(int tf32)
{
    cublasHandle_t &h = test_h;
    if (!h && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return NULL;
    cublasSetStream(h, 0);
    cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    return h;
}

#define KBEGIN(tf32)                                          \
    char kerr[512] = "";                                      \
    pool pl;                                                  \
    memset(&pl, 0, sizeof pl);                                \
    ctx x = {0, test_handle(tf32), kerr, sizeof kerr, NULL, NULL}; \
    if (!x.h) {                                               \
        fprintf(stderr, "gpt_cuda_k: cublasCreate failed\n"); \
        return -1;                                            \
    }                                                         \
    int rc = 0
#define F(n) ((size_t)(n) * sizeof(float))
#define I(n) ((size_t)(n) * sizeof(int))

extern "C" int gpt_cuda_k_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T,
                                          int C, int V, int maxT)
{
    KBEGIN(0);
    size_t N = (size_t)B * T;
    float *dout = (float *)dup_to_dev(&pl, NULL, F(N * C));
    int *di = (int *)dup_to_dev(&pl, inp, I(N));
    float *dwte = (float *)dup_to_dev(&pl, wte, F((size_t)V * C)),
          *dwpe = (float *)dup_to_dev(&pl, wpe, F((size_t)maxT * C));
    if (!pl.fail) rc = l_encoder_forward(&x, dout, di, dwte, dwpe, B, T, C);
    if (!rc) rc = back(&pl, out, dout, F(N * C));
    return done(&pl, rc, "encoder_forward", kerr);
}

extern "C" int gpt_cuda_k_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T,
                                           int C, int V, int maxT)
{
    KBEGIN(0);
    int N = B * T;
    int *h = (int *)malloc(I(5 * (size_t)N + 1)), *slot = (int *)calloc((size_t)V, sizeof(int)),
        *cnt = (int *)calloc((size_t)N + 1, sizeof(int));
    if (!h || !slot || !cnt) {
        free(h);
        free(slot);
        free(cnt);
        return -1;
    }
    int U = bucket_tokens(h, inp, NULL, N, slot, cnt);
    int *dt = (int *)dup_to_dev(&pl, h, I(5 * (size_t)N + 1));
    free(h);
    free(slot);
    free(cnt);
    float *ddw = (float *)dup_to_dev(&pl, dwte, F((size_t)V * C)),
          *ddp = (float *)dup_to_dev(&pl, NULL, F((size_t)maxT * C));
    float *dd = (float *)dup_to_dev(&pl, dout, F((size_t)N * C));
    if (!pl.fail) rc = l_encoder_backward(&x, ddw, ddp, dd, dt + 2 * N, dt + 3 * N, dt + 4 * N, U, B, T, C, maxT);
    if (!rc) rc = back(&pl, dwte, ddw, F((size_t)V * C));
    if (!rc) rc = back(&pl, dwpe, ddp, F((size_t)maxT * C));
    return done(&pl, rc, "encoder_backward", kerr);
}

extern "C" int gpt_cuda_k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                            const float *b, int N, int C)
{
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
                                             int accumulate)
{
    KBEGIN(0);
    float *ddi = (float *)dup_to_dev(&pl, dinp, F((size_t)N * C)), *ddw = (float *)dup_to_dev(&pl, NULL, F(C)),
          *ddb = (float *)dup_to_dev(&pl, NULL, F(C)), *ddo = (float *)dup_to_dev(&pl, dout, F((size_t)N * C)),
          *di = (float *)dup_to_dev(&pl, inp, F((size_t)N * C)), *dwt = (float *)dup_to_dev(&pl, w, F(C)),
          *dm = (float *)dup_to_dev(&pl, mean, F(N)), *dr = (float *)dup_to_dev(&pl, rstd, F(N));
    x.part = (float *)dup_to_dev(&pl, NULL, F(COLSUM_PART(C))); /* the column sums in chunks, as the model */
    if (!pl.fail) rc = l_layernorm_backward(&x, ddi, ddw, ddb, ddo, di, dwt, dm, dr, N, C, accumulate);
    if (!rc) rc = back(&pl, dinp, ddi, F((size_t)N * C)) || back(&pl, dw, ddw, F(C)) || back(&pl, db, ddb, F(C));
    return done(&pl, rc, "layernorm_backward", kerr);
}

extern "C" int gpt_cuda_k_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C,
                                         int OC, int tf32)
{
    KBEGIN(tf32);
    float *d_o = (float *)dup_to_dev(&pl, NULL, F((size_t)N * OC)),
          *di = (float *)dup_to_dev(&pl, inp, F((size_t)N * C)), *dw = (float *)dup_to_dev(&pl, w, F((size_t)OC * C)),
          *db = (float *)dup_to_dev(&pl, bias, F(OC));
    if (!pl.fail) rc = l_matmul_forward(&x, d_o, di, dw, db, N, C, OC);
    if (!rc) rc = back(&pl, out, d_o, F((size_t)N * OC));
    return done(&pl, rc, "matmul_forward", kerr);
}

extern "C" int gpt_cuda_k_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                          const float *w, int N, int C, int OC, int tf32)
{
    KBEGIN(tf32);
    float *ddi = (float *)dup_to_dev(&pl, NULL, F((size_t)N * C)),
          *ddw = (float *)dup_to_dev(&pl, NULL, F((size_t)OC * C)), *ddb = (float *)dup_to_dev(&pl, NULL, F(OC)),
          *ddo = (float *)dup_to_dev(&pl, dout, F((size_t)N * OC)),
          *di = (float *)dup_to_dev(&pl, inp, F((size_t)N * C)), *dwt = (float *)dup_to_dev(&pl, w, F((size_t)OC * C));
    x.part = (float *)dup_to_dev(&pl, NULL, F(COLSUM_PART(OC)));
    if (!pl.fail) rc = l_matmul_backward(&x, ddi, ddw, ddb, ddo, di, dwt, N, C, OC);
    if (!rc)
        rc = back(&pl, dinp, ddi, F((size_t)N * C)) || back(&pl, dw, ddw, F((size_t)OC * C)) ||
             back(&pl, dbias, ddb, F(OC));
    return done(&pl, rc, "matmul_backward", kerr);
}

extern "C" int gpt_cuda_k_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                                            int tf32)
{
    KBEGIN(tf32);
    size_t N = (size_t)B * T, A = (size_t)B * NH * T * T;
    float *d_o = (float *)dup_to_dev(&pl, NULL, F(N * C)), *da = (float *)dup_to_dev(&pl, NULL, F(A)),
          *dq = (float *)dup_to_dev(&pl, qkv, F(N * 3 * C)), *s = (float *)dup_to_dev(&pl, NULL, F(4 * N * C));
    if (!pl.fail) rc = l_attention_forward(&x, d_o, da, dq, s, s + N * C, s + 2 * N * C, s + 3 * N * C, B, T, C, NH);
    if (!rc) rc = back(&pl, out, d_o, F(N * C)) || back(&pl, att, da, F(A));
    return done(&pl, rc, "attention_forward", kerr);
}

extern "C" int gpt_cuda_k_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                                             int T, int C, int NH, int tf32)
{
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

extern "C" int gpt_cuda_k_softmax_causal(float *s, int BH, int T)
{
    KBEGIN(0);
    size_t n = (size_t)BH * T * T;
    float *d = (float *)dup_to_dev(&pl, s, F(n));
    if (!pl.fail) rc = l_softmax_causal(&x, d, BH * T, T);
    if (!rc) rc = back(&pl, s, d, F(n));
    return done(&pl, rc, "softmax_causal", kerr);
}

extern "C" int gpt_cuda_k_gelu_forward(float *out, const float *inp, size_t n)
{
    KBEGIN(0);
    float *d_o = (float *)dup_to_dev(&pl, NULL, F(n)), *di = (float *)dup_to_dev(&pl, inp, F(n));
    if (!pl.fail) rc = l_gelu_forward(&x, d_o, di, n);
    if (!rc) rc = back(&pl, out, d_o, F(n));
    return done(&pl, rc, "gelu_forward", kerr);
}

extern "C" int gpt_cuda_k_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    KBEGIN(0);
    float *ddi = (float *)dup_to_dev(&pl, NULL, F(n)), *di = (float *)dup_to_dev(&pl, inp, F(n)),
          *ddo = (float *)dup_to_dev(&pl, dout, F(n));
    if (!pl.fail) rc = l_gelu_backward(&x, ddi, di, ddo, n);
    if (!rc) rc = back(&pl, dinp, ddi, F(n));
    return done(&pl, rc, "gelu_backward", kerr);
}

extern "C" int gpt_cuda_k_residual_forward(float *out, const float *a, const float *b, size_t n)
{
    KBEGIN(0);
    float *d_o = (float *)dup_to_dev(&pl, NULL, F(n)), *da = (float *)dup_to_dev(&pl, a, F(n)),
          *db = (float *)dup_to_dev(&pl, b, F(n));
    if (!pl.fail) rc = l_residual(&x, d_o, da, db, n);
    if (!rc) rc = back(&pl, out, d_o, F(n));
    return done(&pl, rc, "residual_forward", kerr);
}

extern "C" int gpt_cuda_k_crossentropy_forward(float *logits, float *losses, const int *targets, int N, int V,
                                               float *mean)
{
    KBEGIN(0);
    float *dl = (float *)dup_to_dev(&pl, logits, F((size_t)N * V)), *dls = (float *)dup_to_dev(&pl, NULL, F(N));
    int *dt = (int *)dup_to_dev(&pl, targets, I(N));
    double *red = (double *)dup_to_dev(&pl, NULL, (RED_BLOCKS + 2) * sizeof(double));
    double m = 0;
    if (!pl.fail) rc = l_crossentropy_forward(&x, dl, dls, dt, N, V, red);
    if (!rc)
        rc = back(&pl, logits, dl, F((size_t)N * V)) || back(&pl, losses, dls, F(N)) ||
             back(&pl, &m, red + RED_BLOCKS, sizeof(double));
    if (mean) *mean = (float)m;
    return done(&pl, rc, "crossentropy_forward", kerr);
}

extern "C" int gpt_cuda_k_crossentropy_backward(float *probs, const int *targets, int N, int V)
{
    KBEGIN(0);
    float *dp = (float *)dup_to_dev(&pl, probs, F((size_t)N * V));
    int *dt = (int *)dup_to_dev(&pl, targets, I(N));
    if (!pl.fail) rc = l_crossentropy_backward(&x, dp, dt, N, V);
    if (!rc) rc = back(&pl, probs, dp, F((size_t)N * V));
    return done(&pl, rc, "crossentropy_backward", kerr);
}

extern "C" int gpt_cuda_k_clip(float *grads, size_t numel, double max_norm, double *norm)
{
    KBEGIN(0);
    float *dg = (float *)dup_to_dev(&pl, grads, F(numel));
    double *red = (double *)dup_to_dev(&pl, NULL, (RED_BLOCKS + 2) * sizeof(double));
    double nrm = 0;
    if (!pl.fail) rc = l_clip(&x, dg, numel, max_norm, red);
    if (!rc) rc = back(&pl, grads, dg, F(numel)) || back(&pl, &nrm, red + RED_BLOCKS, sizeof(double));
    if (norm) *norm = nrm;
    return done(&pl, rc, "clip", kerr);
}

static gpt_lt *test_lt; /* the entry points' cuBLASLt, made on first use */

extern "C" int gpt_cuda_k_matmul_forward_bf16(float *out, const float *inp, const float *w, const float *bias,
                                              const float *res, int N, int C, int OC, int lt)
{
    KBEGIN(0);
    if (lt && !test_lt && !(test_lt = gpt_lt_create(kerr, sizeof kerr)))
        return done(&pl, -1, "matmul_forward_bf16", kerr);
    x.lt = lt ? test_lt : NULL;
    float *d_o = (float *)dup_to_dev(&pl, NULL, F((size_t)N * OC)),
          *di = (float *)dup_to_dev(&pl, inp, F((size_t)N * C)), *dw = (float *)dup_to_dev(&pl, w, F((size_t)OC * C)),
          *db = (float *)dup_to_dev(&pl, NULL, F(OC + 1)),
          *dr = res ? (float *)dup_to_dev(&pl, res, F((size_t)N * OC)) : NULL;
    __nv_bfloat16 *w16 = (__nv_bfloat16 *)dup_to_dev(&pl, NULL, (size_t)OC * C * 2),
                  *i16 = (__nv_bfloat16 *)dup_to_dev(&pl, NULL, (size_t)N * C * 2);
    if (db && lt == 2) db++; /* a bias 4 bytes off its allocation's 256-byte alignment */
    if (db && cudaMemcpy(db, bias, F(OC), cudaMemcpyHostToDevice) != cudaSuccess) pl.fail = 1;
    int via = 1; /* lt: 1 when cuBLASLt ran it, 0 when it has no algorithm for the shape */
    if (!pl.fail) rc = l_to_bf16(&x, w16, dw, (size_t)OC * C) || l_to_bf16(&x, i16, di, (size_t)N * C) ? -1 : 0;
    if (!pl.fail && !rc && lt) {
        via = l_linear_lt(&x, d_o, i16, w16, db, dr, N, C, OC);
        rc = via < 0 ? -1 : 0;
    } else if (!pl.fail && !rc) {
        rc = l_matmul_forward_bf16(&x, d_o, i16, w16, db, dr, N, C, OC);
    }
    if (!rc && via) rc = back(&pl, out, d_o, F((size_t)N * OC));
    rc = done(&pl, rc, "matmul_forward_bf16", kerr);
    return rc ? rc : !via;
}

extern "C" int gpt_cuda_k_matmul_backward_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                                               const float *gelu_in, const float *inp, const float *w, int N, int C,
                                               int OC)
{
    KBEGIN(0);
    float *dg = gelu_in ? (float *)dup_to_dev(&pl, gelu_in, F((size_t)N * OC)) : NULL;
    float *ddi = (float *)dup_to_dev(&pl, NULL, F((size_t)N * C)),
          *ddw = (float *)dup_to_dev(&pl, NULL, F((size_t)OC * C)), *ddb = (float *)dup_to_dev(&pl, NULL, F(OC)),
          *ddo = (float *)dup_to_dev(&pl, dout, F((size_t)N * OC)),
          *di = (float *)dup_to_dev(&pl, inp, F((size_t)N * C)), *dwt = (float *)dup_to_dev(&pl, w, F((size_t)OC * C));
    __nv_bfloat16 *w16 = (__nv_bfloat16 *)dup_to_dev(&pl, NULL, (size_t)OC * C * 2),
                  *o16 = (__nv_bfloat16 *)dup_to_dev(&pl, NULL, (size_t)N * OC * 2),
                  *i16 = (__nv_bfloat16 *)dup_to_dev(&pl, NULL, (size_t)N * C * 2);
    x.part = (float *)dup_to_dev(&pl, NULL, F(COLSUM_PART(OC)));
    if (!pl.fail)
        rc = l_to_bf16(&x, w16, dwt, (size_t)OC * C) || l_to_bf16(&x, i16, di, (size_t)N * C) ||
             (dg ? l_matmul_backward_gelu_bf16(&x, ddi, ddw, ddb, ddo, dg, i16, w16, o16, N, C, OC)
                 : l_matmul_backward_bf16(&x, ddi, ddw, ddb, ddo, i16, w16, o16, N, C, OC));
    if (!rc)
        rc = back(&pl, dinp, ddi, F((size_t)N * C)) || back(&pl, dw, ddw, F((size_t)OC * C)) ||
             back(&pl, dbias, ddb, F(OC));
    return done(&pl, rc, "matmul_backward_bf16", kerr);
}

extern "C" int gpt_cuda_k_flash_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int mma)
{
    KBEGIN(0);
    size_t N = (size_t)B * T, R = (size_t)B * NH * T;
    float *d_o = (float *)dup_to_dev(&pl, NULL, F(N * C)), *dl = (float *)dup_to_dev(&pl, NULL, F(R)),
          *dq = (float *)dup_to_dev(&pl, qkv, F(N * 3 * C));
    if (!pl.fail)
        rc = mma ? l_flash_mma_forward(&x, d_o, dl, dq, B, T, C, NH) : l_flash_forward(&x, d_o, dl, dq, B, T, C, NH);
    if (!rc) rc = back(&pl, out, d_o, F(N * C)) || back(&pl, lse, dl, F(R));
    return done(&pl, rc, "flash_forward", kerr);
}

extern "C" int gpt_cuda_k_flash_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                         const float *lse, int B, int T, int C, int NH, int mma)
{
    KBEGIN(0);
    size_t N = (size_t)B * T, R = (size_t)B * NH * T;
    float *ddq = (float *)dup_to_dev(&pl, NULL, F(N * 3 * C)), *ddo = (float *)dup_to_dev(&pl, dout, F(N * C)),
          *dq = (float *)dup_to_dev(&pl, qkv, F(N * 3 * C)), *d_o = (float *)dup_to_dev(&pl, out, F(N * C)),
          *dl = (float *)dup_to_dev(&pl, lse, F(R)), *ds = (float *)dup_to_dev(&pl, NULL, F(R));
    if (!pl.fail)
        rc = mma ? l_flash_mma_backward(&x, ddq, ddo, dq, d_o, dl, ds, B, T, C, NH)
                 : l_flash_backward(&x, ddq, ddo, dq, d_o, dl, ds, B, T, C, NH);
    if (!rc) rc = back(&pl, dqkv, ddq, F(N * 3 * C));
    return done(&pl, rc, "flash_backward", kerr);
}

extern "C" int gpt_cuda_k_flash_verify(int hs, double limit, char *note, size_t notelen)
{
    char err[256] = "";
    int rc = l_flash_mma_verify(0, hs, limit, note, notelen, err, sizeof err);
    if (rc < 0) fprintf(stderr, "gpt_cuda_k_flash_verify: %s\n", err);
    return rc;
}

extern "C" int gpt_cuda_k_attention_forward_bf16(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    KBEGIN(0);
    size_t N = (size_t)B * T, A = (size_t)B * NH * T * T, NC = N * C;
    float *d_o = (float *)dup_to_dev(&pl, NULL, F(NC)), *da = (float *)dup_to_dev(&pl, NULL, F(A)),
          *dq = (float *)dup_to_dev(&pl, qkv, F(N * 3 * C)), *s = (float *)dup_to_dev(&pl, NULL, F(4 * NC));
    __nv_bfloat16 *s16 = (__nv_bfloat16 *)dup_to_dev(&pl, NULL, (3 * NC + A) * 2);
    if (!pl.fail)
        rc = l_attention_forward_bf16(&x, d_o, da, dq, s, s + NC, s + 2 * NC, s + 3 * NC, s16, s16 + NC, s16 + 2 * NC,
                                      s16 + 3 * NC, B, T, C, NH);
    if (!rc) rc = back(&pl, out, d_o, F(NC)) || back(&pl, att, da, F(A));
    return done(&pl, rc, "attention_forward_bf16", kerr);
}

extern "C" int gpt_cuda_k_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const float *att,
                                                  int B, int T, int C, int NH)
{
    KBEGIN(0);
    size_t N = (size_t)B * T, A = (size_t)B * NH * T * T, NC = N * C;
    float *ddq = (float *)dup_to_dev(&pl, NULL, F(N * 3 * C)), *ddo = (float *)dup_to_dev(&pl, dout, F(NC)),
          *dq = (float *)dup_to_dev(&pl, qkv, F(N * 3 * C)), *da = (float *)dup_to_dev(&pl, att, F(A)),
          *s = (float *)dup_to_dev(&pl, NULL, F(7 * NC)), *dp = (float *)dup_to_dev(&pl, NULL, F(A));
    __nv_bfloat16 *s16 = (__nv_bfloat16 *)dup_to_dev(&pl, NULL, (4 * NC + A) * 2);
    if (!pl.fail)
        rc = l_attention_backward_bf16(&x, ddq, ddo, dq, da, s, s + NC, s + 2 * NC, s + 3 * NC, s + 4 * NC, s + 5 * NC,
                                       s + 6 * NC, dp, s16, s16 + NC, s16 + 2 * NC, s16 + 3 * NC, s16 + 4 * NC, B, T, C,
                                       NH);
    if (!rc) rc = back(&pl, dqkv, ddq, F(N * 3 * C));
    return done(&pl, rc, "attention_backward_bf16", kerr);
}

extern "C" int gpt_cuda_k_adamw(const model_tensor *tensors, int ntensors, float *params, const float *grads, float *m,
                                float *v, long t, double lr, double beta1, double beta2, double eps,
                                double weight_decay)
{
    KBEGIN(0);
    size_t n = tensors[ntensors - 1].offset + tensors[ntensors - 1].numel;
    float *dp = (float *)dup_to_dev(&pl, params, F(n)), *dg = (float *)dup_to_dev(&pl, grads, F(n)),
          *dm = (float *)dup_to_dev(&pl, m, F(n)), *dv = (float *)dup_to_dev(&pl, v, F(n));
    if (!pl.fail) rc = l_adamw(&x, tensors, ntensors, dp, dg, dm, dv, t, lr, beta1, beta2, eps, weight_decay);
    if (!rc) rc = back(&pl, params, dp, F(n)) || back(&pl, m, dm, F(n)) || back(&pl, v, dv, F(n));
    return done(&pl, rc, "adamw", kerr);
}

/* the warp primitives of warp_mma.h (warp_mma_check.cuh): one warp, 16x16 A, 16x8 B, C and B2; outputs
 * 16x8 d_frag, d_ldm, d_reuse and 32 sums (tests/test_cuda_kernels.c and tests/test_simt_emu.cc assert
 * the same values) */
extern "C" int gpt_cuda_k_warp_mma_check(float *d_frag, float *d_ldm, float *d_reuse, float *sums, const float *A,
                                         const float *B, const float *C, const float *B2)
{
    KBEGIN(0);
    float *df = (float *)dup_to_dev(&pl, NULL, F(128)), *dl = (float *)dup_to_dev(&pl, NULL, F(128)),
          *dr = (float *)dup_to_dev(&pl, NULL, F(128)), *ds = (float *)dup_to_dev(&pl, NULL, F(32)),
          *da = (float *)dup_to_dev(&pl, A, F(256)), *db = (float *)dup_to_dev(&pl, B, F(128)),
          *dc = (float *)dup_to_dev(&pl, C, F(128)), *db2 = (float *)dup_to_dev(&pl, B2, F(128));
    if (!pl.fail) {
        warp_mma_check_k<<<1, 32>>>(df, dl, dr, ds, da, db, dc, db2);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            snprintf(kerr, sizeof kerr, "warp_mma_check_k launch: %s", cudaGetErrorString(e));
            rc = -1;
        }
    }
    if (!rc)
        rc = back(&pl, d_frag, df, F(128)) || back(&pl, d_ldm, dl, F(128)) || back(&pl, d_reuse, dr, F(128)) ||
             back(&pl, sums, ds, F(32));
    return done(&pl, rc, "warp_mma_check", kerr);
}
