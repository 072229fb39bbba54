/* diloco_cuda.cu: libdiloco's device hooks on CUDA (see diloco_cuda.h): the pseudo-gradient kernel
 * against a device snapshot of the global parameters, with the bf16 rounding of common/math/bf16.c and a
 * finite check, and the loads of new global parameters on a sync stream of their own, ordered with
 * the training stream by events.
 *
 * Streams: `st` is the trainer's (training kernels), `ss` ours. The snapshot is only ever touched on
 * ss, so a host->snapshot copy can run while st still computes; anything that reads or writes the
 * trainer's params on ss first waits for an event recorded on st (everything training queued so
 * far), and st waits for an event recorded on ss after a load changed params.
 *
 * The kernels use __fsub_rn / __fmul_rn / __fadd_rn so nvcc cannot contract them into FMAs: the host
 * path (libdiloco, -ffp-contract=off) computes the same operations in the same order, and NaN
 * results get the bytes x86-64 gives them (host_sub_bits). The first non-finite index is an
 * atomicMin, which does not depend on the order threads run in. */
#include "diloco_cuda.h"

#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "cuda_check.h"

#define BS 256
#define NO_BAD 0xffffffffffffffffULL

struct dl_cuda {
    float *params;      /* the trainer's device parameters */
    float *snap;        /* the global snapshot, numel floats */
    void *scratch;      /* the device-side Δ of one range before its copy out (numel x elt) */
    size_t scratch_elt; /* 2 (bf16) or 4 (fp32): the element size scratch was allocated for */
    size_t numel;
    cudaStream_t st, ss;      /* training (the trainer's), sync (ours) */
    cudaEvent_t ev_compute;   /* recorded on st: the training work a sync-stream operation waits for */
    cudaEvent_t ev_loaded;    /* recorded on ss after params changed: st waits for it */
    cudaEvent_t ev_copied;    /* recorded on ss after the host->device copy of a load */
    unsigned long long *dbad; /* device: first non-finite index of the last Δ */
    unsigned long long *hbad; /* pinned host copy */
    int own_params, own_stream;
};

/* ---- kernels -------------------------------------------------------------------------------- */

/* common/math/bf16.c's bf16_from_bits: add 0x7fff plus the lowest kept bit (nearest, ties to even; a carry
 * bumps the exponent, up to Inf), and a NaN keeps its sign and top mantissa bits with the quiet bit
 * forced so truncation cannot turn it into Inf. */
__device__ __forceinline__ uint16_t bf16_bits(unsigned b)
{
    unsigned rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    unsigned quiet = (b >> 16) | 0x0040u;
    return (uint16_t)((b & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

/* NaN results as the host computes them. The GPU returns one canonical NaN (0x7fffffff) from any
 * operation on or producing NaN; x86-64 SSE/AVX (the host libdiloco runs on) returns the first
 * operand if it is a NaN, else the second, made quiet (bit 22 set), and for an invalid operation
 * without NaN operands (Inf - Inf) the "indefinite" 0xffc00000. Emulated so that even a non-finite
 * pseudo-gradient (never sent, but compared by the tests) has the host's bytes. */
__device__ __forceinline__ int is_nan_bits(unsigned b)
{
    return (b & 0x7fffffffu) > 0x7f800000u;
}

__device__ __forceinline__ unsigned host_sub_bits(float x, float y)
{
    float d = __fsub_rn(x, y);
    if (d == d) return __float_as_uint(d);
    unsigned bx = __float_as_uint(x), by = __float_as_uint(y);
    if (is_nan_bits(bx)) return bx | 0x00400000u;
    if (is_nan_bits(by)) return by | 0x00400000u;
    return 0xffc00000u;
}

/* out[i] = snap[i] - params[i] (bf16 or fp32), *bad = min index of a non-finite difference */
template <int BF16>
__global__ void delta_k(void *out, const float *snap, const float *params, size_t n, unsigned long long *bad)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned b = host_sub_bits(snap[i], params[i]);
        float d = __uint_as_float(b);
        if (BF16)
            ((uint16_t *)out)[i] = bf16_bits(b);
        else
            ((float *)out)[i] = d;
        if ((b & 0x7f800000u) == 0x7f800000u) atomicMin(bad, (unsigned long long)i);
    }
}

/* Streaming mixing: params = a*params + b*snap, as libdiloco's params_apply (a, b and the
 * global snap are finite, so a NaN result can only come from a NaN parameter: the host keeps it,
 * made quiet) */
__global__ void mix_k(float *params, const float *snap, size_t n, float a, float b)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float p = params[i], r = __fadd_rn(__fmul_rn(a, p), __fmul_rn(b, snap[i]));
        if (r != r && p != p) r = __uint_as_float(__float_as_uint(p) | 0x00400000u);
        params[i] = r;
    }
}

