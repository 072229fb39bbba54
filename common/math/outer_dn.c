/* outer_dn.c: Delayed Nesterov kernels (see outer_dn.h). Plain element-wise loops: every expression
 * is the documented formula, each operation rounded once (built with -ffp-contract=off), a + alpha*b
 * included where torch's SGD has that form (add_alpha, outer_fma.h; outer_dn.h lists them). */
#include "math/outer_dn.h"

#include <math.h>
#include <string.h>

#include "math/outer.h"
#include "math/outer_fma.h"

OUTER_INLINE void paper_step(float *restrict theta, float *restrict m, float *restrict buf, const float *restrict g,
                             size_t n, int flush, float N, float lr, float mu)
{
    if (!flush) {
        for (size_t i = 0; i < n; i++) {
            buf[i] = buf[i] + g[i];
            theta[i] = add_alpha(theta[i], g[i] / N, -lr);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float b = buf[i] + g[i];
        m[i] = mu * m[i] + b / N;
        theta[i] = add_alpha(theta[i], add_alpha(g[i] / N, m[i], mu), -lr);
        buf[i] = 0.0f;
    }
}

OUTER_INLINE void forgather_step(float *restrict theta, float *restrict m, float *restrict buf, const float *restrict g,
                                 size_t n, int flush, uint64_t t, uint32_t N, float lr, float mu, int nesterov)
{
    if (!flush) {
        for (size_t i = 0; i < n; i++) {
            buf[i] = buf[i] + g[i];
            theta[i] = add_alpha(theta[i], g[i], -lr);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) buf[i] = (buf[i] + g[i]) / (float)N;
    /* the first averaged step (t == N) starts the momentum, as torch's SGD does */
    outer_sgd_step(theta, m, t == N, buf, n, lr, mu, nesterov);
    memset(buf, 0, n * sizeof *buf);
}

OUTER_HOT void outer_dn_step(int variant, float *theta, float *m, float *buf, const float *g, size_t n, uint64_t t,
                             uint32_t N, float lr, float mu, int nesterov)
{
    int flush = t % N == 0;
    if (variant == DN_FORGATHER)
        forgather_step(theta, m, buf, g, n, flush, t, N, lr, mu, nesterov);
    else
        paper_step(theta, m, buf, g, n, flush, (float)N, lr, mu);
}

double outer_stale_weight(int rule, int64_t tau, int64_t ref)
{
    if (rule == STALE_W_NONE || tau <= ref) return 1.0;
    double r = (1.0 + (double)ref) / (1.0 + (double)tau);
    return rule == STALE_W_SQRT ? sqrt(r) : r;
}

int outer_stale_rule_parse(const char *name)
{
    static const char *const names[] = {"none", "inverse", "sqrt"};
    for (int i = 0; i < 3; i++)
        if (name != NULL && strcmp(name, names[i]) == 0) return i;
    return -1;
}

int outer_async_rule_parse(const char *name)
{
    static const char *const names[] = {"plain", "rebase"};
    for (int i = 0; i < 2; i++)
        if (name != NULL && strcmp(name, names[i]) == 0) return i;
    return -1;
}

float outer_lookahead_coef(double g, int64_t stale, int64_t moved)
{
    return moved > 0 && stale > 0 ? (float)(g * (double)stale / (double)moved) : 0.0f;
}

OUTER_HOT void outer_lookahead(float *start, const float *got, const float *prev, float c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float d = got[i] - prev[i];
        float cd = c * d;
        start[i] = got[i] + cd;
    }
}

OUTER_HOT void outer_rebase(float *g, const float *now, const float *base, float a, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float d = now[i] - base[i];
        float ad = a * d;
        g[i] = g[i] + ad;
    }
}
