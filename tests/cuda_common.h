/* cuda_common.h: helpers shared by the tests/test_cuda_*.c programs (GPU skip, random data,
 * relative errors). Header-only: every test is one .c file. */
#ifndef DILOCO_TEST_CUDA_COMMON_H
#define DILOCO_TEST_CUDA_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/util.h" /* splitmix64 */

#ifdef DILOCO_HAVE_CUDA
#include "cuda/gpt_cuda.h"
#endif

/* Exit 77 (skipped, tests/run.sh) when there is no backend or no device; the message is the last
 * line of the log, which run.sh prints. */
static inline void cuda_test_require_device(const char *prog)
{
#ifdef DILOCO_HAVE_CUDA
    char why[256] = "";
    if (gpt_cuda_device_count(why, sizeof why) == 0) {
        printf("%s: no CUDA device: skipped (%s)\n", prog, why);
        fflush(stdout);
        exit(77);
    }
    char name[256];
    double fp32 = 0, tf32 = 0;
    if (gpt_cuda_device_info(name, sizeof name, &fp32, &tf32) == 0) printf("%s: device %s\n", prog, name);
#else
    printf("%s: built without CUDA (nvcc not found at build time): skipped\n", prog);
    fflush(stdout);
    exit(77);
#endif
}

static inline double tc_u01(uint64_t *s)
{
    return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static inline float tc_normal(uint64_t *s)
{
    double u1 = tc_u01(s), u2 = tc_u01(s);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}
static inline float *tc_randn(size_t n, float scale, uint64_t seed)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * tc_normal(&seed);
    return x;
}
static inline int *tc_randint(size_t n, int hi, uint64_t seed)
{
    int *x = malloc((n ? n : 1) * sizeof(int));
    for (size_t i = 0; i < n; i++) x[i] = (int)(splitmix64(&seed) % (uint64_t)hi);
    return x;
}

/* max|a-b| / max|b| (0 when both are all zero) */
static inline double tc_relerr(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]), m = fabs((double)b[i]);
        if (!(d <= num)) num = d; /* NaN propagates */
        if (m > den) den = m;
    }
    return den > 0 ? num / den : num;
}
static inline double tc_relerr_d(const float *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]), m = fabs(b[i]);
        if (!(d <= num)) num = d;
        if (m > den) den = m;
    }
    return den > 0 ? num / den : num;
}

/* max over elements of |u_a - u_b| / max|u_b| for the updates u = p - p0, skipping elements whose
 * gradient g is below 1e-5 of the tensor's largest (*skipped counts them): the measure test_cuda_step
 * used for AdamW before issue 27, kept for tests/test_adamw_noise.c, which shows why it is not strict. */
static inline double tc_update_err(const float *p_a, const float *p_b, const float *p0, const float *g, size_t n,
                                   size_t *skipped)
{
    double gmax = 0, umax = 0, num = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(g[i]) > gmax) gmax = fabs(g[i]);
        if (fabs((double)p_b[i] - p0[i]) > umax) umax = fabs((double)p_b[i] - p0[i]);
    }
    for (size_t i = 0; i < n; i++) {
        if (fabs(g[i]) < 1e-5 * gmax) {
            (*skipped)++;
            continue;
        }
        double d = fabs(((double)p_a[i] - p0[i]) - ((double)p_b[i] - p0[i]));
        if (!(d <= num)) num = d;
    }
    return umax > 0 ? num / umax : num;
}

#define TC_LIMIT 1e-4 /* the limit for fp32 (TF32 off) */

#endif
