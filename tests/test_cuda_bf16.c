/* test_cuda_bf16: the CUDA GPT's bf16 precision (gpt_cuda_set_precision, --precision bf16;
 * worker/cuda/gpt_cuda_bf16.cu) against its fp32 path. The limits and why:
 *   - fused attention (online softmax) against the fp32 kernels that keep the probabilities (checked
 *     against the CPU by test_cuda_kernels), forward and backward, three head sizes (16, 64, 96: a
 *     partial last lane group): both compute in fp32 and differ only in the order of their sums, so
 *     rel <= 3e-5 (a few fp32 ulps times the row length);
 *   - bf16 products (cublasGemmEx) on operands that are already bf16 values, against a double
 *     reference on the host: a product of two bf16 values is exact in fp32 and the accumulation is
 *     fp32, so rel <= 1e-5: this catches a wrong operand, transpose or leading dimension;
 *   - the same on arbitrary fp32 operands: bf16 keeps 8 significant bits, each operand is rounded by up
 *     to 2^-9 of itself and the products' errors partly cancel in the sum, so rel <= 1e-2; and rel >=
 *     1e-4, which shows the operands really were rounded to bf16;
 *   - the forward products with the bias (and the projections' residual) in cuBLASLt's epilogue
 *     (gpt_cuda_lt.cu, the model's way) and in two passes (the fallback): each against the double
 *     reference as above, with and without a residual; and a whole bf16 model step each way: loss to
 *     1e-4, gradients to 1e-2 (test_model_epilogue says why);
 *   - the fc layer's backward with the GELU's backward fused into the pass that makes its bf16 operand:
 *     the same bytes as the GELU's kernel followed by the plain backward;
 *   - a whole model step, bf16 against fp32 on the same weights and batch: loss rel <= 1e-2 and each
 *     gradient tensor rel <= 5e-2 (the rounding of every product's operands, through the layers and
 *     back); the parameters stay fp32 master weights: AdamW on the bf16 step's gradients is the CPU's
 *     AdamW bit for bit (as in test_cuda_step) and leaves values bf16 cannot hold; new parameters set
 *     between steps (what DiLoCo does) are seen by the next bf16 forward;
 *   - the other bf16 attention (gpt_cuda_set_attention, --attention gemm: the fp32 path's six products on
 *     bf16 operands, fp32 accumulation, T x T probabilities kept), same three shapes: against the fp32
 *     kernels and against the fused kernels on arbitrary fp32 q, k, v and dout, rel <= 2e-2 and, against
 *     fp32, rel >= 1e-4 (the operands really were rounded). Why 2e-2: q, k, v, P, dY and dS are each
 *     rounded by up to 2^-9; these roundings emulated against float64 (tools/attention_bf16_error.py: torch
 *     1.13 on the CPU, 30 seeds per shape, normal(0, 1) inputs as here) gave out rel 2.2e-3 .. 5.6e-3 and
 *     dqkv rel 1.8e-3 .. 5.8e-3, so 2e-2 leaves a margin of 3 and still fails any wrong operand, transpose
 *     or stride (rel ~1).
 *     Then each product alone where it can be exact: with q, k, v and dout already bf16 values, the
 *     probabilities (S = scale q k^T: products of bf16 values are exact in fp32, then the fp32 softmax)
 *     equal the fp32 kernels' to the fused check's 3e-5, and out = bf16(P) v and dv = bf16(P)^T dout
 *     equal a double reference built from the probabilities the kernel kept to 1e-5 (as the linear
 *     layers'); dq and dk go through dS, whose bf16 rounding a host reference cannot reproduce bit for
 *     bit, so they have only the 2e-2 bound; and at model level, a step with gemm against fp32 and
 *     against fused with the model step's limits, bit-identical when repeated, and fp32 unchanged by it.
 *   - the tensor-core flash attention (--attention flash, worker/cuda/flash_mma.cuh), head sizes 16, 32, 64,
 *     128 and T 33, 100, 130, 70 (partial tiles of 64): against the fp32 kernels and the fused ones on
 *     arbitrary fp32 inputs, out, lse and dqkv rel <= 2e-2 (and >= 1e-4 against fp32). It rounds what
 *     gemm rounds, but P before its normalisation (online softmax) and with D = rowsum(dout * out) from
 *     its own out; tools/attention_bf16_error.py flash emulates that: out rel 1.7e-3 .. 6.3e-3, dqkv rel
 *     1.5e-3 .. 5.7e-3 over 100 seeds per shape, so the gemm attention's 2e-2. Then on inputs already
 *     bf16 against the double reference of tests/attention_ref.h, where only P and dS are rounded:
 *     rel <= 1e-2 (tools/attention_bf16_error.py emu: out <= 1.5e-3, dqkv <= 3.7e-3 over 100 seeds of
 *     test_flash_emu's shapes) and lse <= 1e-5 (fp32 sums of exact products). Each run twice: the same
 *     bytes (no atomics). Head sizes 24, 144, 10 refused. A model step with flash (head 16, T 50) as the
 *     gemm one above. The same kernels ran on the CPU under the lane emulator (test_flash_emu).
 * Exits 77 (skipped) without a CUDA device or the CUDA build. test_cuda_bf16_emu runs it on the CPU
 * CUDA emulator (tests/tools/cuda_emu), where a GPU is not lent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "cuda_common.h"
#include "gpt/gpt.h"
#include "math/bf16.h"

#ifdef DILOCO_HAVE_CUDA
#include "cuda/gpt_cuda_test.h"

#define ATTN_LIMIT 3e-5
#define EXACT_LIMIT 1e-5
#define BF16_LIMIT 1e-2
#define LOSS_LIMIT 1e-2
#define GRAD_LIMIT 5e-2
#define GEMM_LIMIT 2e-2  /* the gemm attention on fp32 inputs (see the top) */
#define GEMM_FLOOR 1e-4  /* ... and the proof that it rounded them */
#define FLASH_LIMIT 2e-2 /* the flash attention on fp32 inputs: the gemm attention's roundings (see the top) */
#define PDS_LIMIT 1e-2   /* ... on inputs already bf16: only P and dS rounded (see the top) */
#define LSE_LIMIT 1e-5   /* ... its lse then: fp32 sums of exact products */

