/* cuda_check.h: the error check shared by the CUDA sources (gpt_cuda_*.cu, diloco_cuda.cu). Their
 * functions take (char *err, size_t errlen) and return int; CK(call) turns a failed CUDA runtime call
 * into a message naming the call and its place, and returns -1 (a library never exits). */
#ifndef DILOCO_CUDA_CHECK_H
#define DILOCO_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "base/util.h" /* err_set */

#define CK(call)                                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            err_set(err, errlen, "cuda: %s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
            return -1;                                                                                       \
        }                                                                                                    \
    } while (0)

#endif
