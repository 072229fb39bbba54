/* cuda_emu.cc: the CPU CUDA emulator's runtime behind tests/tools/cuda_emu/cuda_runtime.h: device memory,
 * copies, streams and events, kernel launches (run by the lane emulator, simt_emu.cc), with the checks a
 * GPU makes and some it cannot (cuda_runtime.h says which). cuda_emu_blas.cc adds cuBLAS on top, through
 * cuda_emu_internal.h.
 *
 * Streams: each has a queue of operations (a launch, a copy, a memset, a product, an event's record or
 * wait). Nothing runs when it is queued; a synchronization runs queued operations until what it waits for
 * is done, each time from a stream picked at random (seeded) among those whose next operation may run (a
 * wait runs once its event's record has). The legacy default stream (0) is ordered after the blocking
 * streams' earlier work and before their later work, as CUDA orders it; non-blocking streams are ordered
 * only by events. Copies follow CUDA's rules for the host side ("API synchronization behavior"): with
 * pinned memory an async copy runs in its turn, so the host must synchronize before it reads the result
 * or reuses the source; with pageable memory the call waits for the stream and copies at once.
 *
 * One lock serializes every call, so callers on several threads see one device. Errors: a call that a GPU
 * would refuse returns its error (kept once for cudaGetLastError); a fault (a kernel the lane emulator
 * stops, a write past an allocation, a pointer argument that is not device memory) becomes sticky, as a
 * GPU's context does: every later call returns cudaErrorLaunchFailure. The reason goes to stderr,
 * prefixed "cuda_emu:". */
#include "cuda_emu/cuda_runtime.h"
#include "cuda_emu_census.h"
#include "cuda_emu_internal.h"

#include "base/util.h" /* splitmix64 */

#include <deque>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <vector>

/* ---- state ------------------------------------------------------------------------------------ */

enum { MEM_DEVICE, MEM_PINNED, MEM_REGISTERED };
#define GUARD 256 /* bytes checked on each side of a device allocation */
#define GUARD_BYTE 0xff /* NaN as floats, like fresh memory: a read past the end gives NaN, not a small number */

struct region {
    char *base; /* what the caller got */
    size_t bytes;
    int kind;
    char *raw; /* device: the pages mapped for base and its guards; pinned: the malloc */
    size_t mapped;
    unsigned long serial;
    int adopted; /* cuda_emu_adopt's: the caller's host memory, no guards, never protected or unmapped here */
};

/* a queued operation: run it, or (when ev is set) wait until ev's record number gen has run */
struct pending {
    std::string what;
    std::function<void()> run;
    cuda_emu_event *ev;
    unsigned long gen;
};

struct cuda_emu_stream {
    unsigned flags;
    std::deque<pending> q;
};

struct cuda_emu_event {
    unsigned flags;
    unsigned long recorded, done; /* records queued, and run */
    double ms;                    /* when the last one ran */
};

std::recursive_mutex cuda_emu_mu;
#define LOCK CUDA_EMU_LOCK

static std::vector<region> g_regions;
static cuda_emu_stream g_legacy{cudaStreamDefault, {}};
static std::vector<cuda_emu_stream *> g_streams; /* created ones; g_legacy is not listed */
static unsigned long g_serial;
static cudaError_t g_last = cudaSuccess, g_sticky = cudaSuccess;
static uint64_t g_rng;
static char g_last_op[160] = "(none)";

void cuda_emu_say(const char *fmt, ...)
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

void cuda_emu_fault(void)
{
    g_sticky = g_last = cudaErrorLaunchFailure;
}

int cuda_emu_faulted(void)
{
    return g_sticky != cudaSuccess;
}

static int g_seeded;

static uint64_t next_random(void)
{
    if (!g_seeded) {
        const char *s = getenv("CUDA_EMU_SEED");
        cuda_emu_seed(s ? (unsigned)atoi(s) : 1);
    }
    return splitmix64(&g_rng);
}

void cuda_emu_seed(unsigned seed)
{
    LOCK;
    g_rng = seed;
    g_seeded = 1;
}

/* when an event's record runs, in fractional ms (util.h's now_ms counts whole ms: too coarse for the
 * profile's per-phase event times) */
static double event_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- device memory ---------------------------------------------------------------------------- */

/* the region holding p (its first byte), or NULL */
static region *find(const void *p)
{
    const char *c = (const char *)p;
    for (region &r : g_regions)
        if (c >= r.base && c < r.base + r.bytes + (r.bytes == 0)) return &r;
    return NULL;
}

