/* gpt_cuda_flash_check.cu: the check on the device that --attention auto trusts the tensor-core flash
 * kernels by (gpt_cuda_set_attention). Their fragment layouts were checked on the CPU under the lane
 * emulator and on a GPU by test_cuda_kernels' test_warp_mma; a GPU, driver or PTX JIT where they still
 * went wrong would train on wrong gradients silently. So before auto picks flash for a head size, one
 * small causal attention (2 heads, 80 tokens: a full and a partial tile) runs forward and backward through
 * both the flash kernels and the fused ones (attention_rows.cuh: fp32 dot products, no tensor cores), and
 * flash is taken only if the two agree within FLASH_TRUST_LIMIT. The verdict is kept per head size for the
 * process: a few milliseconds once.
 *
 *   l_flash_mma_verify   the comparison itself, with a limit (the tests give 0 to see the refusal)
 *   l_flash_mma_trusted  its verdict at FLASH_TRUST_LIMIT, computed once per head size */
#include "gpt_cuda_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* test_cuda_bf16's limit for flash against the fused kernels: bf16 rounding of q, k, v, P and dS gives
 * 1.5e-3 .. 6.3e-3 (tools/attention_bf16_error.py flash, 100 seeds); a layout or mask error gives O(1) */
#define FLASH_TRUST_LIMIT 2e-2
#define CHECK_T 80
#define CHECK_NH 2

/* max|a - b| / max|b|; infinite when either holds a NaN or an infinity */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double d = fabs((double)a[i] - b[i]);
        num = d > num ? d : num;
        den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
    }
    return den > 0 ? num / den : num;
}

/* values in [-1, 1) from a fixed sequence: the same check everywhere */
static void fill(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * rng_uniform(&seed) - 1.0f;
}

int l_flash_mma_verify(cudaStream_t st, int hs, double limit, char *note, size_t notelen, char *err, size_t errlen)
{
    const int T = CHECK_T, NH = CHECK_NH, C = NH * hs;
    if (l_flash_mma_check(1, T, C, NH, err, errlen)) return -1;
    if (errlen) err[0] = 0; /* (so a failed launch's message is told from none) */
    const size_t n3 = (size_t)T * 3 * C, n1 = (size_t)T * C, nl = (size_t)T * NH;
    /* host: qkv, dout | out of fused, flash | dqkv of fused, flash; the device the same, then lse x2, dsum */
    const size_t nhost = n3 + n1 + 2 * n1 + 2 * n3, ndev = nhost + 3 * nl;
    float *h = (float *)malloc(nhost * sizeof(float)), *d = NULL;
    if (!h || cudaMalloc((void **)&d, ndev * sizeof(float)) != cudaSuccess) {
        free(h);
        err_set(err, errlen, "gpt cuda: no memory for the flash check (%zu floats)", ndev);
        return -1;
    }
    fill(h, n3, 1u + (uint64_t)hs);
    fill(h + n3, n1, 7u + (uint64_t)hs);
    const float *qkv = d, *dout = d + n3;
    float *out = d + n3 + n1, *dqkv = out + 2 * n1, *lse = dqkv + 2 * n3, *dsum = lse + 2 * nl;
    float *hout = h + n3 + n1, *hdqkv = hout + 2 * n1;
    ctx x = {st, NULL, err, errlen, NULL, NULL};
    int rc = cudaMemcpyAsync(d, h, (n3 + n1) * sizeof(float), cudaMemcpyHostToDevice, st) != cudaSuccess ||
             l_flash_forward(&x, out, lse, qkv, 1, T, C, NH) ||
             l_flash_backward(&x, dqkv, dout, qkv, out, lse, dsum, 1, T, C, NH) ||
             l_flash_mma_forward(&x, out + n1, lse + nl, qkv, 1, T, C, NH) ||
             l_flash_mma_backward(&x, dqkv + n3, dout, qkv, out + n1, lse + nl, dsum, 1, T, C, NH) ||
             cudaMemcpyAsync(hout, out, (2 * n1 + 2 * n3) * sizeof(float), cudaMemcpyDeviceToHost, st) != cudaSuccess ||
             cudaStreamSynchronize(st) != cudaSuccess
                 ? -1
                 : 0;
    if (rc) {
        if (!err[0]) err_set(err, errlen, "gpt cuda: the flash check: %s", cudaGetErrorString(cudaGetLastError()));
    } else {
        double ro = rel_diff(hout + n1, hout, n1), rd = rel_diff(hdqkv + n3, hdqkv, n3);
        rc = ro <= limit && rd <= limit;
        snprintf(note, notelen,
                 "%s on this device, head size %d: out rel %.2g, dqkv rel %.2g against the fused kernels (limit %g)",
                 rc ? "flash checked" : "flash FAILED its check", hs, ro, rd, limit);
    }
    cudaFree(d);
    free(h);
    return rc;
}

/* the verdicts so far, by head size / 16 (1..8) */
static pthread_mutex_t g_trust_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_trust[9];         /* 0 unknown, 1 trusted, -1 not */
static char g_trust_note[9][192];

int l_flash_mma_trusted(cudaStream_t st, int hs, char *note, size_t notelen, char *err, size_t errlen)
{
    if (l_flash_mma_check(1, CHECK_T, CHECK_NH * hs, CHECK_NH, err, errlen)) return -1;
    int k = hs / 16, rc = 0;
    pthread_mutex_lock(&g_trust_mu);
    if (!g_trust[k]) {
        rc = l_flash_mma_verify(st, hs, FLASH_TRUST_LIMIT, g_trust_note[k], sizeof g_trust_note[k], err, errlen);
        if (rc >= 0) g_trust[k] = rc ? 1 : -1;
    }
    if (rc >= 0) {
        rc = g_trust[k] > 0;
        snprintf(note, notelen, "%s", g_trust_note[k]);
    }
    pthread_mutex_unlock(&g_trust_mu);
    return rc;
}
