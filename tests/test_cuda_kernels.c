/* test_cuda_kernels: every kernel of the CUDA backend (worker/cuda) against the CPU math of
 * worker/gpt/gpt_model.c on the same inputs: embedding forward/backward, LayerNorm forward/backward,
 * linear forward/backward (cuBLAS, with and without TF32), causal attention forward/backward
 * (strided-batched cuBLAS + softmax kernels), causal softmax, GELU forward/backward, residual,
 * cross-entropy forward/backward (both block sizes), gradient clipping and AdamW (the DiLoCo
 * kernels, pseudo-gradient and loads, are in test_cuda_diloco). References are computed here in double precision (the CPU layer functions are
 * static in gpt_model.c), except AdamW and clipping which use the CPU backend's public functions.
 * Limit: relative error (max|gpu-ref| / max|ref|) 1e-4 with TF32 off.
 *
 * Exits 77 (skipped) without a CUDA device or without the CUDA build. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.h"
#include "gpt/gpt.h"
#include "math/bf16.h"

#ifdef DILOCO_HAVE_CUDA
#include "cuda/gpt_cuda_test.h" /* the single-kernel entry points */
#include "warp_mma_expect.h"

static void report(const char *what, double rel, double limit)
{
    printf("  %-40s rel err %.3g (limit %.0e)\n", what, rel, limit);
    assert_true(rel <= limit);
}

/* ---- embedding ----------------------------------------------------------------------------- */

static void test_encoder(void **state)
{
    (void)state;
    int B = 3, T = 50, C = 64, V = 97, maxT = 64, N = B * T;
    int *inp = tc_randint((size_t)N, V, 1);
    inp[5] = inp[77] = inp[120] = 3; /* repeated tokens across sequences */
    float *wte = tc_randn((size_t)V * C, 0.02f, 2), *wpe = tc_randn((size_t)maxT * C, 0.02f, 3);
    float *out = calloc((size_t)N * C, 4), *ref = calloc((size_t)N * C, 4);
    assert_int_equal(gpt_cuda_k_encoder_forward(out, inp, wte, wpe, B, T, C, V, maxT), 0);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++) ref[(size_t)n * C + i] = wte[(size_t)inp[n] * C + i] + wpe[(size_t)(n % T) * C + i];
    report("encoder_forward", tc_relerr(out, ref, (size_t)N * C), 0);

    /* backward: dwte holds the head's gradient, the scatter adds in position order (as the CPU) */
    float *dout = tc_randn((size_t)N * C, 1.0f, 4);
    float *dwte = tc_randn((size_t)V * C, 0.1f, 5), *dwpe = tc_randn((size_t)maxT * C, 9.0f, 6);
    float *rwte = malloc((size_t)V * C * 4), *rwpe = calloc((size_t)maxT * C, 4);
    memcpy(rwte, dwte, (size_t)V * C * 4);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < C; i++) {
                float d = dout[((size_t)b * T + t) * C + i];
                rwte[(size_t)inp[b * T + t] * C + i] += d;
                rwpe[(size_t)t * C + i] += d;
            }
    assert_int_equal(gpt_cuda_k_encoder_backward(dwte, dwpe, dout, inp, B, T, C, V, maxT), 0);
    report("encoder_backward dwte (same order: exact)", tc_relerr(dwte, rwte, (size_t)V * C), 0);
    report("encoder_backward dwpe (rows >= T zero)", tc_relerr(dwpe, rwpe, (size_t)maxT * C), 0);
    free(inp);
    free(wte);
    free(wpe);
    free(out);
    free(ref);
    free(dout);
    free(dwte);
    free(dwpe);
    free(rwte);
    free(rwpe);
}

/* ---- LayerNorm ----------------------------------------------------------------------------- */

