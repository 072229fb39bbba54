/* test_flash_emu: the tensor-core flash attention of the bf16 CUDA GPT (--attention flash,
 * worker/cuda/flash_mma.cuh) run on the CPU under the lane emulator (tests/tools/simt_emu.h), with the
 * launches of l_flash_mma_forward / l_flash_mma_backward (gpt_cuda_flash.cu): grid (ceil(T/64), B*NH) of
 * 128 threads; D = rowsum(dout * out) by the fused attention's flash_dsum_k (attention_rows.cuh), as the
 * launcher's l_flash_dsum; then the dk/dv and dq kernels. Against the float64 reference of
 * tests/attention_ref.h on the same bf16-rounded q, k, v and dout, so what is left is the kernels' own
 * rounding of P and dS to bf16 (2^-9 relative each) and fp32 arithmetic.
 *
 * Limits: out rel <= 5e-3, each of dq, dk, dv alone rel <= 2.5e-2, lse rel <= 1e-5 (fp32 sums of
 * products of bf16 values, which are exact). tools/attention_bf16_error.py emu emulates these roundings
 * on these shapes (torch on the CPU, 100 seeds each): out rel <= 1.5e-3, the worst of dq, dk, dv alone
 * <= 8.2e-3; the limits leave a margin of 3, and a wrong fragment, mask or tile offset gives rel ~1.
 * Also: every element of out, lse and dqkv is written (they start as NaN) and nothing past them (a
 * guard of NaN-boxed sentinels after each); two interleavings of the threads give the same bytes (no
 * atomics, fixed summation order). Shapes: T 1, 17, 64, 70, 100, 129, 130 (one to three tiles of 64,
 * partial ones), head sizes 16, 48, 64, 96, 128, one and two batches, one and two heads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "emu_check.h"
#include "simt_emu.h"
#include "attention_rows.cuh"
#include "flash_mma.cuh"

#define GUARD 64 /* floats after each output that no kernel may touch */
#define OUT_LIMIT 5e-3
#define GRAD_LIMIT 2.5e-2
#define LSE_LIMIT 1e-5

static void check(const char *what, double rel, double limit)
{
    printf("  %-36s rel err %.3g (limit %.0e)\n", what, rel, limit);
    CHECK(rel <= limit, "%s: rel err %g over %g", what, rel, limit);
}

