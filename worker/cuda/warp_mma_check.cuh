/* warp_mma_check.cuh: one kernel that exercises every primitive of warp_mma.h the way the tiled kernels
 * use them, so that one set of assertions checks the GPU (tests/test_cuda_kernels.c, through
 * gpt_cuda_k_warp_mma_check) and the CPU lane emulator (tests/test_simt_emu.cc) against plain A * B:
 * if both pass, the emulator implements the layouts the hardware has.
 *
 * One warp (32 threads). A (16x16), B (16x8, [k][n]) and C (16x8) are fp32 row-major in global memory;
 * the caller picks values exact in bf16 whose products sum exactly in fp32.
 *   d_frag = A B + C with the fragments built from the documented layout, element by element
 *   d_ldm  = A B + C with A loaded by ldmatrix_x4 and B by ldmatrix_x2_trans from shared memory
 *   d_reuse = (A B) B2 where the first product's accumulators are packed straight into the second's
 *            A fragments (the flash kernels' reuse of S as P); B2 (8x8 padded to 16x8 by the caller as
 *            [k][n] with rows 8-15 zero)
 *   sums[l] = the sum over the warp of lane + 1 by a __shfl_xor_sync butterfly (528 in every lane) */
#ifndef DILOCO_WARP_MMA_CHECK_CUH
#define DILOCO_WARP_MMA_CHECK_CUH

#include "warp_mma.h"

__device__ __forceinline__ float check_at(const float *m, int cols, int r, int c)
{
    return m[r * cols + c];
}

__global__ void warp_mma_check_k(float *d_frag, float *d_ldm, float *d_reuse, float *sums, const float *A,
                                 const float *B, const float *C, const float *B2)
{
    __shared__ __align__(16) uint16_t sA[16 * 16];
    __shared__ __align__(16) uint16_t sB[16 * 8];
    int l = threadIdx.x, g = l >> 2, t = l & 3;
    uint32_t a[4] = {bf16x2_pack(check_at(A, 16, g, 2 * t), check_at(A, 16, g, 2 * t + 1)),
                     bf16x2_pack(check_at(A, 16, g + 8, 2 * t), check_at(A, 16, g + 8, 2 * t + 1)),
                     bf16x2_pack(check_at(A, 16, g, 2 * t + 8), check_at(A, 16, g, 2 * t + 9)),
                     bf16x2_pack(check_at(A, 16, g + 8, 2 * t + 8), check_at(A, 16, g + 8, 2 * t + 9))};
    uint32_t b[2] = {bf16x2_pack(check_at(B, 8, 2 * t, g), check_at(B, 8, 2 * t + 1, g)),
                     bf16x2_pack(check_at(B, 8, 2 * t + 8, g), check_at(B, 8, 2 * t + 9, g))};
    float c[4] = {check_at(C, 8, g, 2 * t), check_at(C, 8, g, 2 * t + 1), check_at(C, 8, g + 8, 2 * t),
                  check_at(C, 8, g + 8, 2 * t + 1)};
    float d[4];
    mma_bf16_16816(d, a, b, c);
    int at[4] = {g * 8 + 2 * t, g * 8 + 2 * t + 1, (g + 8) * 8 + 2 * t, (g + 8) * 8 + 2 * t + 1};
    for (int i = 0; i < 4; i++) d_frag[at[i]] = d[i];

    /* the same product through ldmatrix: A's four 8x8 quarters in fragment order (rows 0-7 | 8-15 of
     * columns 0-7, then of columns 8-15); B stored [k][n], its two 8x8 halves transposed into b */
    for (int i = l; i < 16 * 16; i += 32) sA[i] = bf16_bits(A[i]);
    for (int i = l; i < 16 * 8; i += 32) sB[i] = bf16_bits(B[i]);
    __syncwarp();
    int m = l / 8, r = l % 8;
    uint32_t a2[4], b2[2];
    ldmatrix_x4(a2, sA + ((m & 1) * 8 + r) * 16 + (m >> 1) * 8);
    ldmatrix_x2_trans(b2, sB + ((m & 1) * 8 + r) * 8);
    mma_bf16_16816(d, a2, b2, c);
    for (int i = 0; i < 4; i++) d_ldm[at[i]] = d[i];

    /* reuse: S = A B (16x8, no C) packed as the k 0-7 half of an A fragment (k 8-15 zero) */
    float s[4], zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_bf16_16816(s, a, b, zero);
    uint32_t p[4] = {bf16x2_pack(s[0], s[1]), bf16x2_pack(s[2], s[3]), 0u, 0u};
    uint32_t b3[2] = {bf16x2_pack(check_at(B2, 8, 2 * t, g), check_at(B2, 8, 2 * t + 1, g)),
                      bf16x2_pack(check_at(B2, 8, 2 * t + 8, g), check_at(B2, 8, 2 * t + 9, g))};
    mma_bf16_16816(d, p, b3, zero);
    for (int i = 0; i < 4; i++) d_reuse[at[i]] = d[i];

    float v = (float)(l + 1);
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    sums[l] = v;
}

#endif
