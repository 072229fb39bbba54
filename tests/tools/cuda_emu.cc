/* cuda_emu.cc: the CPU CUDA emulator behind tests/tools/cuda_emu/{cuda_runtime,cuda_bf16,cublas_v2}.h:
 * device memory, copies, streams, events, kernel launches (run by the lane emulator, simt_emu.cc) and the
 * cuBLAS products the GPT backend makes, with the checks a GPU or cuBLAS would make and some they cannot
 * (see cuda_runtime.h). Everything is synchronous and serialized by one lock, so the device hooks' second
 * stream and their callers' threads see a device that finishes each call before it returns.
 *
 * Errors: a call that a GPU would refuse returns its error (kept for cudaGetLastError); a fault (a kernel
 * the emulator stops, a write past an allocation, a pointer argument that is not device memory) also
 * becomes sticky, as a GPU's context does after one: every later call returns cudaErrorLaunchFailure. The
 * reason goes to stderr, prefixed "cuda_emu:", since the CUDA error codes cannot carry it. */
#include "cuda_emu/cublas_v2.h"
#include "cuda_emu/cuda_bf16.h"
#include "cuda_emu/cuda_runtime.h"

#include <math.h>
#include <mutex>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <vector>

/* ---- state ------------------------------------------------------------------------------------ */

enum { MEM_DEVICE, MEM_PINNED, MEM_REGISTERED };
#define GUARD 256    /* bytes checked on each side of a device allocation */
#define GUARD_BYTE 0xa5

struct region {
    char *base; /* what the caller got */
    size_t bytes;
    int kind;
    char *raw; /* what was allocated (device: pages mapped for the guards around base) */
    size_t mapped;
    unsigned long serial;
};

struct cuda_emu_stream {
    unsigned flags;
};
struct cuda_emu_event {
    unsigned flags;
    int recorded;
    double ms;
};
struct cuda_emu_cublas {
    cudaStream_t st;
    int math;
};

static std::recursive_mutex g_mu;
static std::vector<region> g_regions;
static std::vector<cuda_emu_stream *> g_streams;
static unsigned long g_serial;
static cudaError_t g_last = cudaSuccess, g_sticky = cudaSuccess;
static unsigned g_launches;
static char g_last_op[160] = "(none)";

#define LOCK std::lock_guard<std::recursive_mutex> lock_(g_mu)

/* Device memory is mapped PROT_NONE except while an emulated device operation runs (a launch, a copy, a
 * memset, a product), so host code that dereferences a device pointer faults here as on a GPU, and
 * on_segv names the allocation it touched. Windows nest (a product checks the guards). */
static int g_window;

