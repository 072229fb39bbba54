/* test_cuda_emu: the CPU CUDA emulator (tests/tools/cuda_emu.cc) refuses what a GPU or cuBLAS would, and
 * catches what a GPU would fault on, so the GPU tests it runs in CI (test_cuda_*_emu) can fail for the
 * reasons they would fail on a device:
 *   - fresh device memory reads as NaN; a kernel's writes come back through cudaMemcpy; host code that
 *     dereferences a device pointer dies of SIGSEGV (device memory is mapped only while the emulated
 *     device works), naming the allocation;
 *   - refusals (the call's error, cudaGetLastError once, then the device works on): a launch of 0 or 2048
 *     threads, a copy in the wrong direction or past its allocation, cuBLAS leading dimensions below the
 *     rows, type combinations cublasGemmEx does not take, events made without timing;
 *   - faults (every later call fails, as on a GPU; each in a child process): a kernel given host memory,
 *     a kernel that writes one element past its allocation, a kernel whose warp splits between __syncthreads and a shuffle, a
 *     product whose operand runs past its allocation;
 *   - adopted memory (cuda_emu_adopt: a caller's host memory as device memory) takes kernels and device
 *     copies, is not cudaFree's, and is host memory again once forgotten;
 *   - streams: a pinned async copy has not run before the synchronization; two non-blocking streams race
 *     (under some of 16 seeds the reader runs first) unless an event orders them (never then); an elapsed
 *     time before the events ran is not ready;
 *   - products: both transposes, batch strides, beta 0 never reads C (NaN there stays out), TF32 rounding
 *     under CUBLAS_TF32_TENSOR_OP_MATH, bf16 operands with fp32 results;
 *   - cuBLASLt: the bias epilogue with and without a C apart from D; an attribute of the wrong size, an
 *     algorithm chosen for other layouts refused; no algorithm under CUDA_EMU_LT_ALGOS=0; a pointer less
 *     aligned than the algorithm was chosen for faults the device (misaligned address). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cublasLt.h"
#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "emu_check.h"

__global__ void fill_k(float *out, int n, float v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v + (float)i;
}

__global__ void fill_one_past_k(float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f; /* the bug: <= */
}

__global__ void divergent_barrier_k(float *out)
{
    float v = 1.0f;
    if (threadIdx.x < 16)
        __syncthreads(); /* the bug: half the warp waits at the block's barrier, */
    else
        v = __shfl_xor_sync(0xffffffffu, v, 1); /* the other half at a shuffle: a GPU hangs */
    out[threadIdx.x] = v;
}

/* runs body in a child; returns its exit status (what body returned), or 128 + the signal that killed it */
static int in_child(int (*body)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(body());
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* host code reading a device pointer: a GPU faults, and so does the emulator (the allocation is named on
 * stderr) */
static int host_reads_device(void)
{
    float *d = NULL;
    if (cudaMalloc(&d, 64 * sizeof(float))) return 2;
    volatile float x = d[3];
    (void)x;
    return 0; /* not reached when the read faults */
}

/* after a fault: the device refuses everything, as a GPU context does */
static int faulted(void)
{
    void *p = NULL;
    return cudaDeviceSynchronize() == cudaErrorLaunchFailure && cudaMalloc(&p, 16) == cudaErrorLaunchFailure &&
           cudaGetLastError() == cudaErrorLaunchFailure;
}

static int host_pointer_arg(void)
{
    float host[64];
    simt_cuda_launch("fill_k", fill_k, 1, 64)(host, 64, 0.0f);
    return faulted() ? 0 : 1;
}

static int write_past_end(void)
{
    float *d = NULL;
    if (cudaMalloc(&d, 100 * sizeof(float))) return 2;
    simt_cuda_launch("fill_one_past_k", fill_one_past_k, 4, 32)(d, 100);
    return faulted() ? 0 : 1;
}

static int divergent_barrier(void)
{
    float *d = NULL;
    if (cudaMalloc(&d, 32 * sizeof(float))) return 2;
    simt_cuda_launch("divergent_barrier_k", divergent_barrier_k, 1, 32)(d);
    return faulted() ? 0 : 1;
}

static int gemm_past_end(void)
{
    float *a = NULL, one = 1, zero = 0;
    cublasHandle_t h;
    if (cudaMalloc(&a, 3 * 16 * sizeof(float)) || cublasCreate(&h)) return 2;
    /* A and B 4 x 4 at a, a + 16; C 4 x 5 at a + 32 runs 4 floats past the 48 */
    cublasStatus_t s = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 5, 4, &one, a, 4, a + 16, 4, &zero, a + 32, 4);
    return s == CUBLAS_STATUS_EXECUTION_FAILED && faulted() ? 0 : 1;
}