/* some region holds a byte of [p, p + bytes) */
static int overlaps(const void *p, size_t bytes)
{
    const char *c = (const char *)p;
    for (const region &r : g_regions)
        if (c < r.base + r.bytes + (r.bytes == 0) && r.base < c + bytes) return 1;
    return 0;
}

static int is_device(const void *p)
{
    region *r = find(p);
    return r && r->kind == MEM_DEVICE;
}

static int is_pinned(const void *p)
{
    region *r = find(p);
    return r && r->kind != MEM_DEVICE;
}

const char *cuda_emu_device_span(const void *p, size_t bytes)
{
    if (!bytes) return NULL;
    region *r = find(p);
    if (!r) return "not device memory";
    if (r->kind != MEM_DEVICE) return "host memory";
    if ((size_t)((const char *)p - r->base) + bytes > r->bytes) return "past the end of its allocation";
    return NULL;
}

/* Device memory is mapped PROT_NONE except while an emulated device operation runs, so host code that
 * dereferences a device pointer faults here as on a GPU, and on_segv names the allocation it touched.
 * Windows nest. */
static int g_window;

static void device_protect(int open)
{
    for (region &r : g_regions)
        if (r.kind == MEM_DEVICE && !r.adopted) mprotect(r.raw, r.mapped, open ? PROT_READ | PROT_WRITE : PROT_NONE);
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

/* every device allocation's guards intact, else a fault naming the operation that just ran (called in
 * run_until's device window) */
static int check_guards(void)
{
    for (region &r : g_regions) {
        if (r.kind != MEM_DEVICE || r.adopted) continue;
        for (size_t i = 0; i < GUARD; i++)
            if ((unsigned char)r.raw[i] != GUARD_BYTE || (unsigned char)r.base[r.bytes + i] != GUARD_BYTE) {
                cuda_emu_say("%s wrote %s device allocation #%lu (%zu bytes)", g_last_op,
                             (unsigned char)r.raw[i] != GUARD_BYTE ? "before the start of" : "past the end of",
                             r.serial, r.bytes);
                cuda_emu_fault();
                return -1;
            }
    }
    return 0;
}

/* ---- streams: queues and the synchronizations that run them ----------------------------------- */

int cuda_emu_stream_ok(cudaStream_t st)
{
    if (!st || st == cudaStreamLegacy || st == cudaStreamPerThread) return 1;
    for (cuda_emu_stream *s : g_streams)
        if (s == st) return 1;
    return 0;
}

static cuda_emu_stream *stream_of(cudaStream_t st)
{
    return !st || st == cudaStreamLegacy || st == cudaStreamPerThread ? &g_legacy : st;
}

static int may_run(const cuda_emu_stream *s)
{
    return !s->q.empty() && (!s->q.front().ev || s->q.front().ev->done >= s->q.front().gen);
}

/* the next operation of s (in run_until's device window); a faulted device drops it */
static void run_next(cuda_emu_stream *s)
{
    pending p = std::move(s->q.front());
    s->q.pop_front();
    if (p.ev || g_sticky) return;
    if (cuda_emu_census_on() && p.what != "cudaEventRecord") return; /* census: counted when queued, not run */
    snprintf(g_last_op, sizeof g_last_op, "%s", p.what.c_str());
    p.run();
    if (!g_sticky) check_guards();
}

/* runs queued operations, a random stream whose next one may run at a time, until done(); -1 when
 * nothing can run before (a wait on an event whose record never runs). Device memory stays mapped for the
 * whole run, not opened and closed around each operation: no host code runs between two of them, and each
 * toggle is an mprotect of every allocation (a fifth to a quarter of the emulated tests' CPU time went to it) */
template <typename F> static int run_until(F done)
{
    if (done()) return 0;
    device_window w;
    std::vector<cuda_emu_stream *> ready;
    while (!done()) {
        ready.clear();
        if (may_run(&g_legacy)) ready.push_back(&g_legacy);
        for (cuda_emu_stream *s : g_streams)
            if (may_run(s)) ready.push_back(s);
        if (ready.empty()) {
            cuda_emu_say("a synchronization waits for work that can never run (a stream waits for an event "
                         "recorded after the wait?)");
            cuda_emu_fault();
            return -1;
        }
        run_next(ready[next_random() % ready.size()]);
    }
    return 0;
}

static int all_idle(void)
{
    if (!g_legacy.q.empty()) return 0;
    for (cuda_emu_stream *s : g_streams)
        if (!s->q.empty()) return 0;
    return 1;
}

static cudaError_t sync_stream(cuda_emu_stream *s)
{
    run_until([s] { return s->q.empty(); });
    return g_sticky;
}

static cudaError_t sync_device(void)
{
    run_until(all_idle);
    return g_sticky;
}

void cuda_emu_enqueue(cudaStream_t st, const char *what, std::function<void()> run)
{
    LOCK;
    cuda_emu_stream *s = stream_of(st);
    /* the legacy stream waits for the blocking streams' earlier work, and they wait for its: run them
     * first (a GPU would also order them, at most later) */
    if (s == &g_legacy) {
        for (cuda_emu_stream *o : g_streams)
            if (!(o->flags & cudaStreamNonBlocking)) sync_stream(o);
    } else if (!(s->flags & cudaStreamNonBlocking))
        sync_stream(&g_legacy);
    s->q.push_back(pending{what, std::move(run), NULL, 0});
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
    return sync_device();
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
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
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
    if (!cuda_emu_census_on()) memset(base, 0xff, bytes); /* NaN as floats: what nothing wrote must not read as zero */
    memset(base + bytes, GUARD_BYTE, GUARD);
    if (!g_window) mprotect(raw, total, PROT_NONE);
    g_regions.push_back(region{base, bytes, MEM_DEVICE, raw, total, ++g_serial, 0});
    *p = base;
    return cudaSuccess;
}

/* cudaFree and cudaFreeHost wait for the device first, as CUDA's do */
static cudaError_t release(void *p, int kind)
{
    LOCK;
    if (!p) return g_sticky;
    if (kind != MEM_REGISTERED) sync_device();
    for (size_t i = 0; i < g_regions.size(); i++)
        if (g_regions[i].base == p && g_regions[i].kind == kind && !g_regions[i].adopted) {
            if (kind == MEM_DEVICE)
                munmap(g_regions[i].raw, g_regions[i].mapped);
            else if (kind == MEM_PINNED)
                free(g_regions[i].raw);
            g_regions.erase(g_regions.begin() + (long)i);
            return g_sticky;
        }
    cuda_emu_say("%s(%p): not %s",
                 kind == MEM_DEVICE ? "cudaFree" : kind == MEM_PINNED ? "cudaFreeHost" : "cudaHostUnregister", p,
                 kind == MEM_DEVICE   ? "a device allocation"
                 : kind == MEM_PINNED ? "pinned memory"
                                      : "registered memory");
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
    g_regions.push_back(region{raw, bytes, MEM_PINNED, raw, bytes, ++g_serial, 0});
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
    if (overlaps(p, bytes)) return refuse(cudaErrorHostMemoryAlreadyRegistered);
    g_regions.push_back(region{(char *)p, bytes, MEM_REGISTERED, (char *)p, bytes, ++g_serial, 0});
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
    return release(p, MEM_REGISTERED);
}

/* A PyTorch CPU tensor standing in for a CUDA one (tests/python/emu_hooks.py): the caller's
 * host memory becomes device memory for the checks (kernel arguments, copies' directions), without guards
 * and never protected, since the caller's host code writes it where a trainer's kernels would. The caller
 * orders its writes with the device's work itself (cuda_emu_synchronize before each of its steps). */
extern "C" int cuda_emu_adopt(void *p, size_t bytes)
{
    LOCK;
    if (g_sticky) return g_sticky;
    if (!p || !bytes) return refuse(cudaErrorInvalidValue);
    region *r = find(p);
    if (r && r->adopted && r->base == p && r->bytes == bytes) return cudaSuccess; /* a session opened again */
    if (overlaps(p, bytes)) {
        cuda_emu_say("cuda_emu_adopt(%p, %zu): overlaps memory the emulator already has", p, bytes);
        return refuse(cudaErrorInvalidValue);
    }
    g_regions.push_back(region{(char *)p, bytes, MEM_DEVICE, (char *)p, 0, ++g_serial, 1});
    return cudaSuccess;
}

/* the memory back to its caller (after the last work that uses it: the device is synchronized first) */
extern "C" int cuda_emu_forget(void *p)
{
    LOCK;
    sync_device();
    for (size_t i = 0; i < g_regions.size(); i++)
        if (g_regions[i].base == p && g_regions[i].adopted) {
            g_regions.erase(g_regions.begin() + (long)i);
            return g_sticky;
        }
    cuda_emu_say("cuda_emu_forget(%p): not adopted memory", p);
    return refuse(cudaErrorInvalidValue);
}

/* runs every queued operation of every stream (cudaDeviceSynchronize, under a name ctypes can call) */
extern "C" int cuda_emu_synchronize(void)
{
    return cudaDeviceSynchronize();
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

/* the checks of a copy (direction, device side inside its allocation); *kind resolved from Default */
static cudaError_t check_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind *kind)
{
    if ((unsigned)*kind > cudaMemcpyDefault) return refuse(cudaErrorInvalidMemcpyDirection);
    int ddev = is_device(dst), sdev = is_device(src);
    if (*kind == cudaMemcpyDefault) *kind = (cudaMemcpyKind)((sdev ? 2 : 0) + (ddev ? 1 : 0));
    int want_d = *kind == cudaMemcpyHostToDevice || *kind == cudaMemcpyDeviceToDevice;
    int want_s = *kind == cudaMemcpyDeviceToHost || *kind == cudaMemcpyDeviceToDevice;
    if (ddev != want_d || sdev != want_s) {
        cuda_emu_say("cudaMemcpy%s of %zu bytes from %s to %s memory", kind_name(*kind), bytes,
                     sdev ? "device" : "host", ddev ? "device" : "host");
        return refuse(cudaErrorInvalidMemcpyDirection);
    }
    if ((ddev && cuda_emu_device_span(dst, bytes)) || (sdev && cuda_emu_device_span(src, bytes))) {
        cuda_emu_say("cudaMemcpy%s of %zu bytes runs past the end of its device allocation", kind_name(*kind),
                     bytes);
        return refuse(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

static void enqueue_copy(cudaStream_t st, cudaMemcpyKind kind, void *dst, const void *src, size_t bytes)
{
    char what[64];
    snprintf(what, sizeof what, "cudaMemcpy%s", kind_name(kind));
    cuda_emu_enqueue(st, what, [=] { memmove(dst, src, bytes); });
}

/* on the legacy stream; returns when the copy is done */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    LOCK;
    if (g_sticky) return g_sticky;
    if (!bytes) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, bytes, &kind);
    if (e) return e;
    enqueue_copy(0, kind, dst, src, bytes);
    return sync_stream(&g_legacy);
}

/* pinned host memory (or device to device): queued; pageable: the stream's work first, then the copy at
 * once (CUDA stages a pageable source before returning, and returns from a copy to pageable memory
 * only when it is done) */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t st)
{
    LOCK;
    if (!cuda_emu_stream_ok(st)) return refuse(cudaErrorInvalidResourceHandle);
    if (g_sticky) return g_sticky;
    if (!bytes) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, bytes, &kind);
    if (e) return e;
    enqueue_copy(st, kind, dst, src, bytes);
    int pageable = (kind == cudaMemcpyHostToDevice && !is_pinned(src)) ||
                   (kind == cudaMemcpyDeviceToHost && !is_pinned(dst)) || kind == cudaMemcpyHostToHost;
    return pageable ? sync_stream(stream_of(st)) : cudaSuccess;
}

