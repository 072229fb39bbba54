/* diloco_cuda_so.cu: the exported entry of build/libdiloco_cuda.so, libdiloco's CUDA device hooks for
 * callers that are not C trainers (the Python package, rediloco/devicehooks.py, through ctypes).
 *
 * The caller owns fp32 parameters in one flat device buffer and trains on one stream; it gets a
 * diloco_device_ops (diloco_cuda.h) to put in diloco_options.device and a handle to release after
 * diloco_close. Everything else in the .so is local (the Makefile keeps only diloco_cuda_* global). */
#include "diloco_cuda.h"

#include <cuda_runtime.h>

#include "cuda_check.h"

/* stream 0 (PyTorch's default: the legacy default stream) is given to dl_cuda as cudaStreamLegacy,
 * the same stream under a non-NULL handle, since dl_cuda reads NULL as "make your own". */
extern "C" __attribute__((visibility("default"))) int diloco_cuda_ops_for(float *dev_params, size_t n, void *stream,
                                                                          int device, diloco_device_ops *out,
                                                                          void **handle, char *err, size_t errlen)
{
    *handle = NULL;
    if (!dev_params) {
        err_set(err, errlen, "diloco_cuda_ops_for: no device parameters given");
        return -1;
    }
    CK(cudaSetDevice(device));
    dl_cuda *c = dl_cuda_create(dev_params, n, stream ? stream : (void *)cudaStreamLegacy, err, errlen);
    if (!c) return -1;
    dl_cuda_ops(c, out);
    *handle = c;
    return 0;
}

/* After diloco_close (the hooks are not called any more); NULL is a no-op. */
extern "C" __attribute__((visibility("default"))) void diloco_cuda_release(void *handle)
{
    dl_cuda_free((dl_cuda *)handle);
}