static void device_protect(int open)
{
    for (region &r : g_regions)
        if (r.kind == MEM_DEVICE) mprotect(r.raw, r.mapped, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

struct device_window {
    device_window()
    {
        if (!g_window++) device_protect(1);
    }
    ~device_window()
    {
        if (!--g_window) device_protect(0);
    }
};

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    const char *a = (const char *)si->si_addr;
    for (region &r : g_regions)
        if (r.kind == MEM_DEVICE && a >= r.raw && a < r.raw + r.mapped) {
            char msg[256];
            int n = snprintf(msg, sizeof msg,
                             "cuda_emu: host code touched device memory at %p (allocation #%lu of %zu bytes, offset "
                             "%td): a GPU faults there; copy it to the host with cudaMemcpy\n",
                             si->si_addr, r.serial, r.bytes, a - r.base);
            if (write(2, msg, (size_t)n) < 0) _exit(134);
            break;
        }
    signal(sig, SIG_DFL); /* the fault happens again, now fatal */
}

static void install_segv_handler(void)
{
    static int done;
    if (done++) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
}

static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda_emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* a refusal: the call returns e, cudaGetLastError reports it once */
static cudaError_t refuse(cudaError_t e)
{
    g_last = e;
    return e;
}

/* a fault: every later call fails */
static cudaError_t fault(void)
{
    g_sticky = g_last = cudaErrorLaunchFailure;
    return g_sticky;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* the region holding p (its first byte), or NULL */
static region *find(const void *p)
{
    const char *c = (const char *)p;
    for (region &r : g_regions)
        if (c >= r.base && c < r.base + r.bytes + (r.bytes == 0)) return &r;
    return NULL;
}

static int is_device(const void *p)
{
    region *r = find(p);
    return r && r->kind == MEM_DEVICE;
}

/* [p, p + bytes) inside one device allocation; bytes 0 always is */
static int device_span(const void *p, size_t bytes)
{
    if (!bytes) return 1;
    region *r = find(p);
    return r && r->kind == MEM_DEVICE && (size_t)((const char *)p - r->base) + bytes <= r->bytes;
}

/* every device allocation's guards intact, else a fault naming the operation that just ran */
static int check_guards(void)
{
    device_window w;
    for (region &r : g_regions) {
        if (r.kind != MEM_DEVICE) continue;
        for (size_t i = 0; i < GUARD; i++)
            if ((unsigned char)r.raw[i] != GUARD_BYTE || (unsigned char)r.base[r.bytes + i] != GUARD_BYTE) {
                say("%s wrote %s device allocation #%lu (%zu bytes)", g_last_op,
                    (unsigned char)r.raw[i] != GUARD_BYTE ? "before the start of" : "past the end of", r.serial,
                    r.bytes);
                fault();
                return -1;
            }
    }
    return 0;
}

/* ---- devices ---------------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
    *dev = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev)
{
    return dev == 0 ? cudaSuccess : refuse(cudaErrorInvalidValue);
}

/* an sm_90 device of one SM at 1 GHz: what the backend asks of a device is its compute capability */
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
    if (dev != 0) return refuse(cudaErrorInvalidValue);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU lane emulator (tests/tools/cuda_emu.cc)");
    p->totalGlobalMem = (size_t)16 << 30;
    p->sharedMemPerBlock = 48 << 10;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    p->clockRate = 1000000;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int dev)
{
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev)) return cudaErrorInvalidValue;
    switch (attr) {
    case cudaDevAttrClockRate: *v = p.clockRate; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    default: return refuse(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    LOCK;
    return g_sticky;
}

cudaError_t cudaGetLastError(void)
{
    LOCK;
    cudaError_t e = g_last;
    g_last = g_sticky;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    LOCK;
    return g_last;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorLaunchFailure: return "unspecified launch failure (cuda_emu: the reason is on stderr)";
    }
    return "unknown error";
}

/* ---- memory ----------------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    LOCK;
    *p = NULL;
    if (g_sticky) return g_sticky;
    install_segv_handler();
    size_t page = (size_t)sysconf(_SC_PAGESIZE), total = (2 * GUARD + bytes + page - 1) / page * page;
    char *raw = (char *)mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return refuse(cudaErrorMemoryAllocation);
    char *base = raw + GUARD;
    memset(raw, GUARD_BYTE, GUARD);
    memset(base, 0xff, bytes); /* NaN as floats: what nothing wrote must not read as zero */
    memset(base + bytes, GUARD_BYTE, GUARD);
    if (!g_window) mprotect(raw, total, PROT_NONE);
    g_regions.push_back(region{base, bytes, MEM_DEVICE, raw, total, ++g_serial});
    *p = base;
    return cudaSuccess;
}

static cudaError_t release(void *p, int kind)
{
    LOCK;
    if (!p) return g_sticky;
    for (size_t i = 0; i < g_regions.size(); i++)
        if (g_regions[i].base == p && g_regions[i].kind == kind) {
            if (kind == MEM_DEVICE)
                munmap(g_regions[i].raw, g_regions[i].mapped);
            else if (kind == MEM_PINNED)
                free(g_regions[i].raw);
            g_regions.erase(g_regions.begin() + (long)i);
            return g_sticky;
        }
    say("%s(%p): not %s", kind == MEM_DEVICE ? "cudaFree" : kind == MEM_PINNED ? "cudaFreeHost" : "cudaHostUnregister",
        p, kind == MEM_DEVICE ? "a device allocation" : kind == MEM_PINNED ? "pinned memory" : "registered memory");
    return refuse(kind == MEM_REGISTERED ? cudaErrorHostMemoryNotRegistered : cudaErrorInvalidValue);
}