static cudaError_t memset_on(cudaStream_t st, void *p, int value, size_t bytes)
{
    if (g_sticky) return g_sticky;
    if (cuda_emu_device_span(p, bytes)) {
        cuda_emu_say("cudaMemset of %zu bytes at %p: not inside a device allocation", bytes, p);
        return refuse(cudaErrorInvalidValue);
    }
    cuda_emu_enqueue(st, "cudaMemset", [=] { memset(p, value, bytes); });
    return cudaSuccess;
}

/* asynchronous to the host, on the legacy stream, as CUDA's is for device memory */
cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    LOCK;
    return memset_on(0, p, value, bytes);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t st)
{
    LOCK;
    if (!cuda_emu_stream_ok(st)) return refuse(cudaErrorInvalidResourceHandle);
    return memset_on(st, p, value, bytes);
}

/* ---- streams and events ----------------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags)
{
    LOCK;
    if (g_sticky) return g_sticky;
    *st = new cuda_emu_stream{flags, {}};
    g_streams.push_back(*st);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *st)
{
    return cudaStreamCreateWithFlags(st, cudaStreamDefault);
}

/* its queued work runs first (CUDA finishes it after the call returns) */
cudaError_t cudaStreamDestroy(cudaStream_t st)
{
    LOCK;
    for (size_t i = 0; i < g_streams.size(); i++)
        if (g_streams[i] == st) {
            sync_stream(st);
            delete st;
            g_streams.erase(g_streams.begin() + (long)i);
            return g_sticky;
        }
    return refuse(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    LOCK;
    return cuda_emu_stream_ok(st) ? sync_stream(stream_of(st)) : refuse(cudaErrorInvalidResourceHandle);
}

/* st's later work waits until ev's latest record (when the call is made) has run */
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned flags)
{
    LOCK;
    (void)flags;
    if (!cuda_emu_stream_ok(st) || !ev) return refuse(cudaErrorInvalidResourceHandle);
    if (ev->recorded > ev->done) stream_of(st)->q.push_back(pending{"cudaStreamWaitEvent", {}, ev, ev->recorded});
    return g_sticky;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned flags)
{
    LOCK;
    if (g_sticky) return g_sticky;
    *ev = new cuda_emu_event{flags, 0, 0, 0};
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *ev)
{
    return cudaEventCreateWithFlags(ev, cudaEventDefault);
}