/* cuda_emu_adopt (a CPU tensor standing in for a CUDA one: tests/python/emu_hooks.py): the
 * caller's memory takes kernels and device copies, stays readable from the host, is not cudaFree's, and is
 * given back once */
static void adopted_memory(void)
{
    static float mem[80];
    float *a = mem + 8, h[64]; /* 64 floats adopted, with host memory on each side */
    const size_t bytes = 64 * sizeof(float);
    CHECK(cuda_emu_adopt(a, bytes) == cudaSuccess && cuda_emu_adopt(a, bytes) == cudaSuccess,
          "host memory adopted as device memory (twice: the same range again)");
    CHECK(cuda_emu_adopt(a + 8, 16) == cudaErrorInvalidValue &&
              cuda_emu_adopt(mem, sizeof mem) == cudaErrorInvalidValue,
          "a range inside adopted memory, or around it, refused");
    simt_cuda_launch("fill_k", fill_k, 2, 32)(a, 64, 2.0f);
    CHECK(cuda_emu_synchronize() == cudaSuccess && a[0] == 2.0f && a[63] == 65.0f,
          "a kernel writes adopted memory, the host reads it after a synchronization");
    CHECK(cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess && h[5] == 7.0f, "a device copy from it");
    CHECK(cudaFree(a) == cudaErrorInvalidValue, "cudaFree refuses adopted memory");
    CHECK(cuda_emu_forget(a) == cudaSuccess && cuda_emu_forget(a) == cudaErrorInvalidValue, "given back once");
    CHECK(cudaMemcpy(h, a, sizeof h, cudaMemcpyDeviceToHost) == cudaErrorInvalidMemcpyDirection,
          "then it is host memory again");
    (void)cudaGetLastError(); /* (the last refusal, reported once) */
    CHECK(cuda_emu_synchronize() == cudaSuccess, "refusals are not faults");
}

static void memory_and_launches(void)
{
    float *d = NULL, h[100];
    CHECK(cudaMalloc(&d, sizeof h) == cudaSuccess, "cudaMalloc");
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess && isnan(h[0]) && isnan(h[99]),
          "fresh device memory reads as NaN");
    simt_cuda_launch("fill_k", fill_k, 4, 32)(d, 100, 0.5f);
    CHECK(cudaGetLastError() == cudaSuccess, "a good launch");
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess && h[0] == 0.5f && h[99] == 99.5f,
          "a kernel's writes come back");

    simt_cuda_launch("fill_k", fill_k, 1, 2048)(d, 100, 0.0f);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads: invalid configuration");
    simt_cuda_launch("fill_k", fill_k, 0, 32)(d, 100, 0.0f);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "0 blocks: invalid configuration");
    CHECK(cudaGetLastError() == cudaSuccess, "cudaGetLastError reports a refusal once");

    CHECK(cudaMemcpy(h, h + 50, 16, cudaMemcpyHostToDevice) == cudaErrorInvalidMemcpyDirection,
          "HostToDevice into host memory refused");
    CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyDeviceToHost) == cudaErrorInvalidMemcpyDirection,
          "DeviceToHost from host memory refused");
    CHECK(cudaMemcpy(h, d + 1, sizeof h, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
          "a copy past the allocation refused");
    CHECK(cudaMemset(d + 99, 0, 8) == cudaErrorInvalidValue, "a memset past the allocation refused");
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDefault) == cudaSuccess && h[1] == 1.5f, "the device works on");

    cudaEvent_t e0, e1, nt;
    float ms = -1;
    CHECK(cudaEventCreate(&e0) == 0 && cudaEventCreate(&e1) == 0 &&
              cudaEventCreateWithFlags(&nt, cudaEventDisableTiming) == 0,
          "events");
    cudaEventRecord(e0, 0);
    cudaEventRecord(e1, 0);
    cudaEventRecord(nt, 0);
    CHECK(cudaEventElapsedTime(&ms, e0, e1) == cudaErrorNotReady, "elapsed time before the events ran: not ready");
    CHECK(cudaEventSynchronize(e1) == cudaSuccess, "cudaEventSynchronize");
    CHECK(cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms >= 0, "elapsed time %g ms", ms);
    CHECK(cudaEventElapsedTime(&ms, e0, nt) == cudaErrorInvalidResourceHandle, "an event without timing refused");
    cudaGetLastError();
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaEventDestroy(nt);
    cudaFree(d);
}