static void round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = bf16_to_f32(bf16_from_f32(x[i]));
}

static void attention_case(int B, int T, int C, int NH)
{
    size_t N = (size_t)B * T, R = (size_t)B * NH * T, A = R * T;
    float *qkv = tc_randn(N * 3 * C, 1.0f, 1), *dout = tc_randn(N * C, 1.0f, 2);
    float *o32 = malloc(N * C * 4), *att = malloc(A * 4), *o16 = malloc(N * C * 4), *lse = malloc(R * 4);
    float *d32 = malloc(N * 3 * C * 4), *d16 = malloc(N * 3 * C * 4);
    assert_int_equal(gpt_cuda_k_attention_forward(o32, att, qkv, B, T, C, NH, 0), 0);
    assert_int_equal(gpt_cuda_k_flash_forward(o16, lse, qkv, B, T, C, NH, 0), 0);
    assert_int_equal(gpt_cuda_k_attention_backward(d32, dout, qkv, att, B, T, C, NH, 0), 0);
    assert_int_equal(gpt_cuda_k_flash_backward(d16, dout, qkv, o16, lse, B, T, C, NH, 0), 0);
    double fe = tc_relerr(o16, o32, N * C), be = tc_relerr(d16, d32, N * 3 * C);
    printf("fused attention B%d T%d C%d NH%d (head %d): out rel %.3g, dqkv rel %.3g (limit %g)\n", B, T, C, NH, C / NH,
           fe, be, ATTN_LIMIT);
    assert_true(fe <= ATTN_LIMIT);
    assert_true(be <= ATTN_LIMIT);
    free(qkv);
    free(dout);
    free(o32);
    free(att);
    free(o16);
    free(lse);
    free(d32);
    free(d16);
}

/* the attention shapes (B, T, C, NH): head sizes 16, 64 and 96 (a partial last lane group) */
static const int SHAPES[3][4] = {{2, 33, 64, 4}, {2, 50, 128, 2}, {1, 64, 192, 2}};

static void test_fused_attention(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) attention_case(SHAPES[i][0], SHAPES[i][1], SHAPES[i][2], SHAPES[i][3]);
}

/* out (B,T,C) = bf16(P) v and dv (B,T,C) = bf16(P)^T dout per head, in double, from the probabilities att
 * (B,NH,T,T) and qkv, dout that are already bf16 values */
static void host_pv(double *out, double *dv, const float *att, const float *qkv, const float *dout, int B, int T, int C,
                    int NH)
{
    int hs = C / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int d = 0; d < hs; d++) {
                    double y = 0, g = 0;
                    for (int s = 0; s < T; s++) {
                        const float *p = att + ((size_t)(b * NH + h) * T) * T;
                        y += (double)bf16_to_f32(bf16_from_f32(p[(size_t)t * T + s])) *
                             qkv[((size_t)b * T + s) * 3 * C + 2 * C + h * hs + d];
                        g += (double)bf16_to_f32(bf16_from_f32(p[(size_t)s * T + t])) *
                             dout[((size_t)b * T + s) * C + h * hs + d];
                    }
                    out[((size_t)b * T + t) * C + h * hs + d] = y;
                    dv[((size_t)b * T + t) * C + h * hs + d] = g;
                }
}

/* the gemm attention against the fp32 and fused kernels (arbitrary inputs), then product by product on
 * inputs that are already bf16 values */
