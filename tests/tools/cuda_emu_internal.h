/* cuda_emu_internal.h: what the CPU CUDA emulator's runtime (cuda_emu.cc) gives its cuBLAS
 * (cuda_emu_blas.cc): the lock, the fault and refusal reports, the device-memory checks, and the stream
 * queues a product goes on. Not for the code under test, which sees only the CUDA headers of
 * tests/tools/cuda_emu/. */
#ifndef DILOCO_CUDA_EMU_INTERNAL_H
#define DILOCO_CUDA_EMU_INTERNAL_H

#include <functional>
#include <mutex>
#include <stddef.h>

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

#endif