static unsigned grid_for(size_t n)
{
    size_t b = (n + BS - 1) / BS;
    if (b < 1) b = 1;
    return (unsigned)(b > 65535u * 32u ? 65535u * 32u : b); /* grid-stride beyond ~537M elements */
}

/* ---- create / free ---------------------------------------------------------------------------- */

extern "C" void dl_cuda_free(dl_cuda *c)
{
    if (!c) return;
    if (c->ss) cudaStreamSynchronize(c->ss);
    if (c->st) cudaStreamSynchronize(c->st);
    if (c->ev_compute) cudaEventDestroy(c->ev_compute);
    if (c->ev_loaded) cudaEventDestroy(c->ev_loaded);
    if (c->ev_copied) cudaEventDestroy(c->ev_copied);
    if (c->ss) cudaStreamDestroy(c->ss);
    if (c->own_stream && c->st) cudaStreamDestroy(c->st);
    if (c->own_params) cudaFree(c->params);
    cudaFree(c->snap);
    cudaFree(c->scratch);
    cudaFree(c->dbad);
    if (c->hbad) cudaFreeHost(c->hbad);
    free(c);
    cudaGetLastError();
}

static int create_inner(dl_cuda *c, char *err, size_t errlen)
{
    size_t bytes = (c->numel ? c->numel : 1) * sizeof(float);
    if (!c->st) {
        CK(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking));
        c->own_stream = 1;
    }
    /* the zeroing goes on the stream that uses each buffer next: a plain cudaMemset would go on the
     * legacy default stream, which our non-blocking streams do not wait for (the first load's copy into
     * the snapshot could run before the zeros and be overwritten; the CUDA emulator's streams showed it) */
    CK(cudaStreamCreateWithFlags(&c->ss, cudaStreamNonBlocking));
    if (!c->params) {
        CK(cudaMalloc((void **)&c->params, bytes));
        c->own_params = 1;
        CK(cudaMemsetAsync(c->params, 0, bytes, c->st));
    }
    CK(cudaEventCreateWithFlags(&c->ev_compute, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&c->ev_loaded, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&c->ev_copied, cudaEventDisableTiming));
    CK(cudaMalloc((void **)&c->snap, bytes));
    CK(cudaMemsetAsync(c->snap, 0, bytes, c->ss));
    CK(cudaMalloc((void **)&c->dbad, sizeof *c->dbad));
    CK(cudaMallocHost((void **)&c->hbad, sizeof *c->hbad));
    return 0;
}

extern "C" dl_cuda *dl_cuda_create(float *params, size_t numel, void *stream, char *err, size_t errlen)
{
    if ((params == NULL) != (stream == NULL)) {
        err_set(err, errlen, "dl_cuda: give both the device parameters and their stream, or neither");
        return NULL;
    }
    dl_cuda *c = (dl_cuda *)calloc(1, sizeof *c);
    if (!c) {
        err_set(err, errlen, "dl_cuda: out of memory");
        return NULL;
    }
    c->params = params;
    c->numel = numel;
    c->st = (cudaStream_t)stream;
    if (create_inner(c, err, errlen)) {
        dl_cuda_free(c);
        return NULL;
    }
    return c;
}

