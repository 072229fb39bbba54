/* flash_mma.cuh: causal attention on tensor cores, FlashAttention-2 style (--attention flash), the
 * kernels only. Launched by gpt_cuda_flash.cu (nvcc); compiled by g++ as well and run on the CPU by
 * tests/test_flash_emu.cc under the lane emulator (tests/tools/simt_emu.h), so this file uses nothing
 * but what that emulator provides (listed in simt_emu.h): plain CUDA builtins, static __shared__ arrays,
 * full-warp shuffles and the warp primitives of warp_mma.h (mma.m16n8k16 on bf16, ldmatrix, bf16
 * packing).
 *
 *   flash_mma_forward_k  one block per 64 query rows of one (batch, head): 4 warps of 16 rows each.
 *                        Key tiles of 64 are streamed through shared memory; S = Q K^T and O += P V are
 *                        mma.m16n8k16 products with fp32 accumulation; an online softmax in fp32 (exp2f
 *                        on log2(e)-scaled scores) keeps a running max and sum per row, so no T x T
 *                        matrix exists. Writes out (B,T,C) and lse (B,NH,T), the natural-log
 *                        log-sum-exp of the scaled scores (as the fused kernel's flash_forward_k)
 *   flash_mma_dkv_k      one block per 64 key rows: over the query tiles at or below the diagonal,
 *                        P is recomputed from lse, dV += P^T dO, dP^T = V dO^T, dS = P (dP - D),
 *                        dK += dS^T Q; writes dk, dv into dqkv (B,T,3C)
 *   flash_mma_dq_k       one block per 64 query rows: over the key tiles up to the diagonal, S, P, dP
 *                        and dS are recomputed and dQ += dS K; writes dq into dqkv
 * D = rowsum(dO * O) comes from the fused attention's flash_dsum_k (attention_rows.cuh, launched by
 * l_flash_dsum in gpt_cuda_bf16.cu), run before the two backward kernels.
 * The backward is split in two so that every output element is summed by one thread in a fixed order:
 * no atomics, the same bytes run after run.
 *
 * Roundings: Q, K, V and dO are rounded to bf16 when a tile is staged into shared memory, P and dS when
 * they become the A operand of the next product; everything else (scores, softmax, accumulators, lse,
 * D) is fp32. The same set as the gemm attention, so the two share their error bound.
 *
 * Fragments (PTX ISA, mma.m16n8k16; g = lane / 4, t = lane % 4): the accumulator C (16 x 8) of a lane
 * is C[g][2t..2t+1] in c[0..1] and C[g+8][2t..2t+1] in c[2..3]; the A operand (16 x 16) is
 * A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]. So the accumulators of two adjacent n8
 * tiles (columns 0-7 and 8-15) are, element for element, the A operand of one k16 step over the same
 * columns: P and dS go from one product into the next without leaving registers (flash_pack_a).
 *
 * Shared tiles hold bf16 pairs (uint32_t words), each row padded by 8 bf16 (16 bytes): a row is
 * HS/2 + 4 words, a multiple of 16 bytes (ldmatrix's alignment) and 4 times an odd number of words, so
 * the 8 consecutive rows one ldmatrix matrix reads (16 bytes = 4 banks each) start at 8 distinct
 * multiples of 4 modulo the 32 banks: no bank conflict. Head size HS: a multiple of 16, at most 128 (the launcher
 * checks). For HS > 64 the streamed tiles of the backward are 32 rows instead of 64, to keep the
 * accumulators of dK, dV (or dQ) and the register-resident operands within the register file. */
#ifndef DILOCO_FLASH_MMA_CUH
#define DILOCO_FLASH_MMA_CUH

#include "warp_mma.h"

#ifdef __CUDACC__
#define FLASH_UNROLL _Pragma("unroll")
#else
#define FLASH_UNROLL
#endif

#define FLASH_THREADS 128 /* 4 warps */
#define FLASH_ROWS 64     /* rows a block owns: 16 per warp */
#define FLASH_LOG2E 1.4426950408889634f
#define FLASH_LN2 0.6931471805599453f

/* the word offset of bf16 column `col` (even) of row `row` in a shared tile of RW words per row */
template <int RW> __device__ __forceinline__ int flash_at(int row, int col)
{
    return row * RW + (col >> 1);
}

