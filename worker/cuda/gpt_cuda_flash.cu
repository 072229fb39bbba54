/* gpt_cuda_flash.cu: the launchers of the tensor-core flash attention (--precision bf16 --attention flash,
 * gpt_cuda_set_attention), whose kernels are flash_mma.cuh (kept apart so that the CPU lane emulator of
 * tests/test_flash_emu.cc compiles the very same kernels with g++):
 *
 *   l_flash_mma_forward   out (B,T,C) and lse (B,NH,T) from qkv (B,T,3C): one launch
 *   l_flash_mma_backward  dqkv (B,T,3C) from dout, qkv, out, lse: D = rowsum(dout * out) by the fused
 *                         attention's kernel (l_flash_dsum, gpt_cuda_bf16.cu), then dk, dv per key tile
 *                         and dq per query tile, each element written once (deterministic)
 *
 * Same inputs, outputs and lse semantics as l_flash_forward / l_flash_backward (the fused kernels), so
 * the model keeps the same buffers for both. The kernels are templates on the head size, instantiated
 * for every multiple of 16 up to 128; anything else is refused here with a message. */
#include "gpt_cuda_internal.h"

#include "flash_mma.cuh"

#include <math.h>
#include <type_traits>

/* f(std::integral_constant<int, hs>) for the head sizes the kernels are built for; 0, or -1 if hs is not
 * one of them */
template <class F> static int by_head_size(int hs, F f)
{
    switch (hs) {
    case 16: f(std::integral_constant<int, 16>()); return 0;
    case 32: f(std::integral_constant<int, 32>()); return 0;
    case 48: f(std::integral_constant<int, 48>()); return 0;
    case 64: f(std::integral_constant<int, 64>()); return 0;
    case 80: f(std::integral_constant<int, 80>()); return 0;
    case 96: f(std::integral_constant<int, 96>()); return 0;
    case 112: f(std::integral_constant<int, 112>()); return 0;
    case 128: f(std::integral_constant<int, 128>()); return 0;
    }
    return -1;
}

/* the kernels' limits: head size a multiple of 16 up to 128 (mma k steps, registers), B*NH heads in
 * gridDim.y */
int l_flash_mma_check(int B, int T, int C, int NH, char *err, size_t errlen)
{
    int hs = NH > 0 ? C / NH : 0;
    if (NH < 1 || C % NH || hs % 16 || hs < 16 || hs > 128) {
        err_set(err, errlen,
                "gpt cuda: --attention flash needs a head size that is a multiple of 16, at most 128; got %d (dim %d "
                "/ heads %d): use --attention fused or gemm",
                hs, C, NH);
        return -1;
    }
    if (B < 1 || T < 1 || (long)B * NH > 65535) {
        err_set(err, errlen, "gpt cuda: flash attention: batch %d x heads %d (at most 65535) or seq %d out of range", B,
                NH, T);
        return -1;
    }
    return 0;
}

static dim3 flash_grid(int B, int T, int NH)
{
    return dim3((unsigned)((T + FLASH_ROWS - 1) / FLASH_ROWS), (unsigned)(B * NH));
}

int l_flash_mma_forward(ctx *x, float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    if (l_flash_mma_check(B, T, C, NH, err, errlen)) return -1;
    float scale = 1.0f / sqrtf((float)(C / NH));
    dim3 grid = flash_grid(B, T, NH);
    by_head_size(C / NH, [&](auto hs) {
        flash_mma_forward_k<decltype(hs)::value><<<grid, FLASH_THREADS, 0, x->st>>>(out, lse, qkv, T, NH, scale);
    });
    CKL();
    return 0;
}

int l_flash_mma_backward(ctx *x, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                         float *dsum, int B, int T, int C, int NH)
{
    char *err = x->err;
    size_t errlen = x->errlen;
    if (l_flash_mma_check(B, T, C, NH, err, errlen) || l_flash_dsum(x, dsum, dout, out, B, T, C, NH)) return -1;
    float scale = 1.0f / sqrtf((float)(C / NH));
    dim3 grid = flash_grid(B, T, NH);
    by_head_size(C / NH, [&](auto hs) {
        constexpr int HS = decltype(hs)::value;
        flash_mma_dkv_k<HS><<<grid, FLASH_THREADS, 0, x->st>>>(dqkv, dout, qkv, lse, dsum, T, NH, scale);
        flash_mma_dq_k<HS><<<grid, FLASH_THREADS, 0, x->st>>>(dqkv, dout, qkv, lse, dsum, T, NH, scale);
    });
    CKL();
    return 0;
}
