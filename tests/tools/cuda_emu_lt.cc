/* cuda_emu_lt.cc: the cuBLASLt calls of the CPU CUDA emulator (tests/tools/cuda_emu/cublasLt.h): handles,
 * descriptors, layouts and preferences as plain structs whose attributes are checked as cuBLASLt checks
 * them; the heuristic, which hands out one algorithm that remembers what it was chosen for (the
 * operation, the layouts, the alignments it assumed, the workspace it needs); and the matmul, which
 * refuses an algorithm chosen for something else, faults the device on a pointer less aligned than its
 * algorithm assumed, and runs the product through cuda_emu_blas.cc's cuda_emu_gemm (the same operand
 * checks, in double, rounded once), the bias epilogue included. */
#include "cuda_emu/cublasLt.h"
#include "cuda_emu_internal.h"

#include "base/util.h" /* ptr_alignment */

#include <stdlib.h>
#include <string.h>

#define ALGO_MAGIC 0x4c54454d55414c47ull /* "LTEMUALG": an algorithm this heuristic gave */
#define ALIGN_MAX 256                    /* bytes: cuBLASLt's default minimum alignments, the most they assume */
#define ALGO_WORKSPACE (1u << 20)        /* what every algorithm asks of the workspace */

struct cuda_emu_lt {
    int unused;
};

struct cuda_emu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType scale;
    int32_t ta, tb;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type; /* -1: D's type */
};

struct cuda_emu_lt_layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};

struct cuda_emu_lt_pref {
    uint64_t max_workspace;
    uint32_t min_align[4]; /* A, B, C, D */
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = new cuda_emu_lt{0};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType scale)
{
    *d = new cuda_emu_lt_desc{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL, -1};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}

