/* attention_ref.h: causal multi-head attention forward and backward in double precision, on the layout
 * of the CUDA GPT (qkv (B, T, 3C): q, k, v of head h at columns h hs, C + h hs, 2C + h hs; out (B, T, C);
 * lse (B, NH, T), the natural log-sum-exp of each row's scaled scores). The reference of the emulated
 * attention kernels (tests/test_attention_rows_emu.cc, tests/test_flash_emu.cc); a caller that wants the
 * bf16 operand rounding of a kernel rounds qkv and dout before calling. C and C++. */
#ifndef DILOCO_ATTENTION_REF_H
#define DILOCO_ATTENTION_REF_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* n near-normal values of standard deviation sd (a sum of 4 uniforms from a xorshift of seed): test inputs */
static inline float *attn_ref_randn(size_t n, float sd, unsigned seed)
{
    float *x = (float *)malloc(n * sizeof(float));
    uint64_t s = 0x2545f4914f6cdd1dull * (seed + 1);
    for (size_t i = 0; i < n; i++) {
        double u = 0.0;
        for (int k = 0; k < 4; k++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            u += (double)(s >> 11) / 9007199254740992.0 - 0.5;
        }
        x[i] = (float)(u * sd * 1.7320508);
    }
    return x;
}

static inline size_t attn_ref_at(int b, int t, int T, int ld)
{
    return ((size_t)b * T + t) * (size_t)ld;
}

/* p (t + 1 entries) = the softmax of query t's scaled scores over keys 0..t of head h; returns the lse */
static inline double attn_ref_probs(double *p, const float *qkv, int b, int h, int t, int T, int C, int NH)
{
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs), m = -INFINITY, sum = 0.0;
    const float *q = qkv + attn_ref_at(b, t, T, 3 * C) + (size_t)h * hs;
    for (int s = 0; s <= t; s++) {
        const float *k = qkv + attn_ref_at(b, s, T, 3 * C) + C + (size_t)h * hs;
        double d = 0.0;
        for (int i = 0; i < hs; i++) d += (double)q[i] * k[i];
        p[s] = d * scale;
        if (p[s] > m) m = p[s];
    }
    for (int s = 0; s <= t; s++) sum += p[s] = exp(p[s] - m);
    for (int s = 0; s <= t; s++) p[s] /= sum;
    return m + log(sum);
}

static inline void attn_ref_forward(double *out, double *lse, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH;
    double *p = (double *)malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                lse[((size_t)b * NH + h) * T + t] = attn_ref_probs(p, qkv, b, h, t, T, C, NH);
                double *o = out + attn_ref_at(b, t, T, C) + (size_t)h * hs;
                for (int i = 0; i < hs; i++) {
                    double acc = 0.0;
                    for (int s = 0; s <= t; s++) acc += p[s] * qkv[attn_ref_at(b, s, T, 3 * C) + 2 * C + h * hs + i];
                    o[i] = acc;
                }
            }
    free(p);
}

/* dqkv (B, T, 3C), written whole: dS = P (dP - rowsum(P dP)), dq = scale dS k, dk = scale dS^T q, dv = P^T dout */
static inline void attn_ref_backward(double *dqkv, const float *dout, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *p = (double *)malloc((size_t)T * sizeof(double)), *dp = (double *)malloc((size_t)T * sizeof(double));
    for (size_t i = 0; i < (size_t)B * T * 3 * C; i++) dqkv[i] = 0.0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                attn_ref_probs(p, qkv, b, h, t, T, C, NH);
                const float *dy = dout + attn_ref_at(b, t, T, C) + (size_t)h * hs;
                double D = 0.0;
                for (int s = 0; s <= t; s++) {
                    const float *v = qkv + attn_ref_at(b, s, T, 3 * C) + 2 * C + (size_t)h * hs;
                    dp[s] = 0.0;
                    for (int i = 0; i < hs; i++) dp[s] += (double)dy[i] * v[i];
                    D += p[s] * dp[s];
                }
                const float *q = qkv + attn_ref_at(b, t, T, 3 * C) + (size_t)h * hs;
                double *dq = dqkv + attn_ref_at(b, t, T, 3 * C) + (size_t)h * hs;
                for (int s = 0; s <= t; s++) {
                    double ds = p[s] * (dp[s] - D);
                    const float *k = qkv + attn_ref_at(b, s, T, 3 * C) + C + (size_t)h * hs;
                    double *dk = dqkv + attn_ref_at(b, s, T, 3 * C) + C + (size_t)h * hs, *dv = dk + C;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += scale * ds * k[i];
                        dk[i] += scale * ds * q[i];
                        dv[i] += p[s] * dy[i];
                    }
                }
            }
    free(p);
    free(dp);
}

/* max |x - ref| / max |ref| over n values */
static inline double attn_ref_relerr(const float *x, const double *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - ref[i]), r = fabs(ref[i]);
        if (d > num || d != d) num = d;
        if (r > den) den = r;
    }
    return den > 0.0 ? num / den : num;
}

#endif
