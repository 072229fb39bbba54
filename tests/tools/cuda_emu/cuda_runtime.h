/* cuda_runtime.h of the CPU CUDA emulator: the part of the CUDA runtime the GPT backend and the device
 * hooks (the .cu files of worker/cuda) call, run on the CPU by tests/tools/cuda_emu.cc, so the GPU tests
 * (tests/test_cuda_*.c) run in CI as test_cuda_*_emu against these sources compiled by g++.
 *
 * The Makefile rewrites each kernel launch `k<<<grid, block, smem, stream>>>(args)` of a .cu file into
 * `simt_cuda_launch("k", k, grid, block, smem, stream)(args)` (the only change to the source). Streams are
 * asynchronous, as on a GPU: a launch, an async copy or memset, a product, an event record or wait goes
 * on its stream's queue and runs when a synchronization needs it (cudaStreamSynchronize,
 * cudaEventSynchronize, a synchronous copy, cudaFree, ...), streams interleaved in a seeded random order
 * that respects their events. So host code that reads a pinned result before synchronizing reads the old
 * value, and two streams without the event that orders them race. Kernels run under the lane emulator
 * (simt_emu.h). What a GPU would reject is rejected here too, with the reason on
 * stderr: a bad launch shape (cudaGetLastError), a kernel that deadlocks or faults at a barrier, a pointer
 * argument that is not device memory, a copy past an allocation or in the wrong direction, a write past
 * the end of an allocation (guard bytes checked after every launch and product; they read as NaN). Those are sticky, as a
 * GPU's faults are: every later call returns the error. Fresh device memory is filled with 0xff bytes
 * (NaN as floats, -1 as ints), so a kernel that reads what nothing wrote gives NaN instead of zeros, and
 * it is mapped only while an emulated device operation runs: host code that dereferences a device
 * pointer dies of SIGSEGV, with the allocation named on stderr. CUDA_EMU_REFUSE_KERNEL=NAME in the
 * environment refuses every launch of a kernel whose name contains NAME, as a GPU refuses a kernel that
 * asks more registers than it has ("too many resources requested for launch": not sticky), for tests of
 * what the code does then.
 * cuda_bf16.h and cublas_v2.h beside this file complete the surface. */
#ifndef DILOCO_CUDA_EMU_RUNTIME_H
#define DILOCO_CUDA_EMU_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <functional>
#include <tuple>
#include <type_traits>

#include "simt_emu.h"

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
};

struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};

enum cudaDeviceAttr {
    cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int major, minor;
    int multiProcessorCount;
    int clockRate;
};

typedef struct cuda_emu_stream *cudaStream_t;
typedef struct cuda_emu_event *cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaHostRegisterDefault 0x00

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);

cudaError_t cudaMalloc(void **p, size_t bytes);
template <typename T> cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
template <typename T> cudaError_t cudaMallocHost(T **p, size_t bytes)
{
    return cudaMallocHost((void **)p, bytes);
}
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags);
cudaError_t cudaHostUnregister(void *p);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p);

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st = 0);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t st = 0);

cudaError_t cudaStreamCreate(cudaStream_t *st);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t st);
cudaError_t cudaStreamSynchronize(cudaStream_t st);
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t *ev);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t ev);
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t ev);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* the device intrinsics of plain arithmetic the kernels use (rounded once: g++ for x86-64 does not
 * contract a * b + c into an FMA) */
static inline float __fadd_rn(float a, float b)
{
    return a + b;
}
static inline float __fsub_rn(float a, float b)
{
    return a - b;
}
static inline float __fmul_rn(float a, float b)
{
    return a * b;
}
static inline float __fdiv_rn(float a, float b)
{
    return a / b;
}
static inline float __fsqrt_rn(float a)
{
    return sqrtf(a);
}
static inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- launches (the rewritten `<<<>>>`) --------------------------------------------------------- */

/* 0 when a launch of `name` with this shape may go on st; otherwise the launch error is recorded
 * (cudaGetLastError), as a GPU refuses a launch */
int cuda_emu_launch_check(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t st);
/* a pointer argument of the kernel: NULL or device memory, else the device faults */
void cuda_emu_check_arg(const char *name, int index, const void *p);
/* queues the launch on st: run(seed, err, errlen) runs its blocks under the lane emulator (simt_launch's
 * status and message) when a synchronization reaches it */
void cuda_emu_launch_enqueue(const char *name, cudaStream_t st, std::function<int(unsigned, char *, size_t)> run);
/* the emulator's own: the seed of its choices from now on (which stream's work runs next, the
 * interleavings of a launch); CUDA_EMU_SEED in the environment sets the first */
void cuda_emu_seed(unsigned seed);
/* for a caller through ctypes (tests/python/emu_hooks.py: a CPU tensor standing in for a CUDA
 * one), by C names: cuda_emu_adopt takes the caller's host memory as device memory (no guards, never
 * protected: the caller writes it from the host), cuda_emu_forget gives it back, cuda_emu_synchronize is
 * cudaDeviceSynchronize. Each returns a cudaError_t. */
extern "C" int cuda_emu_adopt(void *p, size_t bytes);
extern "C" int cuda_emu_forget(void *p);
extern "C" int cuda_emu_synchronize(void);

template <typename T> void cuda_emu_arg(const char *name, int index, T v)
{
    if constexpr (std::is_pointer<T>::value) cuda_emu_check_arg(name, index, (const void *)v);
    (void)name, (void)index, (void)v;
}

template <typename... P> struct cuda_emu_launcher {
    const char *name;
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    cudaStream_t st;

    /* the kernel's own parameter types, so arguments convert as in a <<<>>> launch (NULL to a pointer);
     * they are copied into the queued launch, as a GPU copies a launch's parameters */
    void operator()(P... args) const
    {
        if (cuda_emu_launch_check(name, grid, block, smem, st)) return;
        int i = 0;
        (cuda_emu_arg(name, i++, args), ...);
        (void)i;
        void (*k)(P...) = kernel;
        simt_dim3 g{grid.x, grid.y, grid.z}, b{block.x, block.y, block.z};
        std::tuple<P...> t(args...);
        cuda_emu_launch_enqueue(name, st, [k, g, b, t](unsigned seed, char *err, size_t errlen) {
            return std::apply([&](P... a) { return simt_run(g, b, seed, err, errlen, k, a...); }, t);
        });
    }
};

template <typename... P>
cuda_emu_launcher<P...> simt_cuda_launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block,
                                         size_t smem = 0, cudaStream_t st = 0)
{
    return cuda_emu_launcher<P...>{name, kernel, grid, block, smem, st};
}

#endif