static void gemm_case(int B, int T, int C, int NH)
{
    size_t N = (size_t)B * T, A = (size_t)B * NH * T * T, R = (size_t)B * NH * T;
    float *qkv = tc_randn(N * 3 * C, 1.0f, 21), *dout = tc_randn(N * C, 1.0f, 22);
    float *o32 = malloc(N * C * 4), *a32 = malloc(A * 4), *d32 = malloc(N * 3 * C * 4);
    float *of = malloc(N * C * 4), *lse = malloc(R * 4), *df = malloc(N * 3 * C * 4);
    float *og = malloc(N * C * 4), *ag = malloc(A * 4), *dg = malloc(N * 3 * C * 4), *dv = malloc(N * C * 4);
    double *ry = malloc(N * C * 8), *rdv = malloc(N * C * 8);
    for (int pre = 0; pre < 2; pre++) {
        if (pre) {
            round_bf16(qkv, N * 3 * C);
            round_bf16(dout, N * C);
        }
        assert_int_equal(gpt_cuda_k_attention_forward(o32, a32, qkv, B, T, C, NH, 0), 0);
        assert_int_equal(gpt_cuda_k_attention_backward(d32, dout, qkv, a32, B, T, C, NH, 0), 0);
        assert_int_equal(gpt_cuda_k_attention_forward_bf16(og, ag, qkv, B, T, C, NH), 0);
        assert_int_equal(gpt_cuda_k_attention_backward_bf16(dg, dout, qkv, ag, B, T, C, NH), 0);
        if (!pre) {
            assert_int_equal(gpt_cuda_k_flash_forward(of, lse, qkv, B, T, C, NH, 0), 0);
            assert_int_equal(gpt_cuda_k_flash_backward(df, dout, qkv, of, lse, B, T, C, NH, 0), 0);
            double e[4] = {tc_relerr(og, o32, N * C), tc_relerr(dg, d32, N * 3 * C), tc_relerr(og, of, N * C),
                           tc_relerr(dg, df, N * 3 * C)};
            printf("gemm attention B%d T%d C%d NH%d (head %d): vs fp32 out %.3g dqkv %.3g, vs fused out %.3g dqkv "
                   "%.3g (limit %g, vs fp32 at least %g)\n",
                   B, T, C, NH, C / NH, e[0], e[1], e[2], e[3], GEMM_LIMIT, GEMM_FLOOR);
            for (int i = 0; i < 4; i++) assert_true(e[i] <= GEMM_LIMIT);
            assert_true(e[0] >= GEMM_FLOOR);
            assert_true(e[1] >= GEMM_FLOOR);
            continue;
        }
        host_pv(ry, rdv, ag, qkv, dout, B, T, C, NH);
        for (size_t n = 0; n < N; n++) memcpy(dv + n * C, dg + n * 3 * C + 2 * C, (size_t)C * 4);
        double ea = tc_relerr(ag, a32, A), ey = tc_relerr_d(og, ry, N * C), ev = tc_relerr_d(dv, rdv, N * C);
        printf("  operands already bf16: probabilities vs fp32 %.3g (limit %g), out %.3g and dv %.3g vs double "
               "bf16(P) v, bf16(P)^T dout (limit %g)\n",
               ea, ATTN_LIMIT, ey, ev, EXACT_LIMIT);
        assert_true(ea <= ATTN_LIMIT);
        assert_true(ey <= EXACT_LIMIT);
        assert_true(ev <= EXACT_LIMIT);
    }
    free(qkv);
    free(dout);
    free(o32);
    free(a32);
    free(d32);
    free(of);
    free(lse);
    free(df);
    free(og);
    free(ag);
    free(dg);
    free(dv);
    free(ry);
    free(rdv);
}

static void test_gemm_attention(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) gemm_case(SHAPES[i][0], SHAPES[i][1], SHAPES[i][2], SHAPES[i][3]);
}

/* the flash attention's shapes (B, T, C, NH): head sizes 16, 32, 64, 128; T 33, 100, 130, 70 (partial
 * tiles of 64, one to three of them) */
static const int FLASH_SHAPES[4][4] = {{2, 33, 64, 4}, {2, 100, 64, 2}, {1, 130, 128, 2}, {1, 70, 256, 2}};

/* flash on qkv, dout: out, lse, dqkv; a second run must give the same bytes (no atomics, fixed order) */
static void flash_run(float *out, float *lse, float *dqkv, const float *qkv, const float *dout, int B, int T, int C,
                      int NH)
{
    size_t N = (size_t)B * T, R = (size_t)B * NH * T;
    float *o2 = malloc(N * C * 4), *l2 = malloc(R * 4), *d2 = malloc(N * 3 * C * 4);
    for (int run = 0; run < 2; run++) {
        float *o = run ? o2 : out, *l = run ? l2 : lse, *d = run ? d2 : dqkv;
        assert_int_equal(gpt_cuda_k_flash_forward(o, l, qkv, B, T, C, NH, 1), 0);
        assert_int_equal(gpt_cuda_k_flash_backward(d, dout, qkv, o, l, B, T, C, NH, 1), 0);
    }
    assert_memory_equal(o2, out, N * C * 4);
    assert_memory_equal(l2, lse, R * 4);
    assert_memory_equal(d2, dqkv, N * 3 * C * 4);
    free(o2);
    free(l2);
    free(d2);
}

/* flash against the fp32 kernels and the fused ones on arbitrary inputs, then on inputs already bf16
 * against the double reference (only P and dS rounded) */
