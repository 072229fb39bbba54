/* test_simt_emu: the CPU lane emulator (tests/tools/simt_emu.h) that runs the CUDA kernels of
 * worker/cuda/flash_mma.cuh in tests/test_flash_emu.cc. It must compute what the hardware computes, and
 * fail where the hardware would misbehave:
 *
 *   - warp_mma_check_k (worker/cuda/warp_mma_check.cuh: mma from documented fragments, ldmatrix x4 and
 *     x2.trans, the accumulator -> A fragment reuse, a shuffle butterfly) gives exactly A B + C under
 *     several interleavings. test_cuda_kernels runs the same kernel on a GPU with the same assertions,
 *     which ties the emulator's layouts to the hardware's;
 *   - a kernel that reads shared memory another warp writes gets stale values under some interleaving
 *     without __syncthreads, and never with it (the emulator interleaves threads);
 *   - threads at different barriers, and a lane that exits before a shuffle, fail the launch with a
 *     message instead of hanging;
 *   - bf16 rounding is to nearest even, NaN stays NaN. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_check.h"
#include "simt_emu.h"
#include "warp_mma_check.cuh"
#include "warp_mma_expect.h"

static void test_warp_mma(void)
{
    float A[256], B[128], C[128], B2[128], frag[128], ldm[128], reuse[128], sums[32];
    wmc_inputs(A, B, C, B2);
    for (unsigned seed = 1; seed <= 4; seed++) {
        char err[256] = "";
        memset(frag, 0xff, sizeof frag);
        int rc = simt_run(simt_dim3{1, 1, 1}, 32, seed, err, sizeof err, warp_mma_check_k, frag, ldm, reuse, sums,
                          (const float *)A, (const float *)B, (const float *)C, (const float *)B2);
        CHECK(rc == 0, "warp_mma_check_k: %s", err);
        int bad = wmc_count_bad(frag, ldm, reuse, sums, A, B, C, B2);
        CHECK(bad == 0, "seed %u: %d of 416 outputs differ from A B + C, (A B) B2 or the butterfly sum", seed, bad);
    }
}

/* warp 1 writes shared memory that warp 0 then reads: with the barrier always right, without it wrong
 * under some interleaving */
__global__ void publish_k(int *out, int with_barrier)
{
    __shared__ int box[32];
    int l = threadIdx.x & 31;
    if (threadIdx.x < 32) box[l] = -1;
    __syncthreads();
    if (threadIdx.x >= 32) box[l] = l;
    __syncwarp(); /* a switch point, not an order between the warps */
    if (with_barrier) __syncthreads();
    if (threadIdx.x < 32) out[l] = box[l];
}

static void test_interleaving(void)
{
    int out[32], stale_runs = 0;
    for (unsigned seed = 1; seed <= 20; seed++)
        for (int barrier = 0; barrier < 2; barrier++) {
            char err[256] = "";
            CHECK(simt_run(simt_dim3{1, 1, 1}, 64, seed, err, sizeof err, publish_k, out, barrier) == 0, "%s", err);
            int stale = 0;
            for (int l = 0; l < 32; l++) stale += out[l] != l;
            if (barrier) CHECK(stale == 0, "seed %u: %d lanes read stale values after __syncthreads", seed, stale);
            stale_runs += !barrier && stale > 0;
        }
    CHECK(stale_runs > 0, "no interleaving in 20 seeds read stale values without the barrier");
}

/* half a warp at __syncthreads, the other half at __syncwarp: each waits for the other */
__global__ void divergent_barrier_k(int *out)
{
    if ((threadIdx.x & 31) < 16)
        __syncthreads();
    else
        __syncwarp();
    out[0] = 1;
}

__global__ void exit_before_shuffle_k(float *out)
{
    if (threadIdx.x == 3) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

/* half a warp at a shuffle, the other half at __syncwarp */
__global__ void mixed_collectives_k(float *out)
{
    if ((threadIdx.x & 31) < 16)
        out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
    else
        __syncwarp();
}

static void test_failures_reported(void)
{
    char err[256] = "";
    int o = 0;
    float f[32];
    CHECK(simt_run(simt_dim3{1, 1, 1}, 64, 1, err, sizeof err, divergent_barrier_k, &o) == -1 &&
              strstr(err, "deadlock"),
          "divergent barriers: expected a deadlock report, got \"%s\"", err);
    err[0] = 0;
    CHECK(simt_run(simt_dim3{1, 1, 1}, 32, 1, err, sizeof err, exit_before_shuffle_k, f) == -1 && strstr(err, "exited"),
          "exit before a shuffle: expected a report, got \"%s\"", err);
    err[0] = 0;
    CHECK(simt_run(simt_dim3{1, 1, 1}, 32, 1, err, sizeof err, mixed_collectives_k, f) == -1 &&
              strstr(err, "different warp collectives"),
          "a shuffle and __syncwarp in one warp: expected a report, got \"%s\"", err);
    err[0] = 0;
    CHECK(simt_run(simt_dim3{1, 1, 1}, 48, 1, err, sizeof err, exit_before_shuffle_k, f) == -1 && strstr(err, "32"),
          "a block of 48 threads: expected a refusal, got \"%s\"", err);
}

static void test_bf16(void)
{
    CHECK(bf16_bits(1.0f) == 0x3f80, "1.0 -> %04x", bf16_bits(1.0f));
    CHECK(bf16_bits(1.0f + 1.0f / 256) == 0x3f80, "a tie rounds to even (down)");
    CHECK(bf16_bits(1.0f + 3.0f / 256) == 0x3f82, "a tie rounds to even (up)");
    CHECK(bf16_round(1.0f + 1.0f / 128 + 1.0f / 512) == 1.0f + 1.0f / 128, "below half rounds down");
    CHECK(isnan(bf16_round(NAN)), "NaN stays NaN");
    CHECK(bf16x2_lo(bf16x2_pack(2.0f, -3.0f)) == 2.0f && bf16x2_hi(bf16x2_pack(2.0f, -3.0f)) == -3.0f,
          "pack: lo in the low half");
}

int main(void)
{
    test_bf16();
    test_warp_mma();
    test_interleaving();
    test_failures_reported();
    return emu_finish(
        "simt emulator: warp mma, ldmatrix, reuse, shuffles, interleavings and failure reports as expected");
}