static void ln_case(int N, int C, uint64_t seed)
{
    float *x = tc_randn((size_t)N * C, 1.0f, seed), *w = tc_randn((size_t)C, 0.5f, seed + 1),
          *b = tc_randn((size_t)C, 0.5f, seed + 2);
    for (int i = 0; i < C; i++) w[i] += 1.0f;
    for (int n = 0; n < N; n++) x[(size_t)n * C] += 3.0f; /* non-zero means */
    float *out = malloc((size_t)N * C * 4), *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    assert_int_equal(gpt_cuda_k_layernorm_forward(out, mean, rstd, x, w, b, N, C), 0);
    double *ro = malloc((size_t)N * C * 8), *rm = malloc((size_t)N * 8), *rr = malloc((size_t)N * 8);
    for (int n = 0; n < N; n++) {
        const float *r = x + (size_t)n * C;
        double mu = 0, var = 0;
        for (int i = 0; i < C; i++) mu += r[i];
        mu /= C;
        for (int i = 0; i < C; i++) var += (r[i] - mu) * (r[i] - mu);
        double rs = 1.0 / sqrt(var / C + 1e-5);
        for (int i = 0; i < C; i++) ro[(size_t)n * C + i] = (r[i] - mu) * rs * w[i] + b[i];
        rm[n] = mu;
        rr[n] = rs;
    }
    char what[64];
    snprintf(what, sizeof what, "layernorm_forward N=%d C=%d", N, C);
    report(what, tc_relerr_d(out, ro, (size_t)N * C), TC_LIMIT);
    report("  mean", tc_relerr_d(mean, rm, (size_t)N), TC_LIMIT);
    report("  rstd", tc_relerr_d(rstd, rr, (size_t)N), TC_LIMIT);

    /* backward with the GPU's mean/rstd (as the model does), written and accumulated */
    float *dout = tc_randn((size_t)N * C, 1.0f, seed + 3);
    for (int acc = 0; acc <= 1; acc++) {
        float *dinp = tc_randn((size_t)N * C, 1.0f, seed + 4), *dw = calloc((size_t)C, 4), *db = calloc((size_t)C, 4);
        double *rdi = malloc((size_t)N * C * 8), *rdw = calloc((size_t)C, 8), *rdb = calloc((size_t)C, 8);
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * C, *r = x + (size_t)n * C;
            double mu = mean[n], rs = rstd[n], s1 = 0, s2 = 0;
            for (int i = 0; i < C; i++) {
                double nx = (r[i] - mu) * rs, dn = (double)w[i] * d[i];
                s1 += dn;
                s2 += dn * nx;
                rdw[i] += nx * d[i];
                rdb[i] += d[i];
            }
            s1 /= C;
            s2 /= C;
            for (int i = 0; i < C; i++) {
                double g = ((double)w[i] * d[i] - s1 - (r[i] - mu) * rs * s2) * rs;
                rdi[(size_t)n * C + i] = acc ? dinp[(size_t)n * C + i] + g : g;
            }
        }
        assert_int_equal(gpt_cuda_k_layernorm_backward(dinp, dw, db, dout, x, w, mean, rstd, N, C, acc), 0);
        snprintf(what, sizeof what, "layernorm_backward dinp (accumulate %d)", acc);
        report(what, tc_relerr_d(dinp, rdi, (size_t)N * C), TC_LIMIT);
        report("  dw", tc_relerr_d(dw, rdw, (size_t)C), TC_LIMIT);
        report("  db", tc_relerr_d(db, rdb, (size_t)C), TC_LIMIT);
        free(dinp);
        free(dw);
        free(db);
        free(rdi);
        free(rdw);
        free(rdb);
    }
    free(x);
    free(w);
    free(b);
    free(out);
    free(mean);
    free(rstd);
    free(ro);
    free(rm);
    free(rr);
    free(dout);
}

static void test_layernorm(void **state)
{
    (void)state;
    ln_case(150, 64, 10);
    ln_case(37, 200, 20); /* C not a multiple of 32 */
}

/* ---- linear -------------------------------------------------------------------------------- */