cudaError_t cudaFree(void *p)
{
    return release(p, MEM_DEVICE);
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    LOCK;
    *p = NULL;
    if (g_sticky) return g_sticky;
    char *raw = (char *)malloc(bytes ? bytes : 1);
    if (!raw) return refuse(cudaErrorMemoryAllocation);
    g_regions.push_back(region{raw, bytes, MEM_PINNED, raw, bytes, ++g_serial});
    *p = raw;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    return release(p, MEM_PINNED);
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags)
{
    LOCK;
    (void)flags;
    if (g_sticky) return g_sticky;
    if (!p || !bytes) return refuse(cudaErrorInvalidValue);
    if (find(p) || find((char *)p + bytes - 1)) return refuse(cudaErrorHostMemoryAlreadyRegistered);
    g_regions.push_back(region{(char *)p, bytes, MEM_REGISTERED, (char *)p, bytes, ++g_serial});
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
    return release(p, MEM_REGISTERED);
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p)
{
    LOCK;
    memset(a, 0, sizeof *a);
    region *r = find(p);
    a->type = !r ? cudaMemoryTypeUnregistered : r->kind == MEM_DEVICE ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    a->devicePointer = r ? (void *)p : NULL;
    a->hostPointer = r && r->kind != MEM_DEVICE ? (void *)p : NULL;
    return g_sticky;
}

static const char *kind_name(cudaMemcpyKind k)
{
    static const char *names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Default"};
    return (unsigned)k < 5 ? names[k] : "?";
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    LOCK;
    if (g_sticky) return g_sticky;
    if (!bytes) return cudaSuccess;
    if ((unsigned)kind > cudaMemcpyDefault) return refuse(cudaErrorInvalidMemcpyDirection);
    int ddev = is_device(dst), sdev = is_device(src);
    if (kind == cudaMemcpyDefault) kind = (cudaMemcpyKind)((sdev ? 2 : 0) + (ddev ? 1 : 0));
    int want_d = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    int want_s = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (ddev != want_d || sdev != want_s) {
        say("cudaMemcpy%s of %zu bytes from %s to %s memory", kind_name(kind), bytes, sdev ? "device" : "host",
            ddev ? "device" : "host");
        return refuse(cudaErrorInvalidMemcpyDirection);
    }
    if ((ddev && !device_span(dst, bytes)) || (sdev && !device_span(src, bytes))) {
        say("cudaMemcpy%s of %zu bytes runs past the end of its device allocation", kind_name(kind), bytes);
        return refuse(cudaErrorInvalidValue);
    }
    device_window w;
    memmove(dst, src, bytes);
    return cudaSuccess;
}

static int stream_ok(cudaStream_t st)
{
    if (!st || st == cudaStreamLegacy || st == cudaStreamPerThread) return 1;
    for (cuda_emu_stream *s : g_streams)
        if (s == st) return 1;
    return 0;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st)
{
    LOCK;
    if (!stream_ok(st)) return refuse(cudaErrorInvalidResourceHandle);
    return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    LOCK;
    if (g_sticky) return g_sticky;
    if (!device_span(p, bytes)) {
        say("cudaMemset of %zu bytes at %p: not inside a device allocation", bytes, p);
        return refuse(cudaErrorInvalidValue);
    }
    device_window w;
    memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t st)
{
    LOCK;
    if (!stream_ok(st)) return refuse(cudaErrorInvalidResourceHandle);
    return cudaMemset(p, value, bytes);
}

/* ---- streams and events ----------------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags)
{
    LOCK;
    if (g_sticky) return g_sticky;
    *st = new cuda_emu_stream{flags};
    g_streams.push_back(*st);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *st)
{
    return cudaStreamCreateWithFlags(st, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t st)
{
    LOCK;
    for (size_t i = 0; i < g_streams.size(); i++)
        if (g_streams[i] == st) {
            delete st;
            g_streams.erase(g_streams.begin() + (long)i);
            return g_sticky;
        }
    return refuse(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    LOCK;
    return stream_ok(st) ? g_sticky : refuse(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags)
{
    LOCK;
    (void)flags;
    return stream_ok(st) && ev ? g_sticky : refuse(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    LOCK;
    if (g_sticky) return g_sticky;
    *ev = new cuda_emu_event{flags, 0, 0};
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *ev)
{
    return cudaEventCreateWithFlags(ev, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    if (!ev) return refuse(cudaErrorInvalidResourceHandle);
    delete ev;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st)
{
    LOCK;
    if (!ev || !stream_ok(st)) return refuse(cudaErrorInvalidResourceHandle);
    ev->recorded = 1;
    ev->ms = now_ms();
    return g_sticky;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    LOCK;
    return ev ? g_sticky : refuse(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    LOCK;
    if (g_sticky) return g_sticky;
    if (!start || !end || (start->flags | end->flags) & cudaEventDisableTiming || !start->recorded ||
        !end->recorded)
        return refuse(cudaErrorInvalidResourceHandle);
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}

/* ---- launches --------------------------------------------------------------------------------- */