extern "C" void dl_cuda_ops(dl_cuda *c, diloco_device_ops *ops)
{
    memset(ops, 0, sizeof *ops);
    ops->ctx = c;
    ops->delta = dl_cuda_delta;
    ops->load = dl_cuda_load;
    ops->host_alloc = dl_cuda_host_alloc;
    ops->host_free = dl_cuda_host_free;
}

static int check_range(const dl_cuda *c, size_t off, size_t n, char *err, size_t errlen)
{
    if (off > c->numel || n > c->numel - off) {
        err_set(err, errlen, "dl_cuda: range [%zu, %zu) outside [0, %zu)", off, off + n, c->numel);
        return -1;
    }
    return 0;
}

/* ss waits for everything queued on st so far */
static int ss_after_training(dl_cuda *c, char *err, size_t errlen)
{
    CK(cudaEventRecord(c->ev_compute, c->st));
    CK(cudaStreamWaitEvent(c->ss, c->ev_compute, 0));
    return 0;
}

/* ---- the hooks -------------------------------------------------------------------------------- */

extern "C" int dl_cuda_delta(void *ctx, size_t off, size_t n, int bf16, void *out, size_t *bad, char *err,
                             size_t errlen)
{
    dl_cuda *c = (dl_cuda *)ctx;
    if (check_range(c, off, n, err, errlen)) return -1;
    size_t elt = bf16 ? sizeof(uint16_t) : sizeof(float);
    if (c->scratch_elt < elt) { /* once per session (twice only if it ever switched bf16 -> fp32) */
        CK(cudaStreamSynchronize(c->ss));
        cudaFree(c->scratch);
        c->scratch = NULL;
        c->scratch_elt = 0;
        CK(cudaMalloc(&c->scratch, (c->numel ? c->numel : 1) * elt));
        c->scratch_elt = elt;
    }
    if (n == 0) return 0;
    if (ss_after_training(c, err, errlen)) return -1; /* Δ of the parameters after the last step */
    CK(cudaMemsetAsync(c->dbad, 0xff, sizeof *c->dbad, c->ss));
    char *dst = (char *)c->scratch + off * elt;
    if (bf16)
        delta_k<1><<<grid_for(n), BS, 0, c->ss>>>(dst, c->snap + off, c->params + off, n, c->dbad);
    else
        delta_k<0><<<grid_for(n), BS, 0, c->ss>>>(dst, c->snap + off, c->params + off, n, c->dbad);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(out, dst, n * elt, cudaMemcpyDeviceToHost, c->ss));
    CK(cudaMemcpyAsync(c->hbad, c->dbad, sizeof *c->hbad, cudaMemcpyDeviceToHost, c->ss));
    CK(cudaStreamSynchronize(c->ss));
    if (*c->hbad == NO_BAD) return 0;
    *bad = (size_t)*c->hbad;
    return 1;
}

extern "C" int dl_cuda_load(void *ctx, const float *base, size_t off, size_t n, int mode, double alpha, char *err,
                            size_t errlen)
{
    dl_cuda *c = (dl_cuda *)ctx;
    if (check_range(c, off, n, err, errlen)) return -1;
    if (mode != DILOCO_LOAD_SNAPSHOT && mode != DILOCO_LOAD_COPY && mode != DILOCO_LOAD_MIX) {
        err_set(err, errlen, "dl_cuda: bad load mode %d", mode);
        return -1;
    }
    if (n == 0) return 0;
    /* the PCIe part: the snapshot is ours, so this needs not wait for training */
    CK(cudaMemcpyAsync(c->snap + off, base, n * sizeof(float), cudaMemcpyHostToDevice, c->ss));
    CK(cudaEventRecord(c->ev_copied, c->ss));
    if (mode != DILOCO_LOAD_SNAPSHOT) {
        /* params: after the training work queued so far, and before the next */
        if (ss_after_training(c, err, errlen)) return -1;
        if (mode == DILOCO_LOAD_COPY) {
            CK(cudaMemcpyAsync(c->params + off, c->snap + off, n * sizeof(float), cudaMemcpyDeviceToDevice, c->ss));
        } else {
            float a = (float)alpha, b = (float)(1.0 - alpha);
            mix_k<<<grid_for(n), BS, 0, c->ss>>>(c->params + off, c->snap + off, n, a, b);
            CK(cudaGetLastError());
        }
        CK(cudaEventRecord(c->ev_loaded, c->ss));
        CK(cudaStreamWaitEvent(c->st, c->ev_loaded, 0));
    }
    /* base is the caller's only until we return */
    CK(cudaEventSynchronize(c->ev_copied));
    return 0;
}