static void linear_case(int N, int C, int OC, int tf32, double limit)
{
    float *x = tc_randn((size_t)N * C, 1.0f, 30), *w = tc_randn((size_t)OC * C, 0.05f, 31),
          *bias = tc_randn((size_t)OC, 0.1f, 32), *dout = tc_randn((size_t)N * OC, 1.0f, 33);
    float *out = malloc((size_t)N * OC * 4);
    double *ro = malloc((size_t)N * OC * 8);
    assert_int_equal(gpt_cuda_k_matmul_forward(out, x, w, bias, N, C, OC, tf32), 0);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias[o];
            for (int i = 0; i < C; i++) s += (double)x[(size_t)n * C + i] * w[(size_t)o * C + i];
            ro[(size_t)n * OC + o] = s;
        }
    char what[80];
    snprintf(what, sizeof what, "matmul_forward %dx%d->%d tf32=%d", N, C, OC, tf32);
    report(what, tc_relerr_d(out, ro, (size_t)N * OC), limit);
    float *dx = malloc((size_t)N * C * 4), *dw = malloc((size_t)OC * C * 4), *db = malloc((size_t)OC * 4);
    double *rdx = calloc((size_t)N * C, 8), *rdw = calloc((size_t)OC * C, 8), *rdb = calloc((size_t)OC, 8);
    assert_int_equal(gpt_cuda_k_matmul_backward(dx, dw, db, dout, x, w, N, C, OC, tf32), 0);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double d = dout[(size_t)n * OC + o];
            rdb[o] += d;
            for (int i = 0; i < C; i++) {
                rdx[(size_t)n * C + i] += d * w[(size_t)o * C + i];
                rdw[(size_t)o * C + i] += d * x[(size_t)n * C + i];
            }
        }
    report("  dinp", tc_relerr_d(dx, rdx, (size_t)N * C), limit);
    report("  dw", tc_relerr_d(dw, rdw, (size_t)OC * C), limit);
    report("  dbias", tc_relerr_d(db, rdb, (size_t)OC), TC_LIMIT); /* our kernel, fp32 always */
    free(x);
    free(w);
    free(bias);
    free(dout);
    free(out);
    free(ro);
    free(dx);
    free(dw);
    free(db);
    free(rdx);
    free(rdw);
    free(rdb);
}

static void test_linear(void **state)
{
    (void)state;
    linear_case(150, 64, 192, 0, TC_LIMIT);
    linear_case(100, 256, 64, 0, TC_LIMIT);
    linear_case(150, 64, 192, 1, 1e-2); /* TF32: 10-bit mantissa products */
}

/* ---- attention ----------------------------------------------------------------------------- */

