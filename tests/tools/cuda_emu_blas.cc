/* cuda_emu_blas.cc: the cuBLAS calls of the CPU CUDA emulator (tests/tools/cuda_emu/cublas_v2.h): handles,
 * and the products checked as cuBLAS checks them (sizes, leading dimensions, type combinations: refused
 * with cuBLAS's status) and as a GPU would fault on them (an operand past its allocation or not device
 * memory: the device faults), then queued on the handle's stream (cuda_emu.cc runs the queues) and
 * computed there in double, rounded once to the result's type. cuBLASLt's matmul (cuda_emu_lt.cc) runs
 * through the same checks and product (cuda_emu_gemm). */
#include "cuda_emu/cublas_v2.h"
#include "cuda_emu_census.h"
#include "cuda_emu_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <vector>

struct cuda_emu_cublas {
    cudaStream_t st;
    int math;
};

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
    CUDA_EMU_LOCK;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!cuda_emu_stream_ok(st)) return CUBLAS_STATUS_INVALID_VALUE;
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
    cuda_emu_say("%s: ld%s %d < %d rows of %s", call, which, ld, rows, which);
    return -1;
}

/* one column-major operand of rows x cols, leading dimension ld, batch of them stride apart: the whole
 * extent inside one device allocation (else a GPU reads or writes where it must not) */
static int check_extent(const char *call, const char *which, const void *p, cudaDataType t, int rows, int cols,
                        int ld, long long stride, int batch)
{
    if (!rows || !cols || !batch) return 0;
    size_t extent = (size_t)(cols - 1) * ld + rows + (size_t)(batch - 1) * (size_t)(stride > 0 ? stride : 0);
    const char *why = cuda_emu_device_span(p, extent * type_bytes(t));
    if (why) {
        cuda_emu_say("%s: %s (%d x %d, ld %d, %d of them %lld apart) needs %zu elements from %p: %s", call, which, rows,
                     cols, ld, batch, stride, extent, p, why);
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

/* D (m x n) = alpha op(A) op(B) + beta C + bias for each of the batch, column-major, in double; C is not
 * read when beta is 0 (cuBLAS's rule: it may hold NaN); bias (m floats, one per row) may be NULL; D has
 * C's type and leading dimension and may be C */
static void gemm_compute(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void *A,
                         cudaDataType at, int lda, long long sA, const void *B, cudaDataType bt, int ldb, long long sB,
                         float beta, const void *C, cudaDataType ct, int ldc, long long sC, void *D, const float *bias,
                         int batch, int tf32)
{
    /* op(A) as m rows of k and op(B) as n rows of k: each element of D is then one dot */
    std::vector<double> a((size_t)m * k), bb((size_t)n * k);
    for (int b = 0; b < batch; b++) {
        const char *Ab = (const char *)A + (size_t)b * sA * type_bytes(at);
        const char *Bb = (const char *)B + (size_t)b * sB * type_bytes(bt);
        const char *Cb = (const char *)C + (size_t)b * sC * type_bytes(ct);
        char *Db = (char *)D + (size_t)b * sC * type_bytes(ct);
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
                store(Db, ic, ct, bias ? v + bias[i] : v);
            }
    }
}

cublasStatus_t cuda_emu_gemm(const char *call, cudaStream_t st, int tf32, cublasOperation_t ta, cublasOperation_t tb,
                             int m, int n, int k, float alpha, const void *A, cudaDataType at, int lda, long long sA,
                             const void *B, cudaDataType bt, int ldb, long long sB, float beta, const void *C,
                             cudaDataType ct, int ldc, long long sC, void *D, const float *bias, int batch,
                             cublasComputeType_t compute)
{
    CUDA_EMU_LOCK;
    if (cuda_emu_faulted()) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T)) {
        cuda_emu_say("%s: m %d, n %d, k %d, batch %d, ops %d %d: invalid", call, m, n, k, batch, ta, tb);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!supported(at, bt, ct, compute)) {
        cuda_emu_say("%s: types A %d, B %d, C %d with compute %d: not a combination cuBLAS supports", call, at, bt, ct,
                     compute);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    if (check_ld(call, "A", ar, lda) || check_ld(call, "B", br, ldb) || check_ld(call, "C", m, ldc))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (check_extent(call, "A", A, at, ar, ac, lda, sA, k ? batch : 0) ||
        check_extent(call, "B", B, bt, br, bc, ldb, sB, k ? batch : 0) ||
        (beta != 0.0f && C != D && check_extent(call, "C", C, ct, m, n, ldc, sC, batch)) ||
        check_extent(call, C == D ? "C" : "D", D, ct, m, n, ldc, sC, batch) ||
        (bias && check_extent(call, "bias", bias, CUDA_R_32F, m, 1, m, 0, 1))) {
        cuda_emu_fault(); /* on a GPU: an illegal address, or a wrong result */
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (cuda_emu_census_on()) cuda_emu_census_product(call, m, n, k, batch, bias != NULL);
    cuda_emu_enqueue(st, call, [=] {
        gemm_compute(ta, tb, m, n, k, alpha, A, at, lda, sA, B, bt, ldb, sB, beta, C, ct, ldc, sC, D, bias, batch, tf32);
    });
    return CUBLAS_STATUS_SUCCESS;
}

/* a cuBLAS product: the handle's stream and math mode, C updated in place */
static cublasStatus_t gemm(const char *call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, float alpha, const void *A, cudaDataType at, int lda, long long sA, const void *B,
                           cudaDataType bt, int ldb, long long sB, float beta, void *C, cudaDataType ct, int ldc,
                           long long sC, int batch, cublasComputeType_t compute)
{
    CUDA_EMU_LOCK;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    int tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32 || (h->math == CUBLAS_TF32_TENSOR_OP_MATH && at == CUDA_R_32F);
    return cuda_emu_gemm(call, h->st, tf32, ta, tb, m, n, k, alpha, A, at, lda, sA, B, bt, ldb, sB, beta, C, ct, ldc, sC,
                         C, NULL, batch, compute);
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