/* n floats of NaN and a guard of sentinels after them */
static float *outputs(size_t n)
{
    float *x = (float *)malloc((n + GUARD) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    for (size_t i = n; i < n + GUARD; i++) x[i] = -12345.0f;
    return x;
}

static int guard_intact(const float *x, size_t n)
{
    for (size_t i = n; i < n + GUARD; i++)
        if (x[i] != -12345.0f) return 0;
    return 1;
}

/* the kernels of l_flash_mma_forward and l_flash_mma_backward, in their order, under one interleaving */
template <int HS>
static int flash_emulated(float *out, float *lse, float *dqkv, float *dsum, const float *qkv, const float *dout, int B,
                          int T, int NH, unsigned seed, char *err, size_t errlen)
{
    int C = NH * HS;
    float scale = 1.0f / sqrtf((float)HS);
    simt_dim3 grid{(unsigned)((T + FLASH_ROWS - 1) / FLASH_ROWS), (unsigned)(B * NH), 1};
    simt_dim3 rows{(unsigned)((B * NH * T + 7) / 8), 1, 1}; /* flash_dsum_k: a warp per row, 8 per block */
    if (simt_run(grid, FLASH_THREADS, seed, err, errlen, flash_mma_forward_k<HS>, out, lse, qkv, T, NH, scale) ||
        simt_run(rows, 256, seed, err, errlen, flash_dsum_k, dsum, dout, (const float *)out, B, T, C, NH) ||
        simt_run(grid, FLASH_THREADS, seed, err, errlen, flash_mma_dkv_k<HS>, dqkv, dout, qkv, (const float *)lse,
                 (const float *)dsum, T, NH, scale) ||
        simt_run(grid, FLASH_THREADS, seed, err, errlen, flash_mma_dq_k<HS>, dqkv, dout, qkv, (const float *)lse,
                 (const float *)dsum, T, NH, scale))
        return -1;
    return 0;
}

/* column block j (0: q, 1: k, 2: v) of dqkv (N, 3C) against the reference's */
static double part_err(const float *dqkv, const double *ref, size_t N, int C, int j)
{
    float *part = (float *)malloc(N * C * sizeof(float));
    double *rpart = (double *)malloc(N * C * sizeof(double));
    for (size_t n = 0; n < N; n++)
        for (int i = 0; i < C; i++) {
            part[n * C + i] = dqkv[n * 3 * C + (size_t)j * C + i];
            rpart[n * C + i] = ref[n * 3 * C + (size_t)j * C + i];
        }
    double e = attn_ref_relerr(part, rpart, N * C);
    free(part);
    free(rpart);
    return e;
}

template <int HS> static void run_case(int B, int T, int NH)
{
    int C = NH * HS;
    size_t N = (size_t)B * T, R = (size_t)B * NH * T;
    float *qkv = attn_ref_randn(N * 3 * C, 1.0f, (unsigned)(T * 7 + C)), *dout = attn_ref_randn(N * C, 1.0f, T + C);
    for (size_t i = 0; i < N * 3 * C; i++) qkv[i] = bf16_round(qkv[i]);
    for (size_t i = 0; i < N * C; i++) dout[i] = bf16_round(dout[i]);
    float *out[2], *lse[2], *dqkv[2], *dsum = (float *)malloc(R * sizeof(float));
    char err[256] = "";
    for (int run = 0; run < 2; run++) {
        out[run] = outputs(N * C), lse[run] = outputs(R), dqkv[run] = outputs(N * 3 * C);
        if (flash_emulated<HS>(out[run], lse[run], dqkv[run], dsum, qkv, dout, B, T, NH, 1 + run, err, sizeof err)) {
            CHECK(0, "B %d T %d hs %d: %s", B, T, HS, err);
            return;
        }
    }
    double *rout = (double *)malloc(N * C * 8), *rlse = (double *)malloc(R * 8), *rd = (double *)malloc(N * 3 * C * 8);
    attn_ref_forward(rout, rlse, qkv, B, T, C, NH);
    attn_ref_backward(rd, dout, qkv, B, T, C, NH);
    printf("B %d T %d hs %d NH %d:\n", B, T, HS, NH);
    check("out", attn_ref_relerr(out[0], rout, N * C), OUT_LIMIT);
    check("lse", attn_ref_relerr(lse[0], rlse, R), LSE_LIMIT);
    check("dq", part_err(dqkv[0], rd, N, C, 0), GRAD_LIMIT);
    check("dk", part_err(dqkv[0], rd, N, C, 1), GRAD_LIMIT);
    check("dv", part_err(dqkv[0], rd, N, C, 2), GRAD_LIMIT);
    int guards = guard_intact(out[0], N * C) && guard_intact(lse[0], R) && guard_intact(dqkv[0], N * 3 * C);
    int same = !memcmp(out[0], out[1], N * C * 4) && !memcmp(lse[0], lse[1], R * 4) &&
               !memcmp(dqkv[0], dqkv[1], N * 3 * C * 4);
    printf("  nothing written past the outputs: %s; two interleavings, the same bytes: %s\n", guards ? "yes" : "no",
           same ? "yes" : "no");
    CHECK(guards, "B %d T %d hs %d: an output's guard was overwritten", B, T, HS);
    CHECK(same, "B %d T %d hs %d: two interleavings gave different bytes", B, T, HS);
    for (int run = 0; run < 2; run++) free(out[run]), free(lse[run]), free(dqkv[run]);
    free(qkv), free(dout), free(dsum), free(rout), free(rlse), free(rd);
}

int main(void)
{
    run_case<16>(1, 17, 2);
    run_case<64>(2, 100, 2);
    run_case<128>(1, 130, 2);
    run_case<16>(2, 64, 2);
    run_case<64>(1, 1, 2);
    run_case<48>(1, 70, 2);  /* three k16 steps: an odd count */
    run_case<96>(1, 129, 1); /* above 64: the backward's tiles of 32 rows */
    return emu_finish("the tensor-core flash attention matches float64 forward and backward under the emulator");
}