static void attention_case(int B, int T, int C, int NH, uint64_t seed)
{
    int hs = C / NH, N = B * T;
    size_t A = (size_t)B * NH * T * T;
    float *qkv = tc_randn((size_t)N * 3 * C, 1.0f, seed), *dout = tc_randn((size_t)N * C, 1.0f, seed + 1);
    float *out = malloc((size_t)N * C * 4), *att = malloc(A * 4), *dqkv = malloc((size_t)N * 3 * C * 4);
    double *ro = calloc((size_t)N * C, 8), *rp = calloc(A, 8), *rdq = calloc((size_t)N * 3 * C, 8);
    double *dp = calloc((size_t)T, 8), scale = 1.0 / sqrt((double)hs);
    assert_int_equal(gpt_cuda_k_attention_forward(out, att, qkv, B, T, C, NH, 0), 0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            double *P = rp + ((size_t)b * NH + h) * T * T;
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -1e300;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)q[d] * k[d];
                    P[(size_t)t * T + j] = s * scale;
                    if (s * scale > mx) mx = s * scale;
                }
                double z = 0;
                for (int j = 0; j <= t; j++) z += (P[(size_t)t * T + j] = exp(P[(size_t)t * T + j] - mx));
                for (int j = 0; j <= t; j++) P[(size_t)t * T + j] /= z;
                double *o = ro + ((size_t)b * T + t) * C + h * hs;
                for (int j = 0; j <= t; j++) {
                    const float *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    for (int d = 0; d < hs; d++) o[d] += P[(size_t)t * T + j] * v[d];
                }
            }
            /* backward of this head */
            for (int t = 0; t < T; t++) {
                const double *p = P + (size_t)t * T;
                const float *dy = dout + ((size_t)b * T + t) * C + h * hs;
                double s = 0;
                for (int j = 0; j <= t; j++) {
                    const float *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    double acc = 0;
                    for (int d = 0; d < hs; d++) acc += (double)dy[d] * v[d];
                    dp[j] = acc;
                    s += p[j] * acc;
                    double *dv = rdq + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    for (int d = 0; d < hs; d++) dv[d] += p[j] * dy[d];
                }
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double *dq = rdq + ((size_t)b * T + t) * 3 * C + h * hs;
                for (int j = 0; j <= t; j++) {
                    double ds = p[j] * (dp[j] - s) * scale;
                    const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double *dk = rdq + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    for (int d = 0; d < hs; d++) {
                        dq[d] += ds * k[d];
                        dk[d] += ds * q[d];
                    }
                }
            }
        }
    char what[80];
    snprintf(what, sizeof what, "attention_forward B=%d T=%d C=%d NH=%d", B, T, C, NH);
    report(what, tc_relerr_d(out, ro, (size_t)N * C), TC_LIMIT);
    report("  probabilities (0 above the diagonal)", tc_relerr_d(att, rp, A), TC_LIMIT);
    assert_int_equal(gpt_cuda_k_attention_backward(dqkv, dout, qkv, att, B, T, C, NH, 0), 0);
    report("attention_backward dqkv", tc_relerr_d(dqkv, rdq, (size_t)N * 3 * C), TC_LIMIT);
    /* dq, dk, dv separately: a layout slip in one third would hide behind the others' scale */
    for (int part = 0; part < 3; part++) {
        double num = 0, den = 0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < C; i++) {
                size_t k = (size_t)n * 3 * C + (size_t)part * C + i;
                double d = fabs(dqkv[k] - rdq[k]);
                if (!(d <= num)) num = d;
                if (fabs(rdq[k]) > den) den = fabs(rdq[k]);
            }
        static const char *nm[3] = {"  dq", "  dk", "  dv"};
        report(nm[part], den > 0 ? num / den : num, TC_LIMIT);
    }
    free(qkv);
    free(dout);
    free(out);
    free(att);
    free(dqkv);
    free(ro);
    free(rp);
    free(rdq);
    free(dp);
}

static void test_attention(void **state)
{
    (void)state;
    attention_case(2, 50, 64, 4, 40);
    attention_case(1, 70, 96, 3, 50); /* head size 32, T > 64 */
}

static void test_softmax(void **state)
{
    (void)state;
    int BH = 6, T = 50;
    size_t n = (size_t)BH * T * T;
    float *s = tc_randn(n, 3.0f, 60);
    double *r = malloc(n * 8);
    for (int row = 0; row < BH * T; row++) {
        int t = row % T;
        const float *x = s + (size_t)row * T;
        double mx = -1e300, z = 0;
        for (int j = 0; j <= t; j++) mx = x[j] > mx ? x[j] : mx;
        for (int j = 0; j <= t; j++) z += exp(x[j] - mx);
        for (int j = 0; j < T; j++) r[(size_t)row * T + j] = j <= t ? exp(x[j] - mx) / z : 0.0;
    }
    assert_int_equal(gpt_cuda_k_softmax_causal(s, BH, T), 0);
    report("softmax_causal", tc_relerr_d(s, r, n), TC_LIMIT);
    free(s);
    free(r);
}

/* ---- elementwise --------------------------------------------------------------------------- */

