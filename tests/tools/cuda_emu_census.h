/* cuda_emu_census.h: the CPU CUDA emulator's census mode (tests/tools/cuda_emu_census.cc), for C and C++.
 * With CUDA_EMU_CENSUS=1 in the environment (read at the emulator's first call), nothing queued on a
 * stream runs (kernels, products, copies, memsets: no-ops, fresh memory not filled), and every launch and
 * product is counted by its shape instead: the launches of a real-sized step (GPT-2 small's) in seconds
 * on a CPU, to see which kernels give a GPU too few blocks (bench/emu/census.c, `make cuda-census`). */
#ifndef DILOCO_CUDA_EMU_CENSUS_H
#define DILOCO_CUDA_EMU_CENSUS_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 in census mode */
int cuda_emu_census_on(void);
/* forget what was counted so far (the setup before the step of interest) */
void cuda_emu_census_reset(void);
/* the count: each kernel's launches by grid and block, marked where its blocks are fewer than two per SM
 * of a GPU with `sms` SMs; then each product by shape. Returns the number of marked kernel shapes. */
int cuda_emu_census_print(FILE *f, unsigned sms);

#ifdef __cplusplus
}

#include "cuda_emu/cuda_runtime.h"

/* what the emulator counts (cuda_emu.cc at a launch that passed its checks, cuda_emu_blas.cc at a product) */
void cuda_emu_census_kernel(const char *name, dim3 grid, dim3 block);
void cuda_emu_census_product(const char *call, int m, int n, int k, int batch, int bias);
#endif

#endif