/* streams are asynchronous: a pinned result read before the synchronization is the old one; two
 * non-blocking streams race unless an event orders them */
static void streams(void)
{
    enum { N = 64 };
    float *d, *e, *h;
    cudaStream_t s1, s2;
    cudaEvent_t written;
    CHECK(cudaMalloc(&d, N * 4) == 0 && cudaMalloc(&e, N * 4) == 0 && cudaMallocHost(&h, N * 4) == 0 &&
              cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == 0 &&
              cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == 0 &&
              cudaEventCreateWithFlags(&written, cudaEventDisableTiming) == 0,
          "stream setup");
    h[0] = -5;
    simt_cuda_launch("fill_k", fill_k, 2, 32, 0, s1)(d, N, 7.0f);
    cudaMemcpyAsync(h, d, N * 4, cudaMemcpyDeviceToHost, s1);
    CHECK(h[0] == -5, "a pinned async copy has not run before the synchronization: %g", h[0]);
    cudaStreamSynchronize(s1);
    CHECK(h[0] == 7 && h[N - 1] == 7 + N - 1, "after cudaStreamSynchronize: %g", h[0]);

    int stale = 0, stale_ordered = 0;
    for (unsigned seed = 1; seed <= 16; seed++) {
        cuda_emu_seed(seed);
        for (int ordered = 0; ordered <= 1; ordered++) {
            float v = (float)(100 * seed + 10 * ordered);
            simt_cuda_launch("fill_k", fill_k, 2, 32, 0, s1)(d, N, v); /* s1 writes d */
            if (ordered) {
                cudaEventRecord(written, s1);
                cudaStreamWaitEvent(s2, written, 0);
            }
            cudaMemcpyAsync(e, d, N * 4, cudaMemcpyDeviceToDevice, s2); /* s2 reads d */
            cudaMemcpyAsync(h, e, N * 4, cudaMemcpyDeviceToHost, s2);
            cudaDeviceSynchronize();
            if (h[0] != v) (ordered ? stale_ordered : stale)++;
        }
    }
    CHECK(stale > 0 && stale_ordered == 0,
          "without the event s2 read before s1 wrote in %d of 16 seeds (want some), with it in %d (want 0)", stale,
          stale_ordered);
    printf("streams: a pinned copy waits for the synchronization; unordered streams raced in %d of 16 seeds, "
           "ordered by an event in none\n",
           stale);
    cudaEventDestroy(written);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    cudaFreeHost(h);
    cudaFree(d);
    cudaFree(e);
}