/* after its queued records and the waits on it have run (the queues point at it) */
cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    LOCK;
    if (!ev) return refuse(cudaErrorInvalidResourceHandle);
    sync_device();
    delete ev;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st)
{
    LOCK;
    if (!ev || !cuda_emu_stream_ok(st)) return refuse(cudaErrorInvalidResourceHandle);
    unsigned long gen = ++ev->recorded;
    cuda_emu_enqueue(st, "cudaEventRecord", [ev, gen] {
        ev->done = gen;
        ev->ms = event_clock_ms();
    });
    return g_sticky;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    LOCK;
    if (!ev) return refuse(cudaErrorInvalidResourceHandle);
    unsigned long gen = ev->recorded;
    run_until([ev, gen] { return ev->done >= gen; });
    return g_sticky;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    LOCK;
    if (g_sticky) return g_sticky;
    if (!start || !end || (start->flags | end->flags) & cudaEventDisableTiming || !start->recorded ||
        !end->recorded)
        return refuse(cudaErrorInvalidResourceHandle);
    if (start->done < start->recorded || end->done < end->recorded) return refuse(cudaErrorNotReady);
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}

/* ---- launches --------------------------------------------------------------------------------- */

int cuda_emu_launch_check(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t st)
{
    LOCK;
    if (g_sticky) return -1;
    unsigned threads = block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || !threads || threads > 1024 || block.z > 64 || grid.y > 65535 ||
        grid.z > 65535) {
        cuda_emu_say("kernel %s: launch of (%u,%u,%u) blocks of (%u,%u,%u) threads: invalid configuration", name,
                     grid.x, grid.y, grid.z, block.x, block.y, block.z);
        refuse(cudaErrorInvalidConfiguration);
        return -1;
    }
    const char *refused = getenv("CUDA_EMU_REFUSE_KERNEL");
    if (refused && refused[0] && strstr(name, refused)) { /* fault injection (cuda_runtime.h) */
        cuda_emu_say("kernel %s: refused (CUDA_EMU_REFUSE_KERNEL=%s): too many resources requested", name, refused);
        refuse(cudaErrorLaunchOutOfResources);
        return -1;
    }
    if (!cuda_emu_stream_ok(st)) {
        cuda_emu_say("kernel %s: launched on a stream that does not exist", name);
        refuse(cudaErrorInvalidResourceHandle);
        return -1;
    }
    if (smem) { /* the backend declares its shared memory statically */
        cuda_emu_say("kernel %s: %zu bytes of dynamic shared memory: not emulated", name, smem);
        cuda_emu_fault();
        return -1;
    }
    if (cuda_emu_census_on()) cuda_emu_census_kernel(name, grid, block);
    return 0;
}

void cuda_emu_check_arg(const char *name, int index, const void *p)
{
    LOCK;
    if (!p || is_device(p) || g_sticky) return;
    cuda_emu_say("kernel %s: argument %d (%p) is %s, not device memory", name, index, p,
                 find(p) ? "pinned or registered host memory" : "host memory");
    cuda_emu_fault();
}

void cuda_emu_launch_enqueue(const char *name, cudaStream_t st, std::function<int(unsigned, char *, size_t)> run)
{
    LOCK;
    if (g_sticky) return;
    std::string kernel = name;
    unsigned seed = (unsigned)next_random();
    cuda_emu_enqueue(st, (std::string("kernel ") + name).c_str(), [kernel, seed, run] {
        char err[512] = "";
        if (run(seed, err, sizeof err)) {
            cuda_emu_say("kernel %s: %s", kernel.c_str(), err);
            cuda_emu_fault();
        }
    });
}
