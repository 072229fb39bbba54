/* test_attention_rows_emu: the fused causal attention of the bf16 CUDA GPT (--attention fused,
 * worker/cuda/attention_rows.cuh, the bf16 default), run on the CPU under the lane emulator
 * (tests/tools/simt_emu.h) with the launch shape l_flash_forward / l_flash_backward use (8 warps of 32
 * per block, one warp per row), against the float64 reference of tests/attention_ref.h.
 *
 * The kernels compute in fp32 from fp32 inputs (their bf16 is only the products around them), so the
 * bound is fp32's: rel <= 1e-5 for out, lse and each of dq, dk, dv. Shapes: T 1 (one key), 33 (rows past
 * a block's 8 warps), head sizes 16, 64 (GPT-2 small's) and 96 (three values per lane), two batches.
 * Each case runs under two interleavings, which must give the same bytes (the kernels have no atomics).
 * No GPU has run these kernels yet (docs/cuda.md); test_cuda_bf16 checks them there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "emu_check.h"
#include "simt_emu.h"
#include "attention_rows.cuh"

static void report(const char *what, double rel, double limit)
{
    printf("  %-44s rel err %.3g (limit %.0e)\n", what, rel, limit);
    CHECK(rel <= limit, "%s: rel err %g over %g", what, rel, limit);
}

/* grid of l_flash_*: one warp per row, 8 rows per block of 256 threads */
static simt_dim3 row_grid(int B, int T, int NH)
{
    unsigned rows = (unsigned)(B * NH * T);
    return simt_dim3{(rows + 7) / 8, 1, 1};
}

static void run_case(int B, int T, int C, int NH)
{
    size_t N = (size_t)B * T, R = (size_t)B * NH * T;
    float scale = 1.0f / sqrtf((float)(C / NH));
    float *qkv = attn_ref_randn(N * 3 * C, 1.0f, (unsigned)(T * 7 + C));
    float *dout = attn_ref_randn(N * C, 1.0f, (unsigned)(T + C));
    float *out = (float *)calloc(N * C, 4), *lse = (float *)calloc(R, 4), *dsum = (float *)calloc(R, 4);
    float *dqkv[2] = {(float *)calloc(N * 3 * C, 4), (float *)calloc(N * 3 * C, 4)};
    double *rout = (double *)malloc(N * C * 8), *rlse = (double *)malloc(R * 8), *rd = (double *)malloc(N * 3 * C * 8);
    attn_ref_forward(rout, rlse, qkv, B, T, C, NH);
    attn_ref_backward(rd, dout, qkv, B, T, C, NH);
    char err[256] = "", name[96];
    simt_dim3 g = row_grid(B, T, NH);
    for (unsigned seed = 1; seed <= 2; seed++) {
        int rc =
            simt_run(g, 256, seed, err, sizeof err, flash_forward_k, out, lse, (const float *)qkv, B, T, C, NH, scale);
        rc = rc ? rc
                : simt_run(g, 256, seed, err, sizeof err, flash_dsum_k, dsum, (const float *)dout, (const float *)out,
                           B, T, C, NH);
        float *d = dqkv[seed - 1];
        rc = rc ? rc
                : simt_run(g, 256, seed, err, sizeof err, flash_dq_k, d, (const float *)dout, (const float *)qkv,
                           (const float *)lse, (const float *)dsum, B, T, C, NH, scale);
        rc = rc ? rc
                : simt_run(g, 256, seed, err, sizeof err, flash_dkv_k, d, (const float *)dout, (const float *)qkv,
                           (const float *)lse, (const float *)dsum, B, T, C, NH, scale);
        if (rc) {
            CHECK(0, "B %d T %d C %d NH %d: %s", B, T, C, NH, err);
            return;
        }
    }
    snprintf(name, sizeof name, "B %d T %d hs %d: out", B, T, C / NH);
    report(name, attn_ref_relerr(out, rout, N * C), 1e-5);
    report("  lse", attn_ref_relerr(lse, rlse, R), 1e-5);
    /* dq, dk, dv separately: one wrong block must not hide behind another's scale */
    float *part = (float *)malloc(N * C * 4);
    double *rpart = (double *)malloc(N * C * 8);
    const char *names[3] = {"  dq", "  dk", "  dv"};
    for (int j = 0; j < 3; j++) {
        for (size_t n = 0; n < N; n++)
            for (int i = 0; i < C; i++) {
                part[n * C + i] = dqkv[0][n * 3 * C + (size_t)j * C + i];
                rpart[n * C + i] = rd[n * 3 * C + (size_t)j * C + i];
            }
        report(names[j], attn_ref_relerr(part, rpart, N * C), 1e-5);
    }
    int same = memcmp(dqkv[0], dqkv[1], N * 3 * C * 4) == 0;
    CHECK(same, "B %d T %d hs %d: two interleavings gave different bytes", B, T, C / NH);
    free(qkv), free(dout), free(out), free(lse), free(dsum), free(dqkv[0]), free(dqkv[1]);
    free(rout), free(rlse), free(rd), free(part), free(rpart);
}

int main(void)
{
    run_case(1, 1, 32, 2);
    run_case(2, 33, 32, 2);
    run_case(1, 20, 128, 2);
    run_case(1, 12, 96, 1);
    return emu_finish("the fused row attention matches float64 forward and backward under the emulator");
}
