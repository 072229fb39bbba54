/* test_loss_rows_emu: the bf16 GPT's two-pass cross-entropy (worker/cuda/loss_rows.cuh) on the CPU under
 * the lane emulator (tests/tools/simt_emu.h), with the launch shapes of l_loss_forward_rows and
 * l_loss_backward_bf16 (gpt_cuda_bf16.cu), against float64:
 *   - each row's loss within 1e-6 nats plus 4 fp32 roundings of its largest term (|max|, |x[target]|,
 *     log sum: 1e-5 when the logits reach 80), max exact, 1 / sum within 2e-6 relative;
 *   - each gradient element, bf16, within half a bf16 step (2^-8 relative) plus fp32 noise of the exact
 *     (softmax - onehot) / N, and equal to it where that is exact in bf16 (zero);
 *   - rows that stress the online softmax: a max that keeps growing (ascending values, the sum rescaled
 *     at every element), a max first, all values equal, a spread of 160 (exp underflows), the target at
 *     the max and at the min; V 77 (most of the 512 threads see no value: their -inf must merge away)
 *     and 1000; more rows than the backward grid's rows (its row loop);
 *   - rows padded as the model pads them (ld, a multiple of 64, past V): the padding, NaN in the logits,
 *     changes nothing, and the gradient's padding is left as it was;
 *   - two interleavings give the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_check.h"
#include "loss_rows.cuh"

static float value(int row, int i, int V)
{
    switch (row % 6) {
    case 0: return (float)((i * 7919) % 1013) / 1013.0f * 6.0f - 3.0f;
    case 1: return (float)i * 80.0f / (float)V;                       /* ascending: the max grows each time */
    case 2: return 80.0f - (float)i * 80.0f / (float)V;               /* descending */
    case 3: return 0.5f;                                              /* all equal */
    case 4: return (i % 2 ? 80.0f : -80.0f) + (float)(i % 13) * 0.1f; /* exp(-160) underflows */
    default: return (float)((i * 31) % 97) * 0.25f - 12.0f;
    }
}

#define PAD_MARK 0xabcd /* what the gradient's padding holds before and must hold after */

static void run_case(int N, int V, int ld)
{
    size_t NV = (size_t)N * ld;
    float *logits = (float *)malloc(NV * 4), *losses = (float *)calloc(N, 4), *stats = (float *)calloc(2 * N, 4);
    int *targets = (int *)malloc(N * sizeof(int));
    uint16_t *g16[2] = {(uint16_t *)malloc(NV * 2), (uint16_t *)malloc(NV * 2)};
    for (size_t i = 0; i < NV; i++) logits[i] = NAN, g16[0][i] = g16[1][i] = PAD_MARK;
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < V; i++) logits[(size_t)n * ld + i] = value(n, i, V);
        targets[n] = n % 3 == 0 ? V - 1 : n % 3 == 1 ? 0 : V / 2; /* the max, the min, the middle (row kinds) */
    }
    char err[256] = "";
    unsigned ny = N > 2 ? 2 : 1; /* fewer grid rows than rows: the kernel's row loop */
    for (unsigned seed = 1; seed <= 2; seed++) {
        int rc = simt_run(simt_dim3{(unsigned)N, 1, 1}, LOSS_ROW_THREADS, seed, err, sizeof err, loss_rows_k, losses,
                          stats, (const float *)logits, (const int *)targets, V, ld);
        rc = rc ? rc
                : simt_run(simt_dim3{(unsigned)(V + 255) / 256, ny, 1}, 256, seed, err, sizeof err, loss_grad_bf16_k,
                           g16[seed - 1], (const float *)logits, (const float *)stats, (const int *)targets, N, V, ld);
        CHECK(rc == 0, "N %d V %d: %s", N, V, err);
        if (rc) return;
    }
    int bad_grad = 0, pad_written = 0;
    double worst_loss = 0, worst_inv = 0;
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * ld;
        for (int i = V; i < ld; i++) pad_written += g16[0][(size_t)n * ld + i] != PAD_MARK;
        double m = -INFINITY, s = 0;
        for (int i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
        for (int i = 0; i < V; i++) s += exp((double)x[i] - m);
        double loss = log(s) + m - x[targets[n]];
        double scale = fmax(fmax(fabs(m), fabs((double)x[targets[n]])), log(s));
        worst_loss = fmax(worst_loss, fabs(losses[n] - loss) / (1e-6 + 4 * 6e-8 * scale));
        worst_inv = fmax(worst_inv, fabs(stats[2 * n + 1] * s - 1.0));
        CHECK(stats[2 * n] == (float)m, "row %d: max %g, expected %g", n, stats[2 * n], m);
        for (int i = 0; i < V; i++) {
            double g = (exp((double)x[i] - m) / s - (i == targets[n])) / N;
            double got = bf16_float(g16[0][(size_t)n * ld + i]);
            if (!(fabs(got - g) <= fabs(g) * (1.0 / 256 + 2e-6) + 1e-30)) {
                if (bad_grad < 3) printf("  row %d col %d: gradient %.9g, expected %.9g\n", n, i, got, g);
                bad_grad++;
            }
        }
    }
    printf("  N %d V %d ld %d: loss err %.2g of its bound, 1/sum rel err %.2g, %d of %zu gradients out of bounds\n", N,
           V, ld, worst_loss, worst_inv, bad_grad, (size_t)N * V);
    CHECK(worst_loss <= 1.0, "loss error %g of its bound", worst_loss);
    CHECK(worst_inv <= 2e-6, "1 / sum error %g", worst_inv);
    CHECK(bad_grad == 0, "%d gradients out of bounds", bad_grad);
    CHECK(pad_written == 0, "%d padding elements of the gradient written", pad_written);
    CHECK(memcmp(g16[0], g16[1], NV * 2) == 0, "two interleavings gave different gradients");
    free(logits), free(losses), free(stats), free(targets), free(g16[0]), free(g16[1]);
}

int main(void)
{
    run_case(6, 77, 77);
    run_case(7, 1000, 1000);
    run_case(6, 77, 128);
    run_case(5, 1000, 1024);
    return emu_finish("the two-pass cross-entropy matches float64: losses, row statistics and bf16 gradients");
}
