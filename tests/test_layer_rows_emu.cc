/* test_layer_rows_emu: the layer kernels of worker/cuda/layer_rows.cuh on the CPU under the lane emulator
 * (tests/tools/simt_emu.h), launched as gpt_cuda_kernels.cu launches them (LayerNorm: 8 warps a block, a
 * warp a row; GELU and bias + residual: 256 threads a block, a thread an element):
 *   - LayerNorm in fp32 against float64 (rel 1e-5), for C 64 (two values a lane) and 200 (lanes with
 *     different counts), 19 rows (a last block with 3 rows);
 *   - its bf16 output (the bf16 path) is exactly the bf16 rounding of the fp32 output, with the same
 *     mean and rstd: the two paths differ only in the store;
 *   - GELU (tanh form) against float64 (rel 1e-6 of the largest value), n 1000 (a partial last block),
 *     and its bf16 output the rounding of the fp32 one, exactly;
 *   - bias + residual exactly;
 *   - the column sums (block 32 x 32, a fixed tree; N 77, C 70: a partial tile of columns) against float64,
 *     rel 1e-5: a bias's gradient, with the bf16 copy of what it sums written in the same pass (exactly
 *     the rounding of each value), and LayerNorm's weight gradient; two interleavings, the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_check.h"
#include "layer_rows.cuh"

static float input(size_t i, float scale)
{
    return (float)((long)((i * 2654435761u) % 2001) - 1000) / 1000.0f * scale;
}

static simt_dim3 blocks(size_t n, unsigned per)
{
    return simt_dim3{(unsigned)((n + per - 1) / per), 1, 1};
}

static void test_layernorm(int N, int C)
{
    size_t n = (size_t)N * C;
    float *inp = (float *)malloc(n * 4), *w = (float *)malloc(C * 4), *b = (float *)malloc(C * 4);
    float *out = (float *)calloc(n, 4), *mean = (float *)calloc(N, 4), *rstd = (float *)calloc(N, 4);
    float *mean2 = (float *)calloc(N, 4), *rstd2 = (float *)calloc(N, 4);
    uint16_t *out16 = (uint16_t *)calloc(n, 2);
    for (size_t i = 0; i < n; i++) inp[i] = input(i, 3.0f) + (float)(i / C); /* rows with different means */
    for (int i = 0; i < C; i++) {
        w[i] = 1.0f + input(i + 7, 0.5f);
        b[i] = input(i + 13, 0.2f);
    }
    char err[256] = "";
    CHECK(simt_run(blocks(N, 8), 256, 1, err, sizeof err, layernorm_forward_k, out, (uint16_t *)NULL, mean, rstd,
                   (const float *)inp, (const float *)w, (const float *)b, N, C) == 0,
          "%s", err);
    CHECK(simt_run(blocks(N, 8), 256, 2, err, sizeof err, layernorm_forward_k, (float *)NULL, out16, mean2, rstd2,
                   (const float *)inp, (const float *)w, (const float *)b, N, C) == 0,
          "%s", err);
    double worst = 0, top = 0;
    int bf16_off = 0;
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        double mu = 0, var = 0;
        for (int i = 0; i < C; i++) mu += x[i];
        mu /= C;
        for (int i = 0; i < C; i++) var += (x[i] - mu) * (x[i] - mu);
        double rs = 1.0 / sqrt(var / C + 1e-5);
        for (int i = 0; i < C; i++) {
            double y = (x[i] - mu) * rs * w[i] + b[i];
            worst = fmax(worst, fabs(out[(size_t)r * C + i] - y));
            top = fmax(top, fabs(y));
            bf16_off += out16[(size_t)r * C + i] != bf16_bits(out[(size_t)r * C + i]);
        }
        CHECK(mean[r] == mean2[r] && rstd[r] == rstd2[r], "row %d: mean/rstd differ between fp32 and bf16 outputs", r);
    }
    printf("  layernorm N %d C %d: rel err %.2g, %d bf16 outputs not the rounding of fp32's\n", N, C, worst / top,
           bf16_off);
    CHECK(worst / top <= 1e-5, "layernorm rel err %g", worst / top);
    CHECK(bf16_off == 0, "%d bf16 outputs differ", bf16_off);
    free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(mean2), free(rstd2), free(out16);
}