static void flash_case(int B, int T, int C, int NH)
{
    size_t N = (size_t)B * T, A = (size_t)B * NH * T * T, R = (size_t)B * NH * T;
    float *qkv = tc_randn(N * 3 * C, 1.0f, 31), *dout = tc_randn(N * C, 1.0f, 32);
    /* out, lse (or fp32's probabilities) and dqkv of fp32 (32), fused (f) and flash (m), in one block */
    float *o32 = malloc((12 * N * C + A + 2 * R) * 4), *a32 = o32 + N * C, *d32 = a32 + A;
    float *of = d32 + N * 3 * C, *lf = of + N * C, *df = lf + R, *om = df + N * 3 * C, *lm = om + N * C;
    float *dm = lm + R;
    double *ro = malloc((N * C + R + N * 3 * C) * 8), *rl = ro + N * C, *rd = rl + R;
    assert_int_equal(gpt_cuda_k_attention_forward(o32, a32, qkv, B, T, C, NH, 0), 0);
    assert_int_equal(gpt_cuda_k_attention_backward(d32, dout, qkv, a32, B, T, C, NH, 0), 0);
    assert_int_equal(gpt_cuda_k_flash_forward(of, lf, qkv, B, T, C, NH, 0), 0);
    assert_int_equal(gpt_cuda_k_flash_backward(df, dout, qkv, of, lf, B, T, C, NH, 0), 0);
    flash_run(om, lm, dm, qkv, dout, B, T, C, NH);
    double e[5] = {tc_relerr(om, o32, N * C), tc_relerr(dm, d32, N * 3 * C), tc_relerr(om, of, N * C),
                   tc_relerr(dm, df, N * 3 * C), tc_relerr(lm, lf, R)};
    printf("flash attention B%d T%d C%d NH%d (head %d): vs fp32 out %.3g dqkv %.3g, vs fused out %.3g dqkv %.3g lse "
           "%.3g (limit %g, vs fp32 at least %g); repeated: the same bytes\n",
           B, T, C, NH, C / NH, e[0], e[1], e[2], e[3], e[4], FLASH_LIMIT, GEMM_FLOOR);
    for (int i = 0; i < 5; i++) assert_true(e[i] <= FLASH_LIMIT);
    assert_true(e[0] >= GEMM_FLOOR);
    assert_true(e[1] >= GEMM_FLOOR);
    round_bf16(qkv, N * 3 * C);
    round_bf16(dout, N * C);
    flash_run(om, lm, dm, qkv, dout, B, T, C, NH);
    attn_ref_forward(ro, rl, qkv, B, T, C, NH);
    attn_ref_backward(rd, dout, qkv, B, T, C, NH);
    double eo = tc_relerr_d(om, ro, N * C), el = tc_relerr_d(lm, rl, R), ed = tc_relerr_d(dm, rd, N * 3 * C);
    printf("  operands already bf16, vs double: out %.3g dqkv %.3g (limit %g), lse %.3g (limit %g)\n", eo, ed,
           PDS_LIMIT, el, LSE_LIMIT);
    assert_true(eo <= PDS_LIMIT && ed <= PDS_LIMIT && el <= LSE_LIMIT);
    free(qkv);
    free(dout);
    free(o32);
    free(ro);
}

static void test_flash_attention(void **state)
{
    (void)state;
    for (int i = 0; i < 4; i++)
        flash_case(FLASH_SHAPES[i][0], FLASH_SHAPES[i][1], FLASH_SHAPES[i][2], FLASH_SHAPES[i][3]);
}

/* head sizes the kernels are not built for: refused, nothing launched */
static void test_flash_refusals(void **state)
{
    (void)state;
    static const int BAD[3][2] = {{48, 2}, {288, 2}, {40, 4}}; /* head 24, 144, 10 */
    float *qkv = tc_randn(2 * 3 * 288, 1.0f, 33), out[2 * 288], lse[4];
    for (int i = 0; i < 3; i++) {
        int C = BAD[i][0], NH = BAD[i][1];
        assert_int_equal(gpt_cuda_k_flash_forward(out, lse, qkv, 1, 1, C, NH, 1), -1);
        printf("flash with head size %d refused\n", C / NH);
    }
    free(qkv);
}

/* out = inp W^T + b, dinp = dout W, dw = dout^T inp, db = column sums of dout, in double */
static void host_linear(double *out, double *dinp, double *dw, double *db, const float *inp, const float *w,
                        const float *b, const float *dout, int N, int C, int OC)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b[o];
            for (int c = 0; c < C; c++) s += (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            out[(size_t)n * OC + o] = s;
        }
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += (double)dout[(size_t)n * OC + o] * w[(size_t)o * C + c];
            dinp[(size_t)n * C + c] = s;
        }
    for (int o = 0; o < OC; o++) {
        double sb = 0;
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
            dw[(size_t)o * C + c] = s;
        }
        for (int n = 0; n < N; n++) sb += dout[(size_t)n * OC + o];
        db[o] = sb;
    }
}

/* the worst of the four results' rel against the double reference; with_res: a residual added to the
 * forward's output (the projections'); lt: the forward's bias (and residual) in cuBLASLt's epilogue */
static double linear_err(int N, int C, int OC, int pre_rounded, int with_res, int lt)
{
    float *inp = tc_randn((size_t)N * C, 1.0f, 3), *w = tc_randn((size_t)OC * C, 0.05f, 4);
    float *b = tc_randn(OC, 0.1f, 5), *dout = tc_randn((size_t)N * OC, 1.0f, 6);
    float *res = with_res ? tc_randn((size_t)N * OC, 1.0f, 7) : NULL;
    if (pre_rounded) {
        round_bf16(inp, (size_t)N * C);
        round_bf16(w, (size_t)OC * C);
        round_bf16(dout, (size_t)N * OC);
    }
    float *out = malloc((size_t)N * OC * 4), *dinp = malloc((size_t)N * C * 4), *dw = malloc((size_t)OC * C * 4),
          *db = malloc(OC * 4);
    double *ro = malloc((size_t)N * OC * 8), *rdi = malloc((size_t)N * C * 8), *rdw = malloc((size_t)OC * C * 8),
           *rdb = malloc(OC * 8);
    assert_int_equal(gpt_cuda_k_matmul_forward_bf16(out, inp, w, b, res, N, C, OC, lt), 0);
    assert_int_equal(gpt_cuda_k_matmul_backward_bf16(dinp, dw, db, dout, NULL, inp, w, N, C, OC), 0);
    host_linear(ro, rdi, rdw, rdb, inp, w, b, dout, N, C, OC);
    for (size_t i = 0; res && i < (size_t)N * OC; i++) ro[i] += res[i];
    double e[4] = {tc_relerr_d(out, ro, (size_t)N * OC), tc_relerr_d(dinp, rdi, (size_t)N * C),
                   tc_relerr_d(dw, rdw, (size_t)OC * C), tc_relerr_d(db, rdb, OC)};
    printf("bf16 linear N%d C%d OC%d (%s%s, %s): out %.3g dinp %.3g dw %.3g dbias %.3g\n", N, C, OC,
           pre_rounded ? "operands already bf16" : "fp32 operands", with_res ? ", plus a residual" : "",
           lt ? "cuBLASLt epilogue" : "bias, then the product", e[0], e[1], e[2], e[3]);
    double worst = 0;
    for (int i = 0; i < 3; i++)
        if (!(e[i] <= worst)) worst = e[i];
    assert_true(e[3] <= EXACT_LIMIT); /* the bias gradient stays fp32 */
    free(inp);
    free(w);
    free(b);
    free(dout);
    free(out);
    free(dinp);
    free(dw);
    free(db);
    free(ro);
    free(rdi);
    free(rdw);
    free(rdb);
    free(res);
    return worst;
}