/* row-major M x N = A (M x K) B (K x N), through cuBLAS's column-major as the backend's mm does */
static void products(void)
{
    enum { M = 3, K = 5, N = 4 };
    float ha[M * K], hb[K * N], hc[M * N], want[M * N], one = 1, zero = 0;
    for (int i = 0; i < M * K; i++) ha[i] = (float)(i % 7) - 3;
    for (int i = 0; i < K * N; i++) hb[i] = (float)(i % 5) * 0.5f - 1;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)ha[i * K + k] * hb[k * N + j];
            want[i * N + j] = (float)s;
        }
    float *a, *b, *c;
    cublasHandle_t h;
    CHECK(cudaMalloc(&a, sizeof ha) == 0 && cudaMalloc(&b, sizeof hb) == 0 && cudaMalloc(&c, sizeof hc) == 0 &&
              cublasCreate(&h) == 0,
          "allocations");
    cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice);
    /* C^T (N x M, col-major) = B^T A^T; C holds fresh NaN memory and beta is 0 */
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, b, N, a, K, &zero, c, N) == 0, "sgemm");
    cudaMemcpy(hc, c, sizeof hc, cudaMemcpyDeviceToHost);
    CHECK(memcmp(hc, want, sizeof hc) == 0, "A B exact (small integers and halves), NaN in C never read");
    /* A stored transposed (K x M row-major, which column-major reads as M x K, ld M) with op T, beta 1: C
     * becomes 2 A B */
    float hat[M * K];
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) hat[k * M + i] = ha[i * K + k];
    cudaMemcpy(a, hat, sizeof hat, cudaMemcpyHostToDevice);
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, &one, b, N, a, M, &one, c, N) == 0, "sgemm op T");
    cudaMemcpy(hc, c, sizeof hc, cudaMemcpyDeviceToHost);
    int twice = 1;
    for (int i = 0; i < M * N; i++) twice &= hc[i] == 2 * want[i];
    CHECK(twice, "op T and beta 1: 2 A B");
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, b, N - 1, a, K, &zero, c, N) ==
              CUBLAS_STATUS_INVALID_VALUE,
          "ldb below the rows refused");

    /* TF32: 1 + 2^-12 rounds to 1 in TF32's 10 mantissa bits */
    float x = 1.0f + 1.0f / 4096, r = 0;
    cudaMemcpy(a, &x, 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, &x, 4, cudaMemcpyHostToDevice);
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a, 1, b, 1, &zero, c, 1);
    cudaMemcpy(&r, c, 4, cudaMemcpyDeviceToHost);
    CHECK(r == x * x, "fp32 product exact: %.9g", r);
    cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a, 1, b, 1, &zero, c, 1);
    cudaMemcpy(&r, c, 4, cudaMemcpyDeviceToHost);
    CHECK(r == 1.0f, "TF32 rounds the operands: %.9g", r);
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);

    /* bf16 operands, fp32 result, batched: two 1 x 1 products 2 apart */
    __nv_bfloat16 hv[4] = {__float2bfloat16_rn(3), __float2bfloat16_rn(0), __float2bfloat16_rn(-2),
                           __float2bfloat16_rn(0)};
    float res[3] = {0, 0, 0};
    __nv_bfloat16 *v;
    CHECK(cudaMalloc(&v, sizeof hv) == 0, "bf16 allocation");
    cudaMemcpy(v, hv, sizeof hv, cudaMemcpyHostToDevice);
    CHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, v, CUDA_R_16BF, 1, 2, v,
                                     CUDA_R_16BF, 1, 2, &zero, c, CUDA_R_32F, 1, 2, 2, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT) == 0,
          "bf16 x bf16 -> fp32, batched");
    cudaMemcpy(res, c, 12, cudaMemcpyDeviceToHost);
    CHECK(res[0] == 9 && res[2] == 4, "batched squares %g %g", res[0], res[2]);
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, v, CUDA_R_16BF, 1, b, CUDA_R_32F, 1, &zero, c,
                       CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED,
          "bf16 A with fp32 B refused");
    CHECK(cudaGetLastError() == cudaSuccess, "refusals are not faults");
    cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaFree(v);
}

/* a 2 x 2 product's descriptors with the bias epilogue (bias at `bias`), D = A B + bias (+ C), fp32 */
typedef struct {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t l;
    cublasLtMatmulAlgo_t algo;
    void *ws;
} lt_case;

static int lt_open(lt_case *t, const float *bias)
{
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t r;
    uint64_t ws = 1u << 20;
    int n = 0;
    if (cublasLtCreate(&t->h) || cublasLtMatmulDescCreate(&t->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
        cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ||
        cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) ||
        cublasLtMatrixLayoutCreate(&t->l, CUDA_R_32F, 2, 2, 2) || cublasLtMatmulPreferenceCreate(&pref) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ||
        cublasLtMatmulAlgoGetHeuristic(t->h, t->op, t->l, t->l, t->l, t->l, pref, 1, &r, &n) || n != 1 ||
        cudaMalloc(&t->ws, ws))
        return -1;
    cublasLtMatmulPreferenceDestroy(pref);
    t->algo = r.algo;
    return 0;
}