int cuda_emu_launch_begin(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t st)
{
    g_mu.lock(); /* held until cuda_emu_launch_run, or released here on a refusal */
    snprintf(g_last_op, sizeof g_last_op, "kernel %s", name);
    if (g_sticky) {
        g_mu.unlock();
        return -1;
    }
    unsigned threads = block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || !threads || threads > 1024 || block.z > 64 || grid.y > 65535 ||
        grid.z > 65535) {
        say("kernel %s: launch of (%u,%u,%u) blocks of (%u,%u,%u) threads: invalid configuration", name, grid.x,
            grid.y, grid.z, block.x, block.y, block.z);
        refuse(cudaErrorInvalidConfiguration);
        g_mu.unlock();
        return -1;
    }
    if (!stream_ok(st)) {
        say("kernel %s: launched on a stream that does not exist", name);
        refuse(cudaErrorInvalidResourceHandle);
        g_mu.unlock();
        return -1;
    }
    if (smem) { /* the backend declares its shared memory statically */
        say("kernel %s: %zu bytes of dynamic shared memory: not emulated", name, smem);
        fault();
        g_mu.unlock();
        return -1;
    }
    return 0;
}

void cuda_emu_check_arg(const char *name, int index, const void *p)
{
    if (!p || is_device(p) || g_sticky) return;
    region *r = find(p);
    say("kernel %s: argument %d (%p) is %s, not device memory", name, index, p,
        r ? "pinned or registered host memory" : "host memory");
    fault();
}

void cuda_emu_launch_run(const char *name, dim3 grid, dim3 block, void (*body)(void *), void *arg)
{
    static unsigned base_seed = getenv("CUDA_EMU_SEED") ? (unsigned)atoi(getenv("CUDA_EMU_SEED")) : 1;
    char err[512] = "";
    if (!g_sticky) {
        device_window w;
        int rc = simt_launch(simt_dim3{grid.x, grid.y, grid.z}, simt_dim3{block.x, block.y, block.z},
                             base_seed + 7919u * ++g_launches, body, arg, err, sizeof err);
        if (rc) {
            say("kernel %s: %s", name, err);
            fault();
        } else
            check_guards();
    }
    g_mu.unlock();
}

/* ---- cuBLAS ----------------------------------------------------------------------------------- */

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new cuda_emu_cublas{0, CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t st)
{
    LOCK;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream_ok(st)) return CUBLAS_STATUS_INVALID_VALUE;
    h->st = st;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_DEFAULT_MATH && mode != CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_STATUS_INVALID_VALUE;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

static size_t type_bytes(cudaDataType t)
{
    return t == CUDA_R_32F ? 4 : 2;
}

/* fp32 rounded to TF32's 10 mantissa bits, to nearest (ties away, as cvt.rna.tf32.f32) */
static float tf32_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}

static double load(const void *p, size_t i, cudaDataType t, int tf32)
{
    if (t == CUDA_R_32F) {
        float f = ((const float *)p)[i];
        return tf32 ? tf32_round(f) : f;
    }
    if (t == CUDA_R_16BF) return bf16_float(((const uint16_t *)p)[i]);
    return NAN; /* fp16 is refused before */
}

static void store(void *p, size_t i, cudaDataType t, double v)
{
    if (t == CUDA_R_32F)
        ((float *)p)[i] = (float)v;
    else
        ((uint16_t *)p)[i] = bf16_bits((float)v);
}

/* the leading dimension cuBLAS requires of a column-major operand of `rows` rows (else it refuses) */
static int check_ld(const char *call, const char *which, int rows, int ld)
{
    if (ld >= (rows > 1 ? rows : 1)) return 0;
    say("%s: ld%s %d < %d rows of %s", call, which, ld, rows, which);
    return -1;
}

/* one column-major operand of rows x cols, leading dimension ld, batch of them stride apart: the whole
 * extent inside one device allocation (else a GPU reads or writes where it must not) */
static int check_extent(const char *call, const char *which, const void *p, cudaDataType t, int rows, int cols,
                        int ld, long long stride, int batch)
{
    if (!rows || !cols || !batch) return 0;
    size_t extent = (size_t)(cols - 1) * ld + rows + (size_t)(batch - 1) * (size_t)(stride > 0 ? stride : 0);
    if (!device_span(p, extent * type_bytes(t))) {
        region *r = find(p);
        say("%s: %s (%d x %d, ld %d, %d of them %lld apart) needs %zu elements from %p: %s", call, which, rows, cols,
            ld, batch, stride, extent, p,
            !r ? "not device memory" : r->kind != MEM_DEVICE ? "host memory" : "past the end of its allocation");
        return -1;
    }
    return 0;
}

