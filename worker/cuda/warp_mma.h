/* warp_mma.h: the warp-level tensor-core primitives the tiled kernels use (flash_mma.cuh), in one
 * place, so that the same kernel source runs on a GPU and, for the tests, on the CPU.
 *
 *   bf16_bits, bf16_float      one bf16 (its 16 bits) from and to fp32, round to nearest even
 *   bf16x2_pack, _lo, _hi      two bf16 in one 32-bit register, the lower element in bits 0-15 (the
 *                              operand format of mma and ldmatrix)
 *   bf16_round                 the fp32 nearest x that a bf16 holds
 *   mma_bf16_16816             d = a (16x16 bf16, row) * b (16x8 bf16, col) + c, fp32 accumulation:
 *                              PTX mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80 and later)
 *   ldmatrix_x4, _x2 (_trans)  four / two 8x8 bf16 matrices from shared memory into fragments:
 *                              PTX ldmatrix.sync.aligned.m8n8.{x4,x2}[.trans].shared.b16
 *
 * Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"); lane l of the
 * warp, g = l >> 2, t = l & 3:
 *   a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]   a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
 *   b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
 *   c[0], c[1] = C[g][2t, 2t+1]                       c[2], c[3] = C[g+8][2t, 2t+1]
 * ldmatrix: lane l gives the address of row l % 8 of matrix l / 8 (x2: lanes 0-15 count); register i of
 * lane l is then matrix i's row l / 4, columns 2(l % 4) and 2(l % 4) + 1, or with .trans the same of its
 * transpose (rows 2(l % 4), 2(l % 4) + 1 of column l / 4). Addresses point into __shared__ memory and are
 * 16-byte aligned. Every lane of the warp calls each of these together.
 *
 * Under nvcc these are inline PTX and intrinsics. Compiled without nvcc (tests/test_flash_emu.cc), they
 * and the CUDA builtins a kernel uses come from the CPU lane emulator, tests/tools/simt_emu.h, which
 * implements the same layouts; tests/test_simt_emu.cc and test_cuda_warp_mma check both against A * B. */
#ifndef DILOCO_WARP_MMA_H
#define DILOCO_WARP_MMA_H

#include <stdint.h>

#ifdef __CUDACC__
#include <cuda_bf16.h>

__device__ __forceinline__ uint16_t bf16_bits(float x)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ __forceinline__ float bf16_float(uint16_t b)
{
    return __uint_as_float((uint32_t)b << 16);
}

__device__ __forceinline__ float bf16_round(float x)
{
    return bf16_float(bf16_bits(x));
}

__device__ __forceinline__ uint32_t bf16x2_pack(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x (lo) in the low half */
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ float bf16x2_lo(uint32_t p)
{
    return __uint_as_float(p << 16);
}

__device__ __forceinline__ float bf16x2_hi(uint32_t p)
{
    return __uint_as_float(p & 0xffff0000u);
}

__device__ __forceinline__ void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
}

/* the shared-memory window address of a generic pointer into __shared__ (what ldmatrix takes) */
__device__ __forceinline__ uint32_t shared_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_addr(row))
                 : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_addr(row))
                 : "memory");
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(shared_addr(row))
                 : "memory");
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t r[2], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(shared_addr(row))
                 : "memory");
}

#else /* the CPU lane emulator */
#include "simt_emu.h"
#endif

#endif