static cublasStatus_t lt_run(lt_case *t, const float *a, const float *b, float beta, const float *c, float *d,
                             const float *bias)
{
    float one = 1;
    cublasLtMatmulDescSetAttribute(t->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    return cublasLtMatmul(t->h, t->op, &one, a, t->l, b, t->l, &beta, c, t->l, d, t->l, &t->algo, t->ws, 1u << 20, 0);
}

/* the bias pointer 4 bytes past where the heuristic saw it (256-aligned): the kernel would fault */
static int lt_misaligned(void)
{
    float *m = NULL;
    lt_case t;
    if (cudaMalloc(&m, 320 * sizeof(float)) || lt_open(&t, m + 256)) return 2;
    return lt_run(&t, m, m + 64, 0, m + 128, m + 128, m + 257) == CUBLAS_STATUS_EXECUTION_FAILED && faulted() ? 0 : 1;
}

static void lt_products(void)
{
    /* column-major 2 x 2: A = [1 2; 3 4], B = I, bias (10, 20), C all 100 */
    float ha[4] = {1, 3, 2, 4}, hb[4] = {1, 0, 0, 1}, hbias[2] = {10, 20}, hc[4] = {100, 100, 100, 100}, hd[4];
    float *m = NULL;
    CHECK(cudaMalloc(&m, 320 * sizeof(float)) == 0, "allocation");
    float *a = m, *b = m + 64, *c = m + 128, *d = m + 192, *bias = m + 256; /* 256-byte aligned: the defaults */
    cudaMemcpy(a, ha, 16, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, 16, cudaMemcpyHostToDevice);
    cudaMemcpy(c, hc, 16, cudaMemcpyHostToDevice);
    cudaMemcpy(bias, hbias, 8, cudaMemcpyHostToDevice);
    lt_case t;
    CHECK(lt_open(&t, bias) == 0, "cuBLASLt descriptors and the heuristic");
    CHECK(lt_run(&t, a, b, 0, d, d, bias) == 0, "matmul, bias epilogue");
    cudaMemcpy(hd, d, 16, cudaMemcpyDeviceToHost);
    CHECK(hd[0] == 11 && hd[1] == 23 && hd[2] == 12 && hd[3] == 24, "A B + bias along D's rows: %g %g %g %g", hd[0],
          hd[1], hd[2], hd[3]);
    CHECK(lt_run(&t, a, b, 1, c, d, bias) == 0, "matmul, C apart from D");
    cudaMemcpy(hd, d, 16, cudaMemcpyDeviceToHost);
    CHECK(hd[0] == 111 && hd[3] == 124, "A B + C + bias: %g %g", hd[0], hd[3]);
    int32_t small = 0;
    CHECK(cublasLtMatmulDescSetAttribute(t.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &small, sizeof small) ==
              CUBLAS_STATUS_INVALID_VALUE,
          "an attribute of the wrong size refused");
    cublasLtMatrixLayout_t other;
    float one = 1, zero = 0;
    CHECK(cublasLtMatrixLayoutCreate(&other, CUDA_R_32F, 2, 2, 4) == 0, "layout");
    CHECK(cublasLtMatmul(t.h, t.op, &one, a, other, b, t.l, &zero, d, t.l, d, t.l, &t.algo, t.ws, 1u << 20, 0) ==
              CUBLAS_STATUS_INVALID_VALUE,
          "an algorithm chosen for other layouts refused");
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t r;
    int n = -1;
    uint64_t ws = 1u << 20;
    setenv("CUDA_EMU_LT_ALGOS", "0", 1);
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    CHECK(cublasLtMatmulAlgoGetHeuristic(t.h, t.op, t.l, t.l, t.l, t.l, pref, 1, &r, &n) ==
                  CUBLAS_STATUS_NOT_SUPPORTED &&
              n == 0,
          "CUDA_EMU_LT_ALGOS=0: no algorithm");
    unsetenv("CUDA_EMU_LT_ALGOS");
    CHECK(cudaGetLastError() == cudaSuccess, "refusals are not faults");
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(other);
    cublasLtMatrixLayoutDestroy(t.l);
    cublasLtMatmulDescDestroy(t.op);
    cublasLtDestroy(t.h);
    cudaFree(t.ws);
    cudaFree(m);
}

int main(void)
{
    memory_and_launches();
    adopted_memory();
    streams();
    products();
    lt_products();
    CHECK(in_child(host_reads_device) == 128 + SIGSEGV, "host code reading device memory faults");
    CHECK(in_child(host_pointer_arg) == 0, "a kernel given host memory faults the device");
    CHECK(in_child(write_past_end) == 0, "a kernel writing one past its allocation faults the device");
    CHECK(in_child(divergent_barrier) == 0, "a warp split between __syncthreads and a shuffle faults the device");
    CHECK(in_child(gemm_past_end) == 0, "a product past its allocation faults the device");
    CHECK(in_child(lt_misaligned) == 0, "a cuBLASLt bias less aligned than its algorithm assumed faults the device");
    return emu_finish("the CUDA emulator refuses and faults where a GPU would; its products are right");
}
