/* warp_mma_expect.h: the inputs of warp_mma_check_k (worker/cuda/warp_mma_check.cuh) and the check of its
 * outputs against A B + C and (A B) B2 computed here in double, shared by the GPU test
 * (test_cuda_kernels.c) and the emulator's (test_simt_emu.cc) so both assert exactly the same. The
 * values are small integers: exact in bf16, with products that sum exactly in fp32, so the expected
 * outputs are exact. */
#ifndef DILOCO_WARP_MMA_EXPECT_H
#define DILOCO_WARP_MMA_EXPECT_H

static inline void wmc_fill(float *m, int n, int mul, int mod, int off)
{
    for (int i = 0; i < n; i++) m[i] = (float)((i * mul) % mod - off);
}

/* A 16x16, B 16x8 ([k][n]), C 16x8, B2 16x8 with rows 8-15 zero (the reused fragment's zero half) */
static inline void wmc_inputs(float *A, float *B, float *C, float *B2)
{
    wmc_fill(A, 256, 7, 5, 2);
    wmc_fill(B, 128, 3, 5, 2);
    wmc_fill(C, 128, 11, 9, 4);
    wmc_fill(B2, 128, 5, 3, 1);
    for (int i = 64; i < 128; i++) B2[i] = 0.0f;
}

/* how many of the 3 x 128 outputs and 32 sums differ from what they must be */
static inline int wmc_count_bad(const float *frag, const float *ldm, const float *reuse, const float *sums,
                                const float *A, const float *B, const float *C, const float *B2)
{
    int bad = 0;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            double d = C[r * 8 + n], p = 0.0;
            for (int k = 0; k < 16; k++) d += (double)A[r * 16 + k] * B[k * 8 + n];
            for (int k = 0; k < 8; k++) {
                double s = 0.0;
                for (int j = 0; j < 16; j++) s += (double)A[r * 16 + j] * B[j * 8 + k];
                p += s * B2[k * 8 + n];
            }
            bad += (frag[r * 8 + n] != (float)d) + (ldm[r * 8 + n] != (float)d) + (reuse[r * 8 + n] != (float)p);
        }
    for (int l = 0; l < 32; l++) bad += sums[l] != 528.0f;
    return bad;
}

#endif
