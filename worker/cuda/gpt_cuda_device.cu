/* gpt_cuda_device.cu: the CUDA device as the trainer and the benchmarks see it (gpt_cuda.h): how many
 * there are, what the current one is and its peak rates, pinning host buffers, the measured sgemm rate. */
#include "gpt_cuda_internal.h"

#include <stdio.h>

/* ------------------------------------------------------------------------------------------- */
/* devices                                                                                     */

extern "C" int gpt_cuda_device_count(char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        err_set(why, whylen, "%s", cudaGetErrorString(e));
        cudaGetLastError(); /* clear the sticky-free error state */
        return 0;
    }
    if (n <= 0) err_set(why, whylen, "cudaGetDeviceCount returned 0 devices");
    return n > 0 ? n : 0;
}

extern "C" int gpt_cuda_device_info(char *name, size_t namelen, double *fp32_peak, double *tf32_peak)
{
    int dev = 0, sms = 0, khz = 0, major = 0, minor = 0;
    cudaDeviceProp p;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) return -1;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    /* fp32 FMA lanes per SM and dense TF32 tensor-core FLOP per clock per SM (A100 / H100 data
     * sheets: 64 lanes and 1024 FLOP/clk on sm_80, 128 and 2048 on sm_90); 0 = unknown */
    int lanes = 0, tf32 = 0;
    if (major == 8 && minor == 0) {
        lanes = 64;
        tf32 = 1024;
    } else if (major == 8)
        lanes = 128;
    else if (major == 9) {
        lanes = 128;
        tf32 = 2048;
    } else if (major == 7)
        lanes = 64;
    else if (major >= 10)
        lanes = 128;
    double hz = khz * 1e3;
    if (fp32_peak) *fp32_peak = 2.0 * lanes * sms * hz;
    if (tf32_peak) *tf32_peak = (double)tf32 * sms * hz;
    if (name)
        snprintf(name, namelen, "%s, sm_%d%d, %d SMs, %.0f MHz, %zu MiB", p.name, major, minor, sms, khz / 1e3,
                 p.totalGlobalMem >> 20);
    return 0;
}

extern "C" int gpt_cuda_pin(void *host, size_t bytes)
{
    if (cudaHostRegister(host, bytes, cudaHostRegisterDefault) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return 1;
}

extern "C" void gpt_cuda_unpin(void *host)
{
    if (cudaHostUnregister(host) != cudaSuccess) cudaGetLastError();
}

extern "C" double gpt_cuda_sgemm_flops(int n, int tf32, int reps)
{
    char err[256];
    size_t errlen = sizeof err;
    cublasHandle_t h = NULL;
    float *a = NULL;
    double best = 0;
    cudaEvent_t e0 = NULL, e1 = NULL;
    size_t nn = (size_t)n * n;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
    if (set_math(h, tf32, err, errlen) == 0 && cudaMalloc((void **)&a, 3 * nn * sizeof(float)) == cudaSuccess &&
        cudaMemset(a, 0, 3 * nn * sizeof(float)) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
        cudaEventCreate(&e1) == cudaSuccess) {
        for (int r = 0; r < reps + 1; r++) {
            cudaEventRecord(e0, 0);
            if (mm(h, 0, 0, n, n, n, 1.0f, a, n, a + nn, n, 0.0f, a + 2 * nn, n) != CUBLAS_STATUS_SUCCESS) break;
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            double f = 2.0 * n * (double)n * n / (ms * 1e-3);
            if (r > 0 && f > best) best = f; /* the first run warms up */
        }
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cublasDestroy(h);
    cudaGetLastError();
    return best;
}