static void test_gelu_residual(void **state)
{
    (void)state;
    size_t n = 10007;
    float *x = tc_randn(n, 2.0f, 70), *d = tc_randn(n, 1.0f, 71), *out = malloc(n * 4), *dx = malloc(n * 4);
    double *ro = malloc(n * 8), *rd = malloc(n * 8);
    const double S = sqrt(2.0 / M_PI);
    for (size_t i = 0; i < n; i++) {
        double v = x[i], u = S * (v + 0.044715 * v * v * v), th = tanh(u);
        ro[i] = 0.5 * v * (1.0 + th);
        rd[i] = (0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * S * (1.0 + 3.0 * 0.044715 * v * v)) * d[i];
    }
    assert_int_equal(gpt_cuda_k_gelu_forward(out, x, n), 0);
    report("gelu_forward", tc_relerr_d(out, ro, n), TC_LIMIT);
    assert_int_equal(gpt_cuda_k_gelu_backward(dx, x, d, n), 0);
    report("gelu_backward", tc_relerr_d(dx, rd, n), TC_LIMIT);
    float *ref = malloc(n * 4);
    for (size_t i = 0; i < n; i++) ref[i] = x[i] + d[i];
    assert_int_equal(gpt_cuda_k_residual_forward(out, x, d, n), 0);
    report("residual_forward (exact)", tc_relerr(out, ref, n), 0);
    free(x);
    free(d);
    free(out);
    free(dx);
    free(ro);
    free(rd);
    free(ref);
}

/* ---- cross-entropy ------------------------------------------------------------------------- */

static void ce_case(int N, int V, uint64_t seed)
{
    float *lg = tc_randn((size_t)N * V, 2.0f, seed), *losses = malloc((size_t)N * 4);
    int *tg = tc_randint((size_t)N, V, seed + 1);
    double *rp = malloc((size_t)N * V * 8), *rl = malloc((size_t)N * 8), mean = 0;
    for (int n = 0; n < N; n++) {
        const float *x = lg + (size_t)n * V;
        double mx = -1e300, z = 0;
        for (int i = 0; i < V; i++) mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < V; i++) z += exp(x[i] - mx);
        for (int i = 0; i < V; i++) rp[(size_t)n * V + i] = exp(x[i] - mx) / z;
        rl[n] = log(z) - (x[tg[n]] - mx);
        mean += rl[n] / N;
    }
    float m = 0;
    assert_int_equal(gpt_cuda_k_crossentropy_forward(lg, losses, tg, N, V, &m), 0);
    char what[80];
    snprintf(what, sizeof what, "crossentropy_forward N=%d V=%d probs", N, V);
    report(what, tc_relerr_d(lg, rp, (size_t)N * V), TC_LIMIT);
    report("  losses", tc_relerr_d(losses, rl, (size_t)N), TC_LIMIT);
    report("  mean loss", fabs(m - mean) / mean, TC_LIMIT);
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < V; i++) rp[(size_t)n * V + i] /= N;
        rp[(size_t)n * V + tg[n]] -= 1.0 / N;
    }
    assert_int_equal(gpt_cuda_k_crossentropy_backward(lg, tg, N, V), 0);
    report("crossentropy_backward dlogits", tc_relerr_d(lg, rp, (size_t)N * V), TC_LIMIT);
    free(lg);
    free(losses);
    free(tg);
    free(rp);
    free(rl);
}

static void test_crossentropy(void **state)
{
    (void)state;
    ce_case(150, 97, 80);  /* 256-thread blocks */
    ce_case(20, 5003, 90); /* 1024-thread blocks */
}

/* ---- optimizer ----------------------------------------------------------------------------- */

static void test_clip(void **state)
{
    (void)state;
    size_t n = 100003;
    for (int k = 0; k < 2; k++) {
        double max_norm = k == 0 ? 1.0 : 1e9; /* clipping, then not */
        float *g = tc_randn(n, 0.05f, 100), *ref = malloc(n * 4);
        memcpy(ref, g, n * 4);
        double norm_cpu = gpt_clip_grad_norm(ref, n, max_norm, 1), norm_gpu = 0;
        assert_int_equal(gpt_cuda_k_clip(g, n, max_norm, &norm_gpu), 0);
        char what[80];
        snprintf(what, sizeof what, "clip max_norm %g: norm", max_norm);
        report(what, fabs(norm_gpu - norm_cpu) / norm_cpu, 1e-9);
        report("  clipped gradients", tc_relerr(g, ref, n), 1e-6);
        free(g);
        free(ref);
    }
}