/* each forward path (bias then the product; cuBLASLt's epilogue), with and without the residual */
static void test_bf16_linear(void **state)
{
    (void)state;
    for (int lt = 0; lt < 2; lt++)
        for (int with_res = 0; with_res < 2; with_res++) {
            assert_true(linear_err(96, 64, 192, 1, with_res, lt) <= EXACT_LIMIT);
            assert_true(linear_err(50, 48, 40, 1, with_res, lt) <= EXACT_LIMIT); /* off the tensor cores' multiples */
            double e = linear_err(96, 64, 192, 0, with_res, lt);
            assert_true(e <= BF16_LIMIT);
            assert_true(e >= 1e-4);
        }
    /* a bias only 4-byte aligned: cuBLASLt is not given it (its epilogue's loads want 16), the launcher
     * takes the two passes */
    float *inp = tc_randn(96 * 64, 1.0f, 3), *w = tc_randn(192 * 64, 0.05f, 4), *b = tc_randn(192, 0.1f, 5);
    float *out = malloc(96 * 192 * 4);
    assert_int_equal(gpt_cuda_k_matmul_forward_bf16(out, inp, w, b, NULL, 96, 64, 192, 2), 1);
    printf("bf16 linear with a bias 4 bytes off alignment: no cuBLASLt plan (the two passes)\n");
    free(inp);
    free(w);
    free(b);
    free(out);
}

/* the fc layer's backward with the GELU's backward fused into the pass that makes its bf16 operand
 * (l_matmul_backward_gelu_bf16) against the GELU's backward kernel and then the plain backward: the same
 * fp32 operations in the same order, so the same bytes */
static void test_bf16_linear_gelu(void **state)
{
    (void)state;
    int N = 96, C = 64, OC = 256;
    float *inp = tc_randn((size_t)N * C, 1.0f, 3), *w = tc_randn((size_t)OC * C, 0.05f, 4);
    float *dout = tc_randn((size_t)N * OC, 1.0f, 6), *pre = tc_randn((size_t)N * OC, 1.5f, 8);
    float *dg = malloc((size_t)N * OC * 4), *di[2], *dw[2], *db[2];
    for (int k = 0; k < 2; k++) {
        di[k] = malloc((size_t)N * C * 4);
        dw[k] = malloc((size_t)OC * C * 4);
        db[k] = malloc(OC * 4);
    }
    assert_int_equal(gpt_cuda_k_matmul_backward_bf16(di[0], dw[0], db[0], dout, pre, inp, w, N, C, OC), 0);
    assert_int_equal(gpt_cuda_k_gelu_backward(dg, pre, dout, (size_t)N * OC), 0);
    assert_int_equal(gpt_cuda_k_matmul_backward_bf16(di[1], dw[1], db[1], dg, NULL, inp, w, N, C, OC), 0);
    assert_memory_equal(di[0], di[1], (size_t)N * C * 4);
    assert_memory_equal(dw[0], dw[1], (size_t)OC * C * 4);
    assert_memory_equal(db[0], db[1], OC * 4);
    printf("bf16 fc backward with the GELU's fused (N%d C%d OC%d): dinp, dw, dbias the same bytes as the GELU's kernel "
           "then the backward\n",
           N, C, OC);
    for (int k = 0; k < 2; k++) {
        free(di[k]);
        free(dw[k]);
        free(db[k]);
    }
    free(inp);
    free(w);
    free(dout);
    free(pre);
    free(dg);
}

