/* diloco_cuda.h: DiLoCo on the device, the CUDA implementation of libdiloco's device hooks
 * (diloco_device_ops in worker/diloco.h), a plain C API over worker/cuda/diloco_cuda.cu.
 *
 * For a trainer whose fp32 parameters live in one flat device buffer (the GPT's CUDA backend,
 * gpt_cuda_params_device) and train on one stream, it keeps:
 *   - the global snapshot on the device (the parameters the round started from);
 *   - the pseudo-gradient kernel: d = snapshot - params (one fp32 subtraction, like the host) and its
 *     bf16 cast with round-to-nearest-even and quiet NaN bit for bit as common/math/bf16.c, plus the index
 *     of the first non-finite d; only those bytes (2 per parameter, or 4 with --no-bf16) cross PCIe,
 *     into libdiloco's page-locked buffers (host_alloc: cudaMallocHost, allocated once per session);
 *   - loads of new global parameters: one cudaMemcpyAsync host->snapshot per range on its own sync
 *     stream (it overlaps the training kernels still queued on the compute stream), then, ordered by
 *     events after those kernels, snapshot->params (a device copy, or the Streaming mix
 *     a*params + b*snapshot), and the compute stream waits for that before its next kernel.
 * Every hook returns when the host buffer it was given is no longer needed (Δ copied out, base
 * copied in); the device-side copy into params completes asynchronously, ordered before the next
 * training kernel.
 *
 * Compiled only when nvcc exists (DILOCO_HAVE_CUDA). Functions return 0 (or a pointer) on success,
 * -1 (or NULL) with a message in err on a CUDA error. */
#ifndef DILOCO_DILOCO_CUDA_H
#define DILOCO_DILOCO_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "diloco.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dl_cuda dl_cuda;

/* params: the trainer's device parameters (numel floats, not owned) and stream: the cudaStream_t
 * its training runs on. Tests may pass params = NULL and stream = NULL: dl_cuda then allocates the
 * parameters and a compute stream of its own (dl_cuda_params_upload / _download reach them). */
dl_cuda *dl_cuda_create(float *params, size_t numel, void *stream, char *err, size_t errlen);
void dl_cuda_free(dl_cuda *c);
/* ops = the hooks below with ctx = c (host_alloc/host_free included). */
void dl_cuda_ops(dl_cuda *c, diloco_device_ops *ops);

/* The hooks (diloco.h for the contract); ctx is a dl_cuda. */
int dl_cuda_delta(void *ctx, size_t off, size_t n, int bf16, void *out, size_t *bad, char *err, size_t errlen);
int dl_cuda_load(void *ctx, const float *base, size_t off, size_t n, int mode, double alpha, char *err, size_t errlen);
/* Page-locked host memory (cudaMallocHost); falls back to malloc if pinning fails (copies stay
 * correct, only synchronous). */
void *dl_cuda_host_alloc(void *ctx, size_t bytes);
void dl_cuda_host_free(void *ctx, void *p);

/* Tests: copies of the device parameters / snapshot [off, off+n) (wait for both streams). */
int dl_cuda_params_upload(dl_cuda *c, const float *host, size_t off, size_t n, char *err, size_t errlen);
int dl_cuda_params_download(dl_cuda *c, float *host, size_t off, size_t n, char *err, size_t errlen);
int dl_cuda_snapshot_download(dl_cuda *c, float *host, size_t off, size_t n, char *err, size_t errlen);
/* Tests: 1 if p is page-locked host memory from dl_cuda_host_alloc's cudaMallocHost, else 0. */
int dl_cuda_is_pinned(const void *p);

/* The only symbols of build/libdiloco_cuda.so (diloco_cuda_so.cu), for callers through a foreign-function
 * interface. diloco_cuda_ops_for: makes device `device` current and a dl_cuda over the caller's n device
 * floats dev_params, trained on `stream` (a cudaStream_t; NULL: the legacy default stream), fills *out
 * and *handle. 0, or -1 with err. diloco_cuda_release frees the handle after diloco_close. */
int diloco_cuda_ops_for(float *dev_params, size_t n, void *stream, int device, diloco_device_ops *out, void **handle,
                        char *err, size_t errlen);
void diloco_cuda_release(void *handle);

#ifdef __cplusplus
}
#endif
#endif