/* pointers that dl_cuda_host_alloc could not pin (rare: malloc fallback), so free knows which is which */
#define UNPINNED_MAX 16
static void *g_unpinned[UNPINNED_MAX];
static pthread_mutex_t g_unpinned_mu = PTHREAD_MUTEX_INITIALIZER;

extern "C" void *dl_cuda_host_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) == cudaSuccess) return p;
    cudaGetLastError();
    pthread_mutex_lock(&g_unpinned_mu);
    int slot = -1;
    for (int i = 0; i < UNPINNED_MAX && slot < 0; i++)
        if (!g_unpinned[i]) slot = i;
    if (slot >= 0 && (p = malloc(bytes ? bytes : 1)) != NULL) g_unpinned[slot] = p;
    pthread_mutex_unlock(&g_unpinned_mu);
    if (p) fprintf(stderr, "dl_cuda: could not page-lock %zu bytes: host copies will be synchronous\n", bytes);
    return p;
}

extern "C" void dl_cuda_host_free(void *ctx, void *p)
{
    (void)ctx;
    if (!p) return;
    pthread_mutex_lock(&g_unpinned_mu);
    int found = 0;
    for (int i = 0; i < UNPINNED_MAX && !found; i++)
        if (g_unpinned[i] == p) g_unpinned[i] = NULL, found = 1;
    pthread_mutex_unlock(&g_unpinned_mu);
    if (found)
        free(p);
    else
        cudaFreeHost(p);
}

extern "C" int dl_cuda_is_pinned(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

/* ---- test access -------------------------------------------------------------------------------- */

static int settle(dl_cuda *c, char *err, size_t errlen)
{
    CK(cudaStreamSynchronize(c->ss));
    CK(cudaStreamSynchronize(c->st));
    return 0;
}

extern "C" int dl_cuda_params_upload(dl_cuda *c, const float *host, size_t off, size_t n, char *err, size_t errlen)
{
    if (check_range(c, off, n, err, errlen) || settle(c, err, errlen)) return -1;
    /* on our stream, waited for: cudaMemcpy from pageable memory may return before the DMA lands, and the
     * legacy stream it would run on orders nothing for our non-blocking streams' kernels */
    CK(cudaMemcpyAsync(c->params + off, host, n * sizeof(float), cudaMemcpyHostToDevice, c->st));
    CK(cudaStreamSynchronize(c->st));
    return 0;
}

extern "C" int dl_cuda_params_download(dl_cuda *c, float *host, size_t off, size_t n, char *err, size_t errlen)
{
    if (check_range(c, off, n, err, errlen) || settle(c, err, errlen)) return -1;
    CK(cudaMemcpy(host, c->params + off, n * sizeof(float), cudaMemcpyDeviceToHost));
    return 0;
}

extern "C" int dl_cuda_snapshot_download(dl_cuda *c, float *host, size_t off, size_t n, char *err, size_t errlen)
{
    if (check_range(c, off, n, err, errlen) || settle(c, err, errlen)) return -1;
    CK(cudaMemcpy(host, c->snap + off, n * sizeof(float), cudaMemcpyDeviceToHost));
    return 0;
}
