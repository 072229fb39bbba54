/* outer_dn.c: Delayed Nesterov kernels (see outer_dn.h). Plain element-wise loops: every expression
 * is the documented formula, rounded once per operation (built with -ffp-contract=off). */
#include "outer_dn.h"

#include <string.h>

#include "outer.h"

static void paper_step(float *restrict theta, float *restrict m, float *restrict buf, const float *restrict g,
                       size_t n, int flush, float N, float lr, float mu) {
    if (!flush) {
        for (size_t i = 0; i < n; i++) {
            buf[i] = buf[i] + g[i];
            theta[i] = theta[i] - lr * (g[i] / N);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float b = buf[i] + g[i];
        m[i] = mu * m[i] + b / N;
        theta[i] = theta[i] - lr * (g[i] / N + mu * m[i]);
        buf[i] = 0.0f;
    }
}

static void forgather_step(float *restrict theta, float *restrict m, float *restrict buf, const float *restrict g,
                           size_t n, int flush, uint64_t t, uint32_t N, float lr, float mu, int nesterov) {
    if (!flush) {
        for (size_t i = 0; i < n; i++) {
            buf[i] = buf[i] + g[i];
            theta[i] = theta[i] - lr * g[i];
        }
        return;
    }
    for (size_t i = 0; i < n; i++) buf[i] = (buf[i] + g[i]) / (float)N;
    /* the first averaged step (t == N) starts the momentum, as torch's SGD does */
    outer_sgd_step(theta, m, t == N, buf, n, lr, mu, nesterov);
    memset(buf, 0, n * sizeof *buf);
}

void outer_dn_step(int variant, float *theta, float *m, float *buf, const float *g, size_t n, uint64_t t,
                   uint32_t N, float lr, float mu, int nesterov) {
    int flush = t % N == 0;
    if (variant == DN_FORGATHER) forgather_step(theta, m, buf, g, n, flush, t, N, lr, mu, nesterov);
    else paper_step(theta, m, buf, g, n, flush, (float)N, lr, mu);
}
