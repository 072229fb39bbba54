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
static void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
}

/* device buffers of the check: qkv, dout, and per attention out, lse, dqkv; dsum shared */
typedef struct {
    float *qkv, *dout, *out[2], *lse[2], *dqkv[2], *dsum;
} check_bufs;

static int run_both(ctx *x, check_bufs *b, int C)
{
    const int T = CHECK_T, NH = CHECK_NH;
    return l_flash_forward(x, b->out[0], b->lse[0], b->qkv, 1, T, C, NH) ||
           l_flash_backward(x, b->dqkv[0], b->dout, b->qkv, b->out[0], b->lse[0], b->dsum, 1, T, C, NH) ||
           l_flash_mma_forward(x, b->out[1], b->lse[1], b->qkv, 1, T, C, NH) ||
           l_flash_mma_backward(x, b->dqkv[1], b->dout, b->qkv, b->out[1], b->lse[1], b->dsum, 1, T, C, NH);
}

int l_flash_mma_verify(cudaStream_t st, int hs, double limit, char *note, size_t notelen, char *err, size_t errlen)
{
    const int C = CHECK_NH * hs;
    if (errlen) err[0] = 0;
    const size_t n3 = (size_t)CHECK_T * 3 * C, n1 = (size_t)CHECK_T * C, nl = (size_t)CHECK_T * CHECK_NH;
    if (l_flash_mma_check(1, CHECK_T, C, CHECK_NH, err, errlen)) return -1;
    /* one allocation: qkv, dout, out x2, dqkv x2, lse x2, dsum */
    size_t total = n3 + n1 + 2 * n1 + 2 * n3 + 3 * nl;
    float *dev = NULL, *host = (float *)malloc((n3 + n1 + 2 * n1 + 2 * n3) * sizeof(float));
    if (!host) {
        err_set(err, errlen, "gpt cuda: out of memory for the flash check");
        return -1;
    }
    fill(host, n3, 1u + (uint32_t)hs);
    fill(host + n3, n1, 7u + (uint32_t)hs);
    int rc = -1;
    ctx x = {st, NULL, err, errlen};
    if (cudaMalloc((void **)&dev, total * sizeof(float)) != cudaSuccess) {
        err_set(err, errlen, "gpt cuda: cudaMalloc of the flash check (%zu floats) failed", total);
        goto done;
    }
    {
        check_bufs b = {dev, dev + n3, {dev + n3 + n1, dev + n3 + 2 * n1}, {NULL, NULL}, {NULL, NULL}, NULL};
        b.dqkv[0] = dev + n3 + 3 * n1;
        b.dqkv[1] = b.dqkv[0] + n3;
        b.lse[0] = b.dqkv[1] + n3;
        b.lse[1] = b.lse[0] + nl;
        b.dsum = b.lse[1] + nl;
        float *out = host + n3 + n1, *dqkv = out + 2 * n1;
        if (cudaMemcpyAsync(dev, host, (n3 + n1) * sizeof(float), cudaMemcpyHostToDevice, st) != cudaSuccess ||
            run_both(&x, &b, C) ||
            cudaMemcpyAsync(out, b.out[0], 2 * n1 * sizeof(float), cudaMemcpyDeviceToHost, st) != cudaSuccess ||
            cudaMemcpyAsync(dqkv, b.dqkv[0], 2 * n3 * sizeof(float), cudaMemcpyDeviceToHost, st) != cudaSuccess ||
            cudaStreamSynchronize(st) != cudaSuccess) {
            if (!err[0]) err_set(err, errlen, "gpt cuda: the flash check: %s", cudaGetErrorString(cudaGetLastError()));
            goto done;
        }
        double ro = rel_diff(out + n1, out, n1), rd = rel_diff(dqkv + n3, dqkv, n3);
        rc = ro <= limit && rd <= limit;
        snprintf(note, notelen, "%s on this device, head size %d: out rel %.2g, dqkv rel %.2g against the fused kernels "
                 "(limit %g)", rc ? "flash checked" : "flash FAILED its check", hs, ro, rd, limit);
    }
done:
    cudaFree(dev);
    free(host);
    return rc;
}

/* the verdicts so far, by head size / 16 (1..8) */
static pthread_mutex_t g_trust_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_trust[9];         /* 0 unknown, 1 trusted, -1 not */
static char g_trust_note[9][192];

int l_flash_mma_trusted(cudaStream_t st, int hs, char *note, size_t notelen, char *err, size_t errlen)
{
    if (hs < 16 || hs > 128 || hs % 16) return l_flash_mma_verify(st, hs, FLASH_TRUST_LIMIT, note, notelen, err, errlen);
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
