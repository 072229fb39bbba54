/* cuda_bf16.h of the CPU CUDA emulator (tests/tools/cuda_emu/cuda_runtime.h): the bf16 type and the
 * conversions the backend's kernels use, on the emulator's round-to-nearest-even (simt_emu.h). The
 * layout is the GPU's: 16 bits, the upper half of the fp32 value. */
#ifndef DILOCO_CUDA_EMU_BF16_H
#define DILOCO_CUDA_EMU_BF16_H

#include <stdint.h>

#include "simt_emu.h"

struct __nv_bfloat16 {
    uint16_t bits;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    return __nv_bfloat16{bf16_bits(f)};
}
static inline __nv_bfloat16 __float2bfloat16(float f)
{
    return __float2bfloat16_rn(f);
}
static inline float __bfloat162float(__nv_bfloat16 b)
{
    return bf16_float(b.bits);
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b)
{
    return b.bits;
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi)
{
    return __nv_bfloat162{__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}

#endif
