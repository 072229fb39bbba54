/* cuda_emu_internal.h: what the CPU CUDA emulator's runtime (cuda_emu.cc) gives its cuBLAS
 * (cuda_emu_blas.cc) and cuBLASLt (cuda_emu_lt.cc): the lock, the fault and refusal reports, the
 * device-memory checks, the stream queues a product goes on, and the product they share. Not for the
 * code under test, which sees only the CUDA headers of tests/tools/cuda_emu/. */
#ifndef DILOCO_CUDA_EMU_INTERNAL_H
#define DILOCO_CUDA_EMU_INTERNAL_H

#include <functional>
#include <mutex>
#include <stddef.h>

#include "cuda_emu/cublas_v2.h"
#include "cuda_emu/cuda_runtime.h"

/* every emulator call holds it: one device, serialized */
extern std::recursive_mutex cuda_emu_mu;
#define CUDA_EMU_LOCK std::lock_guard<std::recursive_mutex> cuda_emu_lock_(cuda_emu_mu)

/* prints "cuda_emu: " and the message on stderr (the CUDA error codes cannot carry a reason) */
void cuda_emu_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* the device is faulted (sticky): every later call fails, as a GPU context does after a fault */
void cuda_emu_fault(void);
int cuda_emu_faulted(void);
/* NULL when [p, p + bytes) lies inside one device allocation, else why not */
const char *cuda_emu_device_span(const void *p, size_t bytes);
int cuda_emu_stream_ok(cudaStream_t st);
/* queues run on stream st (0 and cudaStreamLegacy: the legacy default stream) behind what is there; it
 * runs at a synchronization that reaches it, with device memory mapped, and its guard bytes are checked
 * after; `what` names it in fault reports */
void cuda_emu_enqueue(cudaStream_t st, const char *what, std::function<void()> run);

/* one product (cuda_emu_blas.cc), column-major, batched: D = alpha op(A) op(B) + beta C + bias, bias m
 * floats along D's rows or NULL, D of C's type and leading dimension (D may be C; C is read only when
 * beta != 0). Checked as cuBLAS checks (refused: its status, the reason on stderr) and as a GPU faults
 * (an operand outside device memory: the device faulted), then queued on st, computed in double and
 * rounded once; tf32: fp32 operands rounded to TF32 first. */
cublasStatus_t cuda_emu_gemm(const char *call, cudaStream_t st, int tf32, cublasOperation_t ta, cublasOperation_t tb,
                             int m, int n, int k, float alpha, const void *A, cudaDataType at, int lda, long long sA,
                             const void *B, cudaDataType bt, int ldb, long long sB, float beta, const void *C,
                             cudaDataType ct, int ldc, long long sC, void *D, const float *bias, int batch,
                             cublasComputeType_t compute);

#endif