/* the row this lane hands to an ldmatrix .x4 that reads the 16 x 16 block at (row0, col0): lane l
 * addresses row l % 8 of matrix l / 8. rows_first: matrices 0, 1 are rows 0-7, 8-15 of columns 0-7 and
 * 2, 3 the same of columns 8-15 (an A fragment; with .trans the B fragments of two n8 tiles of a
 * [k][n] tile). Otherwise matrices 0, 1 are columns 0-7, 8-15 of rows 0-7 and 2, 3 of rows 8-15 (the B
 * fragments of two n8 tiles of an [n][k] tile, without .trans). */
template <int RW>
__device__ __forceinline__ const uint32_t *flash_ldsm_row(const uint32_t *tile, int row0, int col0, int lane,
                                                          bool rows_first)
{
    int m = lane >> 3, r = lane & 7;
    int dr = rows_first ? (m & 1) * 8 : (m >> 1) * 8, dc = rows_first ? (m >> 1) * 8 : (m & 1) * 8;
    return tile + flash_at<RW>(row0 + dr + r, col0 + dc);
}

/* ROWS x HS of a fp32 matrix (row stride ld floats; src at its row 0 and this head's first column),
 * rows row0.. of it, rounded to bf16 into tile; rows at or past nvalid are zeros (never read from src) */
template <int HS, int ROWS>
__device__ __forceinline__ void flash_stage(uint32_t *tile, const float *src, long ld, int row0, int nvalid)
{
    constexpr int RW = (HS + 8) / 2, PAIRS = HS / 2;
    for (int i = threadIdx.x; i < ROWS * PAIRS; i += blockDim.x) {
        int r = i / PAIRS, c = i % PAIRS, row = row0 + r;
        uint32_t v = 0;
        if (row < nvalid) {
            const float *p = src + (long)row * ld + 2 * c;
            v = bf16x2_pack(p[0], p[1]);
        }
        tile[r * RW + c] = v;
    }
}

/* ROWS floats of a per-row vector (lse or D of one head) times mul, zeros at or past nvalid */
template <int ROWS>
__device__ __forceinline__ void flash_stage_rows(float *dst, const float *src, float mul, int row0, int nvalid)
{
    for (int i = threadIdx.x; i < ROWS; i += blockDim.x) dst[i] = row0 + i < nvalid ? src[row0 + i] * mul : 0.0f;
}

/* this warp's A fragments of rows row0..row0+15 of a tile, all KS k16 steps (kept in registers) */
template <int KS, int RW>
__device__ __forceinline__ void flash_load_a(uint32_t (*a)[4], const uint32_t *tile, int row0, int lane)
{
    FLASH_UNROLL
    for (int kk = 0; kk < KS; kk++) ldmatrix_x4(a[kk], flash_ldsm_row<RW>(tile, row0, 16 * kk, lane, true));
}

/* acc (16 x 8NT) += A (16 x 16KS, fragments) B, B read from a shared tile: stored [16KS rows][8NT
 * columns] (k_rows: B itself; ldmatrix .trans gives its fragments, pairs along k) or [8NT rows][16KS
 * columns] (B transposed; ldmatrix without .trans). Each ldmatrix_x4 gives the B fragments of two n8
 * tiles. */
template <int NT, int KS, int RW, bool k_rows>
__device__ __forceinline__ void flash_mma_tile(float (*acc)[4], const uint32_t (*a)[4], const uint32_t *tile, int lane)
{
    FLASH_UNROLL
    for (int kk = 0; kk < KS; kk++) {
        FLASH_UNROLL
        for (int n = 0; n < NT; n += 2) {
            uint32_t b[4];
            if (k_rows)
                ldmatrix_x4_trans(b, flash_ldsm_row<RW>(tile, 16 * kk, 8 * n, lane, true));
            else
                ldmatrix_x4(b, flash_ldsm_row<RW>(tile, 8 * n, 16 * kk, lane, false));
            mma_bf16_16816(acc[n], a[kk], b, acc[n]);
            mma_bf16_16816(acc[n + 1], a[kk], b + 2, acc[n + 1]);
        }
    }
}

/* acc += A tile^T, the tile stored [8NT rows][16KS columns]: S = Q K^T, dP = dO V^T and their transposes */
template <int NT, int KS, int RW>
__device__ __forceinline__ void flash_mma_abt(float (*acc)[4], const uint32_t (*a)[4], const uint32_t *tile, int lane)
{
    flash_mma_tile<NT, KS, RW, false>(acc, a, tile, lane);
}