/* copies an attribute of exactly `want` bytes, as cuBLASLt refuses any other size */
static cublasStatus_t attr_copy(const char *what, void *dst, size_t want, const void *buf, size_t size)
{
    if (!buf || size != want) {
        cuda_emu_say("%s: %zu bytes given, the attribute has %zu", what, size, want);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(dst, buf, want);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size)
{
    const char *call = "cublasLtMatmulDescSetAttribute";
    if (!d) return CUBLAS_STATUS_NOT_INITIALIZED;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return attr_copy(call, &d->ta, sizeof d->ta, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return attr_copy(call, &d->tb, sizeof d->tb, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
        uint32_t e;
        cublasStatus_t s = attr_copy(call, &e, sizeof e, buf, size);
        if (s == CUBLAS_STATUS_SUCCESS && e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS) {
            cuda_emu_say("%s: epilogue %u is not one the emulator has (DEFAULT, BIAS)", call, e);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        if (s == CUBLAS_STATUS_SUCCESS) d->epilogue = e;
        return s;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return attr_copy(call, &d->bias, sizeof d->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return attr_copy(call, &d->bias_type, sizeof d->bias_type, buf, size);
    }
    cuda_emu_say("%s: attribute %d unknown to the emulator", call, (int)attr);
    return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld)
{
    if (ld < (int64_t)(rows > 1 ? rows : 1)) {
        cuda_emu_say("cublasLtMatrixLayoutCreate: ld %lld < %llu rows", (long long)ld, (unsigned long long)rows);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    *l = new cuda_emu_lt_layout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = new cuda_emu_lt_pref{0, {256, 256, 256, 256}}; /* cuBLASLt's defaults */
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size)
{
    const char *call = "cublasLtMatmulPreferenceSetAttribute";
    if (!p) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        return attr_copy(call, &p->max_workspace, sizeof p->max_workspace, buf, size);
    if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
        return attr_copy(call, &p->min_align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], sizeof(uint32_t), buf,
                         size);
    cuda_emu_say("%s: attribute %d unknown to the emulator", call, (int)attr);
    return CUBLAS_STATUS_INVALID_VALUE;
}

/* m, n, k of the operation from its layouts (D: m x n; op(A): m x k; op(B): k x n), or -1 when they
 * disagree; C must be laid out as D (the only case the emulator takes) */
static int shape_of(const cuda_emu_lt_desc *op, const cuda_emu_lt_layout *a, const cuda_emu_lt_layout *b,
                    const cuda_emu_lt_layout *c, const cuda_emu_lt_layout *d, uint64_t mnk[3])
{
    uint64_t am = op->ta == CUBLAS_OP_N ? a->rows : a->cols, ak = op->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t bk = op->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = op->tb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != d->rows || bn != d->cols || ak != bk || c->rows != d->rows || c->cols != d->cols || c->type != d->type ||
        c->ld != d->ld) {
        cuda_emu_say("cublasLt: layouts disagree: op(A) %llu x %llu, op(B) %llu x %llu, C %llu x %llu (ld %lld), "
                     "D %llu x %llu (ld %lld)",
                     (unsigned long long)am, (unsigned long long)ak, (unsigned long long)bk, (unsigned long long)bn,
                     (unsigned long long)c->rows, (unsigned long long)c->cols, (long long)c->ld,
                     (unsigned long long)d->rows, (unsigned long long)d->cols, (long long)d->ld);
        return -1;
    }
    mnk[0] = am;
    mnk[1] = bn;
    mnk[2] = ak;
    return 0;
}

/* what an algorithm is for: the operation and the layouts, folded (FNV-1a) */
static uint64_t fingerprint(const cuda_emu_lt_desc *op, const cuda_emu_lt_layout *const lay[4])
{
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) {
        for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
    };
    mix((uint64_t)op->compute);
    mix((uint64_t)op->scale);
    mix((uint64_t)op->ta);
    mix((uint64_t)op->tb);
    mix(op->epilogue);
    mix((uint64_t)(int64_t)op->bias_type);
    for (int i = 0; i < 4; i++) {
        mix((uint64_t)lay[i]->type);
        mix(lay[i]->rows);
        mix(lay[i]->cols);
        mix((uint64_t)lay[i]->ld);
    }
    return h;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned)
{
    CUDA_EMU_LOCK;
    if (!h || !op || !a || !b || !c || !d || !pref) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested <= 0 || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    uint64_t mnk[3];
    if (shape_of(op, a, b, c, d, mnk)) return CUBLAS_STATUS_INVALID_VALUE;
    const char *none = getenv("CUDA_EMU_LT_ALGOS");
    if ((none && !strcmp(none, "0")) || pref->max_workspace < ALGO_WORKSPACE) return CUBLAS_STATUS_NOT_SUPPORTED;
    const cuda_emu_lt_layout *lay[4] = {a, b, c, d};
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    r.algo.data[0] = ALGO_MAGIC;
    r.algo.data[1] = fingerprint(op, lay);
    for (int i = 0; i < 4; i++) r.algo.data[2 + i] = pref->min_align[i];
    r.algo.data[6] = op->epilogue == CUBLASLT_EPILOGUE_BIAS ? ptr_alignment(op->bias, ALIGN_MAX)
                                                            : 1; /* the bias pointer's, as set */
    r.algo.data[7] = ALGO_WORKSPACE;
    r.workspaceSize = ALGO_WORKSPACE;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    results[0] = r;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* a pointer the algorithm's kernel would read or write less aligned than it was chosen for: the device
 * faults (misaligned address) */
static int misaligned(const char *which, const void *p, uint64_t assumed)
{
    if (!p || ptr_alignment(p, ALIGN_MAX) >= assumed) return 0;
    cuda_emu_say("cublasLtMatmul: %s at %p is aligned to %u bytes, its algorithm was chosen for %llu: misaligned "
                 "address",
                 which, p, ptr_alignment(p, ALIGN_MAX), (unsigned long long)assumed);
    return 1;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
                              cudaStream_t st)
{
    CUDA_EMU_LOCK;
    const char *call = "cublasLtMatmul";
    if (!h || !op || !a || !b || !c || !d) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (cuda_emu_faulted()) return CUBLAS_STATUS_EXECUTION_FAILED;
    uint64_t mnk[3];
    const cuda_emu_lt_layout *lay[4] = {a, b, c, d};
    if (shape_of(op, a, b, c, d, mnk)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!algo || algo->data[0] != ALGO_MAGIC || algo->data[1] != fingerprint(op, lay)) {
        cuda_emu_say("%s: an algorithm the heuristic did not give for this operation and these layouts", call);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (workspace_bytes < algo->data[7]) {
        cuda_emu_say("%s: workspace of %zu bytes, the algorithm needs %llu", call, workspace_bytes,
                     (unsigned long long)algo->data[7]);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (op->epilogue == CUBLASLT_EPILOGUE_BIAS && (op->bias_type != -1 && op->bias_type != CUDA_R_32F)) {
        cuda_emu_say("%s: bias type %d: the emulator has fp32 biases only", call, op->bias_type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (op->epilogue == CUBLASLT_EPILOGUE_BIAS && (!op->bias || d->type != CUDA_R_32F)) {
        cuda_emu_say("%s: the bias epilogue needs a bias pointer and (in the emulator) a fp32 D", call);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const float *bias = op->epilogue == CUBLASLT_EPILOGUE_BIAS ? (const float *)op->bias : NULL;
    float be = *(const float *)beta;
    const char *ws_bad = cuda_emu_device_span(workspace, algo->data[7]);
    if (misaligned("A", A, algo->data[2]) || misaligned("B", B, algo->data[3]) ||
        (be != 0.0f && misaligned("C", C, algo->data[4])) || misaligned("D", D, algo->data[5]) ||
        misaligned("bias", bias, algo->data[6]) || ws_bad) {
        if (ws_bad) cuda_emu_say("%s: workspace at %p: %s", call, workspace, ws_bad);
        cuda_emu_fault();
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    int tf32 = op->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    return cuda_emu_gemm(call, st, tf32, (cublasOperation_t)op->ta, (cublasOperation_t)op->tb, (int)mnk[0], (int)mnk[1],
                         (int)mnk[2], *(const float *)alpha, A, a->type, (int)a->ld, 0, B, b->type, (int)b->ld, 0, be,
                         C, c->type, (int)c->ld, 0, D, bias, 1, op->compute);
}