/* the type combinations cublasGemmEx takes (cuBLAS docs, cublasGemmEx): those the backend may use */
static int supported(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute)
{
    if (at != bt) return 0;
    if (compute == CUBLAS_COMPUTE_32F)
        return (at == CUDA_R_32F && ct == CUDA_R_32F) ||
               (at == CUDA_R_16BF && (ct == CUDA_R_16BF || ct == CUDA_R_32F));
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) return at == CUDA_R_32F && ct == CUDA_R_32F;
    return 0;
}

static cublasStatus_t gemm(const char *call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, float alpha, const void *A, cudaDataType at, int lda, long long sA, const void *B,
                           cudaDataType bt, int ldb, long long sB, float beta, void *C, cudaDataType ct, int ldc,
                           long long sC, int batch, cublasComputeType_t compute)
{
    LOCK;
    snprintf(g_last_op, sizeof g_last_op, "%s", call);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (g_sticky) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T)) {
        say("%s: m %d, n %d, k %d, batch %d, ops %d %d: invalid", call, m, n, k, batch, ta, tb);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!supported(at, bt, ct, compute)) {
        say("%s: types A %d, B %d, C %d with compute %d: not a combination cuBLAS supports", call, at, bt, ct,
            compute);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    if (check_ld(call, "A", ar, lda) || check_ld(call, "B", br, ldb) || check_ld(call, "C", m, ldc))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (check_extent(call, "A", A, at, ar, ac, lda, sA, k ? batch : 0) ||
        check_extent(call, "B", B, bt, br, bc, ldb, sB, k ? batch : 0) ||
        check_extent(call, "C", C, ct, m, n, ldc, sC, batch)) {
        fault(); /* on a GPU: an illegal address, or a wrong result */
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    device_window w;
    int tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32 || (h->math == CUBLAS_TF32_TENSOR_OP_MATH && at == CUDA_R_32F);
    /* op(A) as m rows of k and op(B) as n rows of k, in double: each element of C is then one dot */
    std::vector<double> a((size_t)m * k), bb((size_t)n * k);
    for (int b = 0; b < batch; b++) {
        const char *Ab = (const char *)A + (size_t)b * sA * type_bytes(at);
        const char *Bb = (const char *)B + (size_t)b * sB * type_bytes(bt);
        char *Cb = (char *)C + (size_t)b * sC * type_bytes(ct);
        for (int i = 0; i < m; i++)
            for (int l = 0; l < k; l++)
                a[(size_t)i * k + l] = load(Ab, ta == CUBLAS_OP_N ? (size_t)l * lda + i : (size_t)i * lda + l, at, tf32);
        for (int j = 0; j < n; j++)
            for (int l = 0; l < k; l++)
                bb[(size_t)j * k + l] = load(Bb, tb == CUBLAS_OP_N ? (size_t)j * ldb + l : (size_t)l * ldb + j, bt, tf32);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                const double *x = &a[(size_t)i * k], *y = &bb[(size_t)j * k];
                double s = 0;
                for (int l = 0; l < k; l++) s += x[l] * y[l];
                size_t ic = (size_t)j * ldc + i;
                double v = (double)alpha * s + (beta != 0.0f ? (double)beta * load(Cb, ic, ct, 0) : 0.0);
                store(Cb, ic, ct, v);
            }
    }
    return check_guards() ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc)
{
    return gemm("cublasSgemm", h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, *beta, C,
                CUDA_R_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sA,
                                         const float *B, int ldb, long long sB, const float *beta, float *C, int ldc,
                                         long long sC, int batch)
{
    return gemm("cublasSgemmStridedBatched", h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, sA, B, CUDA_R_32F, ldb,
                sB, *beta, C, CUDA_R_32F, ldc, sC, batch, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    (void)algo; /* alpha and beta are floats for the 32F compute types, the only ones supported() takes */
    return gemm("cublasGemmEx", h, ta, tb, m, n, k, *(const float *)alpha, A, at, lda, 0, B, bt, ldb, 0,
                *(const float *)beta, C, ct, ldc, 0, 1, compute);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long sA, const void *B, cudaDataType bt, int ldb, long long sB,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long sC,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    return gemm("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, *(const float *)alpha, A, at, lda, sA, B, bt, ldb,
                sB, *(const float *)beta, C, ct, ldc, sC, batch, compute);
}
