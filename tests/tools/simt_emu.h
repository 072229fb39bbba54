/* simt_emu.h: a CPU lane emulator that runs CUDA kernel source, compiled by g++, for the tests of
 * kernels no GPU can check here (tests/test_flash_emu.cc runs worker/cuda/flash_mma.cuh under it).
 *
 * A launch runs the grid's blocks one after another, in a seeded random order. A block's threads are
 * fibers (ucontext) on the calling thread: one runs until it reaches __syncthreads, __syncwarp or a
 * warp collective (a shuffle, mma_bf16_16816, ldmatrix), then a fiber picked at random runs (the last
 * lane of a warp to arrive at a collective goes on: it computes every lane's result). So every
 * interleaving the barriers allow can happen, and a kernel that reads shared memory before the
 * barrier that orders its writes gets the wrong values, as on a GPU. The collectives implement the
 * layouts warp_mma.h documents (the PTX ISA's). A lane that exits counts as arrived at __syncthreads
 * (sm_70 and later); threads at different barriers, lanes of one warp at different collectives and a
 * lane that exits while its warp waits at a collective fail the launch with a message, instead of
 * hanging or guessing.
 *
 * Kernel source may use: the qualifiers below, threadIdx,
 * blockIdx, blockDim, gridDim (blocks of a multiple of 32 threads, at most 1024; threadIdx.x varies
 * fastest, and warps are 32 consecutive threads in that order, as on a GPU), __shared__
 * arrays of static size declared in the kernel (one copy, reused by each block in turn), the math of
 * <math.h>, warp_mma.h, and atomicMin / atomicAdd (a fiber runs until it reaches a barrier or a
 * collective, so a read-modify-write is atomic by construction). Not emulated: dynamic shared memory,
 * partial-warp masks, cooperative groups. tensor-core accumulation is emulated exactly (double) then rounded once to fp32,
 * so results match a GPU to accumulation-order rounding, not bit for bit. */
#ifndef DILOCO_SIMT_EMU_H
#define DILOCO_SIMT_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <tuple>

struct simt_dim3 {
    unsigned x, y, z;
};

/* the running fiber's index in its block */
const simt_dim3 &simt_thread_idx(void);
#define threadIdx (simt_thread_idx())
extern simt_dim3 blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

void __syncthreads(void);
void __syncwarp(unsigned mask = 0xffffffffu);
float __shfl_xor_sync(unsigned mask, float v, int lane_mask);
int __shfl_xor_sync(unsigned mask, int v, int lane_mask);
unsigned __shfl_xor_sync(unsigned mask, unsigned v, int lane_mask);
float __shfl_down_sync(unsigned mask, float v, unsigned delta);
float __shfl_sync(unsigned mask, float v, int src_lane);

static inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v)
{
    unsigned long long old = *p;
    if (v < old) *p = v;
    return old;
}
static inline float atomicAdd(float *p, float v)
{
    float old = *p;
    *p = old + v;
    return old;
}

/* warp_mma.h's primitives */
uint16_t bf16_bits(float x);
float bf16_float(uint16_t b);
float bf16_round(float x);
uint32_t bf16x2_pack(float lo, float hi);
float bf16x2_lo(uint32_t p);
float bf16x2_hi(uint32_t p);
void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
void ldmatrix_x4(uint32_t r[4], const void *row);
void ldmatrix_x4_trans(uint32_t r[4], const void *row);
void ldmatrix_x2(uint32_t r[2], const void *row);
void ldmatrix_x2_trans(uint32_t r[2], const void *row);

/* Runs body(arg) as every thread of grid.x * grid.y * grid.z blocks of `block` threads. seed picks the
 * interleaving. Returns 0, or -1 with the reason in err (a deadlock, a bad launch). */
int simt_launch(simt_dim3 grid, simt_dim3 block, unsigned seed, void (*body)(void *), void *arg, char *err,
                size_t errlen);

/* simt_launch of a kernel with its arguments: simt_run(grid, block, seed, err, errlen, kernel, args...) */
template <typename... P, typename... A>
int simt_run(simt_dim3 grid, simt_dim3 block, unsigned seed, char *err, size_t errlen, void (*kernel)(P...), A... args)
{
    struct call {
        void (*kernel)(P...);
        std::tuple<P...> args;
    } c{kernel, std::tuple<P...>(args...)};
    return simt_launch(
        grid, block, seed, [](void *p) { std::apply(((call *)p)->kernel, ((call *)p)->args); }, &c, err, errlen);
}

/* 1-D blocks of `block` threads */
template <typename... P, typename... A>
int simt_run(simt_dim3 grid, unsigned block, unsigned seed, char *err, size_t errlen, void (*kernel)(P...), A... args)
{
    return simt_run(grid, simt_dim3{block, 1, 1}, seed, err, errlen, kernel, args...);
}

#endif