static void test_gelu_residual(void)
{
    size_t n = 1000;
    int N = 8, OC = 125;
    float *inp = (float *)malloc(n * 4), *out = (float *)calloc(n, 4), *bias = (float *)malloc(OC * 4);
    float *res = (float *)malloc(n * 4), *sum = (float *)calloc(n, 4);
    uint16_t *out16 = (uint16_t *)calloc(n, 2);
    for (size_t i = 0; i < n; i++) {
        inp[i] = input(i, 6.0f);
        res[i] = input(i + 3, 2.0f);
    }
    for (int i = 0; i < OC; i++) bias[i] = input(i + 5, 1.0f);
    char err[256] = "";
    CHECK(simt_run(blocks(n, 256), 256, 1, err, sizeof err, gelu_forward_k, out, (uint16_t *)NULL, (const float *)inp,
                   n) == 0,
          "%s", err);
    CHECK(simt_run(blocks(n, 256), 256, 1, err, sizeof err, gelu_forward_k, (float *)NULL, out16, (const float *)inp,
                   n) == 0,
          "%s", err);
    CHECK(simt_run(blocks(n, 256), 256, 1, err, sizeof err, bias_residual_k, sum, (const float *)bias,
                   (const float *)res, N, OC) == 0,
          "%s", err);
    double worst = 0, top = 0;
    int bf16_off = 0, sum_off = 0;
    for (size_t i = 0; i < n; i++) {
        double x = inp[i], y = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        worst = fmax(worst, fabs(out[i] - y));
        top = fmax(top, fabs(y));
        bf16_off += out16[i] != bf16_bits(out[i]);
        sum_off += sum[i] != bias[i % OC] + res[i];
    }
    printf("  gelu n %zu: rel err %.2g, %d bf16 outputs not the rounding of fp32's; bias + residual: %d wrong\n", n,
           worst / top, bf16_off, sum_off);
    CHECK(worst / top <= 1e-6, "gelu rel err %g", worst / top);
    CHECK(bf16_off == 0 && sum_off == 0, "gelu bf16 %d, bias + residual %d wrong", bf16_off, sum_off);
    free(inp), free(out), free(bias), free(res), free(sum), free(out16);
}