/* AdamW of a GPT of `layers` layers against the CPU's step: 8 runs of tensors with the same decay a layer
 * (a 2-D weight decays, the 1-D tensors between weights do not), up to 240 per launch */
static void adamw_check(int layers)
{
    gpt_config c = {.layers = layers, .heads = 4, .dim = 32, .ctx = 16, .vocab = 50};
    model_tensor *t;
    int nt;
    size_t n;
    assert_int_equal(gpt_layout(&c, &t, &nt, &n, NULL, 0), 0);
    float *p = tc_randn(n, 0.1f, 110), *g = tc_randn(n, 0.01f, 111), *m = tc_randn(n, 0.001f, 112),
          *v = tc_randn(n, 1.0f, 113);
    for (size_t i = 0; i < n; i++) v[i] = 1e-5f * v[i] * v[i];
    float *p2 = malloc(n * 4), *m2 = malloc(n * 4), *v2 = malloc(n * 4), *p0 = malloc(n * 4);
    memcpy(p0, p, n * 4);
    memcpy(p2, p, n * 4);
    memcpy(m2, m, n * 4);
    memcpy(v2, v, n * 4);
    gpt_adamw_step(t, nt, p2, g, m2, v2, 7, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1);
    assert_int_equal(gpt_cuda_k_adamw(t, nt, p, g, m, v, 7, 1e-3, 0.9, 0.95, 1e-8, 0.1), 0);
    /* compare the updates, not the parameters (which would hide errors behind their size) */
    float *u1 = malloc(n * 4), *u2 = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        u1[i] = p[i] - p0[i];
        u2[i] = p2[i] - p0[i];
    }
    printf("  %d layers (%s launch):\n", layers, layers > 29 ? "more than one" : "one");
    report("adamw update (decay on matrices only)", tc_relerr(u1, u2, n), 1e-5);
    report("  m", tc_relerr(m, m2, n), 1e-6);
    report("  v", tc_relerr(v, v2, n), 1e-6);
    free(t);
    free(p);
    free(g);
    free(m);
    free(v);
    free(p2);
    free(m2);
    free(v2);
    free(p0);
    free(u1);
    free(u2);
}

static void test_adamw(void **state)
{
    (void)state;
    adamw_check(2);
    adamw_check(40); /* 322 runs: two launches */
}

/* ---- the warp primitives of the tiled kernels (worker/cuda/warp_mma.h) ------------------------ */

/* the same kernel and assertions as tests/test_simt_emu.cc: if both pass, the CPU lane emulator that
 * checks the flash kernels there implements this GPU's fragment layouts */
static void test_warp_mma(void **state)
{
    (void)state;
    float A[256], B[128], C[128], B2[128], frag[128], ldm[128], reuse[128], sums[32];
    wmc_inputs(A, B, C, B2);
    assert_int_equal(gpt_cuda_k_warp_mma_check(frag, ldm, reuse, sums, A, B, C, B2), 0);
    int bad = wmc_count_bad(frag, ldm, reuse, sums, A, B, C, B2);
    printf("  warp mma, ldmatrix, fragment reuse, shuffle: %d of 416 outputs wrong\n", bad);
    assert_int_equal(bad, 0);
}

#endif

int main(void)
{
    cuda_test_require_device("test_cuda_kernels");
#ifdef DILOCO_HAVE_CUDA
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoder),      cmocka_unit_test(test_layernorm), cmocka_unit_test(test_linear),
        cmocka_unit_test(test_attention),    cmocka_unit_test(test_softmax),   cmocka_unit_test(test_gelu_residual),
        cmocka_unit_test(test_crossentropy), cmocka_unit_test(test_clip),      cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_warp_mma),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    return 77;
#endif
}