/* acc += A tile, the tile stored [16KS rows][8NT columns]: O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K */
template <int NT, int KS, int RW>
__device__ __forceinline__ void flash_mma_ab(float (*acc)[4], const uint32_t (*a)[4], const uint32_t *tile, int lane)
{
    flash_mma_tile<NT, KS, RW, true>(acc, a, tile, lane);
}

/* accumulators of NT n8 tiles (16 x 8NT) rounded to bf16 as the A fragments of NT/2 k16 steps: tiles
 * 2kk and 2kk+1 hold columns 16kk..16kk+15, in the A operand's order (see the top of the file) */
template <int NT> __device__ __forceinline__ void flash_pack_a(uint32_t (*a)[4], const float (*c)[4])
{
    FLASH_UNROLL
    for (int kk = 0; kk < NT / 2; kk++) {
        const float *lo = c[2 * kk], *hi = c[2 * kk + 1];
        a[kk][0] = bf16x2_pack(lo[0], lo[1]);
        a[kk][1] = bf16x2_pack(lo[2], lo[3]);
        a[kk][2] = bf16x2_pack(hi[0], hi[1]);
        a[kk][3] = bf16x2_pack(hi[2], hi[3]);
    }
}

template <int NT> __device__ __forceinline__ void flash_zero(float (*acc)[4])
{
    FLASH_UNROLL
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

/* where accumulator element e of n8 tile n sits in its 16 x 8NT block: row g or g + 8, column 8n + 2t
 * or 8n + 2t + 1 */
__device__ __forceinline__ int flash_row(int lane, int e)
{
    return (lane >> 2) + 8 * (e >> 1);
}
__device__ __forceinline__ int flash_col(int lane, int n, int e)
{
    return 8 * n + 2 * (lane & 3) + (e & 1);
}

/* the sum and the max of v over the 4 lanes that share a row (lanes differing in bits 0, 1). The
 * butterfly gives all four lanes the same value: each adds the same pairs, and a + b == b + a. */
__device__ __forceinline__ float flash_quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float flash_quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/* ---- forward ---------------------------------------------------------------------------------- */

/* s (this warp's 16 query rows x 64 keys of key tile k0) -> log2-domain scores, -inf where the key is
 * above the diagonal or past T (only the diagonal tile and the last one need it: mask) */
__device__ __forceinline__ void flash_scores_log2(float (*s)[4], float sl2, int q, int k0, int T, bool mask, int lane)
{
    FLASH_UNROLL
    for (int n = 0; n < FLASH_ROWS / 8; n++) {
        FLASH_UNROLL
        for (int e = 0; e < 4; e++) {
            int key = k0 + flash_col(lane, n, e), row = q + flash_row(lane, e);
            s[n][e] = mask && (key > row || key >= T) ? -INFINITY : s[n][e] * sl2;
        }
    }
}

/* One online-softmax step over a key tile for the lane's two rows (i = 0: row g, 1: row g + 8): the
 * new running max m, the factor corr that rescales what was summed under the old max (0 on the first
 * tile: exp2(-inf)), s turned into p = exp2(s - m), and the lane's partial row sums l. Every row has an
 * unmasked key in every tile it visits (key k0 <= its row), so m is finite after the first tile. */
template <int HS>
__device__ __forceinline__ void flash_softmax_step(float (*s)[4], float (*o)[4], float m[2], float l[2])
{
    FLASH_UNROLL
    for (int i = 0; i < 2; i++) {
        float mx = -INFINITY;
        FLASH_UNROLL
        for (int n = 0; n < FLASH_ROWS / 8; n++) mx = fmaxf(mx, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
        float mn = fmaxf(m[i], flash_quad_max(mx)), corr = exp2f(m[i] - mn), sum = 0.0f;
        FLASH_UNROLL
        for (int n = 0; n < FLASH_ROWS / 8; n++) {
            s[n][2 * i] = exp2f(s[n][2 * i] - mn);
            s[n][2 * i + 1] = exp2f(s[n][2 * i + 1] - mn);
            sum += s[n][2 * i] + s[n][2 * i + 1];
        }
        l[i] = l[i] * corr + sum;
        m[i] = mn;
        FLASH_UNROLL
        for (int n = 0; n < HS / 8; n++) {
            o[n][2 * i] *= corr;
            o[n][2 * i + 1] *= corr;
        }
    }
}

/* out rows (b, q..q+15) = o / l, lse = ln(sum exp(scaled scores)) = (m + log2 l) ln 2; rows past T are
 * not written */
template <int HS>
__device__ __forceinline__ void flash_write_out(float *out, float *lse, const float (*o)[4], const float m[2],
                                                const float l[2], int q, int T, int C, int lane)
{
    FLASH_UNROLL
    for (int i = 0; i < 2; i++) {
        int row = q + (lane >> 2) + 8 * i;
        float total = flash_quad_sum(l[i]); /* every lane of the quad shuffles, valid row or not */
        if (row >= T) continue;
        float inv = 1.0f / total;
        FLASH_UNROLL
        for (int n = 0; n < HS / 8; n++) {
            int col = flash_col(lane, n, 2 * i);
            out[(long)row * C + col] = o[n][2 * i] * inv;
            out[(long)row * C + col + 1] = o[n][2 * i + 1] * inv;
        }
        if ((lane & 3) == 0) lse[row] = (m[i] + log2f(total)) * FLASH_LN2;
    }
}

/* grid (ceil(T/64), B*NH), FLASH_THREADS threads. qkv (B,T,3C), out (B,T,C), lse (B,NH,T); C = NH*HS.
 * Query tiles are taken last to first: the long ones (many key tiles) start first. */
template <int HS>
__global__ void __launch_bounds__(FLASH_THREADS)
    flash_mma_forward_k(float *out, float *lse, const float *qkv, int T, int NH, float scale)
{
    constexpr int RW = (HS + 8) / 2, KS = HS / 16, NT = FLASH_ROWS / 8;
    __shared__ __align__(16) uint32_t ks[FLASH_ROWS * RW], vs[FLASH_ROWS * RW]; /* ks holds Q first */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * FLASH_ROWS, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int C = NH * HS, q = q0 + 16 * warp;
    const float *head = qkv + (long)b * T * 3 * C + (long)h * HS; /* q of row 0; k at +C, v at +2C */
    float sl2 = scale * FLASH_LOG2E;

    uint32_t qf[KS][4];
    flash_stage<HS, FLASH_ROWS>(ks, head, 3 * C, q0, T);
    __syncthreads();
    flash_load_a<KS, RW>(qf, ks, 16 * warp, lane);
    __syncthreads();

    float o[HS / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    flash_zero<HS / 8>(o);
    for (int kt = 0; kt <= qt; kt++) {
        int k0 = kt * FLASH_ROWS;
        flash_stage<HS, FLASH_ROWS>(ks, head + C, 3 * C, k0, T);
        flash_stage<HS, FLASH_ROWS>(vs, head + 2 * C, 3 * C, k0, T);
        __syncthreads();
        float s[NT][4];
        flash_zero<NT>(s);
        flash_mma_abt<NT, KS, RW>(s, qf, ks, lane);
        flash_scores_log2(s, sl2, q, k0, T, kt == qt || k0 + FLASH_ROWS > T, lane);
        flash_softmax_step<HS>(s, o, m, l);
        uint32_t p[NT / 2][4];
        flash_pack_a<NT>(p, s);
        flash_mma_ab<HS / 8, NT / 2, RW>(o, p, vs, lane);
        __syncthreads(); /* before the next tile overwrites ks, vs */
    }
    flash_write_out<HS>(out + (long)b * T * C + (long)h * HS, lse + (long)bh * T, o, m, l, q, T, C, lane);
}

/* ---- backward --------------------------------------------------------------------------------- */

/* the streamed tile of the backward kernels: 64 rows, 32 above head size 64 (registers) */
template <int HS> struct flash_bwd {
    enum { TILE = HS <= 64 ? 64 : 32 };
};

/* P from the recomputed scores of a 16 x 8NT block: p = exp2(s sl2 - lse log2 e), 0 where the query is
 * before the key (causal) or either is past T. Rows of the block are query (q_row0 + row) or key
 * (k_row0 + row) by `transposed`; columns the other. lse2: per column (transposed) or row, in log2. */
template <int NT>
__device__ __forceinline__ void flash_probs(float (*s)[4], float sl2, const float *lse2_cols, const float lse2_rows[2],
                                            int row0, int col0, bool transposed, int T, bool mask, int lane)
{
    FLASH_UNROLL
    for (int n = 0; n < NT; n++) {
        FLASH_UNROLL
        for (int e = 0; e < 4; e++) {
            int r = flash_row(lane, e), c = flash_col(lane, n, e);
            float l2 = transposed ? lse2_cols[c] : lse2_rows[e >> 1];
            int query = transposed ? col0 + c : row0 + r, key = transposed ? row0 + r : col0 + c;
            float p = exp2f(s[n][e] * sl2 - l2);
            s[n][e] = mask && (key > query || key >= T || query >= T) ? 0.0f : p;
        }
    }
}

/* dS = P (dP - D) in place on dp, D per column (transposed) or per row */
template <int NT>
__device__ __forceinline__ void flash_dscores(float (*dp)[4], const float (*p)[4], const float *d_cols,
                                              const float d_rows[2], bool transposed, int lane)
{
    FLASH_UNROLL
    for (int n = 0; n < NT; n++) {
        FLASH_UNROLL
        for (int e = 0; e < 4; e++) {
            float d = transposed ? d_cols[flash_col(lane, n, e)] : d_rows[e >> 1];
            dp[n][e] = p[n][e] * (dp[n][e] - d);
        }
    }
}

/* rows row..row+15 of a (., ld) fp32 matrix (at its row 0, this head's column) = acc * mul, rows past T
 * not written */
template <int HS>
__device__ __forceinline__ void flash_write_rows(float *dst, long ld, const float (*acc)[4], float mul, int row, int T,
                                                 int lane)
{
    FLASH_UNROLL
    for (int e = 0; e < 4; e += 2) {
        int r = row + flash_row(lane, e);
        if (r >= T) continue;
        FLASH_UNROLL
        for (int n = 0; n < HS / 8; n++) {
            int c = flash_col(lane, n, e);
            dst[(long)r * ld + c] = acc[n][e] * mul;
            dst[(long)r * ld + c + 1] = acc[n][e + 1] * mul;
        }
    }
}

/* grid (ceil(T/64), B*NH), FLASH_THREADS threads: dk, dv of 64 keys into dqkv (B,T,3C). dout (B,T,C);
 * lse, dsum (B,NH,T). Key tile 0 meets every query tile: tiles are taken first to last (longest first). */
template <int HS>
__global__ void __launch_bounds__(FLASH_THREADS)
    flash_mma_dkv_k(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dsum, int T,
                    int NH, float scale)
{
    constexpr int RW = (HS + 8) / 2, KS = HS / 16, QT = flash_bwd<HS>::TILE, NT = QT / 8;
    /* Q and dO tiles of QT rows; at the start the warp's K, then V rows (64 <= 2 QT rows) */
    __shared__ __align__(16) uint32_t buf[2 * QT * RW];
    __shared__ float lse2_s[QT], dsum_s[QT];
    uint32_t *qs = buf, *dos = buf + QT * RW;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int k0 = blockIdx.x * FLASH_ROWS, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    int key = k0 + 16 * warp;
    const float *head = qkv + (long)b * T * 3 * C + (long)h * HS, *dhead = dout + (long)b * T * C + (long)h * HS;
    float sl2 = scale * FLASH_LOG2E;

    uint32_t kf[KS][4], vf[KS][4];
    flash_stage<HS, FLASH_ROWS>(buf, head + C, 3 * C, k0, T);
    __syncthreads();
    flash_load_a<KS, RW>(kf, buf, 16 * warp, lane);
    __syncthreads();
    flash_stage<HS, FLASH_ROWS>(buf, head + 2 * C, 3 * C, k0, T);
    __syncthreads();
    flash_load_a<KS, RW>(vf, buf, 16 * warp, lane);
    __syncthreads();

    float dk[HS / 8][4], dv[HS / 8][4];
    flash_zero<HS / 8>(dk);
    flash_zero<HS / 8>(dv);
    for (int q0 = k0; q0 < T; q0 += QT) {
        flash_stage<HS, QT>(qs, head, 3 * C, q0, T);
        flash_stage<HS, QT>(dos, dhead, C, q0, T);
        flash_stage_rows<QT>(lse2_s, lse + (long)bh * T, FLASH_LOG2E, q0, T);
        flash_stage_rows<QT>(dsum_s, dsum + (long)bh * T, 1.0f, q0, T);
        __syncthreads();
        float p[NT][4], dp[NT][4];
        uint32_t a[NT / 2][4];
        flash_zero<NT>(p);
        flash_mma_abt<NT, KS, RW>(p, kf, qs, lane); /* S^T: keys x queries */
        flash_probs<NT>(p, sl2, lse2_s, nullptr, key, q0, true, T, q0 < k0 + FLASH_ROWS || q0 + QT > T, lane);
        flash_pack_a<NT>(a, p);
        flash_mma_ab<HS / 8, NT / 2, RW>(dv, a, dos, lane); /* dV += P^T dO */
        flash_zero<NT>(dp);
        flash_mma_abt<NT, KS, RW>(dp, vf, dos, lane); /* dP^T = V dO^T */
        flash_dscores<NT>(dp, p, dsum_s, nullptr, true, lane);
        flash_pack_a<NT>(a, dp);
        flash_mma_ab<HS / 8, NT / 2, RW>(dk, a, qs, lane); /* dK += dS^T Q */
        __syncthreads();                                   /* before the next tile overwrites qs, dos */
    }
    flash_write_rows<HS>(dqkv + (long)b * T * 3 * C + C + (long)h * HS, 3 * C, dk, scale, key, T, lane);
    flash_write_rows<HS>(dqkv + (long)b * T * 3 * C + 2 * C + (long)h * HS, 3 * C, dv, 1.0f, key, T, lane);
}

/* grid (ceil(T/64), B*NH), FLASH_THREADS threads: dq of 64 query rows into dqkv. Query tiles last to
 * first, as the forward. */
template <int HS>
__global__ void __launch_bounds__(FLASH_THREADS)
    flash_mma_dq_k(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dsum, int T, int NH,
                   float scale)
{
    constexpr int RW = (HS + 8) / 2, KS = HS / 16, KT = flash_bwd<HS>::TILE, NT = KT / 8;
    /* K and V tiles of KT rows; at the start the warp's Q, then dO rows (64 <= 2 KT rows) */
    __shared__ __align__(16) uint32_t buf[2 * KT * RW];
    uint32_t *ks = buf, *vs = buf + KT * RW;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int q0 = (gridDim.x - 1 - blockIdx.x) * FLASH_ROWS, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    int q = q0 + 16 * warp;
    const float *head = qkv + (long)b * T * 3 * C + (long)h * HS, *dhead = dout + (long)b * T * C + (long)h * HS;
    float sl2 = scale * FLASH_LOG2E;

    uint32_t qf[KS][4], of[KS][4];
    flash_stage<HS, FLASH_ROWS>(buf, head, 3 * C, q0, T);
    __syncthreads();
    flash_load_a<KS, RW>(qf, buf, 16 * warp, lane);
    __syncthreads();
    flash_stage<HS, FLASH_ROWS>(buf, dhead, C, q0, T);
    __syncthreads();
    flash_load_a<KS, RW>(of, buf, 16 * warp, lane);
    __syncthreads();

    float lse2[2], d[2]; /* rows g and g + 8 of the warp; past T: 0 (never written) */
    for (int i = 0; i < 2; i++) {
        int row = q + (lane >> 2) + 8 * i;
        lse2[i] = row < T ? lse[(long)bh * T + row] * FLASH_LOG2E : 0.0f;
        d[i] = row < T ? dsum[(long)bh * T + row] : 0.0f;
    }
    float dq[HS / 8][4];
    flash_zero<HS / 8>(dq);
    int kend = q0 + FLASH_ROWS < T ? q0 + FLASH_ROWS : T; /* keys up to the tile's last row */
    for (int k0 = 0; k0 < kend; k0 += KT) {
        flash_stage<HS, KT>(ks, head + C, 3 * C, k0, T);
        flash_stage<HS, KT>(vs, head + 2 * C, 3 * C, k0, T);
        __syncthreads();
        float p[NT][4], dp[NT][4];
        uint32_t a[NT / 2][4];
        flash_zero<NT>(p);
        flash_mma_abt<NT, KS, RW>(p, qf, ks, lane); /* S = Q K^T */
        flash_probs<NT>(p, sl2, nullptr, lse2, q, k0, false, T, k0 + KT > q0 || k0 + KT > T, lane);
        flash_zero<NT>(dp);
        flash_mma_abt<NT, KS, RW>(dp, of, vs, lane); /* dP = dO V^T */
        flash_dscores<NT>(dp, p, nullptr, d, false, lane);
        flash_pack_a<NT>(a, dp);
        flash_mma_ab<HS / 8, NT / 2, RW>(dq, a, ks, lane); /* dQ += dS K */
        __syncthreads();                                   /* before the next tile overwrites ks, vs */
    }
    flash_write_rows<HS>(dqkv + (long)b * T * 3 * C + (long)h * HS, 3 * C, dq, scale, q, T, lane);
}

#endif