static void test_colsum(void)
{
    int N = 77, C = 70;
    size_t n = (size_t)N * C;
    float *d = (float *)malloc(n * 4), *inp = (float *)malloc(n * 4), *mean = (float *)malloc(N * 4);
    float *rstd = (float *)malloc(N * 4), *db[2], *dw = (float *)calloc(C, 4);
    uint16_t *d16 = (uint16_t *)calloc(n, 2);
    for (size_t i = 0; i < n; i++) {
        d[i] = input(i, 1.0f);
        inp[i] = input(i + 11, 2.0f);
    }
    for (int r = 0; r < N; r++) {
        mean[r] = input((size_t)r + 3, 0.5f);
        rstd[r] = 1.0f + input((size_t)r + 5, 0.5f);
    }
    char err[256] = "";
    simt_dim3 grid = blocks((size_t)C, 32), block = {32, 32, 1};
    for (int k = 0; k < 2; k++) { /* one chunk of all N rows: the sums themselves */
        db[k] = (float *)calloc(C, 4);
        CHECK(simt_run(grid, block, (unsigned)k + 1, err, sizeof err, colsum_k, db[k], (float *)NULL, d16,
                       (const float *)d, (const float *)NULL, (const float *)NULL, (const float *)NULL,
                       (const float *)NULL, N, C, N) == 0,
              "%s", err);
    }
    float *db2 = (float *)calloc(C, 4);
    CHECK(simt_run(grid, block, 3, err, sizeof err, colsum_k, db2, dw, (uint16_t *)NULL, (const float *)d,
                   (const float *)NULL, (const float *)inp, (const float *)mean, (const float *)rstd, N, C, N) == 0,
          "%s", err);
    /* three chunks of 26 rows (the last 25) summed apart, then in order: the launchers' way */
    int chunks = 3, rpc = (N + chunks - 1) / chunks;
    float *pb = (float *)calloc((size_t)chunks * C, 4), *pw = (float *)calloc((size_t)chunks * C, 4);
    float *cb = (float *)calloc(C, 4), *cw = (float *)calloc(C, 4);
    simt_dim3 cgrid = {grid.x, (unsigned)chunks, 1};
    CHECK(simt_run(cgrid, block, 4, err, sizeof err, colsum_k, pb, pw, (uint16_t *)NULL, (const float *)d,
                   (const float *)NULL, (const float *)inp, (const float *)mean, (const float *)rstd, N, C, rpc) == 0 &&
              simt_run(blocks((size_t)C, 256), simt_dim3{256, 1, 1}, 5, err, sizeof err, colsum_final_k, cb, cw,
                       (const float *)pb, (const float *)pw, chunks, C) == 0,
          "%s", err);
    double wb = 0, ww = 0, tb = 0, tw = 0;
    int off16 = 0;
    for (int c = 0; c < C; c++) {
        double sb = 0, sw = 0;
        for (int r = 0; r < N; r++) {
            size_t i = (size_t)r * C + c;
            sb += d[i];
            sw += ((double)inp[i] - mean[r]) * rstd[r] * d[i];
            off16 += d16[i] != bf16_bits(d[i]);
        }
        wb = fmax(wb, fmax(fabs(db[0][c] - sb), fabs(cb[c] - sb)));
        ww = fmax(ww, fmax(fabs(dw[c] - sw), fabs(cw[c] - sw)));
        tb = fmax(tb, fabs(sb));
        tw = fmax(tw, fabs(sw));
    }
    printf("  colsum N %d C %d, one chunk and three: bias rel err %.2g, weight rel err %.2g, %d bf16 copies wrong\n",
           N, C, wb / tb, ww / tw, off16);
    CHECK(wb / tb <= 1e-5 && ww / tw <= 1e-5, "colsum rel err %g, %g", wb / tb, ww / tw);
    CHECK(off16 == 0, "%d bf16 copies differ from the rounding of the values", off16);
    CHECK(memcmp(db[0], db[1], C * 4) == 0 && memcmp(db[0], db2, C * 4) == 0,
          "the column sums differ between interleavings or with the weight gradient on");
    /* the GELU's backward fused in (gelu_in: the fc layer's incoming gradient): the copies are exactly the
     * rounding of d * gelu_grad(inp), the sums match float64's of it */
    float *gb = (float *)calloc(C, 4);
    CHECK(simt_run(grid, block, 6, err, sizeof err, colsum_k, gb, (float *)NULL, d16, (const float *)d,
                   (const float *)inp, (const float *)NULL, (const float *)NULL, (const float *)NULL, N, C, N) == 0,
          "%s", err);
    double wg = 0, tg = 0;
    int offg = 0;
    for (int c = 0; c < C; c++) {
        double sg = 0;
        for (int r = 0; r < N; r++) {
            size_t i = (size_t)r * C + c;
            float g = gelu_grad(inp[i]) * d[i];
            sg += g;
            offg += d16[i] != bf16_bits(g);
        }
        wg = fmax(wg, fabs(gb[c] - sg));
        tg = fmax(tg, fabs(sg));
    }
    printf("  colsum with the GELU's backward: rel err %.2g, %d bf16 copies wrong\n", wg / tg, offg);
    CHECK(wg / tg <= 1e-5 && offg == 0, "colsum with gelu: rel err %g, %d copies wrong", wg / tg, offg);
    free(d), free(inp), free(mean), free(rstd), free(db[0]), free(db[1]), free(db2), free(dw), free(d16);
    free(pb), free(pw), free(cb), free(cw), free(gb);
}

int main(void)
{
    test_layernorm(19, 64);
    test_layernorm(19, 200);
    test_gelu_residual();
    test_colsum();
    return emu_finish("layernorm, gelu, bias + residual and column sums match float64; their bf16 outputs are the "
                      "fp32 ones rounded");
}