/* loss and gradients of one step of a model in the given precision and attention */
static float model_step_with(gpt_cuda *g, int bf16, int attention, const float *p, size_t n, const int *inp,
                             const int *tgt, float *grads)
{
    char err[512];
    float loss = 0;
    assert_int_equal(gpt_cuda_set_precision(g, bf16, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_set_attention(g, attention, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_set_params(g, p, 0, n, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_forward(g, inp, tgt, &loss, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_backward(g, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_get_grads(g, grads, err, sizeof err), 0);
    return loss;
}

static float model_step(gpt_cuda *g, int bf16, const float *p, size_t n, const int *inp, const int *tgt, float *grads)
{
    return model_step_with(g, bf16, GPT_ATTENTION_FUSED, p, n, inp, tgt, grads);
}

/* the worst tensor's rel of gradients a against b; its name in *wname */
static double worst_grad(const model_tensor *t, int nt, const float *a, const float *b, const char **wname)
{
    double worst = 0;
    for (int k = 0; k < nt; k++) {
        double e = tc_relerr(a + t[k].offset, b + t[k].offset, t[k].numel);
        if (!(e <= worst)) {
            worst = e;
            *wname = t[k].name;
        }
    }
    return worst;
}

/* The model tests' batch: 4 sequences on a GPU; 2 under the CPU CUDA emulator (make's test_cuda_bf16_emu,
 * built with DILOCO_CUDA_EMULATED), where a model step takes seconds and the four model tests were half the
 * suite's longest test. The kernels meet the same shapes either way (the sequence of 50: a partial tile). */
#ifdef DILOCO_CUDA_EMULATED
#define MODEL_BATCH 2
#else
#define MODEL_BATCH 4
#endif

/* what the model tests step (a fresh one each): 2 layers, 4 heads, dim 64, vocab 97, batch MODEL_BATCH x 50,
 * its initial weights p and one batch */
typedef struct {
    model_tensor *t;
    int nt;
    size_t n;
    float *p;
    int *inp, *tgt;
    gpt_cuda *g;
    gpt_config c;
    int B, T;
} model_fixture;

static int model_open(void **state)
{
    char err[512];
    gpt_config c = {.layers = 2, .heads = 4, .dim = 64, .ctx = 64, .vocab = 97};
    int B = MODEL_BATCH, T = 50;
    model_fixture *f = calloc(1, sizeof *f);
    *state = f;
    if (!f || gpt_layout(&c, &f->t, &f->nt, &f->n, err, sizeof err)) return -1;
    f->c = c;
    f->B = B;
    f->T = T;
    f->p = malloc(f->n * 4);
    f->inp = tc_randint((size_t)B * T, c.vocab, 11);
    f->tgt = tc_randint((size_t)B * T, c.vocab, 12);
    if (gpt_init_params(&c, 7, f->p, f->n, err, sizeof err) ||
        !(f->g = gpt_cuda_create(&c, B, T, 0, err, sizeof err))) {
        printf("model fixture: %s\n", err);
        return -1;
    }
    return 0;
}

static int model_close(void **state)
{
    model_fixture *f = *state;
    if (!f) return 0;
    gpt_cuda_free(f->g);
    free(f->t);
    free(f->p);
    free(f->inp);
    free(f->tgt);
    free(f);
    return 0;
}

static void test_model(void **state)
{
    model_fixture *f = *state;
    char err[512];
    model_tensor *t = f->t;
    int nt = f->nt, *inp = f->inp, *tgt = f->tgt;
    size_t n = f->n;
    float *p = f->p, *p2 = malloc(n * 4), *g32 = malloc(n * 4), *g16 = malloc(n * 4);
    gpt_cuda *g = f->g;
    float l32 = model_step(g, 0, p, n, inp, tgt, g32), l16 = model_step(g, 1, p, n, inp, tgt, g16);
    assert_int_equal(gpt_cuda_precision_bf16(g), 1);
    double le = fabs((double)l16 - l32) / l32;
    const char *wname = "";
    double worst = worst_grad(t, nt, g16, g32, &wname);
    printf("model step bf16 vs fp32: loss %.6f vs %.6f rel %.3g (limit %g); gradients: worst %s rel %.3g (limit %g)\n",
           l16, l32, le, LOSS_LIMIT, wname, worst, GRAD_LIMIT);
    assert_true(le <= LOSS_LIMIT);
    assert_true(worst <= GRAD_LIMIT);

    /* the fp32 master weights: AdamW on the bf16 step's gradients, replayed on the CPU bit for bit */
    float *m = calloc(n, 4), *v = calloc(n, 4), *pg = malloc(n * 4);
    memcpy(p2, p, n * 4);
    assert_int_equal(gpt_cuda_set_moments(g, m, v, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_clip(g, 1.0, NULL, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_get_grads(g, g16, err, sizeof err), 0);
    gpt_adamw_step(t, nt, p2, g16, m, v, 1, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1);
    assert_int_equal(gpt_cuda_adamw(g, 1, 1e-3, 0.9, 0.95, 1e-8, 0.1, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_get_params(g, pg, err, sizeof err), 0);
    assert_memory_equal(pg, p2, n * 4);
    size_t not_bf16 = 0;
    for (size_t i = 0; i < n; i++) not_bf16 += bf16_to_f32(bf16_from_f32(pg[i])) != pg[i];
    printf("AdamW after a bf16 step: the CPU's replay bit for bit; %zu of %zu parameters are not bf16 values\n",
           not_bf16, n);
    assert_true(not_bf16 > n / 2);

    /* new weights set between steps (DiLoCo) are what the next bf16 forward uses */
    for (size_t i = 0; i < n; i++) p2[i] = pg[i] * 1.5f;
    float n32 = model_step(g, 0, p2, n, inp, tgt, g32), n16 = model_step(g, 1, p2, n, inp, tgt, g16);
    printf("after new weights: loss bf16 %.6f fp32 %.6f (before %.6f)\n", n16, n32, l16);
    assert_true(fabs((double)n16 - n32) / n32 <= LOSS_LIMIT);
    assert_true(fabs((double)n16 - l16) > 10 * fabs((double)n16 - n32));
    free(p2);
    free(g32);
    free(g16);
    free(m);
    free(v);
    free(pg);
}

/* a model step with a tensor-core attention (gemm, flash) against fp32 and against fused; repeated bit
 * for bit; and fp32 is the same bytes whichever bf16 attention is set */
static void model_attention_check(model_fixture *f, int attention, const char *name)
{
    model_tensor *t = f->t;
    int nt = f->nt, *inp = f->inp, *tgt = f->tgt;
    size_t n = f->n;
    float *p = f->p, *g32 = malloc(n * 4), *gf = malloc(n * 4), *ga = malloc(n * 4), *g2 = malloc(n * 4);
    gpt_cuda *g = f->g;
    float l32 = model_step(g, 0, p, n, inp, tgt, g32), lf = model_step(g, 1, p, n, inp, tgt, gf);
    float la = model_step_with(g, 1, attention, p, n, inp, tgt, ga);
    assert_int_equal(gpt_cuda_attention(g), attention);
    const char *w32 = "", *wf = "";
    double e32 = worst_grad(t, nt, ga, g32, &w32), ef = worst_grad(t, nt, ga, gf, &wf);
    double le32 = fabs((double)la - l32) / l32, lef = fabs((double)la - lf) / lf;
    printf("model step bf16 %s: loss %.6f (fp32 %.6f rel %.3g, fused %.6f rel %.3g; limit %g); gradients vs fp32 "
           "worst %s %.3g, vs fused worst %s %.3g (limit %g)\n",
           name, la, l32, le32, lf, lef, LOSS_LIMIT, w32, e32, wf, ef, GRAD_LIMIT);
    assert_true(le32 <= LOSS_LIMIT && lef <= LOSS_LIMIT);
    assert_true(e32 <= GRAD_LIMIT && ef <= GRAD_LIMIT);
    float l2 = model_step_with(g, 1, attention, p, n, inp, tgt, g2);
    assert_true(l2 == la);
    assert_memory_equal(g2, ga, n * 4);
    /* fp32 keeps its own attention whatever is set */
    float l3 = model_step_with(g, 0, attention, p, n, inp, tgt, g2);
    assert_true(l3 == l32);
    assert_memory_equal(g2, g32, n * 4);
    printf("%s repeated: the same bytes; fp32 with %s set: the same bytes as fp32\n", name, name);
    free(g32);
    free(gf);
    free(ga);
    free(g2);
}

static void test_model_gemm(void **state)
{
    model_fixture *f = *state;
    char err[512];
    assert_int_equal(gpt_cuda_attention(f->g), GPT_ATTENTION_FUSED);
    assert_int_equal(gpt_cuda_set_attention(f->g, 4, err, sizeof err), -1);
    printf("attention 4: %s\n", err);
    assert_non_null(strstr(err, "none of fused"));
    /* auto resolves on the spot: flash, whose kernels take this head size (16) and pass the device check */
    assert_int_equal(gpt_cuda_set_attention(f->g, GPT_ATTENTION_AUTO, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_attention(f->g), GPT_ATTENTION_FLASH);
    const char *note = gpt_cuda_attention_note(f->g);
    printf("attention auto: flash (%s)\n", note);
    assert_non_null(strstr(note, "flash checked on this device, head size 16"));
    assert_int_equal(gpt_cuda_set_attention(f->g, GPT_ATTENTION_FUSED, err, sizeof err), 0);
    assert_string_equal(gpt_cuda_attention_note(f->g), "");
    model_attention_check(f, GPT_ATTENTION_GEMM, "gemm");
}

/* The bias and the projections' residual in cuBLASLt's epilogue (the model's way) against the two passes
 * (DILOCO_CUDA_LT=0: bias and residual written first, the product added), a whole bf16 step on the same
 * weights (biases made non-zero) and batch. The products are the same; where the bias is added (and on
 * a GPU the kernels' fp32 accumulation order) differs by an fp32 ulp, which flips the bf16 rounding of
 * a few operands downstream by 2^-8: so the loss agrees to 1e-4 (3e-7 under the emulator) and each
 * gradient to 1e-2 (1.9e-3 there, wte's). The bias left out of the epilogue gave loss rel 3.3e-3 and
 * gradient rel 0.98 (lnf.weight). */
static void test_model_epilogue(void **state)
{
    model_fixture *f = *state;
    char err[512];
    size_t n = f->n;
    float *glt = malloc(n * 4), *gtwo = malloc(n * 4), *p = tc_randn(n, 0.02f, 13);
    for (size_t i = 0; i < n; i++) p[i] += f->p[i]; /* the initial biases are zeros: make them count */
    float llt = model_step(f->g, 1, p, n, f->inp, f->tgt, glt);
    const char *note = gpt_cuda_precision_note(f->g);
    printf("bf16 linear layers: %s\n", note);
    assert_non_null(strstr(note, "cuBLASLt"));
    setenv("DILOCO_CUDA_LT", "0", 1);
    gpt_cuda *two = gpt_cuda_create(&f->c, f->B, f->T, 0, err, sizeof err);
    assert_non_null(two);
    float ltwo = model_step(two, 1, p, n, f->inp, f->tgt, gtwo);
    unsetenv("DILOCO_CUDA_LT");
    printf("with DILOCO_CUDA_LT=0: %s\n", gpt_cuda_precision_note(two));
    assert_non_null(strstr(gpt_cuda_precision_note(two), "DILOCO_CUDA_LT=0"));
    const char *wname = "";
    double le = fabs((double)llt - ltwo) / ltwo, worst = worst_grad(f->t, f->nt, glt, gtwo, &wname);
    printf("model step, epilogue vs two passes: loss %.7f vs %.7f rel %.3g (limit 1e-4); gradients: worst %s rel "
           "%.3g (limit 1e-2)\n",
           llt, ltwo, le, wname, worst);
    assert_true(le <= 1e-4);
    assert_true(worst <= 1e-2);
    assert_int_equal(gpt_cuda_set_precision(f->g, 0, err, sizeof err), 0);
    assert_string_equal(gpt_cuda_precision_note(f->g), ""); /* fp32 has its own path */
    gpt_cuda_free(two);
    free(glt);
    free(gtwo);
    free(p);
}

/* The logits' rows padded to a multiple of 64 (bf16's default: vocab 97 -> 128) against rows of V
 * (DILOCO_CUDA_VOCAB_PAD=0): a whole bf16 step on the same weights and batch, and the probabilities
 * gpt_cuda_get_logits gives. The padding moves only where rows start, so under the emulator every byte is
 * the same; on a GPU cuBLAS may take other kernels for the aligned rows (another fp32 accumulation order),
 * so there the loss agrees to 1e-4, each gradient to 1e-2 (test_model_epilogue's limits), the
 * probabilities to 1e-4. fp32 keeps rows of V. */
static void test_model_vocab_pad(void **state)
{
    model_fixture *f = *state;
    char err[512];
    size_t n = f->n, NV = (size_t)f->B * f->T * f->c.vocab;
    float *gpad = malloc(n * 4), *gflat = malloc(n * 4), *ppad = malloc(NV * 4), *pflat = malloc(NV * 4);
    float lpad = model_step(f->g, 1, f->p, n, f->inp, f->tgt, gpad);
    assert_int_equal(gpt_cuda_logits_stride(f->g), 128);
    assert_int_equal(gpt_cuda_get_logits(f->g, ppad, err, sizeof err), 0);
    setenv("DILOCO_CUDA_VOCAB_PAD", "0", 1);
    gpt_cuda *flat = gpt_cuda_create(&f->c, f->B, f->T, 0, err, sizeof err);
    assert_non_null(flat);
    float lflat = model_step(flat, 1, f->p, n, f->inp, f->tgt, gflat);
    unsetenv("DILOCO_CUDA_VOCAB_PAD");
    assert_int_equal(gpt_cuda_logits_stride(flat), 97);
    assert_int_equal(gpt_cuda_get_logits(flat, pflat, err, sizeof err), 0);
    const char *wname = "";
    double le = fabs((double)lpad - lflat) / lflat, worst = worst_grad(f->t, f->nt, gpad, gflat, &wname),
           pe = tc_relerr(ppad, pflat, NV);
    printf("model step, logits rows of 128 vs 97: loss %.7f vs %.7f rel %.3g; gradients: worst %s rel %.3g; "
           "probabilities rel %.3g\n",
           lpad, lflat, le, wname, worst, pe);
#ifdef DILOCO_CUDA_EMULATED
    assert_true(lpad == lflat);
    assert_memory_equal(gpad, gflat, n * 4);
    assert_memory_equal(ppad, pflat, NV * 4);
#else
    assert_true(le <= 1e-4);
    assert_true(worst <= 1e-2);
    assert_true(pe <= 1e-4);
#endif
    assert_int_equal(gpt_cuda_set_precision(f->g, 0, err, sizeof err), 0);
    assert_int_equal(gpt_cuda_logits_stride(f->g), 97);
    gpt_cuda_free(flat);
    free(gpad), free(gflat), free(ppad), free(pflat);
}

/* --attention auto's device check: flash agrees with the fused kernels at every head size it takes (the
 * differences are bf16 rounding, far under the limit and above 0), and a limit of 0 refuses it */
static void test_flash_verify(void **state)
{
    (void)state;
    char note[256];
    for (int hs = 16; hs <= 128; hs += 48) {
        assert_int_equal(gpt_cuda_k_flash_verify(hs, 2e-2, note, sizeof note), 1);
        printf("%s\n", note);
        double ro = -1, rd = -1;
        const char *p = strstr(note, "out rel ");
        assert_non_null(p);
        assert_int_equal(sscanf(p, "out rel %lf, dqkv rel %lf", &ro, &rd), 2);
        assert_true(ro > 0 && ro < 1e-2 && rd > 0 && rd < 1e-2);
    }
    assert_int_equal(gpt_cuda_k_flash_verify(64, 0.0, note, sizeof note), 0);
    printf("limit 0: %s\n", note);
    assert_non_null(strstr(note, "FAILED"));
    assert_int_equal(gpt_cuda_k_flash_verify(24, 2e-2, note, sizeof note), -1); /* not a head size flash takes */
}

/* the model's head size is 16 (dim 64, 4 heads) and its sequence 50: a partial key and query tile */
static void test_model_flash(void **state)
{
    model_attention_check(*state, GPT_ATTENTION_FLASH, "flash");
}
#endif

int main(void)
{
    cuda_test_require_device("test_cuda_bf16");
#ifdef DILOCO_HAVE_CUDA
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_attention),
        cmocka_unit_test(test_bf16_linear),
        cmocka_unit_test(test_bf16_linear_gelu),
        cmocka_unit_test_setup_teardown(test_model, model_open, model_close),
        cmocka_unit_test_setup_teardown(test_model_epilogue, model_open, model_close),
        cmocka_unit_test_setup_teardown(test_model_vocab_pad, model_open, model_close),
        cmocka_unit_test(test_gemm_attention),
        cmocka_unit_test_setup_teardown(test_model_gemm, model_open, model_close),
        cmocka_unit_test(test_flash_attention),
        cmocka_unit_test(test_flash_refusals),
        cmocka_unit_test(test_flash_verify),
        cmocka_unit_test_setup_teardown(test_model_flash, model_open, model_close),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    return 77;
#endif
}
